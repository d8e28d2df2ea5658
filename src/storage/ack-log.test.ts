// Ack log on real files. A "kill" is simulated by copying the partition directory while the log
// is open: the copy holds exactly what the OS had (page cache included), as after a SIGKILL.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { ACK_LOG_FILE, ACK_SNAPSHOT_FILE, openAckLog, type FileAckLog } from "./ack-log.js";
import type { AckLogOptions } from "./types.js";
import { captureLogger, seededBytes, TestClock, withTempDir } from "../../test/support/storage.js";

/** Timers that never fire during a test; steps are run by hand. */
const NEVER_MS = 100_000_000;

function ackOptions(overrides: Partial<AckLogOptions> = {}): AckLogOptions {
  return {
    clock: new TestClock(),
    logger: captureLogger().logger,
    ackFlushIntervalMs: NEVER_MS,
    ackSyncIntervalMs: NEVER_MS,
    powerLoss: false,
    ...overrides,
  };
}

/** Opens a copy of `dir` as it is on disk now (what a SIGKILL would leave). */
async function openKilledCopy(dir: string, opts: AckLogOptions = ackOptions()): Promise<FileAckLog> {
  const copy = `${dir}-killed-${Math.random().toString(16).slice(2)}`;
  await fsp.cp(dir, copy, { recursive: true });
  try {
    const log = await openAckLog(copy, opts);
    await log.close();
    return log;
  } finally {
    await fsp.rm(copy, { recursive: true, force: true });
  }
}

function ackedAmong(log: FileAckLog, upTo: number): number[] {
  const out: number[] = [];
  for (let o = 0; o < upTo; o++) if (log.isAcked(o)) out.push(o);
  return out;
}

test("acks survive close and reopen, in order and out of order, with the floor", async () => {
  await withTempDir(async (dir) => {
    let log = await openAckLog(dir, ackOptions());
    for (const o of [0, 1, 2, 7, 5, 9, 3]) log.ack(o);
    assert.equal(log.floor, 4);
    assert.equal(log.ackedAboveFloor, 3);
    log.ack(5); // idempotent
    assert.equal(log.ackedAboveFloor, 3);
    assert.deepEqual(ackedAmong(log, 12), [0, 1, 2, 3, 5, 7, 9]);
    await log.close();
    assert.throws(() => log.ack(10), { code: "log_closed" });
    log = await openAckLog(dir, ackOptions());
    assert.equal(log.floor, 4);
    assert.deepEqual(ackedAmong(log, 12), [0, 1, 2, 3, 5, 7, 9]);
    log.ack(4);
    assert.equal(log.floor, 6);
    log.ack(6);
    assert.equal(log.floor, 8);
    assert.equal(log.ackedAboveFloor, 1);
    await log.close();
    log = await openAckLog(dir, ackOptions());
    assert.equal(log.floor, 8);
    assert.deepEqual(ackedAmong(log, 12), [0, 1, 2, 3, 4, 5, 6, 7, 9]);
    await log.close();
  });
});

test("raiseFloor settles everything below and survives reopen", async () => {
  await withTempDir(async (dir) => {
    let log = await openAckLog(dir, ackOptions());
    log.ack(150);
    log.ack(40);
    log.raiseFloor(100);
    assert.equal(log.floor, 100);
    assert.ok(log.isAcked(0) && log.isAcked(99) && !log.isAcked(100) && log.isAcked(150));
    assert.equal(log.ackedAboveFloor, 1);
    log.raiseFloor(50); // never lowers
    assert.equal(log.floor, 100);
    await log.close();
    log = await openAckLog(dir, ackOptions());
    assert.equal(log.floor, 100);
    assert.ok(log.isAcked(150) && !log.isAcked(149));
    await log.close();
  });
});

