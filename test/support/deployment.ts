// The deployments a test suite runs on: one node, or a cluster of three nodes on a PostgreSQL
// control plane. A suite (test/*-suite.ts) is one test body that takes a `Deploy` and never asks
// which deployment it got; what differs hides here:
//
// - how to start it, with security on or off (`--dev`);
// - the base URLs to talk to (a suite spreads its requests across them: on a cluster most then
//   reach a node that does not own the partition and are forwarded);
// - which node owns a partition (`owner`), so a crash test kills exactly the node that holds
//   what it wrote; on one node that is the node;
// - how to kill -9, SIGTERM, SIGSTOP and start a node again on its data directory and port.
//   `start()` resolves once the deployment serves through that node again: on a cluster, once
//   every node sees it live at its new boot and answers for each partition it owns (so a drain or
//   a replay through any node reaches it, rather than routing around a peer it still suspects).
//
//   const d = await singleNode();                       // or await threeNodeCluster(pg)()
//   const victim = await d.owner("orders", 0);
//   await victim.kill(); await victim.start();
//   await d.stop();                                     // every node, and its data directories
//
// Real processes, real HTTP and real files throughout (test/harness.ts, test/support/local-cluster.ts).

import { removeDir, startNode, waitFor, type RunningNode } from "../harness.js";
import { startCluster, type LocalCluster, type LocalNode } from "./local-cluster.js";
import type { TestPostgres } from "./postgres.js";

export interface DeployedNode {
  readonly id: string;
  /** Its base URL; the same across restarts (a node keeps its port). */
  readonly url: string;
  readonly dataDir: string;
  /** What the process printed (on a cluster, across its starts). */
  output(): string;
  /** SIGKILL: a crash. */
  kill(): Promise<void>;
  /** SIGTERM; resolves with the exit code. */
  stop(): Promise<number | null>;
  /** Starts it again on its data directory and port; `env` is added for this start only. */
  start(o?: { env?: Record<string, string> }): Promise<void>;
  /** SIGSTOP / SIGCONT. */
  pause(): void;
  resume(): void;
}

export interface Deployment {
  /** "single node" or "three-node cluster", for test names. */
  readonly name: string;
  readonly nodes: DeployedNode[];
  /** Every node's base URL, in node order. */
  readonly urls: string[];
  /** The node that owns `partition` of `topic` now. */
  owner(topic: string, partition: number): Promise<DeployedNode>;
  /** SIGTERM every node at once; the exit codes in node order. */
  stopAll(): Promise<(number | null)[]>;
  /** Starts every node again at once; resolves once each is served through every node. */
  startAll(o?: { env?: Record<string, string> }): Promise<void>;
  /** Stops everything and removes the data directories. */
  stop(): Promise<void>;
}

export interface DeployOptions {
  /** Security on, with this admin password (NARAD_ADMIN_PASSWORD at the first start); default: --dev. */
  adminPassword?: string;
  /** Extra environment for every node (NARAD_* settings). */
  env?: Record<string, string>;
}

export type Deploy = (o?: DeployOptions) => Promise<Deployment>;

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

/** One `narad server start` process. */
export const singleNode: Deploy = async (o = {}) => {
  const secured = o.adminPassword !== undefined;
  const env = { ...o.env, ...(secured ? { NARAD_ADMIN_PASSWORD: o.adminPassword! } : {}) };
  let cur: RunningNode = await startNode({ dev: !secured, env });
  const running = () => cur.proc.exitCode === null && cur.proc.signalCode === null;
  const node: DeployedNode = {
    get id() {
      return cur.nodeId;
    },
    get url() {
      return cur.url;
    },
    get dataDir() {
      return cur.dataDir;
    },
    output: () => cur.output(),
    kill: () => cur.kill(),
    stop: () => cur.stop(),
    async start(s = {}) {
      if (running()) throw new Error("the node is running already");
      cur = await startNode({ dev: !secured, dataDir: cur.dataDir, port: cur.port, env: { ...env, ...s.env } });
    },
    pause: () => void cur.proc.kill("SIGSTOP"),
    resume: () => void cur.proc.kill("SIGCONT"),
  };
  return {
    name: "single node",
    nodes: [node],
    get urls() {
      return [cur.url];
    },
    owner: async () => node,
    stopAll: async () => [await node.stop()],
    startAll: (s) => node.start(s),
    async stop() {
      await cur.kill();
      await removeDir(cur.dataDir);
    },
  };
};

