// The stream model's report: what `checkStream` returns and `narad verify check --json` writes
// for a stream history (format "narad-stream-check/1"). docs/verification-clients.md describes
// the fields. Operations are named by their line index; times are nanoseconds of the run clock
// (`…Ns`) or milliseconds (`…Ms`). Lists are capped (`…Omitted`); counts are exact.

import type { Verdict } from "../types.js";

export type StreamAnomalyName = "skip" | "duplicate" | "out-of-order" | "lost" | "unexpected" | "stalled";
export const STREAM_ANOMALY_NAMES: readonly StreamAnomalyName[] = ["skip", "duplicate", "out-of-order", "lost", "unexpected", "stalled"];

export interface StreamAnomaly {
  name: StreamAnomalyName;
  /** The consumer's process. */
  process: string;
  seq: number | null;
  msg: string | null;
  /** Line indexes of the operations that show it, ascending. */
  ops: number[];
  explanation: string;
  /** For a skip: the seed's numbers. */
  skip?: { expectedSeq: number; gotSeq: number; skipped: number; deliveredLate: number; neverDelivered: number };
}

export type StreamUnknownReason =
  /** A fault whose evidence shows nothing was stopped, or that never ended. */
  | "unevidenced-fault"
  /** An acknowledged publish with no drain of the consumer after it: nobody waited for it. */
  | "no-drain"
  /** A drain that never completed before the history ended. */
  | "open-drain";

export interface StreamUnknown {
  reason: StreamUnknownReason;
  process: string | null;
  ops: number[];
  explanation: string;
}

export interface StreamSilence {
  process: string;
  /** Acknowledged publishes waiting (acked by the fault's end, not yet delivered). */
  waiting: number;
  /** From the fault's end to the consumer's next delivery; null when nothing was waiting. */
  silenceMs: number | null;
  /** The delivery that ended the silence; null when none came before the history ended. */
  nextDeliveryOp: number | null;
}

export interface StreamFault {
  op: number;
  kind: string;
  /** Extra words of the fault line (a cut's mode, a latency's milliseconds). */
  detail: Record<string, unknown>;
  invokeNs: number;
  completeNs: number | null;
  /** The op that ended its effect (heal, resume, start) and when that completed. */
  endOp: number | null;
  endNs: number | null;
  evidence: boolean;
  evidenceNote: string;
  silence: StreamSilence[];
}

export interface StreamLag {
  /** Longest wait from a publish's ok to its first delivery. */
  maxMs: number | null;
  seq: number | null;
  msg: string | null;
  deliveryOp: number | null;
  p50Ms: number | null;
  p99Ms: number | null;
  samples: number;
}

export interface StreamConsumerSummary {
  process: string;
  deliveries: number;
  distinctSeqs: number;
  lastSeq: number | null;
  drain: { op: number; untilSeq: number; outcome: "ok" | "info" | "open"; seq: number | null; tookMs: number | null } | null;
}

export interface StreamReport {
  format: "narad-stream-check/1";
  model: "stream";
  verdict: Verdict;
  reason: string;
  config: { stream: string; system: string; client: string; api: string; scenario: string | null; prediction: string | null };
  history: { events: number; durationNs: number; slowLines: number };
  counts: {
    publishes: { invoke: number; ok: number; fail: number; info: number; open: number };
    deliveries: number;
    clientEvents: Record<string, number>;
  };
  consumers: StreamConsumerSummary[];
  anomalies: StreamAnomaly[];
  anomalyCounts: Partial<Record<StreamAnomalyName, number>>;
  anomaliesOmitted: number;
  unknowns: StreamUnknown[];
  unknownCounts: Partial<Record<StreamUnknownReason, number>>;
  unknownsOmitted: number;
  faults: StreamFault[];
  lag: StreamLag;
  /** Publishes acknowledged and deliveries per bucket, and the largest lag delivered in each. */
  series: { bucketNs: number; buckets: number; publishOk: number[]; deliver: number[]; lagMs: Array<number | null> };
  clientEvents: Array<{ op: number; timeNs: number; process: string; event: string; detail: unknown }>;
}

export interface StreamCheckOptions {
  /** Caps on listed anomalies and unknowns (counts stay exact). */
  listMax?: number;
  buckets?: number;
}
