import { test } from "node:test";
import assert from "node:assert/strict";
import { ManualScheduler } from "./manual.js";

test("manual scheduler fires due timers in deadline order, each at its own instant", () => {
  const s = new ManualScheduler();
  const seen: string[] = [];
  s.after(30, () => seen.push(`a@${s.clock.monoMs()}`));
  s.after(10, () => seen.push(`b@${s.clock.monoMs()}`));
  const every = s.every(20, () => seen.push(`e@${s.clock.monoMs()}`));
  s.advance(9);
  assert.deepEqual(seen, []);
  s.advance(41);
  assert.deepEqual(seen, ["b@10", "e@20", "a@30", "e@40"]);
  every.cancel();
  s.advance(100);
  assert.deepEqual(seen, ["b@10", "e@20", "a@30", "e@40"]);
  assert.equal(s.pending, 0);
  assert.equal(s.clock.monoMs(), 150);
});

test("manual scheduler: a cancelled one-shot never fires, soon() runs on advance, sleep resolves", async () => {
  const s = new ManualScheduler();
  let fired = 0;
  const t = s.after(5, () => fired++);
  t.cancel();
  let soon = 0;
  s.soon(() => soon++);
  const slept = s.sleep(7).then(() => "woke");
  s.advance(10);
  assert.equal(fired, 0);
  assert.equal(soon, 1);
  assert.equal(await slept, "woke");
  assert.throws(() => s.clock.set(1), /only moves forward/);
});
