import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { decodeBinaryBatch, decodeDeliveries, encodeBinaryBatch, encodeDeliveries, type WireDelivery } from "./wire.js";

const delivery = fc.record({
  partition: fc.integer({ min: 0, max: 1023 }),
  offset: fc.integer({ min: 0, max: 2 ** 48 - 1 }),
  // 31 bits: the top bit of the field says an origin follows (a dead letter).
  deliveryCount: fc.integer({ min: 1, max: 2 ** 31 - 1 }),
  producedAtMs: fc.integer({ min: 0, max: 2 ** 45 }),
  receiptHandle: fc.string({ minLength: 42, maxLength: 42 }).map((s) => Buffer.from(s, "latin1").toString("base64url").padEnd(42, "A").slice(0, 42)),
  owner: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/),
  ownerBoot: fc.stringMatching(/^[0-9a-f]{16}$/),
  key: fc.option(fc.uint8Array({ maxLength: 64 }).map((a) => Buffer.from(a)), { nil: null }),
  payload: fc.uint8Array({ maxLength: 3000 }).map((a) => Buffer.from(a)),
  origin: fc.option(
    fc.record({
      topic: fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/),
      partition: fc.integer({ min: 0, max: 1023 }),
      offset: fc.integer({ min: 0, max: 2 ** 48 - 1 }),
      deliveries: fc.integer({ min: 0, max: 2 ** 32 - 1 }),
      produced_at: fc.integer({ min: 0, max: 2 ** 45 }),
    }),
    { nil: undefined },
  ),
}).map((d) => {
  const { origin, ...rest } = d;
  return origin === undefined ? rest : { ...rest, origin: { ...origin } };
});

test("binary deliveries: decode(encode(x)) is x, and every truncation is refused, never misread", () => {
  fc.assert(
    fc.property(fc.array(delivery, { maxLength: 8 }), (ds: WireDelivery[]) => {
      const b = encodeDeliveries(ds);
      const back = decodeDeliveries(b);
      assert.ok(Array.isArray(back));
      assert.deepEqual(back.map((d) => ({ ...d, key: d.key === null ? null : Buffer.from(d.key), payload: Buffer.from(d.payload) })), ds.map((d) => ({ ...d })));
      // Cutting the body anywhere inside a delivery is a described fault, not a shorter list.
      for (const cut of [1, 7, 22, b.length - 30, b.length - 1]) {
        if (ds.length === 0 || cut >= b.length) continue;
        const r = decodeDeliveries(b.subarray(0, cut));
        if (typeof r !== "string") {
          // A cut that falls exactly between two deliveries decodes to the ones before it.
          assert.ok(r.length < ds.length);
          assert.equal(encodeDeliveries(r).length, cut);
        }
      }
    }),
    { numRuns: 200 },
  );
});

test("binary produce batches: round trip, and malformed bodies are described", () => {
  const msgs = [{ key: "a", payload: Buffer.from("xyz") }, { key: null, payload: Buffer.alloc(0) }, { payload: Buffer.alloc(5000, 1) }];
  const b = encodeBinaryBatch(msgs);
  const back = decodeBinaryBatch(b);
  assert.ok(Array.isArray(back));
  assert.deepEqual(back.map((m) => [m.key, m.payload.length]), [["a", 3], [null, 0], [null, 5000]]);
  assert.match(String(decodeBinaryBatch(b.subarray(0, 2))), /truncated key length/);
  assert.match(String(decodeBinaryBatch(b.subarray(0, 6))), /truncated payload length|truncated key/);
  assert.match(String(decodeBinaryBatch(b.subarray(0, b.length - 1))), /truncated payload/);
  const hugeKey = Buffer.alloc(8);
  hugeKey.writeUInt32BE(5000, 0);
  assert.match(String(decodeBinaryBatch(hugeKey)), /over 4096 bytes/);
});

test("a binary batch decodes the same from any split into chunks as from one buffer, malformed ones included", () => {
  const message = fc.record({
    key: fc.option(fc.string({ maxLength: 40 }), { nil: null }),
    payload: fc.uint8Array({ maxLength: 300 }).map((a) => Buffer.from(a)),
  });
  fc.assert(
    fc.property(fc.array(message, { maxLength: 12 }), fc.array(fc.nat(), { maxLength: 10 }), fc.nat(), (msgs, cuts, trim) => {
      const whole = encodeBinaryBatch(msgs);
      // Sometimes cut the tail off, so malformed bodies are compared too.
      const body = trim % 3 === 0 && whole.length > 0 ? whole.subarray(0, trim % whole.length) : whole;
      const points = [...new Set(cuts.map((c) => (body.length === 0 ? 0 : c % body.length)))].sort((a, b) => a - b);
      const chunks: Buffer[] = [];
      let at = 0;
      for (const p of points) {
        chunks.push(body.subarray(at, p)); // empty chunks included on purpose
        at = p;
      }
      chunks.push(body.subarray(at));
      const a = decodeBinaryBatch(body);
      const b = decodeBinaryBatch(chunks);
      if (typeof a === "string") assert.equal(b, a);
      else {
        assert.ok(Array.isArray(b));
        assert.deepEqual(b.map((m) => [m.key, Buffer.from(m.payload).toString("hex")]), a.map((m) => [m.key, Buffer.from(m.payload).toString("hex")]));
      }
    }),
    { numRuns: 500 },
  );
});
