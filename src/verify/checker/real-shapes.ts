// Histories in the recorder's layout, shaped like those of real runs, for the checker's tests and
// its corpus (bench/checker-corpus.ts). Not used by the checker.
//
// The simulation (simulate.ts) has few messages per byte of history; real runs have many more
// (a message's six lines and little else), and real lines carry what the simulation's do not:
// keys, owners' boots, idempotent producers and re-sends, dead-letter acks and origins, replays'
// offsets, faults with their evidence. The faster checker once judged real runs wrongly on
// exactly that difference (its interner, sized from the file's length, lost every message id
// past its first guess), so these histories are long enough to pass that guess.

const MS = 1_000_000;

/** Lines in the recorder's layout (src/verify/history/writer.ts), one millisecond apart. */
export class Lines {
  private readonly out: string[] = [];
  private ns = 1_000 * MS;
  constructor(config: Record<string, unknown>) {
    this.add("driver", "ok", "config", config);
  }
  add(process: string, type: string, f: string, value: unknown): number {
    const index = this.out.length;
    this.ns += MS;
    this.out.push(`{"index":${index},"time_ns":${this.ns},"process":${JSON.stringify(process)},"type":"${type}","f":"${f}","value":${JSON.stringify(value)}}`);
    return index;
  }
  op(process: string, f: string, invoke: unknown, type: string, result: unknown): number {
    const i = this.add(process, "invoke", f, invoke);
    this.add(process, type, f, result);
    return i;
  }
  text(): string {
    return this.out.join("\n") + "\n";
  }
}

const CLUSTER_CONFIG = {
  ack_flush_ms: 100,
  ack_sync_ms: 1000,
  visibility_timeout_ms: 3000,
  topics: { t: { partitions: 3, visibility_timeout_ms: 3000, replication_factor: 3, acks: "quorum" } },
  replication_lag_ms: 1000,
  replication_rejoin_ms: 3000,
  node_lease_ms: 1500,
  children: {},
  run: { workload: "failover", seed: 2, duration_s: 12, rate: 150, nodes: 3, security: true, bugs: [], power_loss_mode: true, proxy: false, replication_factor: 3, acks: "quorum" },
};

const DEAD_LETTER_CONFIG = {
  ack_flush_ms: 100,
  ack_sync_ms: 1000,
  visibility_timeout_ms: 2000,
  topics: { t: { partitions: 3, visibility_timeout_ms: 2000, max_deliveries: 2, dead_letter_topic: "t.dlq" }, "t.dlq": { partitions: 3, visibility_timeout_ms: 2000 } },
  children: {},
  run: { workload: "dead-letters", seed: 5, duration_s: 15, rate: 200, nodes: 1, security: false, bugs: [], proxy: false },
};

const BOOTS: Record<string, string[]> = { n1: ["9042b8d8cbfda820", "5a1c0e77d2b94f13"], n2: ["41e3645766d5626d"], n3: ["d11e7dba776fcacd"] };

export interface RunShape {
  messages: number;
  /** Idempotent produces: producer and sequence on every invoke, some re-sent (duplicate: true). */
  idempotent?: boolean;
  /** Leave out the delivery and ack of this message (the checker must call it lost, by name). */
  dropDelivery?: number;
  /** Store this idempotent message a second time at another offset (duplicate-produce). */
  storeTwice?: number;
}

/**
 * A three-node run on a replicated topic: keyed and unkeyed produces spread over three owners,
 * each message consumed and acked (every seventh nacked first and delivered again), a 410 on a
 * late ack now and then, owner refusals, a kill of n1 with its restart (a new boot: evidence), a
 * cut of n3 with proxy counters, a replay per hundred messages, and the final drain.
 */
