// Delivery counts in the ack log (SPEC "Dead letters": counts survive restarts), on real files:
// entry kinds 3 and 4 in acks.log and snapshot version 2. Files written before counts (a version 1
// snapshot, blocks of kinds 1 and 2 only) must still read, and damage in the new parts is handled
// as damage of the old ones is: a damaged block skipped, a damaged snapshot reported.

import { test } from "node:test";
import assert from "node:assert/strict";
import fsp from "node:fs/promises";
import path from "node:path";
import { crc32c } from "@node-rs/crc32";
import { ACK_LOG_FILE, ACK_SNAPSHOT_FILE, openAckLog, type FileAckLog } from "./ack-log.js";
import type { AckLogOptions } from "./types.js";
import { captureLogger, TestClock, withTempDir } from "../../test/support/storage.js";

const NEVER_MS = 100_000_000;

function ackOptions(): AckLogOptions {
  return { clock: new TestClock(), logger: captureLogger().logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false };
}

/** Opens a copy of `dir` as the OS holds it now (what a SIGKILL leaves), and closes it again. */
async function openKilledCopy(dir: string): Promise<FileAckLog> {
  const copy = `${dir}-killed-${Math.random().toString(16).slice(2)}`;
  await fsp.cp(dir, copy, { recursive: true });
  try {
    const log = await openAckLog(copy, ackOptions());
    await log.close();
    return log;
  } finally {
    await fsp.rm(copy, { recursive: true, force: true });
  }
}

function counts(log: FileAckLog): [number, number, boolean][] {
  const out: [number, number, boolean][] = [];
  log.forEachDelivery((o, c, d) => out.push([o, c, d]));
  return out.sort((x, y) => x[0] - y[0]);
}

/** An acks.log block as builds before counts wrote it (layout: top of ack-log.ts). */
function block(entries: [kind: number, count: number, offset: number][]): Buffer {
  const b = Buffer.alloc(12 + 16 * entries.length);
  b.writeUInt32LE(0x4b43414e, 0);
  b.writeUInt32LE(16 * entries.length, 8);
  entries.forEach(([kind, count, offset], i) => {
    const at = 12 + 16 * i;
    b[at] = kind;
    b.writeUInt32LE(count, at + 4);
    b.writeUInt32LE(offset, at + 8);
  });
  b.writeUInt32LE(crc32c(b.subarray(8)), 4);
  return b;
}

/** A version 1 snapshot (floor, ranges), as builds before counts wrote it. */
function snapshotV1(floor: number, ranges: [number, number][]): Buffer {
  const b = Buffer.alloc(20 + 16 * ranges.length + 4);
  b.writeUInt32LE(0x534b414e, 0);
  b.writeUInt32LE(1, 4);
  b.writeUInt32LE(floor, 8);
  b.writeUInt32LE(ranges.length, 16);
  ranges.forEach(([s, e], i) => {
    b.writeUInt32LE(s, 20 + 16 * i);
    b.writeUInt32LE(e, 28 + 16 * i);
  });
  b.writeUInt32LE(crc32c(b.subarray(0, b.length - 4)), b.length - 4);
  return b;
}

test("delivery counts survive close and reopen; they only grow; an ack or the floor drops them", async () => {
  await withTempDir(async (dir) => {
    let log = await openAckLog(dir, ackOptions());
    log.recordDeliveries(5, 2);
    log.recordDeliveries(5, 1); // lower: ignored
    log.recordDeliveries(9, 3, true);
    log.recordDeliveries(12, 1);
    log.recordDeliveries(20, 4);
    log.ack(12);
    assert.equal(log.deliveries(12), 0);
    log.recordDeliveries(12, 7); // settled already: not kept
    assert.deepEqual(counts(log), [[5, 2, false], [9, 3, true], [20, 4, false]]);
    await log.close();
    log = await openAckLog(dir, ackOptions());
    assert.deepEqual(counts(log), [[5, 2, false], [9, 3, true], [20, 4, false]]);
    assert.equal(log.deliveries(9), 3);
    assert.ok(log.deadLetterAsked(9) && !log.deadLetterAsked(5));
    log.recordDeliveries(9, 4); // a dead-letter ask once made stays
    assert.ok(log.deadLetterAsked(9));
    log.raiseFloor(10);
    log.ackRange(18, 25);
    assert.deepEqual(counts(log), []);
    log.recordDeliveries(30, 1);
    await log.close();
    log = await openAckLog(dir, ackOptions());
    assert.deepEqual(counts(log), [[30, 1, false]]);
    assert.equal(log.floor, 10);
    assert.ok(log.isAcked(20));
    await log.close();
  });
});

