// A run's options and what they resolve to: the workload's profile with the caller's overrides,
// checked (every bad combination is a RangeError naming the flag), the topics it makes, and the
// run's limits and timeouts. driver.ts runs what resolveRun returns.

import type { ConfigValue } from "../history/types.js";
import { randomSeed } from "../nemesis/index.js";
import type { Report, Verdict } from "../checker/index.js";
import { DEFAULTS } from "../../protocol/wire.js";
import type { ConsumerMix, FaultSchedule, RunFaultKind, TopicSpec } from "./protocol.js";
import type { TrackerCounts } from "./tracker.js";
import { WORKLOADS, type ChildProfile, type WorkloadName, type WorkloadProfile } from "./workloads.js";
import type { CycleSpec } from "./cycle.js";
import { isReplicatedFaultKind, needsPowerLoss, type ReplicatedFaultKind } from "./failover.js";

export const MAIN_TOPIC = "t";
/** What consumers of a dead-letter topic do: ack, now and then slowly or after an extend. */
export const DEAD_LETTER_MIX = { ack: 90, nack: 0, extend: 5, slow: 5, lapse: 0, late: 0 };
export const PROBE_TOPIC = "probe";

export const RUN_LIMITS = {
  /** Messages produced in one run at most (over all lanes); keeps the driver's maps bounded. */
  messagesMax: 1_000_000,
  /** Worker processes in one run at most. */
  workersMax: 64,
  /** Lanes of one worker at most. */
  lanesMax: 32,
  /** e2e: after the duration, how long consumers may take to ack the known set. */
  knownSetGraceMs: 60_000,
  /** From `stop` to a worker's exit; then it is killed. */
  workerStopGraceMs: 30_000,
  /** For every worker's `ready`. */
  workerReadyTimeoutMs: 15_000,
  /** Lanes draining the main topic at once (other topics: half as many, at least one). */
  drainLanes: 4,
  /** Load cycles (and `faultsMin`): how long past the duration a run may go on for the faults it waits for. */
  cycleSettleGraceMs: 15_000,
  /** Nodes of the system under test at most. */
  nodesMax: 9,
  /** Consecutive errors of one drain lane before it gives up. */
  drainErrorsMax: 50,
  /** Replay pages of the audit at most. */
  auditPagesMax: 100_000,
  /** Added after the last possible lease end before the final drain (on top of the checker's slack). */
  drainMarginMs: 250,
  /**
   * After the last heal the load goes on this long before the workers stop, so the run shows the
   * broker recovering (the silence after the last fault is measured against real traffic, not
   * against the drain's wait).
   */
  recoverMs: 2_000,
  /** Notes kept in a run's result at most. */
  notesMax: 100,
  /** Node output kept in nodes.log per node. */
  nodeLogCharsMax: 256 * 1024,
} as const;

/** cluster.forward_timeout_ms of the run's cluster nodes (set explicitly, so the config line can say it). */
export const FORWARD_TIMEOUT_MS = 5_000;
/**
 * How long the broker's copier waits for a remote cluster's answer to a push (REMOTE_PUSH_TIMEOUT_MS
 * of src/broker/children.ts; the run cannot import server code, so the number is repeated here).
 */
export const REMOTE_PUSH_TIMEOUT_MS = 10_000;

/**
 * A replicated run's cluster settings: short leases, so a failover takes about two seconds (the
 * lease, then an election within ELECTION_CHECK_MS), and a write waits for its acks mode at most
 * two seconds before `503 no_quorum`, well within a worker's request timeout.
 */
export const REPLICATED_ENV: Readonly<Record<string, string>> = {
  NARAD_CLUSTER_HEARTBEAT_INTERVAL_MS: "200",
  NARAD_CLUSTER_NODE_LEASE_MS: "1500",
  NARAD_CLUSTER_LEASE_SAFETY_MARGIN_MS: "200",
  NARAD_CLUSTER_RESYNC_INTERVAL_MS: "1000",
  NARAD_REPLICATION_ACK_TIMEOUT_MS: "2000",
};
/** A pause or an isolation of a leader is held at least this long: the lease (1.5 s), an election, and margin. */
export const FAILOVER_HOLD_MIN_MS = 3_000;
/**
 * The replication lag a replicated run allows the followers' copy of the acks (the config's
 * replication_lag_ms): acks ship every ack_flush_ms, one request at a time per follower, and on
 * a loaded two-core machine a request can wait that long. A failover explains a forgotten ack
 * within ack_flush_ms plus this (the checker's failover rule).
 */
