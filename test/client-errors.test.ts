// What the SDK tells a caller that records outcomes (the verification workloads, or any
// application that must know "did it happen?"): the owner that stored a produced message, and
// `status`, `code` and `definite` on every error, from the error table for an answer. Against a
// real node (a `bin/narad server start --dev` process), plus the table read row by row.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import type { AddressInfo } from "node:net";
import {
  ERRORS,
  Narad,
  NaradAmbiguousError,
  NaradClientError,
  NaradConnectionError,
  NaradGoneError,
  NaradRequestError,
  type ErrorCode,
} from "../src/client/index.js";
import { errorFromResponse, errorFromTransport } from "../src/client/errors.js";
import { removeDir, startNode, type RunningNode } from "./harness.js";

async function rejection(p: Promise<unknown>): Promise<NaradClientError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof NaradClientError, `a NaradClientError, not ${String(e)}`);
    return e;
  }
  assert.fail("expected a rejection");
}

describe("SDK: what a recorder needs", () => {
  let node: RunningNode;
  let client: Narad;

  before(async () => {
    node = await startNode();
    client = new Narad({ url: node.url });
  });
  after(async () => {
    await client?.destroy();
    await node?.stop();
    if (node) await removeDir(node.dataDir);
  });

  test("nodes() and movePartition(): a single node lists itself owning every partition, and refuses a move (400)", async () => {
    await client.createTopic({ name: "placed", partitions: 2 });
    const nodes = await client.nodes();
    assert.equal(nodes.length, 1);
    assert.equal(nodes[0]!.id, node.nodeId);
    assert.equal(nodes[0]!.state, "live");
    assert.equal(nodes[0]!.advertiseUrl, null);
    assert.deepEqual(nodes[0]!.partitions.filter((p) => p.topic === "placed"), [
      { topic: "placed", partition: 0, epoch: 0 },
      { topic: "placed", partition: 1, epoch: 0 },
    ]);
    const e = await rejection(client.movePartition("placed", 0, "n2"));
    assert.ok(e instanceof NaradRequestError);
    assert.equal(e.status, 400);
    assert.equal(e.code, "invalid_argument");
    assert.equal(e.definite, true);
  });

  test("a produce result names the owner that stored it and its boot; a delivery names the same", async () => {
    const health = (await (await fetch(`${node.url}/healthz`)).json()) as { node: string; boot: string };
    await client.createTopic({ name: "owned", partitions: 1 });
    const r = await client.produce("owned", "x");
    assert.equal(r.partition, 0);
    assert.equal(r.offset, 0);
    assert.equal(r.owner, health.node);
    assert.equal(r.ownerBoot, health.boot);
    const m = await client.consume("owned");
    assert.ok(m);
    assert.equal(m.owner, r.owner);
    assert.equal(m.ownerBoot, r.ownerBoot);
    await m.ack();
  });

  test("every error has status, code and definite: refusals from the table, 410, and a refused connection", async () => {
    const missing = await rejection(client.produce("no-such-topic", "x"));
    assert.ok(missing instanceof NaradRequestError);
    assert.deepEqual([missing.status, missing.code, missing.definite], [404, "topic_not_found", true]);

    await client.createTopic({ name: "settle", partitions: 1 });
    await client.produce("settle", "y");
    const m = await client.consume("settle");
    assert.ok(m);
    await m.ack();
    const gone = await rejection(m.ack());
    assert.ok(gone instanceof NaradGoneError);
    assert.deepEqual([gone.status, gone.code, gone.definite], [410, "receipt_handle_gone", false]);

    const forged = await rejection(client.ack("settle", "not-a-handle"));
    assert.deepEqual([forged.status, forged.code, forged.definite], [400, "invalid_receipt_handle", true]);

    // A port nothing listens on.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const port = (probe.address() as AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const nowhere = new Narad({ url: `http://127.0.0.1:${port}`, connectTimeoutMs: 2_000 });
    try {
      const refused = await rejection(nowhere.produce("t", "x"));
      assert.ok(refused instanceof NaradConnectionError);
      assert.deepEqual([refused.status, refused.code, refused.definite], [undefined, "connection_failed", true]);
    } finally {
      await nowhere.destroy();
    }
  });

  test("a socket error of the connect call is a connection failure (definite); one of a read or write is ambiguous", () => {
    // The shapes node's net module gives: "connect ECONNRESET" is an RST in the handshake, before
    // any byte of the request could be written; "read ECONNRESET" may come after the node read it.
    const sockErr = (syscall: string) => Object.assign(new Error(`${syscall} ECONNRESET 127.0.0.1:1`), { code: "ECONNRESET", errno: -104, syscall });
    const connect = errorFromTransport(sockErr("connect"), "consume", false);
    assert.ok(connect instanceof NaradConnectionError);
    assert.deepEqual([connect.code, connect.definite], ["connection_failed", true]);
    const wrapped = errorFromTransport(Object.assign(new Error("fetch failed"), { cause: sockErr("connect") }), "consume", false);
    assert.ok(wrapped instanceof NaradConnectionError, "found through the cause");
    for (const syscall of ["read", "write"]) {
      const e = errorFromTransport(sockErr(syscall), "consume", false);
      assert.ok(e instanceof NaradAmbiguousError, syscall);
      assert.deepEqual([e.code, e.definite], ["network_error", false]);
    }
  });

  test("for every code of the error table, an answer with it becomes an error with its status, code and definite", () => {
    for (const code of Object.keys(ERRORS) as ErrorCode[]) {
      const spec = ERRORS[code];
      const e = errorFromResponse(spec.status, JSON.stringify({ error: { code, message: spec.message } }), undefined);
      assert.equal(e.status, spec.status, code);
      assert.equal(e.code, code, code);
      assert.equal(e.definite, spec.definite, code);
      // An indefinite 5xx is ambiguous; everything else the node refused is a request error.
      if (!spec.definite && spec.status >= 500) assert.ok(e instanceof NaradAmbiguousError, code);
      else assert.ok(e instanceof NaradRequestError, code);
    }
  });

  test("children: attach, list and detach through the SDK; metrics as Prometheus text", async () => {
    await client.createTopic({ name: "parent", partitions: 1 });
    await client.createTopic({ name: "parent.fan", partitions: 1 });
    await client.createTopic({ name: "parent.delay", partitions: 1 });
    assert.deepEqual(await client.attachChild("parent", { topic: "parent.fan", kind: "fanout" }), { topic: "parent.fan", kind: "fanout" });
    assert.deepEqual(await client.attachChild("parent", { topic: "parent.delay", kind: "delay", delayMs: 1_000 }), {
      topic: "parent.delay",
      kind: "delay",
      delayMs: 1_000,
    });
    const again = await rejection(client.attachChild("parent", { topic: "parent.fan", kind: "fanout" }));
    assert.deepEqual([again.status, again.code, again.definite], [409, "child_exists", true]);
    assert.deepEqual(
      (await client.listChildren("parent")).map((c) => c.topic).sort(),
      ["parent.delay", "parent.fan"],
    );
    await client.produce("parent", "copied");
    const text = await client.metrics();
    assert.match(text, /^narad_child_lag_messages\{[^}]*parent="parent"/m);
    await client.detachChild("parent", "parent.fan");
    assert.deepEqual((await client.listChildren("parent")).map((c) => c.topic), ["parent.delay"]);
    const notThere = await rejection(client.detachChild("parent", "parent.fan"));
    assert.deepEqual([notThere.status, notThere.code], [404, "child_not_found"]);
  });
});
