// One client run (`narad verify run --workload client --scenario NAME`): a Narad node of its own,
// the fault proxy in front of it on the consumers' line only, a producer on a direct line, and the
// SDK's two consumer APIs as an application would run them, each on its own topic; the scenario's
// faults; the application catching up; a final drain; the lease model's verdict on the history;
// and the scenario's prediction set beside what the application saw (judge.ts).
//
// Design note.
// - Two records of one run, on one clock. history.jsonl is history v1: the producer's requests
//   (ops.ts's Lane) and every request the consumer loops send (recording.ts), the faults on process
//   `nemesis`, the final drain. client.json holds the application's record: each message a handler
//   was given and finished, the errors that reached it (onError calls, iterator throws, its own
//   acks that failed), its restarts. The checker judges the first; judge.ts the second.
// - The applications, as a user writes them:
//     process   client.process(topic, handler, { onError, signal }), concurrency 1;
//     messages  for await (const m of client.messages(topic, { batch: 10, signal })) { handle; ack }
//               (nack when the handler failed), started again after 1 s if the iterator throws.
//   Every 20th message fails its handler at its first delivery (the application's own failure),
//   so the nack paths meet the faults too.
// - Timeline: produce for WARMUP_MS, the faults on their schedule, AFTER_MS more, stop producing,
//   wait until each application handled every acknowledged message of its topic (the scenario's
//   drain timeout: then `stalled`), stop the applications, wait a visibility timeout (no lease
//   they held can still be live), drain both topics over the direct line until empty.
// - The node runs with --dev; seeded SDK bugs (seeded-bugs.ts) go on the consumers' clients only.

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Narad, NaradGoneError, type Message } from "../../../client/index.js";
import { DEFAULTS } from "../../../protocol/wire.js";
import { createRunClock } from "../../history/clock.js";
import { HistoryWriter } from "../../history/writer.js";
import type { ConfigValue } from "../../history/types.js";
import { NodeProcess, applyFault, type FaultRecorder, type NemesisTarget } from "../../nemesis/index.js";
import { startProxy, type Proxy } from "../../proxy/index.js";
import { check, type Report } from "../../checker/index.js";
import { renderJson } from "../../report/index.js";
import { Lane, decodePayload, encodePayload, type OpRecorder } from "../ops.js";
import { drainTopic } from "../roles.js";
import { stoppedBetween } from "../nats/run.js";
import { RecordingNarad } from "./recording.js";
import { installClientBugs, type ClientBugName } from "./seeded-bugs.js";
import { AFTER_MS, CLIENT_OPTIONS, CONSUMER_APIS, WARMUP_MS, faultEndMs, type ClientFault, type ClientScenario, type ConsumerApi } from "./scenarios.js";
import { findings, measureLane, type AppEvent, type FaultWindow, type LaneMeasure } from "./judge.js";
import { renderClientHtml } from "./report.js";

export const NODE_ID = "n1";
export const TOPICS: Record<ConsumerApi, string> = { process: "c-process", messages: "c-messages" };
/** One produce every PRODUCE_INTERVAL_MS, to the two topics in turn. */
export const PRODUCE_INTERVAL_MS = 20;
const PRODUCE_TIMEOUT_MS = 5_000;
/** Every FAIL_EVERY-th message fails its handler at its first delivery. */
const FAIL_EVERY = 20;
/** An iterator that threw is started again after this long (the application's own backoff). */
const APP_RESTART_AFTER_ERROR_MS = 1_000;
/** app-restart: the handler before the iterator's restart is this slow, so a batch builds. */
const SLOW_HANDLER_MS = 1_000;
/** After the applications stop, on top of the visibility timeout, before the final drain. */
const DRAIN_MARGIN_MS = 500;
/** How long the applications may take to end once told to stop. */
const APP_STOP_TIMEOUT_MS = 30_000;
const POLL_MS = 20;

export interface ClientRunOptions {
  scenario: ClientScenario;
  outDir: string;
  /** Seeded SDK bugs, on the consumers' clients (calibration). */
  bugs?: ClientBugName[];
  onProgress?: (line: string) => void;
  signal?: AbortSignal;
}

export interface ClientRunResult {
  scenario: string;
  bugs: ClientBugName[];
  report: Report;
  lanes: LaneMeasure[];
  /** Every bound a lane broke, one line each (the run's findings, shown first). */
  findings: string[];
  historyPath: string;
  clientPath: string;
  reportJsonPath: string;
  reportHtmlPath: string;
  durationMs: number;
}

