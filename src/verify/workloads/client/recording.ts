// A recording SDK client: the `Narad` a client scenario's consumer runs, with every request its
// loops make recorded in the history (Jepsen's thin client wrapper).
//
// Design note. process() and messages() call the client's own consume, consumeBatch, ack, nack,
// extend and ackBatch, so a subclass that records around those methods sees every request the
// loops send, retries included, without a line of the loops changing: the run judges the loops
// users import. Each request is recorded as history v1 operations, invoked before the request
// leaves and completed after its answer was read (so each recorded interval contains the real
// one), on process names taken from a pool per lane (`L`, `L/1`, `L/2`, …: a process has one
// operation at a time, and a consume carrying an ack, or a batch, is several at once):
//   - consume with `ack=H`: an ack and a consume, as the workloads' lanes record them (ops.ts);
//   - consumeBatch of up to N: N consumes, invoked together; the first k complete with the k
//     messages, the rest with `{msg: null}` (the broker had no more then); a failure makes all N
//     ambiguous;
//   - ackBatch: one ack, extend or nack per handle, each with the status the node gave it.
// Outcomes come from failureOutcome (ops.ts): `fail` only for a definite answer of the error table.

import { Narad, NaradGoneError, type ConsumeBatchOptions, type ConsumeOptions, type Message, type NaradOptions } from "../../../client/index.js";
import type { AckStatus } from "../../../client/index.js";
import { Lane, answerOutcome, decodePayload, failureOutcome } from "../ops.js";
import type { HistoryWriter } from "../../history/writer.js";

/** Handles remembered for naming the message of an ack (a bounded map: the oldest go first). */
const HANDLES_MAX = 100_000;

export class RecordingNarad extends Narad {
  readonly #w: HistoryWriter;
  readonly #lane: string;
  readonly #free: string[] = [];
  #made = 0;
  readonly #msgOf = new Map<string, string>();
  readonly #nowNs: () => number;
  /** When the request that leased each handle was sent (its lease may have begun then). */
  readonly #leasedNs = new Map<string, number>();
  /** Handles leased and not yet settled by a 204 (bounded as #msgOf is). */
  readonly #open = new Set<string>();
  /** Told of every message a consume or batch leased (the application's view is the runner's). */
  onLeased: ((m: Message, msg: string) => void) | null = null;

  constructor(opts: NaradOptions, writer: HistoryWriter, lane: string, nowNs: () => number) {
    super(opts);
    this.#w = writer;
    this.#lane = lane;
    this.#nowNs = nowNs;
  }

  /** Leases this client took whose ack or nack was never answered 204. */
  unsettled(): number {
    return this.#open.size;
  }

  /** When the request that leased this handle was sent, on the run clock (undefined: unknown). */
  leasedSinceNs(handle: string): number | undefined {
    return this.#leasedNs.get(handle);
  }

