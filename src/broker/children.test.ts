// The copier of one parent partition on a clock the test moves: real partition log, ack log and
// cursor file in a temp directory, a sink that keeps what it was handed (and fails as told).

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { openAckLog } from "../storage/ack-log.js";
import { CursorFile } from "../storage/cursor-file.js";
import { openPartitionLog } from "../storage/partition-log.js";
import type { PartitionLog } from "../storage/types.js";
import { captureLogger, logOptions, TestClock, withTempDir } from "../../test/support/storage.js";
import { CopyPartlyStored, PartitionCopier, type ChildLink, type CopySink } from "./children.js";
import { Partition } from "./partition.js";
import { NO_FAULTS } from "./faults.js";
import { systemScheduler } from "../platform/scheduler.js";

const NEVER_MS = 100_000_000;

/** A copier of parent partition 0 of "t" over a real log, ack log and cursor file; closed after `fn`. */
async function withCopier(
  links: ChildLink[],
  sink: CopySink,
  fn: (c: { copier: PartitionCopier; log: PartitionLog; cursors: CursorFile; clock: TestClock }) => Promise<void>,
): Promise<void> {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    const acks = await openAckLog(join(dir, "acks"), { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false });
    const cursors = CursorFile.open(join(dir, "cursors"), { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger });
    for (const l of links) cursors.advance(l.topic, 0);
    const copier = new PartitionCopier({ topic: "t", partition: new Partition(0, log, acks), cursors: cursors, links: () => links, sink: sink, clock, scheduler: systemScheduler, logger, faults: NO_FAULTS });
    try {
      await fn({ copier, log, cursors, clock });
    } finally {
      await copier.close();
      await log.close();
      await acks.close();
    }
  });
}

test("a delay copy waits its delay on the monotonic clock: a wall clock stepped forward does not make it early", async () => {
  const copied: number[] = [];
  const sink: CopySink = async (_l, rs) => void copied.push(...rs.map((r) => r.offset));
  await withCopier([{ topic: "d", kind: "delay", delay_ms: 5_000 }], sink, async ({ copier, log, clock }) => {
    await log.append([{ key: null, payload: Buffer.from("m0") }], clock.nowMs()).durable;
    copier.kick(); // sees offset 0 committed now
    await copier.settled();
    assert.deepEqual(copied, [], "not due yet");
    // The wall clock jumps 6 s ahead (a time sync), no time passes.
    clock.wallMs += 6_000;
    copier.kick();
    await copier.settled();
    assert.deepEqual(copied, [], "a wall-clock step makes no delay copy due");
    clock.mono += 4_999;
    copier.kick();
    await copier.settled();
    assert.deepEqual(copied, [], "still 1 ms early");
    clock.advance(1);
    copier.kick();
    await copier.settled();
    assert.deepEqual(copied, [0], "due 5 s after the commit was seen");
  });
});

test("a copy stored in part is sent again without the records stored; the cursor moves only once all are", async () => {
  // What each push is handed, and how it ends: stored in part twice (the second time the rest
  // sent again at once), then a failure that says nothing, then success.
  const pushes: number[][] = [];
  const fail = [
    (rs: number[]) => new CopyPartlyStored(rs.filter((o) => o % 2 === 0), new Error("502")),
    (rs: number[]) => new CopyPartlyStored([rs[0]!], new Error("502")),
    () => new Error("no answer"),
  ];
  const sink: CopySink = async (_l, rs) => {
    pushes.push(rs.map((r) => r.offset));
    const f = fail.shift();
    if (f !== undefined) throw f(rs.map((r) => r.offset));
  };
  await withCopier([{ topic: "r", kind: "remote", url: "http://127.0.0.1:1" }], sink, async ({ copier, log, cursors, clock }) => {
    const round = async () => {
      clock.advance(60_000); // past any back-off
      copier.kick();
      await copier.settled();
    };
    await log.append([0, 1, 2, 3].map((i) => ({ key: null, payload: Buffer.from(`m${i}`) })), clock.nowMs()).durable;
    await round();
    assert.deepEqual(pushes, [[0, 1, 2, 3], [1, 3]], "the records not stored are sent again at once, once a round");
    assert.equal(cursors.get("r"), 0, "not every copy is stored yet");
    await round();
    assert.deepEqual(pushes.slice(2), [[3]], "then after the back-off, still only those");
    assert.equal(cursors.get("r"), 0);
    await round();
    assert.deepEqual(pushes.slice(3), [[3]], "a failure that says nothing keeps what is known stored");
    assert.equal(cursors.get("r"), 4, "every copy stored: the cursor moves past the batch");
    await log.append([{ key: null, payload: Buffer.from("m4") }], clock.nowMs()).durable;
    await round();
    assert.deepEqual(pushes.slice(4), [[4]]);
    assert.equal(cursors.get("r"), 5);
  });
});

test("after a graceful stop the copier still knows which records of a batch were stored, and sends only the rest", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    const acks = await openAckLog(join(dir, "acks"), { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false });
    const links: ChildLink[] = [{ topic: "r", kind: "remote", url: "http://127.0.0.1:1" }];
    const open = () => CursorFile.open(join(dir, "cursors"), { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger });
    const pushes: number[][] = [];
    try {
      const first = open();
      first.advance("r", 0);
      // Every push stores only the even offsets: the first and its immediate resend.
      const partly: CopySink = async (_l, rs) => {
        pushes.push(rs.map((r) => r.offset));
        throw new CopyPartlyStored(rs.map((r) => r.offset).filter((o) => o % 2 === 0), new Error("502"));
      };
      const before = new PartitionCopier({ topic: "t", partition: new Partition(0, log, acks), cursors: first, links: () => links, sink: partly, clock, scheduler: systemScheduler, logger, faults: NO_FAULTS });
      await log.append([0, 1, 2, 3].map((i) => ({ key: null, payload: Buffer.from(`m${i}`) })), clock.nowMs()).durable;
      before.kick();
      await before.settled();
      assert.deepEqual(pushes, [[0, 1, 2, 3], [1, 3]]);
      await before.close(); // a graceful stop: cursors and stored offsets written and synced

      const second = open();
      assert.equal(second.get("r"), 0);
      assert.deepEqual([...second.stored("r")].sort(), [0, 2]);
      const ok: CopySink = async (_l, rs) => void pushes.push(rs.map((r) => r.offset));
      const after = new PartitionCopier({ topic: "t", partition: new Partition(0, log, acks), cursors: second, links: () => links, sink: ok, clock, scheduler: systemScheduler, logger, faults: NO_FAULTS });
      after.kick();
      await after.settled();
      assert.deepEqual(pushes.slice(2), [[1, 3]], "only the records not stored before the stop");
      assert.equal(second.get("r"), 4);
      assert.deepEqual(second.stored("r"), [], "forgotten once the cursor passed them");
      await after.close();
    } finally {
      await log.close();
      await acks.close();
    }
  });
});
