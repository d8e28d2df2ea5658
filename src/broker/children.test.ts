// The copier of one parent partition on a clock the test moves: real partition log, ack log and
// cursor file in a temp directory, a sink that keeps what it was handed.

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { openAckLog } from "../storage/ack-log.js";
import { CursorFile } from "../storage/cursor-file.js";
import { openPartitionLog } from "../storage/partition-log.js";
import { captureLogger, logOptions, TestClock, withTempDir } from "../storage/test-support.js";
import { PartitionCopier, type ChildLink } from "./children.js";
import { Partition } from "./partition.js";
import { TestBugs } from "./test-bugs.js";

const NEVER_MS = 100_000_000;

test("a delay copy waits its delay on the monotonic clock: a wall clock stepped forward does not make it early", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    const acks = await openAckLog(join(dir, "acks"), { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false });
    const cursors = CursorFile.open(join(dir, "cursors"), { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger });
    cursors.advance("d", 0);
    const links: ChildLink[] = [{ topic: "d", kind: "delay", delay_ms: 5_000 }];
    const copied: number[] = [];
    const copier = new PartitionCopier("t", new Partition(0, log, acks), cursors, () => links, async (_l, rs) => void copied.push(...rs.map((r) => r.offset)), clock, logger, new TestBugs([]));
    try {
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
    } finally {
      await copier.close();
      await log.close();
      await acks.close();
    }
  });
});
