// Idempotent producers (issue 14), BENCH_ONLY=idempotent: on the single node main.ts started,
// idempotent produce beside plain produce, interleaved in the same run (goals: >= 0.9x for
// batches of 100, >= 0.8x single), and the memory of the dedupe state, measured in this process
// on the broker's own DedupeWindow (heap used after a full GC, before and after filling it):
// per 1 000 producers (each with a few sequences) and per million sequences (one producer, and
// 1 000 producers of 1 000 each, sent one a request; and sent in batches of 100, which the window
// keeps as runs).
//
// Each loop of the idempotent loads is a producer of its own (an id minted before the run) whose
// sequences go up by one a message, as the SDK's producer numbers them.

import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { Pool } from "undici";
import { encodeBinaryBatch, BATCH_BINARY_TYPE } from "../src/protocol/wire.js";
import { DedupeWindow, SEQUENCE_RUN, WindowTotals } from "../src/broker/producers.js";
import type { Harness } from "./peers.js";
import type { LoadResult } from "./main.js";

export interface IdempotentHarness extends Omit<Harness, "narad"> {
  pool: Pool;
  pid: number;
  /** Counts the server's fdatasyncs while a load runs (main.ts). */
  countFsyncs(pid: number, load: () => Promise<LoadResult>): Promise<LoadResult>;
  /** A row's server CPU and fdatasyncs a message. */
  perMsg(r: LoadResult): string;
  createTopic(name: string, partitions: number): Promise<void>;
}

async function mint(pool: Pool): Promise<string> {
  const r = await pool.request({ method: "POST", path: "/v1/producers" });
  const j = (await r.body.json()) as { producer_id: string };
  if (r.statusCode !== 201) throw new Error(`mint: ${r.statusCode}`);
  return j.producer_id;
}

async function post(pool: Pool, path: string, body: Buffer, headers: Record<string, string>, count: number): Promise<number> {
  const r = await pool.request({ method: "POST", path, body, headers });
  await r.body.arrayBuffer();
  if (r.statusCode !== 202) throw new Error(String(r.statusCode));
  return count;
}

/** Producers and their next sequences, one per loop. */
async function lanes(pool: Pool, n: number): Promise<{ id: string; next: number }[]> {
  return Promise.all(Array.from({ length: n }, async () => ({ id: await mint(pool), next: 0 })));
}

