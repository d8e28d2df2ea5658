// One NATS run (`narad verify run --system nats --scenario NAME`): a nats-server of its own, the
// fault proxy in front of it on the consumer's line only, a publisher on a direct line that
// records each publish and its PubAck, the consumer under test, the scenario's faults, a drain,
// and the stream model's verdict on the history (SPEC.md "The stream model").
//
// Timeline: the consumer starts, the publisher publishes one message every PUBLISH_INTERVAL_MS
// (one in flight at a time, so the history's order of oks is the stream's), the faults run on
// their schedule from the start of publishing, publishing stops AFTER_MS after the last heal, and
// the drain waits for the consumer to deliver the last acknowledged seq (DRAIN_TIMEOUT_MS, then
// `stalled`). Each heal's ok carries the proxy counters' change over the fault (the evidence) and
// the stream's consumer count on the server at that moment (the seed's 5-second deletion, seen
// from the server). A restart is a `terminate` and a `start` whose ok carries the new server ID
// (`boot`, its evidence); a pause is a `pause` whose ok carries the process state read from /proc
// ("stopped") and a `resume`.

import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readProcState } from "../../nemesis/process.js";
import { startProxy, type Proxy, type ProxyCounters } from "../../proxy/index.js";
import { StreamHistoryWriter, type StreamConfigValue } from "../../history/stream.js";
import { checkStream } from "../../checker/stream/index.js";
import type { StreamReport } from "../../checker/stream/types.js";
import { formatStreamSummary, renderStreamHtml, renderStreamJson } from "../../report/stream.js";
import { startNatsServer, type NatsServer } from "./server.js";
import {
  clientName,
  CONNECTION_OPTIONS,
  isDefiniteRefusal,
  KV_STREAM,
  PUBLISH_TIMEOUT_MS,
  startConsumer,
  startPublisher,
  STREAM,
  type ClientGeneration,
  type ConsumerApi,
  type Publisher,
  type RunningConsumer,
} from "./clients.js";
import { AFTER_MS, scenarioFaultsEndMs, type NatsScenario, type ScenarioFault } from "./scenarios.js";

export const PUBLISH_INTERVAL_MS = 20;
/**
 * How long the drain waits for the consumer to deliver the last acknowledged seq: past the 3.x
 * pull consumers' heartbeat alarm (two missed 15-s heartbeats, counted on 15-s ticks: 30 to 45 s),
 * so that a consumer that recovers by that alarm is slow (lag), not stalled.
 */
export const DRAIN_TIMEOUT_MS = 60_000;
/** How long the consumer may take to start (connect, create its consumer). */
export const CONSUMER_START_TIMEOUT_MS = 10_000;

export interface NatsRunOptions {
  gen: ClientGeneration;
  api: ConsumerApi;
  scenario: NatsScenario;
  outDir: string;
  /** Progress lines for people (the CLI prints them). */
  onProgress?: (line: string) => void;
  signal?: AbortSignal;
  /**
   * After the drain, keep recording deliveries this long (default 0): what a consumer delivers
   * late (a redelivery after an ack wait) is then in the history too, and judged.
   */
  lingerMs?: number;
}

export interface NatsRunResult {
  client: string;
  api: ConsumerApi;
  scenario: string;
  report: StreamReport;
  historyPath: string;
  reportJsonPath: string;
  reportHtmlPath: string;
  summary: string;
  durationMs: number;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (ms <= 0 || signal?.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** How often the server's consumer count is read while a fault lasts (faults shorter than this: not read). */
export const CONSUMER_COUNT_EVERY_MS = 500;
/** How long a storm's reset waits after the consumer's reconnect, so that a working connection is reset, not a fresh one. */
export const CONNECTED_SETTLE_MS = 500;
/** How long a reset of a storm waits for the consumer to be connected again. */
export const RECONNECT_WAIT_MS = 5_000;
/** How long a run waits for the publisher's first acknowledged publish after a restart or pause. */
export const PUBLISHER_BACK_MS = 20_000;
/** How often a condition wait looks again. */
const CONDITION_POLL_MS = 20;
/** How long a SIGSTOP or SIGCONT may take to show in /proc. */
const PROC_STATE_TIMEOUT_MS = 5_000;

/** Waits for the process's /proc state to be stopped (T) or not; returns it. */
async function procState(pid: number, stopped: boolean): Promise<string> {
  const until = performance.now() + PROC_STATE_TIMEOUT_MS;
  for (;;) {
    const st = await readProcState(pid);
    if (st !== null && (st === "T" || st === "t") === stopped) return st;
    if (performance.now() >= until) throw new Error(`pid ${pid}: /proc state ${st} after ${PROC_STATE_TIMEOUT_MS} ms, expected ${stopped ? "stopped" : "running"}`);
    await sleep(CONDITION_POLL_MS);
  }
}

/** Waits until `cond()` holds (true) or the deadline passes (false). */
async function waitFor(cond: () => boolean, deadlineMs: number, signal?: AbortSignal): Promise<boolean> {
  const until = performance.now() + deadlineMs;
  while (!cond()) {
    if (performance.now() >= until || signal?.aborted) return false;
    await sleep(CONDITION_POLL_MS, signal);
  }
  return true;
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
    p.then(
      (v) => (clearTimeout(t), resolve(v)),
      (e) => (clearTimeout(t), reject(e)),
    );
  });
}

