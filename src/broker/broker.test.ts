// The broker on a real temp data directory, with its timers on a ManualScheduler: a lease lapse,
// a long poll's end and the lease sweep are driven by advancing the scheduler's clock, with no
// real-time wait (a visibility timeout of 30 s passes in microseconds). Produces still go through
// the real log and its real fdatasync.
//
// Also: the remote links a broker knows open and release their sink handles as links come and
// go (the sink over the SDK closes a URL's pool with its last handle: src/remote-children.test.ts).

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { ManualScheduler } from "../platform/manual.js";
import type { StoredRecord } from "../storage/types.js";
import { captureLogger, withTempDir } from "../../test/support/storage.js";
import { Broker, LEASE_SWEEP_INTERVAL_MS, type BrokerOptions } from "./broker.js";
import type { ChildLink, RemoteChild, RemoteSink } from "./children.js";

const VISIBILITY_TIMEOUT_MS = 30_000;

function options(dataDir: string, s: ManualScheduler, extra: Partial<BrokerOptions> = {}): BrokerOptions {
  return {
    dataDir,
    clock: s.clock,
    scheduler: s,
    logger: captureLogger().logger,
    nodeId: "n1",
    bootId: "boot-1",
    bootSeq: 1,
    nodeNum: 0,
    secret: randomBytes(32),
    segmentBytesMax: 1024 * 1024,
    segmentAgeMaxMs: 3600_000,
    ackFlushIntervalMs: 100,
    consumerOffsetCommitIntervalMs: 1000,
    powerLoss: false,
    pendingSyncBytesMax: 64 * 1024 * 1024,
    longPollsMax: 16,
    consumeBytesMax: 1024 * 1024,
    housekeepingIntervalMs: 60_000,
    defaultPartitions: 1,
    defaultVisibilityTimeoutMs: VISIBILITY_TIMEOUT_MS,
    defaultRetentionMs: 24 * 3600_000,
    ...extra,
  };
}

/**
 * Awaits real I/O (a produce's fdatasync) while running the scheduler's `soon` work, should the
 * storage queue its group commit there; fails after a deadline rather than hanging.
 */
async function io<T>(s: ManualScheduler, p: Promise<T>): Promise<T> {
  let done = false;
  const out = p.finally(() => (done = true));
  const deadline = Date.now() + 10_000;
  while (!done) {
    if (Date.now() > deadline) throw new Error("real I/O did not finish within 10 s");
    s.runSoon();
    await new Promise((r) => setImmediate(r));
  }
  return out;
}

/** Waits (on the condition, with a deadline) until the scheduler holds n timers: a long poll registered its end. */
async function untilTimers(s: ManualScheduler, n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (s.pending < n) {
    if (Date.now() > deadline) throw new Error(`the scheduler holds ${s.pending} timers, not ${n}, after 10 s`);
    await new Promise((r) => setImmediate(r));
  }
}

/** The broker's own repeating timers (the lease sweep and housekeeping), beside each partition's storage timers. */
const BROKER_TIMERS = 2;

test("a lease lapses when the scheduler passes the visibility timeout: the message comes back with delivery_count 2, the old handle answers 410", async () => {
  await withTempDir(async (dir) => {
    const s = new ManualScheduler();
    const b = await Broker.open(options(dir, s));
    try {
      await b.createTopic({ name: "t" }, null);
      await io(s, b.produce("t", [{ key: null, payload: Buffer.from("m0") }]));
      const [first] = await b.consume("t", 1, 0);
      assert.ok(first !== undefined);
      assert.equal(first.deliveryCount, 1);
      assert.equal(first.record.payload.toString(), "m0");

      // 1 ms before its deadline the lease holds (a consume returns lapsed leases itself).
      s.advance(VISIBILITY_TIMEOUT_MS - 1);
      assert.deepEqual(await b.consume("t", 1, 0), [], "still leased 1 ms before its deadline");
      // A long poll waits for the message.
      const before = s.pending;
      assert.ok(before >= BROKER_TIMERS);
      const waiting = b.consume("t", 1, 60_000);
      await untilTimers(s, before + 1);

      // The deadline passes: the next lease sweep returns it and serves the waiting long poll.
      s.advance(LEASE_SWEEP_INTERVAL_MS);
      const [again] = await waiting;
      assert.ok(again !== undefined, "the lapsed lease is delivered again to the waiting long poll");
      assert.equal(again.offset, first.offset);
      assert.equal(again.deliveryCount, 2);
      assert.notEqual(again.receiptHandle, first.receiptHandle);
      assert.deepEqual(b.settle("t", [first.receiptHandle], "ack"), [410], "the lapsed delivery's handle is gone");
      assert.deepEqual(b.settle("t", [again.receiptHandle], "ack"), [204]);
      assert.deepEqual(await b.consume("t", 1, 0), [], "acked: it does not come back");
      s.advance(2 * VISIBILITY_TIMEOUT_MS);
      assert.deepEqual(await b.consume("t", 1, 0), [], "nor after its lease would have lapsed");
    } finally {
      await b.close();
    }
    assert.equal(s.pending, 0, "close cancels the sweep and housekeeping timers");
  });
});

