import assert from "node:assert/strict";
import { test } from "node:test";
import { StickyPartitioner, STICKY_RUN_BYTES, STICKY_RUN_MESSAGES } from "./partitioner.js";

test("unkeyed messages went round the partitions one request at a time: a run of STICKY_RUN_MESSAGES fills one partition, then the next takes a run, round and round", () => {
  const s = new StickyPartitioner();
  const got = Array.from({ length: 3 * STICKY_RUN_MESSAGES + 1 }, () => s.next(3, 1, 10));
  assert.deepEqual(got, got.map((_, i) => Math.floor(i / STICKY_RUN_MESSAGES) % 3));
  assert.equal(STICKY_RUN_MESSAGES, 1000, "docs/api.md states it");
});

test("a run also ends at STICKY_RUN_BYTES of payload, and a request's messages are never split (a batch may make its run longer)", () => {
  const s = new StickyPartitioner(1);
  assert.equal(STICKY_RUN_BYTES, 1024 * 1024, "docs/api.md states it");
  assert.deepEqual([0, 1, 2, 3, 4].map(() => s.next(4, 1, STICKY_RUN_BYTES / 4)), [1, 1, 1, 1, 2]);
  assert.equal(s.next(4, 5000, 5000), 2, "a batch over the bound stays together, on its run");
  assert.equal(s.next(4, 1, 1), 3, "then the next partition");
  // A topic with fewer partitions than the run's: it stays within them.
  assert.equal(s.next(2, 1, 1), 1);
});

test("forItems counts only unkeyed items, and leaves the run alone for a request whose messages all have keys", () => {
  const s = new StickyPartitioner();
  const keyed = Array.from({ length: 2000 }, () => ({ key: "k", payload: Buffer.alloc(1) }));
  assert.equal(s.forItems(3, keyed), 0);
  const mixed = [...Array.from({ length: STICKY_RUN_MESSAGES }, () => ({ key: null, payload: Buffer.alloc(1) })), ...keyed];
  assert.equal(s.forItems(3, mixed), 0);
  assert.equal(s.forItems(3, [{ key: null, payload: Buffer.alloc(1) }]), 1);
});
