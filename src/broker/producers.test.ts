// Unit tests of the dedupe window (./producers.ts): its bounds (time, sequences per producer,
// entries of the node), its floor, and its rebuild from a real partition log (fsync, reopen).
import { test } from "node:test";
import assert from "node:assert/strict";
import { openPartitionLog } from "../storage/partition-log.js";
import { captureLogger, logOptions, TestClock, withTempDir } from "../../test/support/storage.js";
import { DedupeWindow, DedupeWindows, idempotentGroups, idempotentPartition, producerAttrs, producerAttrsMany, SEQUENCE_RUN, WindowTotals, type WindowLimits } from "./producers.js";
import { setProducerSequence, withProducerSequence } from "../storage/attrs.js";

const A = "aa".repeat(16);
const B = "bb".repeat(16);
const BIG: WindowLimits = { windowMs: 300_000, sequencesMax: 100_000, entriesMax: 1_000_000 };

test("a stored sequence is found at its offset; an unknown one above the floor is new", () => {
  const w = new DedupeWindow(BIG);
  w.add(A, 5, 40, 1000);
  assert.deepEqual(w.lookup(A, 5, 1000), { kind: "stored", offset: 40 });
  assert.deepEqual(w.lookup(A, 4, 1000), { kind: "new" });
  assert.deepEqual(w.lookup(B, 5, 1000), { kind: "new" });
});

test("time bound: entries older than windowMs go, and their producer's floor rises past them", () => {
  const w = new DedupeWindow({ ...BIG, windowMs: 100 });
  w.add(A, 0, 0, 1000);
  w.add(A, 1, 1, 1050);
  w.add(A, 2, 2, 1200);
  assert.deepEqual(w.lookup(A, 0, 1100), { kind: "stored", offset: 0 });
  // At 1151 the first two are older than 100 ms.
  assert.deepEqual(w.lookup(A, 0, 1151), { kind: "old", floor: 2 });
  assert.deepEqual(w.lookup(A, 1, 1151), { kind: "old", floor: 2 });
  assert.deepEqual(w.lookup(A, 2, 1151), { kind: "stored", offset: 2 });
  assert.equal(w.size, 1);
  // The floor outlives the producer's last entry.
  assert.deepEqual(w.lookup(A, 2, 5000), { kind: "old", floor: 3 });
  assert.equal(w.size, 0);
  assert.deepEqual(w.lookup(A, 3, 5000), { kind: "new" });
});

test("sequence bound: a producer keeps at most sequencesMax entries, its oldest go first", () => {
  const w = new DedupeWindow({ ...BIG, sequencesMax: 10 });
  for (let s = 0; s < 25; s++) w.add(A, s, 100 + s, 1000);
  w.add(B, 0, 200, 1000);
  for (let s = 0; s < 15; s++) assert.equal(w.lookup(A, s, 1000).kind, "old", `sequence ${s}`);
  for (let s = 15; s < 25; s++) assert.deepEqual(w.lookup(A, s, 1000), { kind: "stored", offset: 100 + s });
  assert.deepEqual(w.lookup(B, 0, 1000), { kind: "stored", offset: 200 }, "another producer keeps its own");
});

test("entries bound: at entriesMax the window taking a sequence lets go of its oldest (of every producer), never more than the bound held", () => {
  const totals = new WindowTotals();
  const w1 = new DedupeWindow({ ...BIG, entriesMax: 100 }, totals);
  const w2 = new DedupeWindow({ ...BIG, entriesMax: 100 }, totals);
  for (let s = 0; s < 60; s++) w1.add(A, s, s, 1000);
  for (let s = 0; s < 80; s++) {
    w2.add(B, s, s, 1000);
    assert.ok(totals.entries <= 100, `entries ${totals.entries} within the bound`);
  }
  assert.equal(totals.entries, 100);
  assert.equal(totals.evicted, 40);
  // w2 gave up its own oldest; w1 keeps everything.
  assert.equal(w1.size, 60);
  assert.equal(w2.size, 40);
  assert.equal(w2.lookup(B, 39, 1000).kind, "old");
  assert.deepEqual(w2.lookup(B, 40, 1000), { kind: "stored", offset: 40 });
  w1.clear();
  assert.equal(totals.entries, 40, "a window cleared gives its entries back");
});

