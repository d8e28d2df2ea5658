// Hand-written histories with known verdicts: one per anomaly, and the legal cases a naive
// checker gets wrong. Times are in milliseconds; the builder numbers the lines.

import { test } from "node:test";
import assert from "node:assert/strict";
import { check, checkEvents, checkText } from "./check.js";
import { HistoryBuilder } from "./history-builder.js";
import type { Report } from "./types.js";

function anomalies(r: Report): Array<[string, number[]]> {
  return r.anomalies.map((a) => [a.name, a.ops]);
}

/** produce m1 on t at 0..10, deliver d1 at 20..21; the common start of many cases. */
function produced(b: HistoryBuilder, msg = "m1"): { p: number; d: number } {
  const p = b.produce("p1", "t", msg, 0, 10);
  const d = b.consume("c1", "t", msg, `${msg}-d1`, 20, 21);
  return { p, d };
}

test("a produce, a delivery and an ack, then a drain: valid", () => {
  const b = new HistoryBuilder();
  const { d } = produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.empty("c1", "t", 40, 41);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.counts.pairs.total, 1);
  assert.equal(r.counts.deliveries, 1);
  assert.equal(r.redeliveries.total, 0);
  assert.equal(r.lag.deliveryOp, b.build().index(d));
});

test("legal: a delivery that overlaps its own produce (it completes before the produce does)", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 50);
  b.consume("c1", "t", "m1", "d1", 10, 20);
  b.ack("c1", "t", "m1", "d1", 25, 30);
  b.empty("c1", "t", 100, 101);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
});

test("legal: a redelivery after a 204 ack, explained by a kill within ack_flush_ms, with boot evidence", () => {
  const b = new HistoryBuilder();
  const { p } = produced(b);
  const ack = b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  const kill = b.fault("kill", 80, 82, { node: "n1" }, "ok", { signal: "SIGKILL" });
  b.fault("start", 100, 150, { node: "n1" }, "ok", { boot: "b2", pid: 42 });
  const again = b.consume("c2", "t", "m1", "m1-d2", 200, 201, { boot: "b2" });
  b.ack("c2", "t", "m1", "m1-d2", 210, 211);
  b.empty("c2", "t", 300, 301);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.redeliveries.byCause.fault, 1);
  assert.deepEqual(r.redeliveries.explainedDuplicates, [
    { msg: "m1", path: "t", deliveryOp: h.index(again), ackOp: h.index(ack), faultOp: h.index(kill) },
  ]);
  const k = r.faults.find((f) => f.kind === "kill")!;
  assert.equal(k.evidence, true);
  assert.equal(k.redeliveries, 1);
  // Silence after the kill ended (the start completed at 150): m1 was unsettled, delivered at 201.
  assert.equal(k.silenceMs, 51);
  void p;
});

test("invalid: the same redelivery when the kill came long after the ack was flushed", () => {
  const b = new HistoryBuilder();
  const { d } = produced(b);
  const ack = b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.fault("kill", 500, 502, { node: "n1" });
  b.fault("start", 510, 550, { node: "n1" }, "ok", { boot: "b2" });
  const again = b.consume("c2", "t", "m1", "m1-d2", 600, 601, { boot: "b2" });
  b.ack("c2", "t", "m1", "m1-d2", 610, 611);
  b.empty("c2", "t", 700, 701);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["duplicate-after-ack", [h.index(d), h.index(ack), h.index(again)]]]);
});

test("legal: power loss within ack_sync_ms + ack_flush_ms explains a redelivery; a kill on another node does not", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.fault("power-loss", 900, 901, { node: "n1" });
  b.fault("start", 910, 950, { node: "n1" }, "ok", { boot: "b2" });
  b.consume("c2", "t", "m1", "m1-d2", 1000, 1001, { boot: "b2" });
  b.ack("c2", "t", "m1", "m1-d2", 1010, 1011);
  b.empty("c2", "t", 1100, 1101);
  assert.equal(checkEvents(b.build().events).verdict, "valid");

  const c = new HistoryBuilder();
  const { d } = produced(c);
  const ack = c.ack("c1", "t", "m1", "m1-d1", 30, 31);
  c.fault("kill", 40, 41, { node: "n2" });
  c.fault("start", 50, 60, { node: "n2" }, "ok", { boot: "b9" });
  const again = c.consume("c2", "t", "m1", "m1-d2", 100, 101);
  c.ack("c2", "t", "m1", "m1-d2", 110, 111);
  c.empty("c2", "t", 200, 201);
  const h = c.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["duplicate-after-ack", [h.index(d), h.index(ack), h.index(again)]]]);
});

