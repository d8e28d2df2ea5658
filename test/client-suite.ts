// The SDK suite: every method of the SDK over real HTTP, the typed errors included. One test
// body for every deployment (test/support/deployment.ts): the SDK talks to one node (it takes
// one URL), so on a cluster most of its requests are forwarded to the owner, and the owner a
// message names is the one the placement says. Timing tests use the broker's own long polls as
// their clock (a competing consume that waits past the visibility timeout and must come back
// empty), never fixed sleeps.

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  LIMITS,
  Narad,
  NaradAmbiguousError,
  NaradClientError,
  NaradGoneError,
  NaradRequestError,
  type Message,
  type ProduceResult,
  type ReplayedMessage,
} from "../src/client/index.js";
import { waitFor } from "./harness.js";
import type { Deploy, Deployment } from "./support/deployment.js";

let seq = 0;
function topicName(what: string): string {
  return `client-${what}-${process.pid}-${++seq}`;
}

/** Every byte value, twice, in an order that is not sorted. */
function binaryPayload(): Buffer {
  const b = Buffer.alloc(512);
  for (let i = 0; i < b.length; i++) b[i] = (i * 151 + 7) & 0xff;
  return b;
}

export async function rejectsWith<T extends Error>(p: Promise<unknown>, cls: new (...a: never[]) => T): Promise<T> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof cls, `expected ${cls.name}, got ${String((err as Error)?.name)}: ${String((err as Error)?.message)}`);
    return err;
  }
  assert.fail(`expected ${cls.name}, but it resolved`);
}

