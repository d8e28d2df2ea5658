// The stream model's judge (SPEC.md "The stream model", seed 002): every acknowledged publish
// must reach the consumer, in stream order, once, and the consumer must catch up by itself.
//
// One pass over each consumer's deliveries in history order keeps the highest seq delivered so
// far (`hi`). A delivery of a seq already delivered is a `duplicate`; one above hi + 1 with
// acknowledged publishes in between opens a `skip` (the gap is remembered: a later delivery inside
// it is one of the skip's late deliveries, not out of order); one below hi outside every skip's
// gap is `out-of-order`. Each delivery's message is checked against its publish (`unexpected`).
// Afterwards, an acknowledged seq never delivered and not inside a skip is `lost` if a drain of
// that consumer began after its ok (else nobody waited for it: `unknown`), and a drain whose
// deadline passed is `stalled`. Skipped seqs are counted in their skip, with the seed's numbers,
// not again as lost.
//
// Measures: per fault, the silence from its end (a heal's, resume's or start's ok) to the next
// delivery, counted only when acknowledged publishes were waiting; lag, the longest time from a
// publish's ok to its first delivery. All of it is linear in the history but for the per-fault
// scan of acknowledged seqs (faults are few) and the sort of lag samples.

import type { Verdict } from "../types.js";
import { P_FAIL, P_INFO, P_OK, P_OPEN, type ConsumerColumns, type OpRecord, type StreamColumns } from "./read.js";
import type {
  StreamAnomaly,
  StreamAnomalyName,
  StreamCheckOptions,
  StreamConsumerSummary,
  StreamFault,
  StreamLag,
  StreamReport,
  StreamUnknown,
  StreamUnknownReason,
} from "./types.js";

const LIST_MAX_DEFAULT = 100;
const BUCKETS_DEFAULT = 100;

/** Fault kinds that start an effect, and the kind of line that ends it. */
const ENDED_BY: Record<string, string> = { cut: "heal", latency: "heal", pause: "resume", kill: "start", terminate: "start", "power-loss": "start" };

interface Skip {
  from: number;
  to: number;
  anomaly: StreamAnomaly;
  skipped: number;
}

class Findings {
  readonly anomalies: StreamAnomaly[] = [];
  readonly anomalyCounts: Partial<Record<StreamAnomalyName, number>> = {};
  anomaliesOmitted = 0;
  readonly unknowns: StreamUnknown[] = [];
  readonly unknownCounts: Partial<Record<StreamUnknownReason, number>> = {};
  unknownsOmitted = 0;
  constructor(private readonly listMax: number) {}
  anomaly(a: StreamAnomaly): StreamAnomaly {
    this.anomalyCounts[a.name] = (this.anomalyCounts[a.name] ?? 0) + 1;
    if (this.anomalies.length < this.listMax) this.anomalies.push(a);
    else this.anomaliesOmitted++;
    return a;
  }
  unknown(u: StreamUnknown, count = 1): void {
    this.unknownCounts[u.reason] = (this.unknownCounts[u.reason] ?? 0) + count;
    if (this.unknowns.length < this.listMax) this.unknowns.push(u);
    else this.unknownsOmitted++;
  }
}

function s2(ns: number): string {
  return `${(ns / 1e9).toFixed(2)} s`;
}

