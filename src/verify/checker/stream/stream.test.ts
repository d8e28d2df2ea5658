// The stream model checker on hand-written histories, one per anomaly and measure of SPEC.md
// "The stream model", with the seed's own skip (nats.go #2107: expected 21, got 101) first.

import { test } from "node:test";
import assert from "node:assert/strict";
import { checkStreamText } from "./index.js";
import { HistoryFormatError } from "../../history/validate.js";
import { generateStreamHistory } from "./generate.js";

const MS = 1_000_000;

/** A small history builder: lines in the recorder's layout, time in milliseconds. */
class H {
  private lines: string[] = [];
  constructor(config: Record<string, unknown> = {}) {
    this.add(0, "driver", "ok", "config", { model: "stream", stream: "S", system: "test", client: "hand@1", api: "ordered", ...config });
  }
  add(ms: number, process: string, type: string, f: string, value: unknown): number {
    const index = this.lines.length;
    this.lines.push(JSON.stringify({ index, time_ns: Math.round(ms * MS), process, type, f, value }));
    return index;
  }
  /** Publishes msg m acknowledged as seq s (invoke at ms, ok at ms + 1). */
  pub(ms: number, msg: number | string, seq: number): number {
    const op = this.add(ms, "p0", "invoke", "publish", { stream: "S", msg });
    this.add(ms + 1, "p0", "ok", "publish", { seq });
    return op;
  }
  deliver(ms: number, msg: number | string, seq: number, process = "c0"): number {
    return this.add(ms, process, "ok", "deliver", { msg, seq });
  }
  drain(ms: number, until: number, doneMs: number, seq: number, ok = true, process = "c0"): number {
    const op = this.add(ms, process, "invoke", "drain", { until_seq: until });
    this.add(doneMs, process, ok ? "ok" : "info", "drain", { seq });
    return op;
  }
  fault(ms: number, endMs: number, kind = "cut", stopped: Record<string, number> = { connections_reset: 1 }): number {
    const op = this.add(ms, "nemesis", "invoke", "fault", { kind, mode: "reset" });
    this.add(ms, "nemesis", "ok", "fault", { kind });
    const end = kind === "pause" ? "resume" : "heal";
    this.add(endMs, "nemesis", "invoke", "fault", { kind: end });
    this.add(endMs, "nemesis", "ok", "fault", { kind: end, stopped });
    return op;
  }
  text(): string {
    return this.lines.join("\n") + "\n";
  }
}

test("the seed's skip (nats.go #2107): expected seq 21, got 101: 80 skipped, 0 delivered late, 80 never delivered", () => {
  const h = new H();
  for (let s = 1; s <= 101; s++) h.pub(s * 10, s, s);
  let op20 = -1;
  for (let s = 1; s <= 20; s++) {
    const op = h.deliver(1020 + s, s, s);
    if (s === 20) op20 = op;
  }
  const op101 = h.deliver(1100, 101, 101);
  h.drain(1200, 101, 1300, 101);
  const r = checkStreamText(h.text());
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(r.anomalyCounts, { skip: 1 }, "the 80 never delivered are the skip's, not 80 more lost");
  const skip = r.anomalies[0]!;
  assert.equal(skip.explanation, "expected seq 21, got 101: 80 skipped, 0 delivered late, 80 never delivered");
  assert.deepEqual(skip.ops, [op20, op101]);
  assert.deepEqual(skip.skip, { expectedSeq: 21, gotSeq: 101, skipped: 80, deliveredLate: 0, neverDelivered: 80 });
});

test("skip: late deliveries inside the gap are counted as late, not as out-of-order", () => {
  const h = new H();
  for (let s = 1; s <= 6; s++) h.pub(s * 10, s, s);
  h.deliver(100, 1, 1);
  h.deliver(101, 5, 5); // skips 2, 3, 4
  h.deliver(102, 3, 3); // late
  h.deliver(103, 6, 6);
  h.drain(200, 6, 210, 6);
  const r = checkStreamText(h.text());
  assert.deepEqual(r.anomalyCounts, { skip: 1 });
  assert.equal(r.anomalies[0]!.explanation, "expected seq 2, got 5: 3 skipped, 1 delivered late, 2 never delivered");
});

test("a gap of publishes that were never acknowledged is no skip", () => {
  const h = new H();
  h.pub(10, 1, 1);
  h.add(20, "p0", "invoke", "publish", { stream: "S", msg: 2 });
  h.add(5020, "p0", "info", "publish", { error: "timeout" });
  h.pub(5030, 3, 3);
  h.deliver(6000, 1, 1);
  h.deliver(6001, 3, 3);
  h.drain(7000, 3, 7001, 3);
  const r = checkStreamText(h.text());
  assert.equal(r.verdict, "valid", r.reason);
  assert.match(r.reason, /1 of 3 publishes unknown/);
});

