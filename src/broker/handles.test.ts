import assert from "node:assert/strict";
import { createCipheriv, createHmac, randomBytes } from "node:crypto";
import { test } from "node:test";
import { HandleCodec, MINT_RUN_HANDLES, MINT_RUNS_MAX, RECENT_HANDLES_MAX } from "./handles.js";

const secret = randomBytes(32);
const item = { partition: 1, offset: 5, tag: 9 };

test("a minted handle verifies to its fields, and the same fields always mint the same handle", () => {
  const c = new HandleCodec(secret, 3, 7, "b007");
  const items = Array.from({ length: 300 }, (_, i) => ({ partition: i % 5, offset: 2 ** 40 + i, tag: i * 7919 }));
  const a = c.mint(11, items);
  const b = c.mint(11, items); // the kept cipher carries no state from one call to the next
  assert.deepEqual(a, b);
  assert.ok(a.every((h) => h.length === 42));
  assert.deepEqual(
    c.verify(11, a),
    items.map((it) => ({ ...it, nodeNum: 3, bootSeq: 7, current: true })),
  );
});

test("handles of another topic incarnation, edited, or garbage fail; an earlier or later boot, or another node, verifies but is not current", () => {
  const [fromEarlierBoot] = new HandleCodec(secret, 3, 6, "a").mint(11, [item]);
  const c = new HandleCodec(secret, 3, 7, "b");
  const [h] = c.mint(11, [item]);
  // A boot sequence above ours: minted before an older node.json was restored.
  const [future] = new HandleCodec(secret, 3, 8, "c").mint(11, [item]);
  const [otherNode] = new HandleCodec(secret, 4, 7, "d").mint(11, [item]);
  const flipped = h!.slice(0, 30) + (h![30] === "A" ? "B" : "A") + h!.slice(31);
  const otherSecret = new HandleCodec(randomBytes(32), 3, 7, "b").mint(11, [item])[0]!;
  const got = c.verify(11, [h!, fromEarlierBoot!, future!, otherNode!, flipped, otherSecret, "", "x".repeat(42), "!".repeat(42)]);
  assert.deepEqual(got[0], { nodeNum: 3, bootSeq: 7, ...item, current: true });
  assert.deepEqual(got[1], { nodeNum: 3, bootSeq: 6, ...item, current: false });
  assert.deepEqual(got[2], { nodeNum: 3, bootSeq: 8, ...item, current: false });
  assert.deepEqual(got[3], { nodeNum: 4, bootSeq: 7, ...item, current: false });
  assert.deepEqual(got.slice(4), [null, null, null, null, null]);
  assert.deepEqual(c.verify(12, [h!]), [null]);
});

test("a handle whose last base64 character is non-canonical (its unused low bits set) was accepted as the handle: only the minted text verifies", () => {
  const c = new HandleCodec(secret, 0, 3, "boot");
  const [h] = c.mint(11, [{ partition: 1, offset: 42, tag: 7 }]);
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  const last = alphabet.indexOf(h!.at(-1)!);
  const variants = Array.from({ length: 15 }, (_, i) => h!.slice(0, 41) + alphabet[(last & ~15) | ((last & 15) ^ (i + 1))]!);
  for (const v of variants) assert.ok(Buffer.from(v, "base64url").equals(Buffer.from(h!, "base64url")), "the same bytes");
  const got = c.verify(11, [h!, ...variants]);
  assert.deepEqual(got[0], { nodeNum: 0, bootSeq: 3, partition: 1, offset: 42, tag: 7, current: true });
  assert.deepEqual(got.slice(1), variants.map(() => null));
});

test("a handle of an earlier process with the same boot sequence (an older node.json restored) verifies but is not current", () => {
  const before = new HandleCodec(secret, 0, 5, "first-process");
  const after = new HandleCodec(secret, 0, 5, "second-process");
  const [h] = before.mint(11, [item]);
  assert.deepEqual(after.verify(11, [h!]), [{ nodeNum: 0, bootSeq: 5, ...item, current: false }]);
});

test("every single-bit edit of a live handle is forged (400), its boot tag included", () => {
  const c = new HandleCodec(secret, 2, 5, "b");
  const [h] = c.mint(11, [item]);
  const bytes = Buffer.from(h!, "base64url");
  const edited: string[] = [];
  for (let bit = 0; bit < bytes.length * 8; bit++) {
    const b = Buffer.from(bytes);
    b[bit >> 3]! ^= 1 << (bit & 7);
    edited.push(b.toString("base64url"));
  }
  const got = c.verify(11, edited);
  assert.deepEqual(got.map((x, bit) => (x === null ? null : bit)).filter((x) => x !== null), []);
});

test("a handle of version 2, minted before the boot tag existed (one 12-byte MAC), still verifies as an earlier process's", () => {
  // The old layout: bytes 19..30 were the first 12 bytes of AES(key(node, boot), block).
  const key = createHmac("sha256", secret).update("narad-handle-key/0/5").digest().subarray(0, 16);
  const block = Buffer.alloc(16);
  block.writeUInt32BE(11, 0);
  block.writeUInt16BE(item.partition, 4);
  block.writeUIntBE(item.offset, 6, 6);
  block.writeUInt32BE(item.tag, 12);
  const cipher = createCipheriv("aes-128-ecb", key, null).setAutoPadding(false);
  const mac = cipher.update(block);
  const b = Buffer.alloc(31);
  b.writeUInt8(2, 0);
  b.writeUInt16BE(0, 1);
  b.writeUInt32BE(5, 3);
  b.writeUInt16BE(item.partition, 7);
  b.writeUIntBE(item.offset, 9, 6);
  b.writeUInt32BE(item.tag, 15);
  mac.copy(b, 19, 0, 12);
  const c = new HandleCodec(secret, 0, 6, "now");
  assert.deepEqual(c.verify(11, [b.toString("base64url")]), [{ nodeNum: 0, bootSeq: 5, ...item, current: false }]);
  b[30]! ^= 1;
  assert.deepEqual(c.verify(11, [b.toString("base64url")]), [null], "an edited one is forged");
});

