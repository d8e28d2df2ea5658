// Replicated partitions on a real three-node cluster (issue 13, docs/replication.md): real
// processes, real PostgreSQL, real kill -9. Each test starts its own cluster on its own database.
import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
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
  assert.equal(moved.status, 400, "a replicated partition's move names the replica that moves");
  assert.match(moved.body.error.message, /name the replica to move with "from"/);
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

/** Waits for the partition's leader to change from `from` (a failover), through any live node. */
async function newLeader(c: LocalCluster, topic: string, from: string, timeoutMs = 15_000): Promise<Placement> {
  return waitFor(
    async () => {
      for (const n of c.nodes) {
        if (!n.running || n.id === from) continue;
        const r = await json(`${n.url}/v1/topics/${topic}`).catch(() => undefined);
        const p = (r?.body?.placement as Placement[] | undefined)?.[0];
        if (p !== undefined && p.node !== from) return p;
      }
      return undefined;
    },
    { timeoutMs, what: `a new leader of ${topic}` },
  );
}

test("power loss of one replica and kill -9 of another at once loses no quorum 202", async () => {
  const c = await cluster({ NARAD_TEST_POWER_LOSS: "1", NARAD_TEST_MODE: "1" });
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "pl", partitions: 1, replication_factor: 3 })).status, 201);
  const sent: string[] = [];
  for (let i = 0; i < 60; i++) {
    const r = await produce(url, "pl", `p${i}`);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    sent.push(`p${i}`);
  }
  const p = (await placement(url, "pl"))[0]!;
  // In power-loss mode a kill drops what the node had not fsynced: the follower loses power while
  // the leader is killed; only the third replica stays up.
  const leader = nodeById(c, p.node);
  const follower = nodeById(c, p.replicas[1]!);
  await Promise.all([leader.kill(), follower.kill()]);
  await Promise.all([leader.start(), follower.start()]);
  const live = nodeById(c, p.replicas[2]!);
  const seen = await drain(live.url, "pl", sent.length, 30_000);
  for (const m of sent) assert.ok(seen.has(m), `${m} was answered 202 by a quorum and is gone`);
});

test("leader mode: a follower known complete is promoted; when none is, the partition waits for its old leader and loses nothing", async () => {
  const c = await cluster();
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "lm", partitions: 1, replication_factor: 3, acks: "leader" })).status, 201);
  for (let i = 0; i < 20; i++) assert.equal((await produce(url, "lm", `a${i}`)).status, 202);
  // Idle, the followers catch up and are added back to in_sync.
  const complete = await waitFor(
    async () => {
      const p = (await placement(url, "lm"))[0]!;
      return p.in_sync.length === 3 ? p : undefined;
    },
    { timeoutMs: 20_000, what: "both followers in sync" },
  );
  await nodeById(c, complete.node).kill();
  const promoted = await newLeader(c, "lm", complete.node);
  assert.ok(complete.in_sync.includes(promoted.node));
  const seen = await drain(nodeById(c, promoted.node).url, "lm", 20);
  for (let i = 0; i < 20; i++) assert.ok(seen.has(`a${i}`), `a${i} is gone after promoting an in-sync follower`);
  await nodeById(c, complete.node).start();

  // Now freeze both followers of a second topic's leader: its 202s rest on the leader alone, and
  // in_sync shrinks to it first. Kill it: no follower may be promoted.
  assert.equal((await post(`${url}/v1/topics`, { name: "lone", partitions: 1, replication_factor: 3, acks: "leader" })).status, 201);
  const q = (await placement(url, "lone"))[0]!;
  const lead = nodeById(c, q.node);
  const followers = q.replicas.slice(1).map((id) => nodeById(c, id));
  for (const f of followers) f.pause();
  for (let i = 0; i < 10; i++) assert.equal((await produce(lead.url, "lone", `b${i}`)).status, 202);
  assert.deepEqual((await placement(lead.url, "lone"))[0]!.in_sync, [q.node], "acknowledged with the followers behind: only the leader is in sync");
  await lead.kill();
  for (const f of followers) f.resume();
  // The followers see the leader down, yet none stands: the partition stays on it.
  await waitFor(async () => ((await json(`${followers[0]!.url}/v1/nodes`)).body.nodes as { id: string; state: string }[]).find((n) => n.id === q.node)?.state === "down", {
    timeoutMs: 10_000,
    what: "the leader seen down",
  });
  const stuck = await produce(followers[0]!.url, "lone", "while-down");
  assert.equal(stuck.status, 503, "no incomplete follower takes over");
  assert.equal((await placement(followers[0]!.url, "lone"))[0]!.node, q.node);
  await lead.start();
  const back = await drain(lead.url, "lone", 10);
  for (let i = 0; i < 10; i++) assert.ok(back.has(`b${i}`), `b${i} is gone`);
});

