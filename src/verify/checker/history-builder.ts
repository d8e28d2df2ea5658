// Hand-written histories for tests: operations are given with their invoke and completion times
// in milliseconds, in any order, and `build` sorts the lines by time and numbers them, so a test
// reads like a timeline and still produces a well-formed v1 history. Not used by the checker.

import type { ConfigValue, EventType, HistoryEvent, OpName } from "../history/types.js";

export type Outcome = "ok" | "fail" | "info" | "open";

interface PendingLine {
  timeNs: number;
  seq: number;
  process: string;
  type: EventType;
  f: OpName;
  value: Record<string, unknown>;
  ref: number;
}

export interface BuiltHistory {
  events: HistoryEvent[];
  text: string;
  /** The invoke line index of an operation the builder returned. */
  index(ref: number): number;
}

export interface ConsumeOpts {
  node?: string;
  boot?: string;
  partition?: number;
  offset?: number;
  deliveryCount?: number;
  /** A delivery on a dead-letter topic: where it came from. */
  origin?: { topic: string; partition: number; offset: number; deliveries: number };
}

export function defaultConfig(over: Partial<ConfigValue> = {}): ConfigValue {
  return {
    ack_flush_ms: 100,
    ack_sync_ms: 1000,
    visibility_timeout_ms: 30_000,
    topics: { t: { partitions: 1 } },
    children: {},
    ...over,
  };
}

export class HistoryBuilder {
  private readonly lines: PendingLine[] = [];
  private refs = 0;
  private seq = 0;
  private readonly offsets = new Map<string, number>();
  readonly config: ConfigValue;

  constructor(config: Partial<ConfigValue> = {}) {
    this.config = defaultConfig(config);
  }

  /** Any operation. `compMs` null or outcome "open": never completes. */
  op(
    process: string,
    f: Exclude<OpName, "config">,
    invokeValue: Record<string, unknown>,
    invMs: number,
    compMs: number | null,
    outcome: Outcome = "ok",
    compValue: Record<string, unknown> = {},
  ): number {
    const ref = this.refs++;
    const base = this.seq;
    this.seq += 2;
    this.lines.push({ timeNs: Math.round(invMs * 1e6), seq: base, process, type: "invoke", f, value: invokeValue, ref });
    if (compMs !== null && outcome !== "open") {
      this.lines.push({ timeNs: Math.round(compMs * 1e6), seq: base + 1, process, type: outcome, f, value: compValue, ref: -1 });
    }
    return ref;
  }

  /** `owner`: the node and boot the ok names as the partition's owner (left out when not given). */
  produce(
    process: string,
    topic: string,
    msg: string,
    invMs: number,
    compMs: number | null,
    outcome: Outcome | 429 | 503 = "ok",
    partition = 0,
    owner?: { node: string; boot: string },
  ): number {
    if (outcome === 429 || outcome === 503) return this.op(process, "produce", { topic, msg }, invMs, compMs, "fail", { status: outcome });
    if (outcome === "ok") {
      const key = `${topic}/${partition}`;
      const offset = this.offsets.get(key) ?? 0;
      this.offsets.set(key, offset + 1);
      return this.op(process, "produce", { topic, msg }, invMs, compMs, "ok", { partition, offset, status: 202, ...owner });
    }
    if (outcome === "fail") return this.op(process, "produce", { topic, msg }, invMs, compMs, "fail", { status: 503 });
    return this.op(process, "produce", { topic, msg }, invMs, compMs, outcome, { error: "timeout" });
  }

  consume(process: string, topic: string, msg: string, delivery: string, invMs: number, compMs: number, o: ConsumeOpts = {}): number {
    return this.op(process, "consume", { topic }, invMs, compMs, "ok", {
      topic,
      msg,
      partition: o.partition ?? 0,
      offset: o.offset ?? 0,
      delivery,
      delivery_count: o.deliveryCount ?? 1,
      node: o.node ?? "n1",
      boot: o.boot ?? "b1",
      ...(o.origin !== undefined ? { origin: o.origin } : {}),
    });
  }

