// Dead letters on a replicated topic (SPEC "Replicated partitions": delivery counts reach the
// followers with the acks): a three-node cluster, a topic with three copies whose leader is
// killed after two deliveries; the new leader goes on counting from there, and the third
// delivery, nacked, is the last allowed one and moves the message to the dead-letter topic (whose
// partitions may live on the dead node: the move routes around it). Real processes, real
// PostgreSQL, real kill -9; every wait has a deadline.

import assert from "node:assert/strict";
import { test } from "node:test";
import { waitFor } from "./harness.js";
import { postgresForFile } from "./support/postgres.js";
import { FAST_LEASES, startCluster } from "./support/local-cluster.js";

const fx = postgresForFile();

async function json(url: string, init?: RequestInit): Promise<{ status: number; body: any }> {
  const r = await fetch(url, init);
  const text = await r.text();
  return { status: r.status, body: text === "" ? null : JSON.parse(text) };
}

const post = (url: string, body: unknown) => json(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

async function consume(url: string, topic: string): Promise<{ handle: string; count: number; headers: Headers; payload: string } | undefined> {
  const r = await fetch(`${url}/v1/topics/${topic}/consume?wait_ms=500`, { method: "POST" });
  const payload = Buffer.from(await r.arrayBuffer()).toString("utf8");
  if (r.status !== 200) return undefined; // 204, or 503 while a failover is under way
  return { handle: r.headers.get("narad-receipt-handle")!, count: Number(r.headers.get("narad-delivery-count")), headers: r.headers, payload };
}

test("delivery counts reach the followers with the acks: after a failover the count goes on, and the last allowed delivery dead-letters", async () => {
  const c = await startCluster({ nodes: 3, controlPlaneUrl: await fx.pg().newDatabase(), env: { ...FAST_LEASES } });
  fx.cleanups.push(() => c.stop());
  const url = c.nodes[0]!.url;
  assert.equal((await post(`${url}/v1/topics`, { name: "dlq", partitions: 3 })).status, 201);
  const created = await post(`${url}/v1/topics`, { name: "rsrc", partitions: 1, replication_factor: 3, max_deliveries: 3, dead_letter_topic: "dlq" });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.equal((await json(`${url}/v1/topics/rsrc/messages`, { method: "POST", body: "poison" })).status, 202);
  for (let i = 1; i <= 2; i++) {
    const m = await waitFor(() => consume(url, "rsrc"), { timeoutMs: 10_000, what: `delivery ${i}` });
    assert.equal(m.count, i);
    assert.equal((await fetch(`${url}/v1/topics/rsrc/ack?receipt_handle=${encodeURIComponent(m.handle)}&extend=0`, { method: "POST" })).status, 204);
  }
  const leaderId = (await json(`${url}/v1/topics/rsrc`)).body.placement[0].node as string;
  const leader = c.nodes.find((n) => n.id === leaderId)!;
  // Every count has reached both followers (none pending on the leader).
  await waitFor(
    async () => {
      const m = await (await fetch(`${leader.url}/metrics`)).text();
      const pending = [...m.matchAll(/^narad_replication_acks_pending\{[^}]*topic="rsrc"[^}]*\} (\d+)$/gm)].map((x) => Number(x[1]));
      return pending.length === 2 && pending.every((n) => n === 0);
    },
    { timeoutMs: 10_000, what: "the delivery counts shipped to both followers" },
  );
  await leader.kill();
  const survivor = c.nodes.find((n) => n !== leader)!;
  const third = await waitFor(() => consume(survivor.url, "rsrc"), { timeoutMs: 20_000, what: "delivery 3 through the new leader" });
  assert.equal(third.count, 3, "the count went on across the failover");
  assert.equal((await fetch(`${survivor.url}/v1/topics/rsrc/ack?receipt_handle=${encodeURIComponent(third.handle)}&extend=0`, { method: "POST" })).status, 204);
  const dead = await waitFor(() => consume(survivor.url, "dlq"), { timeoutMs: 20_000, what: "the dead letter" });
  assert.equal(dead.payload, "poison");
  assert.equal(dead.headers.get("narad-origin-topic"), "rsrc");
  assert.equal(dead.headers.get("narad-origin-deliveries"), "3");
  assert.equal(await consume(survivor.url, "rsrc"), undefined, "gone from its topic");
});