/**
 * Three nodes on a fresh database of `pg()` (the file's PostgreSQL: test/support/postgres.ts's
 * postgresForFile), each a real process (test/support/local-cluster.ts).
 */
export function threeNodeCluster(pg: () => TestPostgres): Deploy {
  return async (o = {}) => {
    const secured = o.adminPassword !== undefined;
    const c = await startCluster({ nodes: 3, controlPlaneUrl: await pg().newDatabase(), security: secured, adminPassword: o.adminPassword, env: o.env });
    const headers: Record<string, string> = secured ? { authorization: basic("admin", o.adminPassword!) } : {};
    const handles = new Map<LocalNode, DeployedNode>();
    const handle = (n: LocalNode): DeployedNode => {
      let h = handles.get(n);
      if (h === undefined) {
        h = {
          id: n.id,
          get url() {
            return n.url;
          },
          dataDir: n.dataDir,
          output: () => n.output(),
          kill: () => n.kill(),
          stop: () => n.stop(),
          async start(s = {}) {
            await n.start(s);
            await servedEverywhere(c, n, headers);
          },
          pause: () => n.pause(),
          resume: () => n.resume(),
        };
        handles.set(n, h);
      }
      return h;
    };
    const nodes = c.nodes.map(handle);
    return {
      name: "three-node cluster",
      nodes,
      get urls() {
        return c.urls;
      },
      async owner(topic, partition) {
        const r = await fetch(`${c.urls[0]}/v1/topics/${encodeURIComponent(topic)}`, { headers });
        if (r.status !== 200) throw new Error(`GET /v1/topics/${topic}: ${r.status} ${await r.text()}`);
        const placement = ((await r.json()) as { placement: { partition: number; node: string }[] }).placement;
        const id = placement.find((p) => p.partition === partition)?.node;
        const n = c.nodes.find((x) => x.id === id);
        if (n === undefined) throw new Error(`no node owns ${topic}/${partition} (placement ${JSON.stringify(placement)})`);
        return handle(n);
      },
      stopAll: () => Promise.all(c.nodes.map((n) => n.stop())),
      async startAll(s = {}) {
        await Promise.all(c.nodes.map((n) => n.start(s)));
        for (const n of c.nodes) await servedEverywhere(c, n, headers);
      },
      stop: () => c.stop(),
    };
  };
}

/**
 * Waits until every node of `c` lists `n` live at its current boot, and answers a replay of each
 * partition `n` owns (a request forwarded to `n`, which also ends any suspicion of it a peer kept
 * from its death).
 */
async function servedEverywhere(c: LocalCluster, n: LocalNode, headers: Record<string, string>): Promise<void> {
  const boot = (await fetch(`${n.url}/healthz`)).headers.get("narad-boot");
  await waitFor(
    async () => {
      for (const url of c.urls) {
        try {
          const r = await fetch(`${url}/v1/nodes`, { headers });
          if (r.status !== 200) return false;
          const seen = ((await r.json()) as { nodes: { id: string; boot: string; state: string; partitions: { topic: string; partition: number }[] }[] }).nodes.find((x) => x.id === n.id);
          if (seen === undefined || seen.state !== "live" || seen.boot !== boot) return false;
          for (const p of seen.partitions) {
            const replay = await fetch(`${url}/v1/topics/${encodeURIComponent(p.topic)}/partitions/${p.partition}/messages?limit=1`, { headers });
            await replay.arrayBuffer();
            if (replay.status !== 200) return false;
          }
        } catch {
          return false; // a connection to a node that is not up yet
        }
      }
      return true;
    },
    { timeoutMs: 30_000, what: `every node of the cluster to serve ${n.id}'s partitions again` },
  );
}
