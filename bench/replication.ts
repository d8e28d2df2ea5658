// Replicated topics (issue 13, docs/replication.md), BENCH_ONLY=replication: a 3-node cluster on an
// embedded PostgreSQL, loopback, this machine's two cores shared by the three nodes and the load.
//
// The rows, each beside a figure measured in the same run on the same cluster (the failovers: each
// on a fresh cluster of its own, on the same PostgreSQL):
//   produce, 1 message a request, 64 in flight, by HTTP and through the SDK (Narad.produce), to a
//     topic of factor 3 with acks quorum, one with acks leader, and one of factor 1: ratios to
//     factor 1 (goal: quorum >= 0.5x). Each load goes to its partition's leader, one partition a
//     topic, and the `cpu:` lines name the leader and its followers: the CPU a message costs is
//     summed over the three nodes (for factor 1 the other two idle).
//   produce latency at 1 in flight by HTTP, p50 and p99 (goal: quorum p99 <= factor-1 p99 + 2 ms).
//   follower lag under that load: the leader's narad_replication_lag_records and
//     narad_replication_lag_seconds sampled every LAG_SAMPLE_MS during the 64-in-flight runs of
//     each mode, max and p99 over every follower's samples.
//   failover: the leader of a quorum topic SIGKILLed while a producer keeps one request in flight
//     through each surviving node; the time from the kill to the first 202 again, with the
//     cluster's default lease settings and with test/support's FAST_LEASES (goal: the node lease
//     plus 2 s).

import { Pool } from "undici";
import { performance } from "node:perf_hooks";
import type { Harness } from "./peers.js";
import type { LoadResult } from "./main.js";
import { track } from "./cleanup.js";
import { Narad } from "../src/client/index.js";
import { SETTINGS } from "../src/config.js";

/** What main.ts lends this module (its harness without the single node's loads). */
export type ReplicationHarness = Omit<Harness, "narad">;

interface ClusterNode {
  id: string;
  url: string;
  pid: number | undefined;
  kill(): Promise<void>;
}
interface Cluster {
  nodes: ClusterNode[];
  stop(): Promise<void>;
}
interface Postgres {
  newDatabase(prefix?: string): Promise<string>;
  stop(): Promise<void>;
}
interface LocalClusterModule {
  startCluster(o: { nodes: number; controlPlaneUrl: string; env?: Record<string, string> }): Promise<Cluster>;
  startEmbeddedPostgres(): Promise<Postgres>;
  FAST_LEASES: Readonly<Record<string, string>>;
}

/** The leader's /metrics is read this often during a lag-sampled run. */
const LAG_SAMPLE_MS = 200;
/** cluster.node_lease_ms's default, for the failover goal (the node lease plus 2 s). */
const DEFAULT_NODE_LEASE_MS = Number(SETTINGS.find((x) => x.key === "cluster.node_lease_ms")!.default);
/** Each probe of the failover producer gives up after this long (a request to the dead leader's forward). */
const FAILOVER_PROBE_TIMEOUT_MS = 2000;
/** The failover row gives up when no 202 came back by then. */
const FAILOVER_DEADLINE_MS = 60_000;
/** Between two refused probes (the partition is between leaders): the figure's resolution. */
const FAILOVER_PROBE_PAUSE_MS = 10;

type Mode = "factor 1" | "quorum" | "leader";
const MODES: { mode: Mode; topic: string; body: Record<string, unknown> }[] = [
  { mode: "factor 1", topic: "bench-rep-f1", body: {} },
  { mode: "quorum", topic: "bench-rep-quorum", body: { replication_factor: 3, acks: "quorum" } },
  { mode: "leader", topic: "bench-rep-leader", body: { replication_factor: 3, acks: "leader" } },
];

interface Placed {
  mode: Mode;
  topic: string;
  leaderUrl: string;
  /** The nodes' pids by role (leader, follower n2, ...), for the `cpu:` lines. */
  pids: Record<string, number>;
  http: Pool;
  sdk: Narad;
}

async function getJson(url: string): Promise<any> {
  const r = await fetch(url);
  if (r.status !== 200) throw new Error(`GET ${url}: ${r.status} ${await r.text()}`);
  return r.json();
}

