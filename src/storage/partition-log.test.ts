// Partition log behaviour on real files with real fsync: round trips, group commit, rolls,
// retention. Damage and recovery are in recovery.test.ts.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import fsp from "node:fs/promises";
import { openPartitionLog, type FilePartitionLog } from "./partition-log.js";
import type { AppendInput, StoredRecord } from "./types.js";
import { encodeRecord, HEADER_BYTES, KEY_BYTES_MAX } from "./record.js";
import { LIMITS } from "../protocol/wire.js";
import { inFlight } from "../platform/in-flight.js";
import { captureLogger, logOptions, seededBytes, segmentFile, TestClock, withTempDir } from "../../test/support/storage.js";

const MiB = 1024 * 1024;

function assertRecord(got: StoredRecord | undefined, offset: number, producedAtMs: number, input: AppendInput): void {
  assert.ok(got !== undefined, `record ${offset} missing`);
  assert.equal(got.offset, offset);
  assert.equal(got.producedAtMs, producedAtMs);
  if (input.key === null) assert.equal(got.key, null, `record ${offset} key`);
  else {
    assert.ok(got.key !== null, `record ${offset} key`);
    assert.ok(got.key.equals(input.key), `record ${offset} key bytes`);
  }
  assert.equal(got.payload.length, input.payload.length, `record ${offset} payload length`);
  assert.ok(got.payload.equals(input.payload), `record ${offset} payload bytes`);
}

function payloadOf(n: number, bytes = 100): AppendInput {
  return { key: null, payload: seededBytes(n + 1, bytes) };
}

test("round trip: binary payloads and keys come back byte for byte, also after reopen", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const all256 = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const inputs: AppendInput[] = [
      { key: null, payload: all256 },
      { key: Buffer.from("key-1"), payload: Buffer.alloc(0) },
      { key: Buffer.alloc(0), payload: Buffer.from([0]) },
      { key: all256, payload: seededBytes(7, MiB) },
      { key: null, payload: Buffer.alloc(0) },
      { key: Buffer.from([0xff, 0x00, 0xfe]), payload: Buffer.from(all256).reverse() },
    ];
    const t1 = clock.nowMs();
    let log: FilePartitionLog = await openPartitionLog(dir, logOptions(clock, cap.logger));
    const a = log.append(inputs.slice(0, 2), t1);
    clock.advance(5);
    const t2 = clock.nowMs();
    const b = log.append(inputs.slice(2), t2);
    assert.equal(a.baseOffset, 0);
    assert.equal(b.baseOffset, 2);
    await Promise.all([a.durable, b.durable]);
    const times = [t1, t1, t2, t2, t2, t2];

    const check = async (l: FilePartitionLog): Promise<void> => {
      const got = await l.read(0, 100, 10 * MiB);
      assert.equal(got.length, inputs.length);
      inputs.forEach((input, i) => assertRecord(got[i], i, times[i]!, input));
      // maxBytes below the first record still returns that record, and stops before the 1 MiB one.
      const one = await l.read(3, 10, 10);
      assert.equal(one.length, 1);
      assertRecord(one[0], 3, t2, inputs[3]!);
      const small = await l.read(0, 10, 1000);
      assert.deepEqual(
        small.map((r) => r.offset),
        [0, 1, 2],
      );
      // maxRecords is respected and reads start anywhere.
      const mid = await l.read(4, 1, 10 * MiB);
      assert.equal(mid.length, 1);
      assertRecord(mid[0], 4, t2, inputs[4]!);
      assert.deepEqual(await l.read(6, 10, MiB), []);
    };
    await check(log);
    await log.close();

    log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.deepEqual(log.recovery, { segments: 1, records: 6, truncatedBytes: 0, corruptRecords: [], rebuiltIndexes: [] });
    assert.equal(log.endOffset, 6);
    assert.equal(log.syncedOffset, 6);
    assert.equal(log.earliestOffset, 0);
    await check(log);
    const c = log.append([{ key: null, payload: Buffer.from("after reopen") }], clock.nowMs());
    assert.equal(c.baseOffset, 6);
    await c.durable;
    assert.equal((await log.read(6, 1, MiB))[0]!.payload.toString(), "after reopen");
    await log.close();
  });
});

