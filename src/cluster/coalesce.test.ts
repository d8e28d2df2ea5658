import assert from "node:assert/strict";
import { test } from "node:test";
import { Coalescer } from "./coalesce.js";

/** A send whose requests the test answers by hand, in the order it chooses. */
function manualSend() {
  const sent: { key: string; items: number[]; answer: (r: string[] | Error) => void }[] = [];
  const send = (key: string, items: number[]) =>
    new Promise<string[]>((resolve, reject) => sent.push({ key, items, answer: (r) => (r instanceof Error ? reject(r) : resolve(r)) }));
  return { sent, send };
}

const opts = { inFlightMax: 1, itemsMax: 5, bytesMax: 1000, queuedMax: 8 };
const overflow = () => new Error("overflow");
const flush = () => new Promise((r) => setImmediate(r));

test("a lone call leaves at once; calls made while one is on the wire leave together next, each with its own answer", async () => {
  const { sent, send } = manualSend();
  const c = new Coalescer<number, string>(opts, send, () => 1, overflow);
  const first = c.submit("k", 0);
  await flush();
  assert.deepEqual(sent.map((s) => s.items), [[0]]);
  const rest = [1, 2, 3].map((i) => c.submit("k", i));
  await flush();
  assert.equal(sent.length, 1, "nothing more on the wire while one request is");
  sent[0]!.answer(["a0"]);
  assert.equal(await first, "a0");
  await flush();
  assert.deepEqual(sent.map((s) => s.items), [[0], [1, 2, 3]]);
  sent[1]!.answer(["a1", "a2", "a3"]);
  assert.deepEqual(await Promise.all(rest), ["a1", "a2", "a3"]);
});

test("keys do not wait for each other; a failed merged request fails every call in it, and later calls go on", async () => {
  const { sent, send } = manualSend();
  const c = new Coalescer<number, string>(opts, send, () => 1, overflow);
  const a = c.submit("a", 1);
  const b = c.submit("b", 2);
  await flush();
  assert.deepEqual(sent.map((s) => [s.key, s.items]), [["a", [1]], ["b", [2]]]);
  const a2 = c.submit("a", 3);
  const a3 = c.submit("a", 4);
  sent[0]!.answer(new Error("owner gone"));
  await assert.rejects(a, /owner gone/);
  await flush();
  sent[2]!.answer(new Error("still gone"));
  await assert.rejects(a2, /still gone/);
  await assert.rejects(a3, /still gone/);
  sent[1]!.answer(["b2"]);
  assert.equal(await b, "b2");
  const a4 = c.submit("a", 5);
  await flush();
  sent[3]!.answer(["a5"]);
  assert.equal(await a4, "a5");
});

test("a merged request holds at most itemsMax calls and bytesMax bytes (a bigger call alone), and past queuedMax calls are refused", async () => {
  const { sent, send } = manualSend();
  const sizes = new Map([[20, 2000]]);
  const c = new Coalescer<number, string>(opts, send, (i) => sizes.get(i) ?? 300, overflow);
  const first = c.submit("k", 0);
  await flush();
  const queued = [10, 11, 12, 13, 20, 14, 15, 16].map((i) => c.submit("k", i));
  await assert.rejects(c.submit("k", 99), /overflow/);
  sent[0]!.answer(["x"]);
  await first;
  await flush();
  // 300-byte calls: three fit in 1000 bytes.
  assert.deepEqual(sent[1]!.items, [10, 11, 12]);
  sent[1]!.answer(["r10", "r11", "r12"]);
  await flush();
  assert.deepEqual(sent[2]!.items, [13]); // the 2000-byte call does not fit beside it
  sent[2]!.answer(["r13"]);
  await flush();
  assert.deepEqual(sent[3]!.items, [20]); // alone, though over bytesMax
  sent[3]!.answer(["r20"]);
  await flush();
  assert.deepEqual(sent[4]!.items, [14, 15, 16]);
  sent[4]!.answer(["r14", "r15", "r16"]);
  assert.deepEqual(await Promise.all(queued), ["r10", "r11", "r12", "r13", "r20", "r14", "r15", "r16"]);
});