async function createTopic(url: string, name: string, extra: Record<string, unknown>): Promise<void> {
  const r = await fetch(`${url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name, partitions: 1, ...extra }) });
  if (r.status !== 201) throw new Error(`create ${name}: ${r.status} ${await r.text()}`);
}

/** Where the topic's one partition is led, and every node's pid named by its role for it. */
async function place(c: Cluster, mode: Mode, topic: string): Promise<{ leaderUrl: string; leaderId: string; pids: Record<string, number> }> {
  const t = await getJson(`${c.nodes[0]!.url}/v1/topics/${topic}`);
  const p = t.placement[0] as { node: string; replicas?: string[] };
  const leader = c.nodes.find((n) => n.id === p.node);
  if (leader === undefined) throw new Error(`${topic}: leader ${p.node} is not a node of this cluster`);
  const pids: Record<string, number> = {};
  for (const n of c.nodes) {
    if (n.pid === undefined) continue;
    const role = n === leader ? "leader" : mode === "factor 1" ? `idle ${n.id}` : `follower ${n.id}`;
    pids[role] = n.pid;
  }
  return { leaderUrl: leader.url, leaderId: leader.id, pids };
}

/** The sum over the cluster's nodes of the CPU a message cost (µs), from a median LoadResult. */
const clusterCpu = (r: LoadResult) => Object.values(r.cpuUsPerMsg).reduce((a, b) => a + b, 0);
const leaderCpu = (r: LoadResult) => r.cpuUsPerMsg.leader ?? NaN;

/** Calls `sample` every LAG_SAMPLE_MS while `run` runs; a failed sample is just not counted. */
async function sampledWhile<T>(sample: () => Promise<void>, run: () => Promise<T>): Promise<T> {
  let done = false;
  const loop = (async () => {
    while (!done) {
      const t0 = performance.now();
      await sample().catch(() => undefined);
      const wait = LAG_SAMPLE_MS - (performance.now() - t0);
      if (wait > 0 && !done) await new Promise((r) => setTimeout(r, wait));
    }
  })();
  try {
    return await run();
  } finally {
    done = true;
    await loop;
  }
}

/** The follower lag gauges of `topic`, read from its leader's /metrics (the leader pays for each read). */
class LagSampler {
  readonly records: number[] = [];
  readonly seconds: number[] = [];
  /** narad_under_replicated_partitions of the topic, one a sample: 1 while in_sync lacks a replica. */
  readonly underReplicated: number[] = [];
  constructor(
    private readonly leaderUrl: string,
    private readonly topic: string,
  ) {}

  readonly sample = async (): Promise<void> => {
    const text = await (await fetch(`${this.leaderUrl}/metrics`)).text();
    for (const m of text.matchAll(/^narad_replication_lag_(records|seconds)\{([^}]*)\} (\S+)$/gm)) {
      if (!m[2]!.includes(`topic="${this.topic}"`)) continue;
      (m[1] === "records" ? this.records : this.seconds).push(Number(m[3]));
    }
    const u = new RegExp(`^narad_under_replicated_partitions\\{topic="${this.topic}"\\} (\\S+)$`, "m").exec(text);
    if (u) this.underReplicated.push(Number(u[1]));
  };

  shortShare(): string {
    return `${((100 * this.underReplicated.filter((x) => x > 0).length) / Math.max(1, this.underReplicated.length)).toFixed(0)}%`;
  }
}

/**
 * Whether `topic`'s in_sync holds its whole replica set, read from a node other than its leader
 * (the placement in its view), so that the leader of a latency run does no extra work.
 */
class InSyncSampler {
  readonly short: boolean[] = [];
  constructor(
    private readonly otherUrl: string,
    private readonly topic: string,
  ) {}

  readonly sample = async (): Promise<void> => {
    const p = (await getJson(`${this.otherUrl}/v1/topics/${this.topic}`)).placement[0] as { replicas: string[]; in_sync: string[] };
    this.short.push(p.in_sync.length < p.replicas.length);
  };

  shortShare(): string {
    return `${((100 * this.short.filter(Boolean).length) / Math.max(1, this.short.length)).toFixed(0)}%`;
  }
}

const pctOf = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const a = [...xs].sort((x, y) => x - y);
  return a[Math.min(a.length - 1, Math.floor(a.length * p))]!;
};

export async function benchReplication(h: ReplicationHarness): Promise<void> {
  const mod = (await import(["../test/support/local-cluster", "js"].join("."))) as LocalClusterModule;
  const pg = await mod.startEmbeddedPostgres();
  const untrackPg = track({ stop: () => pg.stop() });
  try {
    const t0 = performance.now();
    await throughputAndLag(h, mod, await pg.newDatabase("narad_bench_rep"));
    // Each failover on a cluster of its own: nothing left over from the load, and the throughput
    // cluster's nodes all stop in order (their CPU profiles are written, BENCH_PROFILE_DIR).
    await failover(h, mod, await pg.newDatabase("narad_bench_failover"), {}, `default leases (node lease ${DEFAULT_NODE_LEASE_MS / 1000} s)`, DEFAULT_NODE_LEASE_MS);
    await failover(h, mod, await pg.newDatabase("narad_bench_fast"), mod.FAST_LEASES, "FAST_LEASES (node lease 1.5 s)", Number(mod.FAST_LEASES.NARAD_CLUSTER_NODE_LEASE_MS));
    process.stdout.write(`  (replication rows took ${((performance.now() - t0) / 1000).toFixed(0)} s)\n`);
  } finally {
    await pg.stop();
    untrackPg();
  }
}

async function withCluster<T>(mod: LocalClusterModule, cpUrl: string, env: Record<string, string>, f: (c: Cluster) => Promise<T>): Promise<T> {
  // BENCH_PROFILE_DIR: every node writes a V8 CPU profile there, PID.cpuprofile, when it stops
  // (the "led by nN" lines and the cpu: lines' roles say which pid is which; cpu-profile-hook.ts).
  const prof: Record<string, string> = process.env.BENCH_PROFILE_DIR
    ? { NODE_OPTIONS: `--import=${new URL("./cpu-profile-hook.js", import.meta.url).href}`, NARAD_CPU_PROFILE_DIR: process.env.BENCH_PROFILE_DIR }
    : {};
  const c = await mod.startCluster({ nodes: 3, controlPlaneUrl: cpUrl, env: { UV_THREADPOOL_SIZE: "16", ...prof, ...env } });
  const untrack = track({ stop: () => c.stop() });
  try {
    return await f(c);
  } finally {
    await c.stop();
    untrack();
  }
}

async function throughputAndLag(h: ReplicationHarness, mod: LocalClusterModule, cpUrl: string): Promise<void> {
  await withCluster(mod, cpUrl, {}, async (c) => {
    const url = c.nodes[0]!.url;
    const placed: Placed[] = [];
    for (const m of MODES) {
      await createTopic(url, m.topic, m.body);
      const p = await place(c, m.mode, m.topic);
      placed.push({
        mode: m.mode,
        topic: m.topic,
        leaderUrl: p.leaderUrl,
        pids: p.pids,
        http: new Pool(p.leaderUrl, { connections: 128, pipelining: 1, keepAliveTimeout: 60_000 }),
        sdk: new Narad({ url: p.leaderUrl, connections: 64 }),
      });
      process.stdout.write(`  ${m.mode}: ${m.topic} led by ${p.leaderId} (${p.leaderUrl}); pids ${Object.entries(p.pids).map(([k, v]) => `${k} ${v}`).join(", ")}\n`);
    }
    try {
      const [f1, q, l] = placed as [Placed, Placed, Placed];
      const httpOp = (p: Placed) => async () => {
        const r = await p.http.request({ method: "POST", path: `/v1/topics/${p.topic}/messages`, body: h.payload });
        await r.body.arrayBuffer();
        if (r.statusCode !== 202) throw new Error(String(r.statusCode));
        return 1;
      };
      const sdkOp = (p: Placed) => async () => {
        await p.sdk.produce(p.topic, h.payload);
        return 1;
      };
      const lagQ = new LagSampler(q.leaderUrl, q.topic);
      const lagL = new LagSampler(l.leaderUrl, l.topic);
      const other = (p: Placed) => c.nodes.find((n) => n.url !== p.leaderUrl)!.url;
      const inSyncQ = new InSyncSampler(other(q), q.topic);
      const inSyncL = new InSyncSampler(other(l), l.topic);
      // Under load the lag gauges are read from the leader; at 1 in flight only in_sync, from
      // another node, so the latency figure's leader does nothing but the produces.
      const sampler = (p: Placed, inFlight: number) => (p === f1 ? undefined : inFlight > 1 ? (p === q ? lagQ : lagL) : p === q ? inSyncQ : inSyncL);
      const load = (p: Placed, inFlight: number, op: (p: Placed) => () => Promise<number>) => (s: number) => {
        const run = () => h.closedLoop(inFlight, s, op(p), p.pids);
        const x = sampler(p, inFlight);
        return x === undefined ? run() : sampledWhile(x.sample, run);
      };
      const rows = (what: string, [b, rq, rl]: LoadResult[]) => {
        h.row(`replicated produce ${what}, factor 3 quorum vs factor 1 (msgs/s)`, h.fmt(rq!.perS), `factor 1 ${h.fmt(b!.perS)}`, rq!.perS / b!.perS, ">= 0.5x factor 1");
        h.row(`replicated produce ${what}, factor 3 leader vs factor 1 (msgs/s)`, h.fmt(rl!.perS), `factor 1 ${h.fmt(b!.perS)}`, rl!.perS / b!.perS, "(shown beside it)");
        h.row(
          `  the same, p50 / p99 (ms): quorum; leader`,
          `${rq!.p50Ms.toFixed(2)} / ${rq!.p99Ms.toFixed(2)}; ${rl!.p50Ms.toFixed(2)} / ${rl!.p99Ms.toFixed(2)}`,
          `factor 1 ${b!.p50Ms.toFixed(2)} / ${b!.p99Ms.toFixed(2)}`,
          rq!.p99Ms / b!.p99Ms,
          "(quorum p99 / factor-1 p99)",
        );
        h.row(
          `  the same, server CPU a message, three nodes summed (leader's share) (µs): quorum; leader`,
          `${clusterCpu(rq!).toFixed(0)} (${leaderCpu(rq!).toFixed(0)}); ${clusterCpu(rl!).toFixed(0)} (${leaderCpu(rl!).toFixed(0)})`,
          `factor 1 ${clusterCpu(b!).toFixed(0)} (${leaderCpu(b!).toFixed(0)})`,
          clusterCpu(rq!) / clusterCpu(b!),
          "(quorum / factor 1)",
        );
      };
      rows("by HTTP, 1 msg/request, 64 in flight", await h.interleaved(load(f1, 64, httpOp), load(q, 64, httpOp), load(l, 64, httpOp)));
      rows("through the SDK (Narad.produce), 64 in flight", await h.interleaved(load(f1, 64, sdkOp), load(q, 64, sdkOp), load(l, 64, sdkOp)));
      const [b1, q1, l1] = (await h.interleaved(load(f1, 1, httpOp), load(q, 1, httpOp), load(l, 1, httpOp))) as [LoadResult, LoadResult, LoadResult];
      h.row(
        "replicated produce latency at 1 in flight by HTTP, p50 (ms): quorum; leader",
        `${q1.p50Ms.toFixed(3)}; ${l1.p50Ms.toFixed(3)}`,
        `factor 1 ${b1.p50Ms.toFixed(3)}; in_sync short of a replica in ${inSyncQ.shortShare()} (quorum), ${inSyncL.shortShare()} (leader) of ${LAG_SAMPLE_MS} ms samples`,
        q1.p50Ms / b1.p50Ms,
        "(quorum / factor 1)",
      );
      h.row(
        "replicated produce latency at 1 in flight by HTTP, p99 (ms): quorum; leader",
        `${q1.p99Ms.toFixed(3)}; ${l1.p99Ms.toFixed(3)}`,
        `factor 1 ${b1.p99Ms.toFixed(3)}`,
        q1.p99Ms / b1.p99Ms,
        `quorum <= factor-1 p99 + 2 ms (${(b1.p99Ms + 2).toFixed(3)})`,
      );
      h.row(
        "  the same, server CPU a message, three nodes summed (µs): quorum; leader",
        `${clusterCpu(q1).toFixed(0)}; ${clusterCpu(l1).toFixed(0)}`,
        `factor 1 ${clusterCpu(b1).toFixed(0)}`,
        clusterCpu(q1) / clusterCpu(b1),
        "(quorum / factor 1)",
      );
      for (const [mode, lag] of [["quorum", lagQ], ["leader", lagL]] as const) {
        h.row(
          `follower lag under the 64-in-flight produce runs, ${mode}: records max / p99; seconds max / p99`,
          `${h.fmt(Math.max(...lag.records))} / ${h.fmt(pctOf(lag.records, 0.99))}; ${Math.max(...lag.seconds).toFixed(3)} / ${pctOf(lag.seconds, 0.99).toFixed(3)}`,
          `${lag.records.length} samples (both followers, every ${LAG_SAMPLE_MS} ms); in_sync short of a replica in ${lag.shortShare()} of them`,
          null,
          "(measured; docs/replication.md)",
        );
      }
    } finally {
      for (const p of placed) await Promise.all([p.http.close(), p.sdk.close()]);
    }
  });
}

