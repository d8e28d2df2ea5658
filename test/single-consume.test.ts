// The single consume's path on one node (Broker.consumeOne and settleOne, issue 17): a consume,
// and the ack riding on it (?ack=H), are answered without an await when the record is in memory,
// and through the log's read otherwise. Against a real broker process: concurrent consume?ack=
// chains get each message once and settle each once, counted once; a refused ack (forged,
// settled, lapsed, of another topic) answers as the ack would and leases nothing; an ack riding
// on a long poll is done before the wait and the poll is answered by a produce; and a delivery
// carries the headers docs/api.md lists ("Consume"), and no other of Narad's.

import { test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";

async function withNode(fn: (node: RunningNode) => Promise<void>): Promise<void> {
  const node = await startNode();
  try {
    await fn(node);
  } finally {
    await node.stop();
    await removeDir(node.dataDir);
  }
}

const post = (node: RunningNode, path: string, body?: string, headers?: Record<string, string>) => fetch(`${node.url}${path}`, { method: "POST", ...(body !== undefined ? { body } : {}), ...(headers !== undefined ? { headers } : {}) });

async function createTopic(node: RunningNode, name: string, extra: Record<string, unknown> = {}): Promise<void> {
  const r = await post(node, "/v1/topics", JSON.stringify({ name, ...extra }), { "content-type": "application/json" });
  assert.equal(r.status, 201, await r.text());
}

async function produceAll(node: RunningNode, topic: string, payloads: string[]): Promise<void> {
  for (let i = 0; i < payloads.length; i += 100) {
    const messages = payloads.slice(i, i + 100).map((p) => ({ payload_base64: Buffer.from(p).toString("base64") }));
    const r = await post(node, `/v1/topics/${topic}/messages/batch`, JSON.stringify({ messages }), { "content-type": "application/json" });
    assert.equal(r.status, 202, await r.text());
  }
}

async function stats(node: RunningNode, topic: string): Promise<{ backlog: number; in_flight: number }> {
  const r = await fetch(`${node.url}/v1/topics/${topic}`);
  assert.equal(r.status, 200);
  return ((await r.json()) as { stats: { backlog: number; in_flight: number } }).stats;
}

/** A metric's value from /metrics (the first line naming it with these labels; 0 when absent). */
async function metric(node: RunningNode, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${node.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

async function errorCode(r: Response): Promise<string> {
  return ((await r.json()) as { error: { code: string } }).error.code;
}

test("40 concurrent consume?ack= chains over 3 partitions: each of 600 messages delivered once and settled once, counted once, nothing left", async () => {
  await withNode(async (node) => {
    await createTopic(node, "chains", { partitions: 3 });
    const n = 600;
    const payloads = Array.from({ length: n }, (_, i) => `m-${i}`);
    await produceAll(node, "chains", payloads);
    const delivered: string[] = [];
    const refused: string[] = [];
    await Promise.all(
      Array.from({ length: 40 }, async () => {
        let prev: string | undefined;
        for (;;) {
          const r = await post(node, prev === undefined ? "/v1/topics/chains/consume" : `/v1/topics/chains/consume?ack=${prev}`);
          if (r.status === 204) return;
          if (r.status !== 200) {
            refused.push(`${r.status} ${await r.text()}`);
            return;
          }
          assert.equal(r.headers.get("narad-delivery-count"), "1", "a first delivery");
          delivered.push(await r.text());
          prev = r.headers.get("narad-receipt-handle")!;
        }
      }),
    );
    assert.deepEqual(refused, [], "no ack riding on a consume was refused");
    assert.equal(delivered.length, n, "every message once");
    assert.deepEqual(new Set(delivered), new Set(payloads));
    // Each chain's last ack rode on a consume that found nothing (204): every message is settled.
    const s = await stats(node, "chains");
    assert.equal(s.backlog, 0);
    assert.equal(s.in_flight, 0);
    assert.equal((await post(node, "/v1/topics/chains/consume")).status, 204);
    assert.equal(await metric(node, "narad_delivered_messages_total", '{topic="chains"}'), n);
    assert.equal(await metric(node, "narad_redelivered_messages_total", '{topic="chains"}'), 0);
    assert.equal(await metric(node, "narad_settle_total", '{topic="chains",action="ack",result="ok"}'), n);
    // A scrape hands the counts over once: a second one shows the same.
    assert.equal(await metric(node, "narad_settle_total", '{topic="chains",action="ack",result="ok"}'), n);
  });
});

test("consume?ack= with a forged, settled, lapsed or other topic's handle answers as the ack would (400, 410) and leases nothing; the message is not lost", async () => {
  await withNode(async (node) => {
    await createTopic(node, "refuse", { partitions: 1 });
    await createTopic(node, "other", { partitions: 1 });
    await produceAll(node, "refuse", ["first", "second"]);
    await produceAll(node, "other", ["elsewhere"]);
    const m1 = await post(node, "/v1/topics/refuse/consume");
    assert.equal(m1.status, 200);
    assert.equal(await m1.text(), "first");
    const h1 = m1.headers.get("narad-receipt-handle")!;
    const otherHandle = (await post(node, "/v1/topics/other/consume")).headers.get("narad-receipt-handle")!;
    /** A forged handle: 400, nothing settled (both unacked) and nothing leased (m1 the one lease). */
    const forged = async (h: string) => {
      const r = await post(node, `/v1/topics/refuse/consume?ack=${encodeURIComponent(h)}`);
      assert.equal(r.status, 400, h);
      assert.equal(await errorCode(r), "invalid_receipt_handle", h);
      const st = await stats(node, "refuse");
      assert.equal(st.in_flight, 1, "the refused request leased nothing");
      assert.equal(st.backlog, 2, "the refused request settled nothing");
    };
    await forged("garbage");
    await forged(h1.slice(0, 20) + (h1[20] === "A" ? "Q" : "A") + h1.slice(21)); // edited
    await forged(otherHandle); // another topic's
    // Settled: m1 acked on the next consume ("second"); m1's handle is gone and leases nothing.
    const m2 = await post(node, `/v1/topics/refuse/consume?ack=${h1}`);
    assert.equal(await m2.text(), "second");
    const again = await post(node, `/v1/topics/refuse/consume?ack=${h1}`);
    assert.equal(again.status, 410);
    assert.equal(await errorCode(again), "receipt_handle_gone");
    const st = await stats(node, "refuse");
    assert.equal(st.backlog, 1, "second is not settled by the refused request");
    assert.equal(st.in_flight, 1, "second is the one lease");
    const unknown = await post(node, `/v1/topics/none/consume?ack=${h1}`);
    assert.equal(unknown.status, 404);
    assert.equal(await errorCode(unknown), "topic_not_found");

    // Lapsed: once the lease sweep returned the message, its handle is gone and leases nothing,
    // and the message comes back as a second delivery.
    await createTopic(node, "lapse", { partitions: 1, visibility_timeout_ms: 300 });
    await produceAll(node, "lapse", ["late"]);
    const l1 = await post(node, "/v1/topics/lapse/consume");
    const lh = l1.headers.get("narad-receipt-handle")!;
    await waitFor(async () => (await stats(node, "lapse")).in_flight === 0, { timeoutMs: 10_000, what: "the lease to lapse" });
    const lapsed = await post(node, `/v1/topics/lapse/consume?ack=${lh}`);
    assert.equal(lapsed.status, 410);
    assert.equal(await errorCode(lapsed), "receipt_handle_gone");
    assert.equal((await stats(node, "lapse")).in_flight, 0);
    const back = await post(node, "/v1/topics/lapse/consume");
    assert.equal(await back.text(), "late");
    assert.equal(back.headers.get("narad-delivery-count"), "2");
  });
});

test("an ack riding on a long poll takes effect before the wait, and the poll is answered by a produce", async () => {
  await withNode(async (node) => {
    await createTopic(node, "poll", { partitions: 2 });
    await produceAll(node, "poll", ["one"]);
    const m1 = await post(node, "/v1/topics/poll/consume");
    const h1 = m1.headers.get("narad-receipt-handle")!;
    const polling = post(node, `/v1/topics/poll/consume?ack=${h1}&wait_ms=20000`);
    // The ack is done while the poll waits: the handle is gone and nothing is in flight.
    await waitFor(async () => (await stats(node, "poll")).backlog === 0, { timeoutMs: 10_000, what: "the ack to take effect" });
    assert.equal((await post(node, `/v1/topics/poll/ack?receipt_handle=${h1}`)).status, 410);
    assert.equal((await post(node, "/v1/topics/poll/messages", "two")).status, 202);
    const polled = await polling;
    assert.equal(polled.status, 200);
    assert.equal(await polled.text(), "two");
  });
});

test("a single delivery carries the headers docs/api.md lists and no other Narad-* header; a keyed one adds Narad-Key", async () => {
  await withNode(async (node) => {
    await createTopic(node, "heads", { partitions: 1 });
    assert.equal((await post(node, "/v1/topics/heads/messages", "plain")).status, 202);
    assert.equal((await post(node, "/v1/topics/heads/messages?key=k%C3%A9%20y", "keyed")).status, 202);
    const documented = ["narad-node", "narad-boot", "narad-receipt-handle", "narad-partition", "narad-offset", "narad-delivery-count", "narad-produced-at", "narad-owner", "narad-owner-boot"];
    const plain = await post(node, "/v1/topics/heads/consume");
    const names = (r: Response) => [...r.headers.keys()].filter((k) => k.startsWith("narad-")).sort();
    assert.deepEqual(names(plain), [...documented].sort());
    assert.equal(plain.headers.get("content-type"), "application/octet-stream");
    assert.equal(plain.headers.get("content-length"), "5");
    assert.equal(plain.headers.get("narad-owner"), plain.headers.get("narad-node"));
    assert.equal(plain.headers.get("narad-owner-boot"), plain.headers.get("narad-boot"));
    assert.equal(plain.headers.get("narad-offset"), "0");
    assert.equal(await plain.text(), "plain");
    const keyed = await post(node, `/v1/topics/heads/consume?ack=${plain.headers.get("narad-receipt-handle")}`);
    assert.deepEqual(names(keyed), [...documented, "narad-key"].sort());
    assert.equal(decodeURIComponent(keyed.headers.get("narad-key")!), "ké y");
    assert.equal(keyed.headers.get("narad-offset"), "1");
    assert.equal(await keyed.text(), "keyed");
  });
});
