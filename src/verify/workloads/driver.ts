// The run driver: starts broker processes, runs a workload's producer and consumer processes and
// its nemesis, records everything as one history, drains, audits, and has the checker judge it.
//
// Design note.
// - One recorder. The driver alone writes the history: workers ask it to record each invoke
//   before they send a request and report each answer after reading it (protocol.ts), the nemesis
//   records its faults through the same function, and the drain and audit run in the driver with
//   the same lane code. So `time_ns` comes from one clock, lines are in time order by construction,
//   and every recorded interval contains the real one.
// - Phases, each a function over one RunState (runWorkload reads as their sequence):
//   startSystems (nodes and proxies, users, topics, children, then the config line) →
//   startLoad (the worker processes) → startFaults (the nemesis, or load cycles) →
//   loadForDuration (e2e: until every 202 is acked) → healAndStopLoad (stop the nemesis, which
//   heals every node and line; let the load run a little longer, the recovery; stop the workers,
//   each finishing the request in flight) → drain (children caught up, then wait until no lease
//   can still be live (tracker.ts), then consume and ack every topic until an empty consume: the
//   checker's final-drain rule) → audit (replay every partition) → cleanUp (on every path) →
//   judge (the checker, the reports, the exit code).
// - Reproducible: every random choice flows from the seed: the nemesis schedule (its own PRNG)
//   and each lane's choices (a PRNG per process name, roles.ts). Timing still varies, so a seed
//   reproduces the schedule and the choices, not the exact interleaving.
// - Cleanup on every path, SIGINT included (the caller aborts `signal`): workers are killed,
//   nodes stopped, proxies closed, the history flushed, temp data dirs removed unless `keep`.
// - Systems (systems.ts): the system under test is one node or, with --nodes N > 1, a cluster of
//   N nodes on a PostgreSQL control plane; each worker lane sends its requests to the nodes in
//   turn, and faults hit a node at random. A workload with a remote child also starts a second,
//   separate Narad (one node, security on) for the child's topic; its consumers and the final
//   drain of that path talk to it, and the nemesis may stop it too.
// - Children: attached before the first produce, listed in the config line; after the load the
//   driver waits until every child has caught up with its parent (the nodes' lag metric), so each
//   child path's final drain begins after every copy it is owed was made.
// - The driver imports no server code: it judges the broker from outside, through the SDK
//   (src/client), process signals and the fault proxy, as a user's client would see it.

