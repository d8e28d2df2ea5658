// Read-ahead of consumes: a real partition log and ack log in a temp directory, consumed one
// message at a time as the broker does (take, then readTaken).

import { test } from "node:test";
import assert from "node:assert/strict";
import { open, stat } from "node:fs/promises";
import { join } from "node:path";
import { openAckLog } from "../storage/ack-log.js";
import { openPartitionLog } from "../storage/partition-log.js";
import { captureLogger, logOptions, seededBytes, segmentFile, TestClock, withTempDir } from "../../test/support/storage.js";
import type { PartitionLog } from "../storage/types.js";
import { Partition } from "./partition.js";
import { READ_AHEAD_RECORDS, ReadAheadPool, type ReadAheadWindow } from "./read-ahead.js";
import type { StoredRecord } from "../storage/types.js";

const NEVER_MS = 100_000_000;
const VISIBILITY_MS = 30_000;

async function withPartition(count: number, fn: (p: Partition, log: PartitionLog, reads: () => number, pool: ReadAheadPool, dir: string) => Promise<void>): Promise<void> {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    const acks = await openAckLog(join(dir, "acks"), { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false });
    try {
      const items = Array.from({ length: count }, (_, i) => ({ key: null, payload: seededBytes(i + 1, 1000) }));
      await log.append(items, clock.nowMs()).durable;
      // Counts the partition's reads of its log: the thing read-ahead saves.
      let reads = 0;
      const read = log.read.bind(log);
      log.read = (...a) => {
        reads++;
        return read(...a);
      };
      const pool = new ReadAheadPool();
      await fn(new Partition(0, log, acks, 0, 0, pool), log, () => reads, pool, join(dir, "log"));
    } finally {
      await log.close();
      await acks.close();
    }
  });
}

/** One single-message consume, as the broker does it. */
async function consumeOne(p: Partition): Promise<StoredRecord | undefined> {
  const taken = p.take(1, 0, VISIBILITY_MS);
  if (taken.length === 0) return undefined;
  const records = await p.readTaken(taken, 8 * 1024 * 1024);
  const r = records.get(taken[0]!.offset);
  if (r !== undefined) assert.equal(p.ack(taken[0]!.offset, taken[0]!.tag, 0), "ok");
  else p.release(taken[0]!.offset, taken[0]!.tag, true);
  return r;
}

test("single consumes in offset order are served from one read per window, byte for byte", async () => {
  await withPartition(200, async (p, _log, reads, pool) => {
    for (let i = 0; i < 200; i++) {
      const r = await consumeOne(p);
      assert.ok(r, `offset ${i}`);
      assert.equal(r.offset, i);
      assert.deepEqual(r.payload, seededBytes(i + 1, 1000));
    }
    assert.equal(await consumeOne(p), undefined);
    // 1000-byte payloads: a 64 KiB window holds ~60 of them, so ~4 reads instead of 200.
    assert.ok(reads() <= Math.ceil(200 / 50), `${reads()} reads for 200 consumes`);
    assert.ok(pool.heldBytes > 0);
  });
});

test("redeliveries and batch runs read exactly what they need, and get the right records", async () => {
  await withPartition(100, async (p, _log, reads) => {
    const first = p.take(3, 0, VISIBILITY_MS);
    const got = await p.readTaken(first, 8 * 1024 * 1024);
    assert.deepEqual([...got.keys()].sort((a, b) => a - b), [0, 1, 2]);
    // Nack offset 1: its redelivery is read again (from the window or the log), same bytes.
    assert.equal(p.nack(1, first[1]!.tag, 0), "ok");
    const again = p.take(1, 0, VISIBILITY_MS);
    assert.equal(again[0]!.offset, 1);
    assert.deepEqual((await p.readTaken(again, 8 * 1024 * 1024)).get(1)!.payload, seededBytes(2, 1000));
    // A batch of READ_AHEAD_RECORDS or more is one exact run: no window is filled for it.
    const before = reads();
    const batch = p.take(READ_AHEAD_RECORDS, 0, VISIBILITY_MS);
    const recs = await p.readTaken(batch, 8 * 1024 * 1024);
    assert.equal(recs.size, READ_AHEAD_RECORDS);
    for (const [o, r] of recs) assert.deepEqual(r.payload, seededBytes(o + 1, 1000));
    assert.ok(reads() - before <= 2);
  });
});

test("a corrupt record ahead of the cursor is never served; the records around it are", async () => {
  await withPartition(20, async (p, _log, _reads, _pool, dir) => {
    // Equal records, back to back: flip a payload byte in the middle of record 5.
    const file = segmentFile(dir, 0, "log");
    const size = (await stat(file)).size;
    const fh = await open(file, "r+");
    try {
      const at = Math.floor((size / 20) * 5.5);
      const b = Buffer.alloc(1);
      await fh.read(b, 0, 1, at);
      b[0]! ^= 0xff;
      await fh.write(b, 0, 1, at);
    } finally {
      await fh.close();
    }
    const served: number[] = [];
    for (let i = 0; i < 20; i++) {
      const r = await consumeOne(p);
      if (r !== undefined) {
        assert.deepEqual(r.payload, seededBytes(r.offset + 1, 1000));
        served.push(r.offset);
      }
    }
    assert.deepEqual(served, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19]);
  });
});

test("the pool keeps its budget by dropping the windows filled longest ago", () => {
  const pool = new ReadAheadPool(10_000);
  const rec = (offset: number, bytes: number): StoredRecord => ({ offset, key: null, payload: Buffer.alloc(bytes), producedAtMs: 0 });
  const windows: ReadAheadWindow[] = [pool.window(), pool.window(), pool.window()];
  windows[0]!.fill([rec(0, 4000)]);
  windows[1]!.fill([rec(0, 4000)]);
  assert.equal(pool.heldBytes, 8000);
  windows[2]!.fill([rec(0, 4000)]);
  assert.equal(pool.heldBytes, 8000, "the oldest window was dropped to make room");
  assert.equal(windows[0]!.get(0), undefined);
  assert.ok(windows[1]!.get(0) && windows[2]!.get(0));
  windows[1]!.fill([rec(1, 1000)]); // a refill replaces, and counts as the newest
  assert.equal(pool.heldBytes, 5000);
  windows[2]!.clear();
  assert.equal(pool.heldBytes, 1000);
});