/** What changed in the proxy's counters over a fault: nonzero entries are its evidence. */
export function stoppedBetween(a: ProxyCounters, b: ProxyCounters): Record<string, number> {
  return {
    connections_reset: b.connectionsReset - a.connectionsReset,
    connections_dropped: b.connectionsDropped - a.connectionsDropped,
    bytes_delayed_downstream: b.downstream.bytesDelayed - a.downstream.bytesDelayed,
    bytes_delayed_upstream: b.upstream.bytesDelayed - a.upstream.bytesDelayed,
  };
}

/** The faults of the consumer's line, which the proxy makes. */
type LineFault = Extract<ScenarioFault, { kind: "cut" | "latency" }>;

function applyFault(proxy: Proxy, f: LineFault): void {
  if (f.kind === "cut") proxy.setToxic("both", { kind: "reset" });
  else proxy.setToxic("downstream", { kind: "latency", latencyMs: f.latencyMs });
}

function removeFault(proxy: Proxy, f: LineFault): void {
  if (f.kind === "cut") proxy.removeToxic("both", "reset");
  else proxy.removeToxic("downstream", "latency");
}

export async function runNatsScenario(o: NatsRunOptions): Promise<NatsRunResult> {
  const t0 = performance.now();
  const say = o.onProgress ?? (() => undefined);
  await mkdir(o.outDir, { recursive: true });
  const historyPath = join(o.outDir, "history.jsonl");
  const client = clientName(o.gen);
  const drainTimeoutMs = o.scenario.drainTimeoutMs ?? DRAIN_TIMEOUT_MS;
  let server: NatsServer | null = null;
  // The store outlives each server of the run (a restart starts a new one on it).
  const dataDir = await mkdtemp(join(tmpdir(), "narad-nats-"));
  let paused = false;
  let proxy: Proxy | null = null;
  let publisher: Publisher | null = null;
  let consumer: RunningConsumer | null = null;
  let w: StreamHistoryWriter | null = null;
  // Callbacks can still fire while the consumer closes: nothing is recorded after the drain.
  let recording = true;
  // The consumer's connection as it reports it, and a reset waiting for its next handshake.
  let clientConnected = true;
  let onHandshake: (() => void) | null = null;
  try {
    server = await startNatsServer({ dataDir });
    proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: server.host, targetPort: server.port });
    const direct = `${server.host}:${server.port}`;
    const viaProxy = `${proxy.address.host}:${proxy.address.port}`;
    say(`nats-server ${server.version} on ${direct} (pid ${server.pid}), the consumer through the proxy on ${viaProxy}`);
    publisher = await startPublisher(direct, o.api);
    const config: StreamConfigValue = {
      model: "stream",
      stream: o.api === "kv-watch" ? KV_STREAM : STREAM,
      system: "nats",
      client,
      api: o.api,
      scenario: o.scenario.name,
      prediction: o.scenario.prediction,
      server_version: server.version,
      boot: server.serverId,
      connection_options: CONNECTION_OPTIONS,
      publish_interval_ms: PUBLISH_INTERVAL_MS,
      publish_timeout_ms: PUBLISH_TIMEOUT_MS,
      drain_timeout_ms: drainTimeoutMs,
    };
    const writer = (w = StreamHistoryWriter.open(historyPath, config));
    let highest = 0;
    let waiter: { until: number; resolve: () => void } | null = null;
    consumer = await withTimeout(
      startConsumer(o.gen, o.api, viaProxy, {
        onDeliver(d) {
          if (!recording) return;
          writer.deliver("c0", /^(0|[1-9][0-9]{0,14})$/.test(d.msg) ? Number(d.msg) : d.msg, d.seq);
          if (d.seq > highest) highest = d.seq;
          if (waiter !== null && highest >= waiter.until) waiter.resolve();
        },
        onEvent(event, detail) {
          if (event === "disconnect") clientConnected = false;
          if (event === "reconnect") clientConnected = true;
          if (recording) writer.clientEvent("c0", event, detail);
          if (event === "update" && onHandshake !== null) onHandshake();
        },
      }),
      CONSUMER_START_TIMEOUT_MS,
      `starting the ${o.api} consumer`,
    );

    // The publisher: one publish in flight, one every PUBLISH_INTERVAL_MS, none while `quiet`.
    let publishing = true;
    let quiet = false;
    let lastOkAt = 0;
    let lastAcked = 0;
    let next = 0;
    const pub = publisher;
    const publishLoop = (async () => {
      let tick = performance.now();
      while (publishing && !o.signal?.aborted) {
        if (quiet) {
          await sleep(CONDITION_POLL_MS);
          tick = performance.now();
          continue;
        }
        const msg = ++next;
        writer.invoke("p0", "publish", { stream: config.stream, msg });
        try {
          const seq = await pub.publish(String(msg));
          writer.complete("p0", "ok", { seq });
          if (seq > lastAcked) lastAcked = seq;
          lastOkAt = performance.now();
        } catch (e) {
          writer.complete("p0", isDefiniteRefusal(e) ? "fail" : "info", { error: (e as Error).message });
        }
        tick += PUBLISH_INTERVAL_MS;
        await sleep(tick - performance.now());
      }
    })();

    // The faults, one after another, on their schedule from the start of publishing (a fault
    // that must find the consumer connected waits for it, and the rest of the schedule with it).
    const start = performance.now();
    const at = (ms: number) => sleep(start + ms - performance.now(), o.signal);
    const elapsed = () => `${((performance.now() - start) / 1000).toFixed(2)} s`;
    let lateMs = 0;
    // After a fault of the server, the publisher too must be back (reconnected, its first publish
    // acknowledged: a publish sent while it was down times out 5 s later) before the rest of the
    // schedule runs, so that publishes acknowledged after the fault are there to wait for the
    // consumer's rebuild (the lag measures it; the silence after such a fault has nothing waiting).
    const publisherBack = async (since: number) => {
      const waitStart = performance.now();
      if (!(await waitFor(() => lastOkAt > since, PUBLISHER_BACK_MS, o.signal))) say(`${elapsed()}  no publish acknowledged within ${PUBLISHER_BACK_MS} ms of the fault's end`);
      lateMs += performance.now() - waitStart;
    };
    for (const f of o.scenario.faults) {
      await at(f.atMs + lateMs);
      if (o.signal?.aborted) break;
      if (f.kind === "cut" && f.when !== undefined) {
        const waitStart = performance.now();
        const ready =
          f.when === "connected"
            ? (await waitFor(() => clientConnected, RECONNECT_WAIT_MS, o.signal)) && (await sleep(CONNECTED_SETTLE_MS, o.signal), clientConnected)
            : await new Promise<boolean>((resolve) => {
                const t = setTimeout(() => ((onHandshake = null), resolve(false)), RECONNECT_WAIT_MS);
                // Called from the client's own `update` callback: the reset lands before any further I/O.
                onHandshake = () => {
                  clearTimeout(t);
                  onHandshake = null;
                  resolve(true);
                };
              });
        lateMs += performance.now() - waitStart;
        if (!ready) say(`${elapsed()}  no ${f.when === "connected" ? "reconnect" : "handshake"} within ${RECONNECT_WAIT_MS} ms: this reset may find nothing to reset`);
      }
      if (f.kind === "restart") {
        // Stop, stay down, start again on the same port and store: the proxy and the publisher find it there.
        const began = performance.now();
        const { pid, port } = server;
        writer.invoke("nemesis", "fault", { kind: "terminate", pid });
        if ((f.quietMs ?? 0) > 0) quiet = true;
        await server.stop();
        writer.complete("nemesis", "ok", { kind: "terminate", pid, exited: true });
        say(`${elapsed()}  nats-server stopped (pid ${pid})`);
        await sleep(f.durationMs, o.signal);
        writer.invoke("nemesis", "fault", { kind: "start", port });
        server = await startNatsServer({ dataDir, port });
        writer.complete("nemesis", "ok", { kind: "start", port, pid: server.pid, boot: server.serverId });
        say(`${elapsed()}  nats-server started again (pid ${server.pid}, server ID ${server.serverId})`);
        lateMs += performance.now() - began - f.durationMs;
        if (quiet) {
          await sleep(f.quietMs!, o.signal);
          quiet = false;
          say(`${elapsed()}  publishing again`);
        }
        await publisherBack(performance.now());
        continue;
      }
      if (f.kind === "pause") {
        const began = performance.now();
        const pid = server.pid;
        writer.invoke("nemesis", "fault", { kind: "pause", pid });
        process.kill(pid, "SIGSTOP");
        paused = true;
        writer.complete("nemesis", "ok", { kind: "pause", pid, state: "stopped", proc_state: await procState(pid, true) });
        say(`${elapsed()}  nats-server paused (SIGSTOP)`);
        await sleep(f.durationMs, o.signal);
        writer.invoke("nemesis", "fault", { kind: "resume", pid });
        process.kill(pid, "SIGCONT");
        paused = false;
        writer.complete("nemesis", "ok", { kind: "resume", pid, proc_state: await procState(pid, false) });
        lateMs += performance.now() - began - f.durationMs;
        say(`${elapsed()}  nats-server resumed (SIGCONT)`);
        await publisherBack(performance.now());
        continue;
      }
      const value = f.kind === "cut" ? { kind: "cut", mode: f.mode } : { kind: "latency", direction: "downstream", latency_ms: f.latencyMs };
      writer.invoke("nemesis", "fault", value);
      const before = proxy.counters();
      applyFault(proxy, f);
      writer.complete("nemesis", "ok", value);
      say(`${elapsed()}  ${f.kind} begins`);
      // While it lasts, the server's count of the stream's consumers every CONSUMER_COUNT_EVERY_MS
      // (the seed's poll: when does the server drop the consumer the client lost its line to?).
      const faultStart = performance.now();
      const counts: Array<[number, number | string]> = [];
      for (;;) {
        const left = faultStart + f.durationMs - performance.now();
        if (left <= 0 || o.signal?.aborted) break;
        if (f.durationMs >= CONSUMER_COUNT_EVERY_MS) {
          let n: number | string;
          try {
            n = await publisher.consumerCount();
          } catch (e) {
            n = (e as Error).message;
          }
          counts.push([Math.round(performance.now() - faultStart), n]);
        }
        await sleep(Math.min(left, CONSUMER_COUNT_EVERY_MS), o.signal);
      }
      writer.invoke("nemesis", "fault", { kind: "heal" });
      removeFault(proxy, f);
      const stopped = stoppedBetween(before, proxy.counters());
      let serverConsumers: number | string;
      try {
        serverConsumers = await publisher.consumerCount();
      } catch (e) {
        serverConsumers = (e as Error).message;
      }
      writer.complete("nemesis", "ok", { kind: "heal", stopped, server_consumers: serverConsumers, ...(counts.length > 0 ? { server_consumers_during: counts } : {}) });
      say(`${elapsed()}  heal (server consumers ${serverConsumers})`);
    }
    await at(scenarioFaultsEndMs(o.scenario) + lateMs + AFTER_MS);
    publishing = false;
    await publishLoop;

    // The drain: the consumer must reach the last acknowledged seq by itself.
    writer.invoke("c0", "drain", { until_seq: lastAcked });
    say(`drain until seq ${lastAcked} (the consumer is at ${highest})`);
    if (highest < lastAcked) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(t);
          o.signal?.removeEventListener("abort", done);
          resolve();
        };
        const t = setTimeout(done, drainTimeoutMs);
        waiter = { until: lastAcked, resolve: done };
        o.signal?.addEventListener("abort", done, { once: true });
      });
    }
    writer.complete("c0", highest >= lastAcked ? "ok" : "info", { seq: highest });
    if ((o.lingerMs ?? 0) > 0) {
      say(`lingering ${o.lingerMs} ms for late deliveries`);
      await sleep(o.lingerMs!, o.signal);
    }
    for (const e of consumer.finalEvents()) writer.clientEvent("c0", e.event, e.detail);
    recording = false;
  } finally {
    recording = false;
    await consumer?.stop().catch(() => undefined);
    await publisher?.close().catch(() => undefined);
    await w?.close().catch(() => undefined);
    await proxy?.close().catch(() => undefined);
    if (paused && server !== null) process.kill(server.pid, "SIGCONT");
    await server?.stop().catch(() => undefined);
    await rm(dataDir, { recursive: true, force: true });
  }
  const report = await checkStream(historyPath);
  const reportJsonPath = join(o.outDir, "report.json");
  const reportHtmlPath = join(o.outDir, "report.html");
  await writeFile(reportJsonPath, renderStreamJson(report));
  await writeFile(reportHtmlPath, renderStreamHtml(report));
  return {
    client,
    api: o.api,
    scenario: o.scenario.name,
    report,
    historyPath,
    reportJsonPath,
    reportHtmlPath,
    summary: formatStreamSummary(report, { jsonPath: reportJsonPath, htmlPath: reportHtmlPath }),
    durationMs: performance.now() - t0,
  };
}