import { fork, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { createRunClock, type RunClock } from "../history/clock.js";
import { HistoryWriter } from "../history/writer.js";
import type { ConfigValue } from "../history/types.js";
import { Nemesis, NodeProcess, randomSeed, restoreTarget, type FaultRecorder, type InjectedFaultKind, type NemesisTarget } from "../nemesis/index.js";
import { startProxy } from "../proxy/index.js";
import { check, type Report, type Verdict } from "../checker/index.js";
import { renderHtml, renderJson } from "../report/index.js";
import { DEFAULTS } from "../../protocol/wire.js";
import { Lane, type OpRecorder } from "./ops.js";
import { ackProcess, type CompletionType, type ConsumerMix, type DriverMessage, type FaultSchedule, type OpF, type TopicSpec, type WorkerMessage, type WorkerSpec, type RoleSpec } from "./protocol.js";
import { auditTopic, deriveSeed, drainTopic } from "./roles.js";
import { RunTracker, type TrackerCounts } from "./tracker.js";
import { WORKLOADS, type ChildProfile, type WorkloadName, type WorkloadProfile } from "./workloads.js";
import {
  ADMIN_PASSWORD,
  CLIENT_USER,
  SYSTEM_LIMITS,
  attachChildren,
  childLag,
  clientUrls,
  createTopics,
  createUsers,
  startControlPlaneServer,
  waitChildrenCaughtUp,
  type ControlPlaneServer,
  type RunSystem,
} from "./systems.js";
import { LoadCycle, type CycleSpec, type CycleTarget } from "./cycle.js";
import { FailoverNemesis, isReplicatedFaultKind, needsPowerLoss, type FailoverTarget, type ReplicatedFaultKind } from "./failover.js";
import type { Credentials, RunFaultKind } from "./protocol.js";
import type { Proxy } from "../proxy/index.js";
import { createServer } from "node:net";
import { Narad } from "../../client/index.js";
import { idempotentProducer } from "./next-wave.js";

export const MAIN_TOPIC = "t";
/** What consumers of a dead-letter topic do: ack, now and then slowly or after an extend. */
const DEAD_LETTER_MIX = { ack: 90, nack: 0, extend: 5, slow: 5, lapse: 0, late: 0 };
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
interface RunTopic extends TopicSpec {
  system: "main" | "remote";
}

interface ResolvedRun {
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

function resolveRun(o: RunOptions): ResolvedRun {
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

function topicSpec(t: RunTopic): TopicSpec {
  return {
    name: t.name,
    partitions: t.partitions,
    visibilityTimeoutMs: t.visibilityTimeoutMs,
    ...(t.replicationFactor !== undefined ? { replicationFactor: t.replicationFactor, acks: t.acks! } : {}),
    ...(t.deadLetterTopic !== undefined ? { maxDeliveries: t.maxDeliveries ?? null, deadLetterTopic: t.deadLetterTopic } : {}),
  };
}

const WORKER_PATH = fileURLToPath(new URL("./worker.js", import.meta.url));

interface WorkerHandle {
  index: number;
  spec: WorkerSpec;
  child: ChildProcess;
  ready: Promise<void>;
  /** Opens or closes a producer's gate; a close resolves when the worker confirms it (or exits). */
  gate(open: boolean): Promise<void>;
  /** Resolves when the process exited, with its `stopped` error if it sent one. */
  exited: Promise<{ code: number | null; signal: string | null; stopped: boolean; error?: string }>;
  stderrTail: () => string;
}

/** A free loopback port (bound and released: another process could take it before the node does, rarely). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * Runs one workload end to end, as a sequence of phases over one RunState (see the design note):
 * start the systems → start the load → start the faults → load for the duration → heal and stop
 * the load → drain → audit, then clean up whatever happened, and judge. Never leaves a process
 * behind, whatever happens.
 */
export async function runWorkload(opts: RunOptions): Promise<RunResult> {
  const s = await newRunState(opts);
  try {
    await startSystems(s);
    await startLoad(s);
    startFaults(s);
    await loadForDuration(s);
    await healAndStopLoad(s);
    await drain(s);
    await audit(s);
  } finally {
    await cleanUp(s);
  }
  return judge(s);
}

/** The recorder's two calls, as the driver and its workers use them. */
interface RunRecorder {
  invoke(p: string, f: OpF | "fault", value: Record<string, unknown>): void;
  complete(p: string, type: CompletionType, value: Record<string, unknown>): void;
}

/** Everything the phases of one run share: what was asked, what was started, what was recorded. */
interface RunState {
  readonly opts: RunOptions;
  readonly run: ResolvedRun;
  readonly profile: WorkloadProfile;
  readonly seed: number;
  readonly t0: number;
  readonly outDir: string;
  readonly historyPath: string;
  /** Parent of the nodes' temp data directories. */
  readonly tmp: string;
  readonly signal: AbortSignal | undefined;
  readonly findings: Finding[];
  /** What a reader of the result should know that is neither a violation nor a harness failure. */
  readonly notes: string[];
  readonly tracker: RunTracker;
  readonly clock: RunClock;
  readonly main: RunSystem;
  readonly remote: RunSystem | null;
  readonly systems: RunSystem[];
  readonly config: ConfigValue;
  /** The one recording path: history line first, then the tracker's view of it. */
  readonly record: RunRecorder;
  /** For the lanes the driver runs itself (drain, audit). */
  readonly directRecorder: OpRecorder;
  readonly faultRecorder: FaultRecorder;
  readonly progress: RunProgressReporter;
  controlPlane: ControlPlaneServer | null;
  /** A replicated run: every main node with the proxies of its peer address and its control-plane line. */
  lines: FailoverTarget[];
  workers: WorkerHandle[];
  writer: HistoryWriter | null;
  nemesis: { start(): void; stop(): Promise<void> } | null;
  nemesisStopped: boolean;
  /** Set once the caller aborts `signal` (SIGINT): the phases left do nothing but clean up. */
  interrupted: boolean;
  readonly removeAbortListener: () => void;
}

/** Reports progress: on every phase change, and every `intervalMs` while the timer runs. */
class RunProgressReporter {
  private phase: RunProgress["phase"] = "start";
  private timer: NodeJS.Timeout | null = null;
  private lastOps = 0;
  private lastTick = performance.now();
  private opsPerS = 0;

  constructor(
    private readonly tracker: RunTracker,
    private readonly t0: number,
    private readonly onProgress: RunOptions["onProgress"],
  ) {}

  /** When the load began ("run"), and the operations completed then. */
  private loadStart: { at: number; ops: number } | null = null;

  set(p: RunProgress["phase"]): void {
    this.phase = p;
    if (p === "run" && this.loadStart === null) this.loadStart = { at: performance.now(), ops: this.completedOps() };
    this.emit(false);
  }

  private completedOps(): number {
    return Object.values(this.tracker.counts.completed).reduce((a, b) => a + b, 0);
  }

  startTimer(intervalMs: number): void {
    this.timer = setInterval(() => this.emit(true), intervalMs);
    this.timer.unref();
  }

  stopTimer(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** `tick`: the periodic call, which measures the rate; phase changes report the last rate. */
  private emit(tick: boolean): void {
    if (!this.onProgress) return;
    const now = performance.now();
    const counts = this.tracker.counts;
    const ops = this.completedOps();
    const ls = this.loadStart;
    if (tick) {
      this.opsPerS = now > this.lastTick ? ((ops - this.lastOps) * 1000) / (now - this.lastTick) : 0;
      this.lastOps = ops;
      this.lastTick = now;
    }
    this.onProgress({
      phase: this.phase,
      elapsedMs: Math.round(now - this.t0),
      opsPerS: Math.round(this.opsPerS),
      opsPerSAvg: ls !== null && now > ls.at ? Math.round(((ops - ls.ops) * 1000) / (now - ls.at)) : 0,
      ops,
      pending: Math.max(0, counts.produceOk - this.tracker.ackedMessages),
      faults: counts.faultsInjected,
      produceOk: counts.produceOk,
      deliveries: counts.deliveries,
    });
  }
}

function systemOf(s: RunState, t: RunTopic): RunSystem {
  return t.system === "remote" ? s.remote! : s.main;
}

function allNodes(s: RunState): NodeProcess[] {
  return s.systems.flatMap((x) => x.nodes);
}

/** The config line: what the checker needs to judge the run, and what the run was. */
function runConfig(run: ResolvedRun, remote: boolean): ConfigValue {
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

/** The run's state before anything starts: options resolved, out and temp directories made. */
async function newRunState(opts: RunOptions): Promise<RunState> {
  const run = resolveRun(opts);
  const { profile, seed } = run;
  const t0 = performance.now();
  const outDir = opts.outDir;
  await mkdir(outDir, { recursive: true });
  const historyPath = join(outDir, "history.jsonl");
  const tmp = await mkdtemp(join(tmpdir(), "narad-verify-"));
  const tracker = new RunTracker({ knownSet: profile.knownSet, mainTopic: MAIN_TOPIC });
  const clock: RunClock = createRunClock();
  const main: RunSystem = {
    role: "main",
    nodes: [],
    proxies: [],
    admin: run.security ? { user: "admin", password: ADMIN_PASSWORD } : null,
    client: run.security ? CLIENT_USER : null,
  };
  const remote: RunSystem | null = run.remote
    ? { role: "remote", nodes: [], proxies: [], admin: { user: "admin", password: ADMIN_PASSWORD }, client: CLIENT_USER }
    : null;
  let writer: HistoryWriter | null = null;
  const record: RunRecorder = {
    invoke(p, f, value) {
      writer!.invoke(p, f, value);
      tracker.invoke(p, f, value);
    },
    complete(p, type, value) {
      writer!.complete(p, type, value);
      tracker.complete(p, type, value, clock.nowNs());
    },
  };
  const signal = opts.signal;
  const s: RunState = {
    opts,
    run,
    profile,
    seed,
    t0,
    outDir,
    historyPath,
    tmp,
    signal,
    findings: [],
    notes: [],
    tracker,
    clock,
    main,
    remote,
    systems: remote === null ? [main] : [main, remote],
    config: runConfig(run, remote !== null),
    record,
    directRecorder: {
      async invoke(p, f, value) {
        record.invoke(p, f, value);
        if (writer!.needsDrain) await writer!.drained();
      },
      complete(p, type, value) {
        record.complete(p, type, value);
      },
    },
    faultRecorder: (type, _f, value) => {
      if (type === "invoke") record.invoke("nemesis", "fault", value);
      else record.complete("nemesis", type, value);
    },
    progress: new RunProgressReporter(tracker, t0, opts.onProgress),
    controlPlane: null,
    lines: [],
    workers: [],
    get writer() {
      return writer;
    },
    set writer(w) {
      writer = w;
    },
    nemesis: null,
    nemesisStopped: false,
    interrupted: signal?.aborted === true,
    removeAbortListener: () => signal?.removeEventListener("abort", onAbort),
  };
  const onAbort = () => {
    s.interrupted = true;
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  return s;
}

// ---- start: nodes, proxies, users, topics, children; then the config line ----

async function startSystems(s: RunState): Promise<void> {
  const { run, profile, main, remote, systems, opts, signal } = s;
  const env: Record<string, string> = {
    NARAD_LOG_LEVEL: process.env.NARAD_LOG_LEVEL ?? "warn",
    NARAD_STORAGE_ACK_FLUSH_INTERVAL_MS: String(run.ackFlushMs),
    NARAD_STORAGE_CONSUMER_OFFSET_COMMIT_INTERVAL_MS: String(run.ackSyncMs),
    NARAD_CLUSTER_FORWARD_TIMEOUT_MS: String(run.forwardTimeoutMs),
    // Explicit, so a variable left in the caller's environment cannot turn a bug on or off.
    NARAD_TEST_BUGS: run.bugs.join(","),
    NARAD_TEST_MODE: "1", // seeded bugs are refused without it (or --dev), and runs with security on pass no --dev
    NARAD_TEST_POWER_LOSS: profile.powerLoss ? "1" : "0",
    ...(opts.pendingSyncBytes !== undefined ? { NARAD_LIMITS_PENDING_SYNC_BYTES: String(opts.pendingSyncBytes) } : {}),
    ...(run.security ? { NARAD_ADMIN_PASSWORD: ADMIN_PASSWORD } : {}),
    ...(run.replicationFactor > 1 ? REPLICATED_ENV : {}),
  };
  const clusterArgs: string[] = [];
  const remoteArgs: string[] = [];
  if (run.nodes > 1 || run.remoteNodes > 1) {
    s.controlPlane = await startControlPlaneServer(opts.controlPlaneUrl ?? process.env.NARAD_VERIFY_CONTROL_PLANE);
    if (run.nodes > 1) clusterArgs.push("--control-plane", await s.controlPlane.database("main"));
    if (run.remoteNodes > 1) remoteArgs.push("--control-plane", await s.controlPlane.database("remote"));
  }
  for (let i = 0; i < run.nodes; i++) {
    const dataDir = join(s.tmp, `n${i + 1}`);
    await mkdir(dataDir, { recursive: true });
    if (run.replicationFactor > 1) {
      // The node's own lines go through proxies the faults can cut: its advertised address (every
      // other node reaches it there) and its control-plane connection. Its port is chosen first,
      // so the peer proxy knows where to forward before the node starts.
      const port = await freePort();
      const peerProxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: port });
      const pgUrl = new URL(clusterArgs[1]!);
      const controlPlaneProxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: pgUrl.hostname, targetPort: Number(pgUrl.port || 5432) });
      pgUrl.hostname = "127.0.0.1";
      pgUrl.port = String(controlPlaneProxy.address.port);
      const node = new NodeProcess({
        dataDir,
        env,
        port,
        powerLoss: profile.powerLoss,
        nodeId: `n${i + 1}`,
        dev: !run.security,
        extraArgs: ["--control-plane", pgUrl.toString(), "--advertise", `http://127.0.0.1:${peerProxy.address.port}`],
      });
      main.nodes.push(node);
      s.lines.push({ node, peerProxy, controlPlaneProxy });
      continue;
    }
    main.nodes.push(new NodeProcess({ dataDir, env, powerLoss: profile.powerLoss, nodeId: `n${i + 1}`, dev: !run.security, extraArgs: clusterArgs }));
  }
  if (remote !== null) {
    // Another Narad (or cluster, on a control plane of its own): its own node ids, security
    // on, and none of the seeded bugs.
    const remoteEnv = { ...env, NARAD_TEST_BUGS: "", NARAD_TEST_POWER_LOSS: "0", NARAD_ADMIN_PASSWORD: ADMIN_PASSWORD };
    for (let i = 0; i < run.remoteNodes; i++) {
      const dataDir = join(s.tmp, `r${i + 1}`);
      await mkdir(dataDir, { recursive: true });
      remote.nodes.push(new NodeProcess({ dataDir, env: remoteEnv, nodeId: `r${i + 1}`, dev: false, extraArgs: remoteArgs }));
    }
  }
  // In each system the first node alone (a cluster's first node migrates the schema and
  // creates admin), then the rest; the two systems side by side.
  await Promise.all(
    systems.map(async (sys) => {
      await sys.nodes[0]!.start();
      await Promise.all(sys.nodes.slice(1).map((n) => n.start()));
    }),
  );
  if (profile.proxy) {
    for (const n of main.nodes) {
      main.proxies.push(await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: n.port }));
    }
  }
  await Promise.all(
    systems.map(async (sys) => {
      await createUsers(sys, run.topics.filter((t) => systemOf(s, t) === sys).map((t) => t.name));
      // Not the replicas: their attach creates them.
      const replicas = new Set(profile.children.filter((c) => c.kind === "replica").map((c) => c.topic));
      await createTopics(sys, run.topics.filter((t) => systemOf(s, t) === sys && !replicas.has(t.name)), signal);
    }),
  );
  // Next wave: a server without idempotent producers stops the run here, with one line.
  if (profile.idempotent) await checkIdempotentProducers(main);
  if (profile.children.length > 0) {
    await attachChildren(main, MAIN_TOPIC, profile.children.map((c) => ({ topic: c.topic, kind: c.kind, ...(c.delayMs !== undefined ? { delayMs: c.delayMs } : {}) })), remote, signal);
  }

  s.writer = HistoryWriter.open(s.historyPath, s.config, { clock: s.clock });
  s.progress.startTimer(opts.progressIntervalMs ?? 1_000);
}