test("one handle at a time (a single consume's and ack's path: one CBC call, remembered handles) mints the bytes a batch mints, and checks as the full check does", () => {
  const one = new HandleCodec(secret, 2, 5, "b");
  const batch = new HandleCodec(secret, 2, 5, "b"); // the same process identity, nothing remembered
  const items = Array.from({ length: 50 }, (_, i) => ({ partition: i % 3, offset: 2 ** 47 + i, tag: 0xffff_fff0 + (i % 16) }));
  const bulk = batch.mint(11, items);
  // Minted one at a time, with checks between them that run the same kept CBC cipher.
  const singly = items.map((it, i) => {
    const [h] = one.mint(11, [it]);
    if (i > 0) assert.deepEqual(one.verify(11, [bulk[i - 1]!]), [{ ...items[i - 1]!, nodeNum: 2, bootSeq: 5, current: true }]);
    return h!;
  });
  assert.deepEqual(singly, bulk);
  // Remembered by `one`, not by `batch`: both check every one alike, one at a time and together.
  for (const c of [one, batch]) {
    for (const [i, h] of singly.entries()) assert.deepEqual(c.verify(11, [h]), [{ ...items[i]!, nodeNum: 2, bootSeq: 5, current: true }]);
    assert.deepEqual(c.verify(11, singly), items.map((it) => ({ ...it, nodeNum: 2, bootSeq: 5, current: true })));
    assert.deepEqual(c.verify(12, [singly[0]!]), [null], "another incarnation of the topic");
  }
  // Every single-bit edit, checked alone, is forged; so is the handle of an earlier process.
  const bytes = Buffer.from(singly[7]!, "base64url");
  for (let bit = 0; bit < bytes.length * 8; bit++) {
    const b = Buffer.from(bytes);
    b[bit >> 3]! ^= 1 << (bit & 7);
    assert.deepEqual(one.verify(11, [b.toString("base64url")]), [null], `bit ${bit}`);
  }
  const [earlier] = new HandleCodec(secret, 2, 5, "a").mint(11, [item]);
  assert.deepEqual(one.verify(11, [earlier!]), [{ ...item, nodeNum: 2, bootSeq: 5, current: false }]);
});

test("a handle minted one at a time and since forgotten (more than RECENT_HANDLES_MAX minted after it) still checks, through the full check", () => {
  const c = new HandleCodec(secret, 0, 9, "b");
  const [first] = c.mint(11, [item]);
  for (let i = 0; i < RECENT_HANDLES_MAX + 10; i++) c.mint(11, [{ partition: 0, offset: i, tag: i }]);
  assert.deepEqual(c.verify(11, [first!]), [{ ...item, nodeNum: 0, bootSeq: 9, current: true }]);
  assert.deepEqual(c.verify(11, [first!.slice(0, 41) + (first!.at(-1) === "A" ? "E" : "A")]), [null]);
});

test("single handles minted in sequence (a partition's fresh messages, tags counting up) come from runs computed ahead, byte for byte what a batch mints, across runs, breaks, wraps and interleaved partitions", () => {
  const one = new HandleCodec(secret, 4, 6, "b");
  const batch = new HandleCodec(secret, 4, 6, "b");
  // Three partitions taken in turn, as consumes go round them; partition 2's tags wrap past 2^32;
  // partition 1 is broken by redeliveries (an older offset and the next tag) now and then.
  const next = [{ offset: 0, tag: 1 }, { offset: 1000, tag: 77 }, { offset: 2 ** 40, tag: 0xffff_ffe0 }];
  const items: { partition: number; offset: number; tag: number }[] = [];
  for (let i = 0; i < 3 * (3 * MINT_RUN_HANDLES + 5); i++) {
    const partition = i % 3;
    const n = next[partition]!;
    if (partition === 1 && i % 37 === 0) {
      items.push({ partition, offset: n.offset - 5, tag: n.tag >>> 0 }); // a redelivery: off the sequence
      n.tag++;
      continue;
    }
    items.push({ partition, offset: n.offset, tag: n.tag >>> 0 });
    n.offset++;
    n.tag++;
  }
  const singly = items.map((it) => one.mint(11, [it])[0]!);
  assert.deepEqual(singly, batch.mint(11, items));
  assert.deepEqual(batch.verify(11, singly), items.map((it) => ({ ...it, nodeNum: 4, bootSeq: 6, current: true })));
  // A mint that jumps back into a run it already passed (the same handle again) still matches.
  const again = one.mint(11, [items[3]!])[0];
  assert.equal(again, singly[3]);
});

test("runs computed ahead are kept for at most MINT_RUNS_MAX partitions: past it they start again, the handles unchanged", () => {
  const one = new HandleCodec(secret, 0, 3, "b");
  const batch = new HandleCodec(secret, 0, 3, "b");
  const items: { partition: number; offset: number; tag: number }[] = [];
  // Each partition's second mint starts its run; the partition past the bound drops them all.
  for (let round = 0; round < 3; round++) for (let p = 0; p < MINT_RUNS_MAX + 7; p++) items.push({ partition: p, offset: round, tag: round + 1 });
  const minted = items.map((it) => one.mint(11, [it])[0]!);
  assert.deepEqual(minted, batch.mint(11, items));
});
