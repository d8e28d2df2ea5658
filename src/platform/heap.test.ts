import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { MinHeap } from "./heap.js";

test("MinHeap pops keys in nondecreasing order with their values and aux numbers", () => {
  fc.assert(
    fc.property(fc.array(fc.integer({ min: -1000, max: 1000 }), { maxLength: 200 }), (keys) => {
      const h = new MinHeap<string>();
      keys.forEach((k, i) => h.push(k, `v${k}`, i));
      assert.equal(h.size, keys.length);
      const out: number[] = [];
      while (h.size > 0) {
        const k = h.peekKey();
        assert.equal(h.peekValue(), `v${k}`);
        assert.equal(keys[h.peekAux()], k);
        out.push(k);
        h.pop();
      }
      assert.deepEqual(out, [...keys].sort((a, b) => a - b));
      assert.equal(h.peekKey(), Infinity);
      assert.equal(h.peekValue(), undefined);
      h.pop();
      assert.equal(h.size, 0);
    }),
  );
});
