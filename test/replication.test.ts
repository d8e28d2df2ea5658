// Replicated partitions on a real three-node cluster (issue 13, docs/replication.md): real
// processes, real PostgreSQL, real kill -9. Each test starts its own cluster on its own database.
import assert from "node:assert/strict";
import { test } from "node:test";
import { startNode, waitFor } from "./harness.js";
import { postgresForFile } from "./support/postgres.js";
import { FAST_LEASES, startCluster, type LocalCluster, type LocalNode } from "./support/local-cluster.js";

const fx = postgresForFile();

interface Placement {
  partition: number;
  node: string;
  epoch: number;
  replicas: string[];
  in_sync: string[];
}

async function cluster(env: Record<string, string> = {}): Promise<LocalCluster> {
  const c = await startCluster({ nodes: 3, controlPlaneUrl: await fx.pg().newDatabase(), env: { ...FAST_LEASES, ...env } });
  fx.cleanups.push(() => c.stop());
  return c;
}

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const r = await fetch(url, init);
  const text = await r.text();
  return { status: r.status, body: text === "" ? null : JSON.parse(text) };
}

const post = (url: string, body: unknown) => json(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

async function placement(url: string, topic: string): Promise<Placement[]> {
  return (await json(`${url}/v1/topics/${topic}`)).body.placement as Placement[];
}

function nodeById(c: LocalCluster, id: string): LocalNode {
  return c.nodes.find((n) => n.id === id)!;
}

async function produce(url: string, topic: string, payload: string): Promise<{ status: number; body: any }> {
  return json(`${url}/v1/topics/${topic}/messages`, { method: "POST", body: payload });
}

/** Consumes and acks until `want` distinct payloads were seen or the deadline passes. */
async function drain(url: string, topic: string, want: number, timeoutMs = 15_000): Promise<Set<string>> {
  const seen = new Set<string>();
  const deadline = Date.now() + timeoutMs;
  while (seen.size < want && Date.now() < deadline) {
    const r = await json(`${url}/v1/topics/${topic}/consume/batch?max_messages=100&wait_ms=500`, { method: "POST" });
    if (r.status !== 200) continue; // a failover in progress answers 503 for a moment
    const handles: string[] = [];
    for (const m of r.body.messages as { payload_base64: string; receipt_handle: string }[]) {
      seen.add(Buffer.from(m.payload_base64, "base64").toString("utf8"));
      handles.push(m.receipt_handle);
    }
    if (handles.length > 0) await post(`${url}/v1/topics/${topic}/ack/batch`, { receipt_handles: handles });
  }
  return seen;
}

test("replication settings: a factor above 1 needs a cluster, quorum needs two copies, more copies than live nodes is 503 not_enough_nodes", async () => {
  const single = await startNode();
  try {
    const r = await post(`${single.url}/v1/topics`, { name: "r", replication_factor: 2 });
    assert.equal(r.status, 400);
    assert.equal(r.body.error.code, "invalid_argument");
    assert.match(r.body.error.message, /needs a cluster/);
    const q = await post(`${single.url}/v1/topics`, { name: "q", acks: "quorum" });
    assert.equal(q.status, 400);
    const ok = await post(`${single.url}/v1/topics`, { name: "one" });
    assert.equal(ok.status, 201);
    assert.equal(ok.body.replication_factor, 1);
    assert.equal(ok.body.acks, "leader");
  } finally {
    await single.stop();
  }
  const c = await cluster();
  const url = c.nodes[0]!.url;
  const four = await post(`${url}/v1/topics`, { name: "four", replication_factor: 4 });
  assert.equal(four.status, 503);
  assert.equal(four.body.error.code, "not_enough_nodes");
  const bad = await post(`${url}/v1/topics`, { name: "bad", replication_factor: 3, acks: "all" });
  assert.equal(bad.status, 400);
  const t = await post(`${url}/v1/topics`, { name: "rep", partitions: 3, replication_factor: 3 });
  assert.equal(t.status, 201);
  assert.equal(t.body.replication_factor, 3);
  assert.equal(t.body.acks, "quorum");
  for (const p of t.body.placement as Placement[]) {
    assert.equal(p.replicas.length, 3);
    assert.equal(new Set(p.replicas).size, 3);
    assert.equal(p.replicas[0], p.node);
  }
  // Leaders are spread: three partitions on three nodes.
  assert.equal(new Set((t.body.placement as Placement[]).map((p) => p.node)).size, 3);
  const patched = await json(`${url}/v1/topics/rep`, { method: "PATCH", headers: { "content-type": "application/json" }, body: JSON.stringify({ acks: "leader" }) });
  assert.equal(patched.status, 200);
  assert.equal(patched.body.acks, "leader");
  // To leader mode, in_sync shrinks to the leader; idle followers that hold everything are added
  // back by the leader at once, so either may show here, never a replica outside the set.
  for (const p of patched.body.placement as Placement[]) {
    assert.ok(p.in_sync.includes(p.node));
    for (const n of p.in_sync) assert.ok(p.replicas.includes(n));
  }
  const moved = await post(`${url}/v1/topics/rep/partitions/0/move`, { to: (t.body.placement as Placement[])[0]!.replicas[1] });
  assert.equal(moved.status, 409, "moving one replica is not built yet: a clear refusal");
});

test("a quorum 202 survives kill -9 of the leader and is consumed through the new leader; the old leader rejoins as a follower", async () => {
  const c = await cluster();
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "q", partitions: 1, replication_factor: 3 })).status, 201);
  const sent: string[] = [];
  for (let i = 0; i < 100; i++) {
    const r = await produce(url, "q", `m${i}`);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    sent.push(`m${i}`);
  }
  const before = (await placement(url, "q"))[0]!;
  const leader = nodeById(c, before.node);
  await leader.kill();
  const survivor = c.nodes.find((n) => n !== leader)!;
  const after = await waitFor(
    async () => {
      const p = (await placement(survivor.url, "q"))[0]!;
      return p.node !== before.node ? p : undefined;
    },
    { timeoutMs: 15_000, what: "a new leader" },
  );
  assert.equal(after.epoch, before.epoch + 1);
  assert.notEqual(after.node, before.node);
  // Produces are taken again, and every acknowledged message is there.
  const again = await waitFor(async () => ((await produce(survivor.url, "q", "after")).status === 202 ? true : undefined), { timeoutMs: 10_000, what: "a 202 after the failover" });
  assert.ok(again);
  const seen = await drain(survivor.url, "q", sent.length + 1);
  for (const m of sent) assert.ok(seen.has(m), `${m} was acknowledged and is gone after the failover`);
  assert.ok(seen.has("after"));
  // The old leader comes back as a follower and is caught up into in_sync.
  await leader.start();
  const rejoined = await waitFor(
    async () => {
      const p = (await placement(survivor.url, "q"))[0]!;
      return p.in_sync.includes(before.node) ? p : undefined;
    },
    { timeoutMs: 20_000, what: "the old leader back in sync" },
  );
  assert.equal(rejoined.node, after.node, "a returning old leader does not take its partition back");
});

test("two of three replicas down: a quorum produce is refused with 503 no_quorum (indefinite), never a 202", async () => {
  const c = await cluster({ NARAD_REPLICATION_ACK_TIMEOUT_MS: "800" });
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "nq", partitions: 1, replication_factor: 3 })).status, 201);
  assert.equal((await produce(url, "nq", "first")).status, 202);
  const p = (await placement(url, "nq"))[0]!;
  const leader = nodeById(c, p.node);
  for (const id of p.replicas.slice(1)) await nodeById(c, id).kill();
  const r = await produce(leader.url, "nq", "lonely");
  assert.equal(r.status, 503);
  assert.equal(r.body.error.code, "no_quorum");
});