// ---- load: the worker processes (producers, consumers, prober, replayer) ----

/** Stops the run with one line (NextWaveUnsupported) when the system has no idempotent producers. */
async function checkIdempotentProducers(sys: RunSystem): Promise<void> {
  const client = new Narad({ url: sys.nodes[0]!.url, ...(sys.client !== null ? { user: sys.client.user, password: sys.client.password } : {}) });
  try {
    await idempotentProducer(client);
  } finally {
    await client.destroy().catch(() => undefined);
  }
}

/** The worker specs of the run: producers and consumers of the main topic, consumers of each child path, prober, replayer. */
function workerSpecs(s: RunState): WorkerSpec[] {
  const { run, profile, seed, main } = s;
  const transport = s.opts.transport;
  let nextProcess = 0;
  const specs: WorkerSpec[] = [];
  const lanesTotal = profile.producers * profile.producerLanes;
  const laneIntervalMs = (lanesTotal * 1000) / run.rate;
  const quotaPerLane = profile.knownSet ? Math.max(1, Math.ceil((run.rate * run.durationS) / lanesTotal)) : null;
  const addWorker = (lanes: number, role: RoleSpec, system: RunSystem = main) => {
    const worker = specs.length;
    const processes = Array.from({ length: lanes }, () => `p${nextProcess++}`);
    specs.push({
      worker,
      processes,
      urls: clientUrls(system),
      ...(system.client !== null ? { auth: system.client } : {}),
      ...(profile.cycle !== null && role.role === "producer" ? { gateClosed: true } : {}),
      seed: deriveSeed(seed, `worker-${worker}`),
      requestTimeoutMs: profile.requestTimeoutMs,
      ...(transport !== undefined ? { transport } : {}),
      role,
    });
  };
  for (let i = 0; i < profile.producers; i++) {
    addWorker(profile.producerLanes, {
      role: "producer",
      topic: MAIN_TOPIC,
      quotaPerLane,
      intervalMs: laneIntervalMs,
      payloadBytesMin: profile.payloadBytesMin,
      payloadBytesMax: profile.payloadBytesMax,
      keyedShare: 0.5,
      keys: 16,
      ...(profile.idempotent ? { idempotent: true } : {}),
    });
  }
  const dl = profile.deadLetters;
  for (let i = 0; i < profile.consumers; i++) {
    addWorker(profile.consumerLanes, {
      role: "consumer",
      topic: MAIN_TOPIC,
      visibilityTimeoutMs: profile.visibilityTimeoutMs,
      mix: profile.mix,
      waitMs: profile.consumeWaitMs,
      ...(dl !== null ? { deadLetters: { nackShare: dl.nackShare, deadLetterShare: dl.deadLetterShare } } : {}),
    });
  }
  // The dead-letter topic is a path of its own: its consumers ack what arrives.
  for (let i = 0; dl !== null && i < dl.consumers; i++) {
    addWorker(profile.consumerLanes, { role: "consumer", topic: dl.topic, visibilityTimeoutMs: profile.visibilityTimeoutMs, mix: DEAD_LETTER_MIX, waitMs: profile.consumeWaitMs });
  }
  // Every child path has consumers of its own, on the system it lives on.
  for (const t of run.topics) {
    if (!profile.children.some((c) => c.topic === t.name)) continue;
    for (let i = 0; i < profile.childConsumers; i++) {
      addWorker(profile.consumerLanes, { role: "consumer", topic: t.name, visibilityTimeoutMs: t.visibilityTimeoutMs, mix: profile.mix, waitMs: profile.consumeWaitMs }, systemOf(s, t));
    }
  }
  if (profile.prober) addWorker(1, { role: "prober", topic: PROBE_TOPIC, visibilityTimeoutMs: PROBE_VISIBILITY_TIMEOUT_MS });
  if (profile.replayer) addWorker(1, { role: "replayer", topics: run.topics.filter((t) => t.system === "main").map(topicSpec), intervalMs: 300, limit: 50 });
  const messagesPerLaneMax = Math.floor(RUN_LIMITS.messagesMax / lanesTotal);
  for (const spec of specs) if (spec.role.role === "producer") spec.role.quotaPerLane = Math.min(spec.role.quotaPerLane ?? messagesPerLaneMax, messagesPerLaneMax);
  return specs;
}