  /**
   * An idempotent produce (or a re-send of one): the invoke carries producer and sequence. "ok"
   * stores it at `at` (partition and offset, default the next offset of partition 0), and
   * `duplicate` adds `duplicate: true` to the ok; "info" is an ambiguous answer.
   */
  idempotentProduce(
    process: string,
    topic: string,
    msg: string,
    producer: string,
    sequence: number,
    invMs: number,
    compMs: number | null,
    outcome: "ok" | "info" | "fail" | "open" = "ok",
    at?: { partition: number; offset: number; duplicate?: boolean },
  ): number {
    const v = { topic, msg, producer, sequence };
    if (outcome !== "ok") return this.op(process, "produce", v, invMs, compMs, outcome, outcome === "fail" ? { status: 409, error: "sequence_out_of_window" } : { error: "timeout" });
    const partition = at?.partition ?? 0;
    let offset = at?.offset;
    if (offset === undefined) {
      const key = `${topic}/${partition}`;
      offset = this.offsets.get(key) ?? 0;
      this.offsets.set(key, offset + 1);
    }
    const ok: Record<string, unknown> = { partition, offset, status: 202 };
    if (at?.duplicate === true) ok["duplicate"] = true;
    return this.op(process, "produce", v, invMs, compMs, "ok", ok);
  }

  /** An ack with dead_letter=true; outcome as for `handle`. */
  deadLetter(process: string, topic: string, msg: string, delivery: string, invMs: number, compMs: number | null, outcome: Outcome | 410 = "ok"): number {
    return this.handle("dead-letter", process, topic, msg, delivery, invMs, compMs, outcome);
  }

  empty(process: string, topic: string, invMs: number, compMs: number): number {
    return this.op(process, "consume", { topic }, invMs, compMs, "ok", { topic, msg: null });
  }

  /** ack / extend / nack / dead-letter; outcome "ok" is a 204, 410 an info with status 410, "info" an error. */
  handle(
    f: "ack" | "extend" | "nack" | "dead-letter",
    process: string,
    topic: string,
    msg: string,
    delivery: string,
    invMs: number,
    compMs: number | null,
    outcome: Outcome | 410 = "ok",
  ): number {
    const v = { topic, msg, delivery };
    if (outcome === 410) return this.op(process, f, v, invMs, compMs, "info", { status: 410 });
    if (outcome === "ok") return this.op(process, f, v, invMs, compMs, "ok", { status: 204 });
    if (outcome === "fail") return this.op(process, f, v, invMs, compMs, "fail", { status: 400 });
    return this.op(process, f, v, invMs, compMs, outcome, { error: "socket hang up" });
  }

  ack(process: string, topic: string, msg: string, delivery: string, invMs: number, compMs: number | null, outcome: Outcome | 410 = "ok"): number {
    return this.handle("ack", process, topic, msg, delivery, invMs, compMs, outcome);
  }

  fault(kind: string, invMs: number, compMs: number | null, value: Record<string, unknown> = {}, outcome: Outcome = "ok", okValue: Record<string, unknown> = {}): number {
    return this.op("nemesis", "fault", { kind, ...value }, invMs, compMs, outcome, { kind, ...value, ...okValue });
  }

  replay(process: string, topic: string, partition: number, offset: number, invMs: number, compMs: number, msgs: Array<[number, string]>): number {
    return this.op(process, "replay", { topic, partition, offset }, invMs, compMs, "ok", { msgs });
  }

  build(): BuiltHistory {
    const sorted = [...this.lines].sort((a, b) => a.timeNs - b.timeNs || a.seq - b.seq);
    const events: HistoryEvent[] = [{ index: 0, time_ns: 0, process: "driver", type: "ok", f: "config", value: this.config as unknown as Record<string, unknown> }];
    const indexOf = new Map<number, number>();
    for (const l of sorted) {
      const index = events.length;
      if (l.ref >= 0) indexOf.set(l.ref, index);
      events.push({ index, time_ns: l.timeNs, process: l.process, type: l.type, f: l.f, value: l.value });
    }
    return {
      events,
      text: events.map((e) => JSON.stringify(e)).join("\n") + "\n",
      index(ref: number): number {
        const i = indexOf.get(ref);
        if (i === undefined) throw new Error(`no operation ${ref}`);
        return i;
      },
    };
  }
}
