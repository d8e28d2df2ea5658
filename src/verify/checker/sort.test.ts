// The checker's sorting and selection must answer exactly what the built-in sort does: the
// measures (lag percentiles, silence after faults) are compared byte for byte across versions.

import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { selectRank, sortTimes } from "./sort.js";

// Times as the checker has them: nonnegative, often repeated, some huge, some tiny fractions.
const time = fc.oneof(fc.nat({ max: 50 }), fc.double({ min: 0, max: 1e13, noNaN: true, noDefaultInfinity: true }), fc.constant(0));
const times = fc.array(time, { minLength: 1, maxLength: 5000 });

test("sortTimes sorts as Float64Array.prototype.sort does, radix path included", () => {
  fc.assert(
    fc.property(fc.array(time, { minLength: 0, maxLength: 6000 }), (xs) => {
      const a = Float64Array.from(xs);
      assert.deepEqual(Array.from(sortTimes(a.slice())), Array.from(a.slice().sort()));
    }),
    { numRuns: 60 },
  );
});

test("selectRank finds the element a sorted copy holds at k, and loses none", () => {
  fc.assert(
    fc.property(times, fc.double({ min: 0, max: 1, noNaN: true }), (xs, p) => {
      const a = Float64Array.from(xs);
      const sorted = a.slice().sort();
      const k = Math.min(a.length - 1, Math.floor(p * a.length));
      assert.equal(selectRank(a, k, 0, a.length), sorted[k]);
      assert.deepEqual(Array.from(a.slice().sort()), Array.from(sorted));
      // The elements below k are the k smallest: a second rank within them answers as the sort.
      const k2 = Math.floor(k / 2);
      assert.equal(selectRank(a, k2, 0, k + 1), sorted[k2]);
    }),
    { numRuns: 200 },
  );
});

test("selectRank on inputs that defeat a median-of-three pivot still answers (sorted, reversed, organ pipe, all equal)", () => {
  const n = 20_000;
  const shapes: Float64Array[] = [
    Float64Array.from({ length: n }, (_, i) => i),
    Float64Array.from({ length: n }, (_, i) => n - i),
    Float64Array.from({ length: n }, (_, i) => (i < n / 2 ? i : n - i)),
    new Float64Array(n).fill(7),
  ];
  for (const a of shapes) {
    const sorted = a.slice().sort();
    for (const k of [0, n >> 1, Math.floor(0.99 * n), n - 1]) assert.equal(selectRank(a.slice(), k, 0, n), sorted[k]);
  }
});
