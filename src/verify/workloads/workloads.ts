// The workloads: one table of profiles, each a shape of load plus a fault schedule.
// docs/verification-workloads.md says what each one checks and what it cannot.
//
// Design note. A workload is data, not code: how many producer and consumer processes, how fast,
// what consumers do with a delivery, which faults the nemesis picks from and how often. The
// driver runs any profile the same way, so every workload gets the same recording, the same final
// drain and the same checker, and a new one is a new row. Options of `narad verify run` override
// single fields (duration, rate, seed) without changing what the workload is.

import type { ConsumerMix, FaultSchedule } from "./protocol.js";
import type { CycleSpec } from "./cycle.js";

export type WorkloadName = "e2e" | "e2e-chaos" | "chaos" | "steady" | "power-loss" | "pause" | "partition" | "children" | "failover" | "idempotent" | "dead-letters";
export const WORKLOAD_NAMES: readonly WorkloadName[] = ["e2e", "e2e-chaos", "chaos", "steady", "power-loss", "pause", "partition", "children", "failover", "idempotent", "dead-letters"];

/**
 * The next wave's workloads (issue 14), which need a server with idempotent producers or dead
 * letters: on one without, the run stops at its start with one line saying so (next-wave.ts).
 */
export const NEXT_WAVE_WORKLOADS: readonly WorkloadName[] = ["idempotent", "dead-letters"];

/**
 * A child topic attached to the main topic before any produce. fanout, delay and replica children
 * live on the system under test (a replica only on a cluster: it is created by its attach, with
 * the parent's partitions, on other nodes than the parent's); a remote child lives on a second,
 * separate Narad that the run starts (one node, or a cluster of two when the system under test is
 * a cluster; security on), and the copies reach it through its HTTP API with credentials.
 */
export interface ChildProfile {
  topic: string;
  kind: "fanout" | "delay" | "replica" | "remote";
  /** delay children only. */
  delayMs?: number;
  /** Ignored for a replica, which has its parent's. */
  partitions: number;
}

/** Dead letters on the main topic (next wave): its max_deliveries, its dead-letter topic, the messages failed on purpose. */
export interface DeadLetterProfile {
  /** The dead-letter topic's name (its own topic of the run, one partition per main partition). */
  topic: string;
  maxDeliveries: number;
  /** Share of messages every consumer nacks at each delivery (the broker moves them after maxDeliveries). */
  nackShare: number;
  /** Share of messages acked with dead_letter=true at their first delivery. */
  deadLetterShare: number;
  /** Consumer processes (of `consumerLanes` lanes each) of the dead-letter topic. */
  consumers: number;
}

export interface WorkloadProfile {
  name: WorkloadName;
  summary: string;
  durationS: number;
  /** Produces per second over all producer lanes (a target; refusals back off). */
  rate: number;
  producers: number;
  producerLanes: number;
  consumers: number;
  consumerLanes: number;
  partitions: number;
  visibilityTimeoutMs: number;
  payloadBytesMin: number;
  payloadBytesMax: number;
  mix: ConsumerMix;
  /** Long-poll wait of the consumers' consumes. */
  consumeWaitMs: number;
  /** Run the lease scenarios on a private topic (roles.ts). */
  prober: boolean;
  /** Replay random pages while the load runs. */
  replayer: boolean;
  /**
   * Produce a known set (rate × duration; with faults, what got a 202 by the end of the
   * duration), consume until all of it is acked, or fail at a deadline.
   */
  knownSet: boolean;
  /** Fail the run on any delivery of a message after its first, explained or not (e2e). */
  duplicatesFail: boolean;
  /** Children of the main topic, attached before the load starts. */
  children: ChildProfile[];
  /** Consumer processes (of `consumerLanes` lanes each) per child path. */
  childConsumers: number;
  /**
   * Load cycles (cycle.ts): produce in bursts and inject each fault in the quiet window after one,
   * when no copy to a child is in flight; null: continuous load, faults from the nemesis.
   */
  cycle: CycleSpec | null;
  faults: FaultSchedule | null;
  /** Nodes run in the test-only power-loss mode. */
  powerLoss: boolean;
  /** Clients reach the node through the fault proxy. */
  proxy: boolean;
  /** Deadline of one request beyond its long-poll wait. */
  requestTimeoutMs: number;
  /**
   * Copies of each partition of the main topic (above 1: a cluster with at least that many
   * nodes, faults aimed at the partitions' leaders by failover.ts); --replication-factor.
   */
  replicationFactor: number;
  /** A replicated main topic's acks mode; --acks. */
  acks: "leader" | "quorum";
  /** Producers produce through the SDK's idempotent producer (next wave). */
  idempotent: boolean;
  /** The main topic has max_deliveries and a dead-letter topic (next wave); null: none. */
  deadLetters: DeadLetterProfile | null;
}

