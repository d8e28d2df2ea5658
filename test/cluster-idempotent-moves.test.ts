// Idempotent producers across what only a cluster does (SPEC "Idempotent producers"): a partition
// move (the new owner opens the copied log and rebuilds the dedupe window from it) and a
// replicated partition's failover (the follower's log carries the same producer attributes).
// Real processes, real PostgreSQL, real kill -9; each test starts its own cluster.
import assert from "node:assert/strict";
import { test } from "node:test";
import { waitFor } from "./harness.js";
import { postgresForFile } from "./support/postgres.js";
import { FAST_LEASES, startCluster, type LocalCluster } from "./support/local-cluster.js";

const fx = postgresForFile();

async function cluster(): Promise<LocalCluster> {
  const c = await startCluster({ nodes: 3, controlPlaneUrl: await fx.pg().newDatabase(), env: { ...FAST_LEASES } });
  fx.cleanups.push(() => c.stop());
  return c;
}

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: any; duplicate: boolean }> {
  const r = await fetch(url, init);
  const text = await r.text();
  return { status: r.status, body: text === "" ? null : JSON.parse(text), duplicate: r.headers.get("narad-duplicate") === "true" };
}

const post = (url: string, body: unknown) => json(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
const send = (url: string, topic: string, id: string, seq: number) =>
  json(`${url}/v1/topics/${topic}/messages`, { method: "POST", body: `m-${seq}`, headers: { "narad-producer-id": id, "narad-sequence": String(seq) } });

async function placement(url: string, topic: string): Promise<{ partition: number; node: string; epoch: number }[]> {
  return (await json(`${url}/v1/topics/${topic}`)).body.placement;
}

/** Sequences first .. first + n - 1 as one batch through `url` (payloads m-SEQ); the answers. */
async function sendBatch(url: string, topic: string, id: string, first: number, n: number): Promise<{ status: number; body: any; duplicate: boolean }> {
  const messages = Array.from({ length: n }, (_, k) => ({ payload_base64: Buffer.from(`m-${first + k}`).toString("base64") }));
  return json(`${url}/v1/topics/${topic}/messages/batch`, {
    method: "POST",
    body: JSON.stringify({ messages }),
    headers: { "content-type": "application/json", "narad-producer-id": id, "narad-sequence": String(first) },
  });
}

/** Payload → how many times the partition holds it, through `url`. */
async function copies(url: string, topic: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  let offset = 0;
  for (;;) {
    const r = await json(`${url}/v1/topics/${topic}/partitions/0/messages?offset=${offset}&limit=1000`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    for (const m of r.body.messages as { payload_base64: string }[]) {
      const p = Buffer.from(m.payload_base64, "base64").toString();
      out.set(p, (out.get(p) ?? 0) + 1);
    }
    if (r.body.messages.length === 0 || r.body.next_offset >= r.body.end_offset) return out;
    offset = r.body.next_offset;
  }
}

/** Sends 0..n-1 through the nodes in turn; the answers. */
async function sendAll(c: LocalCluster, topic: string, id: string, n: number): Promise<{ partition: number; offset: number }[]> {
  const out: { partition: number; offset: number }[] = [];
  for (let s = 0; s < n; s++) {
    const r = await send(c.urls[s % 3]!, topic, id, s);
    assert.equal(r.status, 202, JSON.stringify(r.body));
    out.push({ partition: r.body.partition, offset: r.body.offset });
  }
  return out;
}

/** Re-sends 0..n-1 through every node: each a duplicate at its first place; each stored once. */
async function resendAll(c: LocalCluster, topic: string, id: string, first: { partition: number; offset: number }[]): Promise<void> {
  for (const url of c.urls) {
    for (let s = 0; s < first.length; s++) {
      const r = await send(url, topic, id, s);
      assert.equal(r.status, 202, JSON.stringify(r.body));
      assert.equal(r.duplicate, true, `m-${s} via ${url} is a duplicate`);
      assert.deepEqual(r.body, { ...first[s], duplicate: true });
    }
  }
  const n = await copies(c.urls[1]!, topic);
  for (let s = 0; s < first.length; s++) assert.equal(n.get(`m-${s}`), 1, `m-${s} stored once`);
}

test("after a partition move, a re-send through any node is a duplicate at its original offset (the new owner rebuilt the window from the copied log)", async () => {
  const c = await cluster();
  const url = c.urls[0]!;
  assert.equal((await post(`${url}/v1/topics`, { name: "mv", partitions: 1 })).status, 201);
  const id = (await post(`${url}/v1/producers`, {})).body.producer_id as string;
  const first = await sendAll(c, "mv", id, 20);
  const before = (await placement(url, "mv"))[0]!;
  const to = c.nodes.find((n) => n.id !== before.node)!;
  const moved = await post(`${url}/v1/topics/mv/partitions/0/move`, { to: to.id });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  await waitFor(async () => (await placement(c.urls[2]!, "mv"))[0]!.node === to.id, { what: "the move seen by every node" });
  await resendAll(c, "mv", id, first);
});

test("after a replicated partition's failover, a re-send is a duplicate at its original offset (the follower's log carries the producer attributes)", async () => {
  const c = await cluster();
  const url = c.urls[0]!;
  assert.equal((await post(`${url}/v1/topics`, { name: "rep", partitions: 1, replication_factor: 3 })).status, 201);
  const id = (await post(`${url}/v1/producers`, {})).body.producer_id as string;
  const first = await sendAll(c, "rep", id, 20);
  // And a batch: its records share one attribute block on the leader, numbered as they are
  // written; each copy shipped to the followers must carry its own sequence.
  const batch = await sendBatch(url, "rep", id, 20, 10);
  assert.equal(batch.status, 202, JSON.stringify(batch.body));
  const batched = (batch.body.results as { partition: number; offset: number }[]).map((r) => ({ partition: r.partition, offset: r.offset }));
  const before = (await placement(url, "rep"))[0]!;
  const leader = c.nodes.find((n) => n.id === before.node)!;
  await leader.kill();
  const survivor = c.nodes.find((n) => n !== leader)!;
  await waitFor(async () => ((await placement(survivor.url, "rep"))[0]!.node !== before.node ? true : undefined), { timeoutMs: 15_000, what: "a new leader" });
  // Until the new leader's epoch marker commits an idempotent produce waits (up to 5 s, then 503 not_owner, definite); then a duplicate.
  await waitFor(async () => ((await send(survivor.url, "rep", id, 0)).status === 202 ? true : undefined), { timeoutMs: 15_000, what: "the new leader taking produces" });
  await leader.start();
  await waitFor(async () => {
    for (const u of c.urls) if ((await send(u, "rep", id, 0)).status !== 202) return undefined;
    return true;
  }, { timeoutMs: 20_000, what: "every node serving the partition again" });
  await resendAll(c, "rep", id, [...first, ...batched]);
  for (const u of c.urls) {
    const again = await sendBatch(u, "rep", id, 20, 10);
    assert.equal(again.status, 202, JSON.stringify(again.body));
    assert.deepEqual(again.body.results, batched.map((r) => ({ ...r, duplicate: true })), `the batch re-sent whole via ${u}: every message a duplicate at its first place`);
  }
});
