// Issue 16 item 13: a per-message delay (?delay_ms=, SQS's DelaySeconds, BullMQ's delay) and
// per-message headers, stored in the record's attribute block (src/storage/attrs.ts tags 3 and
// 4), so both survive a restart; their limits are in the error table (invalid_headers,
// invalid_delay). Neither existed.

import { describe, it } from "node:test";
import { nodeForSuite, refusal } from "./support/suite-node.js";
import assert from "node:assert/strict";
import { Narad } from "../src/client/index.js";
import { LIMITS } from "../src/protocol/wire.js";
import { runNarad } from "./harness.js";


describe("issue 16 item 13: per-message delay and headers", () => {
  const suite = nodeForSuite();

  it("a delayed message is not delivered before its delay, and the messages behind it are not held up (there was no delay)", async () => {
    const c = new Narad({ url: suite.node.url });
    try {
      await c.createTopic({ name: "later", partitions: 1 });
      await c.produce("later", "delayed", { delayMs: 1500 });
      await c.produce("later", "now");
      const first = await c.consume("later");
      assert.equal(first?.text(), "now", "the message behind the delayed one is delivered at once");
      await first!.ack();
      assert.equal(await c.consume("later"), null, "the delayed one is not due");
      const m = await c.consume("later", { waitMs: 10_000 });
      const at = Date.now();
      assert.equal(m?.text(), "delayed");
      assert.ok(at >= m!.producedAt + 1500, `delivered ${at - m!.producedAt} ms after it was stored`);
      await m!.ack();
    } finally {
      await c.close();
    }
  });

  it("a delay survives a restart: it is in the record (kill -9, then the same wait)", async () => {
    const c = new Narad({ url: suite.node.url });
    let producedAt: number;
    try {
      await c.createTopic({ name: "durable-delay", partitions: 1 });
      await c.produce("durable-delay", "wait for it", { delayMs: 2500 });
      producedAt = (await c.replay("durable-delay", 0)).messages[0]!.producedAt;
    } finally {
      await c.close();
    }
    await suite.crashAndRestart();
    const c2 = new Narad({ url: suite.node.url });
    try {
      const page = await c2.replay("durable-delay", 0);
      assert.equal(page.messages[0]!.notBefore, producedAt + 2500, "replay shows when it is due");
      const early = await c2.consume("durable-delay");
      if (early !== null) assert.ok(Date.now() >= producedAt + 2500, "only once due");
      const m = early ?? (await c2.consume("durable-delay", { waitMs: 10_000 }));
      assert.equal(m?.text(), "wait for it");
      assert.ok(Date.now() >= producedAt + 2500);
    } finally {
      await c2.close();
    }
  });

  it("headers are stored with the message and come back on consume, consume batch and replay, in the SDK and the CLI (there were none)", async () => {
    const c = new Narad({ url: suite.node.url });
    const headers = { trace: "abc-123", "content.kind": "order", city: "Zürich ✓" };
    try {
      await c.createTopic({ name: "tagged", partitions: 1 });
      await c.produce("tagged", "one", { headers });
      await c.produceBatch("tagged", [{ payload: "two", headers: { n: "2" } }, { payload: "three" }]);
      const one = await c.consume("tagged");
      assert.deepEqual(one?.headers, headers);
      const batch = await c.consumeBatch("tagged", { maxMessages: 10 }); // binary asked for: answered in JSON
      assert.deepEqual(batch.map((m) => [m.text(), m.headers]), [["two", { n: "2" }], ["three", {}]]);
      const page = await c.replay("tagged", 0);
      assert.deepEqual(page.messages.map((m) => m.headers), [headers, { n: "2" }, {}]);
      await c.ackBatch("tagged", [one!.receiptHandle, ...batch.map((m) => m.receiptHandle)]);

      const url = ["--url", suite.node.url];
      const p = await runNarad(["produce", "tagged", "four", "--header", "trace=xyz", "--header", "kind=cli", ...url]);
      assert.equal(p.code, 0, p.stderr);
      const got = await runNarad(["consume", "tagged", "--json", ...url]);
      assert.deepEqual((JSON.parse(got.stdout) as { headers: unknown }).headers, { trace: "xyz", kind: "cli" });
      const bad = await runNarad(["produce", "tagged", "x", "--header", "novalue", ...url]);
      assert.equal(bad.code, 2);
    } finally {
      await c.close();
    }
  });

  it("headers and delays past their limits are refused with invalid_headers and invalid_delay, nothing stored", async () => {
    const c = new Narad({ url: suite.node.url });
    try {
      await c.createTopic({ name: "limits13", partitions: 1 });
      const many = Object.fromEntries(Array.from({ length: LIMITS.headersMax + 1 }, (_, i) => [`h${i}`, "v"]));
      const cases: [string, Promise<unknown>][] = [
        ["invalid_headers", c.produce("limits13", "x", { headers: many })],
        ["invalid_headers", c.produce("limits13", "x", { headers: { "bad name": "v" } })],
        ["invalid_headers", c.produce("limits13", "x", { headers: { long: "v".repeat(LIMITS.headerValueBytesMax + 1) } })],
        ["invalid_headers", c.produceBatch("limits13", [{ payload: "x", headers: { ["n".repeat(LIMITS.headerNameBytesMax + 1)]: "v" } }])],
        ["invalid_delay", c.produce("limits13", "x", { delayMs: LIMITS.delayMsMax + 1 })],
        ["invalid_delay", c.produceBatch("limits13", [{ payload: "x", delayMs: -1 }])],
      ];
      for (const [code, p] of cases) {
        const e = await refusal(p);
        assert.equal(e.code, code);
        assert.equal(e.status, 400);
        assert.equal(e.definite, true);
      }
      // An idempotent produce does not carry them yet: refused, not dropped.
      const id = await c.createProducerId();
      const idem = await refusal(c.produce("limits13", "x", { producerId: id, sequence: 0, headers: { a: "b" } }));
      assert.equal(idem.code, "not_implemented");
      assert.equal(idem.definite, true);
      const raw = await fetch(`${suite.node.url}/v1/topics/limits13/messages`, { method: "POST", body: "x", headers: { "narad-headers": "[1,2]" } });
      assert.equal(raw.status, 400);
      assert.equal(((await raw.json()) as { error: { code: string } }).error.code, "invalid_headers");
      assert.equal((await c.replay("limits13", 0)).messages.length, 0, "nothing was stored");
    } finally {
      await c.close();
    }
  });
});