/** `transport`: the SDK's produce transport under test (default the SDK's, "http"). */
export function defineSdkSuite(name: string, deploy: Deploy, transport?: "http" | "stream"): void {
  describe(`SDK: ${name}`, () => {
    let d: Deployment;
    let client: Narad;
    /** The id of the node that owns `partition` of `topic`. */
    const ownerOf = async (topic: string, partition: number) => (await d.owner(topic, partition)).id;

    before(async () => {
      d = await deploy();
      client = new Narad({ url: d.urls[0]!, ...(transport !== undefined ? { transport } : {}) });
    });

    after(async () => {
      await client?.destroy();
      await d?.stop();
    });

    describe("topics", () => {
      it("creates, lists, describes, updates and deletes", async () => {
        const name = topicName("topics");
        const created = await client.createTopic({ name, partitions: 2, visibilityTimeoutMs: 5000, retentionMs: 3_600_000 });
        assert.equal(created.name, name);
        assert.equal(created.partitions, 2);
        assert.equal(created.visibilityTimeoutMs, 5000);
        assert.equal(created.retentionMs, 3_600_000);
        assert.deepEqual(created.children, []);

        const defaults = await client.createTopic({ name: topicName("defaults") });
        assert.equal(defaults.partitions, 3);
        assert.equal(defaults.visibilityTimeoutMs, 30_000);
        assert.equal(defaults.retentionMs, 7 * 24 * 3600 * 1000);

        const listed = await client.listTopics();
        assert.ok(listed.some((t) => t.name === name && t.partitions === 2));

        const got = await client.getTopic(name);
        assert.equal(got.visibilityTimeoutMs, 5000);

        const updated = await client.updateTopic(name, { partitions: 4, visibilityTimeoutMs: 7000 });
        assert.equal(updated.partitions, 4);
        assert.equal(updated.visibilityTimeoutMs, 7000);
        assert.equal(updated.retentionMs, 3_600_000);

        const lower = await rejectsWith(client.updateTopic(name, { partitions: 1 }), NaradRequestError);
        assert.equal(lower.status, 400);
        assert.equal(lower.code, "partitions_decrease");
        assert.equal(lower.definite, true);

        const dup = await rejectsWith(client.createTopic({ name }), NaradRequestError);
        assert.equal(dup.status, 409);
        assert.equal(dup.code, "topic_exists");

        const bad = await rejectsWith(client.createTopic({ name: "-bad name" }), NaradRequestError);
        assert.equal(bad.code, "invalid_topic_name");
        assert.equal(bad.definite, true);

        await client.deleteTopic(name);
        const gone = await rejectsWith(client.getTopic(name), NaradRequestError);
        assert.equal(gone.status, 404);
        assert.equal(gone.code, "topic_not_found");
        assert.ok(!(await client.listTopics()).some((t) => t.name === name));
      });
    });

    describe("produce, consume, ack", () => {
      it("round-trips binary payloads, the empty payload and keys with any characters", async () => {
        const topic = topicName("roundtrip");
        await client.createTopic({ name: topic, partitions: 1 });
        const cases: { payload: Buffer; key?: string }[] = [
          { payload: binaryPayload(), key: "ключ/ü %&?=+#\u00e9 " },
          { payload: Buffer.alloc(0) },
          { payload: Buffer.from([0, 0xff, 0x0a, 0x0d, 0]) },
        ];
        const before = Date.now();
        const produced: ProduceResult[] = [];
        for (const c of cases) produced.push(await client.produce(topic, c.payload, { key: c.key }));
        for (const [i, r] of produced.entries()) {
          assert.equal(r.partition, 0);
          if (i > 0) assert.ok(r.offset > produced[i - 1]!.offset);
        }

        const seen = new Map<number, Message>();
        while (seen.size < cases.length) {
          const m = await client.consume(topic, { waitMs: 5000 });
          assert.ok(m, "a produced message must be deliverable");
          seen.set(m.offset, m);
        }
        for (const [i, c] of cases.entries()) {
          const m = seen.get(produced[i]!.offset)!;
          assert.ok(m, `offset ${produced[i]!.offset} delivered`);
          assert.deepEqual(m.payload, c.payload);
          assert.equal(m.key, c.key ?? null);
          assert.equal(m.partition, 0);
          assert.equal(m.topic, topic);
          assert.equal(m.deliveryCount, 1);
          assert.ok(m.producedAt >= before - 1000 && m.producedAt <= Date.now() + 1000, `producedAt ${m.producedAt}`);
          assert.ok(m.receiptHandle.length > 0);
          assert.equal(m.owner, await ownerOf(topic, 0));
          assert.ok(m.ownerBoot && m.ownerBoot.length > 0);
          await m.ack();
        }
        assert.equal(await client.consume(topic), null, "acked messages are not handed out again");
      });

      it("accepts a string payload and exactly 1 MiB, refuses one byte more with payload_too_large", async () => {
        const topic = topicName("limits");
        await client.createTopic({ name: topic, partitions: 1 });
        await client.produce(topic, "héllo");
        const m = await client.consume(topic, { waitMs: 5000 });
        assert.equal(m?.text(), "héllo");
        await m!.ack();

        const max = await client.produce(topic, Buffer.alloc(LIMITS.messageBytesMax, 1));
        assert.equal(max.partition, 0);
        const over = await rejectsWith(client.produce(topic, Buffer.alloc(LIMITS.messageBytesMax + 1, 1)), NaradRequestError);
        assert.equal(over.status, 413);
        assert.equal(over.code, "payload_too_large");
        assert.equal(over.definite, true);
      });

      it("routes the same key to the same partition", async () => {
        const topic = topicName("keys");
        await client.createTopic({ name: topic, partitions: 4 });
        const parts = new Set<number>();
        for (let i = 0; i < 10; i++) parts.add((await client.produce(topic, `m${i}`, { key: "customer-42" })).partition);
        assert.equal(parts.size, 1);
      });

      it("refuses an unknown topic with a definite topic_not_found", async () => {
        const err = await rejectsWith(client.produce(topicName("nope"), "x"), NaradRequestError);
        assert.equal(err.status, 404);
        assert.equal(err.code, "topic_not_found");
        assert.equal(err.definite, true);
        assert.ok(err instanceof NaradClientError);
      });

      it("produces batches in the binary and the JSON encoding, results in request order", async () => {
        const topic = topicName("batch");
        await client.createTopic({ name: topic, partitions: 1 });
        const batch = [
          { payload: binaryPayload(), key: "k1" },
          { payload: "text" },
          { payload: Buffer.alloc(0), key: "" },
        ];
        const bin = await client.produceBatch(topic, batch);
        const js = await client.produceBatch(topic, batch, { encoding: "json" });
        assert.equal(bin.length, 3);
        assert.equal(js.length, 3);
        const offsets = [...bin, ...js].map((r) => r.offset);
        assert.deepEqual(offsets, [...offsets].sort((a, b) => a - b), "one partition: offsets in request order");
        assert.deepEqual(await client.produceBatch(topic, []), []);

        const page = await client.replay(topic, 0, { offset: offsets[0], limit: 6 });
        assert.equal(page.messages.length, 6);
        for (let i = 0; i < 6; i++) {
          const want = batch[i % 3]!;
          const got = page.messages[i]!;
          assert.equal(got.offset, offsets[i]);
          assert.deepEqual(got.payload, Buffer.from(want.payload));
          assert.equal(got.key, want.key ?? null);
        }
      });

      it("consumes in batches and acks in batches with per-handle statuses", async () => {
        const topic = topicName("consume-batch");
        await client.createTopic({ name: topic, partitions: 2 });
        await client.produceBatch(
          topic,
          Array.from({ length: 7 }, (_, i) => ({ payload: `b${i}` })),
        );
        const got: Message[] = [];
        await waitFor(
          async () => {
            got.push(...(await client.consumeBatch(topic, { maxMessages: 5, waitMs: 1000 })));
            return got.length >= 7;
          },
          { what: "7 messages by consume batch" },
        );
        assert.equal(got.length, 7);
        assert.deepEqual(got.map((m) => m.text()).sort(), Array.from({ length: 7 }, (_, i) => `b${i}`));
        const owners = [await ownerOf(topic, 0), await ownerOf(topic, 1)];
        assert.ok(got.every((m) => m.deliveryCount === 1 && m.topic === topic && m.owner === owners[m.partition] && !!m.ownerBoot));

        const handles = got.map((m) => m.receiptHandle);
        const first = await client.ackBatch(topic, handles);
        assert.deepEqual(first.map((r) => r.receiptHandle), handles);
        assert.ok(first.every((r) => r.status === 204), JSON.stringify(first));
        const again = await client.ackBatch(topic, [handles[0]!, "not-a-handle"]);
        assert.deepEqual(again.map((r) => r.status), [410, 400]);
        assert.deepEqual(await client.consumeBatch(topic, { maxMessages: 10 }), []);
        assert.deepEqual(await client.consumeBatch(topic, { maxMessages: 10, encoding: "json" }), []);
      });

      it("consume batches in either encoding give the same messages: keys, bytes and owners", async () => {
        const topic = topicName("consume-batch-enc");
        await client.createTopic({ name: topic, partitions: 1 });
        const sent = Array.from({ length: 6 }, (_, i) => ({ key: i % 2 ? `k${i}` : undefined, payload: Buffer.from([i, 0, 255, i]) }));
        await client.produceBatch(topic, sent);
        const bin = await client.consumeBatch(topic, { maxMessages: 3 });
        const json = await client.consumeBatch(topic, { maxMessages: 3, encoding: "json" });
        const all = [...bin, ...json].sort((a, b) => a.offset - b.offset);
        const owner = await ownerOf(topic, 0);
        assert.equal(all.length, 6);
        all.forEach((m, i) => {
          assert.deepEqual(Buffer.from(m.payload), sent[i]!.payload);
          assert.equal(m.key, sent[i]!.key ?? null);
          assert.equal(m.owner, owner);
          assert.equal(m.deliveryCount, 1);
        });
        const acked = await client.ackBatch(topic, all.map((m) => m.receiptHandle));
        assert.ok(acked.every((r) => r.status === 204));
      });
    });

    describe("leases", () => {
      it("extend keeps the handle live; nack makes the message available at once", async () => {
        const topic = topicName("nack");
        await client.createTopic({ name: topic, partitions: 1 });
        await client.produce(topic, "again");
        const first = await client.consume(topic, { waitMs: 5000 });
        assert.ok(first);
        await first.extend();
        await client.extend(topic, first.receiptHandle);
        await first.nack();
        const second = await client.consume(topic, { waitMs: 5000 });
        assert.ok(second, "a nacked message comes back at once");
        assert.equal(second.offset, first.offset);
        assert.equal(second.deliveryCount, 2);
        assert.notEqual(second.receiptHandle, first.receiptHandle);

        // The first handle was replaced by the second delivery: 410, a NaradRequestError, not definite.
        const gone = await rejectsWith(first.ack(), NaradGoneError);
        assert.ok(gone instanceof NaradRequestError);
        assert.equal(gone.status, 410);
        assert.equal(gone.code, "receipt_handle_gone");
        assert.equal(gone.definite, false);
        await rejectsWith(client.extend(topic, first.receiptHandle), NaradGoneError);

        await second.ack();
        await rejectsWith(second.ack(), NaradGoneError);
      });

      it("a lapsed lease redelivers, and the lapsed handle answers 410", async () => {
        const topic = topicName("lapse");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 500 });
        await client.produce(topic, "lapse");
        const first = await client.consume(topic, { waitMs: 5000 });
        assert.ok(first);
        const second = await client.consume(topic, { waitMs: 5000 });
        assert.ok(second, "redelivered after the visibility timeout");
        assert.equal(second.offset, first.offset);
        assert.equal(second.deliveryCount, 2);
        const err = await rejectsWith(first.extend(), NaradRequestError);
        assert.equal(err.code, "receipt_handle_gone");
        await second.ack();
      });

      it("refuses a forged handle with a definite invalid_receipt_handle", async () => {
        const topic = topicName("forged");
        await client.createTopic({ name: topic, partitions: 1 });
        const err = await rejectsWith(client.ack(topic, "forged-handle"), NaradRequestError);
        assert.equal(err.status, 400);
        assert.equal(err.code, "invalid_receipt_handle");
        assert.equal(err.definite, true);
      });

      it("autoExtend keeps a lease alive past the visibility timeout and acks on success", async () => {
        const topic = topicName("auto");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 600 });
        await client.produce(topic, "slow work");
        const m = await client.consume(topic, { waitMs: 5000 });
        assert.ok(m);
        const result = await client.autoExtend(m, async (msg, signal) => {
          assert.equal(msg, m);
          // Work for well over the visibility timeout: a competing long poll must get nothing.
          const rival = await client.consume(topic, { waitMs: 2000 });
          assert.equal(rival, null, "the lease was kept alive, so nobody else got the message");
          assert.equal(signal.aborted, false);
          return 42;
        });
        assert.equal(result, 42);
        await rejectsWith(m.ack(), NaradGoneError); // settled by autoExtend already
        assert.equal(await client.consume(topic, { waitMs: 1000 }), null, "acked for good");
      });

      it("autoExtend nacks when the handler throws and rethrows its error", async () => {
        const topic = topicName("auto-throw");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 60_000 });
        await client.produce(topic, "fails");
        const m = await client.consume(topic, { waitMs: 5000 });
        assert.ok(m);
        await assert.rejects(
          client.autoExtend(m, () => {
            throw new Error("handler failed");
          }),
          /handler failed/,
        );
        const again = await client.consume(topic, { waitMs: 5000 });
        assert.ok(again, "nacked: available at once, not after the 60 s lease");
        assert.equal(again.deliveryCount, 2);
        await again.ack();
      });

      it("autoExtend reports a lost lease through the handler's signal", async () => {
        const topic = topicName("auto-lost");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 60_000 });
        await client.produce(topic, "lost");
        const m = await client.consume(topic, { waitMs: 5000 });
        assert.ok(m);
        const run = client.autoExtend(
          m,
          async (_msg, signal) => {
            // Someone else ends the lease; the next extend answers 410.
            await client.nack(topic, m.receiptHandle);
            await waitFor(() => signal.aborted, { what: "the lost-lease signal" });
            assert.ok(signal.reason instanceof NaradGoneError);
            return "stopped";
          },
          { intervalMs: 50 },
        );
        await rejectsWith(run, NaradGoneError); // the final ack cannot succeed either
        const again = await client.consume(topic, { waitMs: 5000 });
        assert.ok(again);
        await again.ack();
      });
    });

    describe("messages() iterator", () => {
      it("long-polls, yields messages as they come, and ends quietly on abort", async () => {
        const topic = topicName("iter");
        await client.createTopic({ name: topic, partitions: 2 });
        const ac = new AbortController();
        const got: string[] = [];
        const loop = (async () => {
          for await (const m of client.messages(topic, { waitMs: 20_000, signal: ac.signal })) {
            got.push(m.text());
            await m.ack();
            if (got.length === 5) ac.abort();
          }
        })();
        for (let i = 0; i < 5; i++) await client.produce(topic, `i${i}`);
        await loop;
        assert.deepEqual(got.sort(), ["i0", "i1", "i2", "i3", "i4"]);
      });

      it("an abort ends a waiting long poll at once", async () => {
        const topic = topicName("iter-abort");
        await client.createTopic({ name: topic, partitions: 1 });
        const ac = new AbortController();
        const started = Date.now();
        const loop = (async () => {
          for await (const m of client.messages(topic, { waitMs: 20_000, signal: ac.signal })) void m;
        })();
        setImmediate(() => ac.abort());
        await loop;
        assert.ok(Date.now() - started < 10_000, "did not wait out the 20 s long poll");
      });

      it("in batch mode, breaking out nacks the messages it did not yield", async () => {
        const topic = topicName("iter-batch");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 60_000 });
        await client.produceBatch(topic, Array.from({ length: 4 }, (_, i) => ({ payload: `x${i}` })));
        let first: Message | undefined;
        for await (const m of client.messages(topic, { batch: 10, waitMs: 2000 })) {
          first = m;
          break;
        }
        assert.ok(first);
        await first.ack();
        // The other three were leased by the same batch; nacked on break, so they are back at once.
        const rest: Message[] = [];
        await waitFor(
          async () => {
            rest.push(...(await client.consumeBatch(topic, { maxMessages: 10, waitMs: 1000 })));
            return rest.length >= 3;
          },
          { what: "the three unyielded messages back", timeoutMs: 10_000 },
        );
        assert.equal(rest.length, 3);
        await client.ackBatch(topic, rest.map((m) => m.receiptHandle));
      });
    });

    describe("one round trip a message: consume({ack}) and process()", () => {
      it("consume({ack}) acks the handle and leases the next; a refused ack throws and leases nothing", async () => {
        const topic = topicName("acknext");
        await client.createTopic({ name: topic, partitions: 1 });
        await client.produceBatch(topic, [{ payload: "one" }, { payload: "two" }]);
        const m1 = await client.consume(topic);
        assert.ok(m1);
        const m2 = await client.consume(topic, { ack: m1.receiptHandle, waitMs: 100 });
        assert.ok(m2);
        assert.deepEqual([m1.text(), m2.text()].sort(), ["one", "two"]);
        await rejectsWith(m1.ack(), NaradGoneError); // settled by the piggybacked ack
        await rejectsWith(client.consume(topic, { ack: m1.receiptHandle }), NaradGoneError);
        const bad = await rejectsWith(client.consume(topic, { ack: "garbage" }), NaradRequestError);
        assert.equal(bad.code, "invalid_receipt_handle");
        assert.equal(await client.consume(topic, { ack: m2.receiptHandle }), null, "the ack rides on an empty consume too");
        await rejectsWith(m2.ack(), NaradGoneError);
      });

      it("process() runs the handler on each message, acks each once, and ends on abort", async () => {
        const topic = topicName("process");
        await client.createTopic({ name: topic, partitions: 2 });
        const ac = new AbortController();
        const handled: Message[] = [];
        const loop = client.process(
          topic,
          (m) => {
            handled.push(m);
            if (handled.length === 6) ac.abort();
          },
          { waitMs: 20_000, signal: ac.signal },
        );
        for (let i = 0; i < 6; i++) await client.produce(topic, `p${i}`);
        await loop;
        assert.deepEqual(handled.map((m) => m.text()).sort(), ["p0", "p1", "p2", "p3", "p4", "p5"]);
        // Every one was acked: through the next consume, and the last one when the loop ended.
        for (const m of handled) await rejectsWith(m.ack(), NaradGoneError);
        assert.equal(await client.consume(topic), null);
      });

      it("process() with concurrency runs that many handlers at once, and each message once", async () => {
        const topic = topicName("process-many");
        await client.createTopic({ name: topic, partitions: 3 });
        await client.produceBatch(topic, Array.from({ length: 12 }, (_, i) => ({ payload: `c${i}` })));
        const ac = new AbortController();
        const handled: string[] = [];
        let active = 0;
        let most = 0;
        // The first four handlers wait for each other: only four loops at once can pass this.
        let release!: () => void;
        const allIn = new Promise<void>((r) => (release = r));
        await client.process(
          topic,
          async (m) => {
            active++;
            most = Math.max(most, active);
            if (most === 4) release();
            await allIn;
            handled.push(m.text());
            active--;
            if (handled.length === 12) ac.abort();
          },
          { concurrency: 4, waitMs: 1_000, signal: ac.signal },
        );
        assert.equal(most, 4);
        assert.deepEqual(handled.sort(), Array.from({ length: 12 }, (_, i) => `c${i}`).sort());
        assert.equal(await client.consume(topic), null, "every message acked, the last ones on the way out");
        await assert.rejects(client.process(topic, () => undefined, { concurrency: 0 }), RangeError);
      });

      it("process(): a handler that throws has its message nacked and reported to onError", async () => {
        const topic = topicName("process-fail");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 60_000 });
        await client.produce(topic, "flaky");
        const ac = new AbortController();
        const deliveries: number[] = [];
        const reported: [string, number][] = [];
        await client.process(
          topic,
          (m) => {
            deliveries.push(m.deliveryCount);
            if (m.deliveryCount === 1) throw new Error("first try fails");
            ac.abort();
          },
          { waitMs: 5_000, signal: ac.signal, onError: (err, m) => void reported.push([(err as Error).message, m?.deliveryCount ?? 0]) },
        );
        // The nack made it available at once (the visibility timeout is a minute).
        assert.deepEqual(deliveries, [1, 2]);
        assert.deepEqual(reported, [["first try fails", 1]]);
        assert.equal(await client.consume(topic), null, "acked on the way out");
      });

      it("process() without onError rejects with the handler's error, and the message is available again", async () => {
        const topic = topicName("process-throw");
        await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 60_000 });
        await client.produce(topic, "boom");
        await assert.rejects(
          client.process(topic, () => {
            throw new Error("handler broke");
          }, { waitMs: 5_000 }),
          /handler broke/,
        );
        const again = await client.consume(topic);
        assert.ok(again);
        assert.equal(again.deliveryCount, 2);
        await again.ack();
      });
    });

    describe("replay", () => {
      it("pages a partition in offset order and replayAll walks it to the end", async () => {
        const topic = topicName("replay");
        await client.createTopic({ name: topic, partitions: 1 });
        for (let i = 0; i < 10; i++) await client.produce(topic, `r${i}`, { key: i % 2 ? "odd" : undefined });
        const page = await client.replay(topic, 0, { offset: 0, limit: 4 });
        assert.equal(page.messages.length, 4);
        assert.equal(page.earliestOffset, 0);
        assert.equal(page.endOffset, 10);
        assert.equal(page.nextOffset, 4);
        assert.deepEqual(page.messages.map((m) => m.offset), [0, 1, 2, 3]);
        assert.deepEqual(page.messages.map((m) => m.key), [null, "odd", null, "odd"]);
        assert.equal(page.messages[2]!.payload.toString(), "r2");

        const all: ReplayedMessage[] = [];
        for await (const m of client.replayAll(topic, 0, 3, { pageSize: 3 })) all.push(m);
        assert.deepEqual(all.map((m) => m.offset), [3, 4, 5, 6, 7, 8, 9]);
        assert.deepEqual(all.map((m) => m.payload.toString()), ["r3", "r4", "r5", "r6", "r7", "r8", "r9"]);

        // Replay takes no lease: everything is still there to consume.
        const m = await client.consume(topic, { waitMs: 1000 });
        assert.ok(m);

        const err = await rejectsWith(client.replay(topic, 7), NaradRequestError);
        assert.equal(err.status, 404);
      });
    });

    describe("users and grants", () => {
      it("creates a user, grants, lists, revokes and deletes", async () => {
        const adminPassword = "admin-secret-for-test";
        // A deployment of its own, with security on; on a cluster the users made through one node
        // are used through another.
        const secured = await deploy({ adminPassword });
        const url = secured.urls.at(-1)!;
        const admin = new Narad({ url: secured.urls[0]!, user: "admin", password: adminPassword });
        try {
          const user = await admin.createUser({ name: "alice", password: "alice-pw" });
          assert.equal(user.name, "alice");
          const listed = await admin.listUsers();
          assert.deepEqual(listed.map((u) => u.name).sort(), ["admin", "alice"]);
          const g = await admin.addGrant("alice", { action: "produce", pattern: "orders-*" });
          assert.deepEqual(g, { action: "produce", pattern: "orders-*" });
          assert.deepEqual(await admin.listGrants("alice"), [{ action: "produce", pattern: "orders-*" }]);

          const anon = new Narad({ url });
          const unauth = await rejectsWith(anon.listTopics(), NaradRequestError);
          assert.equal(unauth.status, 401);
          await anon.destroy();
          const alice = new Narad({ url, user: "alice", password: "alice-pw" });
          const forbidden = await rejectsWith(alice.listUsers(), NaradRequestError);
          assert.equal(forbidden.status, 403);
          assert.equal(forbidden.definite, true);
          await alice.setUserPassword("alice", "alice-pw-2");
          await alice.destroy();
          const aliceOld = new Narad({ url, user: "alice", password: "alice-pw" });
          assert.equal((await rejectsWith(aliceOld.createTopic({ name: "orders-1" }), NaradRequestError)).status, 401);
          await aliceOld.destroy();
          const dupUser = await rejectsWith(admin.createUser({ name: "alice", password: "whatever-pw" }), NaradRequestError);
          assert.equal(dupUser.status, 409);

          await admin.revokeGrant("alice", { action: "produce", pattern: "orders-*" });
          assert.deepEqual(await admin.listGrants("alice"), []);
          await admin.deleteUser("alice");
          assert.ok(!(await admin.listUsers()).some((u) => u.name === "alice"));
        } finally {
          await admin.destroy();
          await secured.stop();
        }
      });
    });

    // The node the requests go to dies or stops answering; on a cluster that is the node the SDK
    // talks to (not the owner, whose death would be the entry node's 502 forward_failed). Each test
    // starts it again, so the deployment is whole for the next.
    describe("errors without an answer", () => {
      it("a node killed during a request gives NaradAmbiguousError; a paused node a request_timeout", async () => {
        const victim = d.nodes.at(-1)!;
        // One connection each, opened before the fault, so the requests below are surely written
        // to a live socket (undici writes synchronously on an idle keep-alive connection).
        const t = transport !== undefined ? { transport } : {};
        const c = new Narad({ url: victim.url, connections: 1, requestTimeoutMs: 500, ...t });
        const c2 = new Narad({ url: victim.url, connections: 1, ...t });
        try {
          const topic = topicName("victim");
          await c.createTopic({ name: topic, partitions: 1 });
          await c2.getTopic(topic);
          // A produce each, so a stream transport's connection is open before the fault too.
          await c.produce(topic, "before");
          await c2.produce(topic, "before");

          // Paused: the request sits unanswered in the socket until our timeout.
          victim.pause();
          const timedOut = await rejectsWith(c.produce(topic, "maybe"), NaradAmbiguousError);
          assert.equal(timedOut.code, "request_timeout");
          assert.equal(timedOut.definite, false);

          // Still paused, a produce is in flight; the kill breaks the connection under it.
          const inFlight = c2.produce(topic, "maybe too");
          inFlight.catch(() => undefined);
          await new Promise((r) => setImmediate(r));
          await victim.kill();
          const killed = await rejectsWith(inFlight, NaradAmbiguousError);
          assert.equal(killed.definite, false);
          assert.equal(killed.code, "network_error");
        } finally {
          await c.destroy();
          await c2.destroy();
          await victim.kill();
          await victim.start();
        }
      });

      it("a long poll cut by a kill is ambiguous, not empty", async () => {
        const victim = d.nodes.at(-1)!;
        const c = new Narad({ url: victim.url, connections: 1 });
        try {
          const topic = topicName("victim-poll");
          await c.createTopic({ name: topic, partitions: 1 });
          const poll = c.consume(topic, { waitMs: 15_000 });
          poll.catch(() => undefined);
          // On the idle keep-alive connection the request is written at once; the kill cuts it.
          await new Promise((r) => setImmediate(r));
          await victim.kill();
          const err = await rejectsWith(poll, NaradAmbiguousError);
          assert.equal(err.definite, false);
        } finally {
          await c.destroy();
          await victim.kill();
          await victim.start();
        }
      });
    });
  });
}
