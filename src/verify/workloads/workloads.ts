// The workloads: one table of profiles, each a shape of load plus a fault schedule.
// docs/verification-workloads.md says what each one checks and what it cannot.
//
// Design note. A workload is data, not code: how many producer and consumer processes, how fast,
// what consumers do with a delivery, which faults the nemesis picks from and how often. The
// driver runs any profile the same way, so every workload gets the same recording, the same final
// drain and the same checker, and a new one is a new row. Options of `narad verify run` override
// single fields (duration, rate, seed) without changing what the workload is.

import type { ConsumerMix, FaultSchedule } from "./protocol.js";

export type WorkloadName = "e2e" | "chaos" | "steady" | "power-loss" | "pause" | "partition";
export const WORKLOAD_NAMES: readonly WorkloadName[] = ["e2e", "chaos", "steady", "power-loss", "pause", "partition"];

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
  /** e2e: produce a known set, consume until all of it is acked, fail on any duplicate at all. */
  knownSet: boolean;
  faults: FaultSchedule | null;
  /** Nodes run in the test-only power-loss mode. */
  powerLoss: boolean;
  /** Clients reach the node through the fault proxy. */
  proxy: boolean;
  /** Deadline of one request beyond its long-poll wait. */
  requestTimeoutMs: number;
}

const ACK_ONLY: ConsumerMix = { ack: 1, nack: 0, extend: 0, slow: 0, lapse: 0, late: 0 };
/** Under faults: mostly acks, a few nacks and extends so those paths meet the faults too. */
const FAULT_MIX: ConsumerMix = { ack: 90, nack: 4, extend: 3, slow: 3, lapse: 0, late: 0 };
const STEADY_MIX: ConsumerMix = { ack: 66, nack: 8, extend: 7, slow: 8, lapse: 7, late: 4 };

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
  faults: null,
  powerLoss: false,
  proxy: false,
  requestTimeoutMs: 5_000,
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
};

export function isWorkloadName(s: string): s is WorkloadName {
  return (WORKLOAD_NAMES as readonly string[]).includes(s);
}
