// Throughput of one partition log with real fdatasync (not a test; run by hand):
//
//   npm run build && node dist/bench/storage-throughput.js [seconds=5] [dir=os.tmpdir()]
//
// Cases: batches of 100 × 1 KiB records and single 1 KiB records, each from N concurrent callers
// that await `durable` before appending again (a produce that waits for its 202). Prints one JSON
// line per case: records/s, group commits/s, records per commit, append→durable latency.

import fs from "node:fs";
import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pino } from "pino";
import { openPartitionLog } from "../src/storage/partition-log.js";
import { systemClock } from "../src/platform/clock.js";
import type { AppendInput } from "../src/storage/types.js";

const seconds = Number(process.argv[2] ?? 5);
const root = process.argv[3] ?? os.tmpdir();

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function runCase(name: string, batchSize: number, callers: number): Promise<void> {
  const dir = await fsp.mkdtemp(path.join(root, "narad-bench-"));
  const log = await openPartitionLog(dir, {
    clock: systemClock,
    logger: pino({ level: "silent" }),
    segmentBytesMax: 256 * 1024 * 1024,
    segmentAgeMaxMs: 3600_000,
    powerLoss: false,
  });
  const payload = Buffer.alloc(1024, 0x61);
  const batch: AppendInput[] = Array.from({ length: batchSize }, () => ({ key: null, payload }));
  const latenciesMs: number[] = [];
  const endAt = performance.now() + seconds * 1000;
  let records = 0;
  const syncsBefore = log.stats.syncs;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: callers }, async () => {
      while (performance.now() < endAt) {
        const start = performance.now();
        await log.append(batch, Date.now()).durable;
        latenciesMs.push(performance.now() - start);
        records += batchSize;
      }
    }),
  );
  const elapsedS = (performance.now() - t0) / 1000;
  const syncs = log.stats.syncs - syncsBefore;
  await log.close();
  await fsp.rm(dir, { recursive: true, force: true });
  latenciesMs.sort((a, b) => a - b);
  process.stdout.write(
    `${JSON.stringify({
      case: name,
      recordsPerS: Math.round(records / elapsedS),
      mbPerS: Math.round((records * (1024 + 29)) / elapsedS / 1e6),
      commitsPerS: Math.round(syncs / elapsedS),
      recordsPerCommit: Math.round(records / Math.max(syncs, 1)),
      p50Ms: +percentile(latenciesMs, 50).toFixed(3),
      p99Ms: +percentile(latenciesMs, 99).toFixed(3),
    })}\n`,
  );
}

/** The disk's own pace, for context: sequential 1 KiB write + fdatasync, as the flusher does. */
async function rawFdatasync(): Promise<void> {
  const dir = await fsp.mkdtemp(path.join(root, "narad-bench-"));
  const fd = fs.openSync(path.join(dir, "raw"), "w+");
  const buf = Buffer.alloc(1053, 0x61);
  const latenciesMs: number[] = [];
  const t0 = performance.now();
  for (let i = 0; i < 2000; i++) {
    const start = performance.now();
    fs.writeSync(fd, buf, 0, buf.length, i * buf.length);
    await new Promise<void>((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
    latenciesMs.push(performance.now() - start);
  }
  const elapsedS = (performance.now() - t0) / 1000;
  fs.closeSync(fd);
  await fsp.rm(dir, { recursive: true, force: true });
  latenciesMs.sort((a, b) => a - b);
  process.stdout.write(
    `${JSON.stringify({
      case: "raw-write-fdatasync-1KiB",
      opsPerS: Math.round(2000 / elapsedS),
      p50Ms: +percentile(latenciesMs, 50).toFixed(3),
      p99Ms: +percentile(latenciesMs, 99).toFixed(3),
    })}\n`,
  );
}

const cases: [string, number, number][] = [
  ["batch100-1KiB-c1", 100, 1],
  ["batch100-1KiB-c4", 100, 4],
  ["batch100-1KiB-c16", 100, 16],
  ["single-1KiB-c1", 1, 1],
  ["single-1KiB-c64", 1, 64],
  ["single-1KiB-c256", 1, 256],
];
const only = process.env["BENCH_CASE"];
if (only === undefined || "raw".includes(only)) await rawFdatasync();
for (const [name, batchSize, callers] of cases) {
  if (only !== undefined && !name.includes(only)) continue;
  await runCase(name, batchSize, callers);
}
