// Unit tests of the workload pieces that need no broker: payload ids, seed derivation, the
// consumer mix, the tracker's lease bookkeeping (what the final drain waits for) and the table.

import { test, describe } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Prng, type NodeProcess } from "../nemesis/index.js";
import { Lane, decodePayload, encodePayload } from "./ops.js";
import { Gate, deriveSeed, pickBehaviour, Stopper } from "./roles.js";
import { LoadCycle, type CycleSpec } from "./cycle.js";
import { RunTracker } from "./tracker.js";
import { CHILDREN_CYCLE, WORKLOADS, WORKLOAD_NAMES } from "./workloads.js";
import { CALIBRATION_CASES, calibrationFailures, formatCalibrationTable, type CalibrationRow } from "./calibrate.js";

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
    assert.equal(WORKLOADS.e2e.duplicatesFail, true);
    assert.equal(WORKLOADS["e2e-chaos"].knownSet, true);
    assert.equal(WORKLOADS["e2e-chaos"].duplicatesFail, false);
    assert.deepEqual(WORKLOADS["e2e-chaos"].faults?.kinds, ["terminate"]);
  });
  test("the children workload: a fan-out, a delay, a replica and a remote child, with names of their own, continuous load with kills and terminates, and quiet windows that fit the delay", () => {
    const w = WORKLOADS.children;
    assert.deepEqual(w.children.map((c) => c.kind).sort(), ["delay", "fanout", "remote", "replica"]);
    const names = w.children.map((c) => c.topic);
    assert.equal(new Set([...names, "t", "probe"]).size, names.length + 2);
    assert.equal(w.cycle, null);
    assert.deepEqual(w.faults?.kinds, ["terminate", "kill"]);
    const delay = w.children.find((c) => c.kind === "delay")!;
    const cycle = CHILDREN_CYCLE;
    assert.equal(cycle.delayMs, delay.delayMs);
    // The faults' window closes before the burst's first delay copy is due, with room for a
    // restart (about a second) before it.
    assert.ok(cycle.delayMs - cycle.faultMarginMs - cycle.burstMs >= 2_000);
    // The remote node is down through the next burst.
    assert.ok(cycle.remoteHoldMs - cycle.remoteHoldJitterMs > cycle.gapMs);
  });
  test("each calibration configuration has a correct-build row expecting valid", () => {
    const configs = new Set(CALIBRATION_CASES.map((c) => c.config));
    for (const cfg of configs) {
      assert.ok(CALIBRATION_CASES.some((c) => c.config === cfg && c.bug === null && c.expect.verdict === "valid"), cfg);
    }
    for (const c of CALIBRATION_CASES) if (c.bug !== null) assert.ok(c.expect.anomaly !== null, `${c.bug} names its anomaly`);
  });
  test("the table marks failing rows and says why", () => {
    const row = (pass: boolean, retried: string | null = null): CalibrationRow => ({
      case: CALIBRATION_CASES[1]!,
      seed: 3,
      verdict: pass ? "invalid" : "valid",
      anomalies: pass ? { "duplicate-after-ack": 2 } : {},
      unknowns: {},
      pass,
      reason: pass ? null : "expected invalid",
      retried,
      outDir: "/tmp/x",
      durationMs: 1234,
    });
    const rows = [row(true), row(false), row(true, "worker processes did not start")];
    const text = formatCalibrationTable(rows);
    assert.match(text, /PASS/);
    assert.match(text, /FAIL acks-not-persisted \/ chaos-terminate: expected invalid \(seed 3, \/tmp\/x\)/);
    assert.match(text, /1 of 3 rows FAIL/);
    assert.match(text, /run again: acks-not-persisted \/ chaos-terminate: the first run could not happen: worker processes did not start/);
    assert.deepEqual(calibrationFailures(rows), ["FAIL acks-not-persisted / chaos-terminate: expected invalid (seed 3, /tmp/x)"]);
  });
});