const ACK_ONLY: ConsumerMix = { ack: 1, nack: 0, extend: 0, slow: 0, lapse: 0, late: 0 };
/** Under faults: mostly acks, a few nacks and extends so those paths meet the faults too. */
const FAULT_MIX: ConsumerMix = { ack: 90, nack: 4, extend: 3, slow: 3, lapse: 0, late: 0 };
const STEADY_MIX: ConsumerMix = { ack: 66, nack: 8, extend: 7, slow: 8, lapse: 7, late: 4 };

/** The delay child's delay in the children workload. */
export const CHILD_DELAY_MS = 5_000;

/**
 * The children workload's quiet windows (`--quiet-windows`, and calibration; cycle.ts has the
 * rules): a 500 ms burst (at least 20 produces);
 * its faults at the latest 4 s after it: room for slow copies on a loaded machine, 0.5 s (a slow
 * graceful stop) before the burst's first delay copy falls due, and time for the parent's owner
 * to be back before it (a restart takes 0.5 to 2.5 s here), so a node that gets restarts wrong
 * copies the burst early. The next burst 2.5 s after the pause, or once the parent's owner is
 * back. The remote node stays down 3 ± 0.2 s: through the next burst. The next faults come once
 * the burst's delay copies are made (≥ 6.3 s after the pause).
 */
export const CHILDREN_CYCLE: CycleSpec = {
  burstMs: 500,
  burstProducesMin: 20,
  gapMs: 2_500,
  delayMs: CHILD_DELAY_MS,
  faultMarginMs: 500,
  windowMs: 2_000,
  holdMs: 200,
  holdJitterMs: 100,
  remoteHoldMs: 3_000,
  remoteHoldJitterMs: 200,
};

const BASE = {
  durationS: 20,
  rate: 200,
  producers: 2,
  producerLanes: 2,
  consumers: 2,
  consumerLanes: 2,
  partitions: 3,
  visibilityTimeoutMs: 3_000,
  payloadBytesMin: 32,
  payloadBytesMax: 512,
  mix: FAULT_MIX,
  consumeWaitMs: 200,
  prober: false,
  replayer: true,
  knownSet: false,
  duplicatesFail: false,
  children: [],
  childConsumers: 1,
  cycle: null,
  faults: null,
  powerLoss: false,
  proxy: false,
  requestTimeoutMs: 5_000,
  replicationFactor: 1,
  acks: "quorum",
  idempotent: false,
  deadLetters: null,
} satisfies Omit<WorkloadProfile, "name" | "summary">;

