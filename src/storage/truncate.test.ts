import assert from "node:assert/strict";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import pino from "pino";
import { systemClock } from "../platform/clock.js";
import { realFs } from "./fs.js";
import { openPartitionLog } from "./partition-log.js";
import { resetLogDir, truncateLogDir } from "./truncate.js";

const opts = { clock: systemClock, logger: pino({ level: "silent" }), segmentBytesMax: 4096, segmentAgeMaxMs: 3600_000, powerLoss: false };

async function fill(dir: string, n: number): Promise<void> {
  const log = await openPartitionLog(dir, opts);
  for (let i = 0; i < n; i++) await log.append([{ key: null, payload: Buffer.alloc(300, i) }], 1000 + i).durable;
  await log.close();
}

async function payloads(dir: string): Promise<{ end: number; earliest: number; firstBytes: number[] }> {
  const log = await openPartitionLog(dir, opts);
  try {
    const recs = await log.read(0, 1000, 1 << 30);
    return { end: log.endOffset, earliest: log.earliestOffset, firstBytes: recs.map((r) => r.payload[0]!) };
  } finally {
    await log.close();
  }
}

test("truncateLogDir cuts a log of several segments at an offset, keeping every record below it", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-trunc-"));
  try {
    await fill(dir, 40); // 300-byte records in 4 KiB segments: several segments
    assert.ok((await readdir(dir)).filter((n) => n.endsWith(".log")).length > 2);
    const r = await truncateLogDir(realFs, dir, 17);
    assert.equal(r.endOffset, 17);
    assert.ok(r.removedSegments >= 1);
    const after = await payloads(dir);
    assert.equal(after.end, 17);
    assert.deepEqual(after.firstBytes, Array.from({ length: 17 }, (_, i) => i));
    // Appends continue at the cut.
    const log = await openPartitionLog(dir, opts);
    const { baseOffset, durable } = log.append([{ key: null, payload: Buffer.from("x") }], 5);
    await durable;
    assert.equal(baseOffset, 17);
    await log.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("truncateLogDir at the end changes nothing; at a segment boundary removes the later segments", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-trunc-"));
  try {
    await fill(dir, 30);
    assert.equal((await truncateLogDir(realFs, dir, 30)).truncatedBytes, 0);
    assert.equal((await payloads(dir)).end, 30);
    const bases = (await readdir(dir)).filter((n) => n.endsWith(".log")).map((n) => Number(n.slice(0, 20))).sort((a, b) => a - b);
    const boundary = bases[1]!;
    await truncateLogDir(realFs, dir, boundary);
    const after = await payloads(dir);
    assert.equal(after.end, boundary);
    assert.equal(after.firstBytes.length, boundary);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("resetLogDir empties a log and starts it at a later offset (a replica behind the leader's retention)", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-trunc-"));
  try {
    await fill(dir, 5);
    await resetLogDir(realFs, dir, 1234);
    const after = await payloads(dir);
    assert.equal(after.end, 1234);
    assert.equal(after.earliest, 1234);
    assert.deepEqual(after.firstBytes, []);
    const log = await openPartitionLog(dir, opts);
    const { baseOffset, durable } = log.append([{ key: null, payload: Buffer.from("y") }], 5);
    await durable;
    assert.equal(baseOffset, 1234);
    await log.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
