// The SDK's produce() batching (src/client/batcher.ts, docs/client.md "Batching") against real
// nodes: one test body on one node and on a three-node cluster (where the client's node forwards
// to the owners). What it checks: each caller's own partition and offset, call order within a
// keyed partition, every message stored once and consumable; errors shared by a batch (an
// ambiguous cut answer, a definite 404) and not shared (an oversize message, a bad key); the
// bounds (messages and bytes per batch, the waiting bound's 429); `batching: false` sending one
// request per produce; and an idempotent producer's batch re-sent after a lost answer, stored
// once. Requests are counted from the node's own narad_http_requests_total; answers are cut with
// the real fault proxy (src/verify/proxy). Every wait has a deadline; nothing sleeps.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { keyPartition } from "../src/protocol/partition.js";
import { LIMITS, Narad, NaradAmbiguousError, NaradRequestError, type Produced } from "../src/client/index.js";
import { startProxy, type Proxy } from "../src/verify/proxy/proxy.js";
import { waitFor } from "./harness.js";
import { singleNode, threeNodeCluster, type Deploy, type Deployment } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg } = postgresForFile();

const SINGLE = "POST /v1/topics/:topic/messages";
const BATCH = "POST /v1/topics/:topic/messages/batch";

let seq = 0;
const topicName = (what: string) => `batching-${what}-${process.pid}-${++seq}`;

/** narad_http_requests_total of one route and status on the node at `url`. */
async function requests(url: string, route: string, status = "202"): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  let n = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("narad_http_requests_total{")) continue;
    if (line.includes(`route="${route}"`) && line.includes(`status="${status}"`)) n += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return n;
}

/** Every stored payload of `topic` (as text), per partition in offset order. */
async function stored(c: Narad, topic: string, partitions: number): Promise<Map<string, { partition: number; offset: number }[]>> {
  const out = new Map<string, { partition: number; offset: number }[]>();
  for (let p = 0; p < partitions; p++) {
    for await (const m of c.replayAll(topic, p)) {
      const k = m.payload.toString();
      out.set(k, [...(out.get(k) ?? []), { partition: p, offset: m.offset }]);
    }
  }
  return out;
}

async function settle<T>(ps: Promise<T>[]): Promise<PromiseSettledResult<T>[]> {
  return Promise.allSettled(ps);
}

