// process() across a reset of its line (docs/client.md, "process()"; docs/verification-clients.md,
// finding 2): the loop's last ack rides on its next long poll; when the line is reset after the
// node applied that ack, the loop retries the poll with the same ack and the node answers 410.
// That 410 is the retry of an ack that may have landed, not a refused ack: the loop goes on, and
// onError hears of the failed poll only. A real node, the fault proxy between it and the SDK; the
// moments are read from the node itself (the ack applied: the topic's backlog is 0), never slept.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Narad, NaradGoneError, type Message } from "../src/client/index.js";
import { startProxy, type Proxy } from "../src/verify/proxy/proxy.js";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";

describe("process() across a reset of its line", { timeout: 60_000 }, () => {
  let node: RunningNode;
  let proxy: Proxy;
  let direct: Narad;
  before(async () => {
    node = await startNode();
    const u = new URL(node.url);
    proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: u.hostname, targetPort: Number(u.port) });
    direct = new Narad({ url: node.url });
  });
  after(async () => {
    await direct?.destroy();
    await proxy?.close();
    await node?.stop();
    if (node) await removeDir(node.dataDir);
  });

  const backlog = async (topic: string) => (await direct.getTopic(topic)).stats!.backlog;

  test("a 410 on the retried poll of an ack that landed neither ends the loop nor reaches onError as a refused ack", async () => {
    const topic = `reset-ack-${process.pid}`;
    await direct.createTopic({ name: topic, partitions: 1 });
    await direct.produce(topic, "first");
    const client = new Narad({ url: `http://127.0.0.1:${proxy.address.port}` });
    const ac = new AbortController();
    const handled: string[] = [];
    const told: { err: unknown; m: Message | null }[] = [];
    let firstDone!: () => void;
    const firstHandled = new Promise<void>((r) => (firstDone = r));
    // No onError would end the loop on a refused ack; here onError records, and the loop's end
    // is checked too: it must be the abort below, not an error.
    const loop = client.process(
      topic,
      (m) => {
        handled.push(m.text());
        if (m.text() === "first") {
          proxy.cut("downstream"); // the next poll, with this ack on it, reaches the node; its answer is held
          firstDone();
        } else ac.abort();
      },
      { waitMs: 2_000, signal: ac.signal, onError: (err, m) => void told.push({ err, m }) },
    );
    await firstHandled;
    // The node applied the ack riding on the held poll: nothing of the topic is unacked.
    await waitFor(async () => (await backlog(topic)) === 0, { timeoutMs: 10_000, what: "the riding ack applied" });
    proxy.setToxic("both", { kind: "reset" }); // the held poll's connection is torn down: ambiguous
    proxy.heal(); // the retry gets through, with the same ack: 410
    await waitFor(() => told.length > 0, { timeoutMs: 10_000, what: "the failed poll told to onError" });
    await direct.produce(topic, "second");
    await loop;
    await client.destroy();
    assert.deepEqual(handled, ["first", "second"], "each message handled once, and the loop went on after the reset");
    assert.ok(told.length >= 1);
    for (const t of told) {
      assert.equal(t.m, null, `only retry notices reach onError, got ${String((t.err as Error).name)} for a message`);
      assert.ok(!(t.err instanceof NaradGoneError));
    }
    // "first" was settled by the ack that landed: it never comes back.
    assert.equal(await direct.consume(topic, { waitMs: 200 }), null);
  });
});