export async function benchIdempotent(h: IdempotentHarness): Promise<void> {
  const { pool, pid } = h;
  await h.createTopic("bench-idem-plain-1", 1);
  await h.createTopic("bench-idem-1", 1);
  const singles = await lanes(pool, 64);
  const [plain, idem] = (await h.interleaved(
    (s) => h.countFsyncs(pid, () => h.closedLoop(64, s, () => post(pool, "/v1/topics/bench-idem-plain-1/messages", h.payload, {}, 1), pid)),
    (s) =>
      h.countFsyncs(pid, () =>
        h.closedLoop(
          64,
          s,
          (loop) => {
            const l = singles[loop % singles.length]!;
            return post(pool, "/v1/topics/bench-idem-1/messages", h.payload, { "narad-producer-id": l.id, "narad-sequence": String(l.next++) }, 1);
          },
          pid,
        ),
      ),
  ))!;
  h.row(`idempotent produce, 1 msg/request, 64 in flight, 1 partition (msgs/s; ${h.perMsg(idem!)})`, h.fmt(idem!.perS), `plain ${h.fmt(plain!.perS)} (${h.perMsg(plain!)})`, idem!.perS / plain!.perS, ">= 0.8x plain");

  await h.createTopic("bench-idem-plain-batch", 3);
  await h.createTopic("bench-idem-batch", 3);
  const batch = encodeBinaryBatch(Array.from({ length: 100 }, () => ({ payload: h.payload })));
  // Numbered as the SDK's idempotent producer numbers an unkeyed batch (src/client/producer.ts):
  // a batch never crosses a run of 1024 sequences, so the broker stores it in one partition; the
  // batch before a run's end is cut short (1000..1023 is 24 messages).
  const shorter = new Map<number, Buffer>();
  const batchOf = (n: number) => {
    if (n === 100) return batch;
    let b = shorter.get(n);
    if (b === undefined) shorter.set(n, (b = encodeBinaryBatch(Array.from({ length: n }, () => ({ payload: h.payload })))));
    return b;
  };
  const batchers = await lanes(pool, 24);
  /** Plain batches to `plainTopic` beside idempotent ones to `idemTopic`, interleaved. */
  const batchLoads = async (plainTopic: string, idemTopic: string) =>
    (await h.interleaved(
      (s) => h.countFsyncs(pid, () => h.closedLoop(24, s, () => post(pool, `/v1/topics/${plainTopic}/messages/batch`, batch, { "content-type": BATCH_BINARY_TYPE }, 100), pid)),
      (s) =>
        h.countFsyncs(pid, () =>
          h.closedLoop(
            24,
            s,
            (loop) => {
              const l = batchers[loop % batchers.length]!;
              const seq = l.next;
              const n = Math.min(100, SEQUENCE_RUN - (seq % SEQUENCE_RUN));
              l.next += n;
              return post(pool, `/v1/topics/${idemTopic}/messages/batch`, batchOf(n), { "content-type": BATCH_BINARY_TYPE, "narad-producer-id": l.id, "narad-sequence": String(seq) }, n);
            },
            pid,
          ),
        ),
    )) as [LoadResult, LoadResult];
  const [plainB, idemB] = await batchLoads("bench-idem-plain-batch", "bench-idem-batch");
  h.row(`idempotent produce, batches of 100, 24 in flight (msgs/s; ${h.perMsg(idemB)})`, h.fmt(idemB.perS), `plain ${h.fmt(plainB.perS)} (${h.perMsg(plainB)})`, idemB.perS / plainB.perS, ">= 0.9x plain");

  // The same on one partition: plain batches fill one partition's sticky run at a time while
  // each idempotent producer's run has its own partition, so on 3 partitions the idempotent
  // side has more, smaller commits. One log takes that difference out, leaving the dedupe work.
  await h.createTopic("bench-idem-plain-batch-1", 1);
  await h.createTopic("bench-idem-batch-1", 1);
  const [plainB1, idemB1] = await batchLoads("bench-idem-plain-batch-1", "bench-idem-batch-1");
  h.row(`  the same, 1 partition (msgs/s; ${h.perMsg(idemB1)})`, h.fmt(idemB1.perS), `plain ${h.fmt(plainB1.perS)} (${h.perMsg(plainB1)})`, idemB1.perS / plainB1.perS, "(one log: the dedupe work alone)");

  const m = dedupeMemory();
  h.row("dedupe state per 1 000 producers, 10 sequences each (KiB)", (m.per1000Producers / 1024).toFixed(0), "", null, "(in-process, heap after GC)");
  h.row("dedupe state per million sequences, one producer (MiB)", (m.perMillionOne / 1024 / 1024).toFixed(1), "", null, "(in-process, heap after GC)");
  h.row("dedupe state per million sequences, 1 000 producers (MiB)", (m.perMillionSpread / 1024 / 1024).toFixed(1), "", null, "(in-process, heap after GC)");
  h.row("dedupe state per million sequences sent in batches of 100 (MiB)", (m.perMillionBatched / 1024 / 1024).toFixed(1), "", null, "(in-process, heap after GC)");
}

/** Heap bytes a filled DedupeWindow holds, measured after full GCs. */
export function dedupeMemory(): { per1000Producers: number; perMillionOne: number; perMillionSpread: number; perMillionBatched: number } {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const measure = (fill: (w: DedupeWindow) => void): number => {
    gc();
    gc();
    const before = process.memoryUsage().heapUsed;
    const w = new DedupeWindow({ windowMs: 3_600_000, sequencesMax: 10_000_000, entriesMax: 100_000_000 }, new WindowTotals());
    fill(w);
    gc();
    gc();
    const after = process.memoryUsage().heapUsed;
    if (w.size === 0) throw new Error("empty window");
    return after - before;
  };
  const id = (i: number) => i.toString(16).padStart(32, "0");
  const per1000Producers = measure((w) => {
    let off = 0;
    for (let p = 0; p < 1000; p++) for (let s = 0; s < 10; s++) w.add(id(p), s, off++, 1_700_000_000_000);
  });
  const perMillionOne = measure((w) => {
    for (let s = 0; s < 1_000_000; s++) w.add(id(1), s, s, 1_700_000_000_000 + Math.floor(s / 1000));
  });
  const perMillionSpread = measure((w) => {
    let off = 0;
    for (let s = 0; s < 1000; s++) for (let p = 0; p < 1000; p++) w.add(id(p), s, off++, 1_700_000_000_000 + s);
  });
  const perMillionBatched = measure((w) => {
    for (let b = 0; b < 10_000; b++) w.addRun(id(b % 1000), Math.floor(b / 1000) * 100, 100, b * 100, 1_700_000_000_000 + b);
  });
  return { per1000Producers, perMillionOne, perMillionSpread, perMillionBatched };
}