export function clusterRun(shape: RunShape): { text: string; msg: (i: number) => string } {
  const h = new Lines(CLUSTER_CONFIG);
  const msg = (i: number): string => `m-p${(i % 3) + 1}-${Math.floor(i / 3)}`;
  const nextOffset = [0, 0, 0];
  const stored: Array<Array<[number, string]>> = [[], [], []];
  let boot1 = 0;
  let handle = 0;
  const delivery = (): string => `AwABAAAAAQAAAAAAAAAB${(handle++).toString(36).padStart(6, "0")}RRwmOXVXmUjQZw-Jg`;
  for (let i = 0; i < shape.messages; i++) {
    const p = `p${(i % 3) + 1}`;
    const partition = i % 3;
    const node = `n${partition + 1}`;
    const boot = (): string => BOOTS[node]![node === "n1" ? boot1 : 0]!;
    const invoke: Record<string, unknown> = { topic: "t", msg: msg(i) };
    if (i % 2 === 1) invoke["key"] = `k${i % 11}`;
    if (shape.idempotent === true) Object.assign(invoke, { producer: `63767a29eb02a0fdab1db1248c00d79${i % 3}`, sequence: Math.floor(i / 3) });
    if (i % 97 === 5) h.op(p, "produce", invoke, "fail", { status: 503, error: "not_owner" });
    const offset = nextOffset[partition]!++;
    stored[partition]!.push([offset, msg(i)]);
    h.op(p, "produce", invoke, "ok", { partition, offset, status: 202, node, boot: boot() });
    if (shape.idempotent === true && i % 13 === 0) {
      // A re-send after a lost answer: the broker recognises the sequence.
      h.op(p, "produce", invoke, "ok", { partition, offset, status: 202, duplicate: true, node, boot: boot() });
    }
    if (shape.storeTwice === i) {
      const again = nextOffset[partition]!++;
      stored[partition]!.push([again, msg(i)]);
      h.op(p, "produce", invoke, "ok", { partition, offset: again, status: 202, node, boot: boot() });
    }
    if (shape.dropDelivery === i) continue;
    const c = `p${(i % 5) + 4}`;
    let count = 1;
    if (i % 7 === 3) {
      const d = delivery();
      h.op(c, "consume", { topic: "t" }, "ok", { topic: "t", msg: msg(i), partition, offset, delivery: d, node, boot: boot(), delivery_count: count++ });
      h.op(c, "nack", { topic: "t", msg: msg(i), delivery: d }, "ok", { status: 204 });
    }
    const d = delivery();
    h.op(c, "consume", { topic: "t" }, "ok", { topic: "t", msg: msg(i), partition, offset, delivery: d, node, boot: boot(), delivery_count: count });
    h.op(`${c}/ack`, "ack", { topic: "t", msg: msg(i), delivery: d }, "ok", { status: 204 });
    if (i % 31 === 0) h.op(`${c}/ack`, "ack", { topic: "t", msg: msg(i), delivery: d }, "info", { status: 410 });
    if (i % 53 === 0) h.op(c, "consume", { topic: "t" }, "fail", { status: 503, error: "not_owner" });
    if (i % 100 === 99) {
      const part = Math.floor(i / 100) % 3;
      const from = Math.max(0, nextOffset[part]! - 4);
      h.op("p8", "replay", { topic: "t", partition: part, offset: from, limit: 50 }, "ok", {
        msgs: stored[part]!.filter(([o]) => o >= from),
        next_offset: nextOffset[part],
        end_offset: nextOffset[part],
        earliest_offset: 0,
      });
    }
    if (i === Math.floor(shape.messages / 2)) {
      h.op("nemesis", "fault", { kind: "kill", node: "n1" }, "ok", {
        kind: "kill",
        node: "n1",
        pid: 6171,
        exit_code: null,
        signal: "SIGKILL",
        duration_ms: 38,
        sigkill_needed: true,
        killed_boot: BOOTS["n1"]![0],
        power_loss_mode: true,
      });
      h.op("p1", "produce", { topic: "t", msg: "m-refused", key: "k1" }, "info", { error: "connection_failed (ECONNREFUSED): produce: cannot connect (connect ECONNREFUSED 127.0.0.1:45637); the request was not sent" });
      boot1 = 1;
      h.op("nemesis", "fault", { kind: "start", node: "n1" }, "ok", { kind: "start", node: "n1", pid: 6452, boot: BOOTS["n1"]![1], port: 45637, ready_ms: 3494, attempts: 1 });
    }
    if (i === Math.floor(shape.messages / 4)) {
      const counters = { connections_accepted: 13, connections_active: 13, connections_held: 0, connections_reset: 2, connections_dropped: 0, connections_refused: 0 };
      h.op("nemesis", "fault", { kind: "cut", node: "n3", lines: ["peer"], to: ["n1"] }, "ok", { kind: "cut", node: "n3", lines: ["peer"], to: ["n1"], proxy: { peers_out: { n1: counters } } });
      h.op("nemesis", "fault", { kind: "heal", node: "n3" }, "ok", { kind: "heal", node: "n3", proxy: { peers_out: { n1: counters } } });
    }
  }
  h.op("p4", "consume", { topic: "t" }, "ok", { topic: "t", msg: null });
  return { text: h.text(), msg };
}

/**
 * A dead-letter run: max_deliveries 2 on t; every fifth message is nacked twice (moved by the
 * count) and every seventh dead-lettered by a `dead-letter` ack, each then delivered on t.dlq
 * with its origin; the rest are acked. `early`: one message shows up on t.dlq after a single
 * delivery and no dead-letter ack (dead-lettered-early).
 */