test("group commit: appends of one tick share one fdatasync; durable and reads wait for it", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    const results = [];
    for (let i = 0; i < 500; i++) results.push(log.append([payloadOf(i, 64)], clock.nowMs()));
    assert.equal(log.endOffset, 500);
    assert.equal(log.syncedOffset, 0, "nothing is synced synchronously");
    assert.equal(log.pendingSyncBytes, 500 * (HEADER_BYTES + 64));
    assert.deepEqual(await log.read(0, 1000, MiB), [], "reads never return unsynced records");

    let resolvedEarly = false;
    await Promise.all(
      results.map((r) =>
        r.durable.then(() => {
          if (log.syncedOffset <= r.baseOffset) resolvedEarly = true;
        }),
      ),
    );
    assert.equal(resolvedEarly, false, "durable resolved before syncedOffset passed the record");
    assert.equal(log.stats.syncs, 1, "500 appends in one tick are one group commit");
    assert.equal(log.stats.fdatasyncs, 1);
    assert.equal(log.syncedOffset, 500);
    assert.equal(log.pendingSyncBytes, 0);
    assert.equal((await log.read(0, 1000, MiB)).length, 500);

    // Appends made while that fdatasync is in flight wait for the next one, again just one.
    const first = log.append([payloadOf(1000)], clock.nowMs());
    const during: { baseOffset: number; durable: Promise<void> }[] = [];
    await new Promise<void>((resolve) =>
      setImmediate(() => {
        // The flusher's setImmediate ran before this one: its fdatasync is in flight now, and
        // its completion cannot run before this callback returns.
        assert.equal(log.syncedOffset, 500);
        for (let i = 0; i < 300; i++) during.push(log.append([payloadOf(i)], clock.nowMs()));
        resolve();
      }),
    );
    await first.durable;
    assert.equal(log.syncedOffset, 501, "the first commit covers only what was queued before it");
    assert.deepEqual(
      (await log.read(500, 1000, MiB)).map((r) => r.offset),
      [500],
      "reads stop at syncedOffset",
    );
    await Promise.all(during.map((d) => d.durable));
    assert.equal(log.stats.syncs, 3);
    assert.equal(log.syncedOffset, 801);
    await log.close();
  });
});

test("appends after close reject; close flushes what was queued", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    const queued = log.append([payloadOf(1)], clock.nowMs());
    const closing = log.close();
    const late = log.append([payloadOf(2)], clock.nowMs());
    await assert.rejects(late.durable, { name: "StorageError", code: "log_closed" });
    await closing;
    await queued.durable;
    const again = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.equal(again.endOffset, 1);
    await again.close();
  });
});

test("an oversized payload is refused before anything is assigned", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.throws(
      () => log.append([payloadOf(1), { key: null, payload: Buffer.alloc(MiB + 1) }], clock.nowMs()),
      RangeError,
    );
    assert.equal(log.endOffset, 0);
    await log.close();
  });
});

test("keys: the wire's limit (4 096 bytes) is storage's; one byte more is refused before anything is assigned", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    let log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.equal(KEY_BYTES_MAX, LIMITS.keyBytesMax);
    const longest: AppendInput = { key: seededBytes(3, LIMITS.keyBytesMax), payload: seededBytes(4, 10) };
    assert.throws(
      () => log.append([payloadOf(1), { key: Buffer.alloc(LIMITS.keyBytesMax + 1), payload: Buffer.alloc(1) }], clock.nowMs()),
      (err: Error) => err instanceof RangeError && err.message.includes(`${LIMITS.keyBytesMax}-byte limit`),
    );
    assert.equal(log.endOffset, 0);
    await log.append([longest], clock.nowMs()).durable;
    await log.close();
    log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    const [got] = await log.read(0, 10, MiB);
    assertRecord(got, 0, clock.nowMs(), longest);
    await log.close();
  });
});

