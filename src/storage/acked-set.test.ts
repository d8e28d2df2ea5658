// AckedSet against a plain Set model, with random operation sequences (fast-check, seeded).

import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { AckedSet } from "./acked-set.js";

const UNIVERSE = 64;

type Op = { kind: "add"; offset: number } | { kind: "range"; start: number; len: number } | { kind: "floor"; offset: number };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant("add" as const), offset: fc.nat(UNIVERSE - 1) }) },
  {
    weight: 2,
    arbitrary: fc.record({ kind: fc.constant("range" as const), start: fc.nat(UNIVERSE - 1), len: fc.nat(10) }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("floor" as const), offset: fc.nat(UNIVERSE) }) },
);

test("AckedSet matches a Set model: membership, floor, count, ranges", () => {
  fc.assert(
    fc.property(fc.array(opArb, { maxLength: 200 }), (ops) => {
      const set = new AckedSet();
      const model = new Set<number>();
      for (const op of ops) {
        if (op.kind === "add") {
          const added = set.add(op.offset);
          assert.equal(added, !model.has(op.offset));
          model.add(op.offset);
        } else if (op.kind === "range") {
          set.addRange(op.start, op.start + op.len);
          for (let o = op.start; o < op.start + op.len; o++) model.add(o);
        } else {
          set.raiseFloor(op.offset);
          for (let o = 0; o < op.offset; o++) model.add(o);
        }
        let floor = 0;
        while (model.has(floor)) floor++;
        assert.equal(set.floor, floor, "the floor is the lowest unacked offset");
        for (let o = 0; o < UNIVERSE + 12; o++) assert.equal(set.has(o), model.has(o), `has(${o})`);
        let above = 0;
        for (const o of model) if (o >= floor) above++;
        assert.equal(set.ackedAboveFloor, above);
        let prevEnd = floor;
        set.forEachRange((s, e) => {
          assert.ok(s > prevEnd && e > s, "ranges sorted, disjoint, not touching");
          prevEnd = e;
        });
      }
    }),
    { seed: 20261201, numRuns: 300 },
  );
});

test("AckedSet: in-order acks keep no ranges; one stuck offset keeps one range", () => {
  const set = new AckedSet();
  for (let o = 0; o < 100_000; o++) set.add(o);
  assert.equal(set.floor, 100_000);
  assert.equal(set.rangeCount, 0);
  for (let o = 100_001; o < 1_100_000; o++) set.add(o);
  assert.equal(set.floor, 100_000);
  assert.equal(set.rangeCount, 1);
  assert.equal(set.ackedAboveFloor, 999_999);
  set.add(100_000);
  assert.equal(set.floor, 1_100_000);
  assert.equal(set.rangeCount, 0);
});
