// Unit tests of the workload pieces that need no broker: payload ids, seed derivation, the
// consumer mix, the tracker's lease bookkeeping (what the final drain waits for) and the table.

import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { Prng } from "../nemesis/index.js";
import { decodePayload, encodePayload } from "./ops.js";
import { deriveSeed, pickBehaviour, Stopper } from "./roles.js";
import { RunTracker } from "./tracker.js";
import { WORKLOADS, WORKLOAD_NAMES } from "./workloads.js";
import { CALIBRATION_CASES, formatCalibrationTable, type CalibrationRow } from "./calibrate.js";

describe("payloads", () => {
  test("the message id comes back from payloads of any size", () => {
    for (const size of [0, 1, 10, 100, 300_000]) {
      const p = encodePayload("m-p12-345", size);
      assert.ok(p.length >= Math.min(size, 10));
      assert.equal(decodePayload(p), "m-p12-345");
    }
  });
  test("a payload no workload wrote gets a name the checker reports as unexpected", () => {
    assert.match(decodePayload(Buffer.from("hello")), /^\?68656c6c6f$/);
    assert.equal(decodePayload(Buffer.alloc(0)), "?empty");
    assert.match(decodePayload(Buffer.from("has space\nrest")), /^\?/);
  });
});

describe("seeds", () => {
  test("derived seeds are stable, differ by label and by seed", () => {
    assert.equal(deriveSeed(7, "nemesis"), deriveSeed(7, "nemesis"));
    assert.notEqual(deriveSeed(7, "nemesis"), deriveSeed(7, "worker-0"));
    assert.notEqual(deriveSeed(7, "p1"), deriveSeed(8, "p1"));
    assert.ok(Number.isSafeInteger(deriveSeed(2 ** 40 + 3, "p1")));
  });
  test("the consumer mix picks by weight and never a zero weight", () => {
    const prng = new Prng(1);
    const counts: Record<string, number> = {};
    for (let i = 0; i < 10_000; i++) {
      const b = pickBehaviour(prng, { ack: 3, nack: 1, extend: 0, slow: 0, lapse: 0, late: 0 });
      counts[b] = (counts[b] ?? 0) + 1;
    }
    assert.deepEqual(Object.keys(counts).sort(), ["ack", "nack"]);
    assert.ok(counts["ack"]! > 7_000 && counts["ack"]! < 8_000, JSON.stringify(counts));
  });
  test("a stopper cuts sleeps short", async () => {
    const s = new Stopper();
    const t0 = performance.now();
    const p = s.sleep(10_000);
    s.stop();
    await p;
    assert.ok(performance.now() - t0 < 1_000);
    await s.sleep(10_000); // returns at once once stopped
  });
});