test("producerAttrsMany writes what encodeAttrs does, for one producer and several; a shared block renumbered writes the same", () => {
  const ps = [
    { id: A, sequence: 0 },
    { id: A, sequence: 2 ** 40 + 3 },
    { id: B, sequence: 7 },
    { id: B, sequence: 8 },
    { id: A, sequence: Number.MAX_SAFE_INTEGER },
  ];
  assert.deepEqual(producerAttrsMany(ps), ps.map(producerAttrs));
  // A run's shared block, renumbered as the log writes each record (across the u32 boundary).
  const first = 2 ** 32 - 2;
  const block = producerAttrs({ id: B, sequence: first });
  for (let k = 0; k < 4; k++) {
    assert.deepEqual(withProducerSequence(block, first + k), producerAttrs({ id: B, sequence: first + k }));
    setProducerSequence(block, first + k);
    assert.deepEqual(block, producerAttrs({ id: B, sequence: first + k }));
  }
  assert.throws(() => setProducerSequence(Buffer.from([2, 0, 0]), 1), RangeError);
  assert.throws(() => setProducerSequence(block, 2 ** 53), RangeError);
});

test("runs: a batch's consecutive sequences are one queue entry, bounded, expired and split around a copy already held", () => {
  const totals = new WindowTotals();
  const w = new DedupeWindow({ windowMs: 100, sequencesMax: 150, entriesMax: 1000 }, totals);
  w.addRun(A, 0, 100, 500, 1000);
  w.addRun(A, 100, 100, 700, 1050);
  assert.deepEqual(w.lookup(A, 60, 1000), { kind: "stored", offset: 560 });
  assert.deepEqual(w.lookup(A, 150, 1000), { kind: "stored", offset: 750 });
  // The per-producer bound (150) let the oldest 50 go.
  assert.deepEqual(w.lookup(A, 49, 1000), { kind: "old", floor: 50 });
  assert.equal(totals.entries, 200, "the queue still counts the run until it leaves");
  // The first run leaves with its time: the floor passes it.
  assert.deepEqual(w.lookup(A, 60, 1101), { kind: "old", floor: 100 });
  assert.equal(totals.entries, 100);
  // A run over a sequence held already is split around it: the held one keeps its offset.
  w.addRun(B, 0, 1, 9, 1101);
  w.addRun(B, 0, 3, 20, 1101);
  assert.deepEqual([0, 1, 2].map((q) => w.lookup(B, q, 1101)), [
    { kind: "stored", offset: 9 },
    { kind: "stored", offset: 21 },
    { kind: "stored", offset: 22 },
  ]);
  assert.equal(w.size, 103);
});

test("runs: single produces that continue a producer's run extend it; out-of-order runs are found; a queue entry leaving cuts only its own sequences", () => {
  const totals = new WindowTotals();
  const w = new DedupeWindow({ windowMs: 100, sequencesMax: 1000, entriesMax: 1000 }, totals);
  // 0..4 at offsets 10..14, one at a time: one run; 5 at a gap in offsets: a run of its own.
  for (let q = 0; q < 5; q++) w.add(A, q, 10 + q, 1000 + q);
  w.add(A, 5, 30, 1010);
  // Out of order: 8..9 stored before 6..7.
  w.addRun(A, 8, 2, 40, 1020);
  w.addRun(A, 6, 2, 50, 1030);
  const at = (q: number) => w.lookup(A, q, 1030);
  assert.deepEqual([0, 4, 5, 6, 7, 8, 9].map(at), [0 + 10, 14, 30, 50, 51, 40, 41].map((offset) => ({ kind: "stored", offset })));
  assert.deepEqual(at(10), { kind: "new" });
  assert.equal(w.allNew(A, 10, 5), true);
  assert.equal(w.allNew(A, 9, 5), false, "9 is held");
  assert.equal(w.allNew(A, 7, 1), false);
  assert.equal(totals.entries, 10);
  // Sequences 0..2 leave with their times (one queue entry each), from the middle of the run
  // they were merged into: 3 and 4 stay where they are.
  assert.deepEqual(w.lookup(A, 2, 1102.5), { kind: "old", floor: 3 });
  assert.deepEqual(w.lookup(A, 3, 1102.5), { kind: "stored", offset: 13 });
  assert.deepEqual(w.lookup(A, 4, 1102.5), { kind: "stored", offset: 14 });
  assert.equal(totals.entries, 7);
  // The 8..9 run leaves before 6..7 (its time is older): the floor passes 6..7, which still answer.
  assert.deepEqual(w.lookup(A, 8, 1120.5), { kind: "old", floor: 10 });
  assert.deepEqual(w.lookup(A, 6, 1120.5), { kind: "stored", offset: 50 });
  assert.equal(w.size, 2);
});