function lowerBound(a: Float64Array, n: number, x: number): number {
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function numbersAbove0(v: unknown): string[] {
  if (typeof v !== "object" || v === null) return [];
  return Object.entries(v as Record<string, unknown>)
    .filter(([, n]) => typeof n === "number" && n > 0)
    .map(([k, n]) => `${k} ${n as number}`);
}

interface Judged {
  delivered: Int32Array;
  firstNs: Float64Array;
  skips: Skip[];
}

export function judgeStream(cols: StreamColumns, options: StreamCheckOptions = {}): StreamReport {
  const listMax = options.listMax ?? LIST_MAX_DEFAULT;
  const buckets = options.buckets ?? BUCKETS_DEFAULT;
  const found = new Findings(listMax);
  const { seqMsg, seqOkNs, seqOp, pubCount, pubState, pubSeq, pubFirstInvokeNs, msgName } = cols;

  // The seq space: every acknowledged seq and every delivered one.
  let seqMax = seqMsg.length - 1;
  for (const c of cols.consumers) for (let i = 0; i < c.seq.length; i++) if (c.seq.data[i]! > seqMax) seqMax = c.seq.data[i]!;
  const size = Math.max(seqMax + 2, 2);
  // ackedPrefix[s]: acknowledged seqs in 1..s.
  const ackedPrefix = new Int32Array(size);
  for (let s = 1; s < size; s++) ackedPrefix[s] = ackedPrefix[s - 1]! + (seqMsg.get(s, -1) !== -1 ? 1 : 0);
  const ackedBetween = (lo: number, hi: number) => (hi < lo ? 0 : ackedPrefix[hi]! - ackedPrefix[lo - 1]!);

  for (const clash of cols.seqClashes) {
    found.anomaly({
      name: "unexpected",
      process: "broker",
      seq: clash.seq,
      msg: null,
      ops: [...clash.ops].sort((a, b) => a - b),
      explanation: `seq ${clash.seq} was acknowledged to two publishes`,
    });
  }

  const processes = [...cols.consumers.map((c) => c.process)];
  for (const d of cols.drains) if (!processes.includes(d.process)) processes.push(d.process);
  const byProcess = new Map(cols.consumers.map((c) => [c.process, c]));
  const empty = (process: string): ConsumerColumns => {
    const z = { data: new Int32Array(0), length: 0 } as unknown as ConsumerColumns["op"];
    return { process, op: z, ns: { data: new Float64Array(0), length: 0 } as unknown as ConsumerColumns["ns"], msg: z, seq: z };
  };

  const judged = new Map<string, Judged>();
  const consumers: StreamConsumerSummary[] = [];
  for (const process of processes) {
    const c = byProcess.get(process) ?? empty(process);
    const j = judgeConsumer(c, size, cols, ackedBetween, found);
    judged.set(process, j);
    const drains = cols.drains.filter((d) => d.process === process);
    const lastDrain = drains.length > 0 ? drains[drains.length - 1]! : null;
    let distinct = 0;
    for (let s = 1; s < size; s++) if (j.delivered[s]! > 0) distinct++;
    consumers.push({
      process,
      deliveries: c.op.length,
      distinctSeqs: distinct,
      lastSeq: c.seq.length > 0 ? c.seq.data[c.seq.length - 1]! : null,
      drain:
        lastDrain === null
          ? null
          : {
              op: lastDrain.op,
              untilSeq: lastDrain.invokeValue["until_seq"] as number,
              outcome: lastDrain.type === null ? "open" : (lastDrain.type as "ok" | "info"),
              seq: lastDrain.completeValue ? (lastDrain.completeValue["seq"] as number) : null,
              tookMs: lastDrain.completeNs === null ? null : (lastDrain.completeNs - lastDrain.invokeNs) / 1e6,
            },
    });

    // Acknowledged, never delivered, outside every skip.
    const inSkip = new Uint8Array(size);
    for (const sk of j.skips) for (let s = sk.from + 1; s < sk.to; s++) inSkip[s] = 1;
    let noDrain = 0;
    const noDrainOps: number[] = [];
    for (let s = 1; s < size; s++) {
      const msg = seqMsg.get(s, -1);
      if (msg === -1 || j.delivered[s]! > 0 || inSkip[s]) continue;
      const okNs = seqOkNs.data[s]!;
      const drain = drains.find((d) => d.invokeNs >= okNs && d.type !== null);
      if (drain === undefined) {
        noDrain++;
        if (noDrainOps.length < 10) noDrainOps.push(seqOp.data[s]!);
        continue;
      }
      found.anomaly({
        name: "lost",
        process,
        seq: s,
        msg: msgName[msg]!,
        ops: [seqOp.data[s]!, drain.op],
        explanation: `msg ${msgName[msg]} acknowledged as seq ${s} and never delivered; the drain ${drain.type === "ok" ? "completed" : "timed out"} at seq ${(drain.completeValue?.["seq"] as number | undefined) ?? "?"}`,
      });
    }
    if (noDrain > 0) {
      found.unknown(
        { reason: "no-drain", process, ops: noDrainOps, explanation: `${noDrain} acknowledged publishes never reached ${process} and no drain of ${process} began after them` },
        noDrain,
      );
    }
    for (const d of drains) {
      if (d.type === null) {
        found.unknown({ reason: "open-drain", process, ops: [d.op], explanation: `the drain until seq ${d.invokeValue["until_seq"]} never completed` });
      } else if (d.type === "info") {
        const took = d.completeNs! - d.invokeNs;
        found.anomaly({
          name: "stalled",
          process,
          seq: (d.completeValue?.["seq"] as number | undefined) ?? null,
          msg: null,
          ops: [d.op],
          explanation: `the drain until seq ${d.invokeValue["until_seq"]} timed out after ${s2(took)} at seq ${d.completeValue?.["seq"] ?? "?"}: the consumer did not catch up by itself`,
        });
      }
    }
  }

  const faults = judgeFaults(cols, judged, processes, byProcess, found);
  const lag = lagOf(cols, judged);
  const series = seriesOf(cols, judged, buckets);

  const anomalyTotal = Object.values(found.anomalyCounts).reduce((a, b) => a + (b ?? 0), 0);
  const unknownTotal = Object.values(found.unknownCounts).reduce((a, b) => a + (b ?? 0), 0);
  let verdict: Verdict;
  let reason: string;
  if (anomalyTotal > 0) {
    verdict = "invalid";
    reason = `${anomalyTotal} anomal${anomalyTotal === 1 ? "y" : "ies"}: ${Object.entries(found.anomalyCounts).map(([k, n]) => `${k} ×${n}`).join(", ")}`;
  } else if (unknownTotal > 0) {
    verdict = "unknown";
    reason = `cannot judge: ${Object.entries(found.unknownCounts).map(([k, n]) => `${k} ×${n}`).join(", ")}`;
  } else {
    verdict = "valid";
    const unknownPubs = cols.publishCounts.info + cols.publishCounts.open;
    reason = `every acknowledged publish (${cols.publishCounts.ok}) delivered once, in stream order${unknownPubs > 0 ? `; ${unknownPubs} of ${cols.publishCounts.invoke} publishes unknown` : ""}`;
  }

  let deliveries = 0;
  for (const c of cols.consumers) deliveries += c.op.length;
  const cfg = cols.config;
  return {
    format: "narad-stream-check/1",
    model: "stream",
    verdict,
    reason,
    config: {
      stream: cfg.stream,
      system: cfg.system,
      client: cfg.client,
      api: cfg.api,
      scenario: typeof cfg.scenario === "string" ? cfg.scenario : null,
      prediction: typeof cfg.prediction === "string" ? cfg.prediction : null,
    },
    history: { events: cols.events, durationNs: cols.lastNs, slowLines: cols.slowLines },
    counts: { publishes: { ...cols.publishCounts }, deliveries, clientEvents: { ...cols.clientEventCounts } },
    consumers,
    anomalies: found.anomalies,
    anomalyCounts: found.anomalyCounts,
    anomaliesOmitted: found.anomaliesOmitted,
    unknowns: found.unknowns,
    unknownCounts: found.unknownCounts,
    unknownsOmitted: found.unknownsOmitted,
    faults,
    lag,
    series,
    clientEvents: cols.clientEvents,
  };

  function judgeConsumer(c: ConsumerColumns, n: number, cl: StreamColumns, between: (lo: number, hi: number) => number, f: Findings): Judged {
    const delivered = new Int32Array(n);
    const firstNs = new Float64Array(n).fill(-1);
    const firstOp = new Int32Array(n);
    const skips: Skip[] = [];
    let hi = 0;
    let hiOp = -1;
    const ops = c.op.data;
    const nss = c.ns.data;
    const msgs = c.msg.data;
    const seqs = c.seq.data;
    const process = c.process;
    for (let i = 0; i < c.op.length; i++) {
      const seq = seqs[i]!;
      const msg = msgs[i]!;
      const op = ops[i]!;
      const ns = nss[i]!;
      checkMessage(process, op, ns, msg, seq, cl, f);
      if (delivered[seq]! > 0) {
        delivered[seq]!++;
        f.anomaly({
          name: "duplicate",
          process,
          seq,
          msg: msgName[msg]!,
          ops: [firstOp[seq]!, op],
          explanation: `seq ${seq} (msg ${msgName[msg]}) delivered again, ${s2(ns - firstNs[seq]!)} after its first delivery`,
        });
        continue;
      }
      delivered[seq] = 1;
      firstNs[seq] = ns;
      firstOp[seq] = op;
      if (seq > hi + 1) {
        const skipped = between(hi + 1, seq - 1);
        if (skipped > 0) {
          const anomaly: StreamAnomaly = {
            name: "skip",
            process,
            seq,
            msg: msgName[msg]!,
            ops: hiOp < 0 ? [op] : [hiOp, op],
            explanation: "",
          };
          skips.push({ from: hi, to: seq, anomaly, skipped });
        }
        hi = seq;
        hiOp = op;
      } else if (seq < hi) {
        if (!inGap(skips, seq)) {
          f.anomaly({
            name: "out-of-order",
            process,
            seq,
            msg: msgName[msg]!,
            ops: [hiOp, op],
            explanation: `seq ${seq} delivered after seq ${hi}`,
          });
        }
      } else {
        hi = seq;
        hiOp = op;
      }
    }
    // The seed's numbers, now that every late delivery is known.
    for (const sk of skips) {
      let late = 0;
      for (let s = sk.from + 1; s < sk.to; s++) if (seqMsg.get(s, -1) !== -1 && delivered[s]! > 0) late++;
      sk.anomaly.explanation = `expected seq ${sk.from + 1}, got ${sk.to}: ${sk.skipped} skipped, ${late} delivered late, ${sk.skipped - late} never delivered`;
      sk.anomaly.skip = { expectedSeq: sk.from + 1, gotSeq: sk.to, skipped: sk.skipped, deliveredLate: late, neverDelivered: sk.skipped - late };
      f.anomaly(sk.anomaly);
    }
    return { delivered, firstNs, skips };
  }

  function checkMessage(process: string, op: number, ns: number, msg: number, seq: number, cl: StreamColumns, f: Findings): void {
    const name = msgName[msg]!;
    const why = ((): string | null => {
      if (pubCount.get(msg, 0) === 0) return `msg ${name} (seq ${seq}) was never published`;
      if (pubFirstInvokeNs.data[msg]! > ns) return `msg ${name} (seq ${seq}) delivered before it was published`;
      const st = pubState.data[msg]!;
      const owner = seqMsg.get(seq, -1);
      if (owner !== -1 && owner !== msg) return `msg ${name} delivered as seq ${seq}, which was acknowledged to msg ${msgName[owner]}`;
      if (st & P_OK) {
        const acked = pubSeq.data[msg]!;
        const more = cl.pubMoreSeqs.get(msg);
        const known = acked === seq || (more !== undefined && more.includes(seq));
        // A publish of the same msg that ended unknown may have landed at another seq.
        if (!known && !(st & (P_INFO | P_OPEN))) return `msg ${name} acknowledged as seq ${acked}, delivered as seq ${seq}`;
        return null;
      }
      if ((st & P_FAIL) && !(st & (P_INFO | P_OPEN))) return `msg ${name} (seq ${seq}) delivered although its publish was refused`;
      return null;
    })();
    if (why === null) return;
    const pubOp = cols.pubFirstInvokeOp.get(msg, -1);
    f.anomaly({ name: "unexpected", process, seq, msg: name, ops: pubOp >= 0 && pubOp < op ? [pubOp, op] : [op], explanation: why });
  }
}

function inGap(skips: Skip[], seq: number): boolean {
  // Gaps are disjoint and in increasing order: the last gap starting below seq is the only candidate.
  let lo = 0;
  let hi = skips.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (skips[mid]!.from < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 && seq < skips[lo - 1]!.to;
}

function judgeFaults(
  cols: StreamColumns,
  judged: Map<string, Judged>,
  processes: string[],
  byProcess: Map<string, ConsumerColumns>,
  found: Findings,
): StreamFault[] {
  const out: StreamFault[] = [];
  const all = cols.faults;
  let lastBoot: string | null = typeof cols.config["boot"] === "string" ? (cols.config["boot"] as string) : null;
  for (let i = 0; i < all.length; i++) {
    const f = all[i]!;
    const kind = String(f.invokeValue["kind"]);
    if (kind === "start" && f.type === "ok" && typeof f.completeValue?.["boot"] === "string") lastBoot = f.completeValue["boot"] as string;
    const endKind = ENDED_BY[kind];
    if (endKind === undefined) continue; // a heal, resume or start: the end of another
    let end: OpRecord | null = null;
    for (let k = i + 1; k < all.length; k++) {
      const e = all[k]!;
      if (String(e.invokeValue["kind"]) === endKind && e.type === "ok") {
        end = e;
        break;
      }
    }
    const detail: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(f.invokeValue)) if (k !== "kind") detail[k] = v;
    let evidence = false;
    let note: string;
    if (f.type !== "ok") note = f.type === null ? "the fault never completed" : `the fault answered ${f.type}`;
    else if (end === null) note = `no ${endKind} ended it`;
    else if (endKind === "heal" || endKind === "resume") {
      const stopped = [...numbersAbove0(end.completeValue?.["stopped"]), ...numbersAbove0(f.completeValue?.["stopped"])];
      evidence = stopped.length > 0 || (kind === "pause" && f.completeValue?.["state"] === "stopped");
      note = evidence ? `stopped: ${stopped.join(", ") || "process state stopped"}` : "the proxy's counters show nothing was stopped";
    } else {
      const before = typeof f.completeValue?.["boot"] === "string" ? (f.completeValue["boot"] as string) : lastBoot;
      const after = typeof end.completeValue?.["boot"] === "string" ? (end.completeValue["boot"] as string) : null;
      evidence = after !== null && after !== before;
      note = evidence ? `boot ${before ?? "?"} → ${after}` : "the start reported no new boot";
    }
    if (!evidence) found.unknown({ reason: "unevidenced-fault", process: null, ops: end ? [f.op, end.op] : [f.op], explanation: `${kind} at ${s2(f.invokeNs)}: ${note}` });
    const endNs = end?.completeNs ?? null;
    const silence = endNs === null ? [] : processes.map((p) => silenceAfter(cols, judged.get(p)!, byProcess.get(p), p, endNs));
    out.push({ op: f.op, kind, detail, invokeNs: f.invokeNs, completeNs: f.completeNs, endOp: end?.op ?? null, endNs, evidence, evidenceNote: note, silence });
  }
  return out;
}

function silenceAfter(cols: StreamColumns, j: Judged, c: ConsumerColumns | undefined, process: string, endNs: number) {
  let waiting = 0;
  const n = cols.seqMsg.length;
  const msgs = cols.seqMsg.data;
  const ok = cols.seqOkNs.data;
  for (let s = 1; s < n; s++) {
    if (msgs[s] === -1 || ok[s]! > endNs) continue;
    const first = j.firstNs[s]!;
    if (first < 0 || first > endNs) waiting++;
  }
  if (waiting === 0 || c === undefined) return { process, waiting, silenceMs: waiting === 0 ? null : (cols.lastNs - endNs) / 1e6, nextDeliveryOp: null };
  const k = lowerBound(c.ns.data, c.ns.length, endNs);
  if (k >= c.ns.length) return { process, waiting, silenceMs: (cols.lastNs - endNs) / 1e6, nextDeliveryOp: null };
  return { process, waiting, silenceMs: (c.ns.data[k]! - endNs) / 1e6, nextDeliveryOp: c.op.data[k]! };
}

function lagOf(cols: StreamColumns, judged: Map<string, Judged>): StreamLag {
  const n = cols.seqMsg.length;
  const samples: number[] = [];
  let max = -1;
  let maxSeq = -1;
  let maxProcess = "";
  for (const [process, j] of judged) {
    for (let s = 1; s < n; s++) {
      if (cols.seqMsg.data[s] === -1) continue;
      const first = j.firstNs[s]!;
      if (first < 0) continue;
      const lag = Math.max(0, first - cols.seqOkNs.data[s]!);
      samples.push(lag);
      if (lag > max) {
        max = lag;
        maxSeq = s;
        maxProcess = process;
      }
    }
  }
  if (samples.length === 0) return { maxMs: null, seq: null, msg: null, deliveryOp: null, p50Ms: null, p99Ms: null, samples: 0 };
  const sorted = Float64Array.from(samples).sort();
  const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]! / 1e6;
  const c = cols.consumers.find((x) => x.process === maxProcess);
  let deliveryOp: number | null = null;
  if (c) for (let i = 0; i < c.seq.length; i++) if (c.seq.data[i] === maxSeq) { deliveryOp = c.op.data[i]!; break; }
  return { maxMs: max / 1e6, seq: maxSeq, msg: cols.msgName[cols.seqMsg.data[maxSeq]!]!, deliveryOp, p50Ms: q(0.5), p99Ms: q(0.99), samples: samples.length };
}