/** The application's record, written to client.json. */
export interface ClientRecord {
  format: "narad-client-run/1";
  scenario: string;
  bugs: string[];
  faults: FaultWindow[];
  events: AppEvent[];
  lanes: LaneMeasure[];
  findings: string[];
}

class PlannedFailure extends Error {
  constructor(msg: string) {
    super(`the application's own failure on ${msg} (planted)`);
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

async function waitFor(cond: () => boolean, timeoutMs: number, signal?: AbortSignal): Promise<boolean> {
  const until = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() >= until || signal?.aborted) return false;
    await sleep(POLL_MS, signal);
  }
  return true;
}

function msgNumber(msg: string): number {
  const n = Number(msg.slice(1));
  return Number.isSafeInteger(n) ? n : -1;
}

/** Messages go to the two topics in turn, so each topic's every FAIL_EVERY-th fails once. */
function plannedFailure(msg: string, deliveryCount: number): boolean {
  return deliveryCount === 1 && Math.floor(msgNumber(msg) / CONSUMER_APIS.length) % FAIL_EVERY === 7;
}

function errorName(e: unknown): string {
  const err = e as { code?: unknown; message?: unknown };
  return `${typeof err?.code === "string" ? `${err.code}: ` : ""}${String(err?.message ?? e)}`.slice(0, 200);
}

/** One consumer application: its client, its loop and what it saw. */
class App {
  readonly topic: string;
  stopping = false;
  current: AbortController | null = null;
  /** app-restart: "now" restarts at the next handler; "slow" makes it slow first (messages). */
  restart: "now" | "slow" | null = null;
  leased = 0;
  yielded = 0;
  readonly handled = new Set<string>();
  loop: Promise<void> | null = null;
  /** When this application last restarted itself (app-restart), run clock. */
  restartedNs = 0;

  constructor(
    readonly api: ConsumerApi,
    readonly client: RecordingNarad,
    private readonly record: (e: Omit<AppEvent, "tNs" | "lane">) => number,
  ) {
    this.topic = TOPICS[api];
    client.onLeased = () => this.leased++;
  }

  ev(e: Omit<AppEvent, "tNs" | "lane">): void {
    if (e.kind === "handled" && e.msg !== undefined) this.handled.add(e.msg);
    const tNs = this.record(e);
    if (e.kind === "restart") this.restartedNs = tNs;
  }

  private delivered(m: Message, msg: string): void {
    const since = this.client.leasedSinceNs(m.receiptHandle);
    this.ev({ kind: "deliver", msg, deliveryCount: m.deliveryCount, ...(since !== undefined ? { leasedNs: since } : {}) });
  }

  start(): void {
    this.loop = this.api === "process" ? this.runProcess() : this.runMessages();
  }

  stop(): void {
    this.stopping = true;
    this.current?.abort();
  }

  private async runProcess(): Promise<void> {
    while (!this.stopping) {
      const ac = (this.current = new AbortController());
      try {
        await this.client.process(
          this.topic,
          (m: Message) => {
            const msg = decodePayload(m.payload);
            this.delivered(m, msg);
            if (plannedFailure(msg, m.deliveryCount)) {
              this.ev({ kind: "failed", msg });
              throw new PlannedFailure(msg);
            }
            this.ev({ kind: "handled", msg });
            if (this.restart !== null) {
              // A restart decided inside a handler: process() acks this message as it ends.
              this.restart = null;
              this.ev({ kind: "restart", detail: "process() ended from its handler" });
              ac.abort();
            }
          },
          {
            waitMs: CLIENT_OPTIONS.waitMs,
            signal: ac.signal,
            onError: (err, m) => {
              const kind = m === null ? "retry" : err instanceof PlannedFailure ? "handler" : err instanceof NaradGoneError ? "refused-ack" : "message-error";
              this.ev({ kind: "error", error: kind, detail: errorName(err), ...(m !== null ? { msg: decodePayload(m.payload) } : {}) });
            },
          },
        );
        if (!ac.signal.aborted) {
          this.ev({ kind: "error", error: "fatal", detail: "process() resolved by itself" });
          await sleep(APP_RESTART_AFTER_ERROR_MS);
        }
      } catch (e) {
        this.ev({ kind: "error", error: "fatal", detail: `process() rejected: ${errorName(e)}` });
        await sleep(APP_RESTART_AFTER_ERROR_MS);
      }
    }
  }

