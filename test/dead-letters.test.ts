// Dead letters (SPEC "Dead letters", issue 14), black-box: one test body on a single node and on
// a three-node cluster whose dead-letter topic has partitions on other owners than its source.
// Real processes, real HTTP, real files; every wait has a deadline.
//
// - a message nacked max_deliveries times is in the dead-letter topic with its origin (headers,
//   batch JSON, replay) and gone from its topic; a lapse of the last lease does the same;
// - delivery counts survive kill -9 (once the ack log wrote them to the OS) and a graceful
//   restart (which also counts the leases it ends);
// - ack ?dead_letter=true (single and batch) moves a leased message at once;
// - redrive returns messages to their origin (or to `to`), at least once, and the dead-letter
//   topic is empty after;
// - validation: max_deliveries without dead_letter_topic, itself, an unknown topic, out of range.

import assert from "node:assert/strict";
import { readdir, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { Narad } from "../src/client/index.js";
import { runNarad, waitFor } from "./harness.js";
import { singleNode, threeNodeCluster, type Deploy, type Deployment } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg, cleanups } = postgresForFile();

type Json = Record<string, unknown>;

interface Leased {
  handle: string;
  deliveryCount: number;
  partition: number;
  offset: number;
  headers: Headers;
  payload: string;
}

function api(d: Deployment) {
  let turn = 0;
  /** Requests go round the nodes: on a cluster most are forwarded to an owner. */
  const url = () => d.urls[turn++ % d.urls.length]!;
  const json = async (method: string, path: string, body?: unknown): Promise<{ status: number; body: Json }> => {
    const r = await fetch(url() + path, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, body: (text ? JSON.parse(text) : null) as Json };
  };
  return {
    json,
    create: async (name: string, extra: Json = {}) => {
      const r = await json("POST", "/v1/topics", { name, ...extra });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      return r.body;
    },
    produce: async (topic: string, payload: string, key?: string) => {
      const r = await fetch(`${url()}/v1/topics/${topic}/messages${key === undefined ? "" : `?key=${encodeURIComponent(key)}`}`, { method: "POST", body: payload });
      const text = await r.text();
      assert.equal(r.status, 202, text);
      return JSON.parse(text) as { partition: number; offset: number };
    },
    /** One consume; undefined when nothing came within waitMs. */
    consume: async (topic: string, waitMs = 0): Promise<Leased | undefined> => {
      const r = await fetch(`${url()}/v1/topics/${topic}/consume?wait_ms=${waitMs}`, { method: "POST" });
      if (r.status === 204) return undefined;
      assert.equal(r.status, 200);
      return {
        handle: r.headers.get("narad-receipt-handle")!,
        deliveryCount: Number(r.headers.get("narad-delivery-count")),
        partition: Number(r.headers.get("narad-partition")),
        offset: Number(r.headers.get("narad-offset")),
        headers: r.headers,
        payload: Buffer.from(await r.arrayBuffer()).toString("utf8"),
      };
    },
    consumeBatch: async (topic: string, max = 100, waitMs = 0) => {
      const r = await fetch(`${url()}/v1/topics/${topic}/consume/batch?max_messages=${max}&wait_ms=${waitMs}`, { method: "POST" });
      assert.equal(r.status, 200);
      return ((await r.json()) as { messages: Json[] }).messages;
    },
    settle: async (topic: string, handle: string, query: string) => {
      const r = await fetch(`${url()}/v1/topics/${topic}/ack?receipt_handle=${encodeURIComponent(handle)}${query}`, { method: "POST" });
      return { status: r.status, text: await r.text() };
    },
  };
}

type Api = ReturnType<typeof api>;

/** The next message of `topic`, waiting for it (a move is asynchronous). */
async function next(a: Api, topic: string, what: string): Promise<Leased> {
  return waitFor(() => a.consume(topic, 500), { timeoutMs: 20_000, what });
}

/** Nothing to consume now on `topic` (a short long poll comes back empty). */
async function assertEmpty(a: Api, topic: string): Promise<void> {
  assert.equal(await a.consume(topic, 300), undefined, `${topic} should have nothing to deliver`);
}

