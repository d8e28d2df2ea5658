// The matrix's judgement of a cell against the expected table, on hand-written stream histories
// (no server): verdicts, verdicts a race decides between, silence bands, a missing row.

import { test } from "node:test";
import assert from "node:assert/strict";
import { checkStreamText } from "../../checker/stream/index.js";
import { judgeCell, matrixCells, parseExpectations, clientMajor, MATRIX_BEGIN, MATRIX_END } from "./matrix.js";
import type { NatsRunResult } from "./run.js";

const MS = 1_000_000;

function run(silenceMs: number, skip: boolean): NatsRunResult {
  const lines: unknown[] = [];
  const L = (t: number, process: string, type: string, f: string, value: unknown) => lines.push({ index: lines.length, time_ns: Math.round(t * MS), process, type, f, value });
  L(0, "driver", "ok", "config", { model: "stream", stream: "S", system: "nats", client: "nats@2.29.3", api: "push-ordered" });
  L(1, "p0", "invoke", "publish", { stream: "S", msg: 1 });
  L(2, "p0", "ok", "publish", { seq: 1 });
  L(3, "nemesis", "invoke", "fault", { kind: "cut", mode: "reset" });
  L(3, "nemesis", "ok", "fault", { kind: "cut" });
  L(10, "p0", "invoke", "publish", { stream: "S", msg: 2 });
  L(11, "p0", "ok", "publish", { seq: 2 });
  L(1000, "nemesis", "invoke", "fault", { kind: "heal" });
  L(1000, "nemesis", "ok", "fault", { kind: "heal", stopped: { connections_reset: 1 } });
  if (!skip) L(1000 + silenceMs, "c0", "ok", "deliver", { msg: 1, seq: 1 });
  L(1000 + silenceMs, "c0", "ok", "deliver", { msg: 2, seq: 2 });
  L(1000 + silenceMs + 1, "c0", "invoke", "drain", { until_seq: 2 });
  L(1000 + silenceMs + 2, "c0", "ok", "drain", { seq: 2 });
  const report = checkStreamText(lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  return { client: "nats@2.29.3", api: "push-ordered", scenario: "cut-8", report, historyPath: "", reportJsonPath: "", reportHtmlPath: "", summary: "", durationMs: 0 };
}

const DOC = `x\n${MATRIX_BEGIN}\n| client | api | scenario | expected verdict | expected silence | verdict | silence | lag |\n|---|---|---|---|---|---|---|---|\n| \`nats@2\` | push-ordered | cut-8 | valid | 4–8 s | — | — | — |\n| \`nats@2\` | push-ordered | cut-3 | valid or invalid | ≤ 3 s | — | — | — |\n| \`nats@2\` | push-ordered | restart | valid | any | 4–16 s | — | — | — |\n${MATRIX_END}\n`;

test("a cell passes inside its silence band and fails outside it or with another verdict", () => {
  const exp = parseExpectations(DOC);
  assert.deepEqual(exp.get("nats@2|push-ordered|cut-8")!.silence, [4, 8]);
  const cell = matrixCells(["nats2/push-ordered/cut-8"])[0]!;
  assert.equal(judgeCell(cell, run(5000, false), exp).pass, true);
  const slow = judgeCell(cell, run(12_000, false), exp);
  assert.equal(slow.pass, false);
  assert.match(slow.why, /silence 12\.00 s, expected 4–8 s/);
  const skipped = judgeCell(cell, run(5000, true), exp);
  assert.equal(skipped.pass, false);
  assert.match(skipped.why, /verdict invalid, expected valid/);
  assert.equal(skipped.anomalies, "skip ×1");
});

test("a verdict a race decides between may be either; a cell without a row fails", () => {
  const exp = parseExpectations(DOC);
  const cut3 = matrixCells(["nats2/push-ordered/cut-3"])[0]!;
  assert.equal(judgeCell(cut3, run(1000, true), exp).pass, true);
  assert.equal(judgeCell(cut3, run(1000, false), exp).pass, true);
  const other = matrixCells(["nats2/push-ordered/cut-6"])[0]!;
  const r = judgeCell(other, run(1000, false), exp);
  assert.equal(r.pass, false);
  assert.match(r.why, /no expected row for nats@2\|push-ordered\|cut-6/);
  assert.equal(clientMajor("@nats-io/jetstream@3.4.0"), "@nats-io/jetstream@3");
  assert.throws(() => parseExpectations(DOC.replace("4–8 s", "soon")), /write "≤ N s"/);
});

test("a row with an expected lag judges the lag too (a restart's silence has nothing waiting); a row without one expects any", () => {
  const exp = parseExpectations(DOC);
  assert.equal(exp.get("nats@2|push-ordered|cut-8")!.lag, null);
  assert.deepEqual(exp.get("nats@2|push-ordered|restart")!.lag, [4, 16]);
  const cell = matrixCells(["nats2/push-ordered/restart"])[0]!;
  // The first publish is acknowledged at 2 ms and delivered at 1 000 ms + the silence.
  assert.equal(judgeCell(cell, run(5000, false), exp).pass, true);
  const quick = judgeCell(cell, run(1000, false), exp);
  assert.equal(quick.pass, false);
  assert.match(quick.why, /^lag 2\.00 s, expected 4–16 s$/);
});