  private async runMessages(): Promise<void> {
    while (!this.stopping) {
      const ac = (this.current = new AbortController());
      let left = false;
      try {
        for await (const m of this.client.messages(this.topic, { batch: CLIENT_OPTIONS.batch, waitMs: CLIENT_OPTIONS.waitMs, signal: ac.signal })) {
          this.yielded++;
          const msg = decodePayload(m.payload);
          this.delivered(m, msg);
          if (this.restart === "slow") {
            await sleep(SLOW_HANDLER_MS);
            this.restart = "now";
          }
          if (plannedFailure(msg, m.deliveryCount)) {
            this.ev({ kind: "failed", msg });
            this.ev({ kind: "error", error: "handler", msg, detail: "planted" });
            await m.nack().catch((e: unknown) => this.ev({ kind: "error", error: "nack-failed", msg, detail: errorName(e) }));
          } else {
            this.ev({ kind: "handled", msg });
            await m.ack().catch((e: unknown) => this.ev({ kind: "error", error: e instanceof NaradGoneError ? "refused-ack" : "ack-failed", msg, detail: errorName(e) }));
          }
          // A restart in the middle of a batch: what was leased and not yet yielded is left behind.
          if (this.restart === "now" && this.leased > this.yielded) {
            this.restart = null;
            this.ev({ kind: "restart", detail: `iterator left with ${this.leased - this.yielded} of its batch not yielded` });
            this.yielded = this.leased;
            left = true;
            break;
          }
        }
        if (!ac.signal.aborted && !left) {
          this.ev({ kind: "error", error: "fatal", detail: "the iterator ended by itself" });
          await sleep(APP_RESTART_AFTER_ERROR_MS);
        }
      } catch (e) {
        this.ev({ kind: "error", error: "fatal", detail: `the iterator threw: ${errorName(e)}` });
        await sleep(APP_RESTART_AFTER_ERROR_MS);
      }
      this.yielded = this.leased;
    }
  }
}

