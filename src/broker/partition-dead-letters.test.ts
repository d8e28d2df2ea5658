// A partition's dead-letter rule over real storage files (./partition.ts, ./dead-letters.ts): the
// last allowed delivery's nack or lapse holds the message out of delivery as exhausted; a change
// of the rule re-sorts what it concerns; dead_letter=true is kept in the ack log; counts recovered
// after a reopen find the exhausted messages again; a finished move settles, a failed one gives
// the message back to be moved again.

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { openAckLog } from "../storage/ack-log.js";
import { openPartitionLog } from "../storage/partition-log.js";
import { captureLogger, logOptions, TestClock, withTempDir } from "../../test/support/storage.js";
import { Partition } from "./partition.js";

const NEVER_MS = 100_000_000;
const VT = 30_000;

test("the dead-letter rule: exhausted after the last delivery, re-sorted by a change, recovered after a reopen", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const logger = captureLogger().logger;
    const ackOpts = { clock, logger, ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false };
    const log = await openPartitionLog(join(dir, "log"), logOptions(clock, logger));
    let acks = await openAckLog(join(dir, "acks"), ackOpts);
    await log.append(Array.from({ length: 3 }, () => ({ key: null, payload: Buffer.from("m") })), clock.nowMs()).durable;
    let p = new Partition(0, log, acks);
    p.setDeadLetterRule(2, true);
    const now = () => clock.monoMs();
    // Offset 0: two deliveries, both nacked: exhausted, not delivered again.
    for (let i = 1; i <= 2; i++) {
      const [l] = p.take(1, now(), VT);
      assert.deepEqual([l!.offset, l!.deliveryCount], [0, i]);
      assert.equal(p.nack(0, l!.tag, now()), "ok");
    }
    assert.equal(p.exhaustedWaiting, 1);
    assert.equal(acks.deliveries(0), 2, "the count is in the ack log");
    // A higher limit gives it back; a lower one takes it again.
    p.setDeadLetterRule(3, true);
    assert.equal(p.exhaustedWaiting, 0);
    p.setDeadLetterRule(2, true);
    assert.equal(p.exhaustedWaiting, 1);
    const fresh = p.take(3, now(), VT);
    assert.deepEqual(fresh.map((x) => x.offset), [1, 2], "offset 0 is held out of delivery");
    // Offset 1: a lapse of its first lease, then dead_letter=true on the second.
    clock.advance(VT + 1);
    assert.equal(p.expire(now()), 2);
    const again = p.take(2, now(), VT).sort((x, y) => x.offset - y.offset);
    assert.deepEqual(again.map((x) => [x.offset, x.deliveryCount]), [[1, 2], [2, 2]]);
    assert.equal(p.deadLetter(1, again[0]!.tag, now()), "ok");
    assert.ok(acks.deadLetterAsked(1));
    assert.equal(p.exhaustedWaiting, 2);
    // Off: exhausted messages go back to delivery (the ask is still in the ack log).
    p.setDeadLetterRule(Number.POSITIVE_INFINITY, false);
    assert.equal(p.exhaustedWaiting, 0);
    assert.equal(p.deadLetter(2, again[1]!.tag, now()), "gone", "no dead-letter topic: nothing to move to");
    p.setDeadLetterRule(2, true);
    assert.equal(p.exhaustedWaiting, 2, "offset 0 (out of deliveries) and 1 (asked)");
    // A failed move gives them back; a finished one settles.
    const batch = p.takeExhausted(10);
    assert.deepEqual(batch.map((b) => b.offset).sort(), [0, 1]);
    assert.equal(p.exhaustedWaiting, 0);
    for (const b of batch) p.finishMove(b.offset, false);
    assert.equal(p.exhaustedWaiting, 2);
    for (const b of p.takeExhausted(10)) p.finishMove(b.offset, b.offset === 0);
    assert.ok(acks.isAcked(0) && !acks.isAcked(1));
    assert.equal(acks.deliveries(0), 0, "settled: its count is dropped");
    assert.equal(p.exhaustedWaiting, 1, "offset 1 waits for its next try");
    // A graceful close counts the lease of offset 2; a reopen finds what is exhausted from the counts.
    p.recordLiveDeliveries();
    await acks.close();
    acks = await openAckLog(join(dir, "acks"), ackOpts);
    p = new Partition(0, log, acks);
    p.setDeadLetterRule(2, true);
    assert.equal(p.exhaustedWaiting, 2, "the message not yet moved, and offset 2 after its second delivery");
    assert.deepEqual(p.take(3, now(), VT), [], "nothing is delivered again from here");
    // A higher limit lets offset 2 be delivered again (its third); offset 1 was asked to move.
    p.setDeadLetterRule(5, true);
    assert.deepEqual(p.take(3, now(), VT).map((x) => [x.offset, x.deliveryCount]), [[2, 3]]);
    assert.equal(p.exhaustedWaiting, 1);
    await acks.close();
    await log.close();
  });
});
