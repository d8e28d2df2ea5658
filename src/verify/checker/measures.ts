// Measures that do not decide the verdict but say how the run went: operation counts, lag,
// silence after each fault, and the time series and timeline the HTML report draws.
//
// Everything is bucketed into at most `buckets` equal time slices (default 200), so the report's
// size does not grow with the history. Silence after a fault (seed 002's "no error is a result"):
// from the moment the fault's effect ended (the start after a kill, the resume after a pause, the
// heal after a cut, the move's own completion) to the next delivery on any path that still had
// unsettled messages then, a message being unsettled from its produce's 202 until its last 204 ack.

import { F_ACK, F_CONSUME, F_EXTEND, F_NACK, F_NAMES, F_PRODUCE, O_FAIL, O_INFO, O_OK, O_OPEN, type RunData } from "./collect.js";
import type { FaultInfo } from "./faults.js";
import { lowerBound, sortedUnique } from "./findings.js";
import { selectRank } from "./sort.js";
import type { Anomaly, CheckOptions, LagSummary, LatencySeries, OperationCounts, Series, Timeline } from "./types.js";

export interface PairTimes {
  nPairs: number;
  pairTopic: Int32Array;
  /** When each pair became available (its produce's 202, plus a delay child's delay). */
  availableNs: Float64Array;
  /** Its last 204 ack, Infinity if none. */
  settleNs: Float64Array;
}

export interface Measures {
  operationCounts: Record<string, OperationCounts>;
  consumeEmpty: number;
  gone410: number;
  lag: LagSummary;
  series: Series;
  timeline: Timeline;
  /** Per fault (same order as the FaultInfo list): silence after its effect ended, ms. */
  silenceMs: Array<number | null>;
}

const MS = 1e6;
const DISRUPTING: ReadonlySet<string> = new Set(["kill", "terminate", "power-loss", "pause", "cut", "latency", "move"]);

function niceBucketNs(durationNs: number, buckets: number): number {
  const raw = Math.max(1000, Math.ceil(durationNs / buckets));
  const pow = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * pow >= raw) return m * pow;
  return 10 * pow;
}