test("legal: a partition move after the ack began explains a redelivery", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.fault("move", 30.5, 2000, { partition: "t/0", node: "n2" });
  b.consume("c2", "t", "m1", "m1-d2", 2100, 2101, { node: "n2", boot: "b7" });
  b.ack("c2", "t", "m1", "m1-d2", 2110, 2111, "ok");
  b.empty("c2", "t", 2200, 2201);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.redeliveries.explainedDuplicatesTotal, 1);
});

test("invalid: a duplicate after ack with a graceful terminate between them", () => {
  const b = new HistoryBuilder();
  const { d } = produced(b);
  const ack = b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.fault("terminate", 40, 80, { node: "n1" }, "ok", { exit_code: 0 });
  b.fault("start", 100, 150, { node: "n1" }, "ok", { boot: "b2" });
  const again = b.consume("c2", "t", "m1", "m1-d2", 200, 201, { boot: "b2" });
  b.ack("c2", "t", "m1", "m1-d2", 210, 211);
  b.empty("c2", "t", 300, 301);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["duplicate-after-ack", [h.index(d), h.index(ack), h.index(again)]]]);
});

test("unknown: a kill without boot evidence, and the redelivery only it could explain", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  const kill = b.fault("kill", 80, 82, { node: "n1" });
  // No start with a new boot, and the redelivery still reports b1.
  b.consume("c2", "t", "m1", "m1-d2", 200, 201);
  b.ack("c2", "t", "m1", "m1-d2", 210, 211);
  b.empty("c2", "t", 300, 301);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "unknown", r.reason);
  assert.equal(r.anomalies.length, 0);
  assert.deepEqual(r.unknownCounts, { "unevidenced-fault": 1, "explained-by-unevidenced-fault": 1 });
  assert.deepEqual(r.unknowns[0]!.ops, [h.index(kill)]);
  assert.equal(r.faults[0]!.evidence, false);
});

test("unknown, not valid: a kill without evidence even when nothing needed explaining", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.fault("kill", 80, 82, { node: "n1" });
  b.empty("c2", "t", 300, 301);
  assert.equal(checkEvents(b.build().events).verdict, "unknown");
});

test("invalid beats unknown: an anomaly no fault could explain, next to an unevidenced kill", () => {
  const b = new HistoryBuilder();
  const p = b.produce("p1", "t", "m1", 0, 10);
  b.fault("kill", 80, 82, { node: "n1" });
  const drain = b.empty("c2", "t", 300, 301);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["lost", [h.index(p), h.index(drain)]]]);
});

test("legal: an ambiguous produce that is never delivered", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 5000, "info");
  b.produce("p2", "t", "m2", 10, null, "open");
  b.empty("c1", "t", 6000, 6001);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
});

test("legal: an ambiguous produce that is delivered, even long after the client gave up", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 100, "info");
  b.consume("c1", "t", "m1", "d1", 500, 501);
  b.ack("c1", "t", "m1", "d1", 510, 511);
  b.empty("c1", "t", 600, 601);
  assert.equal(checkEvents(b.build().events).verdict, "valid");
});

test("legal: a redelivery after the lease lapsed", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  produced(b);
  // 20 ms after the first delivery began, minus... the second starts 1000 ms later.
  b.consume("c2", "t", "m1", "m1-d2", 1000, 1001);
  b.ack("c2", "t", "m1", "m1-d2", 1010, 1011);
  b.empty("c2", "t", 1100, 1101);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.deepEqual(r.redeliveries.byCause, { lapse: 1, nack: 0, fault: 0 });
});

test("legal: a 410 ack followed by a redelivery", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 1500, 1501, 410);
  b.consume("c2", "t", "m1", "m1-d2", 1600, 1601);
  b.ack("c2", "t", "m1", "m1-d2", 1610, 1611);
  b.empty("c2", "t", 1700, 1701);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.counts.gone410, 1);
});