test("a stored record with a key over the wire's limit but within format v1's 64 KiB is still recovered and served (old data is never turned into damage)", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    // Written by hand, as a build that let such a key through would have: two records, the first
    // with a 5 000-byte key, the second ordinary (so the first is not a tail either way).
    const big: AppendInput = { key: seededBytes(5, 5000), payload: seededBytes(6, 100) };
    const small = payloadOf(7);
    const buf = Buffer.alloc(2 * HEADER_BYTES + 5000 + 200);
    let pos = encodeRecord(buf, 0, 0, clock.nowMs(), big.key, big.payload);
    pos = encodeRecord(buf, pos, 1, clock.nowMs(), small.key, small.payload);
    await fsp.writeFile(segmentFile(dir, 0, "log"), buf.subarray(0, pos));
    const log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.deepEqual(log.recovery, { segments: 1, records: 2, truncatedBytes: 0, corruptRecords: [], rebuiltIndexes: [] });
    const got = await log.read(0, 10, MiB);
    assert.equal(got.length, 2);
    assertRecord(got[0], 0, clock.nowMs(), big);
    assertRecord(got[1], 1, clock.nowMs(), small);
    assert.equal(log.stats.corruptReads, 0);
    await log.close();
  });
});

test("segment roll by size: files named by base offset, one append never straddles, reads cross segments", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const recBytes = HEADER_BYTES + 1000;
    const opts = logOptions(clock, captureLogger().logger, { segmentBytesMax: 3 * recBytes + 10 });
    let log = await openPartitionLog(dir, opts);
    const inputs: AppendInput[] = [];
    const pending = [];
    for (let i = 0; i < 10; i++) {
      inputs.push(payloadOf(i, 1000));
      pending.push(log.append([inputs[i]!], clock.nowMs()).durable);
    }
    // A batch bigger than a segment goes whole into a fresh segment.
    const batch = Array.from({ length: 5 }, (_, i) => payloadOf(100 + i, 1000));
    inputs.push(...batch);
    const b = log.append(batch, clock.nowMs());
    assert.equal(b.baseOffset, 10);
    await Promise.all([...pending, b.durable]);
    assert.deepEqual(log.segmentBaseOffsets, [0, 3, 6, 9, 10]);
    for (const base of [0, 3, 6, 9, 10]) assert.ok(fs.existsSync(segmentFile(dir, base, "log")), `segment ${base}`);
    assert.equal(fs.statSync(segmentFile(dir, 10, "log")).size, 5 * recBytes);

    const check = async (l: FilePartitionLog): Promise<void> => {
      const all = await l.read(0, 100, 100 * MiB);
      assert.equal(all.length, 15);
      all.forEach((r, i) => assertRecord(r, i, clock.nowMs(), inputs[i]!));
      assert.deepEqual(
        (await l.read(2, 5, 100 * MiB)).map((r) => r.offset),
        [2, 3, 4, 5, 6],
      );
    };
    await check(log);
    await log.close();
    // Sealed segments got their index files; reopening trusts them.
    for (const base of [0, 3, 6, 9]) assert.ok(fs.existsSync(segmentFile(dir, base, "index")), `index ${base}`);
    log = await openPartitionLog(dir, opts);
    assert.equal(log.recovery.segments, 5);
    assert.deepEqual(log.recovery.rebuiltIndexes, []);
    await check(log);
    await log.close();
  });
});

test("segment roll by age follows the injected clock", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentAgeMaxMs: 1000 }));
    await log.maybeRoll();
    assert.deepEqual(log.segmentBaseOffsets, [0], "an empty segment is never rolled");
    await log.append([payloadOf(0), payloadOf(1)], clock.nowMs()).durable;
    clock.advance(999);
    await log.maybeRoll();
    assert.deepEqual(log.segmentBaseOffsets, [0]);
    clock.advance(1);
    await log.maybeRoll();
    assert.deepEqual(log.segmentBaseOffsets, [0, 2]);
    assert.equal(fs.statSync(segmentFile(dir, 2, "log")).size, 0, "the new segment file exists at once");
    await log.maybeRoll();
    assert.deepEqual(log.segmentBaseOffsets, [0, 2]);
    const next = log.append([payloadOf(2)], clock.nowMs());
    assert.equal(next.baseOffset, 2);
    await next.durable;
    assert.deepEqual(
      (await log.read(0, 10, MiB)).map((r) => r.offset),
      [0, 1, 2],
    );
    await log.close();
  });
});