test("a kill keeps the counts the last flush wrote, never more than were recorded", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions());
    log.recordDeliveries(3, 1);
    let killed = await openKilledCopy(dir);
    assert.deepEqual(counts(killed), [], "nothing flushed yet: a kill forgets it (counted low, never high)");
    await log.runFlushStep();
    log.recordDeliveries(3, 2);
    log.recordDeliveries(4, 1, true);
    killed = await openKilledCopy(dir);
    assert.deepEqual(counts(killed), [[3, 1, false]]);
    await log.runFlushStep();
    killed = await openKilledCopy(dir);
    assert.deepEqual(counts(killed), [[3, 2, false], [4, 1, true]]);
    await log.close();
  });
});

test("a snapshot without counts is written as version 1, byte for byte as before counts", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions());
    for (const o of [0, 1, 2, 7]) log.ack(o);
    await log.close();
    const reopened = await openAckLog(dir, ackOptions()); // folds the log into a fresh snapshot
    await reopened.close();
    const snap = await fsp.readFile(path.join(dir, ACK_SNAPSHOT_FILE));
    assert.deepEqual(snap, snapshotV1(3, [[7, 8]]));
  });
});

test("files written before counts read unchanged: a version 1 snapshot and blocks of kinds 1 and 2", async () => {
  await withTempDir(async (dir) => {
    await fsp.writeFile(path.join(dir, ACK_SNAPSHOT_FILE), snapshotV1(4, [[10, 12]]));
    await fsp.writeFile(path.join(dir, ACK_LOG_FILE), Buffer.concat([block([[1, 2, 4]]), block([[2, 0, 6], [1, 1, 20]])]));
    const log = await openAckLog(dir, ackOptions());
    assert.equal(log.recovery.snapshotLoaded, true);
    assert.equal(log.recovery.corruptBlocks.length, 0);
    assert.equal(log.floor, 6);
    assert.ok(log.isAcked(10) && log.isAcked(11) && log.isAcked(20) && !log.isAcked(12));
    assert.deepEqual(counts(log), []);
    await log.close();
  });
});

test("damage: a damaged count block is skipped, a damaged version 2 snapshot is reported, and the rest reads", async () => {
  await withTempDir(async (dir) => {
    const log = await openAckLog(dir, ackOptions());
    log.recordDeliveries(7, 3);
    log.ack(1);
    await log.close();
    await (await openAckLog(dir, ackOptions())).close(); // an open folds the log into a snapshot
    const snap = await fsp.readFile(path.join(dir, ACK_SNAPSHOT_FILE));
    assert.equal(snap.readUInt32LE(4), 2, "counts make a version 2 snapshot");
    // A flipped bit among the counts fails the checksum: the snapshot is reported, not trusted.
    const bad = Buffer.from(snap);
    bad[bad.length - 10]! ^= 0x01;
    await fsp.writeFile(path.join(dir, ACK_SNAPSHOT_FILE), bad);
    let reopened = await openAckLog(dir, ackOptions());
    assert.equal(reopened.recovery.snapshotProblem, "snapshot checksum mismatch");
    assert.deepEqual(counts(reopened), []);
    await reopened.close();
    // A snapshot cut short in its counts: a size that does not match.
    await fsp.writeFile(path.join(dir, ACK_SNAPSHOT_FILE), snap.subarray(0, snap.length - 8));
    await fsp.writeFile(path.join(dir, ACK_LOG_FILE), Buffer.alloc(0));
    reopened = await openAckLog(dir, ackOptions());
    assert.match(reopened.recovery.snapshotProblem ?? "", /size does not match/);
    await reopened.close();
    // A damaged block of counts between good ones is skipped; the counts after it are read.
    await fsp.rm(path.join(dir, ACK_SNAPSHOT_FILE));
    const damaged = block([[3, 9, 40]]);
    damaged[14]! ^= 0xff;
    await fsp.writeFile(path.join(dir, ACK_LOG_FILE), Buffer.concat([block([[3, 2, 30]]), damaged, block([[4, 5, 50], [1, 1, 0]])]));
    reopened = await openAckLog(dir, ackOptions());
    assert.equal(reopened.recovery.corruptBlocks.length, 1);
    assert.deepEqual(counts(reopened), [[30, 2, false], [50, 5, true]]);
    assert.ok(reopened.isAcked(0));
    await reopened.close();
  });
});

test("a snapshot of a version this build does not know is refused, not misread", async () => {
  await withTempDir(async (dir) => {
    const b = snapshotV1(2, []);
    b.writeUInt32LE(3, 4);
    b.writeUInt32LE(crc32c(b.subarray(0, b.length - 4)), b.length - 4);
    await fsp.writeFile(path.join(dir, ACK_SNAPSHOT_FILE), b);
    const log = await openAckLog(dir, ackOptions());
    assert.equal(log.recovery.snapshotProblem, "unknown snapshot version");
    await log.close();
  });
});