function originHeaders(l: Leased) {
  return {
    topic: l.headers.get("narad-origin-topic"),
    partition: Number(l.headers.get("narad-origin-partition")),
    offset: Number(l.headers.get("narad-origin-offset")),
    deliveries: Number(l.headers.get("narad-origin-deliveries")),
    producedAt: Number(l.headers.get("narad-origin-produced-at")),
  };
}

/** Bytes of the topic's partition-0 acks.log under a node's data directory (0 when none yet). */
async function ackLogBytes(dataDir: string, topic: string): Promise<number> {
  let total = 0;
  const walk = async (dir: string, inTopic: boolean): Promise<void> => {
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isDirectory()) await walk(p, inTopic || e.name === topic);
      else if (inTopic && e.name === "acks.log") total += (await stat(p)).size;
    }
  };
  await walk(dataDir, false);
  return total;
}

function suite(deploy: Deploy, label: string) {
  describe(`dead letters: ${label}`, () => {
    let d: Deployment;
    let a: Api;
    test("start", async () => {
      d = await deploy();
      cleanups.push(() => d.stop());
      a = api(d);
    });
    after(async () => {
      await d?.stop().catch(() => undefined);
    });

    test("topic fields: validation, shown, PATCH sets and clears", async () => {
      await a.create("dlq-v");
      const bad = async (body: Json, code: string) => {
        const r = await a.json("POST", "/v1/topics", body);
        assert.equal(r.status, 400, JSON.stringify(r.body));
        assert.equal((r.body.error as Json).code, code);
      };
      await bad({ name: "v1", max_deliveries: 3 }, "invalid_dead_letter_topic");
      await bad({ name: "v1", max_deliveries: 3, dead_letter_topic: "v1" }, "invalid_dead_letter_topic");
      await bad({ name: "v1", max_deliveries: 3, dead_letter_topic: "no-such-topic" }, "invalid_dead_letter_topic");
      await bad({ name: "v1", max_deliveries: 0, dead_letter_topic: "dlq-v" }, "invalid_argument");
      await bad({ name: "v1", max_deliveries: 1001, dead_letter_topic: "dlq-v" }, "invalid_argument");
      await bad({ name: "v1", max_deliveries: "3", dead_letter_topic: "dlq-v" }, "invalid_argument");
      const plain = await a.create("v2");
      assert.equal(plain.max_deliveries, null);
      assert.equal(plain.dead_letter_topic, null);
      const t = await a.create("v1", { max_deliveries: 1000, dead_letter_topic: "dlq-v" });
      assert.equal(t.max_deliveries, 1000);
      assert.equal(t.dead_letter_topic, "dlq-v");
      const shown = await a.json("GET", "/v1/topics/v1");
      assert.equal(shown.body.max_deliveries, 1000);
      assert.equal(shown.body.dead_letter_topic, "dlq-v");
      // PATCH: clearing the topic alone would leave max_deliveries without one.
      let r = await a.json("PATCH", "/v1/topics/v1", { dead_letter_topic: null });
      assert.equal(r.status, 400);
      assert.equal((r.body.error as Json).code, "invalid_dead_letter_topic");
      r = await a.json("PATCH", "/v1/topics/v1", { max_deliveries: 2 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.max_deliveries, 2);
      r = await a.json("PATCH", "/v1/topics/v1", { dead_letter_topic: "v1" });
      assert.equal(r.status, 400);
      r = await a.json("PATCH", "/v1/topics/v1", { max_deliveries: null, dead_letter_topic: null });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.max_deliveries, null);
      assert.equal(r.body.dead_letter_topic, null);
      r = await a.json("PATCH", "/v1/topics/v2", { max_deliveries: 5, dead_letter_topic: "dlq-v" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal((await a.json("GET", "/v1/topics/v2")).body.max_deliveries, 5);
    });

    test("a message nacked max_deliveries times is in the dead-letter topic with its origin, and gone from its topic", async () => {
      // Three partitions for the dead-letter topic: on a cluster some live on other owners.
      await a.create("dlq-n", { partitions: 3 });
      await a.create("src-n", { partitions: 1, max_deliveries: 3, dead_letter_topic: "dlq-n" });
      if (d.nodes.length > 1) {
        const src = (await d.owner("src-n", 0)).id;
        const others = await Promise.all([0, 1, 2].map(async (p) => (await d.owner("dlq-n", p)).id));
        assert.ok(others.some((n) => n !== src), `the dead-letter topic's partitions should not all be on ${src}`);
      }
      const produced = await a.produce("src-n", "poison", "k1");
      for (let i = 1; i <= 3; i++) {
        const l = await next(a, "src-n", `delivery ${i}`);
        assert.equal(l.deliveryCount, i);
        assert.equal(l.payload, "poison");
        assert.equal((await a.settle("src-n", l.handle, "&extend=0")).status, 204);
      }
      const dead = await next(a, "dlq-n", "the dead letter");
      assert.equal(dead.payload, "poison");
      assert.equal(dead.headers.get("narad-key"), "k1");
      assert.equal(dead.deliveryCount, 1);
      const o = originHeaders(dead);
      assert.deepEqual({ ...o, producedAt: 0 }, { topic: "src-n", partition: produced.partition, offset: produced.offset, deliveries: 3, producedAt: 0 });
      assert.ok(o.producedAt > 1_600_000_000_000);
      // Replay of the dead-letter partition shows the origin too.
      const replay = await a.json("GET", `/v1/topics/dlq-n/partitions/${dead.partition}/messages?offset=${dead.offset}&limit=1`);
      assert.deepEqual((replay.body.messages as Json[])[0]!.origin, { topic: "src-n", partition: produced.partition, offset: produced.offset, deliveries: 3, produced_at: o.producedAt });
      // Batch JSON: release the lease, then take it in a batch.
      assert.equal((await a.settle("dlq-n", dead.handle, "&extend=0")).status, 204);
      const batch = await waitFor(async () => {
        const ms = await a.consumeBatch("dlq-n", 10, 500);
        return ms.length > 0 ? ms : undefined;
      }, { timeoutMs: 10_000, what: "the dead letter in a batch" });
      assert.equal(batch.length, 1);
      assert.deepEqual(batch[0]!.origin, { topic: "src-n", partition: produced.partition, offset: produced.offset, deliveries: 3, produced_at: o.producedAt });
      assert.equal((await a.settle("dlq-n", batch[0]!.receipt_handle as string, "")).status, 204);
      await assertEmpty(a, "src-n");
      let moved = 0;
      for (const u of d.urls) {
        const m = (await (await fetch(`${u}/metrics`)).text()).match(/narad_dead_lettered_messages_total\{topic="src-n"\} (\d+)/);
        moved += m === null ? 0 : Number(m[1]);
      }
      assert.equal(moved, 1, "one move counted, by the source's owner");
      // A message without an origin shows none.
      await a.produce("src-n", "fine");
      const fine = await next(a, "src-n", "a plain message");
      assert.equal(fine.headers.get("narad-origin-topic"), null);
      assert.equal((await a.settle("src-n", fine.handle, "")).status, 204);
    });

    test("a lapse of the last allowed lease moves the message too", async () => {
      await a.create("dlq-l", { partitions: 3 });
      await a.create("src-l", { partitions: 1, max_deliveries: 2, dead_letter_topic: "dlq-l", visibility_timeout_ms: 300 });
      await a.produce("src-l", "slow");
      const first = await next(a, "src-l", "delivery 1");
      assert.equal(first.deliveryCount, 1);
      const second = await next(a, "src-l", "delivery 2, after the first lease lapsed");
      assert.equal(second.deliveryCount, 2);
      const dead = await next(a, "dlq-l", "the dead letter after the second lease lapsed");
      assert.equal(dead.payload, "slow");
      assert.equal(originHeaders(dead).deliveries, 2);
      await assertEmpty(a, "src-l");
    });

    test("a move that cannot be made yet is retried, and the message is not delivered meanwhile", async () => {
      await a.create("dlq-w", { partitions: 3 });
      await a.create("src-w", { partitions: 1, max_deliveries: 1, dead_letter_topic: "dlq-w" });
      // The dead-letter topic goes away: every move fails until it is back.
      assert.equal((await a.json("DELETE", "/v1/topics/dlq-w")).status, 204);
      await a.produce("src-w", "waiting");
      const l = await next(a, "src-w", "the one allowed delivery");
      assert.equal((await a.settle("src-w", l.handle, "&extend=0")).status, 204);
      const owner = await d.owner("src-w", 0);
      await waitFor(async () => {
        const m = (await (await fetch(`${owner.url}/metrics`)).text()).match(/narad_dead_letter_move_failures_total\{topic="src-w"\} (\d+)/);
        return m !== null && Number(m[1]) >= 2;
      }, { timeoutMs: 20_000, what: "failed moves, retried" });
      await assertEmpty(a, "src-w"); // out of delivery while its move waits
      await a.create("dlq-w", { partitions: 3 });
      const dead = await next(a, "dlq-w", "the dead letter, once its topic exists again");
      assert.equal(dead.payload, "waiting");
      assert.equal(originHeaders(dead).topic, "src-w");
      await assertEmpty(a, "src-w");
    });

    test("delivery counts survive kill -9 and a graceful restart", async () => {
      await a.create("dlq-r", { partitions: 3 });
      await a.create("src-r", { partitions: 1, max_deliveries: 5, dead_letter_topic: "dlq-r" });
      await a.produce("src-r", "stubborn");
      for (let i = 1; i <= 2; i++) {
        const l = await next(a, "src-r", `delivery ${i}`);
        assert.equal(l.deliveryCount, i);
        assert.equal((await a.settle("src-r", l.handle, "&extend=0")).status, 204);
      }
      const owner = await d.owner("src-r", 0);
      // The counts reach the OS on the ack log's flush (storage.ack_flush_interval_ms): a kill -9
      // after it keeps them. Both counts are written: one block of two entries (12 + 2 × 16
      // bytes) or two of one (2 × 28); a kill after only the first would count 2 next, not 3.
      await waitFor(async () => (await ackLogBytes(owner.dataDir, "src-r")) >= 44, { timeoutMs: 10_000, what: "both delivery counts in acks.log" });
      await owner.kill();
      await owner.start();
      const third = await next(a, "src-r", "delivery 3, after kill -9");
      assert.equal(third.deliveryCount, 3);
      assert.equal((await a.settle("src-r", third.handle, "&extend=0")).status, 204);
      const fourth = await next(a, "src-r", "delivery 4");
      assert.equal(fourth.deliveryCount, 4);
      // A graceful stop while leased: the lease ends with the process and its delivery counts.
      assert.equal(await owner.stop(), 0);
      await owner.start();
      const fifth = await next(a, "src-r", "delivery 5, after a graceful restart");
      assert.equal(fifth.deliveryCount, 5);
      assert.equal((await a.settle("src-r", fifth.handle, "&extend=0")).status, 204);
      const dead = await next(a, "dlq-r", "the dead letter after five deliveries");
      assert.equal(originHeaders(dead).deliveries, 5);
      assert.equal((await a.settle("dlq-r", dead.handle, "")).status, 204);
      await assertEmpty(a, "src-r");
    });

    test("ack dead_letter=true moves the leased message at once; without a dead-letter topic it is refused", async () => {
      await a.create("dlq-d", { partitions: 3 });
      await a.create("src-d", { partitions: 2, dead_letter_topic: "dlq-d" });
      await a.create("plain-d");
      await a.produce("src-d", "never-works", "kx");
      const l = await next(a, "src-d", "the message");
      assert.equal((await a.settle("src-d", l.handle, "&dead_letter=true&extend=true")).status, 400);
      assert.equal((await a.settle("src-d", l.handle, "&dead_letter=maybe")).status, 400);
      assert.equal((await a.settle("src-d", l.handle, "&dead_letter=true")).status, 204);
      assert.equal((await a.settle("src-d", l.handle, "&dead_letter=true")).status, 410);
      const dead = await next(a, "dlq-d", "the dead-lettered message");
      assert.equal(dead.payload, "never-works");
      assert.deepEqual({ ...originHeaders(dead), producedAt: 0 }, { topic: "src-d", partition: l.partition, offset: l.offset, deliveries: 1, producedAt: 0 });
      await assertEmpty(a, "src-d");
      // The batch form.
      await a.produce("src-d", "b1");
      await a.produce("src-d", "b2");
      const two = await waitFor(async () => {
        const ms = await a.consumeBatch("src-d", 10, 500);
        return ms.length >= 2 ? ms : undefined;
      }, { timeoutMs: 10_000, what: "two messages" });
      const r = await a.json("POST", "/v1/topics/src-d/ack/batch", { receipt_handles: two.map((m) => m.receipt_handle), dead_letter: true });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.deepEqual((r.body.results as Json[]).map((x) => x.status), [204, 204]);
      const got = new Set<string>();
      await waitFor(async () => {
        for (const m of await a.consumeBatch("dlq-d", 10, 300)) {
          got.add(Buffer.from(m.payload_base64 as string, "base64").toString());
          await a.settle("dlq-d", m.receipt_handle as string, "");
        }
        return got.has("b1") && got.has("b2");
      }, { timeoutMs: 20_000, what: "both dead letters of the batch" });
      // No dead-letter topic: refused, and the lease is untouched.
      await a.produce("plain-d", "p");
      const p = await next(a, "plain-d", "a plain message");
      const refused = await a.settle("plain-d", p.handle, "&dead_letter=true");
      assert.equal(refused.status, 409, refused.text);
      assert.equal((JSON.parse(refused.text) as { error: { code: string } }).error.code, "no_dead_letter_topic");
      assert.equal((await a.settle("plain-d", p.handle, "")).status, 204);
    });

    test("redrive returns messages to their origin (or to `to`), and empties the dead-letter topic", async () => {
      await a.create("dlq-x", { partitions: 3 });
      await a.create("src-x", { partitions: 2, dead_letter_topic: "dlq-x" });
      await a.create("other-x");
      const payloads = ["r1", "r2", "r3", "r4"];
      for (const p of payloads) await a.produce("src-x", p, `key-${p}`);
      const seen = new Set<string>();
      while (seen.size < payloads.length) {
        const l = await next(a, "src-x", "a message to dead-letter");
        seen.add(l.payload);
        assert.equal((await a.settle("src-x", l.handle, "&dead_letter=true")).status, 204);
      }
      // Wait until every move is done: the four are in the dead-letter topic (replay counts them).
      await waitFor(async () => {
        let n = 0;
        for (let p = 0; p < 3; p++) n += ((await a.json("GET", `/v1/topics/dlq-x/partitions/${p}/messages?limit=100`)).body.messages as Json[]).length;
        return n === payloads.length;
      }, { timeoutMs: 20_000, what: "four dead letters" });
      let r = await a.json("POST", "/v1/topics/dlq-x/redrive", { max_messages: 0 });
      assert.equal(r.status, 400);
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", { to: "no-such-topic" });
      assert.equal(r.status, 404);
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", { to: "dlq-x" });
      assert.equal(r.status, 400);
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", { max_messages: 3 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.moved, 3);
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", { to: "other-x" });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      assert.equal(r.body.moved, 1);
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", {});
      assert.deepEqual(r.body, { moved: 0, skipped: 0 });
      await assertEmpty(a, "dlq-x");
      // A message produced to the dead-letter topic by hand has no origin: skipped, and left there.
      await a.produce("dlq-x", "no-origin");
      r = await a.json("POST", "/v1/topics/dlq-x/redrive", {});
      assert.deepEqual(r.body, { moved: 0, skipped: 1 });
      const left = await next(a, "dlq-x", "the message redrive skipped");
      assert.equal(left.payload, "no-origin");
      assert.equal((await a.settle("dlq-x", left.handle, "")).status, 204);
      const back = new Map<string, Leased>();
      for (const topic of ["src-x", "other-x"]) {
        for (;;) {
          const l = await a.consume(topic, 300);
          if (l === undefined) break;
          back.set(l.payload, l);
          assert.equal(l.deliveryCount, 1);
          assert.equal(l.headers.get("narad-origin-topic"), null);
          assert.equal(l.headers.get("narad-key"), `key-${l.payload}`);
          assert.equal((await a.settle(topic, l.handle, "")).status, 204);
        }
      }
      assert.deepEqual([...back.keys()].sort(), payloads);
      // Counted by the node that served each redrive.
      let redriven = 0;
      for (const u of d.urls) {
        const m = (await (await fetch(`${u}/metrics`)).text()).match(/narad_redriven_messages_total\{topic="dlq-x"\} (\d+)/);
        redriven += m === null ? 0 : Number(m[1]);
      }
      assert.equal(redriven, payloads.length);
    });


    test("the SDK shows the origin and redrives; the CLI sets, shows and redrives", async () => {
      const sdk = new Narad({ url: d.urls[d.urls.length - 1]! });
      try {
        await sdk.createTopic({ name: "dlq-s", partitions: 3 });
        const t = await sdk.createTopic({ name: "src-s", partitions: 1, maxDeliveries: 1, deadLetterTopic: "dlq-s" });
        assert.equal(t.maxDeliveries, 1);
        assert.equal(t.deadLetterTopic, "dlq-s");
        const p = await sdk.produce("src-s", "sdk-poison", { key: "sk" });
        const m = await waitFor(() => sdk.consume("src-s", { waitMs: 500 }), { timeoutMs: 10_000, what: "the message" });
        assert.equal(m.origin, null);
        await m.nack(); // its one allowed delivery: moved
        const dead = await waitFor(() => sdk.consume("dlq-s", { waitMs: 500 }), { timeoutMs: 20_000, what: "the dead letter" });
        assert.deepEqual({ ...dead.origin!, producedAt: 0 }, { topic: "src-s", partition: p.partition, offset: p.offset, deliveries: 1, producedAt: 0 });
        await dead.nack();
        const batch = await waitFor(async () => {
          const ms = await sdk.consumeBatch("dlq-s", { maxMessages: 10, waitMs: 500 });
          return ms.length > 0 ? ms : undefined;
        }, { timeoutMs: 10_000, what: "the dead letter in a binary batch" });
        assert.equal(batch[0]!.origin?.topic, "src-s");
        await batch[0]!.nack();
        const page = await sdk.replay("dlq-s", batch[0]!.partition, { offset: batch[0]!.offset, limit: 1 });
        assert.equal(page.messages[0]!.origin?.deliveries, 1);
        assert.deepEqual(await sdk.redrive("dlq-s"), { moved: 1, skipped: 0 });
        const back = await waitFor(() => sdk.consume("src-s", { waitMs: 500 }), { timeoutMs: 10_000, what: "the redriven message" });
        assert.equal(back.text(), "sdk-poison");
        assert.equal(back.key, "sk");
        await back.deadLetter();
        await waitFor(async () => ((await sdk.replay("dlq-s", 0)).messages.length + (await sdk.replay("dlq-s", 1)).messages.length + (await sdk.replay("dlq-s", 2)).messages.length) >= 2, { timeoutMs: 20_000, what: "the second dead letter" });

        const env = { NARAD_URL: d.urls[0]! };
        const created = await runNarad(["topic", "create", "src-c", "--max-deliveries", "4", "--dead-letter-topic", "dlq-s", "--json"], { env });
        assert.equal(created.code, 0, created.stderr);
        assert.equal((JSON.parse(created.stdout) as Json).max_deliveries, 4);
        const described = await runNarad(["topic", "describe", "src-c"], { env });
        assert.match(described.stdout, /dead letters\s+after 4 deliveries, to dlq-s/);
        const bad = await runNarad(["topic", "update", "src-c", "--max-deliveries", "1001"], { env });
        assert.notEqual(bad.code, 0);
        const cleared = await runNarad(["topic", "update", "src-c", "--max-deliveries", "none", "--dead-letter-topic", "none", "--json"], { env });
        assert.equal(cleared.code, 0, cleared.stderr);
        assert.equal((JSON.parse(cleared.stdout) as Json).dead_letter_topic, null);
        const redriven = await runNarad(["topic", "redrive", "dlq-s", "--to", "src-c", "--json"], { env });
        assert.equal(redriven.code, 0, redriven.stderr);
        assert.deepEqual(JSON.parse(redriven.stdout), { moved: 1, skipped: 0 });
        const moved = await waitFor(() => sdk.consume("src-c", { waitMs: 500 }), { timeoutMs: 10_000, what: "the message redriven by the CLI" });
        assert.equal(moved.text(), "sdk-poison");
        await moved.ack();
      } finally {
        await sdk.close();
      }
    });
  });
}

suite(singleNode, "single node");
suite(threeNodeCluster(pg), "three-node cluster");