test("retention removes only closed segments whose newest record is older than the retention", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const retentionMs = 10_000;
    const recBytes = HEADER_BYTES + 100;
    const opts = logOptions(clock, captureLogger().logger, { segmentBytesMax: 2 * recBytes });
    let log = await openPartitionLog(dir, opts);
    const t0 = clock.nowMs();
    // Segment 0: two records at t0. Segment 2: one at t0, one at t0 + 5000. Segment 4: t0 + 8000.
    await log.append([payloadOf(0)], t0).durable;
    await log.append([payloadOf(1)], t0).durable;
    await log.append([payloadOf(2)], t0).durable;
    await log.append([payloadOf(3)], t0 + 5000).durable;
    await log.append([payloadOf(4)], t0 + 8000).durable;
    assert.deepEqual(log.segmentBaseOffsets, [0, 2, 4]);

    clock.wallMs = t0 + retentionMs; // t0 is exactly at the edge: nothing is older yet
    assert.equal(await log.enforceRetention(retentionMs), 0);
    assert.deepEqual(log.segmentBaseOffsets, [0, 2, 4]);

    clock.wallMs = t0 + retentionMs + 1;
    assert.equal(await log.enforceRetention(retentionMs), 2);
    assert.deepEqual(log.segmentBaseOffsets, [2, 4]);
    assert.equal(fs.existsSync(segmentFile(dir, 0, "log")), false);
    assert.equal(fs.existsSync(segmentFile(dir, 0, "index")), false);
    assert.equal(log.earliestOffset, 2);
    // Reads below earliestOffset start there.
    assert.deepEqual(
      (await log.read(0, 10, MiB)).map((r) => r.offset),
      [2, 3, 4],
    );

    // Segment 2 holds a record (t0 + 5000) younger than the retention: it stays.
    clock.wallMs = t0 + 5000 + retentionMs;
    assert.equal(await log.enforceRetention(retentionMs), 2);
    clock.wallMs = t0 + 5000 + retentionMs + 1;
    assert.equal(await log.enforceRetention(retentionMs), 4);

    // Everything old: the active segment is rolled so it can go; offsets never go back.
    clock.wallMs = t0 + 8000 + retentionMs + 1;
    assert.equal(await log.enforceRetention(retentionMs), 5);
    assert.deepEqual(log.segmentBaseOffsets, [5]);
    assert.equal(log.endOffset, 5);
    assert.deepEqual(await log.read(0, 10, MiB), []);
    const names = (await fsp.readdir(dir)).sort();
    assert.deepEqual(names, ["00000000000000000005.log"]);
    await log.close();

    log = await openPartitionLog(dir, opts);
    assert.equal(log.earliestOffset, 5);
    assert.equal(log.endOffset, 5);
    const next = log.append([payloadOf(5)], clock.nowMs());
    assert.equal(next.baseOffset, 5);
    await next.durable;
    assert.deepEqual(
      (await log.read(0, 10, MiB)).map((r) => r.offset),
      [5],
    );
    await log.close();
  });
});

test("retention never removes records still waiting for their fdatasync", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    const old = clock.nowMs() - 100_000;
    const a = log.append([payloadOf(0)], old);
    // Not yet synced: the roll happens, but the sealed segment stays until its commit completes.
    const earliest = await log.enforceRetention(1000);
    await a.durable;
    assert.ok(earliest === 0 || earliest === 1);
    assert.equal(await log.enforceRetention(1000), 1);
    await log.close();
  });
});

test("sync metrics: onSync hears of every group commit", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const seen: { records: number; appends: number }[] = [];
    const log = await openPartitionLog(
      dir,
      logOptions(clock, captureLogger().logger, { onSync: (i) => seen.push({ records: i.records, appends: i.appends }) }),
    );
    const a = log.append([payloadOf(0), payloadOf(1)], clock.nowMs());
    const b = log.append([payloadOf(2)], clock.nowMs());
    await Promise.all([a.durable, b.durable]);
    assert.deepEqual(seen, [{ records: 3, appends: 2 }]);
    await log.close();
  });
});