async function failover(h: ReplicationHarness, mod: LocalClusterModule, cpUrl: string, env: Record<string, string>, what: string, leaseMs: number): Promise<void> {
  await withCluster(mod, cpUrl, env, (c) => failoverOn(h, c, what, leaseMs));
}

/**
 * Kills the leader of a fresh quorum topic (SIGKILL) while one request at a time is produced to it
 * through each other node, and measures from the kill to the first 202 after it.
 */
async function failoverOn(h: ReplicationHarness, c: Cluster, what: string, leaseMs: number): Promise<void> {
  const topic = "bench-rep-failover";
  await createTopic(c.nodes[0]!.url, topic, { replication_factor: 3, acks: "quorum" });
  const { leaderId } = await place(c, "quorum", topic);
  const leader = c.nodes.find((n) => n.id === leaderId)!;
  const others = c.nodes.filter((n) => n !== leader);
  const pools = others.map((n) => new Pool(n.url, { connections: 2, pipelining: 1, headersTimeout: FAILOVER_PROBE_TIMEOUT_MS, bodyTimeout: FAILOVER_PROBE_TIMEOUT_MS }));
  let killedAt: number | undefined;
  let firstAfter: number | undefined;
  let lastBefore: number | undefined;
  let refused = 0;
  let stop = false;
  const deadline = performance.now() + FAILOVER_DEADLINE_MS;
  try {
    const probes = pools.map(async (p) => {
      while (!stop && performance.now() < deadline) {
        const sent = performance.now();
        let ok = false;
        try {
          const r = await p.request({ method: "POST", path: `/v1/topics/${topic}/messages`, body: h.payload });
          await r.body.arrayBuffer();
          ok = r.statusCode === 202;
        } catch {
          ok = false;
        }
        if (ok) {
          // A 202 for a request sent before the kill says nothing about the new leader.
          if (killedAt === undefined) lastBefore = performance.now();
          else if (sent >= killedAt) {
            firstAfter ??= performance.now();
            stop = true;
          }
        } else {
          if (killedAt !== undefined) refused++;
          await new Promise((r) => setTimeout(r, FAILOVER_PROBE_PAUSE_MS));
        }
      }
    });
    // The probes run against the live leader first (through the forward), then it dies.
    while (lastBefore === undefined && performance.now() < deadline) await new Promise((r) => setTimeout(r, FAILOVER_PROBE_PAUSE_MS));
    if (lastBefore === undefined) throw new Error("failover: no 202 before the kill");
    killedAt = performance.now();
    await leader.kill();
    await Promise.all(probes);
  } finally {
    stop = true;
    await Promise.all(pools.map((p) => p.destroy()));
  }
  if (firstAfter === undefined) {
    h.row(`failover, ${what}: leader SIGKILLed -> first 202 again (s)`, `none within ${FAILOVER_DEADLINE_MS / 1000} s`, "", null, `<= node lease + 2 s (${((leaseMs + 2000) / 1000).toFixed(1)})`);
    return;
  }
  const s = (firstAfter - killedAt!) / 1000;
  const after = await getJson(`${others[0]!.url}/v1/topics/${topic}`);
  const p = after.placement[0] as { node: string; epoch: number };
  h.row(
    `failover, ${what}: leader SIGKILLed -> first 202 again (s)`,
    s.toFixed(2),
    `node lease ${(leaseMs / 1000).toFixed(1)} s; ${refused} refused probes; new leader ${p.node}, epoch ${p.epoch}`,
    s / ((leaseMs + 2000) / 1000),
    `<= node lease + 2 s (${((leaseMs + 2000) / 1000).toFixed(1)})`,
  );
}