async function startLoad(s: RunState): Promise<void> {
  for (const spec of workerSpecs(s)) s.workers.push(spawnWorker(spec, s.record, () => s.writer!, s.findings));
  const notReady = new Set(s.workers);
  for (const w of s.workers) void w.ready.then(() => notReady.delete(w), () => undefined);
  try {
    await withDeadline(Promise.all(s.workers.map((w) => w.ready)), RUN_LIMITS.workerReadyTimeoutMs, "not every worker was ready");
  } catch (e) {
    // Say which did not, and what each printed or how it ended: a bare timeout cannot be read later.
    const which = [...notReady].map((w) => {
      const st = w.child.exitCode !== null ? `exited ${w.child.exitCode}` : w.child.signalCode !== null ? `killed by ${w.child.signalCode}` : `running (pid ${w.child.pid ?? "none"})`;
      const tail = w.stderrTail().trim().slice(-300).replace(/\s*\n\s*/g, " | ");
      return `worker ${w.index} (${w.spec.role.role}) ${st}${tail !== "" ? `: ${tail}` : ""}`;
    });
    throw new Error(`worker processes did not start: ${(e as Error).message}; ${notReady.size} of ${s.workers.length} not ready: ${which.join("; ")}`);
  }
}

// ---- faults: the nemesis, or load cycles with faults in quiet windows ----

