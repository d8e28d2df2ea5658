// Issue 16 on a cluster: GET /v1/nodes in node_number order (item 10: it ran backwards), and what
// is not built for a cluster yet answering a definite 501 not_implemented rather than losing a
// message's delay or headers on the forward to its owner, or purging only one node's partitions
// (items 12 and 13).

import { test } from "node:test";
import assert from "node:assert/strict";
import { Narad, NaradRequestError } from "../src/client/index.js";
import { runNarad, waitFor } from "./harness.js";
import { startCluster } from "./support/local-cluster.js";
import { postgresForFile } from "./support/postgres.js";

const fx = postgresForFile();

test("a cluster: nodes in node_number order; purge, delay and headers answer 501 not_implemented, nothing stored", async () => {
  const c = await startCluster({ nodes: 3, controlPlaneUrl: await fx.pg().newDatabase() });
  fx.cleanups.push(() => c.stop());
  const client = new Narad({ url: c.urls[1]! });
  try {
    const numbers = (await client.nodes()).map((n) => n.nodeNumber);
    assert.equal(numbers.length, 3);
    assert.deepEqual(numbers, [...numbers].sort((a, b) => a - b), `node_number order: ${numbers.join(",")}`);

    await client.createTopic({ name: "everywhere", partitions: 3 });
    const t = await client.getTopic("everywhere");
    assert.equal(t.stats, undefined, "no stats from one node's partitions alone");
    // One request at a time: made together, a later one's refusal would wait unhandled while
    // the first is awaited (an unhandledRejection fails the file).
    for (const send of [() => client.purgeTopic("everywhere"), () => client.produce("everywhere", "x", { delayMs: 1000 }), () => client.produce("everywhere", "x", { headers: { a: "b" } })]) {
      await assert.rejects(send(), (e: unknown) => e instanceof NaradRequestError && e.status === 501 && e.code === "not_implemented" && e.definite);
    }
    for (let p = 0; p < 3; p++) assert.equal((await client.replay("everywhere", p)).messages.length, 0, "nothing was stored");
  } finally {
    await client.close();
  }
});

test("narad node remove retires a node that is down and holds nothing; the partitions of a node that died are placed elsewhere with --accept-loss (they could never be moved off: node_down)", async () => {
  const c = await startCluster({ nodes: 3, controlPlaneUrl: await fx.pg().newDatabase() });
  fx.cleanups.push(() => c.stop());
  const n3 = c.nodes[2]!;
  await n3.stop();
  const first = new Narad({ url: c.urls[0]! });
  try {
    await waitFor(async () => (await first.nodes()).find((n) => n.id === "n3")?.state === "down", { what: "n3 seen down" });
    await first.createTopic({ name: "kept", partitions: 2 }); // placed on the live n1 and n2
    const live = await runNarad(["node", "remove", "n1", "--url", c.urls[0]!]);
    assert.equal(live.code, 1);
    assert.match(live.stderr, /^narad: node_in_use: Node n1 is live/);
  } finally {
    await first.close();
  }

  // The owner of kept/0 dies for good (kill -9).
  const reader = new Narad({ url: c.urls[0]! });
  const placement = (await reader.getTopic("kept")).placement!;
  await reader.close();
  const dead = c.nodes.find((n) => n.id === placement[0]!.node)!;
  const alive = c.nodes.find((n) => n !== dead && n !== n3)!;
  await dead.kill();
  const client = new Narad({ url: alive.url });
  const url = ["--url", alive.url];
  try {
    await waitFor(async () => (await client.nodes()).find((n) => n.id === dead.id)?.state === "down", { timeoutMs: 20_000, what: `${dead.id} seen down` });
    const holds = await runNarad(["node", "remove", dead.id, ...url]);
    assert.equal(holds.code, 1);
    assert.match(holds.stderr, new RegExp(`^narad: node_in_use: Node ${dead.id} still holds kept/0`));
    const moveOff = await runNarad(["partition", "move", "kept/0", "--to", alive.id, ...url]);
    assert.equal(moveOff.code, 1);
    assert.match(moveOff.stderr, /^narad: node_down: /, "a normal move copies the log, which only the dead node has");

    for (const p of placement.filter((x) => x.node === dead.id)) {
      const r = await runNarad(["partition", "move", `kept/${p.partition}`, "--to", alive.id, "--accept-loss", "--json", ...url]);
      assert.equal(r.code, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout), { topic: "kept", partition: p.partition, from: dead.id, to: alive.id, epoch: p.epoch + 1 });
    }
    // Served again, empty, by the node it was placed on.
    await waitFor(async () => (await client.replay("kept", 0).catch(() => null)) !== null, { what: "kept/0 served again" });
    await client.produceBatch("kept", [{ payload: "a", key: "x" }, { payload: "b", key: "y" }, { payload: "c", key: "z" }]);

    const removed = await runNarad(["node", "remove", dead.id, ...url]);
    assert.equal(removed.code, 0, removed.stderr);
    assert.equal(removed.stdout, `removed node ${dead.id}\n`);
    await waitFor(async () => !(await client.nodes()).some((n) => n.id === dead.id), { what: `${dead.id} gone from GET /v1/nodes` });
    await assert.rejects(client.removeNode(dead.id), (e: unknown) => e instanceof NaradRequestError && e.status === 404 && e.code === "node_not_found");
    assert.equal((await runNarad(["node", "remove", "n3", ...url])).code, 0);
    // A removed node may come back: it registers afresh.
    await n3.start();
    await waitFor(async () => (await client.nodes()).find((n) => n.id === "n3")?.state === "live", { what: "n3 back" });
  } finally {
    await client.close();
  }
});