test("legal: an ack that errored may have landed, so no redelivery is fine and a lapse redelivery is too", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 5030, "info");
  b.empty("c2", "t", 6000, 6001);
  assert.equal(checkEvents(b.build().events).verdict, "valid");
});

test("legal: nack makes it available at once; extend postpones the lapse", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  produced(b);
  b.handle("nack", "c1", "t", "m1", "m1-d1", 30, 31);
  b.consume("c2", "t", "m1", "m1-d2", 40, 41);
  b.handle("extend", "c2", "t", "m1", "m1-d2", 900, 901);
  b.consume("c3", "t", "m1", "m1-d3", 1950, 1951);
  b.ack("c3", "t", "m1", "m1-d3", 1960, 1961);
  b.empty("c3", "t", 2000, 2001);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.deepEqual(r.redeliveries.byCause, { lapse: 1, nack: 1, fault: 0 });
});

test("invalid double-lease: a redelivery before the extended lease could lapse", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  const { d } = produced(b);
  b.handle("extend", "c1", "t", "m1", "m1-d1", 900, 901);
  const again = b.consume("c2", "t", "m1", "m1-d2", 1500, 1501);
  b.ack("c2", "t", "m1", "m1-d2", 1510, 1511);
  b.empty("c2", "t", 3000, 3001);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["double-lease", [h.index(d), h.index(again)]]]);
});

test("invalid double-lease: two acks both answered 204 without a fault", () => {
  const b = new HistoryBuilder();
  const { d } = produced(b);
  const again = b.consume("c2", "t", "m1", "m1-d2", 30, 31);
  const ack1 = b.ack("c1", "t", "m1", "m1-d1", 40, 41);
  b.ack("c2", "t", "m1", "m1-d2", 42, 43);
  b.empty("c2", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["double-lease", [h.index(d), h.index(again), h.index(ack1)]]]);
});

test("legal: a kill with evidence ends the lease, so a redelivery before the lapse is fine", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.fault("kill", 40, 41, { node: "n1" });
  b.fault("start", 50, 90, { node: "n1" }, "ok", { boot: "b2" });
  b.consume("c2", "t", "m1", "m1-d2", 100, 101, { boot: "b2" });
  b.ack("c2", "t", "m1", "m1-d2", 110, 111);
  b.empty("c2", "t", 200, 201);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.deepEqual(r.redeliveries.byCause, { lapse: 0, nack: 0, fault: 1 });
});

test("invalid lost: a 202 never delivered although the final drain came after", () => {
  const b = new HistoryBuilder();
  const p = b.produce("p1", "t", "m1", 0, 10);
  b.empty("c1", "t", 5, 6); // overlaps the produce: not the final drain
  const drain = b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["lost", [h.index(p), h.index(drain)]]]);
});

test("unknown: a 202 never delivered with no drain after it", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 10);
  b.empty("c1", "t", 5, 6);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "unknown");
  assert.deepEqual(r.unknownCounts, { "no-final-drain": 1 });
});

test("invalid lost on a child: the parent got it, the fan-out child did not", () => {
  const b = new HistoryBuilder({ topics: { t: { partitions: 1 }, f: { partitions: 1 } }, children: { t: [{ topic: "f", kind: "fanout" }] } });
  const { p } = produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.empty("c1", "t", 100, 101);
  const drain = b.empty("c2", "f", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.deepEqual(anomalies(r), [["lost", [h.index(p), h.index(drain)]]]);
  assert.equal(r.anomalies[0]!.path, "f");
});

test("unknown, not lost: an ambiguous consume may still hold the lease when the drain runs", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  b.produce("p1", "t", "m1", 0, 10);
  b.op("c1", "consume", { topic: "t" }, 20, 40, "info", { error: "timeout" });
  b.empty("c2", "t", 100, 101);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "unknown");
  assert.deepEqual(r.unknownCounts, { "lease-may-be-live-at-drain": 1 });
});

