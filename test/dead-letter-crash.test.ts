// A crash between the two steps of a dead-letter move (SPEC "Dead letters"; docs/contract.md,
// "What a move promises"): the copy is durable in the dead-letter topic, the message is settled
// on its topic in memory, and the node is killed (-9) before that settle reaches the disk. After
// the restart the message must be in the dead-letter topic at least once and, on its topic,
// either settled or delivered again: never in neither.
//
// How the kill is held in that window without timing luck: the node runs with
// storage.ack_flush_interval_ms at its maximum (60 s), so no ack and no delivery count reaches
// the OS while the test runs (they are written on that timer, or by a graceful stop). The test
// waits until the copy is visible in the dead-letter topic (a replay shows only durable records)
// and the node has counted the move (narad_dead_lettered_messages_total: settled in memory),
// then kills the source partition's owner. One test body, one node and a three-node cluster
// (where the dead-letter topic's partitions live on other owners too). Real processes, real
// HTTP, real files; every wait has a deadline.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { waitFor } from "./harness.js";
import { singleNode, threeNodeCluster, type Deploy, type Deployment } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg, cleanups } = postgresForFile();

/** No ack or delivery count reaches the OS during the test (the setting's maximum). */
const ENV = { NARAD_STORAGE_ACK_FLUSH_INTERVAL_MS: "60000" };
const PAYLOAD = "between-copy-and-settle";

async function call(url: string, method: string, path: string, body?: unknown): Promise<Response> {
  return fetch(url + path, { method, ...(body === undefined ? {} : { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }) });
}

/** The dead-letter topic's copies of PAYLOAD (replay: durable records only), with their origin. */
async function copies(url: string, dlq: string, partitions: number): Promise<{ offset: number; originOffset: number }[]> {
  const out: { offset: number; originOffset: number }[] = [];
  for (let p = 0; p < partitions; p++) {
    const r = await call(url, "GET", `/v1/topics/${dlq}/partitions/${p}/messages?offset=0&limit=100`);
    assert.equal(r.status, 200);
    const page = (await r.json()) as { messages: { offset: number; payload_base64: string; origin?: { topic: string; offset: number } }[] };
    for (const m of page.messages) {
      if (Buffer.from(m.payload_base64, "base64").toString() !== PAYLOAD) continue;
      assert.equal(m.origin?.topic, "src-k");
      out.push({ offset: m.offset, originOffset: m.origin!.offset });
    }
  }
  return out;
}

/** A consume of `topic` (waiting up to waitMs): the handle, count and payload, or undefined. */
async function consume(url: string, topic: string, waitMs: number): Promise<{ handle: string; deliveryCount: number; offset: number; payload: string } | undefined> {
  const r = await call(url, "POST", `/v1/topics/${topic}/consume?wait_ms=${waitMs}`);
  if (r.status === 204) return undefined;
  assert.equal(r.status, 200);
  return {
    handle: r.headers.get("narad-receipt-handle")!,
    deliveryCount: Number(r.headers.get("narad-delivery-count")),
    offset: Number(r.headers.get("narad-offset")),
    payload: Buffer.from(await r.arrayBuffer()).toString(),
  };
}

async function nack(url: string, topic: string, handle: string): Promise<void> {
  const r = await call(url, "POST", `/v1/topics/${topic}/ack?receipt_handle=${encodeURIComponent(handle)}&extend=0`);
  assert.equal(r.status, 204, await r.text());
}

/** Fails it `times` times: each delivery nacked (the last one ends the message's deliveries). */
async function failDeliveries(url: string, times: number, what: string): Promise<number> {
  let offset = -1;
  for (let i = 1; i <= times; i++) {
    const l = await waitFor(() => consume(url, "src-k", 500), { timeoutMs: 20_000, what: `${what}: delivery ${i}` });
    assert.equal(l.payload, PAYLOAD);
    offset = l.offset;
    await nack(url, "src-k", l.handle);
  }
  return offset;
}

async function movesCounted(url: string): Promise<number> {
  const text = await (await call(url, "GET", "/metrics")).text();
  const m = /^narad_dead_lettered_messages_total\{topic="src-k"\} (\d+)/m.exec(text);
  return m === null ? 0 : Number(m[1]);
}

