// Merges concurrent forwards that go the same way into one request (what Kafka's producer does
// with its batches, without the linger): per key (owner, topic, partition, credentials), at most
// `inFlightMax` requests are on the wire; calls that arrive meanwhile queue and leave together as
// the next request, up to `itemsMax` items and `bytesMax` bytes. An idle key sends at once, so a
// lone request pays no delay; under load one hop carries many requests, and the owner parses one
// HTTP request and runs one append for them all.
//
// Every call gets its own answer (send returns one per item, in order) or the request's error:
// the merged request succeeds or fails as one, which is what each call would have seen alone.
// Limits: at most `queuedMax` calls wait per key; past it a call is refused (the caller's
// `overflow` error, a definite 429).

export interface CoalesceOptions {
  inFlightMax: number;
  itemsMax: number;
  bytesMax: number;
  queuedMax: number;
}

interface Waiting<I, R> {
  item: I;
  size: number;
  resolve: (r: R) => void;
  reject: (e: unknown) => void;
}

interface KeyState<I, R> {
  queue: Waiting<I, R>[];
  inFlight: number;
}

export class Coalescer<I, R> {
  private readonly keys = new Map<string, KeyState<I, R>>();

  constructor(
    private readonly o: CoalesceOptions,
    /** Sends the items as one request; resolves with one result per item, in order. */
    private readonly send: (key: string, items: I[]) => Promise<R[]>,
    private readonly sizeOf: (item: I) => number,
    private readonly overflow: () => Error,
  ) {}

  submit(key: string, item: I): Promise<R> {
    let st = this.keys.get(key);
    if (st === undefined) {
      st = { queue: [], inFlight: 0 };
      this.keys.set(key, st);
    }
    if (st.queue.length >= this.o.queuedMax) return Promise.reject(this.overflow());
    const p = new Promise<R>((resolve, reject) => st!.queue.push({ item, size: this.sizeOf(item), resolve, reject }));
    this.pump(key, st);
    return p;
  }

  private pump(key: string, st: KeyState<I, R>): void {
    while (st.inFlight < this.o.inFlightMax && st.queue.length > 0) {
      const batch: Waiting<I, R>[] = [];
      let bytes = 0;
      while (st.queue.length > 0 && batch.length < this.o.itemsMax) {
        const next = st.queue[0]!;
        if (batch.length > 0 && bytes + next.size > this.o.bytesMax) break;
        batch.push(st.queue.shift()!);
        bytes += next.size;
      }
      st.inFlight++;
      void Promise.resolve()
        .then(() => this.send(key, batch.map((w) => w.item)))
        .then(
        (rs) => batch.forEach((w, i) => w.resolve(rs[i]!)),
        (e: unknown) => batch.forEach((w) => w.reject(e)),
      ).finally(() => {
        st.inFlight--;
        if (st.queue.length > 0) this.pump(key, st);
        else if (st.inFlight === 0) this.keys.delete(key);
      });
    }
  }
}