test("normal mode: the flush step reaches the OS (a kill keeps it); nothing before it does", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions());
    const file = path.join(dir, ACK_LOG_FILE);
    log.ack(0);
    log.ack(2);
    assert.equal(fs.statSync(file).size, 0, "ack() itself writes nothing");
    let killed = await openKilledCopy(dir);
    assert.deepEqual(ackedAmong(killed, 5), [], "a kill before the flush step forgets the acks");
    await log.runFlushStep();
    assert.ok(fs.statSync(file).size > 0, "the flush step writes to the OS");
    assert.equal(log.stats.syncs, 0);
    killed = await openKilledCopy(dir);
    assert.deepEqual(ackedAmong(killed, 5), [0, 2], "a kill after the flush step keeps them");
    await log.runSyncStep();
    assert.equal(log.stats.syncs, 1);
    await log.close();
  });
});

test("power-loss mode: acks reach the file only in the sync step", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions({ powerLoss: true }));
    const file = path.join(dir, ACK_LOG_FILE);
    for (let o = 0; o < 10; o++) log.ack(o);
    await log.runFlushStep();
    assert.equal(fs.statSync(file).size, 0, "the flush step keeps the block in process memory");
    let killed = await openKilledCopy(dir);
    assert.equal(killed.floor, 0, "a kill now forgets what a power loss would");
    await log.runSyncStep();
    assert.ok(fs.statSync(file).size > 0);
    assert.equal(log.stats.syncs, 1);
    killed = await openKilledCopy(dir);
    assert.equal(killed.floor, 10, "after the sync step the acks are on disk");
    // flushAndSync (SIGTERM) writes and syncs everything at once, buffered acks included.
    log.ack(10);
    await log.flushAndSync();
    killed = await openKilledCopy(dir);
    assert.equal(killed.floor, 11);
    await log.close();
  });
});

test("the timers run the flush and sync steps on their own", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions({ ackFlushIntervalMs: 5, ackSyncIntervalMs: 10 }));
    log.ack(0);
    const deadline = Date.now() + 5000;
    while (log.stats.syncs === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    assert.ok(log.stats.blocksWritten >= 1 && log.stats.syncs >= 1, "timers flushed and synced within 5 s");
    const killed = await openKilledCopy(dir);
    assert.equal(killed.floor, 1);
    await log.close();
  });
});

test("compaction keeps every ack, also across a kill", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions({ ackLogBytesMax: 512 }));
    // A seeded shuffle of 0..4999, acked in bursts with flush and sync steps between them.
    const order = Array.from({ length: 5000 }, (_, i) => i);
    const rnd = seededBytes(42, order.length * 4);
    for (let i = order.length - 1; i > 0; i--) {
      const j = rnd.readUInt32LE(i * 4) % (i + 1);
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    const acked = new Set<number>();
    for (let i = 0; i < 4000; i++) {
      log.ack(order[i]!);
      acked.add(order[i]!);
      if (i % 97 === 0) await log.runFlushStep();
      if (i % 389 === 0) await log.runSyncStep();
    }
    await log.runFlushStep();
    await log.runSyncStep();
    assert.ok(log.stats.compactions >= 2, `compactions: ${log.stats.compactions}`);
    assert.ok(fs.existsSync(path.join(dir, ACK_SNAPSHOT_FILE)));
    assert.ok(fs.statSync(path.join(dir, ACK_LOG_FILE)).size <= 512 + 4096);
    const check = (l: FileAckLog): void => {
      for (let o = 0; o < 5000; o++) assert.equal(l.isAcked(o), acked.has(o), `offset ${o}`);
    };
    check(await openKilledCopy(dir));
    await log.close();
    const reopened = await openAckLog(dir, ackOptions());
    check(reopened);
    await reopened.close();
  });
});

/** Three blocks in acks.log (acks 0-9, 10-19, 20-29), copied out as a kill would leave them. */
async function threeBlocks(dir: string): Promise<{ file: string; blockBytes: number }> {
  const live = path.join(dir, "live");
  const log = await openAckLog(live, ackOptions());
  for (let b = 0; b < 3; b++) {
    // Out of order inside a block, so each block holds several entries.
    for (let o = b * 10 + 9; o >= b * 10; o--) log.ack(o);
    await log.runFlushStep();
  }
  const killed = path.join(dir, "killed");
  await fsp.cp(live, killed, { recursive: true });
  await log.close();
  const file = path.join(killed, ACK_LOG_FILE);
  const size = fs.statSync(file).size;
  assert.equal(size % 3, 0);
  return { file, blockBytes: size / 3 };
}