export const REPLICATION_LAG_MS = 1_000;
/**
 * The config's replication_rejoin_ms: after a follower (or its leader) is back from an outage, the
 * acks queued for it wait for the leader to join it again, whose retries back off up to 2 s
 * (REPLICATION_LIMITS.backoffMaxMs in src/cluster/replication/leader.ts), then for the next
 * shipping interval; with the lag of a loaded machine on top.
 */
export const REPLICATION_REJOIN_MS = 3_000;

/** Nodes of a remote child's other cluster when the system under test is a cluster (r1, r2). */
export const REMOTE_CLUSTER_NODES = 2;

/** The probe topic's visibility timeout: short, so its scenarios are quick. */
export const PROBE_VISIBILITY_TIMEOUT_MS = 1_000;

export interface RunProgress {
  phase: "start" | "run" | "heal" | "recover" | "stop" | "catch-up" | "drain-wait" | "drain" | "audit" | "check" | "done";
  elapsedMs: number;
  /** The rate over the last interval (it dips inside fault windows). */
  opsPerS: number;
  /** The rate since the load began (the "run" phase): what the run as a whole did. */
  opsPerSAvg: number;
  ops: number;
  /** Messages with a 202 not yet acked with a 204. */
  pending: number;
  /** Faults injected so far (healing not counted). */
  faults: number;
  produceOk: number;
  deliveries: number;
}

export interface RunOptions {
  workload: WorkloadName;
  /** Where history.jsonl, report.json, report.html and nodes.log go. */
  outDir: string;
  /** Nodes of the system under test: 1 (default) is a single node, more a cluster. */
  nodes?: number;
  /**
   * Security on: nodes without --dev, an admin password, workers with credentials. Default: on
   * for a cluster, off for a single node. (A remote child's system always has it on.)
   */
  security?: boolean;
  /** postgres:// URL of a server for the control plane (a fresh database is made); default: an embedded PostgreSQL. */
  controlPlaneUrl?: string;
  durationS?: number;
  /** Default: a random seed (printed and recorded in the config line). */
  seed?: number;
  /** Produces per second over all producers. */
  rate?: number;
  /** Keep the nodes' data directories (their path is in the result). */
  keep?: boolean;
  // Knobs for calibration and tests; each overrides one field of the workload's profile.
  /** Seeded broker bugs (NARAD_TEST_BUGS), for calibration. */
  bugs?: string[];
  /** Fault kinds of the schedule; [] runs without faults. On a replicated topic, failover.ts's kinds. */
  faults?: RunFaultKind[];
  /** Copies of each partition of the main topic (above 1 needs --nodes at least that many); the workload's by default. */
  replicationFactor?: number;
  /** A replicated main topic's acks mode; default quorum. */
  acks?: "leader" | "quorum";
  faultIntervalMs?: number;
  faultHoldMs?: number;
  /** Which nodes the faults hit (see FaultSchedule). */
  faultTargets?: FaultSchedule["targets"];
  /**
   * With the nemesis: the load goes on past the duration until it has injected this many faults
   * (at most RUN_LIMITS.cycleSettleGraceMs longer), so a short run on a slow machine still meets
   * the faults its seed plans. Default 0.
   */
  faultsMin?: number;
  /** Children of the main topic (replaces the workload's). */
  children?: ChildProfile[];
  /** Load cycles with faults in quiet windows (replaces the workload's; null: continuous load). */
  cycle?: CycleSpec | null;
  visibilityTimeoutMs?: number;
  partitions?: number;
  producers?: number;
  producerLanes?: number;
  consumers?: number;
  consumerLanes?: number;
  payloadBytesMin?: number;
  payloadBytesMax?: number;
  mix?: Partial<ConsumerMix>;
  prober?: boolean;
  /** Server limit limits.pending_sync_bytes (min 1 MiB): small values provoke 429s. */
  pendingSyncBytes?: number;
  /** How the workers' SDK clients produce (the SDK's `transport`); default "http". */
  transport?: "http" | "stream";
  ackFlushMs?: number;
  ackSyncMs?: number;
  /** cluster.forward_timeout_ms of the nodes (default FORWARD_TIMEOUT_MS). */
  forwardTimeoutMs?: number;
  /** Write report.html next to report.json; default true. */
  html?: boolean;
  signal?: AbortSignal;
  onProgress?: (p: RunProgress) => void;
  /** Progress is reported this often. */
  progressIntervalMs?: number;
}

