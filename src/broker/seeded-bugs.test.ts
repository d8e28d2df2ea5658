// The seeded bugs' storage wrappers lie exactly where they should, over real storage files, and
// with no bug on the faults are the production seam itself. (That the checker catches each bug is
// `narad verify calibrate`: test/verify-calibrate.test.ts.)

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { openAckLog } from "../storage/ack-log.js";
import { CursorFile } from "../storage/cursor-file.js";
import { openPartitionLog } from "../storage/partition-log.js";
import { captureLogger, logOptions, TestClock, withTempDir } from "../../test/support/storage.js";
import { NO_FAULTS } from "./faults.js";
import { Partition } from "./partition.js";
import { parseSeededBugs, seededFaults } from "./seeded-bugs.js";

const NEVER_MS = 100_000_000;

test("no bugs: the faults are NO_FAULTS; an unknown name is refused", () => {
  assert.equal(seededFaults([]), NO_FAULTS);
  assert.deepEqual(parseSeededBugs(" early-lapse , nack-drops"), ["early-lapse", "nack-drops"]);
  assert.deepEqual(parseSeededBugs(undefined), []);
  assert.match(String(parseSeededBugs("early-lapse,nope")), /unknown test bug "nope"/);
});

test("acks-not-persisted: an ack settles in memory and never reaches the ack log", async () => {
  await withTempDir(async (dir) => {
    const logger = captureLogger().logger;
    const opts = { clock: new TestClock(), logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false };
    const inner = await openAckLog(join(dir, "acks"), opts);
    const acks = seededFaults(["acks-not-persisted"]).openedAcks(inner);
    acks.ack(0);
    acks.ack(2);
    assert.ok(acks.isAcked(0) && acks.isAcked(2), "settled as far as the broker can tell");
    assert.ok(!inner.isAcked(0) && !inner.isAcked(2), "the ack log never heard of them");
    await acks.close();
    const reopened = await openAckLog(join(dir, "acks"), opts);
    assert.ok(!reopened.isAcked(0) && !reopened.isAcked(2), "a restart brings them back");
    await reopened.close();
  });
});

test("copy-cursors-not-persisted: advanced cursors reach the cursor file only when one is set at once or it closes", async () => {
  await withTempDir(async (dir) => {
    const logger = captureLogger().logger;
    const path = join(dir, "children.cursors");
    const open = () => CursorFile.open(path, { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger });
    const inner = open();
    const cursors = seededFaults(["copy-cursors-not-persisted"]).openedCursors(inner);
    cursors.advance("a", 5);
    cursors.setStored("a", [7]);
    assert.equal(cursors.get("a"), 5);
    assert.deepEqual(cursors.stored("a"), [7]);
    assert.equal(inner.get("a"), undefined, "the file's flush would find nothing to write");
    cursors.advance("a", 4);
    assert.equal(cursors.get("a"), 5, "cursors only move forward");
    await cursors.setNow("b", 1); // an attach: everything goes to the file with it
    assert.equal(inner.get("a"), 5);
    assert.deepEqual(inner.stored("a"), [7]);
    cursors.advance("a", 9);
    assert.equal(inner.get("a"), 5);
    await cursors.close(); // a graceful stop writes the rest
    const reopened = open();
    assert.equal(reopened.get("a"), 9);
    assert.equal(reopened.get("b"), 1);
    await reopened.close();
  });
});

test("the hooks: early-lapse quarters the lease, nack-drops acks, redeliver-acked nacks one first-delivery ack in five, replay-skip drops the second record", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    const acks = await openAckLog(join(dir, "acks"), { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false });
    try {
      await log.append(Array.from({ length: 12 }, () => ({ key: null, payload: Buffer.from("m") })), clock.nowMs()).durable;
      const p = new Partition(0, log, acks);
      const leases = p.take(12, clock.monoMs(), 30_000); // offsets 0..11, first deliveries
      const tagOf = (offset: number) => leases.find((l) => l.offset === offset)!.tag;
      const f = seededFaults(["early-lapse", "nack-drops", "redeliver-acked", "replay-skip", "child-skip-on-failure", "delay-early-after-restart", "store-on-429"]);
      assert.equal(f.leaseMs(30_000), 7_500);
      assert.equal(f.leaseMs(2), 1, "at least 1 ms");
      assert.equal(f.settleAction("nack", p, 3, tagOf(3)), "ack");
      assert.equal(f.settleAction("ack", p, 10, tagOf(10)), "nack", "a first delivery at a multiple of 5");
      assert.equal(f.settleAction("ack", p, 11, tagOf(11)), "ack");
      assert.equal(f.settleAction("extend", p, 10, tagOf(10)), "extend");
      assert.equal(p.nack(5, tagOf(5), clock.monoMs()), "ok");
      const [second] = p.take(1, clock.monoMs(), 30_000);
      assert.equal(second!.offset, 5);
      assert.equal(second!.deliveryCount, 2);
      assert.equal(f.settleAction("ack", p, 5, second!.tag), "ack", "only first deliveries come back");
      assert.equal(f.settleTag(p, 5, tagOf(5)), tagOf(5), "accept-replaced-handle is off");
      assert.equal(seededFaults(["accept-replaced-handle"]).settleTag(p, 5, tagOf(5)), second!.tag, "an older handle gets the live lease's tag");
      const recs = await log.read(0, 4, 1 << 20);
      assert.deepEqual(f.replayPage(recs).map((r) => r.offset), [0, 2, 3]);
      assert.deepEqual(f.replayPage(recs.slice(0, 2)).map((r) => r.offset), [0, 1], "pages of two or fewer are whole");
      assert.equal(f.copyFailed(), "skip");
      assert.equal(f.preBootCommitMarginMs(1000), -1e12);
      assert.equal(f.storesWhenOverloaded(), true);
      assert.equal(NO_FAULTS.copyFailed(), "retry");
      assert.equal(NO_FAULTS.preBootCommitMarginMs(1000), 1000);
      assert.equal(NO_FAULTS.storesWhenOverloaded(), false);
      assert.equal(NO_FAULTS.settleAction("nack", p, 3, tagOf(3)), "nack");
    } finally {
      await log.close();
      await acks.close();
    }
  });
});

test("delivery-counts-not-persisted: counts are kept in memory and never reach the ack log", async () => {
  await withTempDir(async (dir) => {
    const logger = captureLogger().logger;
    const opts = { clock: new TestClock(), logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false };
    const inner = await openAckLog(join(dir, "acks"), opts);
    const acks = seededFaults(["delivery-counts-not-persisted"]).openedAcks(inner);
    acks.recordDeliveries(3, 2);
    acks.recordDeliveries(4, 1, true);
    assert.equal(acks.deliveries(3), 2);
    assert.ok(acks.deadLetterAsked(4));
    assert.equal(inner.deliveries(3), 0, "the ack log never heard of them");
    acks.ack(3);
    assert.equal(acks.deliveries(3), 0);
    await acks.close();
    const reopened = await openAckLog(join(dir, "acks"), opts);
    assert.equal(reopened.deliveries(4), 0, "a restart counts from 0 again");
    assert.ok(reopened.isAcked(3), "acks still reach the ack log");
    await reopened.close();
  });
});

test("dead-letter-settle-before-copy is a hook of the faults, off in production", () => {
  assert.equal(NO_FAULTS.deadLetterSettlesFirst(), false);
  assert.equal(seededFaults(["dead-letter-settle-before-copy"]).deadLetterSettlesFirst(), true);
  assert.equal(seededFaults(["early-lapse"]).deadLetterSettlesFirst(), false);
});
