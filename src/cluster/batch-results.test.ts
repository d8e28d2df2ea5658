// What a batch split into groups reports per message when not every group was stored: the
// groups' real outcomes (results, or the errors produceGroup throws) mapped back to request order.

import assert from "node:assert/strict";
import { test } from "node:test";
import { NaradError } from "../protocol/errors.js";
import { batchResults } from "./service.js";

test("batch results: stored where each group stored it, not stored after a definite refusal, unknown otherwise", () => {
  // Items 0..5 in request order; three groups, interleaved as keys spread them.
  const groups = [[0, 3], [1, 4], [2, 5]];
  const outcomes: PromiseSettledResult<{ partition: number; offset: number }[]>[] = [
    { status: "fulfilled", value: [{ partition: 0, offset: 7 }, { partition: 0, offset: 8 }] },
    { status: "rejected", reason: new NaradError("forward_failed") },
    { status: "rejected", reason: new NaradError("overloaded", undefined, { retryAfterS: 1 }) },
  ];
  assert.deepEqual(batchResults(6, groups, outcomes), [
    { status: "stored", partition: 0, offset: 7 },
    { status: "unknown", code: "forward_failed" },
    { status: "not_stored", code: "overloaded" },
    { status: "stored", partition: 0, offset: 8 },
    { status: "unknown", code: "forward_failed" },
    { status: "not_stored", code: "overloaded" },
  ]);
});

test("batch results: an error that is not one of the table's may have stored the part", () => {
  const r = batchResults(2, [[1], [0]], [
    { status: "rejected", reason: new TypeError("a bug") },
    { status: "fulfilled", value: [{ partition: 2, offset: 0 }] },
  ]);
  assert.deepEqual(r, [{ status: "stored", partition: 2, offset: 0 }, { status: "unknown", code: "internal" }]);
});

test("the error body carries the results only when there are some", () => {
  const results = [{ status: "unknown", code: "ownership_lost" }] as const;
  assert.deepEqual(new NaradError("forward_failed", "m", { results: [...results] }).toBody(), { error: { code: "forward_failed", message: "m", results } });
  assert.deepEqual(new NaradError("forward_failed", "m").toBody(), { error: { code: "forward_failed", message: "m" } });
});
