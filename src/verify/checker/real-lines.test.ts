// The checker on lines shaped like the recorder's in real runs (regression: the faster checker
// judged a replicated failover run invalid, 611 `lost` with empty message ids, while the
// JSON.parse path judged it valid). The cause was the interner: the Collector sizes it from the
// file's length (a fractional guess), its key table got an odd length, its growth test never
// fired, and every message id past the guess read back as "" and was never found again, so each
// delivery was `unexpected` and each produce `lost`. Real runs have more messages per byte than
// the simulated corpus, so only they passed the guess.
//
// Each history here is written in the recorder's layout (cluster and replicated topics, keyed
// produces, owner node and boot, idempotent producer and sequence, dead-letter acks and origins,
// replays, faults with their evidence, the final drain) with a few thousand messages, more than
// the first guess holds, and judged from a file (the fast scanner) and from text (JSON.parse):
// both must give the expected verdict, the same report, and the right message ids.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check, checkText } from "./check.js";
import { Interner } from "./collect.js";
import { clusterRun, deadLetterRun, paddedToOddGuesses, streamRun } from "./real-shapes.js";
import { checkStream, checkStreamText } from "./stream/index.js";
import type { Report } from "./types.js";

/** Runs `read` on the text written to a temporary file. */
async function fromFile<T>(text: string, read: (path: string) => Promise<T>): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), "narad-real-lines-"));
  try {
    const path = join(dir, "history.jsonl");
    await writeFile(path, text);
    return await read(path);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Judges a history from a file (the fast scanner) and from text (JSON.parse): the same report, returned. */
async function judgedBothWays(history: string): Promise<Report> {
  const text = paddedToOddGuesses(history);
  const report = await fromFile(text, (path) => check(path));
  assert.deepEqual(report, checkText(text));
  return report;
}

test("the interner keeps every name past a fractional first guess, each with its own id and bytes", () => {
  for (const expected of [1, 562.5, 1025.5, 2312.5, 6166.666]) {
    const names = new Interner(expected);
    const n = Math.ceil(expected) * 3 + 2000;
    for (let i = 0; i < n; i++) assert.equal(names.id(`m-p${i % 3}-${i}`), i);
    for (let i = 0; i < n; i++) {
      assert.equal(names.name(i), `m-p${i % 3}-${i}`);
      assert.equal(names.find(`m-p${i % 3}-${i}`), i);
    }
    assert.equal(names.size, n);
  }
});

test("a replicated cluster run of 4 000 messages (keyed produces, owners' boots, a kill, a cut, replays): valid, both readers alike", async () => {
  const { text } = clusterRun({ messages: 4000 });
  const r = await judgedBothWays(text);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.counts.pairs.total, 4000 + 1); // m-refused: ambiguous, never delivered, not owed
  assert.deepEqual(r.anomalies, []);
  assert.equal(r.counts.operations["produce"]?.ok, 4000);
});

test("the same run with one message never delivered: exactly one lost, named by its id", async () => {
  const { text, msg } = clusterRun({ messages: 4000, dropDelivery: 3217 });
  const r = await judgedBothWays(text);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(
    r.anomalies.map((a) => [a.name, a.msg, a.path]),
    [["lost", msg(3217), "t"]],
  );
});

test("an idempotent run (producer and sequence on each produce, re-sends answered duplicate): valid; a message stored twice is a duplicate-produce by name", async () => {
  const good = await judgedBothWays(clusterRun({ messages: 3000, idempotent: true }).text);
  assert.equal(good.verdict, "valid", good.reason);
  assert.deepEqual(good.anomalies, []);
  const { text, msg } = clusterRun({ messages: 3000, idempotent: true, storeTwice: 2500 });
  const bad = await judgedBothWays(text);
  assert.equal(bad.verdict, "invalid");
  assert.ok(bad.anomalies.length > 0);
  assert.ok(
    bad.anomalies.some((a) => a.name === "duplicate-produce" && a.msg === msg(2500)),
    JSON.stringify(bad.anomalies.map((a) => [a.name, a.msg])),
  );
  for (const a of bad.anomalies) assert.equal(a.msg, msg(2500));
});

test("a dead-letter run of 3 000 messages (nacked past max_deliveries, dead-letter acks, origins on t.dlq): valid; an early move is named", async () => {
  const good = await judgedBothWays(deadLetterRun(3000));
  assert.equal(good.verdict, "valid", good.reason);
  assert.deepEqual(good.anomalies, []);
  const bad = await judgedBothWays(deadLetterRun(3000, 2801));
  assert.equal(bad.verdict, "invalid");
  assert.deepEqual(
    bad.anomalies.map((a) => [a.name, a.msg, a.path]),
    [["dead-lettered-early", "m-p3-933", "t.dlq"]],
  );
});

test("a stream-model run in the recorder's layout (publishes, pushed deliveries, client events, a cut, the drain): the file and text readers agree", async () => {
  const text = streamRun(5000, 3333);
  const report = await fromFile(text, (path) => checkStream(path));
  assert.deepEqual(report, checkStreamText(text));
  assert.equal(report.verdict, "invalid");
  assert.deepEqual(
    report.anomalies.map((a) => [a.name, a.explanation]),
    [["skip", "expected seq 3333, got 3334: 1 skipped, 0 delivered late, 1 never delivered"]],
  );
});
