// Delivery tags continue across a partition closed and opened again (moved away and back), so an
// earlier lease's handle never matches a new lease; and what is kept for that is dropped with the
// topic (the map is bounded by the topics this node knows). Real logs in a temp directory.

import { test } from "node:test";
import assert from "node:assert/strict";
import { ManualScheduler } from "../platform/manual.js";
import { systemScheduler } from "../platform/scheduler.js";
import { captureLogger, withTempDir } from "../../test/support/storage.js";
import { NO_FAULTS } from "./faults.js";
import { PartitionOpener } from "./partition-opener.js";
import { Topic, type TopicMeta } from "./topic.js";

const meta = (incarnation: number): TopicMeta => ({
  name: "t",
  incarnation,
  partitions: 2,
  visibility_timeout_ms: 30_000,
  retention_ms: 3600_000,
  replication_factor: 1,
  acks: "leader", max_deliveries: null, dead_letter_topic: null,
  owner: null,
  owner_id: null,
  children: [],
  parent: null,
  created_at: 0,
});

test("tags continue across a close and reopen of one incarnation, start afresh for a new one, and are forgotten with the topic", async () => {
  await withTempDir(async (dir) => {
    const s = new ManualScheduler();
    const opener = new PartitionOpener(
      {
        clock: s.clock,
        // Storage's group commit and flushes run on the real scheduler: this test is about tags.
        scheduler: systemScheduler,
        logger: captureLogger().logger,
        faults: NO_FAULTS,
        segmentBytesMax: 1024 * 1024,
        segmentAgeMaxMs: 3600_000,
        ackFlushIntervalMs: 100,
        consumerOffsetCommitIntervalMs: 1000,
        powerLoss: false,
      },
      () => async () => undefined,
    );
    const t = new Topic(meta(7), dir);
    await opener.open(t, 0, 1);
    const p = t.partitions[0]!;
    await p.log.append([{ key: null, payload: Buffer.from("m") }], s.clock.nowMs()).durable;
    const [first] = p.take(1, s.clock.monoMs(), 30_000);
    assert.equal(first!.tag, 1);
    await opener.close(t, 0);
    assert.equal(t.partitions[0], undefined);
    assert.equal(opener.rememberedTopics, 1);

    await opener.open(t, 0, 2); // back at a newer epoch
    const again = t.partitions[0]!;
    assert.equal(again.lastTag, 1, "tags continue from the last one issued");
    const [second] = again.take(1, s.clock.monoMs(), 30_000);
    assert.equal(second!.offset, first!.offset);
    assert.equal(second!.tag, 2, "the new lease never reuses the old handle's tag");
    assert.equal(again.ack(first!.offset, first!.tag, s.clock.monoMs()), "gone", "the earlier lease's tag does not settle the new one");
    await opener.closeAll(t);

    // Another incarnation of the name (deleted and created again) starts at 0; the old one's tags go.
    const recreated = new Topic(meta(8), `${dir}/inc8`);
    await opener.open(recreated, 0, 1);
    assert.equal(recreated.partitions[0]!.lastTag, 0);
    await opener.closeAll(recreated);
    assert.equal(opener.rememberedTopics, 1, "one entry per topic name, the newest incarnation's");
    opener.forget(t); // the old incarnation is no longer the one remembered: a no-op
    assert.equal(opener.rememberedTopics, 1);
    opener.forget(recreated);
    assert.equal(opener.rememberedTopics, 0, "a dropped topic leaves nothing behind");
  });
});
