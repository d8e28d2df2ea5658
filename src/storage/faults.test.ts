// What storage does on a bad day, on real files with real fsync and faults injected through the
// filesystem seam (test/support/fault-fs.ts): a disk that fills up during an append, an fdatasync
// that fails with EIO (fsyncgate: after a failed fsync the page cache state is unknown, so a log
// stops and only a reopen from disk brings it back), and the ack log's and cursor file's timers
// driven by a ManualScheduler instead of real time.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { ManualClock, ManualScheduler } from "../platform/manual.js";
import { ACK_LOG_FILE, ACK_SNAPSHOT_FILE, openAckLog } from "./ack-log.js";
import { CursorFile } from "./cursor-file.js";
import { openPartitionLog, type FilePartitionLog } from "./partition-log.js";
import type { AckLogOptions, AppendInput } from "./types.js";
import { FaultFs } from "../../test/support/fault-fs.js";
import { captureLogger, logOptions, seededBytes, TestClock, withTempDir } from "../../test/support/storage.js";

const MiB = 1024 * 1024;

function records(from: number, n: number, bytes = 1000): AppendInput[] {
  return Array.from({ length: n }, (_, i) => ({ key: Buffer.from(`k${from + i}`), payload: seededBytes(from + i + 1, bytes) }));
}

/** Every record of `inputs` (appended from offset 0) is in the log, byte for byte. */
async function assertHolds(log: FilePartitionLog, inputs: AppendInput[]): Promise<void> {
  const got = await log.read(0, inputs.length + 100, 100 * MiB);
  assert.ok(got.length >= inputs.length, `${got.length} records read, ${inputs.length} expected`);
  inputs.forEach((input, i) => {
    assert.equal(got[i]!.offset, i);
    assert.ok(got[i]!.key!.equals(input.key!), `record ${i} key`);
    assert.ok(got[i]!.payload.equals(input.payload), `record ${i} payload`);
  });
}

test("ENOSPC on append: the append is refused with a StorageError, every durable record survives a reopen, nothing is half-visible", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const ffs = new FaultFs();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger, { fs: ffs }));
    const durable = records(0, 10);
    await log.append(durable, clock.nowMs()).durable;
    assert.equal(log.syncedOffset, 10);

    // The disk fills up 700 bytes into the next commit's write: a short write, then ENOSPC.
    ffs.fillDiskAfter(700, ".log");
    const refused = log.append(records(10, 3), clock.nowMs());
    assert.equal(refused.baseOffset, 10);
    await assert.rejects(refused.durable, (err: Error & { code?: string }) => {
      assert.equal(err.name, "StorageError");
      assert.equal(err.code, "storage_failed");
      assert.match(err.message, /ENOSPC/);
      return true;
    });
    assert.equal(log.syncedOffset, 10, "nothing of the failed commit became durable");
    assert.equal(log.failed?.code, "storage_failed");
    const fdatasyncsAfterFailure = ffs.count("fdatasync", ".log");
    // Later appends are refused too, whatever the disk does now: the log stopped.
    ffs.clear();
    await assert.rejects(log.append(records(13, 1), clock.nowMs()).durable, { name: "StorageError", code: "storage_failed" });
    assert.equal(ffs.count("fdatasync", ".log"), fdatasyncsAfterFailure, "a stopped log issues no fdatasync");
    // Reads of what was durable go on; nothing of the failed commit is visible.
    await assertHolds(log, durable);
    assert.equal((await log.read(0, 100, 100 * MiB)).length, 10, "no record of the refused append is read");
    assert.ok(cap.warnings("partition log failed").length >= 1, "the failure is logged");
    await assert.rejects(log.close(), { name: "StorageError" }, "close reports the failure");

    // Reopened from disk (space is back): the torn 700 bytes are cut, the 10 records are whole.
    const again = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(again.recovery.truncatedBytes, 700);
    assert.deepEqual(again.recovery.corruptRecords, []);
    assert.equal(again.endOffset, 10);
    await assertHolds(again, durable);
    const next = again.append(records(10, 1), clock.nowMs());
    assert.equal(next.baseOffset, 10, "offsets continue after the refused append");
    await next.durable;
    await again.close();
  });
});

test("ENOSPC creating a new segment refuses the append that needed it; earlier segments stay whole", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const ffs = new FaultFs();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger, { fs: ffs, segmentBytesMax: 4096 }));
    const durable = records(0, 3);
    await log.append(durable, clock.nowMs()).durable;
    ffs.inject({ op: "openSync", code: "ENOSPC", pathEndsWith: ".log" });
    // 3 × 1 KiB more passes segmentBytesMax: this append rolls to a new segment, whose file cannot be made.
    await assert.rejects(log.append(records(3, 3), clock.nowMs()).durable, { name: "StorageError", code: "storage_failed" });
    assert.equal(log.syncedOffset, 3);
    await assert.rejects(log.close(), { name: "StorageError" });
    const again = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(again.endOffset, 3);
    await assertHolds(again, durable);
    await again.close();
  });
});

