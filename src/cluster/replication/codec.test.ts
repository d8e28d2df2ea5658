import assert from "node:assert/strict";
import { test } from "node:test";
import { decodeRecords, encodeRecords, type ShippedRecord } from "./codec.js";

test("the replication codec round-trips keys, empty payloads and control records", () => {
  const rs: ShippedRecord[] = [
    { producedAtMs: 1, key: null, payload: Buffer.from("a") },
    { producedAtMs: 2, key: Buffer.from("k"), payload: Buffer.alloc(0) },
    { producedAtMs: 3, key: Buffer.alloc(0), payload: Buffer.from("empty key") },
    { producedAtMs: 4, key: null, payload: Buffer.alloc(0), control: true },
  ];
  const back = decodeRecords(encodeRecords(rs), 10);
  assert.ok(Array.isArray(back));
  assert.deepEqual(
    back.map((r) => [r.producedAtMs, r.key?.toString() ?? null, r.payload.toString(), r.control === true]),
    [[1, null, "a", false], [2, "k", "", false], [3, "", "empty key", false], [4, null, "", true]],
  );
});

test("the replication codec refuses a damaged or hostile body whole", () => {
  const good = encodeRecords([{ producedAtMs: 5, key: Buffer.from("key"), payload: Buffer.from("payload") }]);
  assert.match(decodeRecords(good.subarray(0, good.length - 1), 10) as string, /cut short/);
  assert.match(decodeRecords(good.subarray(0, 5), 10) as string, /header is cut short/);
  const flags = Buffer.from(good);
  flags[0] = 0x80;
  assert.match(decodeRecords(flags, 10) as string, /unknown flags/);
  const huge = Buffer.from(good);
  huge.writeUInt32LE(0xffffffff, 13);
  assert.match(decodeRecords(huge, 10) as string, /size limits/);
  const time = Buffer.from(good);
  time.writeDoubleLE(Number.NaN, 1);
  assert.match(decodeRecords(time, 10) as string, /produce time/);
  const control = encodeRecords([{ producedAtMs: 1, key: null, payload: Buffer.from("x"), control: true }]);
  assert.match(decodeRecords(control, 10) as string, /control record/);
  assert.match(decodeRecords(Buffer.concat([good, good, good]), 2) as string, /more than 2/);
});

test("the replication codec carries a record's attribute block, and refuses a bad block length", () => {
  const attrs = Buffer.from([4, 8, 0, 1, 2, 3, 4, 5, 6, 0, 0]);
  const rs: ShippedRecord[] = [
    { producedAtMs: 1, key: Buffer.from("k"), payload: Buffer.from("p"), attrs },
    { producedAtMs: 2, key: null, payload: Buffer.from("q") },
  ];
  const body = encodeRecords(rs);
  const back = decodeRecords(body, 10);
  assert.ok(Array.isArray(back));
  assert.ok(back[0]!.attrs?.equals(attrs));
  assert.deepEqual([back[0]!.key?.toString(), back[0]!.payload.toString(), back[1]!.attrs], ["k", "p", undefined]);
  const bad = Buffer.from(body);
  bad.writeUInt32LE(0, 17);
  assert.match(decodeRecords(bad, 10) as string, /attribute block/);
  bad.writeUInt32LE(1 << 30, 17);
  assert.match(decodeRecords(bad, 10) as string, /attribute block/);
});