test("duplicate: a seq delivered twice names both deliveries", () => {
  const h = new H();
  h.pub(10, "a", 1);
  h.pub(20, "b", 2);
  const d1 = h.deliver(30, "a", 1);
  h.deliver(31, "b", 2);
  const d2 = h.deliver(32, "a", 1);
  h.drain(40, 2, 41, 2);
  const r = checkStreamText(h.text());
  assert.deepEqual(r.anomalyCounts, { duplicate: 1 });
  assert.deepEqual(r.anomalies[0]!.ops, [d1, d2]);
  assert.equal(r.anomalies[0]!.seq, 1);
});

test("out-of-order: a seq delivered after a higher one, with no skip between", () => {
  const h = new H();
  h.pub(10, 1, 1);
  h.pub(20, 2, 2);
  h.deliver(30, 2, 2); // seq 1 was acknowledged: this is a skip of 1 …
  h.deliver(31, 1, 1); // … and 1 comes late inside it: not out of order
  h.pub(40, 3, 3);
  h.pub(50, 4, 4);
  h.add(55, "p0", "invoke", "publish", { stream: "S", msg: 5 });
  h.add(60, "p0", "info", "publish", { error: "timeout" });
  h.pub(70, 6, 6);
  h.deliver(80, 3, 3);
  h.deliver(81, 4, 4);
  const d6 = h.deliver(82, 6, 6); // 5 unknown: no skip
  const d5 = h.deliver(83, 5, 5); // 5 after 6, outside every skip
  h.drain(90, 6, 91, 6);
  const r = checkStreamText(h.text());
  assert.deepEqual(r.anomalyCounts, { skip: 1, "out-of-order": 1 });
  const ooo = r.anomalies.find((a) => a.name === "out-of-order")!;
  assert.deepEqual(ooo.ops, [d6, d5]);
  assert.equal(ooo.explanation, "seq 5 delivered after seq 6");
});

test("lost: acknowledged, never delivered, with a drain after it; without a drain it is unknown", () => {
  const h = new H();
  h.pub(10, 1, 1);
  h.pub(20, 2, 2);
  h.deliver(30, 2, 2); // 1 skipped: that is a skip, not lost
  h.pub(40, 3, 3);
  h.deliver(50, 3, 3);
  h.pub(60, 4, 4);
  h.pub(70, 5, 5);
  h.deliver(80, 5, 5); // 4 skipped as well
  h.drain(100, 6, 200, 5, false);
  h.pub(300, 6, 6); // after the drain began: nobody waited for it
  const r = checkStreamText(h.text());
  assert.deepEqual(r.anomalyCounts, { skip: 2, stalled: 1 });
  assert.equal(r.unknownCounts["no-drain"], 1);

  // A plain loss: in order up to the end, the last one never comes.
  const g = new H();
  g.pub(10, 1, 1);
  const p2 = g.pub(20, 2, 2);
  g.deliver(30, 1, 1);
  const d = g.drain(40, 2, 5040, 1, false);
  const r2 = checkStreamText(g.text());
  assert.deepEqual(r2.anomalyCounts, { lost: 1, stalled: 1 });
  const lost = r2.anomalies.find((a) => a.name === "lost")!;
  assert.deepEqual(lost.ops, [p2, d]);
  assert.equal(lost.seq, 2);
  assert.match(r2.anomalies.find((a) => a.name === "stalled")!.explanation, /timed out after 5\.00 s at seq 1/);
});

test("unexpected: never published, published only later, another seq than acknowledged, a refused publish", () => {
  const h = new H();
  h.pub(10, "a", 1);
  h.add(15, "p0", "invoke", "publish", { stream: "S", msg: "r" });
  h.add(16, "p0", "fail", "publish", { error: "no stream" });
  h.deliver(20, "a", 2); // acknowledged as 1
  h.deliver(21, "ghost", 3); // never published
  h.deliver(22, "later", 4); // published after
  h.pub(30, "later", 4);
  h.deliver(40, "r", 5); // refused
  h.drain(50, 5, 51, 5);
  const r = checkStreamText(h.text());
  const un = r.anomalies.filter((a) => a.name === "unexpected").map((a) => a.explanation);
  assert.deepEqual(un, [
    "msg a acknowledged as seq 1, delivered as seq 2",
    "msg ghost (seq 3) was never published",
    "msg later (seq 4) delivered before it was published",
    "msg r (seq 5) delivered although its publish was refused",
  ]);
  assert.equal(r.verdict, "invalid");
});

test("stalled: the drain's deadline passed; a drain that caught up is not", () => {
  const h = new H();
  h.pub(10, 1, 1);
  h.pub(20, 2, 2);
  h.deliver(30, 1, 1);
  h.drain(40, 2, 1040, 1, false);
  h.deliver(2000, 2, 2); // too late for the drain
  const r = checkStreamText(h.text());
  assert.deepEqual(r.anomalyCounts, { stalled: 1 }, "delivered after the drain: not lost, but the consumer did not catch up in time");
  assert.equal(r.consumers[0]!.drain!.outcome, "info");
});