test("EIO on fdatasync stops the log: that commit and every later append are refused, the fdatasync is never retried, a reopen brings back all that was durable", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const ffs = new FaultFs();
    // A manual scheduler: the group commit flushes only when the test runs its `soon` work, so
    // "no flush was started" is a fact, not a wait.
    const scheduler = new ManualScheduler(new ManualClock());
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger, { fs: ffs, scheduler }));
    const durable = records(0, 10);
    const first = log.append(durable, clock.nowMs());
    assert.equal(ffs.count("writeSync", ".log"), 0, "nothing is written before the flush runs");
    scheduler.runSoon();
    await first.durable;

    ffs.inject({ op: "fdatasync", code: "EIO", pathEndsWith: ".log", times: 1 });
    const before = ffs.count("fdatasync", ".log");
    const failing = log.append(records(10, 3), clock.nowMs());
    scheduler.runSoon();
    await assert.rejects(failing.durable, (err: Error & { code?: string }) => {
      assert.equal(err.name, "StorageError");
      assert.equal(err.code, "storage_failed");
      assert.match(err.message, /fdatasync failed.*EIO/);
      return true;
    });
    assert.equal(ffs.count("fdatasync", ".log"), before + 1);
    assert.equal(log.syncedOffset, 10, "the failed commit never became visible");

    // The fault is gone, but the log does not retry: the page cache may have dropped the pages.
    const later = log.append(records(13, 2), clock.nowMs());
    scheduler.runSoon();
    await assert.rejects(later.durable, { name: "StorageError", code: "storage_failed" });
    assert.equal(ffs.count("fdatasync", ".log"), before + 1, "no fdatasync after the failed one");
    assert.equal(ffs.count("writeSync", ".log"), 2, "no write after the failed commit");
    await assertHolds(log, durable);
    assert.equal((await log.read(0, 100, 100 * MiB)).length, 10);
    await assert.rejects(log.close(), { name: "StorageError" });

    // Reopening from disk is the way back. The failed commit's records were never acknowledged:
    // they may be there (the write reached the page cache) or not; everything durable is.
    const again = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.ok(again.endOffset === 10 || again.endOffset === 13, `endOffset ${again.endOffset}`);
    await assertHolds(again, durable);
    await again.close();
  });
});

// ---- the ack log and the cursor file, driven by a ManualScheduler ----------------------------

const FLUSH_MS = 100;
const SYNC_MS = 1000;

function manualAckOptions(scheduler: ManualScheduler, ffs: FaultFs, logger = captureLogger().logger): AckLogOptions {
  return { clock: scheduler.clock, logger, scheduler, fs: ffs, ackFlushIntervalMs: FLUSH_MS, ackSyncIntervalMs: SYNC_MS, powerLoss: false };
}

/** The (offset, count) ranges of the kind-1 entries in an acks.log file's bytes. */
function ackRangesIn(file: string): [number, number][] {
  const buf = fs.readFileSync(file);
  const out: [number, number][] = [];
  for (let pos = 0; pos < buf.length; ) {
    const payloadBytes = buf.readUInt32LE(pos + 8);
    for (let e = pos + 12; e < pos + 12 + payloadBytes; e += 16) {
      if (buf[e] === 1) out.push([buf.readUInt32LE(e + 8), buf.readUInt32LE(e + 4)]);
    }
    pos += 12 + payloadBytes;
  }
  return out;
}

test("an ack flush driven without waiting: nothing on disk, the flush interval writes the block, the sync interval fdatasyncs it", async () => {
  await withTempDir(async (dir) => {
    const scheduler = new ManualScheduler(new ManualClock());
    const ffs = new FaultFs();
    const log = await openAckLog(dir, manualAckOptions(scheduler, ffs));
    const file = path.join(dir, ACK_LOG_FILE);
    const syncsAtOpen = ffs.count("fdatasync", ACK_LOG_FILE);
    for (const o of [0, 1, 2, 3, 7]) log.ack(o);

    scheduler.advance(FLUSH_MS - 1);
    await log.drained();
    assert.equal(fs.statSync(file).size, 0, "before the flush interval nothing is on disk");

    scheduler.advance(1);
    await log.drained();
    assert.deepEqual(ackRangesIn(file), [[0, 4], [7, 1]], "at the flush interval the acks are in the file");
    assert.equal(log.stats.blocksWritten, 1);
    assert.equal(ffs.count("fdatasync", ACK_LOG_FILE), syncsAtOpen, "written, not yet synced");
    assert.equal(log.stats.syncs, 0);

    scheduler.advance(SYNC_MS - FLUSH_MS);
    await log.drained();
    assert.equal(ffs.count("fdatasync", ACK_LOG_FILE), syncsAtOpen + 1, "at the sync interval: one fdatasync");
    assert.equal(log.stats.syncs, 1);
    assert.equal(log.stats.blocksWritten, 1, "later flush ticks with nothing buffered write nothing");

    // A quiet interval costs no fdatasync.
    scheduler.advance(SYNC_MS);
    await log.drained();
    assert.equal(ffs.count("fdatasync", ACK_LOG_FILE), syncsAtOpen + 1);
    await log.close();
    assert.equal(scheduler.pending, 0, "close cancels both timers");
  });
});