describe("tracker: when the final drain may begin", () => {
  const ms = 1e6;
  const vt = 1000 * ms;
  test("an unsettled delivery holds the drain a visibility timeout after it; a 204 ack releases it", () => {
    const t = new RunTracker({ knownSet: false });
    t.invoke("p1", "consume", { topic: "t" });
    t.complete("p1", "ok", { topic: "t", msg: "m1", partition: 0, offset: 0, delivery: "h1", node: "n", boot: "b" }, 100 * ms);
    assert.equal(t.leasesEndNs("t", vt, 200 * ms), 1100 * ms);
    t.invoke("p1", "ack", { topic: "t", msg: "m1", delivery: "h1" });
    t.complete("p1", "ok", { status: 204 }, 150 * ms);
    assert.equal(t.leasesEndNs("t", vt, 200 * ms), 0);
  });
  test("an extend restarts the wait; a 410 ends it; an errored ack does not", () => {
    const t = new RunTracker({ knownSet: false });
    const deliver = (h: string, at: number) => {
      t.invoke("p1", "consume", { topic: "t" });
      t.complete("p1", "ok", { topic: "t", msg: h, partition: 0, offset: 0, delivery: h, node: "n", boot: "b" }, at * ms);
    };
    deliver("h1", 100);
    t.invoke("p1", "extend", { topic: "t", msg: "h1", delivery: "h1" });
    t.complete("p1", "ok", { status: 204 }, 500 * ms);
    assert.equal(t.leasesEndNs("t", vt, 600 * ms), 1500 * ms);
    t.invoke("p1", "ack", { topic: "t", msg: "h1", delivery: "h1" });
    t.complete("p1", "info", { status: 410 }, 600 * ms);
    assert.equal(t.leasesEndNs("t", vt, 700 * ms), 0);
    deliver("h2", 700);
    t.invoke("p1", "ack", { topic: "t", msg: "h2", delivery: "h2" });
    t.complete("p1", "info", { error: "ECONNRESET" }, 800 * ms);
    assert.equal(t.leasesEndNs("t", vt, 900 * ms), 1700 * ms);
  });
  test("an ambiguous consume may hold a lease nobody saw; an open one, from now on", () => {
    const t = new RunTracker({ knownSet: false });
    t.invoke("p1", "consume", { topic: "t" });
    t.complete("p1", "info", { error: "timeout" }, 300 * ms);
    assert.equal(t.leasesEndNs("t", vt, 400 * ms), 1300 * ms);
    assert.equal(t.leasesEndNs("other", vt, 400 * ms), 0);
    t.invoke("p2", "consume", { topic: "t" });
    assert.equal(t.leasesEndNs("t", vt, 2000 * ms), 3000 * ms);
  });
  test("e2e bookkeeping: duplicates and unacked messages", () => {
    const t = new RunTracker({ knownSet: true });
    t.invoke("p0", "produce", { topic: "t", msg: "m1" });
    t.complete("p0", "ok", { partition: 0, offset: 0, status: 202 }, 1);
    assert.equal(t.allProducedAcked(), false);
    for (const h of ["h1", "h2"]) {
      t.invoke("p1", "consume", { topic: "t" });
      t.complete("p1", "ok", { topic: "t", msg: "m1", partition: 0, offset: 0, delivery: h, node: "n", boot: "b" }, 2);
    }
    assert.deepEqual(t.duplicates, ["m1"]);
    t.invoke("p1", "ack", { topic: "t", msg: "m1", delivery: "h2" });
    t.complete("p1", "ok", { status: 204 }, 3);
    assert.equal(t.allProducedAcked(), true);
  });
});

describe("tables", () => {
  test("every workload has a profile whose numbers make sense", () => {
    for (const name of WORKLOAD_NAMES) {
      const w = WORKLOADS[name];
      assert.equal(w.name, name);
      assert.ok(w.durationS > 0 && w.rate > 0 && w.producers > 0 && w.visibilityTimeoutMs > 0);
      if (w.faults) assert.ok(w.faults.kinds.length > 0);
    }
    assert.equal(WORKLOADS["power-loss"].powerLoss, true);
    assert.equal(WORKLOADS.partition.proxy, true);
    assert.equal(WORKLOADS.e2e.faults, null);
  });
  test("each calibration configuration has a correct-build row expecting valid", () => {
    const configs = new Set(CALIBRATION_CASES.map((c) => c.config));
    for (const cfg of configs) {
      assert.ok(CALIBRATION_CASES.some((c) => c.config === cfg && c.bug === null && c.expect.verdict === "valid"), cfg);
    }
    for (const c of CALIBRATION_CASES) if (c.bug !== null) assert.ok(c.expect.anomaly !== null, `${c.bug} names its anomaly`);
  });
  test("the table marks failing rows and says why", () => {
    const row = (pass: boolean): CalibrationRow => ({
      case: CALIBRATION_CASES[1]!,
      seed: 3,
      verdict: pass ? "invalid" : "valid",
      anomalies: pass ? { "duplicate-after-ack": 2 } : {},
      unknowns: {},
      pass,
      reason: pass ? null : "expected invalid",
      outDir: "/tmp/x",
      durationMs: 1234,
    });
    const text = formatCalibrationTable([row(true), row(false)]);
    assert.match(text, /PASS/);
    assert.match(text, /FAIL acks-not-persisted \/ chaos-terminate: expected invalid \(seed 3, \/tmp\/x\)/);
    assert.match(text, /1 of 2 rows FAIL/);
  });
});
