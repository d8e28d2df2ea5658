// The recorder: line numbers, run-clock time, misuse and backpressure. What it writes reads back
// through the reader and the checker alike, and malformed lines are rejected with their line
// number by both: those tests need the checker, so they sit beside it
// (src/verify/checker/reading.test.ts).

import { test } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { createRunClock } from "./clock.js";
import { HistoryWriter, HistoryMisuseError, HistoryOverflowError } from "./writer.js";
import { parseHistoryText } from "./reader.js";
import type { ConfigValue } from "./types.js";

const CONFIG: ConfigValue = { ack_flush_ms: 100, ack_sync_ms: 1000, visibility_timeout_ms: 30_000, topics: { t: { partitions: 1 } }, children: {} };

/** A clock that plays back the given nanosecond readings (then stays on the last). */
function scripted(readings: number[]): () => bigint {
  let i = 0;
  return () => BigInt(readings[Math.min(i++, readings.length - 1)]!);
}

class Sink extends Writable {
  chunks: string[] = [];
  override _write(chunk: Buffer, _enc: string, cb: () => void): void {
    this.chunks.push(chunk.toString());
    cb();
  }
}

test("the writer numbers lines from 0, stamps run-clock time that never goes back, and reads back", async () => {
  const sink = new Sink();
  // The source steps back (5 → 3): the writer must clamp, not record time going back.
  const clock = createRunClock(scripted([1000, 1000, 1005, 1003, 1010, 1020]));
  const w = new HistoryWriter(sink, CONFIG, { clock });
  assert.equal(w.invoke("p1", "produce", { topic: "t", msg: "m1" }), 1);
  assert.equal(w.ok("p1", { partition: 0, offset: 0, status: 202 }), 2);
  assert.equal(w.invoke("c1", "consume", { topic: "t" }), 3);
  assert.equal(w.ok("c1", { topic: "t", msg: null }), 4);
  await w.close();
  const events = parseHistoryText(sink.chunks.join(""));
  assert.deepEqual(
    events.map((e) => [e.index, e.time_ns, e.process, e.type, e.f]),
    [
      [0, 0, "driver", "ok", "config"],
      [1, 5, "p1", "invoke", "produce"],
      [2, 5, "p1", "ok", "produce"],
      [3, 10, "c1", "invoke", "consume"],
      [4, 20, "c1", "ok", "consume"],
    ],
  );
});

test("the writer refuses a second invoke on a busy process and a completion with nothing pending", () => {
  const w = new HistoryWriter(new Sink(), CONFIG);
  w.invoke("p1", "produce", { topic: "t", msg: "m1" });
  assert.throws(() => w.invoke("p1", "produce", { topic: "t", msg: "m2" }), HistoryMisuseError);
  assert.throws(() => w.ok("p2", {}), HistoryMisuseError);
});

test("the writer signals backpressure and refuses to grow past its hard limit", async () => {
  let release: (() => void) | null = null;
  const slow = new Writable({
    highWaterMark: 1024,
    write(_chunk, _enc, cb) {
      release = cb; // the disk is stuck until released
    },
  });
  const w = new HistoryWriter(slow, CONFIG, { chunkBytes: 256, queuedBytesMax: 4096, queuedBytesHardMax: 16_384 });
  let i = 0;
  while (!w.needsDrain) {
    w.invoke("p1", "produce", { topic: "t", msg: `m${i++}` });
    w.ok("p1", { partition: 0, offset: i, status: 202 });
  }
  const drained = w.drained();
  assert.throws(() => {
    for (;;) {
      w.invoke("p1", "produce", { topic: "t", msg: `m${i++}` });
      w.ok("p1", { partition: 0, offset: i, status: 202 });
    }
  }, HistoryOverflowError);
  // Let the stream write everything: drained() resolves.
  const pump = setInterval(() => {
    const r = release;
    release = null;
    r?.();
  }, 1);
  await drained;
  clearInterval(pump);
});

test("the writer records the next wave's dead-letter operation (it once refused it as unknown), and still refuses a config line", async () => {
  const sink = new Sink();
  const w = new HistoryWriter(sink, CONFIG);
  w.invoke("c1", "dead-letter", { topic: "t", msg: "m1", delivery: "d1" });
  w.ok("c1", { status: 204 });
  assert.throws(() => w.invoke("c1", "config" as never, {}), HistoryMisuseError);
  await w.close();
  assert.deepEqual(
    parseHistoryText(sink.chunks.join("")).map((e) => [e.type, e.f]),
    [
      ["ok", "config"],
      ["invoke", "dead-letter"],
      ["ok", "dead-letter"],
    ],
  );
});