export async function runClientScenario(o: ClientRunOptions): Promise<ClientRunResult> {
  const t0 = performance.now();
  const say = o.onProgress ?? (() => undefined);
  const sc = o.scenario;
  const bugs = o.bugs ?? [];
  await mkdir(o.outDir, { recursive: true });
  const historyPath = join(o.outDir, "history.jsonl");
  const clientPath = join(o.outDir, "client.json");
  const tmp = await mkdtemp(join(tmpdir(), "narad-client-run-"));
  const clock = createRunClock();
  const events: AppEvent[] = [];
  const faults: FaultWindow[] = [];
  const produced: Record<ConsumerApi, Map<string, number>> = { process: new Map(), messages: new Map() };
  const sent: Record<ConsumerApi, Map<string, number>> = { process: new Map(), messages: new Map() };
  let node: NodeProcess | null = null;
  let proxy: Proxy | null = null;
  let w: HistoryWriter | null = null;
  const clients: Narad[] = [];
  const apps: App[] = [];
  try {
    node = new NodeProcess({ dataDir: join(tmp, NODE_ID), nodeId: NODE_ID, dev: true, env: { NARAD_TEST_BUGS: "" } });
    await node.start();
    proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: node.port });
    const viaProxy = `http://127.0.0.1:${proxy.address.port}`;
    say(`node ${NODE_ID} on ${node.url} (pid ${node.pid}); the consumers through the proxy on ${viaProxy}${bugs.length > 0 ? `; TEST BUGS ${bugs.join(",")}` : ""}`);
    const admin = new Narad({ url: node.url, connections: 1, requestTimeoutMs: 10_000 });
    clients.push(admin);
    for (const t of Object.values(TOPICS)) await admin.createTopic({ name: t, partitions: 1, visibilityTimeoutMs: sc.visibilityTimeoutMs });
    const topics = Object.fromEntries(Object.values(TOPICS).map((t) => [t, { partitions: 1, visibility_timeout_ms: sc.visibilityTimeoutMs }]));
    const config: ConfigValue = {
      ack_flush_ms: DEFAULTS.ackFlushIntervalMs,
      ack_sync_ms: DEFAULTS.ackSyncIntervalMs,
      visibility_timeout_ms: sc.visibilityTimeoutMs,
      topics,
      children: {},
      workload: "client",
      scenario: sc.name,
      description: sc.description,
      predictions: sc.predictions,
      client_options: CLIENT_OPTIONS,
      consumer_apis: Object.fromEntries(CONSUMER_APIS.map((a) => [a, TOPICS[a]])),
      bugs,
    };
    const writer = (w = HistoryWriter.open(historyPath, config, { clock }));
    const recorder: OpRecorder = {
      invoke: (p, f, value) => {
        writer.invoke(p, f, value);
        return Promise.resolve();
      },
      complete: (p, type, value) => writer.complete(p, type, value),
    };
    const record: FaultRecorder = (type, f, value) => (type === "invoke" ? writer.invoke("nemesis", f, value) : writer.complete("nemesis", type, value));
    const target: NemesisTarget = { node, proxy };

    // The applications.
    for (const api of CONSUMER_APIS) {
      const c = new RecordingNarad({ url: viaProxy, requestTimeoutMs: CLIENT_OPTIONS.requestTimeoutMs }, writer, api === "process" ? "cp" : "cm", () => clock.nowNs());
      installClientBugs(c, bugs);
      clients.push(c);
      const app = new App(api, c, (e) => {
        const tNs = clock.nowNs();
        events.push({ tNs, lane: api, ...e });
        return tNs;
      });
      apps.push(app);
      app.start();
    }

    // The producer, direct: one produce in flight, to the two topics in turn.
    const producer = { lane: new Lane("p0", node.url, recorder, { requestTimeoutMs: PRODUCE_TIMEOUT_MS }), ambiguous: 0 };
    let producing = true;
    let n = 0;
    const produceLoop = (async () => {
      let tick = performance.now();
      while (producing && !o.signal?.aborted) {
        const api = CONSUMER_APIS[n % CONSUMER_APIS.length]!;
        const msg = `m${++n}`;
        const sentNs = clock.nowNs();
        const out = await producer.lane.produce(TOPICS[api], msg, encodePayload(msg, 64), null);
        if (out.type === "ok") {
          produced[api].set(msg, clock.nowNs());
          sent[api].set(msg, sentNs);
        }
        else if (out.type === "info") producer.ambiguous++;
        tick += PRODUCE_INTERVAL_MS;
        await sleep(tick - performance.now());
      }
    })();

    // The faults, on their schedule from the start of producing.
    const start = performance.now();
    const at = (ms: number) => sleep(start + ms - performance.now(), o.signal);
    const elapsed = () => `${((performance.now() - start) / 1000).toFixed(2)} s`;
    for (const f of sc.faults) {
      await at(f.atMs);
      if (o.signal?.aborted) break;
      say(`${elapsed()}  ${f.kind} begins`);
      faults.push(...(await inject(f, target, record, writer, clock.nowNs, apps, (ms) => at(ms), o.signal)));
      say(`${elapsed()}  ${f.kind} ended`);
    }
    await at(Math.max(WARMUP_MS, ...sc.faults.map(faultEndMs)) + AFTER_MS);
    producing = false;
    await produceLoop;
    await producer.lane.close();

    // The applications must catch up by themselves.
    say(`${elapsed()}  producing stopped; waiting for the applications to handle every acknowledged message`);
    const caughtUp = () => apps.every((a) => [...produced[a.api].keys()].every((m) => a.handled.has(m)));
    if (!(await waitFor(caughtUp, sc.drainTimeoutMs, o.signal))) say(`${elapsed()}  not caught up within ${sc.drainTimeoutMs} ms: ${apps.map((a) => `${a.api} ${[...produced[a.api].keys()].filter((m) => !a.handled.has(m)).length} left`).join(", ")}`);
    for (const a of apps) a.stop();
    const stopWait = new AbortController();
    await Promise.race([Promise.all(apps.map((a) => a.loop)), sleep(APP_STOP_TIMEOUT_MS, stopWait.signal)]);
    stopWait.abort(); // no timer left behind to hold the process

    // The final drain, direct, once no lease the applications held can still be live: when a
    // lease they took was never settled, or a produce was ambiguous (a consume the stop aborted
    // may have leased it), a visibility timeout after their last request.
    const open = apps.some((a) => a.client.unsettled() > 0);
    if (open || producer.ambiguous > 0) await sleep(sc.visibilityTimeoutMs + DRAIN_MARGIN_MS, o.signal);
    const drainer = new Lane("d0", node.url, recorder, { requestTimeoutMs: 10_000 });
    for (const t of Object.values(TOPICS)) await drainTopic(drainer, t, 100_000, 50);
    await drainer.close();
    say(`${elapsed()}  drained`);
  } finally {
    for (const a of apps) a.stop();
    await Promise.all(clients.map((c) => c.destroy().catch(() => undefined)));
    await w?.close().catch(() => undefined);
    await proxy?.close().catch(() => undefined);
    if (node !== null) await node.terminate().catch(() => node!.dispose());
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
  }
  const report = await check(historyPath);
  const lanes = CONSUMER_APIS.map((api) =>
    measureLane({ api, topic: TOPICS[api], prediction: sc.predictions[api], producedNs: produced[api], sentNs: sent[api], events, faults, visibilityTimeoutMs: sc.visibilityTimeoutMs }),
  );
  const found = findings(lanes);
  if (report.verdict !== "valid") found.unshift(`lease model: ${report.verdict} (${report.reason})`);
  const rec: ClientRecord = { format: "narad-client-run/1", scenario: sc.name, bugs, faults, events, lanes, findings: found };
  await writeFile(clientPath, JSON.stringify(rec) + "\n");
  const reportJsonPath = join(o.outDir, "report.json");
  const reportHtmlPath = join(o.outDir, "report.html");
  await writeFile(reportJsonPath, renderJson(report));
  await writeFile(reportHtmlPath, renderClientHtml(report, sc, lanes, faults, events, found));
  return { scenario: sc.name, bugs, report, lanes, findings: found, historyPath, clientPath, reportJsonPath, reportHtmlPath, durationMs: performance.now() - t0 };
}