function suite(deploy: Deploy, label: string) {
  describe(`a dead-letter move cut by kill -9 between the copy and the settle: ${label}`, () => {
    let d: Deployment;
    test("start", async () => {
      d = await deploy({ env: ENV });
      cleanups.push(() => d.stop());
    });

    test("after the restart the message is in the dead-letter topic and back on its topic; moved again, it is in the dead-letter topic twice, never lost", async () => {
      const url = d.urls[0]!;
      assert.equal((await call(url, "POST", "/v1/topics", { name: "dlq-k", partitions: 3 })).status, 201);
      assert.equal((await call(url, "POST", "/v1/topics", { name: "src-k", partitions: 1, max_deliveries: 2, dead_letter_topic: "dlq-k" })).status, 201);
      const produced = await fetch(`${url}/v1/topics/src-k/messages`, { method: "POST", body: PAYLOAD });
      assert.equal(produced.status, 202);
      const offset = ((await produced.json()) as { offset: number }).offset;

      const owner = await d.owner("src-k", 0);
      assert.equal(await failDeliveries(url, 2, "before the kill"), offset);
      // Step one is durable (the copy is visible), step two done in memory (the move counted).
      const first = await waitFor(async () => {
        const c = await copies(url, "dlq-k", 3);
        return c.length > 0 ? c : undefined;
      }, { timeoutMs: 20_000, what: "the dead-letter copy" });
      assert.deepEqual(first.map((c) => c.originOffset), [offset]);
      await waitFor(async () => (await movesCounted(owner.url)) === 1, { timeoutMs: 10_000, what: "the move settled on the source (in memory)" });

      await owner.kill();
      await owner.start();

      // In the dead-letter topic at least once: the copy outlived the kill.
      assert.deepEqual((await copies(url, "dlq-k", 3)).map((c) => c.offset), first.map((c) => c.offset));
      // On its topic the settle was lost with the kill (it had not reached the disk), and so
      // were the counts of its deliveries: the message is delivered again, from a count the ack
      // log never got (1), and after max_deliveries more it is moved a second time.
      const again = await waitFor(() => consume(url, "src-k", 500), { timeoutMs: 20_000, what: "the message again on its topic" });
      assert.equal(again.payload, PAYLOAD);
      assert.equal(again.offset, offset);
      assert.equal(again.deliveryCount, 1);
      await nack(url, "src-k", again.handle);
      await failDeliveries(url, 1, "after the restart");
      const both = await waitFor(async () => {
        const c = await copies(url, "dlq-k", 3);
        return c.length >= 2 ? c : undefined;
      }, { timeoutMs: 20_000, what: "the second dead-letter copy" });
      assert.deepEqual(both.map((c) => c.originOffset), [offset, offset]);
      assert.equal(await consume(url, "src-k", 300), undefined, "settled on its topic after the second move");
      // Both copies are delivered from the dead-letter topic: two obligations, neither lost.
      const delivered: string[] = [];
      for (let i = 0; i < 2; i++) {
        const l = await waitFor(() => consume(url, "dlq-k", 500), { timeoutMs: 10_000, what: `dead letter ${i + 1}` });
        delivered.push(l.payload);
        assert.equal((await call(url, "POST", `/v1/topics/dlq-k/ack?receipt_handle=${encodeURIComponent(l.handle)}`)).status, 204);
      }
      assert.deepEqual(delivered, [PAYLOAD, PAYLOAD]);
    });

    test("a dead_letter=true answered 204 survives a kill -9 right after it: the message is moved, never delivered again from its topic", async () => {
      // With acks written every 60 s, an ask that were answered from memory would be gone with
      // the kill (the message back on its topic, nothing in the dead-letter topic): its 204 waits
      // for the ack log's fsync (Broker.settleDurable).
      const url = d.urls[0]!;
      assert.equal((await call(url, "POST", "/v1/topics", { name: "dlq-d", partitions: 3 })).status, 201);
      assert.equal((await call(url, "POST", "/v1/topics", { name: "src-d", partitions: 1, dead_letter_topic: "dlq-d" })).status, 201);
      assert.equal((await fetch(`${url}/v1/topics/src-d/messages`, { method: "POST", body: "poison" })).status, 202);
      const owner = await d.owner("src-d", 0);
      const l = await waitFor(() => consume(url, "src-d", 500), { timeoutMs: 20_000, what: "the delivery" });
      assert.equal(l.payload, "poison");
      const asked = await call(url, "POST", `/v1/topics/src-d/ack?receipt_handle=${encodeURIComponent(l.handle)}&dead_letter=true`);
      assert.equal(asked.status, 204, await asked.text());
      await owner.kill();
      await owner.start();
      const moved = await waitFor(() => consume(url, "dlq-d", 500), { timeoutMs: 20_000, what: "the dead letter after the restart" });
      assert.equal(moved.payload, "poison");
      assert.equal(await consume(url, "src-d", 300), undefined, "not delivered again from its topic");
    });
  });
}

suite(singleNode, "single node");
suite(threeNodeCluster(pg), "three-node cluster");