function startFaults(s: RunState): void {
  const { run, profile, main, remote, systems, tracker } = s;
  const targetsOf = (sys: RunSystem): CycleTarget[] =>
    sys.nodes.map((node, i) => ({ node, role: sys.role, ...(sys.proxies[i] ? { proxy: sys.proxies[i] } : {}), acceptedCount: () => acceptedCount(node, sys.admin) }));
  const which = run.faults?.targets ?? "all";
  const targets: CycleTarget[] = which === "main" ? targetsOf(main) : which === "remote" ? targetsOf(remote!) : systems.flatMap(targetsOf);
  if (run.faults !== null && run.replicationFactor > 1) {
    s.nemesis = new FailoverNemesis({
      targets: s.lines,
      topic: MAIN_TOPIC,
      partitions: profile.partitions,
      seed: deriveSeed(s.seed, "nemesis"),
      kinds: run.faults.kinds as ReplicatedFaultKind[],
      intervalMs: run.faults.intervalMs,
      intervalJitterMs: run.faults.intervalJitterMs,
      holdMs: run.faults.holdMs,
      holdJitterMs: run.faults.holdJitterMs,
      failoverHoldMinMs: FAILOVER_HOLD_MIN_MS,
      admin: main.admin,
      record: s.faultRecorder,
    });
    s.nemesis.start();
  } else if (profile.cycle !== null) {
    const producerWorkers = s.workers.filter((w) => w.spec.role.role === "producer");
    const copied = profile.children.filter((c) => c.kind !== "delay").map((c) => c.topic);
    s.nemesis = new LoadCycle({
      spec: profile.cycle,
      seed: deriveSeed(s.seed, "nemesis"),
      faults: (run.faults?.kinds ?? []) as InjectedFaultKind[],
      targets,
      record: s.faultRecorder,
      ackFlushMs: run.ackFlushMs,
      producedOk: () => tracker.counts.produceOk,
      gate: async (open) => {
        await Promise.all(producerWorkers.map((w) => w.gate(open)));
        // Closed: every produce that was invoked finishes before the quiet window counts.
        const deadline = performance.now() + profile.requestTimeoutMs + 2_000;
        while (!open && tracker.openCount("produce") > 0 && performance.now() < deadline) await sleep(10);
      },
      onSkip: (names, reason) => {
        if (s.notes.length < RUN_LIMITS.notesMax) s.notes.push(`faults on ${names} skipped in one quiet window: ${reason}`);
      },
      caughtUp: async () => {
        if (copied.length === 0) return true;
        const lag = await childLag(main, MAIN_TOPIC, copied);
        return [...lag.values()].every((n) => n === 0);
      },
    });
    s.nemesis.start();
  } else if (run.faults !== null) {
    s.nemesis = new Nemesis({
      targets,
      seed: deriveSeed(s.seed, "nemesis"),
      faults: run.faults.kinds as InjectedFaultKind[],
      intervalMs: run.faults.intervalMs,
      intervalJitterMs: run.faults.intervalJitterMs,
      holdMs: run.faults.holdMs,
      holdJitterMs: run.faults.holdJitterMs,
      latencyMs: 300,
      latencyJitterMs: 50,
      record: s.faultRecorder,
    });
    s.nemesis.start();
  }
}

const ACCEPTED_RE = /^narad_produced_messages_total\{[^}]*\}\s+(\S+)/gm;

