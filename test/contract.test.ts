// The contract suite against one node started with --dev, and the limits that need a node of their own.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "node:net";
import { defineContractSuite } from "./contract-suite.js";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";

defineContractSuite("single node", async () => {
  const node = await startNode();
  return {
    urls: [node.url],
    async stop() {
      await node.stop();
      await removeDir(node.dataDir);
    },
  };
});

describe("limits.long_polls", () => {
  let node: RunningNode;
  before(async () => {
    node = await startNode({ env: { NARAD_LIMITS_LONG_POLLS: "1" } });
  });
  after(async () => {
    await node?.stop();
    if (node) await removeDir(node.dataDir);
  });

  test("past the bound a long poll is 429 with Retry-After; a consume?ack= refused so answers 204 with the ack done", async () => {
    const post = (path: string, init: RequestInit = {}) => fetch(node.url + path, { method: "POST", ...init });
    for (const name of ["busy", "idle"]) {
      const r = await post("/v1/topics", { body: JSON.stringify({ name, partitions: 1 }), headers: { "content-type": "application/json" } });
      assert.equal(r.status, 201);
    }
    assert.equal((await post("/v1/topics/busy/messages", { body: "a" })).status, 202);
    const first = await post("/v1/topics/busy/consume");
    assert.equal(first.status, 200);
    const handle = first.headers.get("narad-receipt-handle")!;

    // One long poll waits on the empty topic: the bound is reached.
    const ac = new AbortController();
    const waiting = post("/v1/topics/idle/consume?wait_ms=20000", { signal: ac.signal }).catch(() => null);
    await waitFor(async () => /^narad_long_polls_waiting 1$/m.test(await (await fetch(`${node.url}/metrics`)).text()), { what: "the long poll to wait" });

    const refused = await post("/v1/topics/busy/consume?wait_ms=1000");
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get("retry-after"), "1");
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "too_many_waiters");
    assert.equal((await post("/v1/topics/busy/consume")).status, 204, "a consume that does not wait is not bounded");

    // The ack rides on a consume that would have to wait: the ack is done, nothing is leased.
    const acking = await post(`/v1/topics/busy/consume?wait_ms=1000&ack=${encodeURIComponent(handle)}`);
    assert.equal(acking.status, 204);
    assert.equal((await post(`/v1/topics/busy/ack?receipt_handle=${encodeURIComponent(handle)}`)).status, 410, "the ack took effect");

    ac.abort();
    await waiting;
    await waitFor(async () => /^narad_long_polls_waiting 0$/m.test(await (await fetch(`${node.url}/metrics`)).text()), { what: "the aborted poll to stop waiting" });
    assert.equal((await post("/v1/topics/busy/consume?wait_ms=10")).status, 204, "below the bound again");
  });
});

describe("a graceful stop", () => {
  test("a request that arrives while the node drains is 503 shutting_down with Connection: close, and stores nothing; the one in flight finishes", async () => {
    const node = await startNode({ env: { NARAD_LOG_LEVEL: "info" } });
    try {
      const r = await fetch(`${node.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "drain", partitions: 1 }), headers: { "content-type": "application/json" } });
      assert.equal(r.status, 201);
      // A produce whose body is still coming keeps the node draining; a second request pipelined
      // behind it on the same connection arrives after the stop began. The produce asks for a
      // "100 Continue", which node:http sends as it hands the request to Narad: once it is here,
      // the produce is in flight, and only then does the stop begin.
      const sock = connect(node.port, "127.0.0.1");
      await new Promise<void>((res, rej) => sock.once("connect", res).once("error", rej));
      let answer = "";
      sock.on("data", (b: Buffer) => (answer += b.toString("latin1")));
      const closed = new Promise<void>((res) => sock.once("close", () => res()));
      sock.write("POST /v1/topics/drain/messages HTTP/1.1\r\nHost: narad\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
      await waitFor(async () => answer.startsWith("HTTP/1.1 100 Continue\r\n\r\n"), { what: "the produce to be in flight" });
      sock.write("ab");
      node.proc.kill("SIGTERM");
      await waitFor(async () => node.output().includes("stopping: finishing in-flight requests"), { what: "the node to begin draining" });
      sock.write("cdPOST /v1/topics/drain/messages HTTP/1.1\r\nHost: narad\r\nContent-Length: 4\r\n\r\nlate");
      await closed;
      const answers = answer.split(/(?=HTTP\/1\.1 )/);
      assert.equal(answers.length, 3, answer);
      assert.match(answers[1]!, /^HTTP\/1\.1 202 /);
      assert.match(answers[2]!, /^HTTP\/1\.1 503 /);
      assert.match(answers[2]!, /\r\nconnection: close\r\n/i);
      assert.match(answers[2]!, /"code":"shutting_down"/);
      assert.equal((await node.exited).code, 0);
    } finally {
      await node.kill();
    }
    // After a restart: the produce in flight is stored, the refused one is not.
    const again = await startNode({ dataDir: node.dataDir });
    try {
      const page = (await (await fetch(`${again.url}/v1/topics/drain/partitions/0/messages`)).json()) as { messages: { payload_base64: string }[] };
      assert.deepEqual(page.messages.map((m) => Buffer.from(m.payload_base64, "base64").toString()), ["abcd"]);
    } finally {
      await again.stop();
      await removeDir(node.dataDir);
    }
  });
});
