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

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRunClock, type RunClock } from "../history/clock.js";
import { HistoryWriter } from "../history/writer.js";
import type { ConfigValue } from "../history/types.js";
import { Nemesis, NodeProcess, restoreTarget, type FaultRecorder, type InjectedFaultKind } from "../nemesis/index.js";
import { startProxy } from "../proxy/index.js";
import { check, type Report, type Verdict } from "../checker/index.js";
import { renderHtml, renderJson } from "../report/index.js";
import { Lane, type OpRecorder } from "./ops.js";
import type { Credentials, RoleSpec, WorkerSpec } from "./protocol.js";
import { auditTopic, deriveSeed, drainTopic } from "./roles.js";
import { RunTracker } from "./tracker.js";
import type { WorkloadProfile } from "./workloads.js";
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
import { LoadCycle, type CycleTarget } from "./cycle.js";
import { FailoverNemesis, type FailoverTarget, type ReplicatedFaultKind } from "./failover.js";
import type { Proxy } from "../proxy/index.js";
import { createServer } from "node:net";
import { Narad } from "../../client/index.js";
import { idempotentProducer } from "./next-wave.js";
import {
  DEAD_LETTER_MIX,
  FAILOVER_HOLD_MIN_MS,
  MAIN_TOPIC,
  PROBE_TOPIC,
  PROBE_VISIBILITY_TIMEOUT_MS,
  REPLICATED_ENV,
  RUN_LIMITS,
  resolveRun,
  runConfig,
  topicSpec,
  verdictExitCode,
  type Finding,
  type ResolvedRun,
  type RunOptions,
  type RunResult,
  type RunTopic,
} from "./run-options.js";
import { RunProgressReporter } from "./run-progress.js";
import { sleep, spawnWorker, stopWorkers, withDeadline, type RunRecorder, type WorkerHandle } from "./worker-processes.js";

// What the workloads' index and calibration take from the driver (the options are run-options.ts).
export { MAIN_TOPIC, PROBE_TOPIC, PROBE_VISIBILITY_TIMEOUT_MS, RUN_LIMITS, verdictExitCode, type Finding, type RunOptions, type RunProgress, type RunResult } from "./run-options.js";

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

function systemOf(s: RunState, t: RunTopic): RunSystem {
  return t.system === "remote" ? s.remote! : s.main;
}

function allNodes(s: RunState): NodeProcess[] {
  return s.systems.flatMap((x) => x.nodes);
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