test("sequence bound over runs: the lowest sequences go first, a run is cut in part", () => {
  const w = new DedupeWindow({ ...BIG, sequencesMax: 150 });
  w.addRun(A, 0, 100, 0, 1000);
  w.addRun(A, 100, 100, 500, 1000);
  assert.deepEqual(w.lookup(A, 49, 1000), { kind: "old", floor: 50 });
  assert.deepEqual(w.lookup(A, 50, 1000), { kind: "stored", offset: 50 });
  assert.deepEqual(w.lookup(A, 199, 1000), { kind: "stored", offset: 599 });
  w.addRun(A, 200, 100, 900, 1000);
  assert.deepEqual(w.lookup(A, 149, 1000), { kind: "old", floor: 150 });
  assert.deepEqual(w.lookup(A, 150, 1000), { kind: "stored", offset: 550 });
});

test("a reserved sequence makes a second lookup wait until it is settled", async () => {
  const w = new DedupeWindow(BIG);
  let settle!: () => void;
  const until = new Promise<void>((r) => (settle = r));
  w.reserve(A, 7, 1, until);
  const l = w.lookup(A, 7, 1000);
  assert.equal(l.kind, "wait");
  let settled = false;
  const waiting = (l as { until: Promise<void> }).until.then(() => (settled = true));
  w.add(A, 7, 70, 1000);
  w.release(A, until);
  settle();
  await waiting;
  assert.ok(settled);
  assert.deepEqual(w.lookup(A, 7, 1000), { kind: "stored", offset: 70 });
});

test("unkeyed idempotent partitions: stable per (producer, run of 1024 sequences), keyed ones by key", () => {
  const p0 = idempotentPartition(A, 0, 8);
  for (const s of [1, 500, SEQUENCE_RUN - 1]) assert.equal(idempotentPartition(A, s, 8), p0);
  const runs = new Set(Array.from({ length: 64 }, (_, r) => idempotentPartition(A, r * SEQUENCE_RUN, 8)));
  assert.ok(runs.size > 1, "runs spread over the partitions");
  const g = idempotentGroups(
    [
      { key: null, producer: { id: A, sequence: 0 } },
      { key: null, producer: { id: A, sequence: 1 } },
      { key: "k", producer: { id: A, sequence: 2 } },
    ],
    8,
  );
  assert.deepEqual(g.get(p0)?.slice(0, 2), [0, 1]);
});

