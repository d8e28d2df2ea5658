// The checker's report: what `check` returns, what `--json` writes (format "narad-check/1") and
// what the terminal and HTML reports draw. docs/verification-checker.md describes every field.
//
// Operations are named by the index of their invoke line; times are nanoseconds of the run clock
// (`…Ns`) or milliseconds (`…Ms`). Lists that can grow with the history are capped (see the
// `…Omitted` counters); counts are always exact.

import type { FaultKind } from "../history/types.js";

export type Verdict = "valid" | "invalid" | "unknown";

export type AnomalyName =
  | "lost"
  | "unexpected"
  | "misrouted"
  | "refused-delivered"
  | "duplicate-after-ack"
  | "double-lease"
  | "early-delivery"
  | "skip"
  | "nonmonotonic"
  | "stranded"
  | "no-legal-order"
  /** Next wave: an idempotent message (one producer and sequence) stored at two places. */
  | "duplicate-produce"
  /** Next wave: a delivery on a dead-letter topic before its source ran out of deliveries. */
  | "dead-lettered-early"
  /** Next wave: a delivery on a topic after the message was moved to its dead-letter topic. */
  | "delivered-after-dead-letter";

export const ANOMALY_NAMES: readonly AnomalyName[] = [
  "lost",
  "unexpected",
  "misrouted",
  "refused-delivered",
  "duplicate-after-ack",
  "double-lease",
  "early-delivery",
  "skip",
  "nonmonotonic",
  "stranded",
  "no-legal-order",
  "duplicate-produce",
  "dead-lettered-early",
  "delivered-after-dead-letter",
];

export interface Anomaly {
  name: AnomalyName;
  /** The message, or null for a replay anomaly. */
  msg: string | null;
  /** The path: the topic the pair is judged on (or the replayed topic). */
  path: string;
  /** Invoke-line indexes of the operations that show it, ascending. */
  ops: number[];
  explanation: string;
}

/** Why (part of) a run could not be judged. Any of them makes a non-invalid verdict `unknown`. */
export type UnknownReason =
  /** A kill, power-loss, terminate or start after which its node never reported another boot. */
  | "unevidenced-fault"
  /** A pair was due (produced, or delivered and not acked) but its path had no final drain after. */
  | "no-final-drain"
  /** An ambiguous consume on the path may still have held the pair's lease when the drain ran. */
  | "lease-may-be-live-at-drain"
  /** The pair is legal only if a fault without evidence happened. */
  | "explained-by-unevidenced-fault"
  /** The per-pair search hit its step cap. */
  | "search-cap"
  /** One message id was produced more than once and its copies cannot be told apart. */
  | "repeated-produce";

export interface Unknown {
  reason: UnknownReason;
  msg: string | null;
  path: string | null;
  ops: number[];
  explanation: string;
}

export interface FaultSummary {
  op: number;
  kind: FaultKind;
  node: string | null;
  /** "TOPIC/P" for a move that names one. */
  partition: string | null;
  invokeNs: number;
  /** Null when the fault never completed. */
  completeNs: number | null;
  outcome: "ok" | "fail" | "info" | "open";
  /** Whether the kind needs boot evidence (kill, power-loss, terminate, start). */
  needsEvidence: boolean;
  /** For those kinds: whether the node later reported a different boot. Null otherwise. */
  evidence: boolean | null;
  /** The op whose boot report is the evidence. */
  evidenceOp: number | null;
  /** The op that ended the fault's effect (start after kill, resume, heal), if any. */
  endOp: number | null;
  /** When the effect ended: the ending op's completion, or the fault's own for a move. */
  endNs: number | null;
  /** Time from the end to the next delivery on a path with unsettled messages; null if none. */
  silenceMs: number | null;
  /** Redeliveries the checker attributed to this fault. */
  redeliveries: number;
}

export interface ExplainedDuplicate {
  msg: string;
  path: string;
  deliveryOp: number;
  ackOp: number;
  faultOp: number;
}

/**
 * A second copy of a message on a child path (another offset), explained by a fault that could
 * make the copier copy it again: the parent partition's owner killed before the copy cursor
 * reached the disk, or the node that took the copy (or, for a remote child, a node of the other
 * cluster) killed before the copier got its answer.
 */