/** Injects one fault and waits out its effect; the windows it had (an app restart: one per application). */
async function inject(
  f: ClientFault,
  target: NemesisTarget,
  record: FaultRecorder,
  writer: HistoryWriter,
  nowNs: () => number,
  apps: App[],
  at: (ms: number) => Promise<void>,
  signal?: AbortSignal,
): Promise<FaultWindow[]> {
  const startNs = nowNs();
  const proxy = target.proxy!;
  switch (f.kind) {
    case "cut":
    case "latency": {
      const value = f.kind === "cut" ? { kind: "cut", node: NODE_ID, direction: "both", mode: "reset" } : { kind: "latency", node: NODE_ID, direction: "downstream", latency_ms: f.latencyMs };
      writer.invoke("nemesis", "fault", value);
      const before = proxy.counters();
      if (f.kind === "cut") proxy.setToxic("both", { kind: "reset" });
      else proxy.setToxic("downstream", { kind: "latency", latencyMs: f.latencyMs });
      writer.complete("nemesis", "ok", value);
      await at(f.atMs + f.durationMs);
      writer.invoke("nemesis", "fault", { kind: "heal", node: NODE_ID });
      if (f.kind === "cut") proxy.removeToxic("both", "reset");
      else proxy.removeToxic("downstream", "latency");
      writer.complete("nemesis", "ok", { kind: "heal", node: NODE_ID, stopped: stoppedBetween(before, proxy.counters()) });
      return [{ kind: f.kind, startNs, endNs: nowNs(), endsLeases: false, lane: null }];
    }
    case "pause":
      await applyFault(record, target, "pause");
      await at(f.atMs + f.durationMs);
      await applyFault(record, target, "resume");
      return [{ kind: "pause", startNs, endNs: nowNs(), endsLeases: false, lane: null }];
    case "restart":
      await applyFault(record, target, "terminate");
      await at(f.atMs + f.durationMs);
      await applyFault(record, target, "start");
      return [{ kind: "restart", startNs, endNs: nowNs(), endsLeases: true, lane: null }];
    case "app-restart": {
      // Each application restarts at its next handler (the iterator after a slow one, mid-batch).
      for (const a of apps) a.restart = a.api === "messages" ? "slow" : "now";
      await waitFor(() => apps.every((a) => a.restart === null), 10_000, signal);
      return apps.map((a) => ({ kind: "app-restart", startNs, endNs: a.restart === null ? a.restartedNs : nowNs(), endsLeases: false, lane: a.api }));
    }
  }
}