/** Messages `node` accepted with a 202 since it started (its /metrics, asked directly: cut-kill). */
async function acceptedCount(node: NodeProcess, auth: Credentials | null): Promise<number> {
  const client = new Narad({ url: node.url, connections: 1, requestTimeoutMs: 2_000, ...(auth !== null ? { user: auth.user, password: auth.password } : {}) });
  try {
    let n = 0;
    for (const m of (await client.metrics()).matchAll(ACCEPTED_RE)) n += Number(m[1]);
    return n;
  } finally {
    await client.destroy().catch(() => undefined);
  }
}

/** Stops the faults and brings every node and line back, recording each step. */
async function heal(s: RunState): Promise<void> {
  if (s.nemesis !== null && !s.nemesisStopped) {
    s.progress.set("heal");
    s.nemesisStopped = true;
    await s.nemesis.stop();
    if (s.nemesis instanceof FailoverNemesis) for (const n of s.nemesis.skipped) if (s.notes.length < RUN_LIMITS.notesMax) s.notes.push(`fault skipped: ${n}`);
  }
  // Whatever the schedule left, every node runs and every line is clear before the drain.
  for (const sys of s.systems) {
    for (let i = 0; i < sys.nodes.length; i++) {
      if (!s.interrupted) await restoreTarget(s.faultRecorder, { node: sys.nodes[i]!, ...(sys.proxies[i] ? { proxy: sys.proxies[i] } : {}) });
    }
  }
}

// ---- load for the duration (e2e: until every 202 is acked) ----

async function loadForDuration(s: RunState): Promise<void> {
  const { run, profile, tracker, findings, signal } = s;
  s.progress.set("run");
  const producers = s.workers.filter((w) => w.spec.role.role === "producer");
  const producersDone = Promise.all(producers.map((w) => w.exited));
  let producersFinished = false;
  void producersDone.then(() => (producersFinished = true));
  const runEnd = performance.now() + run.durationS * 1000;
  const knownSetEnd = runEnd + RUN_LIMITS.knownSetGraceMs;
  for (;;) {
    if (s.interrupted) break;
    const now = performance.now();
    if (profile.knownSet) {
      // Under faults the known set is what got a 202 within the duration (the quota, unless the
      // producers fall behind, as they may while nodes are down); production and faults stop
      // then, and everything must be acked within the grace. Without faults, the whole quota.
      if (now >= runEnd && !producersFinished && s.nemesis !== null) {
        await Promise.all(producers.map((w) => w.gate(false)));
        const deadline = performance.now() + profile.requestTimeoutMs + 2_000;
        while (tracker.openCount("produce") > 0 && performance.now() < deadline) await sleep(10, signal);
        producersFinished = true;
      }
      if (s.nemesis !== null && !s.nemesisStopped && now >= runEnd) {
        await heal(s);
        s.progress.set("run");
      }
      if (producersFinished && tracker.allProducedAcked()) break;
      if (now >= knownSetEnd) {
        findings.push({
          kind: "violation",
          text: `not every message with a 202 was acked within ${RUN_LIMITS.knownSetGraceMs / 1000} s after the run (for example ${tracker.producedNotAcked(5).join(", ")})`,
        });
        break;
      }
    } else if (now >= runEnd) {
      // Load cycles end after a burst has met the last faults' effect, the nemesis once it made
      // the faults asked for (both bounded by the grace).
      const nemesis = s.nemesis;
      const settled =
        nemesis instanceof LoadCycle ? nemesis.settled : nemesis instanceof Nemesis || nemesis instanceof FailoverNemesis ? nemesis.applied >= (s.opts.faultsMin ?? 0) : true;
      if (settled || now >= runEnd + RUN_LIMITS.cycleSettleGraceMs) break;
    }
    await sleep(100, signal);
  }
}

// ---- heal, recover, stop the workers ----

async function healAndStopLoad(s: RunState): Promise<void> {
  const faulted = s.nemesis !== null && !s.nemesisStopped;
  await heal(s);
  // A known set is all acked by now: nothing is left to recover.
  if (faulted && !s.profile.knownSet && !s.interrupted) {
    s.progress.set("recover");
    await sleep(RUN_LIMITS.recoverMs, s.signal);
  }
  s.progress.set("stop");
  await stopWorkers(s.workers, s.findings);
}

// ---- drain: children caught up, no lease left live, then consume and ack every topic until empty ----

async function drain(s: RunState): Promise<void> {
  const { run, profile, tracker, findings, signal } = s;
  if (!s.interrupted && profile.children.length > 0) {
    // Every copy made before any child path is drained (the checker's rule for `lost`).
    s.progress.set("catch-up");
    const behind = await waitChildrenCaughtUp(s.main, MAIN_TOPIC, profile.children.map((c) => c.topic), signal);
    for (const [child, lag] of behind) {
      findings.push({
        kind: "violation",
        text: `child ${child} did not catch up with ${MAIN_TOPIC} within ${SYSTEM_LIMITS.childCatchUpTimeoutMs / 1000} s after the load (${Number.isNaN(lag) ? "no node reports its lag" : `${lag} messages behind`})`,
      });
    }
  }
  if (!s.interrupted) {
    s.progress.set("drain-wait");
    const nowNs = s.clock.nowNs();
    let waitUntilNs = nowNs;
    for (const t of run.topics) waitUntilNs = Math.max(waitUntilNs, tracker.leasesEndNs(t.name, t.visibilityTimeoutMs * 1e6, nowNs));
    await sleep((waitUntilNs - nowNs) / 1e6 + RUN_LIMITS.drainMarginMs, signal);
  }
  if (s.interrupted) return;
  s.progress.set("drain");
  const drainOpsMax = 4 * (tracker.counts.produceOk + tracker.counts.produceInfo + tracker.counts.produceFail) + 10_000;
  // A dead-letter topic is drained after the topics that move messages to it (next wave): a move
  // the drain of its source provokes (a lapsed last lease seen only then) lands before its drain.
  const deadLetterTopics = new Set(run.topics.flatMap((t) => (t.deadLetterTopic !== undefined ? [t.deadLetterTopic] : [])));
  await drainTopics(s, run.topics.filter((t) => !deadLetterTopics.has(t.name)), drainOpsMax);
  await drainTopics(s, run.topics.filter((t) => deadLetterTopics.has(t.name)), drainOpsMax);
}

