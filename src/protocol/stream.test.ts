// The streaming protocol's codecs and frame reader (src/protocol/stream.ts): frames round-trip,
// a frame cut anywhere across chunks comes out whole once, a length field over the limit is
// refused with the frame's id before its bytes are kept, and one under the header is refused.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  decodeError,
  decodeProduce,
  decodeProduced,
  encodeError,
  encodeProduce,
  FRAME,
  FrameError,
  FrameReader,
  frameId,
  frameType,
  OversizeFrame,
  producedBytes,
  produceFrameBytesMax,
  writeProduced,
} from "./stream.js";

test("produce, produced and error frames round-trip", () => {
  const f = encodeProduce(7, "orders", "clé", Buffer.from("payload"));
  assert.equal(f.readUInt32BE(0), f.length - 4);
  assert.deepEqual([frameType(f), frameId(f)], [FRAME.produce, 7]);
  const p = decodeProduce(f, 4096);
  assert.deepEqual([p.id, p.topic, p.key, p.payload.toString()], [7, "orders", "clé", "payload"]);
  assert.equal(decodeProduce(encodeProduce(8, "t", null, Buffer.alloc(0)), 4096).key, null);
  assert.equal(decodeProduce(encodeProduce(9, "t", "", Buffer.alloc(0)), 4096).key, "", "the empty key is a key");
  const withProducer = decodeProduce(encodeProduce(10, "t", null, Buffer.from("x"), { id: Buffer.alloc(16, 1), sequence: 42n }), 4096);
  assert.equal(withProducer.producer?.sequence, 42n);
  assert.throws(() => decodeProduce(encodeProduce(11, "t", "k".repeat(10), Buffer.alloc(0)), 4), FrameError);

  const owner = { node: "n2", boot: "b00t" };
  for (const o of [undefined, owner]) {
    const b = Buffer.alloc(producedBytes(o));
    assert.equal(writeProduced(b, 0, 5, 3, 2 ** 40 + 17, o), b.length);
    const d = decodeProduced(b);
    assert.deepEqual([d.id, d.partition, d.offset, d.owner, d.ownerBoot], [5, 3, 2 ** 40 + 17, o?.node, o?.boot]);
  }
  const e = decodeError(encodeError(FRAME.error, 12, { status: 429, code: "overloaded", definite: true, message: "wait", retryAfterS: 1 }));
  assert.deepEqual(e, { status: 429, code: "overloaded", definite: true, message: "wait", retryAfterS: 1 });
  assert.equal(decodeError(encodeError(FRAME.goaway, 0, { status: 500, code: "internal", definite: false, message: "x".repeat(5000) })).message.length, 1024, "a long message is cut");
});

test("the frame reader gives each frame once whatever the chunking, and refuses a length over the limit by id before keeping its bytes", () => {
  const frames = [encodeProduce(1, "a", null, Buffer.from("one")), encodeProduce(2, "bb", "k", Buffer.alloc(300, 7)), encodeProduce(3, "c", null, Buffer.alloc(0))];
  const all = Buffer.concat(frames);
  for (const cut of [1, 3, 5, 11, 12, 13, 64, all.length]) {
    const r = new FrameReader(produceFrameBytesMax(1 << 20, 4096));
    const ids: number[] = [];
    for (let at = 0; at < all.length; at += cut) {
      r.push(all.subarray(at, Math.min(all.length, at + cut)));
      for (let f = r.next(); f !== null; f = r.next()) ids.push(frameId(f));
    }
    assert.deepEqual(ids, [1, 2, 3], `chunks of ${cut} bytes`);
    assert.equal(r.buffered, 0);
  }
  const big = Buffer.alloc(12);
  big.writeUInt32BE(2_000_000, 0);
  big.writeUInt32BE(99, 8);
  const r = new FrameReader(1_000_000);
  r.push(big.subarray(0, 6));
  assert.equal(r.next(), null, "waits for the id before refusing");
  r.push(big.subarray(6));
  assert.throws(() => r.next(), (e: unknown) => e instanceof OversizeFrame && e.id === 99 && e.bytes === 2_000_004);
  const short = Buffer.alloc(8);
  short.writeUInt32BE(3, 0);
  const r2 = new FrameReader(1000);
  r2.push(short);
  assert.throws(() => r2.next(), FrameError);
});