test("acks settled well before a failover do not come back through the new leader", async () => {
  const c = await cluster();
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "acked", partitions: 1, replication_factor: 3 })).status, 201);
  for (let i = 0; i < 40; i++) assert.equal((await produce(url, "acked", `k${i}`)).status, 202);
  const seen = await drain(url, "acked", 40);
  assert.equal(seen.size, 40);
  const p = (await placement(url, "acked"))[0]!;
  // Well past the ack shipping interval (100 ms) and the followers' ack flush.
  // Settled well before: every ack has reached both followers (none pending on the leader).
  await waitFor(
    async () => {
      const m = await (await fetch(`${nodeById(c, p.node).url}/metrics`)).text();
      const pending = [...m.matchAll(/^narad_replication_acks_pending\{[^}]*topic="acked"[^}]*\} (\d+)$/gm)].map((x) => Number(x[1]));
      return pending.length === 2 && pending.every((n) => n === 0) ? true : undefined;
    },
    { what: "every ack shipped to both followers" },
  );
  await nodeById(c, p.node).kill();
  const np = await newLeader(c, "acked", p.node);
  const again = await json(`${nodeById(c, np.node).url}/v1/topics/acked/consume/batch?max_messages=100&wait_ms=2000`, { method: "POST" });
  assert.equal(again.status, 200);
  assert.deepEqual(again.body.messages, [], "messages acked long before the failover were delivered again");
});

test("a returning old leader drops the tail no majority held and never serves it", async () => {
  const c = await cluster({ NARAD_REPLICATION_ACK_TIMEOUT_MS: "500" });
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "tail", partitions: 1, replication_factor: 3 })).status, 201);
  assert.equal((await produce(url, "tail", "committed")).status, 202);
  const p = (await placement(url, "tail"))[0]!;
  const old = nodeById(c, p.node);
  const followers = p.replicas.slice(1).map((id) => nodeById(c, id));
  // The followers die, so the orphans reach no one (a frozen follower would still find them in
  // its socket when it thawed, and then a majority would hold them: allowed, as no_quorum is
  // indefinite, but not what this test is about).
  for (const f of followers) await f.kill();
  for (let i = 0; i < 5; i++) assert.equal((await produce(old.url, "tail", `orphan${i}`)).body.error.code, "no_quorum");
  await old.kill();
  for (const f of followers) await f.start();
  const np = await newLeader(c, "tail", old.id);
  assert.equal((await waitFor(async () => ((await produce(nodeById(c, np.node).url, "tail", "fresh")).status === 202 ? true : undefined), { what: "a 202 from the new leader" })), true);
  await old.start();
  await waitFor(async () => ((await placement(url, "tail"))[0]!.in_sync.includes(old.id) ? true : undefined), { timeoutMs: 20_000, what: "the old leader back in sync" });
  // Fail over again, so the old leader may be the one elected: what it dropped never comes back.
  await nodeById(c, np.node).kill();
  const third = await newLeader(c, "tail", np.node);
  const seen = await drain(nodeById(c, third.node).url, "tail", 2, 8000);
  assert.ok(seen.has("committed") && seen.has("fresh"), JSON.stringify([...seen]));
  for (let i = 0; i < 5; i++) assert.ok(!seen.has(`orphan${i}`), `orphan${i} (never held by a majority) was served after its leader came back`);
});

test("moving one replica: a follower, then the leader, to a node outside the set; nothing acknowledged is lost and the old copies go", async () => {
  const c = await startCluster({ nodes: 4, controlPlaneUrl: await fx.pg().newDatabase(), env: { ...FAST_LEASES } });
  fx.cleanups.push(() => c.stop());
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "mv", partitions: 1, replication_factor: 3 })).status, 201);
  for (let i = 0; i < 30; i++) assert.equal((await produce(url, "mv", `v${i}`)).status, 202);
  const p0 = (await placement(url, "mv"))[0]!;
  const outside = c.nodes.find((n) => !p0.replicas.includes(n.id))!;
  // A follower moves: the new replica is caught up from the leader, then the old one leaves.
  const follower = p0.replicas[2]!;
  const r1 = await post(`${url}/v1/topics/mv/partitions/0/move`, { to: outside.id, from: follower });
  assert.equal(r1.status, 200, JSON.stringify(r1.body));
  const p1 = (await placement(url, "mv"))[0]!;
  assert.deepEqual(new Set(p1.replicas), new Set([p0.replicas[0], p0.replicas[1], outside.id]));
  assert.equal(p1.node, p0.node);
  assert.equal(p1.epoch, p0.epoch, "a follower's move leaves the leader and its epoch alone");
  for (let i = 30; i < 40; i++) assert.equal((await produce(url, "mv", `v${i}`)).status, 202);
  // The leader moves (back to the node just freed): it hands the partition to a caught-up replica.
  const r2 = await post(`${url}/v1/topics/mv/partitions/0/move`, { to: follower, from: p1.node });
  assert.equal(r2.status, 200, JSON.stringify(r2.body));
  const p2 = await waitFor(async () => {
    const p = (await placement(url, "mv"))[0]!;
    return p.node !== p1.node ? p : undefined;
  }, { what: "the new leader" });
  assert.ok(!p2.replicas.includes(p1.node), "the old leader left the set");
  assert.equal(p2.replicas.length, 3);
  assert.equal(p2.epoch, p1.epoch + 1);
  const seen = await drain(url, "mv", 40);
  for (let i = 0; i < 40; i++) assert.ok(seen.has(`v${i}`), `v${i} was lost by the moves`);
  // The old leader's copy is removed from its disk.
  const oldDir = join(nodeById(c, p1.node).dataDir, "cluster", "mv");
  await waitFor(() => readdirSync(oldDir).every((inc) => !existsSync(join(oldDir, inc, "partitions", "0"))), { what: "the old leader's copy removed" });
});