export const WORKLOADS: Record<WorkloadName, WorkloadProfile> = {
  e2e: {
    ...BASE,
    name: "e2e",
    summary: "a known set of messages produced, consumed and acked with nothing broken; any duplicate fails the run",
    durationS: 5,
    rate: 300,
    // Long enough that no lease lapses on a busy machine: in e2e a redelivery is a failure.
    visibilityTimeoutMs: 10_000,
    mix: ACK_ONLY,
    knownSet: true,
    duplicatesFail: true,
  },
  "e2e-chaos": {
    ...BASE,
    name: "e2e-chaos",
    summary: "the e2e known set while a random node is stopped (SIGTERM, SIGKILL after 10 s) every few seconds and started again; every message acked before the deadline, every redelivery explained",
    durationS: 10,
    // Below e2e's: a third of the requests meet a node that is down, and consumers must keep up.
    rate: 150,
    // Long enough that no lease lapses on a busy machine; redeliveries come from the stops only.
    visibilityTimeoutMs: 5_000,
    mix: ACK_ONLY,
    knownSet: true,
    faults: { kinds: ["terminate"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_000, holdJitterMs: 500 },
  },
  chaos: {
    ...BASE,
    name: "chaos",
    summary: "terminate (SIGTERM) or kill (SIGKILL) a random node every few seconds and start it again",
    faults: { kinds: ["terminate", "kill"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_000, holdJitterMs: 500 },
  },
  steady: {
    ...BASE,
    name: "steady",
    summary: "producers and consumers together; consumers ack, nack, extend, ack slowly or late, or let leases lapse; lease scenarios",
    durationS: 15,
    mix: STEADY_MIX,
    prober: true,
  },
  "power-loss": {
    ...BASE,
    name: "power-loss",
    summary: "nodes in the test-only power-loss mode lose what they had not fsynced, every few seconds",
    powerLoss: true,
    payloadBytesMax: 4_096,
    rate: 400,
    faults: { kinds: ["power-loss"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 500, holdJitterMs: 250 },
  },
  pause: {
    ...BASE,
    name: "pause",
    summary: "freeze a node (SIGSTOP) for a while and let it go on (SIGCONT)",
    // Shorter than most pauses: requests in flight time out and become ambiguous, as a real
    // client's would, while the node later acts on them.
    requestTimeoutMs: 1_000,
    faults: { kinds: ["pause"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_500, holdJitterMs: 500 },
  },
  partition: {
    ...BASE,
    name: "partition",
    summary: "clients reach the node through the fault proxy, whose line is cut or slowed every few seconds",
    proxy: true,
    // Shorter than most cuts, for the same reason as in pause.
    requestTimeoutMs: 1_000,
    faults: { kinds: ["cut", "latency"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_500, holdJitterMs: 500 },
  },
  children: {
    ...BASE,
    name: "children",
    summary:
      "a parent with a fan-out, a delay, a replica (clusters only) and a remote child (on a second Narad or cluster, security on), consumers on every path; under continuous load a random node of either system is terminated or killed every few seconds and started again",
    durationS: 20,
    // Fewer processes than the other workloads: three more paths to consume, and a second node.
    producers: 1,
    consumers: 1,
    // Every path is judged on its own: the parent and each child get their own consumers.
    childConsumers: 1,
    children: [
      { topic: "t.fan", kind: "fanout", partitions: 2 },
      { topic: "t.delay", kind: "delay", delayMs: CHILD_DELAY_MS, partitions: 2 },
      // Left out on one node (a replica needs a cluster).
      { topic: "t.replica", kind: "replica", partitions: 3 },
      // A name no topic of the system under test has: the checker tells paths apart by name.
      { topic: "remote-t", kind: "remote", partitions: 2 },
    ],
    // The nemesis's usual schedule over every node of both systems: each main node owns a
    // partition of the parent. With --quiet-windows, the load cycle's windows instead (cycle.ts).
    faults: { kinds: ["terminate", "kill"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_000, holdJitterMs: 500 },
    cycle: null,
  },
  failover: {
    ...BASE,
    name: "failover",
    summary:
      "a topic with 3 copies (quorum by default, --acks leader) on a cluster; in turn, its partitions' leaders are killed, powered off, frozen past their lease, cut from their followers and PostgreSQL, killed while a follower is frozen, killed after a follower fell behind, or killed while a follower loses power",
    durationS: 40,
    rate: 150,
    replicationFactor: 3,
    acks: "quorum",
    // Long enough that a lease handed out just before a fault rarely lapses on its own.
    visibilityTimeoutMs: 3_000,
    faults: { kinds: ["kill", "power-loss", "pause", "isolate", "pause-kill", "lag-kill", "lag-power-loss"], intervalMs: 1_500, intervalJitterMs: 500, holdMs: 1_000, holdJitterMs: 300 },
  },
  idempotent: {
    ...BASE,
    name: "idempotent",
    idempotent: true,
    summary:
      "producers produce through the SDK's idempotent producer, which re-sends every ambiguous answer with its sequence, while nodes in the power-loss mode are killed or lose power every few seconds: a message stored twice is duplicate-produce",
    powerLoss: true,
    // Short, so kills leave many answers ambiguous for the producer to re-send.
    requestTimeoutMs: 2_000,
    faults: { kinds: ["kill", "power-loss"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 500, holdJitterMs: 250 },
  },
  "dead-letters": {
    ...BASE,
    name: "dead-letters",
    summary:
      "a topic with max_deliveries 3 and a dead-letter topic; consumers fail a tenth of the messages on purpose (a nack a quarter of a visibility timeout after each delivery) and dead-letter a twentieth at once, while a node is killed or stopped every few seconds: each such message must arrive once on the dead-letter topic, never early, and never again on its own",
    visibilityTimeoutMs: 2_000,
    deadLetters: { topic: "t.dlq", maxDeliveries: 3, nackShare: 0.1, deadLetterShare: 0.05, consumers: 1 },
    faults: { kinds: ["kill", "terminate"], intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_000, holdJitterMs: 500 },
  },
};

// The failover workload sits in the table below; its faults are the leader's (failover.ts).

export function isWorkloadName(s: string): s is WorkloadName {
  return (WORKLOAD_NAMES as readonly string[]).includes(s);
}
