// Recovery of damaged partition directories: torn tails, garbage, flipped bits, missing or wrong
// indexes, unrelated files. The rule under test: open never crashes on file content, and a record
// that is served is byte for byte a record that was appended.

import { test } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import fsp from "node:fs/promises";
import path from "node:path";
import { openPartitionLog, type FilePartitionLog } from "./partition-log.js";
import type { AppendInput } from "./types.js";
import { HEADER_BYTES } from "./record.js";
import { encodeIndex, Segment } from "./segment.js";
import { captureLogger, logOptions, seededBytes, segmentFile, TestClock, withTempDir } from "../../test/support/storage.js";

const MiB = 1024 * 1024;
const PAYLOAD_BYTES = 100;
const REC_BYTES = HEADER_BYTES + PAYLOAD_BYTES;

function inputOf(i: number): AppendInput {
  return { key: null, payload: seededBytes(i + 1, PAYLOAD_BYTES) };
}

/** Writes `count` records (one per append) and closes the log. */
async function writeRecords(dir: string, count: number, segmentBytesMax = 64 * MiB, from = 0): Promise<void> {
  const clock = new TestClock();
  const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentBytesMax }));
  assert.equal(log.endOffset, from);
  const pending = [];
  for (let i = from; i < from + count; i++) pending.push(log.append([inputOf(i)], clock.nowMs()).durable);
  await Promise.all(pending);
  await log.close();
}

/** Every record served must be exactly the one appended at its offset. Returns the offsets. */
async function readAllChecked(log: FilePartitionLog): Promise<number[]> {
  const got = await log.read(0, 1_000_000, 1024 * MiB);
  for (const r of got) {
    assert.equal(r.key, null);
    assert.ok(r.payload.equals(inputOf(r.offset).payload), `record ${r.offset} served with wrong bytes`);
  }
  const offsets = got.map((r) => r.offset);
  for (let i = 1; i < offsets.length; i++) assert.ok(offsets[i]! > offsets[i - 1]!, "offsets increase");
  return offsets;
}

const range = (a: number, b: number): number[] => Array.from({ length: b - a }, (_, i) => a + i);

test("torn tail: the cut record is gone, the rest is there, appends continue and survive reopen", async () => {
  await withTempDir(async (dir) => {
    await writeRecords(dir, 10);
    const file = segmentFile(dir, 0, "log");
    assert.equal(fs.statSync(file).size, 10 * REC_BYTES);
    const half = Math.floor(REC_BYTES / 2);
    await fsp.truncate(file, 9 * REC_BYTES + half);

    const clock = new TestClock();
    const cap = captureLogger();
    let log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(log.recovery.truncatedBytes, half);
    assert.equal(log.recovery.records, 9);
    assert.equal(log.endOffset, 9);
    assert.equal(fs.statSync(file).size, 9 * REC_BYTES, "the torn record is cut from the file");
    assert.ok(cap.warnings("torn").length > 0, "the truncation is logged");
    assert.deepEqual(await readAllChecked(log), range(0, 9));
    const next = log.append([inputOf(9)], clock.nowMs());
    assert.equal(next.baseOffset, 9);
    await next.durable;
    await log.close();

    log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(log.recovery.truncatedBytes, 0);
    assert.deepEqual(await readAllChecked(log), range(0, 10));
    await log.close();
  });
});

test("garbage after the last record is truncated, with or without an index", async () => {
  for (const dropIndex of [false, true]) {
    await withTempDir(async (dir) => {
      await writeRecords(dir, 10);
      const file = segmentFile(dir, 0, "log");
      if (dropIndex) await fsp.rm(segmentFile(dir, 0, "index"));
      await fsp.appendFile(file, seededBytes(99, 5000));
      const clock = new TestClock();
      let log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
      assert.equal(log.recovery.truncatedBytes, 5000);
      assert.equal(log.endOffset, 10);
      assert.deepEqual(await readAllChecked(log), range(0, 10));
      await log.append([inputOf(10)], clock.nowMs()).durable;
      await log.close();
      log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
      assert.deepEqual(await readAllChecked(log), range(0, 11));
      await log.close();
    });
  }
});

