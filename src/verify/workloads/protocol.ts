// Messages between the driver (the one recorder of a run) and its worker processes, and the
// specs of the roles a worker can play.
//
// Design note: why a round trip before every request.
// History v1 wants `time_ns` taken by the recorder, an invoke recorded before its request leaves
// and a completion recorded after its answer arrived. Workers are separate processes with their
// own clocks, so they do not timestamp anything. Instead, for every operation a worker:
//   1. sends `inv` over the IPC channel and waits for `go`; the driver records the invoke line
//      (taking its time) *before* it sends `go`, so the recorded invoke precedes the request;
//   2. sends the HTTP request only after `go`;
//   3. sends `done` once the whole answer is read; the driver records the completion when that
//      message arrives, necessarily after the answer did.
// Each recorded interval therefore contains the real one: it can only be wider, never narrower.
// A wider interval lets the checker consider more orders, so it can hide a bug that needs a tight
// window but never invents one. IPC messages of one channel arrive in order, so a lane's `done`
// is recorded before its next `inv`. The cost is one IPC round trip per operation (well under a
// millisecond on loopback), which bounds a worker's rate but not its correctness.

import type { InjectedFaultKind } from "../nemesis/index.js";

export type OpF = "produce" | "consume" | "ack" | "extend" | "nack" | "replay" | "dead-letter";

/**
 * The history process of the acks a lane sends riding on its consumes (`consume?ack=H`): the ack
 * and the consume are one request, so they are two operations at once, and a process has one at a
 * time. Every lane owns its own and this one.
 */
export function ackProcess(lane: string): string {
  return `${lane}/ack`;
}
export type CompletionType = "ok" | "fail" | "info";

/** Driver → worker. */
export type DriverMessage =
  | { t: "init"; spec: WorkerSpec }
  /** The invoke of the process's pending operation is recorded: send the request. */
  | { t: "go"; p: string }
  /** Finish the operation in progress, then end every lane and report `stopped`. */
  | { t: "stop" }
  /** Producers: produce only while open (load cycles). A close is answered with `gated`. */
  | { t: "gate"; open: boolean };

/** Worker → driver. */
export type WorkerMessage =
  | { t: "ready" }
  | { t: "inv"; p: string; f: OpF; value: Record<string, unknown> }
  | { t: "done"; p: string; type: CompletionType; value: Record<string, unknown> }
  /** Every lane has ended (quota reached or stopped); the worker exits after this. */
  | { t: "stopped"; error?: string }
  /** The gate is closed: no lane of this worker sends another invoke until it opens. */
  | { t: "gated" };

/** Weights of what a consumer does with a delivery; zero weights are never picked. */
export interface ConsumerMix {
  /** Ack at once. */
  ack: number;
  /** Nack at once: the message is available again. */
  nack: number;
  /** Hold 40% of the visibility timeout, extend, hold 40% again, ack. */
  extend: number;
  /** Hold half the visibility timeout, then ack. */
  slow: number;
  /** Never settle: the lease lapses and someone else gets the message. */
  lapse: number;
  /** Ack after the lease lapsed (1.1–1.3 timeouts): must answer 410 once the message was redelivered. */
  late: number;
}

export interface TopicSpec {
  name: string;
  partitions: number;
  visibilityTimeoutMs: number;
  /** Copies of each partition (a cluster only); default 1. */
  replicationFactor?: number;
  acks?: "leader" | "quorum";
  /** Next wave (dead letters): deliveries before the move (null: unlimited) and the topic moved to. */
  maxDeliveries?: number | null;
  deadLetterTopic?: string;
}

export interface ProducerSpec {
  role: "producer";
  topic: string;
  /** Per lane: at most this many produces (the e2e known set), else until stopped. */
  quotaPerLane: number | null;
  /** Per lane: the pause between the starts of two produces (pacing), ms. */
  intervalMs: number;
  /** Payload sizes, bytes, uniform in [min, max]; the message id fills the start. */
  payloadBytesMin: number;
  payloadBytesMax: number;
  /** Share of produces that carry a key (one of `keys` keys). */
  keyedShare: number;
  keys: number;
  /** Produce through an idempotent producer of the SDK (next wave), which re-sends ambiguous answers itself. */
  idempotent?: boolean;
}

export interface ConsumerSpec {
  role: "consumer";
  topic: string;
  visibilityTimeoutMs: number;
  mix: ConsumerMix;
  /** Long-poll wait of each consume, ms. */
  waitMs: number;
  /** Next wave, on a topic with a dead-letter topic: which messages fail on purpose (roles.ts). */
  deadLetters?: PoisonSpec;
}

/**
 * Messages that fail on purpose, chosen by their id (so every consumer treats one message alike):
 * a share is nacked at every delivery until the broker dead-letters it, a share is acked with
 * dead_letter=true at its first delivery.
 */
export interface PoisonSpec {
  nackShare: number;
  deadLetterShare: number;
}

/** Deterministic lease scenarios on a private one-partition topic (see roles.ts). */
export interface ProberSpec {
  role: "prober";
  topic: string;
  visibilityTimeoutMs: number;
}

export interface ReplayerSpec {
  role: "replayer";
  topics: TopicSpec[];
  intervalMs: number;
  /** Records per replay page. */
  limit: number;
}

export type RoleSpec = ProducerSpec | ConsumerSpec | ProberSpec | ReplayerSpec;

/** HTTP Basic credentials of a client (security on). */
export interface Credentials {
  user: string;
  password: string;
}

export interface WorkerSpec {
  /** Worker number, for names and seeds. */
  worker: number;
  /** History process names, one per lane (a lane is one logical client with its own connections). */
  processes: string[];
  /**
   * Where the lanes connect: nodes, or the fault proxies in front of them. With several, each lane
   * sends its requests to them in turn (lane i of worker w starts at w + i), so a cluster's
   * requests spread over every node and most of them are forwarded.
   */
  urls: string[];
  /** Sent with every request when the nodes run with security on. */
  auth?: Credentials;
  /** Producers wait for the driver to open their gate before the first produce (load cycles). */
  gateClosed?: boolean;
  seed: number;
  /** Deadline of one request beyond its long-poll wait, ms. */
  requestTimeoutMs: number;
  /** The SDK's transport for produce (default "http"). */
  transport?: "http" | "stream";
  role: RoleSpec;
}

/** Fault schedule of a workload (see the nemesis). */
/** A fault a schedule may pick: the nemesis's, or on a replicated topic the leader's (failover.ts). */
export type RunFaultKind = InjectedFaultKind | "isolate" | "pause-kill" | "lag-kill" | "lag-power-loss";

export interface FaultSchedule {
  kinds: RunFaultKind[];
  /** Which nodes: every node of the run (default), only the system under test, only the remote one. */
  targets?: "all" | "main" | "remote";
  intervalMs: number;
  intervalJitterMs: number;
  holdMs: number;
  holdJitterMs: number;
}
