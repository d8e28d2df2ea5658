import { test } from "node:test";
import assert from "node:assert/strict";
import { injectedFaults, progressText } from "./verify-run.js";

test("verify run's progress and verdict count the same faults, and progress shows the run's average rate (they said 6 and 12; the rate was sampled inside fault windows)", () => {
  const faults = ["kill", "start", "pause", "resume", "cut", "heal", "terminate", "start"].map((kind) => ({ kind }));
  assert.equal(injectedFaults(faults), 4, "kill, pause, cut, terminate: healing is not a fault");
  const line = progressText({ phase: "run", elapsedMs: 12_300, opsPerS: 0, opsPerSAvg: 420, ops: 5000, pending: 3, faults: 4, produceOk: 2000, deliveries: 2000 });
  assert.match(line, /\b0 ops\/s now, 420 avg\b/);
  assert.match(line, /\b4 faults$/);
});
