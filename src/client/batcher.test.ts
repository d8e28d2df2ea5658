// The batcher's own logic (./batcher.ts) with a lane this test drives by hand: which calls form
// which batch, when batches are sent, what each caller gets, and the bounds. The SDK over real
// nodes is test/sdk-batching.test.ts.

import { test } from "node:test";
import assert from "node:assert/strict";
import { keyPartition } from "../protocol/partition.js";
import { LIMITS } from "../protocol/wire.js";
import { BatchBudget, Batcher, batchingLimits, checkMessage, outcomesOfPartial, type BatchItem, type BatchingLimits, type Outcome } from "./batcher.js";
import { NaradAmbiguousError, NaradPartialBatchError, NaradRequestError } from "./errors.js";

interface R {
  partition: number;
  payload: string;
}

/** A lane whose sends wait until the test answers them. */
class HandLane {
  sent: { topic: string; items: readonly BatchItem[]; answer(outs?: readonly Outcome<R>[]): void; fail(e: unknown): void }[] = [];
  lookups: { topic: string; answer(n: number): void; fail(e: unknown): void }[] = [];
  room: number | undefined;
  unkeyedRoom = () => this.room ?? Infinity;
  send = (topic: string, items: readonly BatchItem[]): Promise<readonly Outcome<R>[]> =>
    new Promise((res, rej) => {
      const ok = (p: number) => items.map((it): Outcome<R> => ({ ok: true, value: { partition: it.key === null ? p : keyPartition(it.key, 3), payload: it.payload.toString() } }));
      this.sent.push({ topic, items, answer: (outs) => res(outs ?? ok(0)), fail: rej });
    });
  partitions = (topic: string): Promise<number> => new Promise((answer, fail) => this.lookups.push({ topic, answer, fail }));
}

function setup(limits: Partial<BatchingLimits> = {}) {
  const lane = new HandLane();
  const budget = new BatchBudget({ ...batchingLimits(true)!, ...limits });
  return { lane, budget, b: new Batcher<R>(lane, budget) };
}

const turn = () => new Promise<void>((r) => setImmediate(r));
const texts = (items: readonly BatchItem[]) => items.map((i) => i.payload.toString());

test("calls of one turn go as one batch; while the topic's batches are all out, later calls wait and go together", async () => {
  const { lane, b } = setup({ batchesInFlightMax: 2 });
  const ps = ["a", "b", "c"].map((x) => b.produce("t", Buffer.from(x), null));
  await turn();
  assert.deepEqual(lane.sent.map((s) => texts(s.items)), [["a", "b", "c"]]);
  const second = b.produce("t", Buffer.from("d"), null);
  await turn();
  assert.equal(lane.sent.length, 2, "a second batch goes while one is out");
  const waiting = ["e", "f"].map((x) => b.produce("t", Buffer.from(x), null));
  await turn();
  assert.equal(lane.sent.length, 2, "both are out: e and f wait");
  lane.sent[0]!.answer();
  assert.deepEqual((await Promise.all(ps)).map((r) => r.payload), ["a", "b", "c"]);
  await turn();
  assert.deepEqual(texts(lane.sent[2]!.items), ["e", "f"]);
  lane.sent[1]!.answer();
  lane.sent[2]!.answer();
  await Promise.all([second, ...waiting]);
});

test("keyed messages wait for the partition count, are grouped by partition, and a partition has one batch out at a time", async () => {
  const { lane, b } = setup();
  const keys = ["k1", "k2", "k3", "k4", "k5", "k6"];
  const first = keys.map((k) => b.produce("t", Buffer.from(`1-${k}`), k));
  await turn();
  assert.equal(lane.sent.length, 0, "nothing keyed goes before the count is known");
  assert.equal(lane.lookups.length, 1);
  lane.lookups[0]!.answer(3);
  await turn();
  for (const s of lane.sent) {
    const parts = new Set(s.items.map((i) => keyPartition(i.key!, 3)));
    assert.equal(parts.size, 1, "a batch holds one partition");
  }
  const sentBefore = lane.sent.length;
  const again = keys.map((k) => b.produce("t", Buffer.from(`2-${k}`), k));
  await turn();
  assert.equal(lane.sent.length, sentBefore, "each partition's batch is out: the next calls of it wait");
  assert.equal(lane.lookups.length, 1, "the count is looked up once");
  for (const s of lane.sent.slice(0, sentBefore)) s.answer();
  await Promise.all(first);
  await turn();
  for (const s of lane.sent.slice(sentBefore)) {
    assert.ok(s.items.every((i) => i.payload.toString().startsWith("2-")));
    s.answer();
  }
  await Promise.all(again);
});

test("each caller gets its own outcome; an error of the whole batch is every caller's", async () => {
  const { lane, b } = setup();
  const ps = ["a", "b", "c"].map((x) => b.produce("t", Buffer.from(x), null));
  await turn();
  const refused = new NaradRequestError(404, "topic_not_found", "no", true);
  lane.sent[0]!.answer([{ ok: true, value: { partition: 1, payload: "a" } }, { ok: false, error: refused }, { ok: true, value: { partition: 1, payload: "c" } }]);
  const rs = await Promise.allSettled(ps);
  assert.deepEqual(rs.map((r) => r.status), ["fulfilled", "rejected", "fulfilled"]);
  assert.equal((rs[1] as PromiseRejectedResult).reason, refused);

  const qs = ["d", "e"].map((x) => b.produce("t", Buffer.from(x), null));
  await turn();
  const lost = new NaradAmbiguousError("network_error", "cut");
  lane.sent[1]!.fail(lost);
  for (const r of await Promise.allSettled(qs)) assert.equal((r as PromiseRejectedResult).reason, lost);
});