describe("load cycles (children workload)", () => {
  class FakeNode {
    running = true;
    paused = false;
    private boots = 0;
    constructor(readonly name: string) {}
    async kill(): Promise<object> {
      this.running = false;
      return { signal: "SIGKILL" };
    }
    async terminate(): Promise<object> {
      this.running = false;
      return { exit_code: 0 };
    }
    async start(): Promise<object> {
      await new Promise((r) => setTimeout(r, 5));
      this.running = true;
      return { boot: `${this.name}-b${++this.boots}` };
    }
  }
  const spec: CycleSpec = { burstMs: 30, burstProducesMin: 0, gapMs: 120, delayMs: 0, faultMarginMs: 0, windowMs: 90, holdMs: 10, holdJitterMs: 0, remoteHoldMs: 250, remoteHoldJitterMs: 0 };

  function harness(caughtUp: () => boolean) {
    const events: string[] = [];
    let pending = 0;
    let overlap = false;
    const n1 = new FakeNode("n1");
    const r1 = new FakeNode("r1");
    const cycle = new LoadCycle({
      spec,
      seed: 7,
      faults: ["kill"],
      targets: [
        { node: n1 as unknown as NodeProcess, role: "main" },
        { node: r1 as unknown as NodeProcess, role: "remote" },
      ],
      record: (type, _f, v) => {
        if (type === "invoke") {
          if (pending > 0) overlap = true;
          pending++;
        } else pending--;
        events.push(`${type} ${v.kind} ${v.node}`);
      },
      gate: async (open) => {
        events.push(open ? "open" : "close");
      },
      producedOk: () => 0,
      caughtUp: async () => caughtUp(),
      onSkip: (n, why) => events.push(`skip ${n}: ${why}`),
      ackFlushMs: 1,
    });
    return { cycle, events, n1, r1, overlap: () => overlap };
  }

  test("faults come in the quiet window after a burst, one recorded operation at a time; the remote node stays down through the next burst", async () => {
    const h = harness(() => true);
    h.cycle.start();
    const deadline = performance.now() + 5_000;
    while (!h.events.includes("ok start r1") && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    await h.cycle.stop();
    const e = h.events;
    // On a loaded machine a window may be skipped; the first faults come after a burst all the same.
    const k = e.indexOf("invoke kill n1");
    assert.ok(k >= 2 && e[k - 1] === "close", e.join(", "));
    assert.ok(e.slice(0, k).every((x) => x === "open" || x === "close" || x.startsWith("skip")), e.join(", "));
    assert.deepEqual(e.slice(k, k + 4), ["invoke kill n1", "ok kill n1", "invoke kill r1", "ok kill r1"], e.join(", "));
    // n1 comes back before the next burst; r1 only after it.
    const nextOpen = e.indexOf("open", k);
    assert.ok(e.indexOf("ok start n1") < nextOpen, e.join(", "));
    assert.ok(e.indexOf("invoke start r1") > e.indexOf("close", nextOpen), e.join(", "));
    assert.equal(h.overlap(), false, "two fault operations were pending at once");
    assert.equal(h.cycle.settled, true);
    assert.equal(e[e.length - 1], "close", "the gate stays closed after stop");
  });

  test("a window whose children have not caught up is skipped, and the run is not settled", async () => {
    const h = harness(() => false);
    h.cycle.start();
    const deadline = performance.now() + 5_000;
    while (h.cycle.skipped < 2 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 5));
    await h.cycle.stop();
    assert.ok(h.cycle.skipped >= 2);
    assert.equal(h.cycle.applied, 0);
    assert.ok(!h.events.some((x) => x.startsWith("invoke kill")), h.events.join(", "));
    assert.equal(h.cycle.settled, false);
  });

  test("a closed gate holds producers until it opens or the run stops", async () => {
    const gate = new Gate();
    const stopper = new Stopper();
    assert.equal(gate.open, true);
    await gate.wait(stopper);
    gate.set(false);
    let released = false;
    const w = gate.wait(stopper).then(() => (released = true));
    await new Promise((r) => setTimeout(r, 20));
    assert.equal(released, false);
    gate.set(true);
    await w;
    gate.set(false);
    const w2 = gate.wait(stopper);
    stopper.stop();
    await w2;
  });
});

describe("lanes", () => {
  test("a lane sends its requests to its URLs in turn, with credentials", async () => {
    const seen: { server: number; auth: string | undefined }[] = [];
    const servers = await Promise.all(
      [0, 1, 2].map(
        (i) =>
          new Promise<Server>((resolve) => {
            const s = createServer((req, res) => {
              seen.push({ server: i, auth: req.headers.authorization });
              res.writeHead(204).end();
            });
            s.listen(0, "127.0.0.1", () => resolve(s));
          }),
      ),
    );
    try {
      const urls = servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`);
      const recorder = { invoke: async () => undefined, complete: () => undefined };
      const lane = new Lane("p0", urls, recorder, { requestTimeoutMs: 2_000, firstUrl: 1, auth: { user: "u", password: "pw" } });
      for (let i = 0; i < 4; i++) await lane.consume("t", 0);
      await lane.close();
      assert.deepEqual(seen.map((s) => s.server), [1, 2, 0, 1]);
      for (const s of seen) assert.equal(s.auth, `Basic ${Buffer.from("u:pw").toString("base64")}`);
    } finally {
      for (const s of servers) s.close();
    }
  });
});