function seriesOf(cols: StreamColumns, judged: Map<string, Judged>, buckets: number): StreamReport["series"] {
  const bucketNs = Math.max(1, Math.ceil((cols.lastNs + 1) / buckets));
  const publishOk = new Array<number>(buckets).fill(0);
  const deliver = new Array<number>(buckets).fill(0);
  const lagMs = new Array<number | null>(buckets).fill(null);
  const at = (ns: number) => Math.min(buckets - 1, Math.floor(ns / bucketNs));
  for (let s = 1; s < cols.seqMsg.length; s++) if (cols.seqMsg.data[s] !== -1) publishOk[at(cols.seqOkNs.data[s]!)]!++;
  for (const c of cols.consumers) {
    const j = judged.get(c.process)!;
    for (let i = 0; i < c.op.length; i++) {
      const ns = c.ns.data[i]!;
      const b = at(ns);
      deliver[b]!++;
      const s = c.seq.data[i]!;
      if (cols.seqMsg.get(s, -1) !== -1 && j.firstNs[s] === ns) {
        const lag = Math.max(0, ns - cols.seqOkNs.data[s]!) / 1e6;
        if (lagMs[b] === null || lag > lagMs[b]!) lagMs[b] = lag;
      }
    }
  }
  return { bucketNs, buckets, publishOk, deliver, lagMs };
}

export { P_FAIL, P_INFO, P_OK, P_OPEN };