test("a torn ack log tail loses only the torn block", async () => {
  await withTempDir(async (dir) => {
    const { file, blockBytes } = await threeBlocks(dir);
    await fsp.truncate(file, 2 * blockBytes + Math.floor(blockBytes / 2));
    const log = await openAckLog(path.dirname(file), ackOptions());
    assert.equal(log.floor, 20);
    assert.equal(log.ackedAboveFloor, 0);
    assert.equal(log.recovery.blocks, 2);
    assert.equal(log.recovery.truncatedBytes, Math.floor(blockBytes / 2));
    await log.close();
    // Recovery folded what it kept into the snapshot; the damaged tail is gone for good.
    const again = await openAckLog(path.dirname(file), ackOptions());
    assert.equal(again.floor, 20);
    assert.equal(again.recovery.truncatedBytes, 0);
    await again.close();
  });
});

test("flipped bits in an ack log block: that block is skipped, the others are kept", async () => {
  await withTempDir(async (dir) => {
    const { file, blockBytes } = await threeBlocks(dir);
    const data = await fsp.readFile(file);
    data[blockBytes + 20] = data[blockBytes + 20]! ^ 0x01;
    await fsp.writeFile(file, Buffer.concat([data, seededBytes(3, 77)]));
    const log = await openAckLog(path.dirname(file), ackOptions());
    assert.deepEqual(ackedAmong(log, 35), [...Array.from({ length: 10 }, (_, i) => i), ...Array.from({ length: 10 }, (_, i) => 20 + i)]);
    assert.equal(log.recovery.corruptBlocks.length, 1);
    assert.equal(log.recovery.corruptBlocks[0]!.position, blockBytes);
    assert.equal(log.recovery.corruptBlocks[0]!.reason, "block checksum mismatch");
    assert.equal(log.recovery.truncatedBytes, 77);
    await log.close();
  });
});

test("garbage ack files never crash open", async () => {
  await withTempDir(async (dir) => {
    await fsp.writeFile(path.join(dir, ACK_LOG_FILE), seededBytes(11, 10_000));
    await fsp.writeFile(path.join(dir, ACK_SNAPSHOT_FILE), seededBytes(12, 500));
    const cap = captureLogger();
    const log = await openAckLog(dir, ackOptions({ logger: cap.logger }));
    assert.equal(log.floor, 0);
    assert.equal(log.recovery.snapshotProblem, "bad snapshot magic");
    assert.equal(log.recovery.truncatedBytes, 10_000);
    assert.ok(cap.warnings("snapshot").length > 0);
    log.ack(0);
    await log.close();
    const again = await openAckLog(dir, ackOptions());
    assert.equal(again.floor, 1);
    assert.equal(again.recovery.snapshotProblem, null);
    await again.close();
  });
});

test("ackRange takes a leader's whole ack state (a follower rejoining): it survives a reopen, and settledRanges lists what is above the floor", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions());
    log.ackRange(0, 5); // from the floor: raises it
    log.ackRange(10, 20);
    log.ackRange(15, 30); // overlapping: merged
    log.ack(40);
    log.ackRange(50, 50); // empty: nothing
    assert.equal(log.floor, 5);
    assert.deepEqual(log.settledRanges(10), { floor: 5, ranges: [[10, 30], [40, 41]] });
    assert.deepEqual(log.settledRanges(1).ranges, [[10, 30]], "at most rangesMax ranges");
    await log.close();
    const again = await openAckLog(dir, ackOptions());
    try {
      assert.equal(again.floor, 5);
      assert.ok(again.isAcked(12) && again.isAcked(29) && !again.isAcked(30) && again.isAcked(40) && !again.isAcked(7));
      assert.deepEqual(again.settledRanges(10), { floor: 5, ranges: [[10, 30], [40, 41]] });
    } finally {
      await again.close();
    }
  });
});