test("a partial answer is mapped per message: stored, not stored (definite), unknown (ambiguous)", () => {
  const e = new NaradPartialBatchError("forward_failed", "part", 502, [
    { status: "stored", partition: 2, offset: 7 },
    { status: "not_stored", code: "owner_unreachable" },
    { status: "unknown", code: "forward_failed" },
  ]);
  const outs = outcomesOfPartial(e, (r) => ({ partition: r.partition, offset: r.offset, owner: null }));
  assert.deepEqual(outs[0], { ok: true, value: { partition: 2, offset: 7, owner: null } });
  const no = (outs[1] as { error: NaradRequestError }).error;
  assert.ok(no instanceof NaradRequestError && no.definite && no.status === 503 && no.code === "owner_unreachable");
  const unk = (outs[2] as { error: NaradAmbiguousError }).error;
  assert.ok(unk instanceof NaradAmbiguousError && !unk.definite && unk.code === "forward_failed");
});

test("bounds: messages and bytes per batch, an idempotent run's room, and a definite 429 past the waiting bound", async () => {
  const { lane, b, budget } = setup({ batchesInFlightMax: 8, batchMessagesMax: 2, batchBytesMax: 30, queuedMessagesMax: 6 });
  const ps = ["aaaaaaaaaa", "b", "c", "dddddddddddddddddddd", "e", "f"].map((x) => b.produce("t", Buffer.from(x), null));
  const over = b.produce("t", Buffer.from("g"), null);
  await assert.rejects(over, (e: unknown) => e instanceof NaradRequestError && e.status === 429 && e.code === "overloaded" && e.definite && /nothing was sent/.test(e.message));
  await turn();
  // 18 + 9 bytes fit in 30; a third message never (2 a batch); 28 bytes then stand alone.
  assert.deepEqual(lane.sent.map((s) => texts(s.items)), [["aaaaaaaaaa", "b"], ["c"], ["dddddddddddddddddddd"], ["e", "f"]]);
  assert.equal(budget.queuedMessages, 0);
  for (const s of lane.sent) s.answer();
  await Promise.all(ps);

  lane.room = 1;
  const qs = ["x", "y"].map((x) => b.produce("t", Buffer.from(x), null));
  await turn();
  assert.deepEqual(lane.sent.slice(4).map((s) => texts(s.items)), [["x"], ["y"]], "an unkeyed batch takes no more than the lane's room");
  for (const s of lane.sent.slice(4)) s.answer();
  await Promise.all(qs);
});

test("a failed lookup sends the keyed calls one request each; the next keyed call looks up again", async () => {
  const { lane, b } = setup();
  const ps = ["k1", "k2"].map((k) => b.produce("t", Buffer.from(k), k));
  await turn();
  lane.lookups[0]!.fail(new Error("unreachable"));
  await turn();
  assert.deepEqual(lane.sent.map((s) => texts(s.items)), [["k1"], ["k2"]]);
  for (const s of lane.sent) s.answer();
  await Promise.all(ps);
  void b.produce("t", Buffer.from("k3"), "k3");
  await turn();
  assert.equal(lane.lookups.length, 2);
});

test("a keyed result in another partition than expected makes the count be looked up again", async () => {
  const { lane, b } = setup();
  const p = b.produce("t", Buffer.from("k"), "k");
  await turn();
  lane.lookups[0]!.answer(3);
  await turn();
  lane.sent[0]!.answer([{ ok: true, value: { partition: (keyPartition("k", 3) + 1) % 3, payload: "k" } }]);
  await p;
  void b.produce("t", Buffer.from("k"), "k");
  await turn();
  assert.equal(lane.lookups.length, 2);
});

test("idle() waits for every message; failQueued rejects those not sent", async () => {
  const { lane, b, budget } = setup({ batchesInFlightMax: 1 });
  const first = b.produce("t", Buffer.from("a"), null);
  await turn();
  const later = b.produce("t", Buffer.from("b"), null);
  let idle = false;
  const idleP = budget.idle().then(() => (idle = true));
  const gone = new Error("destroyed");
  budget.failQueued(gone);
  await assert.rejects(later, (e) => e === gone);
  assert.equal(idle, false, "the batch out is not settled yet");
  lane.sent[0]!.answer();
  await first;
  await idleP;
  assert.equal(lane.sent.length, 1, "the failed message was never sent");
});

test("checkMessage refuses what the node would, with its code; batchingLimits checks the bounds", () => {
  assert.throws(() => checkMessage(Buffer.alloc(LIMITS.messageBytesMax + 1), null, "p"), (e: unknown) => e instanceof NaradRequestError && e.code === "payload_too_large" && e.status === 413 && e.definite);
  checkMessage(Buffer.alloc(LIMITS.messageBytesMax), "k".repeat(LIMITS.keyBytesMax), "p");
  assert.throws(() => checkMessage("x", "é".repeat(LIMITS.keyBytesMax / 2 + 1), "p"), (e: unknown) => e instanceof NaradRequestError && e.code === "invalid_argument" && e.status === 400);
  assert.throws(() => checkMessage("x", "\udc00", "p"), (e: unknown) => e instanceof NaradRequestError && e.code === "invalid_argument");
  checkMessage("x", "a\ud83d\ude00b", "p"); // a pair is fine
  assert.equal(batchingLimits(false), null);
  assert.equal(batchingLimits(undefined)!.batchesInFlightMax, 4);
  assert.throws(() => batchingLimits({ batchMessagesMax: LIMITS.batchMessagesMax + 1 }), RangeError);
  assert.throws(() => batchingLimits({ batchesInFlightMax: 0 }), RangeError);
});
