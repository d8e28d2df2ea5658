// Reading histories: what the recorder writes, the reader and the checker read back; every
// malformed line is rejected with its line number and the rule it breaks, by the reader
// (JSON.parse and the validator) and by the checker's fast scanner alike; CRLF line ends and a
// last line without a newline are accepted by both.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { check } from "./check.js";
import { HistoryWriter } from "../history/writer.js";
import { parseHistoryText, readHistory, HistoryReadError } from "../history/reader.js";
import { HistoryFormatError } from "../history/validate.js";
import type { ConfigValue } from "../history/types.js";

const CONFIG: ConfigValue = { ack_flush_ms: 100, ack_sync_ms: 1000, visibility_timeout_ms: 30_000, topics: { t: { partitions: 1 } }, children: {} };

test("a history recorded to a file checks as valid", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-history-"));
  try {
    const path = join(dir, "h.jsonl");
    const w = HistoryWriter.open(path, CONFIG);
    w.invoke("p1", "produce", { topic: "t", msg: "m1" });
    w.ok("p1", { partition: 0, offset: 0, status: 202 });
    w.invoke("c1", "consume", { topic: "t" });
    w.ok("c1", { topic: "t", msg: "m1", partition: 0, offset: 0, delivery: "d1", delivery_count: 1, node: "n1", boot: "b1" });
    w.invoke("c1", "ack", { topic: "t", msg: "m1", delivery: "d1" });
    w.ok("c1", { status: 204 });
    w.invoke("c1", "consume", { topic: "t" });
    w.ok("c1", { topic: "t", msg: null });
    await w.close();
    const lines: number[] = [];
    assert.equal(await readHistory(path, (e) => lines.push(e.index)), 9);
    assert.equal((await check(path)).verdict, "valid");
    assert.match(await readFile(path, "utf8"), /^\{"index":0,"time_ns":\d+,"process":"driver","type":"ok","f":"config"/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

// ---- malformed histories ----

const GOOD = [
  JSON.stringify({ index: 0, time_ns: 0, process: "driver", type: "ok", f: "config", value: CONFIG }),
  '{"index":1,"time_ns":10,"process":"p1","type":"invoke","f":"produce","value":{"topic":"t","msg":"m1"}}',
  '{"index":2,"time_ns":20,"process":"p1","type":"ok","f":"produce","value":{"partition":0,"offset":0,"status":202}}',
  '{"index":3,"time_ns":30,"process":"c1","type":"invoke","f":"consume","value":{"topic":"t"}}',
  '{"index":4,"time_ns":40,"process":"c1","type":"ok","f":"consume","value":{"topic":"t","msg":"m1","partition":0,"offset":0,"delivery":"d1","node":"n1","boot":"b1"}}',
];

/** Replaces line `n` (1-based) of the good history. */
function withLine(n: number, text: string): string {
  const lines = [...GOOD];
  lines[n - 1] = text;
  return lines.join("\n") + "\n";
}

const MALFORMED: Array<[string, string, number, RegExp]> = [
  ["bad JSON", withLine(3, '{"index":2,"time_ns":20,'), 3, /bad JSON/],
  ["missing field", withLine(2, '{"index":1,"process":"p1","type":"invoke","f":"produce","value":{"topic":"t","msg":"m1"}}'), 2, /missing field time_ns/],
  ["wrong type", withLine(2, '{"index":1,"time_ns":10,"process":7,"type":"invoke","f":"produce","value":{"topic":"t","msg":"m1"}}'), 2, /process must be a nonempty string/],
  ["index not counting from 0", withLine(3, GOOD[2]!.replace('"index":2', '"index":5')), 3, /index is 5, expected 2/],
  ["time going back", withLine(3, GOOD[2]!.replace('"time_ns":20', '"time_ns":5')), 3, /time_ns 5 goes back/],
  ["ok without a pending invoke", withLine(3, GOOD[2]!.replace('"process":"p1"', '"process":"p9"')), 3, /ok on process "p9" without a pending invoke/],
  [
    "second invoke on a busy process",
    withLine(3, '{"index":2,"time_ns":20,"process":"p1","type":"invoke","f":"produce","value":{"topic":"t","msg":"m2"}}'),
    3,
    /second invoke on process "p1"/,
  ],
  ["unknown f", withLine(4, GOOD[3]!.replace('"f":"consume"', '"f":"poll"')), 4, /unknown f/],
  ["unknown type", withLine(4, GOOD[3]!.replace('"type":"invoke"', '"type":"start"')), 4, /unknown type/],
  [
    "a completion of another operation",
    withLine(3, '{"index":2,"time_ns":20,"process":"p1","type":"ok","f":"ack","value":{}}'),
    3,
    /ok for ack on process "p1", whose pending invoke \(line 2\) is produce/,
  ],
  ["consume ok missing its handle", withLine(5, GOOD[4]!.replace('"delivery":"d1",', "")), 5, /missing field delivery/],
  ["config not first", [GOOD[1]!.replace('"index":1', '"index":0'), GOOD[0]].join("\n"), 1, /first line must be the config/],
  ["config twice", withLine(2, GOOD[0]!.replace('"index":0', '"index":1')), 2, /config line after the first line/],
  ["config without topics", withLine(1, JSON.stringify({ index: 0, time_ns: 0, process: "d", type: "ok", f: "config", value: { ack_flush_ms: 1, ack_sync_ms: 1, visibility_timeout_ms: 1 } })), 1, /missing field topics/],
  ["unknown fault kind", withLine(4, '{"index":3,"time_ns":30,"process":"nemesis","type":"invoke","f":"fault","value":{"kind":"reboot"}}'), 4, /unknown fault kind/],
  ["an empty line", GOOD.slice(0, 2).join("\n") + "\n\n" + GOOD[2], 3, /empty line/],
  ["an empty history", "", 1, /empty history/],
];

for (const [name, text, line, reason] of MALFORMED) {
  test(`malformed history rejected with its line number: ${name}`, async () => {
    assert.throws(
      () => parseHistoryText(text),
      (err: unknown) => err instanceof HistoryFormatError && err.line === line && reason.test(err.reason),
    );
    // The checker's fast scanner gives the same answer.
    await assert.rejects(check({ text }), (err: unknown) => err instanceof HistoryFormatError && err.line === line && reason.test(err.reason));
  });
}

test("an unreadable history is a read error, not a format error", async () => {
  await assert.rejects(check("/nonexistent/history.jsonl"), HistoryReadError);
  await assert.rejects(readHistory("/nonexistent/history.jsonl", () => {}), HistoryReadError);
});

test("a last line without a newline and CRLF line ends are accepted", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-history-"));
  try {
    const path = join(dir, "h.jsonl");
    await writeFile(path, GOOD.join("\r\n"));
    assert.equal(parseHistoryText(GOOD.join("\r\n")).length, 5);
    const r = await check(path);
    assert.equal(r.history.events, 5);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