test("invalid unexpected: a message nobody produced, and one delivered before its produce began", () => {
  const b = new HistoryBuilder();
  const ghost = b.consume("c1", "t", "ghost", "g1", 20, 21);
  const early = b.consume("c1", "t", "m2", "e1", 30, 31);
  const p = b.produce("p1", "t", "m2", 40, 50);
  b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(
    anomalies(r).sort((x, y) => x[1][0]! - y[1][0]!),
    [
      ["unexpected", [h.index(ghost)]],
      ["unexpected", [h.index(early), h.index(p)]],
    ],
  );
});

test("invalid misrouted: delivered on a topic it was not owed on", () => {
  const b = new HistoryBuilder({ topics: { t: { partitions: 1 }, u: { partitions: 1 } } });
  const p = b.produce("p1", "t", "m1", 0, 10);
  b.consume("c1", "t", "m1", "d1", 20, 21);
  b.ack("c1", "t", "m1", "d1", 22, 23);
  const wrong = b.consume("c2", "u", "m1", "d2", 30, 31);
  b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["misrouted", [h.index(p), h.index(wrong)]]]);
});

test("invalid refused-delivered: a 429 that was delivered later", () => {
  const b = new HistoryBuilder();
  const p = b.produce("p1", "t", "m1", 0, 10, 429);
  const d = b.consume("c1", "t", "m1", "d1", 20, 21);
  b.ack("c1", "t", "m1", "d1", 22, 23);
  b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["refused-delivered", [h.index(p), h.index(d)]]]);
});

test("invalid duplicate-after-ack: delivered again after a confirmed ack, no fault at all", () => {
  const b = new HistoryBuilder();
  const { d } = produced(b);
  const ack = b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  const again = b.consume("c2", "t", "m1", "m1-d2", 40, 41);
  b.ack("c2", "t", "m1", "m1-d2", 42, 43);
  b.empty("c2", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["duplicate-after-ack", [h.index(d), h.index(ack), h.index(again)]]]);
});

test("legal: an ack that answers 410 while a redelivery overlaps it", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 100 });
  produced(b);
  // The lease lapsed at about 120 ms; the ack and the redelivery overlap and the ack lost.
  b.ack("c1", "t", "m1", "m1-d1", 140, 160, 410);
  b.consume("c2", "t", "m1", "m1-d2", 150, 151);
  b.ack("c2", "t", "m1", "m1-d2", 170, 171);
  b.empty("c2", "t", 300, 301);
  assert.equal(checkEvents(b.build().events).verdict, "valid");
});

test("invalid early-delivery: a delay child's copy delivered before its delay", () => {
  const b = new HistoryBuilder({
    topics: { t: { partitions: 1 }, slow: { partitions: 1 } },
    children: { t: [{ topic: "slow", kind: "delay", delay_ms: 500 }] },
  });
  const p = b.produce("p1", "t", "m1", 0, 10);
  b.consume("c1", "t", "m1", "d1", 20, 21);
  b.ack("c1", "t", "m1", "d1", 22, 23);
  const soon = b.consume("c2", "slow", "m1", "s1", 100, 110);
  b.ack("c2", "slow", "m1", "s1", 120, 121);
  b.consume("c2", "slow", "m2", "s2", 600, 610); // unexpected, but a different pair
  b.empty("c1", "t", 1000, 1001);
  b.empty("c2", "slow", 1000, 1001);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r).filter(([n]) => n === "early-delivery"), [["early-delivery", [h.index(p), h.index(soon)]]]);
});

test("legal: a delay child's copy delivered after its delay, judged lost only after delay + drain", () => {
  const b = new HistoryBuilder({
    topics: { t: { partitions: 1 }, slow: { partitions: 1 } },
    children: { t: [{ topic: "slow", kind: "delay", delay_ms: 500 }] },
  });
  b.produce("p1", "t", "m1", 0, 10);
  b.consume("c1", "t", "m1", "d1", 20, 21);
  b.ack("c1", "t", "m1", "d1", 22, 23);
  b.empty("c2", "slow", 400, 401); // before the delay passed: the pair was not due yet
  b.empty("c1", "t", 1000, 1001);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "unknown");
  assert.deepEqual(r.unknownCounts, { "no-final-drain": 1 });
});

test("invalid stranded: delivered, never acked, never delivered again though the drain came after the lease ended", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  const { d } = produced(b);
  const drain = b.empty("c2", "t", 2000, 2001);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["stranded", [h.index(d), h.index(drain)]]]);
});