test("a long poll ends empty when the scheduler passes its wait, and counts against limits.long_polls until then", async () => {
  await withTempDir(async (dir) => {
    const s = new ManualScheduler();
    const b = await Broker.open(options(dir, s, { longPollsMax: 1 }));
    try {
      await b.createTopic({ name: "t" }, null);
      let answered: unknown;
      const before = s.pending;
      const waiting = b.consume("t", 1, 5_000).then((d) => (answered = d));
      await untilTimers(s, before + 1);
      await assert.rejects(b.consume("t", 1, 5_000), { code: "too_many_waiters" }, "the second long poll is over the limit");
      s.advance(4_999);
      await new Promise((r) => setImmediate(r));
      assert.equal(answered, undefined, "1 ms before its wait ends");
      s.advance(1);
      assert.deepEqual(await waiting, []);
      const again = b.consume("t", 1, 1_000);
      await untilTimers(s, before + 1);
      s.advance(1_000);
      assert.deepEqual(await again, [], "the slot is free again");
    } finally {
      await b.close();
    }
  });
});

/** A sink that keeps which remote links hold a handle (pushes are refused: nothing is produced here). */
class RecordingSink implements RemoteSink {
  readonly open_: string[] = [];
  readonly events: string[] = [];

  open(link: ChildLink): RemoteChild {
    const name = `${link.topic}@${link.url}`;
    this.open_.push(name);
    this.events.push(`open ${name}`);
    return {
      push: (_records: StoredRecord[]) => Promise.reject(new Error("not in this test")),
      release: async () => {
        this.open_.splice(this.open_.indexOf(name), 1);
        this.events.push(`release ${name}`);
      },
    };
  }

  async close(): Promise<void> {
    this.events.push("close");
  }
}

test("remote links hold a sink handle from attach (or start) to detach (or delete), and the sink closes with the broker", async () => {
  await withTempDir(async (dir) => {
    const s = new ManualScheduler();
    const sink = new RecordingSink();
    const remote: ChildLink = { topic: "far", kind: "remote", url: "http://10.0.0.9:7070", credentials: { user: "u", password: "p" } };
    let b = await Broker.open(options(dir, s, { remote: sink }));
    await b.createTopic({ name: "a" }, null);
    await b.createTopic({ name: "b" }, null);
    await b.attachChild("a", remote);
    await b.attachChild("b", remote);
    assert.deepEqual(sink.open_, ["far@http://10.0.0.9:7070", "far@http://10.0.0.9:7070"]);
    await b.detachChild("a", "far");
    assert.deepEqual(sink.open_, ["far@http://10.0.0.9:7070"], "a detach releases its handle");
    await b.close();
    assert.equal(sink.events.at(-1), "close");

    // A restart opens handles for the links in topic.json; deleting the topic releases them.
    const sink2 = new RecordingSink();
    b = await Broker.open(options(dir, s, { remote: sink2 }));
    try {
      assert.deepEqual(sink2.open_, ["far@http://10.0.0.9:7070"]);
      await b.deleteTopic("b");
      assert.deepEqual(sink2.open_, [], "a deleted topic's links are released");
    } finally {
      await b.close();
    }
  });
});
