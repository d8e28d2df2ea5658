// The history format, version 1: one JSON object per line, as docs/verification.md and SPEC.md
// ("Verification toolkit") define it. These types are the contract between the recorder (the
// workloads and the nemesis write it), the reader (which validates it) and the checker (which
// judges it). Field names are the wire names (snake_case) because the lines are read by tools in
// other languages too; everything derived from them inside the checker is camelCase with units.

/** The outcome kinds of a line. `invoke` opens an operation; the other three close it. */
export type EventType = "invoke" | "ok" | "fail" | "info";

/**
 * Operation names. `config` is the first line only; `fault` lines come from the nemesis.
 * `dead-letter` is an ack with `dead_letter=true` (a next-wave line: SPEC "Dead letters").
 */
export type OpName = "config" | "produce" | "consume" | "ack" | "extend" | "nack" | "replay" | "fault" | "dead-letter";

export const EVENT_TYPES: readonly EventType[] = ["invoke", "ok", "fail", "info"];
export const OP_NAMES: readonly OpName[] = ["config", "produce", "consume", "ack", "extend", "nack", "replay", "fault", "dead-letter"];

/** What the nemesis can do. Four of them restart a process and so need boot evidence. */
export type FaultKind =
  | "terminate"
  | "kill"
  | "start"
  | "pause"
  | "resume"
  | "cut"
  | "heal"
  | "latency"
  | "power-loss"
  | "move";

export const FAULT_KINDS: readonly FaultKind[] = [
  "terminate",
  "kill",
  "start",
  "pause",
  "resume",
  "cut",
  "heal",
  "latency",
  "power-loss",
  "move",
];

/** Fault kinds whose effect is only believed when the node later reports a different boot id. */
export const FAULT_KINDS_NEEDING_EVIDENCE: readonly FaultKind[] = ["kill", "power-loss", "terminate", "start"];
/** Fault kinds that undo another (a restart, a resume, a heal): a run's "faults" count the others. */
export const HEALING_FAULT_KINDS: ReadonlySet<string> = new Set<FaultKind>(["start", "resume", "heal"]);

/** A message id as the driver wrote it; numbers and strings name the same id when they print alike. */
export type MsgId = string | number;

export interface ChildConfig {
  topic: string;
  kind: "fanout" | "delay" | "replica" | "remote";
  delay_ms?: number;
  /**
   * Remote children, optional: the nodes of the other cluster (as its deliveries name them), any
   * of which a push to it may pass through. A kill of one of them may make the copier push a copy
   * again, and the checker accepts such a second copy only from a node listed here or the node
   * that owns the copy's partition.
   */
  nodes?: string[];
  /**
   * Optional: the longest the copier waits for the answer to a copy sent to this child (a push to
   * the remote cluster, a forward to an owner of the child's partitions). Overrides the config's
   * copy_timeout_ms for this path (the checker's re-copy rule).
   */
  copy_timeout_ms?: number;
}

export interface TopicConfig {
  partitions: number;
  visibility_timeout_ms?: number;
  /** Optional: copies of each partition (above 1: a replicated topic, judged with the failover rule). */
  replication_factor?: number;
  /** Optional: what a 202 waited for on a replicated topic. */
  acks?: "leader" | "quorum";
  /**
   * Optional (next wave, SPEC "Dead letters"): how many times a message is delivered from this
   * topic before it moves to `dead_letter_topic` (1..1000; null or absent: unlimited).
   */
  max_deliveries?: number | null;
  /** Optional: the topic (of this config) dead letters of this topic move to; required with max_deliveries. */
  dead_letter_topic?: string | null;
}

