// The run's worker processes, from the driver's side: fork one per WorkerSpec, record what its
// lanes send (every invoke before its request goes out: the lane waits for "go"), gate producers,
// and stop them all at the end, killing any that outstays the grace. The protocol is protocol.ts.

import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { HistoryWriter } from "../history/writer.js";
import { ackProcess, type CompletionType, type DriverMessage, type OpF, type WorkerMessage, type WorkerSpec } from "./protocol.js";
import { RUN_LIMITS, type Finding } from "./run-options.js";

const WORKER_PATH = fileURLToPath(new URL("./worker.js", import.meta.url));

export interface WorkerHandle {
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

/** The recorder's two calls, as the driver and its workers use them. */
export interface RunRecorder {
  invoke(p: string, f: OpF | "fault", value: Record<string, unknown>): void;
  complete(p: string, type: CompletionType, value: Record<string, unknown>): void;
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
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

export async function withDeadline<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

export function spawnWorker(spec: WorkerSpec, record: RunRecorder, writer: () => HistoryWriter, findings: Finding[]): WorkerHandle {
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

export async function stopWorkers(workers: WorkerHandle[], findings: Finding[]): Promise<void> {
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
