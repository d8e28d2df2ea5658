// Issue 16 ("what a new user hits in the first hour"), the SDK's items: regression tests of what a
// new user met, each named after what broke. Item 1: an oversized produce, a definite refusal,
// was reported as ambiguous about half the time. Item 5: process() and the constructor.

import { before, describe, it } from "node:test";
import { deadPort, nodeForSuite, refusal } from "./support/suite-node.js";
import assert from "node:assert/strict";
import { connect } from "node:net";
import { Pool } from "undici";
import { Narad, NaradConnectionError } from "../src/client/index.js";
import { LIMITS } from "../src/protocol/wire.js";
import { waitFor } from "./harness.js";



describe("issue 16 item 1: an oversized produce is a definite refusal", () => {
  const suite = nodeForSuite();
  before(async () => {
    const c = new Narad({ url: suite.node.url });
    await c.createTopic({ name: "big", partitions: 1 });
    await c.close();
  });

  it("the SDK refuses a message over 1 MiB before sending it (it was NaradAmbiguousError write EPIPE)", async () => {
    // Nothing listens: a request that was sent would be a NaradConnectionError.
    const c = new Narad({ url: `http://127.0.0.1:${await deadPort()}` });
    try {
      for (const size of [LIMITS.messageBytesMax + 1, 4 * LIMITS.messageBytesMax]) {
        const e = await refusal(c.produce("big", Buffer.alloc(size)));
        assert.equal(e.code, "payload_too_large");
        assert.equal(e.status, 413);
        assert.equal(e.definite, true);
        assert.match(e.message, /nothing was sent/);
      }
      const s = await refusal(c.produce("big", "é".repeat(LIMITS.messageBytesMax / 2 + 1)));
      assert.equal(s.code, "payload_too_large", "a string is measured in UTF-8 bytes");
      const k = await refusal(c.produce("big", "x", { key: "k".repeat(LIMITS.keyBytesMax + 1) }));
      assert.equal(k.code, "invalid_argument");
      const inBatch = await refusal(c.produceBatch("big", [{ payload: "ok" }, { payload: Buffer.alloc(LIMITS.messageBytesMax + 1) }]));
      assert.equal(inBatch.code, "payload_too_large");
      assert.match(inBatch.message, /messages\[1\]/);
      const many = await refusal(c.produceBatch("big", Array.from({ length: LIMITS.batchMessagesMax + 1 }, () => ({ payload: "x" }))));
      assert.equal(many.code, "batch_too_large");
      const fat = Array.from({ length: 17 }, () => ({ payload: Buffer.alloc(LIMITS.messageBytesMax) }));
      for (const encoding of ["binary", "json"] as const) {
        const e = await refusal(c.produceBatch("big", fat, { encoding }));
        assert.equal(e.code, "batch_too_large", encoding);
        assert.equal(e.definite, true);
      }
      // Below the limits the request is sent: here, to nobody.
      await assert.rejects(c.produce("big", Buffer.alloc(LIMITS.messageBytesMax)), NaradConnectionError);
    } finally {
      await c.destroy();
    }
  });

  it("a message of exactly 1 MiB is still stored", async () => {
    const c = new Narad({ url: suite.node.url });
    try {
      const r = await c.produce("big", Buffer.alloc(LIMITS.messageBytesMax, 7));
      assert.equal(r.partition, 0);
    } finally {
      await c.close();
    }
  });

  it("the node's early 413 reaches a client still writing the body (it was lost to the RST of an unread socket)", async () => {
    // A plain HTTP client, not the SDK (which no longer sends these): 20 tries of each size were
    // about half write EPIPE / ECONNRESET before the lingering close.
    const pool = new Pool(suite.node.url, { connections: 4, pipelining: 1 });
    try {
      const cases = [
        { path: "/v1/topics/big/messages", type: "application/octet-stream", size: LIMITS.messageBytesMax + 1, code: "payload_too_large" },
        { path: "/v1/topics/big/messages", type: "application/octet-stream", size: 4 * LIMITS.messageBytesMax, code: "payload_too_large" },
        { path: "/v1/topics/big/messages/batch", type: "application/json", size: LIMITS.batchBodyBytesMax + 1, code: "batch_too_large" },
      ];
      for (const k of cases) {
        const body = Buffer.alloc(k.size, 0x61);
        for (let i = 0; i < 20; i++) {
          const res = await pool.request({ method: "POST", path: k.path, headers: { "content-type": k.type }, body });
          const text = await res.body.text();
          assert.equal(res.statusCode, 413, `${k.size} bytes, try ${i}: ${text}`);
          assert.equal((JSON.parse(text) as { error: { code: string } }).error.code, k.code);
        }
      }
    } finally {
      await pool.close();
    }
  });

  it("a chunked body found too large mid-way gets its 413, then a FIN, while the client keeps writing", async () => {
    const url = new URL(suite.node.url);
    const sock = connect(Number(url.port), url.hostname);
    let answer = "";
    let ended = false;
    let error: Error | undefined;
    sock.on("data", (b: Buffer) => (answer += b.toString("latin1")));
    sock.on("end", () => (ended = true));
    sock.on("error", (e) => (error = e));
    await new Promise<void>((r) => sock.once("connect", () => r()));
    sock.write(`POST /v1/topics/big/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n`);
    const chunk = Buffer.alloc(64 * 1024, 0x62);
    const framed = Buffer.concat([Buffer.from(`${chunk.length.toString(16)}\r\n`), chunk, Buffer.from("\r\n")]);
    // Write until the answer is in, and some more after it: the node reads and drops it.
    let written = 0;
    let afterAnswer = 0;
    while (afterAnswer < 8 && error === undefined && !sock.destroyed) {
      await new Promise<void>((r) => {
        if (sock.write(framed)) return r();
        sock.once("drain", () => r());
        sock.once("close", () => r());
      });
      written += chunk.length;
      if (answer.includes("\r\n\r\n")) afterAnswer++;
      assert.ok(written < 64 * LIMITS.messageBytesMax, "no answer after 64 MiB");
    }
    await waitFor(() => ended || error !== undefined, { what: "the node's FIN" });
    assert.equal(error, undefined, `the client's writes failed: ${String(error)}`);
    assert.match(answer, /^HTTP\/1\.1 413 /);
    assert.match(answer, /"payload_too_large"/);
    assert.match(answer, /connection: close/i);
    sock.end();
    await new Promise<void>((r) => (sock.destroyed ? r() : sock.once("close", () => r())));
    assert.equal(error, undefined);
  });
});