/** The value of the first line: what the checker needs to know about the run. */
export interface ConfigValue {
  ack_flush_ms: number;
  ack_sync_ms: number;
  visibility_timeout_ms: number;
  topics: Record<string, TopicConfig>;
  children?: Record<string, ChildConfig[]>;
  /**
   * Optional: the longest a copier waits for the answer to a copy it sent to another node (a
   * forward to a child partition's owner, a push to a remote cluster). The checker's re-copy rule
   * allows that long between a copy becoming readable and the copier learning it is durable;
   * without it, ack_flush_ms.
   */
  copy_timeout_ms?: number;
  /**
   * Optional: how far behind its leader a follower's copy of the acks may be on a replicated
   * topic (beyond the shipping interval, ack_flush_ms). The failover rule explains a forgotten
   * ack within ack_flush_ms + replication_lag_ms of the failover; without it, ack_flush_ms.
   */
  replication_lag_ms?: number;
  /**
   * Optional: how long after an outage of a follower or its leader ends (a start, resume or
   * heal) the acks queued for the follower may take to reach it, the leader joining it again
   * first. The follower rule (a crash of a follower that later leads) uses it; without it,
   * replication_lag_ms (or ack_flush_ms).
   */
  replication_rejoin_ms?: number;
  /**
   * Optional: the nodes' control-plane lease (a cluster run). A leader frozen or cut off stops
   * acknowledging by its lease deadline, so the failover rule explains only the leases and acks
   * it took before the fault's completion plus this; without it, until the resume or heal.
   */
  node_lease_ms?: number;
  [extra: string]: unknown;
}

// ---- values, per operation and line type ----

export interface ProduceInvoke {
  topic: string;
  msg: MsgId;
  key?: string | null;
  /**
   * Next wave (SPEC "Idempotent producers"), both or neither: the producer id and the sequence
   * the produce carried. A re-send repeats its msg, producer and sequence.
   */
  producer?: string;
  sequence?: number;
}
export interface ProduceOk {
  partition: number;
  offset: number;
  status?: 202;
  /**
   * Optional: the partition's owner that stored it and its boot (the answer's Narad-Owner and
   * Narad-Owner-Boot). Its copier makes the copies to the children; a boot reported here counts
   * as a report of that node's boot, like a delivery's.
   */
  node?: string;
  boot?: string;
  /** Next wave: the broker answered that this (producer, sequence) was stored already (at partition, offset). */
  duplicate?: boolean;
}
export interface ConsumeInvoke {
  topic: string;
}
export interface ConsumeOkMessage {
  topic: string;
  msg: MsgId;
  partition: number;
  offset: number;
  /** Identifies the receipt handle of this delivery; acks name it. */
  delivery: string | number;
  delivery_count?: number;
  /** The partition's owner that holds the lease, and its boot id. */
  node: string;
  boot: string;
  /**
   * Next wave, on a dead-letter topic: where the message came from (the Narad-Origin-* headers,
   * or the batch JSON's `origin`): its topic, partition and offset there, and how many times it
   * had been delivered there when it moved.
   */
  origin?: OriginValue;
}
export interface OriginValue {
  topic: string;
  partition: number;
  offset: number;
  deliveries: number;
  produced_at?: number;
}
export interface ConsumeOkEmpty {
  topic: string;
  msg: null;
}
export type ConsumeOk = ConsumeOkMessage | ConsumeOkEmpty;
/** The invoke of an ack, extend, nack or dead-letter (an ack with dead_letter=true). */
export interface HandleInvoke {
  topic: string;
  msg: MsgId;
  delivery: string | number;
}
export interface ReplayInvoke {
  topic: string;
  partition: number;
  offset: number;
}
export interface ReplayOk {
  msgs: Array<[number, MsgId]>;
}
export interface FaultValue {
  kind: FaultKind;
  node?: string;
  /** A partition number (with `topic`), or "TOPIC/P". */
  partition?: number | string;
  topic?: string;
  /** Evidence of a start: the boot id of the new process. */
  boot?: string;
  [evidence: string]: unknown;
}

/** One line of a history, as parsed. `value` is typed loosely: see the per-operation types above. */
export interface HistoryEvent {
  index: number;
  time_ns: number;
  process: string;
  type: EventType;
  f: OpName;
  value: Record<string, unknown>;
}

/** The process name the nemesis uses for fault lines. */
export const NEMESIS_PROCESS = "nemesis";
