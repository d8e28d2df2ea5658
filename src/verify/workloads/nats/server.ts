// One nats-server with JetStream for a run: started on a free port (`-p -1`, the server picks and
// logs it) with its own temporary store directory, stopped and removed at the end. The server is
// found on PATH (`nats-server`; Debian and Ubuntu ship it as the package of that name) or at
// NARAD_NATS_SERVER. Nothing else of the machine is used: no config file, no other port.

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { accessSync, constants } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";

/** How long a start may take before the run gives up on it. */
export const NATS_START_TIMEOUT_MS = 15_000;
/** How long a stop waits for the process to exit after SIGTERM before SIGKILL. */
export const NATS_STOP_TIMEOUT_MS = 5_000;
/** The server's output kept for an error message. */
const OUTPUT_KEPT_BYTES = 8 * 1024;

export const NATS_INSTALL_HINT = "apt-get install -y nats-server";

/** The nats-server binary: NARAD_NATS_SERVER, else the first `nats-server` on PATH; null when absent. */
export function findNatsServer(env: NodeJS.ProcessEnv = process.env): string | null {
  const explicit = env["NARAD_NATS_SERVER"];
  const candidates = explicit ? [explicit] : (env["PATH"] ?? "").split(delimiter).filter(Boolean).map((d) => join(d, "nats-server"));
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      return c;
    } catch {
      // next
    }
  }
  return null;
}

export interface NatsServer {
  host: string;
  port: number;
  /** The server's ID (a new one at every start): the boot evidence of a restart. */
  serverId: string;
  version: string;
  dataDir: string;
  pid: number;
  stop(): Promise<void>;
}

/**
 * Starts a server. `dataDir` given: the caller owns it (it is kept at the stop), so that a restart
 * can start a new server on the same store; `port` given: that port (a restart's, so that every
 * client's reconnect finds it), else a free one.
 */
export async function startNatsServer(opts: { binary?: string; dataDir?: string; port?: number } = {}): Promise<NatsServer> {
  const binary = opts.binary ?? findNatsServer();
  if (binary === null) throw new Error(`nats-server not found on PATH (${NATS_INSTALL_HINT})`);
  const dataDir = opts.dataDir ?? (await mkdtemp(join(tmpdir(), "narad-nats-")));
  const ownDir = opts.dataDir === undefined;
  const child = spawn(binary, ["-js", "-a", "127.0.0.1", "-p", String(opts.port ?? -1), "-sd", dataDir], { stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  let serverId = "";
  let version = "";
  let port = 0;
  const ready = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`nats-server did not get ready in ${NATS_START_TIMEOUT_MS} ms:\n${output}`)), NATS_START_TIMEOUT_MS);
    const onData = (chunk: Buffer) => {
      output = (output + chunk.toString("utf8")).slice(-OUTPUT_KEPT_BYTES);
      serverId ||= /\bID:\s+(\S+)/.exec(output)?.[1] ?? "";
      version ||= /Version:\s+(\S+)/.exec(output)?.[1] ?? "";
      const m = /Listening for client connections on [^\s:]+:(\d+)/.exec(output);
      if (m) port = Number(m[1]);
      if (port > 0 && /Server is ready/.test(output)) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`nats-server exited during its start (code ${code}, signal ${signal}):\n${output}`));
    });
    child.once("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
  });
  try {
    await ready;
  } catch (e) {
    child.kill("SIGKILL");
    if (ownDir) await rm(dataDir, { recursive: true, force: true });
    throw e;
  }
  // After the start, keep draining the output so the pipes never fill, and remember only the tail.
  return {
    host: "127.0.0.1",
    port,
    serverId,
    version,
    dataDir,
    pid: child.pid!,
    stop: () => stopChild(child, ownDir ? dataDir : null),
  };
}

async function stopChild(child: ChildProcess, removeDir: string | null): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), NATS_STOP_TIMEOUT_MS);
    await exited;
    clearTimeout(timer);
  }
  if (removeDir !== null) await rm(removeDir, { recursive: true, force: true });
}