test("a flipped bit in the middle: the record is never served, the others are", async () => {
  for (const dropIndex of [false, true]) {
    await withTempDir(async (dir) => {
      await writeRecords(dir, 10);
      const file = segmentFile(dir, 0, "log");
      if (dropIndex) await fsp.rm(segmentFile(dir, 0, "index"));
      const fd = fs.openSync(file, "r+");
      const at = 5 * REC_BYTES + HEADER_BYTES + 40;
      const b = Buffer.alloc(1);
      fs.readSync(fd, b, 0, 1, at);
      b[0] = b[0]! ^ 0x10;
      fs.writeSync(fd, b, 0, 1, at);
      fs.closeSync(fd);

      const clock = new TestClock();
      const cap = captureLogger();
      const log = await openPartitionLog(dir, logOptions(clock, cap.logger));
      if (dropIndex) {
        // A scan from the start sees it: reported, and offsets still line up after it.
        assert.deepEqual(log.recovery.corruptRecords, [
          { segment: "00000000000000000000.log", position: 5 * REC_BYTES, reason: "checksum mismatch" },
        ]);
      }
      assert.equal(log.recovery.truncatedBytes, 0);
      assert.equal(log.endOffset, 10);
      assert.deepEqual(await readAllChecked(log), [0, 1, 2, 3, 4, 6, 7, 8, 9]);
      assert.equal(log.stats.corruptReads, 1, "read reports the skipped record");
      assert.ok(cap.warnings("damaged record").length > 0);
      // A read that starts at the damaged offset skips it too (the skipped one is not counted).
      assert.deepEqual(
        (await log.read(5, 2, MiB)).map((r) => r.offset),
        [6, 7],
      );
      await log.append([inputOf(10)], clock.nowMs()).durable;
      await log.close();
      const again = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
      assert.deepEqual(await readAllChecked(again), [0, 1, 2, 3, 4, 6, 7, 8, 9, 10]);
      await again.close();
    });
  }
});

test("a damaged length field: recovery resynchronises on the next record", async () => {
  await withTempDir(async (dir) => {
    await writeRecords(dir, 10);
    await fsp.rm(segmentFile(dir, 0, "index"));
    const fd = fs.openSync(segmentFile(dir, 0, "log"), "r+");
    const b = Buffer.alloc(4);
    b.writeUInt32LE(0xfffffff0, 0);
    fs.writeSync(fd, b, 0, 4, 3 * REC_BYTES);
    fs.closeSync(fd);
    const log = await openPartitionLog(dir, logOptions(new TestClock(), captureLogger().logger));
    assert.equal(log.recovery.corruptRecords.length, 1);
    assert.equal(log.recovery.corruptRecords[0]!.reason, "implausible record length");
    assert.equal(log.endOffset, 10);
    assert.deepEqual(await readAllChecked(log), [0, 1, 2, 4, 5, 6, 7, 8, 9]);
    await log.close();
  });
});

test("missing, truncated and mismatched index files are rebuilt and reported", async () => {
  await withTempDir(async (dir) => {
    const segmentBytesMax = 3 * REC_BYTES;
    await writeRecords(dir, 12, segmentBytesMax);
    // Segments 0, 3, 6 are sealed; 9 is active.
    for (const base of [0, 3, 6]) assert.ok(fs.existsSync(segmentFile(dir, base, "index")));
    await fsp.rm(segmentFile(dir, 0, "index"));
    await fsp.truncate(segmentFile(dir, 3, "index"), 10);
    // A well-formed index (checksum fine) whose positions do not match the segment.
    const wrong = new Segment(dir, 6);
    for (const p of [0, REC_BYTES, REC_BYTES + 50]) wrong.pushPosition(p);
    await fsp.writeFile(segmentFile(dir, 6, "index"), encodeIndex(wrong));
    assert.ok(fs.existsSync(segmentFile(dir, 9, "index")), "the active segment's index is written at close");

    const cap = captureLogger();
    const opts = logOptions(new TestClock(), cap.logger, { segmentBytesMax });
    let log = await openPartitionLog(dir, opts);
    assert.deepEqual(log.recovery.rebuiltIndexes.sort(), [
      "00000000000000000000.index",
      "00000000000000000003.index",
      "00000000000000000006.index",
    ]);
    assert.deepEqual(log.recovery.corruptRecords, []);
    assert.deepEqual(await readAllChecked(log), range(0, 12));
    assert.deepEqual(
      (await log.read(4, 4, MiB)).map((r) => r.offset),
      [4, 5, 6, 7],
    );
    await log.close();
    log = await openPartitionLog(dir, opts);
    assert.deepEqual(log.recovery.rebuiltIndexes, [], "rebuilt indexes were written back");
    assert.deepEqual(await readAllChecked(log), range(0, 12));
    await log.close();
  });
});

