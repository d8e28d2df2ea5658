// The seeded PRNG and the schedule plan: pure, no processes.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Prng } from "./prng.js";
import { planFaults } from "./nemesis.js";

test("the same seed gives the same draws, another seed others", () => {
  const a = new Prng(42);
  const b = new Prng(42);
  const c = new Prng(43);
  const da = Array.from({ length: 100 }, () => a.next());
  const db = Array.from({ length: 100 }, () => b.next());
  const dc = Array.from({ length: 100 }, () => c.next());
  assert.deepEqual(da, db);
  assert.notDeepEqual(da, dc);
  assert.ok(da.every((x) => x >= 0 && x < 1));
});

test("draws cover their range", () => {
  const p = new Prng(7);
  const seen = new Set<number>();
  for (let i = 0; i < 1000; i++) seen.add(p.int(5));
  assert.deepEqual([...seen].sort(), [0, 1, 2, 3, 4]);
  for (let i = 0; i < 1000; i++) {
    const j = p.jittered(100, 20);
    assert.ok(j >= 80 && j <= 120, `${j}`);
  }
  assert.equal(p.jittered(5, 50) >= 0, true);
  assert.throws(() => p.int(0), RangeError);
  assert.throws(() => new Prng(1.5), RangeError);
});

test("seeds wider than 32 bits still differ in their top bits", () => {
  const a = new Prng(1).next();
  const b = new Prng(1 + 2 ** 40).next();
  assert.notEqual(a, b);
});

test("a plan is a function of the seed", () => {
  const opts = { faults: ["kill", "pause", "terminate"] as const, intervalMs: 1000, intervalJitterMs: 500, holdMs: 2000, holdJitterMs: 100, targetCount: 3 };
  const p1 = planFaults({ ...opts, faults: [...opts.faults], seed: 2024 }, 50);
  const p2 = planFaults({ ...opts, faults: [...opts.faults], seed: 2024 }, 50);
  const p3 = planFaults({ ...opts, faults: [...opts.faults], seed: 2025 }, 50);
  assert.deepEqual(p1, p2);
  assert.notDeepEqual(p1, p3);
  assert.ok(p1.every((s) => s.waitMs >= 500 && s.waitMs <= 1500 && s.target >= 0 && s.target < 3 && s.holdMs >= 1900));
  assert.deepEqual(new Set(p1.map((s) => s.kind)), new Set(["kill", "pause", "terminate"]));
});