export interface Finding {
  /** violation: the contract was broken (fails the run); harness: the run could not do its job. */
  kind: "violation" | "harness";
  text: string;
}

export interface RunResult {
  workload: WorkloadName;
  seed: number;
  outDir: string;
  historyPath: string;
  reportJsonPath: string | null;
  reportHtmlPath: string | null;
  /** Temp data directories kept with `keep` (else removed). */
  dataDirs: string[];
  /** The checker's verdict; null when the run was interrupted or crashed before the check. */
  verdict: Verdict | null;
  report: Report | null;
  /** 0 valid, 1 invalid, 2 unknown, 130 interrupted. */
  exitCode: number;
  findings: Finding[];
  /** Remarks on how the run went (fault windows skipped, …); they change no verdict. */
  notes: string[];
  counts: TrackerCounts;
  events: number;
  durationMs: number;
  interrupted: boolean;
  config: ConfigValue;
}

/** A topic of the run and the system it lives on. */
export interface RunTopic extends TopicSpec {
  system: "main" | "remote";
}

export interface ResolvedRun {
  profile: WorkloadProfile;
  seed: number;
  nodes: number;
  security: boolean;
  durationS: number;
  rate: number;
  faults: FaultSchedule | null;
  bugs: string[];
  ackFlushMs: number;
  ackSyncMs: number;
  forwardTimeoutMs: number;
  topics: RunTopic[];
  remote: boolean;
  /** Nodes of the remote child's system (0: none). */
  remoteNodes: number;
  /** Above 1: the main topic is replicated and the faults are the leader's (failover.ts). */
  replicationFactor: number;
  acks: "leader" | "quorum";
}