test("EIO on the ack log's fdatasync is never retried: the next sync writes a fresh snapshot, and every ack survives", async () => {
  await withTempDir(async (dir) => {
    const scheduler = new ManualScheduler(new ManualClock());
    const ffs = new FaultFs();
    const cap = captureLogger();
    const log = await openAckLog(dir, manualAckOptions(scheduler, ffs, cap.logger));
    for (let o = 0; o < 5; o++) log.ack(o);
    ffs.inject({ op: "fdatasync", code: "EIO", pathEndsWith: ACK_LOG_FILE, times: 1 });
    scheduler.advance(SYNC_MS);
    await log.drained();
    assert.equal(log.stats.syncs, 0);
    assert.equal(cap.warnings("syncing acks failed").length, 1, "the failure is logged");
    const failedAt = ffs.events.findIndex((e) => e.op === "fdatasync" && e.code === "EIO");
    assert.ok(failedAt >= 0);

    log.ack(9);
    scheduler.advance(SYNC_MS);
    await log.drained();
    // After the failure: a snapshot (a new file, its own fsync) first, then the log is truncated;
    // no fdatasync of the old pages comes before the snapshot.
    const after = ffs.events.slice(failedAt + 1).filter((e) => e.path.includes("acks."));
    const firstSnapshot = after.findIndex((e) => e.op === "writeFileAtomic" && e.path.endsWith(ACK_SNAPSHOT_FILE));
    assert.ok(firstSnapshot >= 0, "a snapshot is written");
    assert.ok(!after.slice(0, firstSnapshot).some((e) => e.op === "fdatasync"), "no fdatasync retried before the snapshot");
    assert.equal(after[firstSnapshot + 1]?.op, "ftruncate", "then the log is truncated");
    assert.equal(log.stats.compactions, 1);
    await log.close();

    const reopened = await openAckLog(dir, manualAckOptions(new ManualScheduler(), new FaultFs()));
    assert.equal(reopened.recovery.snapshotLoaded, true);
    assert.equal(reopened.floor, 5);
    assert.ok(reopened.isAcked(9) && !reopened.isAcked(8));
    await reopened.close();
  });
});

test("copy cursors on the ack schedule without waiting; a failed cursor fdatasync is logged, not thrown, and the next flush writes them again", async () => {
  await withTempDir(async (dir) => {
    const scheduler = new ManualScheduler(new ManualClock());
    const ffs = new FaultFs();
    const cap = captureLogger();
    const file = path.join(dir, "children.cursors");
    const opts = { ackFlushIntervalMs: FLUSH_MS, ackSyncIntervalMs: SYNC_MS, powerLoss: false, logger: cap.logger, scheduler, fs: ffs };
    const c = CursorFile.open(file, opts);
    c.advance("child", 10);
    assert.equal(ffs.count("writeSync", "children.cursors"), 0);
    scheduler.advance(FLUSH_MS);
    assert.equal(ffs.count("writeSync", "children.cursors"), 1, "the flush interval writes the cursors");
    const peek = CursorFile.open(file, { ...opts, fs: undefined, scheduler: new ManualScheduler() });
    assert.equal(peek.get("child"), 10, "what a kill now would leave");
    await peek.close();

    ffs.inject({ op: "fdatasync", code: "EIO", pathEndsWith: "children.cursors", times: 1 });
    scheduler.advance(SYNC_MS - FLUSH_MS);
    // The rejected sync is handled by the timer (an unhandled rejection would fail this test).
    const deadline = Date.now() + 5000;
    while (cap.warnings("syncing copy cursors failed").length === 0 && Date.now() < deadline) await new Promise((r) => setImmediate(r));
    assert.equal(cap.warnings("syncing copy cursors failed").length, 1);
    const writes = ffs.count("writeSync", "children.cursors");
    scheduler.advance(FLUSH_MS);
    assert.equal(ffs.count("writeSync", "children.cursors"), writes + 1, "the state is written again, into the other slot");
    await c.close();
    assert.equal(scheduler.pending, 0, "close cancels both timers");
    const reopened = CursorFile.open(file, { ...opts, fs: undefined, scheduler: new ManualScheduler() });
    assert.equal(reopened.get("child"), 10);
    await reopened.close();
  });
});

