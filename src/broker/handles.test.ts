import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { HandleCodec } from "./handles.js";

const secret = randomBytes(32);

test("a minted handle verifies to its fields, and the same fields always mint the same handle", () => {
  const c = new HandleCodec(secret, 3, 7);
  const items = Array.from({ length: 300 }, (_, i) => ({ partition: i % 5, offset: 2 ** 40 + i, tag: i * 7919 }));
  const a = c.mint(11, items);
  const b = c.mint(11, items); // the kept cipher carries no state from one call to the next
  assert.deepEqual(a, b);
  assert.ok(a.every((h) => h.length === 42));
  assert.deepEqual(
    c.verify(11, a),
    items.map((it) => ({ ...it, nodeNum: 3, bootSeq: 7 })),
  );
});

test("handles of another topic incarnation, edited, from a future boot or garbage fail; an earlier boot still verifies", () => {
  const old = new HandleCodec(secret, 3, 6);
  const [fromEarlierBoot] = old.mint(11, [{ partition: 1, offset: 5, tag: 9 }]);
  const c = new HandleCodec(secret, 3, 7);
  const [h] = c.mint(11, [{ partition: 1, offset: 5, tag: 9 }]);
  const future = new HandleCodec(secret, 3, 8).mint(11, [{ partition: 1, offset: 5, tag: 9 }])[0]!;
  const flipped = h!.slice(0, 30) + (h![30] === "A" ? "B" : "A") + h!.slice(31);
  const otherSecret = new HandleCodec(randomBytes(32), 3, 7).mint(11, [{ partition: 1, offset: 5, tag: 9 }])[0]!;
  const got = c.verify(11, [h!, fromEarlierBoot!, future, flipped, otherSecret, "", "x".repeat(42), "!".repeat(42)]);
  assert.deepEqual(got[0], { nodeNum: 3, bootSeq: 7, partition: 1, offset: 5, tag: 9 });
  assert.deepEqual(got[1], { nodeNum: 3, bootSeq: 6, partition: 1, offset: 5, tag: 9 });
  assert.deepEqual(got.slice(2), [null, null, null, null, null, null]);
  assert.deepEqual(c.verify(12, [h!]), [null]);
});

test("a handle whose last base64 character is non-canonical (its unused low bits set) was accepted as the handle: only the minted text verifies", () => {
  const c = new HandleCodec(secret, 0, 3);
  const [h] = c.mint(11, [{ partition: 1, offset: 42, tag: 7 }]);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const last = alphabet.indexOf(h!.at(-1)!);
  const variants = Array.from({ length: 15 }, (_, i) => h!.slice(0, 41) + alphabet[(last & ~15) | ((last & 15) ^ (i + 1))]!);
  for (const v of variants) assert.ok(Buffer.from(v, "base64url").equals(Buffer.from(h!, "base64url")), "the same bytes");
  const got = c.verify(11, [h!, ...variants]);
  assert.deepEqual(got[0], { nodeNum: 0, bootSeq: 3, partition: 1, offset: 42, tag: 7 });
  assert.deepEqual(got.slice(1), variants.map(() => null));
});