export function resolveRun(o: RunOptions): ResolvedRun {
  const base = WORKLOADS[o.workload];
  if (base === undefined) throw new RangeError(`unknown workload ${JSON.stringify(o.workload)}`);
  const profile: WorkloadProfile = {
    ...base,
    mix: { ...base.mix, ...o.mix },
    ...(o.visibilityTimeoutMs !== undefined ? { visibilityTimeoutMs: o.visibilityTimeoutMs } : {}),
    ...(o.partitions !== undefined ? { partitions: o.partitions } : {}),
    ...(o.producers !== undefined ? { producers: o.producers } : {}),
    ...(o.producerLanes !== undefined ? { producerLanes: o.producerLanes } : {}),
    ...(o.consumers !== undefined ? { consumers: o.consumers } : {}),
    ...(o.consumerLanes !== undefined ? { consumerLanes: o.consumerLanes } : {}),
    ...(o.payloadBytesMin !== undefined ? { payloadBytesMin: o.payloadBytesMin } : {}),
    ...(o.payloadBytesMax !== undefined ? { payloadBytesMax: o.payloadBytesMax } : {}),
    ...(o.prober !== undefined ? { prober: o.prober } : {}),
    ...(o.children !== undefined ? { children: o.children } : {}),
    ...(o.cycle !== undefined ? { cycle: o.cycle } : {}),
    ...(o.replicationFactor !== undefined ? { replicationFactor: o.replicationFactor } : {}),
    ...(o.acks !== undefined ? { acks: o.acks } : {}),
  };
  if (profile.payloadBytesMax < profile.payloadBytesMin) profile.payloadBytesMax = profile.payloadBytesMin;
  const nodes = o.nodes ?? 1;
  if (!Number.isInteger(nodes) || nodes < 1) throw new RangeError("--nodes must be a positive integer");
  // More than one node is a cluster on a PostgreSQL control plane: one system, whose partitions
  // and offsets the history can name (separate single nodes would be separate brokers).
  if (nodes > RUN_LIMITS.nodesMax) throw new RangeError(`--nodes must be at most ${RUN_LIMITS.nodesMax}`);
  const durationS = o.durationS ?? profile.durationS;
  if (!(durationS > 0 && durationS <= 24 * 3600)) throw new RangeError("--duration must be between 0 and 86400 seconds");
  const rate = o.rate ?? profile.rate;
  if (!(rate > 0 && rate <= 100_000)) throw new RangeError("--rate must be between 0 and 100000 produces per second");
  const seed = o.seed ?? randomSeed();
  if (!Number.isSafeInteger(seed) || seed < 0) throw new RangeError("--seed must be a nonnegative integer");
  let faults = profile.faults;
  if (o.faults !== undefined) {
    faults = o.faults.length === 0 ? null : { ...(faults ?? { intervalMs: 3_000, intervalJitterMs: 1_000, holdMs: 1_000, holdJitterMs: 500 }), kinds: o.faults };
  }
  if (faults !== null && (o.faultIntervalMs !== undefined || o.faultHoldMs !== undefined)) {
    faults = {
      ...faults,
      ...(o.faultIntervalMs !== undefined ? { intervalMs: o.faultIntervalMs, intervalJitterMs: Math.round(o.faultIntervalMs / 3) } : {}),
      ...(o.faultHoldMs !== undefined ? { holdMs: o.faultHoldMs, holdJitterMs: Math.round(o.faultHoldMs / 2) } : {}),
    };
  }
  if (faults !== null && o.faultTargets !== undefined) faults = { ...faults, targets: o.faultTargets };
  const rf = profile.replicationFactor;
  if (!Number.isInteger(rf) || rf < 1 || rf > 5) throw new RangeError("--replication-factor must be 1 to 5");
  if (rf > 1) {
    if (nodes < rf) throw new RangeError(`--replication-factor ${rf} needs --nodes ${rf} or more`);
    if (profile.children.length > 0 || profile.cycle !== null) throw new RangeError("a replicated topic runs without children and load cycles");
    if (faults !== null) {
      // The leader's faults: a cut is the leader's isolation (from its followers and
      // PostgreSQL); latency has no counterpart here.
      const kinds = [...new Set(faults.kinds.map((k) => (k === "cut" ? "isolate" : k)).filter((k) => k !== "latency"))];
      for (const k of kinds) if (!isReplicatedFaultKind(k)) throw new RangeError(`fault ${k} is not one of a replicated topic's`);
      faults = kinds.length === 0 ? null : { ...faults, kinds };
    }
    if (faults !== null && needsPowerLoss(faults.kinds as ReplicatedFaultKind[])) profile.powerLoss = true;
    // Clients reach the nodes directly: the lines faults cut are the nodes' own (failover.ts).
    profile.proxy = false;
  } else {
    if (o.acks !== undefined) throw new RangeError("--acks goes with --replication-factor 2 or more");
    if (profile.name === "failover") throw new RangeError("the failover workload needs --replication-factor 2 or more (and a cluster)");
    if (faults !== null && faults.kinds.some((k) => isReplicatedFaultKind(k) && !["kill", "power-loss", "terminate", "pause"].includes(k))) {
      throw new RangeError("isolate, pause-kill, lag-kill and lag-power-loss are faults of a replicated topic (--replication-factor)");
    }
    if (faults !== null && faults.kinds.includes("power-loss")) profile.powerLoss = true;
    if (faults !== null && faults.kinds.some((k) => k === "cut" || k === "latency" || k === "cut-kill")) profile.proxy = true;
    // Its cut waits for the node it cuts to accept a message: on a cluster that node would
    // forward most of them, and the count it reads would not be the answers it holds.
    if (faults !== null && faults.kinds.includes("cut-kill") && nodes > 1) throw new RangeError("cut-kill is a fault of one node (--nodes 1)");
  }
  // A replica lives on other nodes than its parent's: the workload's own is left out on one node.
  if (nodes === 1 && profile.children.some((c) => c.kind === "replica")) {
    if (o.children !== undefined) throw new RangeError("a replica child needs a cluster (--nodes 2 or more)");
    profile.children = profile.children.filter((c) => c.kind !== "replica");
  }
  const topics: RunTopic[] = [
    {
      name: MAIN_TOPIC,
      partitions: profile.partitions,
      visibilityTimeoutMs: profile.visibilityTimeoutMs,
      system: "main",
      ...(rf > 1 ? { replicationFactor: rf, acks: profile.acks } : {}),
    },
  ];
  if (profile.prober) topics.push({ name: PROBE_TOPIC, partitions: 1, visibilityTimeoutMs: PROBE_VISIBILITY_TIMEOUT_MS, system: "main" });
  const dl = profile.deadLetters;
  if (dl !== null) {
    // Next wave: the main topic moves dead letters to a topic of its own (created first).
    if (profile.children.length > 0) throw new RangeError("a dead-letter workload runs without children");
    topics[0] = { ...topics[0]!, maxDeliveries: dl.maxDeliveries, deadLetterTopic: dl.topic };
    topics.push({ name: dl.topic, partitions: profile.partitions, visibilityTimeoutMs: profile.visibilityTimeoutMs, system: "main" });
  }
  const names = new Set(topics.map((t) => t.name));
  for (const c of profile.children) {
    // The checker tells paths apart by topic name alone: a remote topic must not share a name
    // with any topic of the system under test (nor two children one name).
    if (names.has(c.topic)) throw new RangeError(`child topic ${c.topic} has the name of another topic of the run`);
    if (c.kind === "delay" && !(c.delayMs !== undefined && c.delayMs > 0)) throw new RangeError(`delay child ${c.topic} needs a positive delay`);
    names.add(c.topic);
    // A replica has its parent's partitions and settings (its attach creates it so).
    const partitions = c.kind === "replica" ? profile.partitions : c.partitions;
    topics.push({ name: c.topic, partitions, visibilityTimeoutMs: profile.visibilityTimeoutMs, system: c.kind === "remote" ? "remote" : "main" });
  }
  const remote = profile.children.some((c) => c.kind === "remote");
  // The cycle's windows keep faults away from the delay child's copies: they must know its delay.
  if (profile.cycle !== null) profile.cycle = { ...profile.cycle, delayMs: Math.max(0, ...profile.children.map((c) => (c.kind === "delay" ? c.delayMs! : 0))) };
  if (faults !== null && faults.targets === "remote" && !remote) throw new RangeError("faults on the remote node need a remote child");
  if (remote && profile.proxy) throw new RangeError("a remote child and the fault proxy do not go together (the copies would bypass it)");
  const lanes = profile.producers * profile.producerLanes + profile.consumers * profile.consumerLanes;
  if (profile.producers + profile.consumers + profile.children.length * profile.childConsumers + 2 > RUN_LIMITS.workersMax) throw new RangeError(`at most ${RUN_LIMITS.workersMax} worker processes`);
  if (Math.max(profile.producerLanes, profile.consumerLanes) > RUN_LIMITS.lanesMax) throw new RangeError(`at most ${RUN_LIMITS.lanesMax} lanes per worker`);
  if (lanes === 0 || profile.producers === 0) throw new RangeError("a run needs at least one producer");
  return {
    profile,
    seed,
    nodes,
    security: o.security ?? nodes > 1,
    durationS,
    rate,
    faults,
    bugs: o.bugs ?? [],
    ackFlushMs: o.ackFlushMs ?? DEFAULTS.ackFlushIntervalMs,
    ackSyncMs: o.ackSyncMs ?? DEFAULTS.ackSyncIntervalMs,
    forwardTimeoutMs: o.forwardTimeoutMs ?? FORWARD_TIMEOUT_MS,
    topics,
    remote,
    // Another cluster for another cluster: two nodes when the system under test is a cluster.
    remoteNodes: remote ? (nodes > 1 ? REMOTE_CLUSTER_NODES : 1) : 0,
    replicationFactor: rf,
    acks: profile.acks,
  };
}

