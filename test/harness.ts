// Test harness: real broker processes on free ports with their own temp data directories.
// A node is started through bin/narad exactly as a user would, and is "up" when it prints its
// one-line ready message; its port is read from that line (we ask for port 0).

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { readyLineScanner, type ReadyLine } from "../src/protocol/ready-line.js";

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const NARAD_BIN = join(REPO_ROOT, "bin", "narad");


export interface NodeOptions {
  /** Reuse a data dir (restart); by default a fresh temp dir. */
  dataDir?: string;
  dev?: boolean;
  /** Extra CLI args after `server start`. */
  args?: string[];
  env?: Record<string, string>;
  /** Port to listen on; 0 (default) picks a free one. A restart should pass the old port. */
  port?: number;
  readyTimeoutMs?: number;
  /** A command the node runs under, e.g. ["prlimit", "--nofile=512:512", "--"]. */
  wrapper?: string[];
}

export interface RunningNode {
  url: string;
  port: number;
  nodeId: string;
  dataDir: string;
  proc: ChildProcess;
  /** Everything the process printed (stdout + stderr). */
  output(): string;
  /** SIGTERM and wait for exit; returns the exit code. */
  stop(): Promise<number | null>;
  /** SIGKILL and wait for exit. */
  kill(): Promise<void>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export async function tempDir(prefix = "narad-test-"): Promise<string> {
  return mkdtemp(join(tmpdir(), prefix));
}

export async function removeDir(dir: string): Promise<void> {
  await rm(dir, { recursive: true, force: true });
}

/** Runs `bin/narad ...args` to completion; returns exit code and output. */
export function runNarad(
  args: string[],
  opts: { env?: Record<string, string>; input?: Buffer | string; timeoutMs?: number; cwd?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string; stdoutBytes: Buffer }> {
  return new Promise((resolveRun, reject) => {
    const p = spawn(process.execPath, [NARAD_BIN, ...args], {
      env: { ...process.env, ...opts.env },
      cwd: opts.cwd ?? REPO_ROOT,
      stdio: ["pipe", "pipe", "pipe"],
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    p.stdout.on("data", (b: Buffer) => out.push(b));
    p.stderr.on("data", (b: Buffer) => err.push(b));
    const timer = setTimeout(() => p.kill("SIGKILL"), opts.timeoutMs ?? 30_000);
    p.on("error", reject);
    p.on("close", (code) => {
      clearTimeout(timer);
      const stdoutBytes = Buffer.concat(out);
      resolveRun({ code, stdout: stdoutBytes.toString("utf8"), stderr: Buffer.concat(err).toString("utf8"), stdoutBytes });
    });
    if (opts.input !== undefined) p.stdin.end(opts.input);
    else p.stdin.end();
  });
}

export async function startNode(opts: NodeOptions = {}): Promise<RunningNode> {
  const dataDir = opts.dataDir ?? (await tempDir());
  const args = [
    NARAD_BIN,
    "server",
    "start",
    ...(opts.dev === false ? [] : ["--dev"]),
    "--data-dir",
    dataDir,
    "--listen",
    `127.0.0.1:${opts.port ?? 0}`,
    ...(opts.args ?? []),
  ];
  const wrapper = opts.wrapper ?? [];
  const proc = spawn(wrapper[0] ?? process.execPath, wrapper.length > 0 ? [...wrapper.slice(1), process.execPath, ...args] : args, {
    env: { ...process.env, NARAD_LOG_LEVEL: process.env.NARAD_LOG_LEVEL ?? "warn", ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) =>
    proc.on("exit", (code, signal) => res({ code, signal })),
  );
  const ready = new Promise<ReadyLine>((res, rej) => {
    const timer = setTimeout(
      () => rej(new Error(`node did not print its ready line within ${opts.readyTimeoutMs ?? 20_000} ms:\n${output}`)),
      opts.readyTimeoutMs ?? 20_000,
    );
    const scan = readyLineScanner((r) => {
      clearTimeout(timer);
      res(r);
    });
    proc.stdout!.on("data", (b: Buffer) => {
      const s = b.toString("utf8");
      output += s;
      scan(s);
    });
    proc.stderr!.on("data", (b: Buffer) => (output += b.toString("utf8")));
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      rej(new Error(`node exited (code ${code}, signal ${signal}) before it was ready:\n${output}`));
    });
  });
  const r = await ready;
  const node: RunningNode = {
    url: r.url,
    port: r.port,
    nodeId: r.nodeId,
    dataDir,
    proc,
    output: () => output,
    exited,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
      return (await exited).code;
    },
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGKILL");
      await exited;
    },
  };
  return node;
}

/** Polls `cond` until it returns a truthy value or the deadline passes. */
export async function waitFor<T>(
  cond: () => T | Promise<T>,
  opts: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  for (;;) {
    const v = await cond();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${opts.what ?? "a condition"}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 20));
  }
}
