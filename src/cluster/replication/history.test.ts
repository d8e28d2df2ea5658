import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { commonPrefix, compareRank, cutHistory, epochAt, lastEpoch, parseReplicaFile, withEpoch, type EpochEntry } from "./history.js";

test("epoch histories: the epoch of an offset, the last record's epoch, cutting and adding", () => {
  const h: EpochEntry[] = [[1, 0], [3, 10], [4, 25]];
  assert.equal(epochAt(h, 0), 1);
  assert.equal(epochAt(h, 9), 1);
  assert.equal(epochAt(h, 10), 3);
  assert.equal(epochAt(h, 1000), 4);
  assert.equal(lastEpoch(h, 0), 0);
  assert.equal(lastEpoch(h, 25), 3, "a log ending at 25 has no record of epoch 4");
  assert.equal(lastEpoch(h, 26), 4);
  assert.deepEqual(cutHistory(h, 25), [[1, 0], [3, 10]]);
  assert.deepEqual(withEpoch(h, 4, 30), h, "the same epoch again adds nothing");
  assert.deepEqual(withEpoch(h, 6, 30), [...h, [6, 30]]);
  assert.throws(() => withEpoch(h, 2, 30), /epoch history/);
});

test("commonPrefix: where two logs stop holding the same records", () => {
  // A deposed leader (epoch 2 went on to 50) and the new leader (epoch 3 from 40).
  assert.equal(commonPrefix([[1, 0], [2, 20]], 50, [[1, 0], [2, 20], [3, 40]], 60), 40);
  // A follower that lags: its whole log is shared.
  assert.equal(commonPrefix([[1, 0]], 15, [[1, 0], [2, 20]], 60), 15);
  // Diverged at the very start.
  assert.equal(commonPrefix([[2, 0]], 10, [[1, 0]], 10), 0);
  // A damaged history ([[0, 0]]) shares nothing.
  assert.equal(commonPrefix([[0, 0]], 30, [[1, 0]], 30), 0);
});

test("commonPrefix agrees with an offset-by-offset comparison of the epochs (property)", () => {
  const history = fc.array(fc.tuple(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 0, max: 40 })), { maxLength: 5 }).map((xs) => {
    const out: EpochEntry[] = [];
    for (const [e, s] of xs.sort((a, b) => a[0] - b[0] || a[1] - b[1])) {
      const last = out[out.length - 1];
      if (last !== undefined && (e === last[0] || s < last[1])) continue;
      out.push([e, s]);
    }
    return out;
  });
  fc.assert(
    fc.property(history, fc.integer({ min: 0, max: 50 }), history, fc.integer({ min: 0, max: 50 }), (a, aEnd, b, bEnd) => {
      let expected = Math.min(aEnd, bEnd);
      for (let o = 0; o < Math.min(aEnd, bEnd); o++) {
        if (epochAt(a, o) !== epochAt(b, o)) {
          expected = o;
          break;
        }
      }
      assert.equal(commonPrefix(a, aEnd, b, bEnd), expected);
    }),
  );
});

test("rank: the newest last epoch first, then the longest log", () => {
  assert.ok(compareRank({ lastEpoch: 3, end: 5 }, { lastEpoch: 2, end: 500 }) > 0);
  assert.ok(compareRank({ lastEpoch: 3, end: 5 }, { lastEpoch: 3, end: 6 }) < 0);
  assert.equal(compareRank({ lastEpoch: 3, end: 6 }, { lastEpoch: 3, end: 6 }), 0);
});

test("replica.json: malformed or out-of-order files are refused", () => {
  assert.deepEqual(parseReplicaFile('{"epoch":3,"history":[[1,0],[3,7]]}'), { epoch: 3, history: [[1, 0], [3, 7]] });
  for (const bad of ["", "[]", '{"epoch":"3","history":[]}', '{"epoch":3,"history":[[3,0],[1,5]]}', '{"epoch":3,"history":[[1,5],[2,0]]}', '{"epoch":3,"history":[[0,0]]}', '{"epoch":3,"history":[[1]]}']) {
    assert.throws(() => parseReplicaFile(bad), Error, bad);
  }
});