/** Consumes and acks each of `topics` until empty, several lanes at once, all topics together. */
async function drainTopics(s: RunState, topics: readonly RunTopic[], drainOpsMax: number): Promise<void> {
  const { profile, findings } = s;
  const drains: Promise<void>[] = [];
  for (const t of topics) {
    const sys = systemOf(s, t);
    const lanes = t.name === MAIN_TOPIC ? RUN_LIMITS.drainLanes : t.name === PROBE_TOPIC ? 1 : Math.max(1, RUN_LIMITS.drainLanes / 2);
    for (let l = 0; l < lanes; l++) {
      const lane = new Lane(`drain-${t.name}-${l}`, clientUrls(sys), s.directRecorder, {
        requestTimeoutMs: profile.requestTimeoutMs,
        firstUrl: l,
        ...(sys.client !== null ? { auth: sys.client } : {}),
      });
      drains.push(
        drainTopic(lane, t.name, drainOpsMax, RUN_LIMITS.drainErrorsMax)
          .then((ok) => {
            if (!ok) findings.push({ kind: "harness", text: `the final drain of ${t.name} (lane ${l}) never saw an empty consume` });
          })
          .finally(() => lane.close()),
      );
    }
  }
  await Promise.all(drains);
}

// ---- audit: replay every partition from offset 0 ----

async function audit(s: RunState): Promise<void> {
  if (s.interrupted) return;
  s.progress.set("audit");
  for (const sys of s.systems) {
    const lane = new Lane(`audit${sys.role === "remote" ? "-remote" : ""}`, clientUrls(sys), s.directRecorder, {
      requestTimeoutMs: s.profile.requestTimeoutMs,
      ...(sys.client !== null ? { auth: sys.client } : {}),
    });
    try {
      for (const t of s.run.topics) if (systemOf(s, t) === sys) await auditTopic(lane, topicSpec(t), RUN_LIMITS.auditPagesMax);
    } finally {
      await lane.close();
    }
  }
}

// ---- clean-up, on every path: faults, workers, history, proxies, nodes, control plane, temp dirs ----

async function cleanUp(s: RunState): Promise<void> {
  s.progress.stopTimer();
  s.removeAbortListener();
  if (s.nemesis !== null && !s.nemesisStopped) await s.nemesis.stop().catch(() => undefined);
  for (const w of s.workers) if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill("SIGKILL");
  await Promise.all(s.workers.map((w) => w.exited.catch(() => undefined)));
  if (s.writer !== null) await s.writer.close().catch(() => undefined);
  for (const p of s.systems.flatMap((x) => x.proxies)) await p.close().catch(() => undefined);
  // The nodes' own lines stay up until the nodes are gone (a node cut from PostgreSQL would only complain).
  const lineProxies: Proxy[] = s.lines.flatMap((l) => [l.peerProxy, l.controlPlaneProxy]);
  for (const p of lineProxies) p.heal();
  await Promise.all(
    allNodes(s).map(async (n) => {
      if (n.paused) await n.resume().catch(() => undefined);
      if (n.running) await n.terminate().catch(() => n.dispose());
      await n.dispose();
    }),
  );
  for (const p of lineProxies) await p.close().catch(() => undefined);
  // After the nodes: a cluster node whose control plane vanished first would only complain.
  if (s.controlPlane !== null) await s.controlPlane.stop().catch(() => undefined);
  const logs = s.systems
    .flatMap((sys) => sys.nodes.map((n) => `==== ${sys.role} node ${n.name} (${n.dataDir}) ====\n${n.output().slice(-RUN_LIMITS.nodeLogCharsMax)}`))
    .join("\n");
  await writeFile(join(s.outDir, "nodes.log"), logs).catch(() => undefined);
  if (!s.opts.keep) await rm(s.tmp, { recursive: true, force: true }).catch(() => undefined);
}

// ---- judge: the checker's verdict and reports, the driver's own findings, the exit code ----

async function judge(s: RunState): Promise<RunResult> {
  const { profile, tracker, findings, interrupted } = s;
  let report: Report | null = null;
  let reportJsonPath: string | null = null;
  let reportHtmlPath: string | null = null;
  let verdict: Verdict | null = null;
  if (!interrupted) {
    s.progress.set("check");
    report = await check(s.historyPath);
    verdict = report.verdict;
    reportJsonPath = join(s.outDir, "report.json");
    await writeFile(reportJsonPath, renderJson(report));
    if (s.opts.html !== false) {
      reportHtmlPath = join(s.outDir, "report.html");
      await writeFile(reportHtmlPath, renderHtml(report, `narad verify run --workload ${profile.name} --seed ${s.seed}`));
    }
  }
  if (profile.duplicatesFail) {
    if (tracker.duplicates.length > 0) {
      findings.push({ kind: "violation", text: `delivered more than once in a run without faults: ${tracker.duplicates.slice(0, 10).join(", ")}${tracker.duplicates.length > 10 ? ", …" : ""}` });
    }
  }
  let exitCode = interrupted ? 130 : verdictExitCode(verdict!);
  if (!interrupted) {
    if (findings.some((f) => f.kind === "violation")) exitCode = 1;
    else if (exitCode === 0 && findings.length > 0) exitCode = 2;
  }
  s.progress.set("done");
  return {
    workload: profile.name,
    seed: s.seed,
    outDir: s.outDir,
    historyPath: s.historyPath,
    reportJsonPath,
    reportHtmlPath,
    dataDirs: s.opts.keep ? allNodes(s).map((n) => n.dataDir) : [],
    verdict,
    report,
    exitCode,
    findings,
    notes: s.notes,
    counts: tracker.counts,
    events: s.writer?.events ?? 0,
    durationMs: Math.round(performance.now() - s.t0),
    interrupted,
    config: s.config,
  };
}