test("a write failure rejects the covered appends and stops the log until reopen", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const recBytes = HEADER_BYTES + 100;
    const opts = logOptions(clock, cap.logger, { segmentBytesMax: 2 * recBytes });
    const log = await openPartitionLog(dir, opts);
    await log.append([payloadOf(0), payloadOf(1)], clock.nowMs()).durable;
    // A stray file where the next segment must be created makes the roll's file creation fail
    // for real (EEXIST), inside the flusher.
    await fsp.writeFile(segmentFile(dir, 2, "log"), Buffer.alloc(0));
    const covered = log.append([payloadOf(2)], clock.nowMs());
    await assert.rejects(covered.durable, { name: "StorageError", code: "storage_failed" });
    assert.ok(log.failed !== null);
    assert.ok(cap.lines.some((l) => l["level"] === 50 && String(l["msg"]).includes("partition log failed")));
    await assert.rejects(log.append([payloadOf(3)], clock.nowMs()).durable, { code: "storage_failed" });
    assert.equal(log.syncedOffset, 2);
    assert.deepEqual(
      (await log.read(0, 10, MiB)).map((r) => r.offset),
      [0, 1],
      "synced records are still served",
    );
    await assert.rejects(log.close(), { code: "storage_failed" });
    const again = await openPartitionLog(dir, opts);
    assert.equal(again.endOffset, 2);
    assert.equal((await again.append([payloadOf(2)], clock.nowMs())).baseOffset, 2);
    await again.close();
  });
});

test("the in-memory index of 1 000 000 records costs a few MiB", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    const batch: AppendInput[] = Array.from({ length: 10_000 }, () => ({ key: null, payload: Buffer.alloc(0) }));
    const pending = [];
    for (let i = 0; i < 100; i++) pending.push(log.append(batch, clock.nowMs()).durable);
    await Promise.all(pending);
    assert.equal(log.endOffset, 1_000_000);
    assert.ok(log.indexMemoryBytes <= 8 * MiB, `index uses ${log.indexMemoryBytes} bytes`);
    const last = await log.read(999_999, 10, MiB);
    assert.deepEqual(
      last.map((r) => r.offset),
      [999_999],
    );
    await log.close();
    const again = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.equal(again.endOffset, 1_000_000);
    assert.ok(again.indexMemoryBytes <= 8 * MiB);
    await again.close();
  });
});

test("inline fdatasync: a lone commit syncs on the loop's thread, a commit with other requests in flight on the threadpool, and both are durable", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    let log: FilePartitionLog = await openPartitionLog(dir, logOptions(clock, cap.logger));
    // Nothing else is served in this process: one append a commit, again and again.
    for (let i = 0; i < 4; i++) await log.append([payloadOf(i)], clock.nowMs()).durable;
    assert.ok(log.stats.inlineFdatasyncs >= 3, `lone commits sync inline (${log.stats.inlineFdatasyncs} of ${log.stats.fdatasyncs})`);
    // Another request is being served: the loop must stay free, so the threadpool syncs.
    const inlineBefore = log.stats.inlineFdatasyncs;
    const fdatasyncsBefore = log.stats.fdatasyncs;
    inFlight.requestStarted();
    inFlight.requestStarted();
    try {
      for (let i = 4; i < 7; i++) await log.append([payloadOf(i)], clock.nowMs()).durable;
    } finally {
      inFlight.requestEnded();
      inFlight.requestEnded();
    }
    assert.equal(log.stats.fdatasyncs - fdatasyncsBefore, 3);
    assert.equal(log.stats.inlineFdatasyncs, inlineBefore, "none inline while another request is in flight");
    assert.equal(log.syncedOffset, 7);
    await log.close();
    // Off: never inline.
    log = await openPartitionLog(dir, { ...logOptions(clock, cap.logger), inlineFdatasync: false });
    for (let i = 7; i < 10; i++) await log.append([payloadOf(i)], clock.nowMs()).durable;
    assert.equal(log.stats.inlineFdatasyncs, 0);
    const got = await log.read(0, 100, 10 * MiB);
    assert.equal(got.length, 10);
    for (let i = 0; i < 10; i++) assertRecord(got[i], i, got[i]!.producedAtMs, payloadOf(i));
    await log.close();
  });
});