export function deadLetterRun(messages: number, early?: number): string {
  const h = new Lines(DEAD_LETTER_CONFIG);
  const msg = (i: number): string => `m-p${(i % 3) + 1}-${Math.floor(i / 3)}`;
  const nextOffset = [0, 0, 0];
  const dlqOffset = [0, 0, 0];
  let handle = 0;
  const delivery = (): string => `AwAAAAAAAQAAAAAAAAAA${(handle++).toString(36).padStart(6, "0")}fPPf5HwXo-tJp-_iQ`;
  const boot = "1cfbddee5b9ea388";
  for (let i = 0; i < messages; i++) {
    const partition = i % 3;
    const invoke: Record<string, unknown> = { topic: "t", msg: msg(i) };
    if (i % 2 === 0) invoke["key"] = `k${i % 7}`;
    const offset = nextOffset[partition]!++;
    h.op(`p${(i % 3) + 1}`, "produce", invoke, "ok", { partition, offset, status: 202, node: "n1", boot });
    const c = `p${(i % 4) + 4}`;
    const deliver = (n: number): string => {
      const d = delivery();
      h.op(c, "consume", { topic: "t" }, "ok", { topic: "t", msg: msg(i), partition, offset, delivery: d, node: "n1", boot, delivery_count: n });
      return d;
    };
    let moved = 0;
    if (i === early) {
      deliver(1);
      moved = 1;
    } else if (i % 5 === 0) {
      h.op(c, "nack", { topic: "t", msg: msg(i), delivery: deliver(1) }, "ok", { status: 204 });
      h.op(c, "nack", { topic: "t", msg: msg(i), delivery: deliver(2) }, "ok", { status: 204 });
      moved = 2;
    } else if (i % 7 === 0) {
      h.op(c, "dead-letter", { topic: "t", msg: msg(i), delivery: deliver(1) }, "ok", { status: 204 });
      moved = 1;
    } else {
      h.op(`${c}/ack`, "ack", { topic: "t", msg: msg(i), delivery: deliver(1) }, "ok", { status: 204 });
    }
    if (moved > 0) {
      const d = delivery();
      const at = dlqOffset[partition]!++;
      h.op("p8", "consume", { topic: "t.dlq" }, "ok", {
        topic: "t.dlq",
        msg: msg(i),
        partition,
        offset: at,
        delivery: d,
        node: "n1",
        boot,
        delivery_count: 1,
        origin: { topic: "t", partition, offset, deliveries: moved },
      });
      h.op("p8", "ack", { topic: "t.dlq", msg: msg(i), delivery: d }, "ok", { status: 204 });
    }
  }
  h.op("p4", "consume", { topic: "t" }, "ok", { topic: "t", msg: null });
  h.op("p8", "consume", { topic: "t.dlq" }, "ok", { topic: "t.dlq", msg: null });
  return h.text();
}

/**
 * The history with its config line padded (a `pad` in its `run`) to a length at which the
 * Collector's first guesses are fractional with odd key tables (the file's bytes / 220
 * operations, one message in eight, one delivery in three): the sizes that broke the interner,
 * so that the test does not hang on the luck of a length.
 */
export function paddedToOddGuesses(text: string): string {
  for (let k = 0; ; k++) {
    const ops = Math.ceil((text.length + k + '"pad":"",'.length) / 220);
    if (ops % 24 !== 5) continue;
    // Below 1024 names the interner takes its minimum size, a whole number.
    if (ops / 8 <= 1024) throw new Error(`a history of ${text.length} bytes is too short to pass the first guess`);
    return text.replace('"run":{', `"run":{"pad":"${"x".repeat(k)}",`);
  }
}

/**
 * A stream-model run (SPEC.md "The stream model") in the recorder's layout: n publishes, each
 * acknowledged and pushed to consumer c0, a cut with its client events after the 2000th, the
 * drain; the delivery of seq `missing` is left out (a skip).
 */
export function streamRun(n: number, missing: number): string {
  const h = new Lines({ model: "stream", stream: "S", system: "nats", client: "nats@2.29.3", api: "ordered", run: { scenario: "cut-3", seed: 1 } });
  for (let i = 1; i <= n; i++) {
    h.op("p0", "publish", { stream: "S", msg: `m${i}` }, "ok", { seq: i });
    if (i === 2000) {
      h.op("nemesis", "fault", { kind: "cut", mode: "reset" }, "ok", { kind: "cut", proxy: { connections_reset: 1, connections_held: 0 } });
      h.add("c0", "info", "client-event", { event: "disconnect", detail: "connection reset" });
      h.op("nemesis", "fault", { kind: "heal" }, "ok", { kind: "heal", proxy: { connections_reset: 1 } });
      h.add("c0", "info", "client-event", { event: "reconnect" });
    }
    if (i !== missing) h.add("c0", "ok", "deliver", { msg: `m${i}`, seq: i });
  }
  h.op("c0", "drain", { until_seq: n }, "ok", { seq: n });
  return h.text();
}