describe("issue 16 item 5: process() and the client's URL", () => {
  const suite = nodeForSuite();

  it("process() at concurrency 16 prints no MaxListenersExceededWarning (each pooled request added an abort listener to one shared signal)", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => void warnings.push(w);
    process.on("warning", onWarning);
    const c = new Narad({ url: suite.node.url });
    try {
      await c.createTopic({ name: "wide", partitions: 4 });
      await c.produceBatch("wide", Array.from({ length: 64 }, (_, i) => ({ payload: `m${i}` })));
      const ac = new AbortController();
      const seen = new Set<string>();
      await c.process(
        "wide",
        async (m) => {
          seen.add(m.text());
          if (seen.size === 64) ac.abort();
        },
        { concurrency: 16, waitMs: 1000, signal: ac.signal },
      );
      assert.equal(seen.size, 64);
      // Warnings are emitted on the next tick; one turn of the event loop lets any arrive.
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(warnings.map((w) => `${w.name}: ${w.message}`), []);
    } finally {
      process.off("warning", onWarning);
      await c.close();
    }
  });

  it("process() on a dead URL calls onError with the connection error at once (it retried silently for about two minutes)", async () => {
    const c = new Narad({ url: `http://127.0.0.1:${await deadPort()}` });
    try {
      const ac = new AbortController();
      const told: [unknown, unknown][] = [];
      await c.process("t", () => assert.fail("nothing to handle"), {
        signal: ac.signal,
        onError: (err, m) => {
          told.push([err, m]);
          ac.abort();
        },
      });
      assert.equal(told.length, 1);
      assert.ok(told[0]![0] instanceof NaradConnectionError, String(told[0]![0]));
      assert.equal(told[0]![1], null, "no message goes with a failed consume");
    } finally {
      await c.destroy();
    }
  });

  it("a throw from onError on a failed consume ends process() with it", async () => {
    const c = new Narad({ url: `http://127.0.0.1:${await deadPort()}` });
    try {
      await assert.rejects(
        c.process("t", () => undefined, {
          onError: () => {
            throw new Error("give up");
          },
        }),
        /give up/,
      );
    } finally {
      await c.destroy();
    }
  });

  it("new Narad({url: \"127.0.0.1:7070\"}) says what a URL looks like (it was a bare TypeError: Invalid URL)", () => {
    assert.throws(() => new Narad({ url: "127.0.0.1:7070" }), (e: Error) => e instanceof TypeError && /did you mean http:\/\/127\.0\.0\.1:7070\?/.test(e.message));
    assert.throws(() => new Narad({ url: "localhost:7070" }), /did you mean http:\/\/localhost:7070\?/);
    assert.throws(() => new Narad({ url: "ftp://x" }), /must be an absolute http:\/\/ or https:\/\/ URL/);
  });

  it("a url ending in /v1 is the base (it sent /v1/v1/topics)", async () => {
    for (const suffix of ["/v1", "/v1/"]) {
      const c = new Narad({ url: suite.node.url + suffix });
      try {
        await c.createTopic({ name: `prefixed${suffix.length}`, partitions: 1 });
        assert.ok((await c.listTopics()).some((t) => t.name === `prefixed${suffix.length}`));
        assert.match(await c.metrics(), /narad_/);
      } finally {
        await c.close();
      }
    }
  });
});
