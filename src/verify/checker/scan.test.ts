// The fast scanner must accept and reject exactly what the JSON.parse path does, with the same
// messages and the same judgement. Property: take a simulated history, damage or reshape one line
// (valid reshapings and invalid ones), and compare `check` (scanner) with `checkText` (JSON.parse).

import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { check, checkText } from "./check.js";
import { simulateHistory } from "./simulate.js";
import type { Report } from "./types.js";

type Outcome = { report: Report } | { error: string };

async function viaScanner(text: string): Promise<Outcome> {
  try {
    return { report: await check({ text }) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

function viaParse(text: string): Outcome {
  try {
    return { report: checkText(text) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

function shuffleKeys(o: Record<string, unknown>, seed: number): Record<string, unknown> {
  const keys = Object.keys(o);
  const out: Record<string, unknown> = {};
  keys.sort((a, b) => ((a.charCodeAt(0) * 31 + seed) % 7) - ((b.charCodeAt(0) * 31 + seed) % 7) || a.localeCompare(b));
  for (const k of keys) out[k] = o[k];
  return out;
}

/** Ways to reshape or damage one line; each gets the line's text and object and a number to vary. */
const EDITS: Array<(text: string, obj: Record<string, unknown>, n: number) => string> = [
  (_t, o, n) => JSON.stringify(shuffleKeys({ ...o, value: shuffleKeys(o["value"] as Record<string, unknown>, n) }, n)),
  (_t, o) => JSON.stringify(o, null, 1).replace(/\n/g, " "),
  (t) => t.replace(/"msg":"m/, '"msg":"\\u006d'),
  (t) => t.replace(/"msg":"m/, '"msg":"é'),
  (t) => t.replace(/"index":(\d+)/, '"index":$1.0'),
  (t) => t.replace(/"time_ns":(\d+)/, '"time_ns":$1e0'),
  (t) => t.replace(/"offset":(\d+)/, '"offset":-$1'),
  (t) => t.replace(/"partition":(\d+)/, '"partition":"$1"'),
  (t) => t.replace(/,"f":"([a-z]+)"/, ',"f":"$1","f":"produce"'),
  (t) => t.replace(/"value":\{/, '"value":{"extra":[1,{"a":null,"b":[true,false,-1.5e3]}],'),
  (t) => t.replace(/"value":\{/, '"value":{"topic":"t",'),
  (t) => t.replace(/"process":"[^"]*",/, ""),
  (t) => t.replace(/"type":"[a-z]+"/, '"type":"done"'),
  (t) => t.replace(/"f":"[a-z]+"/, '"f":"publish"'),
  (t) => t.slice(0, Math.max(1, t.length - 3)),
  (t) => t.replace(/"process":"/, '"process":"\u0001'),
  (t) => t + "\r",
  (t) => t + " x",
  (t) => t.replace(/"delivery":"/, '"delivery":"\\"'),
  (t) => t.replace(/"msg":"[^"]*"/, '"msg":12345'),
  (t) => t.replace(/"msg":"[^"]*"/, '"msg":null'),
  (t) => t.replace(/"status":\d+/, '"status":"204"'),
  (t) => t.replace(/"node":"[^"]*"/, '"node":""'),
  (t) => t.replace(/"delivery_count":\d+/, '"delivery_count":0'),
  (t) => t.replace(/"msgs":\[\[(\d+),/, '"msgs":[[$1.5,'),
  (t) => t.replace(/"topic":"t"/, '"topic":"t\\/x"'),
  () => "",
  () => "[]",
];

test("the fast scanner and the JSON.parse path agree on reshaped and damaged histories", async () => {
  await fc.assert(
    fc.asyncProperty(
      fc.integer({ min: 1, max: 0x7fffffff }),
      fc.nat(),
      fc.integer({ min: 0, max: EDITS.length - 1 }),
      fc.nat(),
      fc.boolean(),
      async (seed, linePick, edit, n, swap) => {
        const lines = simulateHistory({ seed, durationMs: 150, faultEveryMs: 60, visibilityTimeoutMs: 60 }).map((l) => JSON.stringify(l));
        const i = 1 + (linePick % (lines.length - 1));
        lines[i] = EDITS[edit]!(lines[i]!, JSON.parse(lines[i]!) as Record<string, unknown>, n);
        if (swap && i + 1 < lines.length) [lines[i], lines[i + 1]] = [lines[i + 1]!, lines[i]!];
        const text = lines.join("\n") + (n % 2 === 0 ? "\n" : "");
        const fast = await viaScanner(text);
        const slow = viaParse(text);
        assert.deepEqual(fast, slow);
      },
    ),
    { numRuns: 120 },
  );
});

test("the fast scanner reads a history split into chunks at every awkward place", async () => {
  const text = simulateHistory({ seed: 7, durationMs: 150 }).map((l) => JSON.stringify(l)).join("\r\n") + "\n";
  const expected = checkText(text);
  for (const size of [1, 7, 64, 1000]) {
    const bytes = Buffer.from(text);
    const chunks = async function* (): AsyncGenerator<Buffer> {
      for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
    };
    assert.deepEqual(await check(chunks()), expected);
  }
});