/** Exit code of a verdict, as `narad verify check` has it. */
export function verdictExitCode(v: Verdict): number {
  return v === "valid" ? 0 : v === "invalid" ? 1 : 2;
}

export function topicSpec(t: RunTopic): TopicSpec {
  return {
    name: t.name,
    partitions: t.partitions,
    visibilityTimeoutMs: t.visibilityTimeoutMs,
    ...(t.replicationFactor !== undefined ? { replicationFactor: t.replicationFactor, acks: t.acks! } : {}),
    ...(t.deadLetterTopic !== undefined ? { maxDeliveries: t.maxDeliveries ?? null, deadLetterTopic: t.deadLetterTopic } : {}),
  };
}

/** The config line: what the checker needs to judge the run, and what the run was. */
export function runConfig(run: ResolvedRun, remote: boolean): ConfigValue {
  const { profile } = run;
  return {
    ack_flush_ms: run.ackFlushMs,
    ack_sync_ms: run.ackSyncMs,
    visibility_timeout_ms: profile.visibilityTimeoutMs,
    // The longest a copier waits for the answer to a copy sent to another node (the checker's
    // re-copy rule), per child below: a push to the remote cluster, a forward to a child
    // partition's owner. On one node a local child's copy is an append: none.
    topics: Object.fromEntries(
      run.topics.map((t) => [
        t.name,
        {
          partitions: t.partitions,
          visibility_timeout_ms: t.visibilityTimeoutMs,
          ...(t.replicationFactor !== undefined ? { replication_factor: t.replicationFactor, acks: t.acks! } : {}),
          ...(t.deadLetterTopic !== undefined ? { max_deliveries: t.maxDeliveries ?? null, dead_letter_topic: t.deadLetterTopic } : {}),
        },
      ]),
    ),
    // The acks' shipping lag the failover rule allows (replicated topics only).
    ...(run.replicationFactor > 1 ? { replication_lag_ms: REPLICATION_LAG_MS, replication_rejoin_ms: REPLICATION_REJOIN_MS, node_lease_ms: Number(REPLICATED_ENV.NARAD_CLUSTER_NODE_LEASE_MS) } : {}),
    // A remote child's path is the remote topic's name: its deliveries are recorded by consumers
    // of the remote system under that name (runs keep it distinct from every local topic's).
    children:
      profile.children.length === 0
        ? {}
        : {
            [MAIN_TOPIC]: profile.children.map((c) => ({
              topic: c.topic,
              kind: c.kind,
              ...(c.kind === "delay" ? { delay_ms: c.delayMs! } : {}),
              // The other cluster's nodes: a push may pass through any of them (the checker's re-copy rule).
              ...(c.kind === "remote" ? { nodes: Array.from({ length: run.remoteNodes }, (_, i) => `r${i + 1}`) } : {}),
              ...(c.kind === "remote" ? { copy_timeout_ms: REMOTE_PUSH_TIMEOUT_MS } : run.nodes > 1 ? { copy_timeout_ms: run.forwardTimeoutMs } : {}),
            })),
          },
    run: {
      workload: profile.name,
      seed: run.seed,
      duration_s: run.durationS,
      rate: run.rate,
      nodes: run.nodes,
      security: run.security,
      ...(remote ? { remote_nodes: run.remoteNodes } : {}),
      bugs: run.bugs,
      power_loss_mode: profile.powerLoss,
      ...(profile.idempotent ? { idempotent: true } : {}),
      proxy: profile.proxy,
      faults: run.faults?.kinds ?? [],
      ...(run.replicationFactor > 1 ? { replication_factor: run.replicationFactor, acks: run.acks } : {}),
    },
  };
}