test("silence after a cut: from the heal's ok to the next delivery, only while acknowledged publishes waited; lag from ok to delivery", () => {
  const h = new H();
  h.pub(0, 1, 1);
  h.deliver(5, 1, 1);
  h.add(40, "nemesis", "invoke", "fault", { kind: "cut", mode: "reset" });
  h.add(40, "nemesis", "ok", "fault", { kind: "cut" });
  for (let s = 2; s <= 5; s++) h.pub(1000 * s, s, s);
  h.add(8040, "nemesis", "invoke", "fault", { kind: "heal" }); // a cut of 8 s, ended at 8.04 s
  h.add(8040, "nemesis", "ok", "fault", { kind: "heal", stopped: { connections_reset: 1 } });
  for (let s = 2; s <= 5; s++) h.deliver(20010 + s, s, s); // 11.97 s of silence after the heal
  h.fault(21000, 22000); // nothing waiting at its end
  h.drain(23000, 5, 23001, 5);
  const r = checkStreamText(h.text());
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.faults.length, 2);
  const [cut, quiet] = r.faults;
  assert.equal(cut!.endNs, 8040 * MS);
  assert.equal(cut!.silence[0]!.waiting, 4);
  assert.equal(Math.round(cut!.silence[0]!.silenceMs!), 20012 - 8040);
  assert.equal(quiet!.silence[0]!.silenceMs, null);
  assert.equal(r.lag.seq, 2);
  assert.equal(Math.round(r.lag.maxMs!), 20012 - 2001);
});

test("a cut whose proxy counters show nothing was stopped makes the verdict unknown; an anomaly still makes it invalid", () => {
  const h = new H();
  h.pub(0, 1, 1);
  h.fault(10, 20, "cut", { connections_reset: 0, bytes_delayed: 0 });
  h.deliver(30, 1, 1);
  h.drain(40, 1, 41, 1);
  const r = checkStreamText(h.text());
  assert.equal(r.verdict, "unknown");
  assert.equal(r.unknownCounts["unevidenced-fault"], 1);
  assert.equal(r.faults[0]!.evidence, false);
  const bad = h.text() + JSON.stringify({ index: 10, time_ns: 50 * MS, process: "c0", type: "ok", f: "deliver", value: { msg: 1, seq: 1 } }) + "\n";
  assert.equal(checkStreamText(bad).verdict, "invalid");
});

test("the fast reader and the slow path agree: reordered keys, escapes and string ids give the same report", () => {
  const plain = new H();
  plain.pub(10, 1, 1);
  plain.pub(20, 2, 2);
  plain.deliver(30, 1, 1);
  plain.deliver(31, 2, 2);
  plain.drain(40, 2, 41, 2);
  const a = checkStreamText(plain.text());
  assert.equal(a.history.slowLines, 3, "config and the drain's two lines");
  const odd = plain
    .text()
    .replace('{"stream":"S","msg":1}', '{"msg":"1","stream":"S"}')
    .replace('"value":{"msg":2,"seq":2}', '"value":{"seq":2,"msg":"\\u0032"}');
  const b = checkStreamText(odd);
  assert.ok(b.history.slowLines > a.history.slowLines);
  assert.equal(b.verdict, "valid", b.reason);
  assert.deepEqual({ ...b, history: null }, { ...a, history: null });
});

test("malformed stream histories name the line and the rule", () => {
  const bad = (text: string, re: RegExp) => assert.throws(() => checkStreamText(text), (e: unknown) => e instanceof HistoryFormatError && re.test(e.message));
  const cfg = '{"index":0,"time_ns":0,"process":"driver","type":"ok","f":"config","value":{"model":"stream","stream":"S","system":"t","client":"c","api":"a"}}\n';
  bad(cfg + '{"index":1,"time_ns":1,"process":"p0","type":"ok","f":"publish","value":{"seq":1}}\n', /line 2: ok on process "p0" without a pending invoke/);
  bad(cfg + '{"index":1,"time_ns":1,"process":"c0","type":"ok","f":"deliver","value":{"msg":1,"seq":0}}\n', /line 2: deliver ok: seq must be an integer ≥ 1/);
  bad(cfg + '{"index":1,"time_ns":1,"process":"c0","type":"ok","f":"produce","value":{}}\n', /line 2: unknown f/);
  bad(cfg + '{"index":2,"time_ns":1,"process":"c0","type":"ok","f":"deliver","value":{"msg":1,"seq":1}}\n', /line 2: index is 2, expected 1/);
  bad(cfg + '{"index":1,"time_ns":1,"process":"p0","type":"invoke","f":"publish","value":{"stream":"S","msg":1}}\n{"index":2,"time_ns":0,"process":"p0","type":"ok","f":"publish","value":{"seq":1}}\n', /line 3: time_ns 0 goes back/);
  bad(cfg.replace('"api":"a"', '"api":""'), /line 1: config: api must be a nonempty string/);
});

test("a generated 9 000-line history of a correct run is valid, nearly every line on the fast path", () => {
  const r = checkStreamText(generateStreamHistory(9_000));
  assert.equal(r.verdict, "valid", r.reason);
  assert.ok(r.history.slowLines <= 7, `${r.history.slowLines} slow lines`);
  assert.equal(r.faults.length, 1);
  assert.equal(r.faults[0]!.evidence, true);
});
