// Record attributes (version-2 records): the block's codec, and attributes through a real log
// (append, fsync, read, a reopen's recovery, a flipped bit found by the checksum).

import { test } from "node:test";
import assert from "node:assert/strict";
import fsp from "node:fs/promises";
import { decodeAttrs, encodeAttrs, PRODUCER_ID_BYTES, type RecordAttrs } from "./attrs.js";
import { openPartitionLog } from "./partition-log.js";
import { checkFrame, decodeFrame, encodeRecord, FRAME_BAD_ATTR_LENGTH, recordBytes, RECORD_VERSION, RECORD_VERSION_ATTRS } from "./record.js";
import { captureLogger, logOptions, segmentFile, TestClock, withTempDir } from "../../test/support/storage.js";

const ALL: RecordAttrs = {
  producer: { id: Buffer.alloc(PRODUCER_ID_BYTES, 0xab), sequence: 2 ** 53 - 1 },
  origin: { topic: "orders/é", partition: 7, offset: 2 ** 40 + 3, deliveries: 5, producedAtMs: 1_764_000_000_123 },
  headers: [["trace-id", "abc"], ["", ""], ["ü", "x".repeat(300)]],
  notBeforeMs: 1_764_000_005_000,
};

test("record attributes round-trip, each alone and all together; none at all is no block", () => {
  assert.equal(encodeAttrs({}), null);
  assert.equal(encodeAttrs({ headers: [] }), null);
  for (const a of [{ producer: ALL.producer }, { origin: ALL.origin }, { headers: ALL.headers }, { notBeforeMs: 0 }, ALL] as RecordAttrs[]) {
    const back = decodeAttrs(encodeAttrs(a)!);
    assert.notEqual(typeof back, "string", String(back));
    assert.deepEqual(JSON.parse(JSON.stringify(back)), JSON.parse(JSON.stringify(a)));
  }
  assert.throws(() => encodeAttrs({ producer: { id: Buffer.alloc(3), sequence: 1 } }), RangeError);
  assert.throws(() => encodeAttrs({ producer: { id: Buffer.alloc(16), sequence: -1 } }), RangeError);
  assert.throws(() => encodeAttrs({ notBeforeMs: 1.5 }), RangeError);
});

test("a damaged attribute block is named, never misread; an unknown tag is skipped", () => {
  const block = encodeAttrs(ALL)!;
  // Cut anywhere inside an entry: named. (Cut between entries, it is a shorter block, whole: the
  // record's checksum, not this codec, is what catches a lost tail.)
  const boundaries = new Set<number>();
  for (let p = 0; p < block.length; p += 3 + block.readUInt16LE(p + 1)) boundaries.add(p);
  for (let cut = 1; cut < block.length; cut++) if (!boundaries.has(cut)) assert.equal(typeof decodeAttrs(block.subarray(0, cut)), "string", `cut at ${cut}`);
  const twice = Buffer.concat([encodeAttrs({ notBeforeMs: 1 })!, encodeAttrs({ notBeforeMs: 2 })!]);
  assert.match(decodeAttrs(twice) as string, /out of order or repeated/);
  const badLen = Buffer.from(encodeAttrs({ producer: ALL.producer })!);
  badLen.writeUInt16LE(8, 1);
  assert.equal(typeof decodeAttrs(badLen.subarray(0, 11)), "string");
  const unknown = Buffer.concat([encodeAttrs({ notBeforeMs: 9 })!, Buffer.from([200, 2, 0, 1, 2])]);
  assert.deepEqual(decodeAttrs(unknown), { notBeforeMs: 9 });
});

test("a record with attributes is version 2, checked and decoded whole; without them it stays version 1", () => {
  const attrs = encodeAttrs(ALL)!;
  const key = Buffer.from("k");
  const payload = Buffer.from("payload");
  const buf = Buffer.alloc(recordBytes(key, payload, attrs));
  assert.equal(encodeRecord(buf, 0, 42, 1000, key, payload, false, attrs), buf.length);
  assert.equal(buf[8], RECORD_VERSION_ATTRS);
  assert.equal(checkFrame(buf, 0, buf.length), buf.length);
  const r = decodeFrame(buf, 0, buf.length);
  assert.deepEqual([r.offset, r.producedAtMs, r.key?.toString(), r.payload.toString()], [42, 1000, "k", "payload"]);
  assert.ok(r.attrs?.equals(attrs));
  const plain = Buffer.alloc(recordBytes(null, payload));
  encodeRecord(plain, 0, 1, 1, null, payload);
  assert.equal(plain[8], RECORD_VERSION);
  assert.equal(decodeFrame(plain, 0, plain.length).attrs, undefined);
  // An attribute length past the frame is damage, whatever the checksum says.
  const bad = Buffer.from(buf);
  bad.writeUInt32LE(buf.length, 29);
  assert.equal(checkFrame(bad, 0, bad.length), FRAME_BAD_ATTR_LENGTH);
  bad.writeUInt32LE(0, 29);
  assert.equal(checkFrame(bad, 0, bad.length), FRAME_BAD_ATTR_LENGTH);
});

test("attributes go through a real log: fsynced, read back, recovered after reopen; a flipped attribute bit is damage", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const cap = captureLogger();
    const attrs = encodeAttrs(ALL)!;
    let log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    const a = log.append(
      [
        { key: null, payload: Buffer.from("plain") },
        { key: Buffer.from("key"), payload: Buffer.from("with"), attrs },
        { key: null, payload: Buffer.from("plain again") },
      ],
      clock.nowMs(),
    );
    await a.durable;
    const check = (got: Awaited<ReturnType<typeof log.read>>): void => {
      assert.deepEqual(got.map((r) => r.payload.toString()), ["plain", "with", "plain again"]);
      assert.equal(got[0]!.attrs, undefined);
      assert.ok(got[1]!.attrs?.equals(attrs));
      assert.equal(got[1]!.key?.toString(), "key");
    };
    check(await log.read(0, 10, 1 << 20));
    await log.close();
    log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    assert.equal(log.recovery.records, 3);
    assert.deepEqual(log.recovery.corruptRecords, []);
    check(await log.read(0, 10, 1 << 20));
    await log.close();
    // One bit of the attribute block flipped: the checksum catches it, the others still read.
    const file = segmentFile(dir, 0, "log");
    const bytes = await fsp.readFile(file);
    const second = bytes.indexOf(Buffer.from("key")) + 3; // the block follows the key
    bytes[second + 5]! ^= 0x01;
    await fsp.writeFile(file, bytes);
    log = await openPartitionLog(dir, logOptions(clock, cap.logger));
    const got = await log.read(0, 10, 1 << 20);
    assert.deepEqual(got.map((r) => r.payload.toString()), ["plain", "plain again"]);
    await log.close();
  });
});