export interface ExplainedRecopy {
  msg: string;
  path: string;
  /** The re-copy's first delivery. */
  deliveryOp: number;
  /** The first delivery of the copy it repeats. */
  sourceOp: number;
  faultOp: number;
}

export interface Redeliveries {
  total: number;
  byCause: { lapse: number; nack: number; fault: number };
  /** Fault-caused redeliveries per fault op, including the explained duplicates. */
  byFault: Array<{ op: number; kind: FaultKind; count: number }>;
  /** Deliveries after a 204 ack that a fault explains (capped; the total is exact). */
  explainedDuplicates: ExplainedDuplicate[];
  explainedDuplicatesTotal: number;
  /** Child copies made again, each with the fault that explains it (capped; the total is exact). */
  explainedRecopies: ExplainedRecopy[];
  explainedRecopiesTotal: number;
}

export interface LagSummary {
  /** Longest wait between becoming available and being delivered; null with no delivery. */
  maxMs: number | null;
  msg: string | null;
  path: string | null;
  deliveryOp: number | null;
  /** What made the message available before that wait. */
  since: "produce" | "nack" | "lapse" | "fault" | null;
  p50Ms: number | null;
  p99Ms: number | null;
  samples: number;
}

export interface LatencySeries {
  meanMs: Array<number | null>;
  maxMs: Array<number | null>;
}

/** Time series over equal buckets from time 0 to the end of the history. */
export interface Series {
  bucketNs: number;
  buckets: number;
  /** Completions per bucket. */
  throughput: { produce: number[]; deliver: number[]; ack: number[] };
  latency: { produce: LatencySeries; consume: LatencySeries; ack: LatencySeries };
  /** Largest lag of the deliveries completed in each bucket. */
  lagMs: Array<number | null>;
}

export interface TimelineProcess {
  process: string;
  /** Operations invoked in each bucket, by outcome (info includes never completed). */
  ok: number[];
  fail: number[];
  info: number[];
}

export interface Timeline {
  bucketNs: number;
  buckets: number;
  processes: TimelineProcess[];
  /** Processes left out to keep the report small (the least busy ones). */
  processesOmitted: number;
  faultWindows: Array<{ op: number; kind: FaultKind; node: string | null; startNs: number; endNs: number }>;
  /** One mark per anomaly (capped), at its last operation's invoke time. */
  marks: Array<{ timeNs: number; op: number; name: AnomalyName }>;
}

export interface OperationCounts {
  invoke: number;
  ok: number;
  fail: number;
  info: number;
  /** Invoked and never completed before the history ended. */
  open: number;
}

export interface Report {
  format: "narad-check/1";
  verdict: Verdict;
  /** One sentence: why this verdict. */
  reason: string;
  history: { events: number; operations: number; durationNs: number };
  config: {
    ackFlushMs: number;
    ackSyncMs: number;
    visibilityTimeoutMs: number;
    slackMs: number;
    topics: Record<string, { partitions: number; visibilityTimeoutMs: number }>;
    children: Record<string, Array<{ topic: string; kind: string; delayMs: number | null }>>;
  };
  counts: {
    operations: Record<string, OperationCounts>;
    /** Consumes that answered "empty". */
    consumeEmpty: number;
    /** Acks, extends and nacks that answered 410. */
    gone410: number;
    messages: number;
    deliveries: number;
    pairs: { total: number; legal: number; invalid: number; unknown: number };
  };
  anomalies: Anomaly[];
  anomalyCounts: Partial<Record<AnomalyName, number>>;
  anomaliesOmitted: number;
  unknowns: Unknown[];
  unknownCounts: Partial<Record<UnknownReason, number>>;
  unknownsOmitted: number;
  faults: FaultSummary[];
  redeliveries: Redeliveries;
  lag: LagSummary;
  series: Series;
  timeline: Timeline;
  /** Pairs whose search hit the step cap, and the most steps any pair took. */
  search: { stepsMax: number; capHits: number; stepsMostInOnePair: number };
}

export interface CheckOptions {
  /** Slack added to every time window, in ms (the spec says 50). */
  slackMs?: number;
  /** Step cap of the per-pair search. */
  searchStepsMax?: number;
  /** Caps on listed anomalies, unknowns and explained duplicates. */
  listMax?: number;
  /** Buckets of the time series and timeline. */
  buckets?: number;
  /** Processes shown on the timeline. */
  timelineProcessesMax?: number;
}