test("rebuild: the window comes back from a real log after a reopen, bounded by time and by the sequence bound", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    let log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    // Old records (outside the 1 s window), then recent ones of two producers and plain ones.
    for (let s = 0; s < 5; s++) await log.append([{ key: null, payload: Buffer.from(`old-${s}`), attrs: producerAttrs({ id: A, sequence: s }) }], clock.nowMs()).durable;
    clock.advance(10_000);
    await log.append([{ key: null, payload: Buffer.from("plain") }], clock.nowMs()).durable;
    for (let s = 5; s < 20; s++) await log.append([{ key: null, payload: Buffer.from(`a-${s}`), attrs: producerAttrs({ id: A, sequence: s }) }], clock.nowMs()).durable;
    await log.append([{ key: null, payload: Buffer.from("b-0"), attrs: producerAttrs({ id: B, sequence: 0 }) }], clock.nowMs()).durable;
    await log.close();
    log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    const w = await DedupeWindow.rebuild(log, { windowMs: 1000, sequencesMax: 10, entriesMax: 1000 }, new WindowTotals(), clock.nowMs());
    // A's records 5..19 are in the window's time; the sequence bound keeps the last 10 (10..19).
    for (let s = 10; s < 20; s++) assert.deepEqual(w.lookup(A, s, clock.nowMs()), { kind: "stored", offset: 1 + s }, `A ${s}`);
    for (let s = 0; s < 10; s++) assert.equal(w.lookup(A, s, clock.nowMs()).kind, "old", `A ${s} (older than the scan or the bound)`);
    assert.deepEqual(w.lookup(B, 0, clock.nowMs()), { kind: "stored", offset: 21 });
    assert.deepEqual(w.lookup(A, 20, clock.nowMs()), { kind: "new" });
    // A scan of the whole log sets no floor from the scan: an unseen sequence below the others is new.
    const whole = await DedupeWindow.rebuild(log, { windowMs: 3_600_000, sequencesMax: 100, entriesMax: 1000 }, new WindowTotals(), clock.nowMs());
    assert.deepEqual(whole.lookup(A, 0, clock.nowMs()), { kind: "stored", offset: 0 });
    assert.deepEqual(whole.lookup(B, 1, clock.nowMs()), { kind: "new" });
    await log.close();
  });
});

test("the produce path: duplicates answer their first offset, a batch re-sent in part appends only the new, and concurrent sends append once", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    const windows = new DedupeWindows({ clock, logger: cap.logger, limits: BIG });
    const part = { index: 0, log };
    let appends = 0;
    const append = async (items: { key: Buffer | null; payload: Buffer; attrs: Buffer }[], groups: Map<number, number[]>, onAssigned: (p: number, base: number) => void) => {
      appends++;
      const { baseOffset, durable } = log.append(items, clock.nowMs());
      onAssigned(0, baseOffset);
      await durable;
      return items.map((_, i) => ({ partition: 0, offset: baseOffset + i }));
    };
    const items = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ key: null, payload: Buffer.from(`m-${from + i}`), producer: { id: A, sequence: from + i } }));
    const all = (n: number) => new Map([[0, Array.from({ length: n }, (_, i) => i)]]);
    const first = await windows.produce("t", [part], items(0, 4), all(4), append);
    assert.deepEqual(first, [0, 1, 2, 3].map((o) => ({ partition: 0, offset: o })));
    const part2 = await windows.produce("t", [part], items(2, 4), all(4), append);
    assert.deepEqual(part2, [
      { partition: 0, offset: 2, duplicate: true },
      { partition: 0, offset: 3, duplicate: true },
      { partition: 0, offset: 4 },
      { partition: 0, offset: 5 },
    ]);
    const before = appends;
    const same = await Promise.all(Array.from({ length: 5 }, () => windows.produce("t", [part], items(6, 1), all(1), append)));
    assert.equal(appends, before + 1, "five concurrent sends, one append");
    assert.deepEqual(new Set(same.map((r) => r[0]!.offset)), new Set([6]));
    assert.equal(same.filter((r) => r[0]!.duplicate !== true).length, 1);
    assert.equal(log.endOffset, 7);
    // One sequence twice in one request (merged forwards): stored once, the copy answered from it.
    const twice = await windows.produce("t", [part], [...items(7, 1), ...items(7, 1)], all(2), append);
    assert.deepEqual(twice, [{ partition: 0, offset: 7 }, { partition: 0, offset: 7, duplicate: true }]);
    assert.equal(log.endOffset, 8);
    await log.close();
  });
});
