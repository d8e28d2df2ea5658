// Issue 16 on a cluster: GET /v1/nodes in node_number order (item 10: it ran backwards), and what
// is not built for a cluster yet answering a definite 501 not_implemented rather than losing a
// message's delay or headers on the forward to its owner, or purging only one node's partitions
// (items 12 and 13).

import { test } from "node:test";
import assert from "node:assert/strict";
import { Narad, NaradRequestError } from "../src/client/index.js";
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
    for (const p of [client.purgeTopic("everywhere"), client.produce("everywhere", "x", { delayMs: 1000 }), client.produce("everywhere", "x", { headers: { a: "b" } })]) {
      await assert.rejects(p, (e: unknown) => e instanceof NaradRequestError && e.status === 501 && e.code === "not_implemented" && e.definite);
    }
    for (let p = 0; p < 3; p++) assert.equal((await client.replay("everywhere", p)).messages.length, 0, "nothing was stored");
  } finally {
    await client.close();
  }
});
