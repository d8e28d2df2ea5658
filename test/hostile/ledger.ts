// What the node promised, and the check that it kept it. Every 202 any family got is recorded
// (topic, partition, offset, and the payload when the input fixed it); after each family every
// partition of those topics is replayed from offset 0 and each recorded message must be there
// with its bytes (0 lost). Inputs that must never be stored (a partial body, a smuggled request,
// a request after Connection: close) leave a marker payload, and no stored message may equal one.

import { createHash } from "node:crypto";

const digest = (b: Buffer) => createHash("sha256").update(b).digest("hex");

interface Replayed {
  messages: { offset: number; payload_base64: string }[];
  next_offset: number;
  end_offset: number;
}

export class Ledger {
  /** topic → "partition/offset" → sha256 of the payload, or null when the input did not fix it. */
  private readonly accepted = new Map<string, Map<string, string | null>>();
  /** topic → sha256 of payloads that must never be stored → what sent it. */
  private readonly forbidden = new Map<string, Map<string, string>>();
  /** Forbidden payloads found already (each is reported once, by the family that stored it). */
  private readonly reported = new Set<string>();
  count = 0;

  constructor(
    private readonly url: string,
    private readonly auth: string | undefined,
  ) {}

  /** Records a 202 answer's body (single or batch) for `payloads` sent in request order. */
  record202(topic: string, body: Buffer | string, payloads?: Buffer[]): void {
    let parsed: { partition?: number; offset?: number; results?: { partition: number; offset: number }[] };
    try {
      parsed = JSON.parse(body.toString());
    } catch {
      return; // a 202 without its JSON is judged as a wrong answer by the family
    }
    const results = parsed.results ?? [{ partition: parsed.partition!, offset: parsed.offset! }];
    const m = this.accepted.get(topic) ?? new Map<string, string | null>();
    this.accepted.set(topic, m);
    results.forEach((r, i) => {
      const p = payloads?.[i];
      m.set(`${r.partition}/${r.offset}`, p === undefined ? null : digest(p));
      this.count++;
    });
  }

  /** `payload` must never be stored in `topic`. */
  forbid(topic: string, payload: Buffer | string, what: string): void {
    const m = this.forbidden.get(topic) ?? new Map<string, string>();
    this.forbidden.set(topic, m);
    m.set(digest(Buffer.from(payload)), what);
  }

  /** Watches `topic` for forbidden payloads even if nothing was accepted there. */
  watch(topic: string): void {
    if (!this.accepted.has(topic)) this.accepted.set(topic, new Map());
  }

  /** Replays every watched topic: the lost 202s and the stored forbidden payloads. */
  async verify(): Promise<{ lost: string[]; phantoms: string[]; checked: number }> {
    const lost: string[] = [];
    const phantoms: string[] = [];
    let checked = 0;
    for (const [topic, want] of this.accepted) {
      const t = await this.get(`/v1/topics/${topic}`);
      if (t.status !== 200) {
        if (want.size > 0) lost.push(`topic ${topic}: GET answered ${t.status} (${want.size} accepted messages)`);
        continue;
      }
      const partitions = ((await t.json()) as { partitions: number }).partitions;
      const seen = new Map<string, string>();
      const forb = this.forbidden.get(topic);
      for (let p = 0; p < partitions; p++) {
        let offset = 0;
        for (let page = 0; page < 100_000; page++) {
          const r = await this.get(`/v1/topics/${topic}/partitions/${p}/messages?offset=${offset}&limit=1000`);
          if (r.status !== 200) {
            lost.push(`topic ${topic} partition ${p}: replay answered ${r.status}`);
            break;
          }
          const body = (await r.json()) as Replayed;
          for (const m of body.messages) {
            const d = digest(Buffer.from(m.payload_base64, "base64"));
            seen.set(`${p}/${m.offset}`, d);
            const what = forb?.get(d);
            const at = `${topic} ${p}/${m.offset}`;
            if (what !== undefined && !this.reported.has(at)) {
              this.reported.add(at);
              phantoms.push(`${at}: ${what}`);
            }
          }
          if (body.messages.length === 0 || body.next_offset >= body.end_offset) break;
          offset = body.next_offset;
        }
      }
      for (const [at, d] of want) {
        checked++;
        const got = seen.get(at);
        if (got === undefined) lost.push(`${topic} ${at}: answered 202, not in the replay`);
        else if (d !== null && got !== d) lost.push(`${topic} ${at}: answered 202, replay serves other bytes`);
      }
    }
    return { lost, phantoms, checked };
  }

  private get(path: string): Promise<Response> {
    return fetch(this.url + path, { headers: this.auth === undefined ? {} : { authorization: this.auth } });
  }
}
