import assert from "node:assert/strict";
import { test } from "node:test";
import { placePartitions, placeReplicaSets } from "./placement.js";

test("placement: least loaded first, ties by node id, counting its own choices", () => {
  assert.deepEqual(placePartitions([{ nodeId: "c", owned: 0 }, { nodeId: "a", owned: 0 }, { nodeId: "b", owned: 0 }], 5), ["a", "b", "c", "a", "b"]);
  assert.deepEqual(placePartitions([{ nodeId: "a", owned: 4 }, { nodeId: "b", owned: 1 }, { nodeId: "c", owned: 2 }], 4), ["b", "b", "c", "b"]);
  assert.deepEqual(placePartitions([{ nodeId: "a", owned: 9 }], 2), ["a", "a"]);
  assert.deepEqual(placePartitions([], 0), []);
  assert.throws(() => placePartitions([], 1), /no live node/);
});

test("placement: the result is balanced whatever the starting load", () => {
  for (let seed = 1; seed < 200; seed++) {
    const n = 1 + (seed % 5);
    const nodes = Array.from({ length: n }, (_, i) => ({ nodeId: `n${i}`, owned: (seed * (i + 3)) % 7 }));
    const count = seed % 23;
    const out = placePartitions(nodes, count);
    const load = new Map(nodes.map((x) => [x.nodeId, x.owned]));
    for (const id of out) load.set(id, load.get(id)! + 1);
    // Greedy onto the minimum: a node got a new partition only if it was at the minimum then,
    // so every node that received one ends at most one above the final minimum.
    const min = Math.min(...load.values());
    for (const id of new Set(out)) assert.ok(load.get(id)! <= min + 1, `seed ${seed}: ${id} overloaded`);
  }
});

test("replica sets: distinct nodes, least loaded first, leaders spread, too few nodes refused", () => {
  const nodes = [{ nodeId: "c", owned: 0 }, { nodeId: "a", owned: 0 }, { nodeId: "b", owned: 0 }];
  assert.deepEqual(placeReplicaSets(nodes, 3, 3), [["a", "b", "c"], ["b", "a", "c"], ["c", "a", "b"]]);
  assert.deepEqual(placeReplicaSets(nodes, 3, 2), [["a", "b"], ["c", "a"], ["b", "c"]]);
  assert.deepEqual(placeReplicaSets([{ nodeId: "a", owned: 5 }, { nodeId: "b", owned: 0 }, { nodeId: "c", owned: 1 }], 1, 2), [["b", "c"]]);
  assert.throws(() => placeReplicaSets(nodes, 1, 4), /3 live nodes for 4 replicas/);
  for (const set of placeReplicaSets(nodes, 20, 3)) assert.equal(new Set(set).size, 3);
});