/** The number of a's sorted elements at or below x: the first index past them. */
function upperBound(a: ArrayLike<number>, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** What the pass over the operations gathers: counts, per-bucket series, lag samples, per-path delivery times. */
interface OpPass {
  counts: Int32Array;
  consumeEmpty: number;
  gone410: number;
  produceTp: Float64Array;
  deliverTp: Float64Array;
  ackTp: Float64Array;
  latSum: Float64Array;
  latCount: Float64Array;
  latMax: Float64Array;
  lagSeries: Float64Array;
  lagSamples: Float64Array;
  lagN: number;
  lagMax: number;
  lagMaxOp: number;
  delivered: Float64Array[];
}

/**
 * The one pass over the operations, a function of its own: a loop this long in one large
 * function runs unoptimised until V8 replaces it on the stack, which costs more than the loop.
 */
function passOverOps(run: RunData, buckets: number, bucketNs: number, lagMs: Float32Array): OpPass {
  const ops = run.ops;
  const n = ops.length;
  const counts = new Int32Array(F_NAMES.length * 4);
  let consumeEmpty = 0;
  let gone410 = 0;
  const produceTp = new Float64Array(buckets);
  const deliverTp = new Float64Array(buckets);
  const ackTp = new Float64Array(buckets);
  // Latency of produce (0), consume (1) and ack (2): sum, count and max per bucket.
  const latSum = new Float64Array(3 * buckets);
  const latCount = new Float64Array(3 * buckets);
  const latMax = new Float64Array(3 * buckets);
  const lagSeries = new Float64Array(buckets).fill(-1);
  let lagSamples = new Float64Array(1024);
  let lagN = 0;
  let lagMax = -1;
  let lagMaxOp = -1;

  // Per path: delivery completions, for the silence measure (filled in order, so already sorted
  // up to the order of completions; sorted below).
  const nTopics = run.topics.size;
  const deliveredCount = new Int32Array(nTopics);
  for (let op = 0; op < n; op++) if (ops.f[op] === F_CONSUME && ops.outcome[op] === O_OK && ops.msg[op]! >= 0) deliveredCount[ops.topic[op]!]!++;
  const delivered = Array.from(deliveredCount, (c) => new Float64Array(c));
  deliveredCount.fill(0);

  for (let op = 0; op < n; op++) {
    const f = ops.f[op]!;
    const o = ops.outcome[op]!;
    counts[f * 4 + o]!++;
    if ((f === F_ACK || f === F_EXTEND || f === F_NACK) && ops.status[op] === 410) gone410++;
    if (o !== O_OK) continue;
    const comp = ops.compNs[op]!;
    const b = Math.min(buckets - 1, Math.floor(comp / bucketNs));
    let li = -1;
    if (f === F_PRODUCE) {
      produceTp[b]!++;
      li = 0;
    } else if (f === F_CONSUME) {
      li = 1;
      if (ops.msg[op]! < 0) consumeEmpty++;
      else {
        deliverTp[b]!++;
        const tp = ops.topic[op]!;
        delivered[tp]![deliveredCount[tp]!++] = comp;
        const lag = lagMs[op]!;
        if (lag === lag) {
          if (lagN === lagSamples.length) {
            const bigger = new Float64Array(lagN * 2);
            bigger.set(lagSamples);
            lagSamples = bigger;
          }
          lagSamples[lagN++] = lag;
          if (lag > lagMax) {
            lagMax = lag;
            lagMaxOp = op;
          }
          if (lag > lagSeries[b]!) lagSeries[b] = lag;
        }
      }
    } else if (f === F_ACK) {
      ackTp[b]!++;
      li = 2;
    }
    if (li >= 0) {
      const latencyMs = (comp - ops.invNs[op]!) / MS;
      const k = li * buckets + b;
      latSum[k]! += latencyMs;
      latCount[k]!++;
      if (latencyMs > latMax[k]!) latMax[k] = latencyMs;
    }
  }
  return { counts, consumeEmpty, gone410, produceTp, deliverTp, ackTp, latSum, latCount, latMax, lagSeries, lagSamples, lagN, lagMax, lagMaxOp, delivered };
}

export function buildMeasures(
  run: RunData,
  options: CheckOptions,
  faults: readonly FaultInfo[],
  pairs: PairTimes,
  lagMs: Float32Array,
  lagSince: Uint8Array,
  anomalies: readonly Anomaly[],
): Measures {
  const ops = run.ops;
  const n = ops.length;
  const durationNs = Math.max(run.lastTimeNs, 1);
  const bucketNs = niceBucketNs(durationNs, options.buckets ?? 200);
  const buckets = Math.floor(durationNs / bucketNs) + 1;
  const bucketOf = (ns: number): number => Math.min(buckets - 1, Math.floor(ns / bucketNs));

  // ---- counts and series, in one pass over the operations ----
  const { counts, consumeEmpty, gone410, produceTp, deliverTp, ackTp, latSum, latCount, latMax, lagSeries, lagSamples, lagN, lagMax, lagMaxOp, delivered } = passOverOps(
    run,
    buckets,
    bucketNs,
    lagMs,
  );
  const nTopics = run.topics.size;
  const operationCounts: Record<string, OperationCounts> = {};
  for (let f = 1; f < F_NAMES.length; f++) {
    const open = counts[f * 4 + O_OPEN]!;
    const ok = counts[f * 4 + O_OK]!;
    const fail = counts[f * 4 + O_FAIL]!;
    const info = counts[f * 4 + O_INFO]!;
    operationCounts[F_NAMES[f]!] = { invoke: open + ok + fail + info, ok, fail, info, open };
  }
  const latency = (li: number): LatencySeries => {
    const meanMs: Array<number | null> = new Array(buckets);
    const maxMs: Array<number | null> = new Array(buckets);
    for (let b = 0; b < buckets; b++) {
      const k = li * buckets + b;
      const c = latCount[k]!;
      meanMs[b] = c > 0 ? round3(latSum[k]! / c) : null;
      maxMs[b] = c > 0 ? round3(latMax[k]!) : null;
    }
    return { meanMs, maxMs };
  };
  const series: Series = {
    bucketNs,
    buckets,
    throughput: { produce: Array.from(produceTp), deliver: Array.from(deliverTp), ack: Array.from(ackTp) },
    latency: { produce: latency(0), consume: latency(1), ack: latency(2) },
    lagMs: Array.from(lagSeries, (v) => (v < 0 ? null : round3(v))),
  };

  // ---- lag ----
  let lag: LagSummary;
  if (lagN === 0) {
    lag = { maxMs: null, msg: null, path: null, deliveryOp: null, since: null, p50Ms: null, p99Ms: null, samples: 0 };
  } else {
    const samples = lagSamples.subarray(0, lagN);
    // The two ranks a sorted copy would hold, found by selection (the higher first, so the
    // lower's search runs on the part below it).
    const rank = (p: number): number => Math.min(lagN - 1, Math.floor(p * lagN));
    const q99 = selectRank(samples, rank(0.99), 0, lagN);
    const q50 = selectRank(samples, rank(0.5), 0, rank(0.99) + 1);
    const q = (v: number): number => round3(v);
    const sinceNames = [null, "produce", "nack", "lapse", "fault"] as const;
    lag = {
      maxMs: round3(lagMax),
      msg: run.msgs.name(ops.msg[lagMaxOp]!),
      path: run.topics.name(ops.topic[lagMaxOp]!),
      deliveryOp: ops.invIdx[lagMaxOp]!,
      since: sinceNames[lagSince[lagMaxOp]!] ?? null,
      p50Ms: q(q50),
      p99Ms: q(q99),
      samples: lagN,
    };
  }

  // ---- silence after each fault ----
  // Per fault end t0: on each path with a pair available by t0 and not settled by t0, the first
  // delivery at or after t0. Faults are few and the times many, so each time is placed once
  // among the sorted fault ends (a binary search over them) instead of sorting the times.
  const ends = sortedUnique(faults.filter((f) => DISRUPTING.has(f.kind) && Number.isFinite(f.endNs)).map((f) => f.endNs));
  const nEnds = ends.length;
  // availAt[t * nEnds + k]: pairs of path t available by ends[k], less those settled by then.
  const unsettledAt = new Float64Array(nTopics * nEnds);
  // firstAt[t * nEnds + k]: the first delivery on path t at or after ends[k].
  const firstAt = new Float64Array(nTopics * nEnds).fill(Infinity);
  if (nEnds > 0) {
    for (let p = 0; p < pairs.nPairs; p++) {
      const a = pairs.availableNs[p]!;
      if (!Number.isFinite(a)) continue;
      const base = pairs.pairTopic[p]! * nEnds;
      // Counted at the first end at or after it, summed over the ends below.
      const ka = lowerBound(ends, a);
      if (ka < nEnds) unsettledAt[base + ka]!++;
      const st = pairs.settleNs[p]!;
      if (Number.isFinite(st)) {
        const ks = lowerBound(ends, Math.max(a, st));
        if (ks < nEnds) unsettledAt[base + ks]!--;
      }
    }
    for (let t = 0; t < nTopics; t++) {
      const base = t * nEnds;
      for (let k = 1; k < nEnds; k++) unsettledAt[base + k]! += unsettledAt[base + k - 1]!;
      const d = delivered[t]!;
      // A delivery at time x is the candidate of the last end at or below it; then a minimum from the top down.
      for (let i = 0; i < d.length; i++) {
        const x = d[i]!;
        const k = upperBound(ends, x) - 1;
        if (k >= 0 && x < firstAt[base + k]!) firstAt[base + k] = x;
      }
      for (let k = nEnds - 2; k >= 0; k--) if (firstAt[base + k + 1]! < firstAt[base + k]!) firstAt[base + k] = firstAt[base + k + 1]!;
    }
  }
  const silenceMs: Array<number | null> = faults.map((f) => {
    if (!DISRUPTING.has(f.kind) || !Number.isFinite(f.endNs)) return null;
    const t0 = f.endNs;
    const k = lowerBound(ends, t0);
    let best = Infinity;
    for (let t = 0; t < nTopics; t++) {
      if (unsettledAt[t * nEnds + k]! <= 0) continue;
      const first = firstAt[t * nEnds + k]!;
      if (first - t0 < best) best = first - t0;
    }
    return Number.isFinite(best) ? round3(best / MS) : null;
  });

  // ---- timeline ----
  const procMax = options.timelineProcessesMax ?? 40;
  const nProcs = run.processes.size;
  const procCount = new Int32Array(nProcs);
  for (let op = 0; op < n; op++) procCount[ops.proc[op]!]!++;
  const order = Array.from({ length: nProcs }, (_, i) => i).sort((a, b) => procCount[b]! - procCount[a]!);
  const shown = order.slice(0, procMax);
  const nemesis = run.processes.find("nemesis");
  if (nemesis >= 0 && !shown.includes(nemesis)) shown[shown.length - 1] = nemesis;
  const rowOf = new Int32Array(nProcs).fill(-1);
  shown.forEach((p, r) => (rowOf[p] = r));
  // Per shown process: ok, fail and info (with never completed) counts per bucket.
  const cells = new Int32Array(shown.length * 3 * buckets);
  for (let op = 0; op < n; op++) {
    const r = rowOf[ops.proc[op]!]!;
    if (r < 0) continue;
    const o = ops.outcome[op]!;
    const col = o === O_OK ? 0 : o === O_FAIL ? 1 : 2;
    cells[(r * 3 + col) * buckets + bucketOf(ops.invNs[op]!)]!++;
  }
  const processes = shown
    .map((p, r) => ({
      process: run.processes.name(p),
      ok: Array.from(cells.subarray((r * 3) * buckets, (r * 3 + 1) * buckets)),
      fail: Array.from(cells.subarray((r * 3 + 1) * buckets, (r * 3 + 2) * buckets)),
      info: Array.from(cells.subarray((r * 3 + 2) * buckets, (r * 3 + 3) * buckets)),
    }))
    .sort(processOrder(shown.map((p) => run.processes.name(p))));
  const opAtIndex = (lineIndex: number): number => {
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (ops.invIdx[mid]! < lineIndex) lo = mid + 1;
      else hi = mid;
    }
    return lo < n && ops.invIdx[lo] === lineIndex ? lo : -1;
  };
  const marks: Timeline["marks"] = [];
  for (const a of anomalies) {
    if (marks.length >= 200) break;
    const last = a.ops[a.ops.length - 1];
    if (last === undefined) continue;
    const op = opAtIndex(last);
    if (op >= 0) marks.push({ timeNs: ops.invNs[op]!, op: last, name: a.name });
  }
  const timeline: Timeline = {
    bucketNs,
    buckets,
    processes,
    processesOmitted: nProcs - shown.length,
    faultWindows: faults
      .filter((f) => DISRUPTING.has(f.kind) && f.mayHaveHappened)
      .map((f) => ({
        op: ops.invIdx[f.op]!,
        kind: f.kind,
        node: f.node >= 0 ? run.nodes.name(f.node) : null,
        startNs: ops.invNs[f.op]!,
        endNs: Number.isFinite(f.endNs) ? f.endNs : durationNs,
      })),
    marks,
  };

  return { operationCounts, consumeEmpty, gone410, lag, series, timeline, silenceMs };
}

/** A process name of lowercase letters and a number (c12, p3, nemesis), split. */
const SIMPLE_NAME = /^([a-z]+)(0|[1-9][0-9]{0,14})?$/;

/**
 * The timeline's order of processes: natural order (c2 before c10), as Intl.Collator("en",
 * { numeric: true }) has it. Making that collator costs more than the rest of the timeline, so
 * when every name is lowercase letters and a number, the same order is computed by hand: the
 * letters alphabetically (a shorter prefix first), then the number (none first).
 */
function processOrder(names: readonly string[]): (a: { process: string }, b: { process: string }) => number {
  if (!names.every((n) => SIMPLE_NAME.test(n))) {
    const collator = new Intl.Collator("en", { numeric: true });
    return (a, b) => collator.compare(a.process, b.process);
  }
  return (a, b) => {
    const x = SIMPLE_NAME.exec(a.process)!;
    const y = SIMPLE_NAME.exec(b.process)!;
    if (x[1] !== y[1]) return x[1]! < y[1]! ? -1 : 1;
    return (x[2] === undefined ? -1 : Number(x[2])) - (y[2] === undefined ? -1 : Number(y[2]));
  };
}

function round3(v: number): number {
  return Math.round(v * 1000) / 1000;
}
