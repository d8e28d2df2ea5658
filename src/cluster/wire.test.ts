import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { clusterToken, tokenMatches } from "./wire.js";

test("a cluster token with a non-ASCII byte is refused, not thrown on (it answered 500, not 403)", () => {
  const token = clusterToken(randomBytes(32));
  assert.equal(tokenMatches(token, token), true);
  // Same number of UTF-16 units, more bytes: timingSafeEqual threw on the unequal buffers.
  const nonAscii = "é" + token.slice(1);
  assert.equal(nonAscii.length, token.length);
  assert.equal(tokenMatches(token, nonAscii), false);
  // As Node's parser hands a header with byte 0xE9 over: one latin1 character.
  assert.equal(tokenMatches(token, Buffer.from([0xe9, ...Buffer.from(token.slice(1))]).toString("latin1")), false);
  assert.equal(tokenMatches(token, token.slice(1)), false);
  assert.equal(tokenMatches(token, undefined), false);
  assert.equal(tokenMatches(token, [token]), false);
});