test("stranded is not judged while the lease may still be live at the drain", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  produced(b);
  b.empty("c2", "t", 500, 501);
  const r = checkEvents(b.build().events);
  assert.equal(r.verdict, "unknown");
  assert.deepEqual(r.unknownCounts, { "no-final-drain": 1 });
});

test("invalid skip and nonmonotonic: replays that jump over or go back past known offsets", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m0", 0, 10);
  b.produce("p1", "t", "m1", 11, 20);
  b.produce("p1", "t", "m2", 21, 30);
  const skip = b.replay("r1", "t", 0, 0, 40, 41, [
    [0, "m0"],
    [2, "m2"],
  ]);
  const back = b.replay("r1", "t", 0, 0, 50, 51, [
    [0, "m0"],
    [1, "m1"],
    [2, "m2"],
    [1, "m1"],
  ]);
  const late = b.replay("r1", "t", 0, 1, 60, 61, [[2, "m2"]]);
  b.replay("r1", "t", 0, 0, 70, 71, [
    [0, "m0"],
    [1, "m1"],
    [2, "m2"],
  ]);
  ["m0", "m1", "m2"].forEach((m, i) => {
    b.consume("c1", "t", m, `${m}-d`, 80 + 4 * i, 81 + 4 * i);
    b.ack("c1", "t", m, `${m}-d`, 82 + 4 * i, 83 + 4 * i);
  });
  b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  const found = anomalies(r);
  assert.equal(found.length, 3);
  assert.deepEqual(found[0], ["skip", [h.index(skip)]]);
  assert.deepEqual(found[1], ["nonmonotonic", [h.index(back)]]);
  // The late start names the replay and the produce that showed a higher offset existed.
  assert.equal(found[2]![0], "skip");
  assert.ok(found[2]![1].includes(h.index(late)));
});

test("invalid no-legal-order: one handle acked twice with 204", () => {
  const b = new HistoryBuilder();
  const { p, d } = produced(b);
  const a1 = b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  const a2 = b.ack("c1", "t", "m1", "m1-d1", 40, 41);
  b.empty("c1", "t", 100, 101);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(anomalies(r), [["no-legal-order", [h.index(p), h.index(d), h.index(a1), h.index(a2)]]]);
});

test("lag: the longest wait between becoming available and delivery", () => {
  const b = new HistoryBuilder({ visibility_timeout_ms: 1000 });
  b.produce("p1", "t", "m1", 0, 10);
  b.produce("p1", "t", "m2", 20, 30);
  b.consume("c1", "t", "m1", "d1", 40, 50);
  b.ack("c1", "t", "m1", "d1", 55, 56);
  const slow = b.consume("c1", "t", "m2", "d2", 60, 2030);
  b.ack("c1", "t", "m2", "d2", 2040, 2041);
  b.empty("c1", "t", 3000, 3001);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "valid");
  assert.equal(r.lag.maxMs, 2000);
  assert.equal(r.lag.deliveryOp, h.index(slow));
  assert.equal(r.lag.since, "produce");
});

test("numbers and strings name the same message id, on both reading paths", async () => {
  const b = new HistoryBuilder();
  b.op("p1", "produce", { topic: "t", msg: 17 }, 0, 10, "ok", { partition: 0, offset: 0, status: 202 });
  b.op("c1", "consume", { topic: "t" }, 20, 21, "ok", { topic: "t", msg: "17", partition: 0, offset: 0, delivery: 1, node: "n1", boot: "b1" });
  b.op("c1", "ack", { topic: "t", msg: 17, delivery: "1" }, 22, 23, "ok", { status: 204 });
  b.empty("c1", "t", 30, 31);
  const h = b.build();
  assert.equal(checkEvents(h.events).verdict, "valid");
  assert.equal((await check({ text: h.text })).verdict, "valid");
});

test("checkText and checkEvents agree", () => {
  const b = new HistoryBuilder();
  produced(b);
  b.ack("c1", "t", "m1", "m1-d1", 30, 31);
  b.empty("c1", "t", 40, 41);
  const h = b.build();
  assert.deepEqual(checkText(h.text), checkEvents(h.events));
});