test("a sealed segment whose index is a stale prefix is extended, not cut short", async () => {
  await withTempDir(async (dir) => {
    // Close with 2 records in segment 0 (its index then covers 2), then add 2 more and a roll
    // without closing cleanly: simulate by writing the index of the 2-record state back.
    await writeRecords(dir, 2, 4 * REC_BYTES);
    const staleIndex = await fsp.readFile(segmentFile(dir, 0, "index"));
    await writeRecords(dir, 4, 4 * REC_BYTES, 2);
    await fsp.writeFile(segmentFile(dir, 0, "index"), staleIndex);
    const log = await openPartitionLog(dir, logOptions(new TestClock(), captureLogger().logger, { segmentBytesMax: 4 * REC_BYTES }));
    assert.deepEqual(log.recovery.rebuiltIndexes, ["00000000000000000000.index"]);
    assert.deepEqual(await readAllChecked(log), range(0, 6));
    await log.close();
  });
});

test("garbage in the partition directory never crashes open", async () => {
  await withTempDir(async (dir) => {
    await fsp.writeFile(path.join(dir, "junk"), seededBytes(1, 333));
    await fsp.writeFile(path.join(dir, "x.log"), seededBytes(2, 333));
    await fsp.writeFile(path.join(dir, "12.index"), seededBytes(3, 10));
    await fsp.writeFile(path.join(dir, "99999999999999999999.log"), "offset past 2^53");
    await fsp.mkdir(path.join(dir, "00000000000000000007.log"));
    await fsp.writeFile(segmentFile(dir, 0, "log"), Buffer.alloc(0));
    await fsp.writeFile(segmentFile(dir, 5, "index"), seededBytes(4, 100)); // .index without .log
    const clock = new TestClock();
    const cap = captureLogger();
    let log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(log.endOffset, 0);
    assert.equal(fs.existsSync(segmentFile(dir, 5, "index")), false, "an orphan index is removed");
    assert.ok(cap.warnings("not a segment").length >= 4);
    await log.append([inputOf(0)], clock.nowMs()).durable;
    await log.close();
    log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.deepEqual(await readAllChecked(log), [0]);
    await log.close();
  });
});

test("a segment of pure garbage: as the active one it is emptied, as a sealed one it is skipped", async () => {
  await withTempDir(async (dir) => {
    await fsp.writeFile(segmentFile(dir, 0, "log"), seededBytes(8, 100_000));
    let log = await openPartitionLog(dir, logOptions(new TestClock(), captureLogger().logger));
    assert.equal(log.endOffset, 0);
    assert.equal(log.recovery.truncatedBytes, 100_000);
    await log.close();
  });
  await withTempDir(async (dir) => {
    const segmentBytesMax = 3 * REC_BYTES;
    await writeRecords(dir, 9, segmentBytesMax);
    await fsp.writeFile(segmentFile(dir, 3, "log"), seededBytes(9, 3 * REC_BYTES));
    await fsp.rm(segmentFile(dir, 3, "index"));
    const log = await openPartitionLog(dir, logOptions(new TestClock(), captureLogger().logger, { segmentBytesMax }));
    assert.equal(log.endOffset, 9);
    assert.deepEqual(await readAllChecked(log), [0, 1, 2, 6, 7, 8]);
    await log.close();
  });
});

test("a zero-length last segment with a high base offset sets endOffset", async () => {
  await withTempDir(async (dir) => {
    await fsp.writeFile(segmentFile(dir, 100, "log"), Buffer.alloc(0));
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger));
    assert.equal(log.earliestOffset, 100);
    assert.equal(log.endOffset, 100);
    const a = log.append([inputOf(100)], clock.nowMs());
    assert.equal(a.baseOffset, 100);
    await a.durable;
    assert.deepEqual(await readAllChecked(log), [100]);
    await log.close();
  });
});

