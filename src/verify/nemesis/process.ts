// A broker node as a real operating-system process, and the process faults a nemesis applies to it.
//
// Design note.
// - A node is started exactly as a user starts one: `node bin/narad server start --dev --data-dir
//   DIR --listen HOST:PORT [extra args]`. It is up when it prints its ready line
//   `narad listening on http://HOST:PORT (node ID, data DIR)`; then `GET /healthz` tells its boot
//   id (`Narad-Boot`), the evidence a checker needs that a restart really happened.
// - The port stays the same across restarts, so clients and proxies keep one address: the first
//   start asks for the configured port (0 by default: the server binds a free one, with no race)
//   and every later start asks for the port the first one got. A port can still be taken while
//   the node is down (another process's ephemeral port): a start that fails with "in use" is
//   retried, at most START_ATTEMPTS_MAX times.
// - Every fault returns its evidence, snake_case because it goes into a history fault `ok` value
//   as is: exit code or signal and how long a stop took, the new pid and boot id, the process
//   state read back from /proc/PID/stat. Each fault refuses (throws) when it cannot be what it
//   claims: power loss on a node that is not in the test-only power-loss mode, a kill of a node
//   that is not running. A nemesis records a throw as `info {error}`.
// - Everything waits with a deadline: the ready line, a graceful stop (then SIGKILL), the exit
//   after SIGKILL, the /proc state after SIGSTOP and SIGCONT. Output is kept as a bounded tail.
// - Linux only: pause evidence comes from /proc.

import { spawn, type ChildProcess } from "node:child_process";
import { readFile } from "node:fs/promises";
import http from "node:http";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { readyLineScanner, type ReadyLine } from "../../protocol/ready-line.js";

export const NODE_PROCESS_DEFAULTS = {
  /** From spawn to the ready line. */
  readyTimeoutMs: 30_000,
  /** SIGTERM, then SIGKILL after this long (the spec's 10 s). */
  terminateGraceMs: 10_000,
  /** After SIGKILL the exit should be immediate; past this something is badly wrong. */
  killExitTimeoutMs: 10_000,
  /** For /proc/PID/stat to show the state a signal asked for. */
  procStateTimeoutMs: 5_000,
  /** For GET /healthz after the ready line. */
  healthTimeoutMs: 5_000,
  /** Characters of stdout and stderr kept for diagnostics (the tail). */
  outputCharsMax: 256 * 1024,
} as const;

/** Starts that fail because the port is in use are retried up to this many attempts in all. */
export const START_ATTEMPTS_MAX = 3;

const PORT_IN_USE_RE = /EADDRINUSE|in use/i;

const REPO_ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
/** bin/narad of this checkout (this module runs from dist/src/verify/nemesis/). */
export const DEFAULT_NARAD_BIN = fileURLToPath(new URL("../../../../bin/narad", import.meta.url));

export interface NodeProcessOptions {
  dataDir: string;
  /** Default 127.0.0.1. */
  host?: string;
  /** Default 0: the first start picks a free port, later starts reuse it. */
  port?: number;
  /** Passed as --node-id when given; otherwise learned from the ready line. */
  nodeId?: string;
  /** Default true: --dev (security off). */
  dev?: boolean;
  /** Appended after the standard flags. */
  extraArgs?: string[];
  /** Added to the inherited environment. */
  env?: Record<string, string>;
  /** Sets NARAD_TEST_POWER_LOSS=1: the storage keeps unsynced writes in memory (test-only mode). */
  powerLoss?: boolean;
  naradBin?: string;
  cwd?: string;
  readyTimeoutMs?: number;
  terminateGraceMs?: number;
  killExitTimeoutMs?: number;
  procStateTimeoutMs?: number;
  healthTimeoutMs?: number;
  outputCharsMax?: number;
}

export interface StartEvidence {
  pid: number;
  boot: string;
  port: number;
  /** From spawn to the ready line. */
  ready_ms: number;
  attempts: number;
}

export interface StopEvidence {
  pid: number;
  exit_code: number | null;
  signal: string | null;
  /** From the first signal to the exit. */
  duration_ms: number;
  /** terminate only: the process outlived the grace period and was killed. */
  sigkill_needed: boolean;
  /** The boot id of the process that stopped (not a new boot: the checker must not read it as one). */
  killed_boot: string | null;
  /**
   * kill only: the node ran in the test-only power-loss mode, so the kill lost what a power loss
   * would (unsynced writes lived in its memory); the checker gives it the power-loss window.
   */
  power_loss_mode?: true;
}

export interface PowerLossEvidence extends StopEvidence {
  power_loss_mode: true;
}

export interface ProcStateEvidence {
  pid: number;
  /** The state letter of /proc/PID/stat: 'T' stopped, 'S' sleeping, 'R' running, ... */
  state: string;
}