async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

function spawnWorker(spec: WorkerSpec, record: RunRecorder, writer: () => HistoryWriter, findings: Finding[]): WorkerHandle {
  // execArgv [] so a test runner's flags (--test and friends) do not reach the worker.
  const child = fork(WORKER_PATH, [], { stdio: ["ignore", "pipe", "pipe", "ipc"], execArgv: [], serialization: "json" });
  let stderr = "";
  const keep = (s: Buffer) => {
    stderr = (stderr + s.toString("utf8")).slice(-16 * 1024);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  const mine = new Set(spec.processes.flatMap((p) => [p, ackProcess(p)]));
  let resolveReady!: () => void;
  let rejectReady!: (e: Error) => void;
  const ready = new Promise<void>((resolve, reject) => {
    resolveReady = resolve;
    rejectReady = reject;
  });
  ready.catch(() => undefined);
  let stopped = false;
  let stoppedError: string | undefined;
  const send = (m: DriverMessage) => {
    if (child.connected) child.send(m, (err) => void err);
  };
  const gatedWaiters: (() => void)[] = [];
  child.on("message", (m: WorkerMessage) => {
    switch (m.t) {
      case "ready":
        resolveReady();
        return;
      case "inv": {
        if (!mine.has(m.p)) {
          findings.push({ kind: "harness", text: `worker ${spec.worker} sent an operation for process ${m.p}, which is not its own` });
          return;
        }
        try {
          record.invoke(m.p, m.f, m.value);
        } catch (e) {
          // A worker that breaks the one-operation-per-process rule is a harness bug: stop it, keep the run.
          findings.push({ kind: "harness", text: `worker ${spec.worker}: ${(e as Error).message}` });
          child.kill("SIGKILL");
          return;
        }
        // Recording blocks when the history file falls behind: the lane waits, memory does not grow.
        const w = writer();
        if (w.needsDrain) void w.drained().then(() => send({ t: "go", p: m.p }), () => send({ t: "go", p: m.p }));
        else send({ t: "go", p: m.p });
        return;
      }
      case "done":
        if (!mine.has(m.p)) return;
        try {
          record.complete(m.p, m.type, m.value);
        } catch (e) {
          findings.push({ kind: "harness", text: `worker ${spec.worker}: ${(e as Error).message}` });
          child.kill("SIGKILL");
        }
        return;
      case "stopped":
        stopped = true;
        stoppedError = m.error;
        return;
      case "gated":
        gatedWaiters.shift()?.();
        return;
    }
  });
  const exited = new Promise<{ code: number | null; signal: string | null; stopped: boolean; error?: string }>((resolve) => {
    child.on("exit", (code, sig) => {
      if (stoppedError !== undefined) findings.push({ kind: "harness", text: `worker ${spec.worker} (${spec.role.role}) failed: ${stoppedError.split("\n")[0]}` });
      else if (!stopped && sig !== "SIGKILL") {
        findings.push({ kind: "harness", text: `worker ${spec.worker} (${spec.role.role}) exited (code ${code}, signal ${sig}) without stopping: ${stderr.trim().slice(-500)}` });
      }
      resolve({ code, signal: sig, stopped, ...(stoppedError !== undefined ? { error: stoppedError } : {}) });
    });
    child.on("error", (e) => {
      if (child.pid === undefined) {
        findings.push({ kind: "harness", text: `worker ${spec.worker} could not be started: ${e.message}` });
        resolve({ code: null, signal: null, stopped: false, error: e.message });
      }
    });
  });
  void exited.then(({ code, signal }) => {
    for (const w of gatedWaiters.splice(0)) w();
    // A worker gone before it was ready never will be: fail the start now, with what it printed.
    rejectReady(new Error(`a worker exited (code ${code}, signal ${signal}) before it was ready`));
  });
  const gate = (open: boolean): Promise<void> => {
    if (!child.connected) return Promise.resolve();
    if (open) {
      send({ t: "gate", open });
      return Promise.resolve();
    }
    const p = new Promise<void>((resolve) => gatedWaiters.push(resolve));
    send({ t: "gate", open });
    return p;
  };
  send({ t: "init", spec });
  return { index: spec.worker, spec, child, ready, gate, exited, stderrTail: () => stderr };
}

async function stopWorkers(workers: WorkerHandle[], findings: Finding[]): Promise<void> {
  for (const w of workers) if (w.child.connected) w.child.send({ t: "stop" } satisfies DriverMessage, (err) => void err);
  const all = Promise.all(workers.map((w) => w.exited));
  const grace = new AbortController();
  const timedOut = await Promise.race([all.then(() => false), sleep(RUN_LIMITS.workerStopGraceMs, grace.signal).then(() => true)]);
  grace.abort();
  if (timedOut) {
    for (const w of workers) {
      if (w.child.exitCode === null && w.child.signalCode === null) {
        findings.push({ kind: "harness", text: `worker ${w.index} (${w.spec.role.role}) did not stop within ${RUN_LIMITS.workerStopGraceMs} ms and was killed` });
        w.child.kill("SIGKILL");
      }
    }
    await all;
  }
}