  #take(): string {
    return this.#free.pop() ?? (this.#made++ === 0 ? this.#lane : `${this.#lane}/${this.#made - 1}`);
  }

  #give(p: string): void {
    this.#free.push(p);
  }

  #remember(m: Message, sentNs: number): string {
    const msg = decodePayload(m.payload);
    if (this.#msgOf.size >= HANDLES_MAX) {
      const oldest = this.#msgOf.keys().next().value!;
      this.#msgOf.delete(oldest);
      this.#leasedNs.delete(oldest);
    }
    this.#msgOf.set(m.receiptHandle, msg);
    this.#leasedNs.set(m.receiptHandle, sentNs);
    if (this.#open.size < HANDLES_MAX) this.#open.add(m.receiptHandle);
    this.onLeased?.(m, msg);
    return msg;
  }

  #msg(handle: string): string {
    return this.#msgOf.get(handle) ?? "?unknown-handle";
  }

  override async consume(topic: string, opts: ConsumeOptions = {}): Promise<Message | null> {
    const ack = opts.ack;
    const pa = ack !== undefined ? this.#take() : null;
    const pc = this.#take();
    if (pa !== null) this.#w.invoke(pa, "ack", { topic, msg: this.#msg(ack!), delivery: ack! });
    const sentNs = this.#nowNs();
    this.#w.invoke(pc, "consume", { topic });
    try {
      const m = await super.consume(topic, opts);
      if (pa !== null) {
        this.#w.complete(pa, "ok", { status: 204 });
        this.#open.delete(ack!);
      }
      const c = Lane.consumeAnswer(topic, m);
      if (m !== null && c.delivery !== null) this.#remember(m, sentNs);
      this.#w.complete(pc, c.type, c.value);
      return m;
    } catch (e) {
      const out = failureOutcome(e);
      if (pa !== null) this.#w.complete(pa, out.type, out.value);
      // A refused ack (410) leased nothing, for certain; otherwise the consume shares its fate.
      if (pa !== null && e instanceof NaradGoneError) this.#w.complete(pc, "fail", { status: 410 });
      else this.#w.complete(pc, out.type, out.value);
      throw e;
    } finally {
      if (pa !== null) this.#give(pa);
      this.#give(pc);
    }
  }

  override async consumeBatch(topic: string, opts: ConsumeBatchOptions = {}): Promise<Message[]> {
    const n = opts.maxMessages ?? 10;
    const ps = Array.from({ length: n }, () => this.#take());
    const sentNs = this.#nowNs();
    for (const p of ps) this.#w.invoke(p, "consume", { topic });
    return this.#many(ps, () => super.consumeBatch(topic, opts), (p, i, ms) => {
      const m = ms[i];
      const c = Lane.consumeAnswer(topic, m ?? null);
      if (m !== undefined && c.delivery !== null) this.#remember(m, sentNs);
      this.#w.complete(p, c.type, c.value);
    });
  }

  /**
   * One request that answers for the operations of processes `ps`: `each` completes each from the
   * answer; a failure completes them all with its outcome. The processes are given back after.
   */
  async #many<T>(ps: string[], send: () => Promise<T>, each: (p: string, i: number, answer: T) => void): Promise<T> {
    try {
      const answer = await send();
      ps.forEach((p, i) => each(p, i, answer));
      return answer;
    } catch (e) {
      const out = failureOutcome(e);
      for (const p of ps) this.#w.complete(p, out.type, out.value);
      throw e;
    } finally {
      for (const p of ps.reverse()) this.#give(p);
    }
  }

  async #settle(f: "ack" | "extend" | "nack", topic: string, handle: string, send: () => Promise<void>): Promise<void> {
    const p = this.#take();
    this.#w.invoke(p, f, { topic, msg: this.#msg(handle), delivery: handle });
    try {
      await send();
      this.#w.complete(p, "ok", { status: 204 });
      if (f !== "extend") this.#open.delete(handle);
    } catch (e) {
      const out = failureOutcome(e);
      this.#w.complete(p, out.type, out.value);
      throw e;
    } finally {
      this.#give(p);
    }
  }

  override ack(topic: string, receiptHandle: string): Promise<void> {
    return this.#settle("ack", topic, receiptHandle, () => super.ack(topic, receiptHandle));
  }

  override extend(topic: string, receiptHandle: string): Promise<void> {
    return this.#settle("extend", topic, receiptHandle, () => super.extend(topic, receiptHandle));
  }

  override nack(topic: string, receiptHandle: string): Promise<void> {
    return this.#settle("nack", topic, receiptHandle, () => super.nack(topic, receiptHandle));
  }

  override async ackBatch(topic: string, receiptHandles: readonly string[], opts: { extend?: boolean | 0; deadLetter?: boolean } = {}): Promise<AckStatus[]> {
    if (opts.deadLetter === true) return super.ackBatch(topic, receiptHandles, opts);
    const f = opts.extend === 0 ? "nack" : opts.extend === true ? "extend" : "ack";
    const ps = receiptHandles.map((h) => {
      const p = this.#take();
      this.#w.invoke(p, f, { topic, msg: this.#msg(h), delivery: h });
      return p;
    });
    return this.#many(ps, () => super.ackBatch(topic, receiptHandles, opts), (p, i, res) => {
      const s = res[i]?.status;
      if (s === 204) {
        this.#w.complete(p, "ok", { status: 204 });
        if (f !== "extend") this.#open.delete(receiptHandles[i]!);
      } else if (s === undefined) this.#w.complete(p, "info", { error: "no status for this handle" });
      else {
        const out = answerOutcome(s, res[i]!.error);
        this.#w.complete(p, out.type, out.value);
      }
    });
  }
}