export interface Health {
  status: number;
  node: string | null;
  boot: string | null;
}

type Exit = { code: number | null; signal: NodeJS.Signals | null };

/** The state letter from /proc/PID/stat, or null when there is no such process. */
export async function readProcState(pid: number): Promise<string | null> {
  let text: string;
  try {
    text = await readFile(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  // The command name sits in parentheses and may itself contain ") ": the state follows the last one.
  const i = text.lastIndexOf(")");
  return i < 0 ? null : (text.slice(i + 2, i + 3) || null);
}

/** GET /healthz on host:port with a deadline; the node and boot headers are the point. */
export function getHealth(host: string, port: number, timeoutMs: number): Promise<Health> {
  return new Promise((resolve, reject) => {
    const req = http.get({ host, port, path: "/healthz", agent: false, timeout: timeoutMs }, (res) => {
      res.resume();
      const header = (name: string): string | null => {
        const v = res.headers[name];
        return typeof v === "string" ? v : null;
      };
      const h = { status: res.statusCode ?? 0, node: header("narad-node"), boot: header("narad-boot") };
      res.on("end", () => resolve(h));
      res.on("error", reject);
    });
    req.on("timeout", () => req.destroy(new Error(`GET /healthz timed out after ${timeoutMs} ms`)));
    req.on("error", reject);
  });
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

export class NodeProcess {
  private readonly opts: NodeProcessOptions;
  private readonly host: string;
  private portValue: number;
  private nodeIdValue: string | undefined;
  private child: ChildProcess | null = null;
  /** Set by the current child's exit (or spawn failure, which may emit no exit). */
  private childExited = true;
  private exitPromise: Promise<Exit> | null = null;
  private lastExitValue: Exit | null = null;
  private pausedValue = false;
  private bootValue: string | null = null;
  private outputTail = "";
  private readonly env: Record<string, string | undefined>;

  constructor(opts: NodeProcessOptions) {
    this.opts = opts;
    this.host = opts.host ?? "127.0.0.1";
    this.portValue = opts.port ?? 0;
    this.nodeIdValue = opts.nodeId;
    this.env = {
      ...process.env,
      NARAD_LOG_LEVEL: process.env.NARAD_LOG_LEVEL ?? "warn",
      ...opts.env,
      ...(opts.powerLoss ? { NARAD_TEST_POWER_LOSS: "1" } : {}),
    };
  }

  /** The node id as the broker reports it (ready line, Narad-Node); known after the first start. */
  get nodeId(): string {
    if (this.nodeIdValue === undefined) throw new Error("the node id is known only after the node's first start");
    return this.nodeIdValue;
  }
  /** The node id when known, else its URL: a name for messages and for records before a first start. */
  get name(): string {
    return this.nodeIdValue ?? this.url;
  }
  /** 0 until the first start has chosen one; the same for every later start. */
  get port(): number {
    return this.portValue;
  }
  get url(): string {
    return `http://${this.host.includes(":") ? `[${this.host}]` : this.host}:${this.portValue}`;
  }
  get dataDir(): string {
    return this.opts.dataDir;
  }
  get pid(): number | null {
    return this.running ? (this.child?.pid ?? null) : null;
  }
  /** The boot id learned at the last start. */
  get boot(): string | null {
    return this.bootValue;
  }
  get running(): boolean {
    return this.child !== null && !this.childExited;
  }
  get paused(): boolean {
    return this.running && this.pausedValue;
  }
  /** Whether the process runs (or will run) in the test-only power-loss mode. */
  get powerLossMode(): boolean {
    return this.env.NARAD_TEST_POWER_LOSS === "1";
  }
  get lastExit(): Exit | null {
    return this.lastExitValue;
  }
  /** The tail of everything the node printed, across starts. */
  output(): string {
    return this.outputTail;
  }

  private appendOutput(s: string): void {
    const max = this.opts.outputCharsMax ?? NODE_PROCESS_DEFAULTS.outputCharsMax;
    this.outputTail += s;
    if (this.outputTail.length > max) this.outputTail = this.outputTail.slice(this.outputTail.length - max);
  }

  private spawnOnce(): { child: ChildProcess; exit: Promise<Exit>; ready: Promise<ReadyLine>; output: () => string } {
    const args = [
      this.opts.naradBin ?? DEFAULT_NARAD_BIN,
      "server",
      "start",
      ...(this.opts.dev === false ? [] : ["--dev"]),
      "--data-dir",
      this.opts.dataDir,
      "--listen",
      `${this.host}:${this.portValue}`,
      ...(this.opts.nodeId === undefined ? [] : ["--node-id", this.opts.nodeId]),
      ...(this.opts.extraArgs ?? []),
    ];
    const child = spawn(process.execPath, args, {
      env: this.env,
      cwd: this.opts.cwd ?? REPO_ROOT,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let attemptOutput = "";
    const onText = (s: string) => {
      this.appendOutput(s);
      if (attemptOutput.length < 64 * 1024) attemptOutput += s;
    };
    this.childExited = false;
    const exit = new Promise<Exit>((resolve) => {
      child.on("exit", (code, signal) => {
        this.childExited = true;
        this.lastExitValue = { code, signal };
        this.pausedValue = false;
        resolve({ code, signal });
      });
      // A spawn failure (no node binary) emits error and maybe no exit.
      child.on("error", (e) => {
        onText(`process error: ${errorText(e)}\n`);
        // Only a failed spawn ends things here; a failed kill of a live process does not.
        if (child.pid === undefined) {
          this.childExited = true;
          resolve({ code: null, signal: null });
        }
      });
    });
    const ready = new Promise<ReadyLine>((resolve, reject) => {
      // The spec says the node prints the line, not on which stream: watch both.
      const watch = (stream: NodeJS.ReadableStream) => {
        const scan = readyLineScanner(resolve);
        stream.setEncoding("utf8");
        stream.on("data", (s: string) => {
          onText(s);
          scan(s);
        });
      };
      watch(child.stdout!);
      watch(child.stderr!);
      // 'close' comes after the output is drained, so the one-line reason is in the message.
      child.on("close", (code, signal) =>
        reject(new Error(`node exited (code ${code}, signal ${signal}) before its ready line: ${attemptOutput.trim().slice(-2000)}`)),
      );
      void exit.then(() => {
        if (child.pid === undefined) reject(new Error(`node could not be spawned: ${attemptOutput.trim()}`));
      });
    });
    // Once ready, nothing listens to rejection of `ready`: keep it from being unhandled.
    ready.catch(() => {});
    return { child, exit, ready, output: () => attemptOutput };
  }

  /** Starts the node; resolves when it printed its ready line and /healthz told its boot id. */
  async start(): Promise<StartEvidence> {
    if (this.running) throw new Error(`node ${this.nodeIdValue ?? this.url} is already running (pid ${this.child!.pid})`);
    const readyTimeoutMs = this.opts.readyTimeoutMs ?? NODE_PROCESS_DEFAULTS.readyTimeoutMs;
    const t0 = performance.now();
    for (let attempt = 1; ; attempt++) {
      const s = this.spawnOnce();
      this.child = s.child;
      this.exitPromise = s.exit;
      this.pausedValue = false;
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no ready line within ${readyTimeoutMs} ms: ${s.output().trim().slice(-2000)}`)), readyTimeoutMs);
      });
      let r: ReadyLine;
      try {
        r = await Promise.race([s.ready, timeout]);
      } catch (e) {
        clearTimeout(timer);
        if (this.running) await this.killAndWait();
        if (attempt < START_ATTEMPTS_MAX && PORT_IN_USE_RE.test(s.output())) continue;
        throw e;
      }
      clearTimeout(timer);
      const readyMs = Math.round(performance.now() - t0);
      const port = r.port;
      this.portValue = port;
      this.nodeIdValue = r.nodeId;
      const health = await this.waitHealthy();
      if (health.node !== null && health.node !== this.nodeIdValue) {
        throw new Error(`ready line says node ${this.nodeIdValue} but /healthz says Narad-Node ${health.node}`);
      }
      if (health.boot === null) throw new Error("GET /healthz answered without a Narad-Boot header: a restart cannot be evidenced");
      this.bootValue = health.boot;
      return { pid: s.child.pid!, boot: health.boot, port, ready_ms: readyMs, attempts: attempt };
    }
  }

  private async waitHealthy(): Promise<Health> {
    const timeoutMs = this.opts.healthTimeoutMs ?? NODE_PROCESS_DEFAULTS.healthTimeoutMs;
    const deadline = performance.now() + timeoutMs;
    let last: unknown;
    // The ready line comes after listen(), so the first try should answer; retry briefly anyway.
    while (performance.now() < deadline && this.running) {
      try {
        const h = await getHealth(this.host, this.portValue, Math.max(1, Math.round(deadline - performance.now())));
        if (h.status === 200) return h;
        last = new Error(`GET /healthz answered ${h.status}`);
      } catch (e) {
        last = e;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`node did not answer GET /healthz with 200 within ${timeoutMs} ms: ${errorText(last ?? "it exited")}`);
  }

  /** GET /healthz now, with a deadline (a paused node times out). */
  health(timeoutMs = 1_000): Promise<Health> {
    return getHealth(this.host, this.portValue, timeoutMs);
  }

  private requireRunning(what: string): ChildProcess {
    if (!this.running) {
      const exit = this.lastExitValue;
      throw new Error(
        `cannot ${what} node ${this.nodeIdValue ?? this.url}: it is not running` +
          (exit ? ` (last exit: code ${exit.code}, signal ${exit.signal})` : " (never started)"),
      );
    }
    return this.child!;
  }

  private waitExit(timeoutMs: number): Promise<Exit | null> {
    const exit = this.exitPromise!;
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(null), timeoutMs);
      void exit.then((e) => {
        clearTimeout(timer);
        resolve(e);
      });
    });
  }

  private async killAndWait(): Promise<Exit> {
    this.child!.kill("SIGKILL");
    const timeoutMs = this.opts.killExitTimeoutMs ?? NODE_PROCESS_DEFAULTS.killExitTimeoutMs;
    const e = await this.waitExit(timeoutMs);
    if (!e) throw new Error(`pid ${this.child!.pid} did not exit within ${timeoutMs} ms of SIGKILL`);
    return e;
  }

  /** SIGTERM (the graceful stop); SIGKILL if it has not exited after the grace period. */
  async terminate(): Promise<StopEvidence> {
    const child = this.requireRunning("terminate");
    const killedBoot = this.bootValue;
    const t0 = performance.now();
    child.kill("SIGTERM");
    // A stopped process handles SIGTERM only once continued (what systemd does too).
    if (this.pausedValue) child.kill("SIGCONT");
    const graceMs = this.opts.terminateGraceMs ?? NODE_PROCESS_DEFAULTS.terminateGraceMs;
    let exit = await this.waitExit(graceMs);
    let sigkillNeeded = false;
    if (!exit) {
      sigkillNeeded = true;
      exit = await this.killAndWait();
    }
    return {
      pid: child.pid!,
      exit_code: exit.code,
      signal: exit.signal,
      duration_ms: Math.round(performance.now() - t0),
      sigkill_needed: sigkillNeeded,
      killed_boot: killedBoot,
    };
  }

  /** SIGKILL: the process dies with whatever the OS already has; unflushed acks are forgotten. */
  async kill(): Promise<StopEvidence> {
    const child = this.requireRunning("kill");
    const killedBoot = this.bootValue;
    const t0 = performance.now();
    const exit = await this.killAndWait();
    return {
      pid: child.pid!,
      exit_code: exit.code,
      signal: exit.signal,
      duration_ms: Math.round(performance.now() - t0),
      sigkill_needed: true,
      killed_boot: killedBoot,
      ...(this.powerLossMode ? { power_loss_mode: true as const } : {}),
    };
  }

  /**
   * SIGKILL of a node in the test-only power-loss mode, where unsynced writes live in process
   * memory and die with it. Refused for a node not in that mode: its kill would keep the page
   * cache, so calling it power loss would claim a fault that did not happen.
   */
  async powerLoss(): Promise<PowerLossEvidence> {
    this.requireRunning("power-loss");
    if (!this.powerLossMode) {
      throw new Error(
        `refusing power-loss on node ${this.nodeIdValue ?? this.url}: it was not started with NARAD_TEST_POWER_LOSS=1, ` +
          "so killing it would not lose unsynced writes (start it with powerLoss: true, or use kill)",
      );
    }
    return { ...(await this.kill()), power_loss_mode: true };
  }

  private async waitProcState(pid: number, want: (state: string | null) => boolean, what: string): Promise<string> {
    const timeoutMs = this.opts.procStateTimeoutMs ?? NODE_PROCESS_DEFAULTS.procStateTimeoutMs;
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const state = await readProcState(pid);
      if (want(state)) return state!;
      if (performance.now() > deadline) throw new Error(`pid ${pid}: /proc state ${state} after ${timeoutMs} ms, expected ${what}`);
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  /** SIGSTOP: the process keeps its sockets but answers nothing. Evidence: /proc state 'T'. */
  async pause(): Promise<ProcStateEvidence> {
    const child = this.requireRunning("pause");
    const pid = child.pid!;
    child.kill("SIGSTOP");
    this.pausedValue = true;
    const state = await this.waitProcState(pid, (s) => s === "T" || s === "t", "T (stopped)");
    return { pid, state };
  }

  /** SIGCONT. Evidence: the /proc state is no longer stopped. */
  async resume(): Promise<ProcStateEvidence> {
    const child = this.requireRunning("resume");
    const pid = child.pid!;
    child.kill("SIGCONT");
    const state = await this.waitProcState(pid, (s) => s !== null && s !== "T" && s !== "t", "not stopped");
    this.pausedValue = false;
    return { pid, state };
  }

  /** For cleanup (test `after` hooks): SIGKILL if running and wait for the exit. Never throws. */
  async dispose(): Promise<void> {
    if (!this.running) return;
    try {
      await this.killAndWait();
    } catch {
      // Nothing more to do from here; the error was a timeout waiting for a dead process.
    }
  }
}