function defineBatchingSuite(name: string, deploy: Deploy): void {
  describe(`SDK batching: ${name}`, () => {
    let d: Deployment;
    let admin: Narad;
    const proxies: Proxy[] = [];
    const clients: Narad[] = [];
    const client = (o: Partial<ConstructorParameters<typeof Narad>[0]> = {}) => {
      const c = new Narad({ url: d.urls[0]!, ...o });
      clients.push(c);
      return c;
    };
    /** A proxy in front of the first node, and a client through it. */
    const proxied = async (o: Partial<ConstructorParameters<typeof Narad>[0]> = {}) => {
      const u = new URL(d.urls[0]!);
      const proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: u.hostname, targetPort: Number(u.port) });
      proxies.push(proxy);
      return { proxy, c: client({ ...o, url: `http://127.0.0.1:${proxy.address.port}` }) };
    };

    before(async () => {
      d = await deploy();
      admin = new Narad({ url: d.urls[0]!, batching: false });
    });

    after(async () => {
      for (const c of clients) await c.destroy();
      await admin?.destroy();
      for (const p of proxies) await p.close();
      await d?.stop();
    });

    it("gives each caller its own partition and offset, in call order within a keyed partition, each stored once and consumable", async () => {
      const topic = topicName("results");
      await admin.createTopic({ name: topic, partitions: 3 });
      const c = client();
      const batches0 = await requests(d.urls[0]!, BATCH);
      const calls: { payload: string; key: string | null; p: Promise<Produced> }[] = [];
      for (let round = 0; round < 4; round++) {
        // Waves of overlapping calls, made in one turn: they go out together.
        const wave = Array.from({ length: 100 }, (_, i) => {
          const n = round * 100 + i;
          const key = n % 3 === 0 ? null : `key-${n % 7}`;
          const payload = `m-${n}`;
          return { payload, key, p: c.produce(topic, payload, key === null ? {} : { key }) };
        });
        calls.push(...wave);
        await Promise.all(wave.map((w) => w.p));
      }
      const results = await Promise.all(calls.map((x) => x.p));
      assert.ok((await requests(d.urls[0]!, BATCH)) > batches0, "overlapping calls went as batch requests");

      const owners = new Map<number, string>();
      for (let p = 0; p < 3; p++) owners.set(p, (await d.owner(topic, p)).id);
      const lastOffsetOfKey = new Map<string, number>();
      const seen = new Set<string>();
      for (let i = 0; i < calls.length; i++) {
        const { key } = calls[i]!;
        const r = results[i]!;
        assert.ok(Number.isSafeInteger(r.partition) && r.partition >= 0 && r.partition < 3, `partition of call ${i}`);
        assert.ok(Number.isSafeInteger(r.offset) && r.offset >= 0, `offset of call ${i}`);
        const at = `${r.partition}/${r.offset}`;
        assert.ok(!seen.has(at), `no two callers got ${at}`);
        seen.add(at);
        assert.equal(r.owner, owners.get(r.partition), `the owner of ${at}`);
        assert.ok(typeof r.ownerBoot === "string" && r.ownerBoot.length > 0);
        if (key !== null) {
          assert.equal(r.partition, keyPartition(key, 3), `a key's partition (${key})`);
          const last = lastOffsetOfKey.get(key);
          assert.ok(last === undefined || r.offset > last, `calls of ${key} get offsets in call order`);
          lastOffsetOfKey.set(key, r.offset);
        }
      }
      // Each message stored once, where its caller was told.
      const st = await stored(admin, topic, 3);
      assert.equal(st.size, calls.length);
      calls.forEach((x, i) => assert.deepEqual(st.get(x.payload), [{ partition: results[i]!.partition, offset: results[i]!.offset }], x.payload));
      // And consumable.
      const got = new Set<string>();
      await waitFor(
        async () => {
          const ms = await admin.consumeBatch(topic, { maxMessages: 100, waitMs: 1000 });
          for (const m of ms) got.add(m.text());
          if (ms.length > 0) await admin.ackBatch(topic, ms.map((m) => m.receiptHandle));
          return got.size === calls.length;
        },
        { timeoutMs: 60_000, what: "every produced message consumed" },
      );
    });

    it("refuses an oversize message or a bad key alone, before sending; its neighbours are stored", async () => {
      const topic = topicName("alone");
      await admin.createTopic({ name: topic, partitions: 3 });
      // One batch out at a time, so the good calls after the first certainly share a batch.
      const c = client({ batching: { batchesInFlightMax: 1 } });
      const good = Array.from({ length: 20 }, (_, i) => c.produce(topic, `good-${i}`, i % 2 ? { key: `k${i}` } : {}));
      const oversize = c.produce(topic, Buffer.alloc(LIMITS.messageBytesMax + 1));
      const longKey = c.produce(topic, "long key", { key: "k".repeat(LIMITS.keyBytesMax + 1) });
      const lone = c.produce(topic, "lone surrogate", { key: "a\ud800b" });
      const more = Array.from({ length: 20 }, (_, i) => c.produce(topic, `good-${20 + i}`));
      const [o, lk, ls] = await settle([oversize, longKey, lone]);
      for (const [r, code] of [[o, "payload_too_large"], [lk, "invalid_argument"], [ls, "invalid_argument"]] as const) {
        assert.equal(r!.status, "rejected");
        const e = (r as PromiseRejectedResult).reason as NaradRequestError;
        assert.ok(e instanceof NaradRequestError, String(e));
        assert.equal(e.code, code);
        assert.equal(e.status, code === "payload_too_large" ? 413 : 400);
        assert.equal(e.definite, true);
        assert.match(e.message, /nothing was sent/);
      }
      const ok = await Promise.all([...good, ...more]);
      assert.equal(ok.length, 40);
      const st = await stored(admin, topic, 3);
      assert.equal(st.size, 40);
      for (let i = 0; i < 40; i++) assert.equal(st.get(`good-${i}`)?.length, 1);
    });

    it("gives every caller of a batch refused for certain the same definite error (404 unknown topic)", async () => {
      const topic = topicName("missing");
      const c = client({ batching: { batchesInFlightMax: 1 } });
      const refused0 = await requests(d.urls[0]!, BATCH, "404");
      const rs = await settle(Array.from({ length: 20 }, (_, i) => c.produce(topic, `x${i}`, i % 4 === 0 ? { key: `k${i}` } : {})));
      for (const r of rs) {
        assert.equal(r.status, "rejected");
        const e = (r as PromiseRejectedResult).reason as NaradRequestError;
        assert.ok(e instanceof NaradRequestError, String(e));
        assert.equal(e.status, 404);
        assert.equal(e.code, "topic_not_found");
        assert.equal(e.definite, true);
      }
      assert.ok((await requests(d.urls[0]!, BATCH, "404")) > refused0, "the unkeyed calls went as a batch");
    });

    it("gives every caller of a batch whose answer was lost an ambiguous error; each message is stored once", async () => {
      const topic = topicName("ambiguous");
      await admin.createTopic({ name: topic, partitions: 3 });
      const { proxy, c } = await proxied({ requestTimeoutMs: 1000 });
      await c.produce(topic, "warm-up"); // the connection is open before the cut
      const batches0 = await requests(d.urls[0]!, BATCH);
      proxy.cut("downstream"); // requests reach the node; its answers are held
      const calls = Array.from({ length: 20 }, (_, i) => c.produce(topic, `lost-${i}`));
      const rs = await settle(calls);
      for (const r of rs) {
        assert.equal(r.status, "rejected");
        const e = (r as PromiseRejectedResult).reason as NaradAmbiguousError;
        assert.ok(e instanceof NaradAmbiguousError, String(e));
        assert.equal(e.definite, false);
      }
      proxy.heal();
      assert.equal((await requests(d.urls[0]!, BATCH)) - batches0, 1, "the 20 went as one batch request");
      const st = await stored(admin, topic, 3);
      for (let i = 0; i < 20; i++) assert.equal(st.get(`lost-${i}`)?.length, 1, `lost-${i} stored once`);
      await c.produce(topic, "after"); // the client goes on
    });

    it("keeps to its bounds: messages and bytes per batch, and a definite 429 past the waiting bound", async () => {
      const topic = topicName("bounds");
      await admin.createTopic({ name: topic, partitions: 3 });
      const url = d.urls[0]!;
      const c = client({ batching: { batchesInFlightMax: 1, batchMessagesMax: 3, queuedMessagesMax: 7 } });
      const [s0, b0] = [await requests(url, SINGLE), await requests(url, BATCH)];
      // Calls made in one turn all wait until its end: seven fit (they go as 3 + 3 + 1, one
      // batch out at a time), the eighth finds the queue full.
      const calls = Array.from({ length: 8 }, (_, i) => c.produce(topic, `b-${i}`));
      const rs = await settle(calls);
      for (let i = 0; i < 7; i++) assert.equal(rs[i]!.status, "fulfilled", `call ${i}`);
      const full = (rs[7] as PromiseRejectedResult).reason as NaradRequestError;
      assert.ok(full instanceof NaradRequestError, String(full));
      assert.equal(full.status, 429);
      assert.equal(full.code, "overloaded");
      assert.equal(full.definite, true);
      assert.equal(full.retryable, true);
      assert.equal((await requests(url, BATCH)) - b0, 2, "two batches of three");
      assert.equal((await requests(url, SINGLE)) - s0, 1, "and the last one alone");

      // Bytes: 1 KiB payloads take 1032 bytes each in a batch, so 3000 bytes hold two.
      const cb = client({ batching: { batchesInFlightMax: 1, batchBytesMax: 3000 } });
      const [s1, b1] = [await requests(url, SINGLE), await requests(url, BATCH)];
      const kib = (i: number) => Buffer.concat([Buffer.from(`kib-${i}-`), Buffer.alloc(1024 - `kib-${i}-`.length, 0x78)]);
      await Promise.all(Array.from({ length: 5 }, (_, i) => cb.produce(topic, kib(i))));
      assert.equal((await requests(url, BATCH)) - b1, 2, "batches of two");
      assert.equal((await requests(url, SINGLE)) - s1, 1, "and the fifth alone");
      const st = await stored(admin, topic, 3);
      for (let i = 0; i < 7; i++) assert.equal(st.get(`b-${i}`)?.length, 1);
      assert.equal(st.has("b-7"), false, "the refused call was not stored");
    });

    it("batching: false sends one request per produce", async () => {
      const topic = topicName("off");
      await admin.createTopic({ name: topic, partitions: 3 });
      const url = d.urls[0]!;
      const c = client({ batching: false });
      const [s0, b0] = [await requests(url, SINGLE), await requests(url, BATCH)];
      const rs = await Promise.all(Array.from({ length: 30 }, (_, i) => c.produce(topic, `off-${i}`, i % 2 ? { key: `k${i}` } : {})));
      assert.equal(rs.length, 30);
      assert.equal((await requests(url, SINGLE)) - s0, 30);
      assert.equal((await requests(url, BATCH)) - b0, 0);
    });

    it("an idempotent producer batches with consecutive sequences and re-sends a batch whose answer was lost: stored once", async () => {
      const topic = topicName("idempotent");
      await admin.createTopic({ name: topic, partitions: 3 });
      const { proxy, c } = await proxied({ batching: { batchesInFlightMax: 1 } });
      const producer = c.producer({ idempotent: true });
      await producer.id();
      const batches0 = await requests(d.urls[0]!, BATCH);
      // Answers come 5 s late: time to see the batch stored, then reset the line so its answer is lost.
      proxy.setToxic("downstream", { kind: "latency", latencyMs: 5000 });
      const calls = Array.from({ length: 20 }, (_, i) => producer.produce(topic, `idem-${i}`));
      await waitFor(async () => (await stored(admin, topic, 3)).size === 20, { timeoutMs: 20_000, what: "the batch stored on the node" });
      proxy.setToxic("downstream", { kind: "reset" });
      proxy.removeToxic("downstream", "latency");
      proxy.removeToxic("downstream", "reset"); // the held answer is gone; the re-send gets through
      const rs = await Promise.all(calls);
      const firstSeq = rs[0]!.sequence;
      rs.forEach((r, i) => {
        assert.equal(r.sequence, firstSeq + i, "consecutive sequences in call order");
        assert.equal(r.duplicate, true, "answered from the first send's record");
        assert.ok(r.attempts >= 2);
      });
      assert.ok((await requests(d.urls[0]!, BATCH)) - batches0 >= 2, "sent as a batch, and again");
      const st = await stored(admin, topic, 3);
      assert.equal(st.size, 20);
      for (let i = 0; i < 20; i++) assert.deepEqual(st.get(`idem-${i}`), [{ partition: rs[i]!.partition, offset: rs[i]!.offset }]);
    });
  });
}

defineBatchingSuite("single node", singleNode);
defineBatchingSuite("three-node cluster", threeNodeCluster(pg));