test("a segment roll that failed on EMFILE stopped the log until a restart: reopen() after the fault takes appends in place, keeps every synced record", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const ffs = new FaultFs();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger, { fs: ffs, segmentAgeMaxMs: 1000 }));
    const durable = records(0, 5);
    await log.append(durable, clock.nowMs()).durable;
    clock.advance(2000);
    ffs.inject({ op: "openSync", code: "EMFILE", pathEndsWith: ".log" });
    ffs.inject({ op: "open", code: "EMFILE", pathEndsWith: ".log" });
    await assert.rejects(log.maybeRoll(), /EMFILE/);
    assert.ok(log.failed !== null, "the roll's failure stopped the log");
    await assert.rejects(log.reopen(), /EMFILE/, "while descriptors are out, the reopen fails and the log stays stopped");
    assert.ok(log.failed !== null);
    await assertHolds(log, durable);
    ffs.clear();
    await log.reopen();
    assert.equal(log.failed, null);
    assert.equal(log.endOffset, 5);
    const next = log.append(records(5, 2), clock.nowMs());
    assert.equal(next.baseOffset, 5);
    await next.durable;
    await assertHolds(log, [...durable, ...records(5, 2)]);
    await log.close();
    const again = await openPartitionLog(dir, logOptions(clock, cap.logger));
    await assertHolds(again, [...durable, ...records(5, 2)]);
    assert.equal(again.endOffset, 7);
    await again.close();
  });
});

test("a failed fdatasync left its records in the file: reopen() cuts them (never durable, never served) and offsets go on from the last synced record", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const ffs = new FaultFs();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger, { fs: ffs }));
    const durable = records(0, 4);
    await log.append(durable, clock.nowMs()).durable;
    const sizeSynced = fs.statSync(`${dir}/00000000000000000000.log`).size;
    ffs.inject({ op: "fdatasync", code: "EIO", pathEndsWith: ".log", times: 1 });
    await assert.rejects(log.append(records(4, 3), clock.nowMs()).durable, /EIO/);
    assert.ok(fs.statSync(`${dir}/00000000000000000000.log`).size > sizeSynced, "the failed commit's bytes reached the file");
    await log.reopen();
    assert.equal(fs.statSync(`${dir}/00000000000000000000.log`).size, sizeSynced, "cut back to the synced bytes");
    assert.equal(log.endOffset, 4);
    assert.equal((await log.read(0, 100, 100 * MiB)).length, 4);
    const next = log.append(records(100, 1), clock.nowMs());
    assert.equal(next.baseOffset, 4);
    await next.durable;
    await log.close();
  });
});

test("each partition held its descriptors for life: an idle partition log lets them go, and the next read and append open them again", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    await log.append(records(0, 3), clock.nowMs()).durable;
    assert.ok(log.openFds >= 1);
    assert.equal(log.closeIdleFiles(1000), 0, "not idle yet");
    clock.advance(1000);
    assert.ok(log.closeIdleFiles(1000) >= 1);
    assert.equal(log.openFds, 0, "an idle log holds no descriptor");
    assert.equal((await log.read(0, 10, MiB)).length, 3, "a read opens the segment again");
    clock.advance(1000);
    log.closeIdleFiles(1000);
    assert.equal(log.openFds, 0);
    const next = log.append(records(3, 1), clock.nowMs());
    assert.equal(next.baseOffset, 3);
    await next.durable;
    await log.close();
    const again = await openPartitionLog(dir, logOptions(clock, cap.logger));
    await assertHolds(again, records(0, 4));
    await again.close();
  });
});

test("each ack log held its descriptor for life: an idle ack log lets it go, and the next flush opens it again; acks survive a reopen", async () => {
  await withTempDir(async (dir) => {
    const scheduler = new ManualScheduler(new ManualClock());
    const ffs = new FaultFs();
    const log = await openAckLog(dir, manualAckOptions(scheduler, ffs));
    log.ack(0);
    scheduler.advance(SYNC_MS);
    await log.drained();
    assert.equal(log.openFds, 1);
    log.closeIdleFile(10 * SYNC_MS);
    await log.drained();
    assert.equal(log.openFds, 1, "not idle long enough");
    scheduler.advance(10 * SYNC_MS);
    await log.drained();
    log.closeIdleFile(10 * SYNC_MS);
    await log.drained();
    assert.equal(log.openFds, 0, "an idle ack log holds no descriptor");
    log.ack(1);
    scheduler.advance(SYNC_MS);
    await log.drained();
    assert.equal(log.openFds, 1, "the flush opened it again");
    await log.close();
    const again = await openAckLog(dir, manualAckOptions(new ManualScheduler(), new FaultFs()));
    assert.ok(again.isAcked(0) && again.isAcked(1));
    await again.close();
  });
});