test("random damage (seeded) never crashes open and never serves wrong bytes", async () => {
  await withTempDir(async (root) => {
    const pristine = path.join(root, "pristine");
    const segmentBytesMax = 7 * REC_BYTES;
    await writeRecords(pristine, 30, segmentBytesMax);
    const names = (await fsp.readdir(pristine)).sort();
    for (let seed = 1; seed <= 40; seed++) {
      const dir = path.join(root, `case-${seed}`);
      await fsp.cp(pristine, dir, { recursive: true });
      const rnd = seededBytes(seed * 7919, 64);
      let r = 0;
      const next = (n: number): number => (rnd.readUInt32LE((r++ % 16) * 4) % n) >>> 0;
      for (let k = 0; k < 3; k++) {
        const file = path.join(dir, names[next(names.length)]!);
        const size = fs.statSync(file).size;
        const action = next(4);
        if (action === 0 && size > 0) await fsp.truncate(file, next(size));
        else if (action === 1) await fsp.appendFile(file, seededBytes(seed + k, 1 + next(300)));
        else if (size > 0) {
          const fd = fs.openSync(file, "r+");
          const pos = next(size);
          fs.writeSync(fd, Buffer.from([next(256)]), 0, 1, pos);
          fs.closeSync(fd);
        }
      }
      const clock = new TestClock();
      try {
        const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentBytesMax }));
        await readAllChecked(log);
        const a = log.append([inputOf(log.endOffset)], clock.nowMs());
        await a.durable;
        await log.close();
        const again = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentBytesMax }));
        assert.ok((await readAllChecked(again)).includes(a.baseOffset), "the new record survives reopen");
        await again.close();
      } catch (err) {
        assert.fail(`seed ${seed}: ${(err as Error).stack}`);
      }
    }
  });
});

test("a segment renamed to a lower base offset made recovery truncate valid records of the segment before it: it is set aside, the segment before keeps every record, and its offsets are never handed out again", async () => {
  await withTempDir(async (dir) => {
    // 10 records a segment: segments 0, 10 and 20.
    await writeRecords(dir, 30, 10 * REC_BYTES);
    assert.deepEqual((await fsp.readdir(dir)).filter((f) => f.endsWith(".log")).sort(), ["00000000000000000000.log", "00000000000000000010.log", "00000000000000000020.log"]);
    await fsp.rename(segmentFile(dir, 20, "log"), segmentFile(dir, 15, "log"));
    await fsp.rm(segmentFile(dir, 20, "index"), { force: true });

    const clock = new TestClock();
    const cap = captureLogger();
    let log = await openPartitionLog(dir, logOptions(clock, cap.logger, { segmentBytesMax: 10 * REC_BYTES }));
    assert.equal(log.recovery.truncatedBytes, 0, "nothing is cut");
    assert.deepEqual(log.recovery.corruptRecords, []);
    assert.deepEqual(log.recovery.setAsideSegments, [{ segment: "00000000000000000015.log", firstOffset: 20, endOffset: 30 }]);
    assert.deepEqual(await readAllChecked(log), range(0, 20), "every record of the segments before it is served");
    assert.equal(cap.warnings("disagrees with the offsets of its records").length, 1, "logged");
    await fsp.stat(`${segmentFile(dir, 15, "log")}.corrupt`);
    assert.equal(log.endOffset, 30, "offsets 20..29 were answered 202 once: the next append gets 30");
    const next = log.append([inputOf(30)], clock.nowMs());
    assert.equal(next.baseOffset, 30);
    await next.durable;
    await log.close();

    // The operator renames it back to the base offset of its first record (the log line names it).
    await fsp.rename(`${segmentFile(dir, 15, "log")}.corrupt`, segmentFile(dir, 20, "log"));
    log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentBytesMax: 10 * REC_BYTES }));
    assert.equal(log.recovery.setAsideSegments, undefined);
    assert.deepEqual(await readAllChecked(log), range(0, 31), "all of it is back");
    await log.close();
  });
});

test("a segment renamed to a higher base offset hid records: it is set aside, the others keep theirs", async () => {
  await withTempDir(async (dir) => {
    await writeRecords(dir, 20, 10 * REC_BYTES);
    await fsp.rename(segmentFile(dir, 0, "log"), segmentFile(dir, 25, "log"));
    await fsp.rm(segmentFile(dir, 0, "index"), { force: true });
    const clock = new TestClock();
    const log = await openPartitionLog(dir, logOptions(clock, captureLogger().logger, { segmentBytesMax: 10 * REC_BYTES }));
    assert.deepEqual(log.recovery.setAsideSegments, [{ segment: "00000000000000000025.log", firstOffset: 0, endOffset: 10 }]);
    assert.equal(log.recovery.truncatedBytes, 0);
    assert.deepEqual(await readAllChecked(log), range(10, 20));
    assert.equal(log.endOffset, 20);
    await log.close();
  });
});
