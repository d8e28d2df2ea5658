// Issue 16 item 12: what users of SQS, BullMQ and JetStream look for first. A topic's backlog,
// in-flight count and oldest unacked age in GET /v1/topics/{t} and `narad topic describe`, per
// partition and in all; POST /v1/topics/{t}/purge (admin or the topic's owner), durable.

import { describe, it } from "node:test";
import { nodeForSuite } from "./support/suite-node.js";
import assert from "node:assert/strict";
import { Narad, NaradGoneError, NaradRequestError } from "../src/client/index.js";
import { removeDir, runNarad, startNode, waitFor } from "./harness.js";

describe("issue 16 item 12: topic stats and purge", () => {
  const suite = nodeForSuite();

  it("GET /v1/topics/{t} and topic describe show backlog, in flight and oldest unacked age, per partition and in all (none of it was shown)", async () => {
    const c = new Narad({ url: suite.node.url });
    try {
      await c.createTopic({ name: "jobs", partitions: 2, visibilityTimeoutMs: 60_000 });
      await c.produceBatch("jobs", Array.from({ length: 6 }, (_, i) => ({ key: `k${i}`, payload: `job ${i}` })));
      await c.produceBatch("jobs", [{ payload: "a" }, { payload: "b" }, { payload: "c" }, { payload: "d" }]);
      const leased = await c.consumeBatch("jobs", { maxMessages: 3 });
      assert.equal(leased.length, 3);
      const t = await waitFor(async () => {
        const x = await c.getTopic("jobs");
        return x.stats !== undefined && x.stats.oldestUnackedAgeMs > 0 ? x : null;
      }, { what: "an oldest unacked age above 0 ms" });
      const s = t.stats!;
      assert.equal(s.backlog, 10);
      assert.equal(s.inFlight, 3);
      assert.equal(s.partitions.length, 2);
      assert.equal(s.partitions.reduce((n, p) => n + p.backlog, 0), 10);
      assert.equal(s.partitions.reduce((n, p) => n + p.inFlight, 0), 3);
      assert.equal(s.oldestUnackedAgeMs, Math.max(...s.partitions.map((p) => p.oldestUnackedAgeMs)));
      await c.ackBatch("jobs", leased.map((m) => m.receiptHandle));
      const after = (await c.getTopic("jobs")).stats!;
      assert.equal(after.backlog, 7);
      assert.equal(after.inFlight, 0);

      const described = await runNarad(["topic", "describe", "jobs", "--url", suite.node.url]);
      assert.match(described.stdout, /^backlog\s+7 unacked, 0 in flight, oldest \S+/m);
      assert.match(described.stdout, /^ {2}partition 0\s+\d+ unacked/m);
      const json = JSON.parse((await runNarad(["topic", "describe", "jobs", "--json", "--url", suite.node.url])).stdout) as { stats: { backlog: number; partitions: unknown[] } };
      assert.equal(json.stats.backlog, 7);
      assert.equal(json.stats.partitions.length, 2);
    } finally {
      await c.close();
    }
  });

  it("purge settles every message, leased or not, and stays purged across a restart (there was no purge)", async () => {
    const c = new Narad({ url: suite.node.url });
    try {
      await c.createTopic({ name: "drain", partitions: 3, visibilityTimeoutMs: 60_000 });
      await c.produceBatch("drain", Array.from({ length: 30 }, (_, i) => ({ payload: `m${i}` })));
      const held = await c.consume("drain");
      assert.ok(held !== null);
      const cli = await runNarad(["topic", "purge", "drain", "--json", "--url", suite.node.url]);
      assert.equal(cli.code, 0, cli.stderr);
      assert.deepEqual(JSON.parse(cli.stdout), { purged: 30 });
      assert.equal(await c.consume("drain"), null);
      await assert.rejects(c.ack("drain", held.receiptHandle), NaradGoneError);
      const s = (await c.getTopic("drain")).stats!;
      assert.deepEqual([s.backlog, s.inFlight, s.oldestUnackedAgeMs], [0, 0, 0]);
      // What comes after a purge is delivered as usual.
      await c.produce("drain", "after");
      assert.equal(await c.purgeTopic("drain"), 1);
      await c.produce("drain", "kept");
    } finally {
      await c.close();
    }
    // A kill right after: the purge was synced before its answer.
    await suite.crashAndRestart();
    const c2 = new Narad({ url: suite.node.url });
    try {
      const m = await c2.consume("drain");
      assert.equal(m?.text(), "kept");
      assert.equal(await c2.consume("drain"), null);
    } finally {
      await c2.close();
    }
  });

  it("purge is for an admin or the topic's owner", async () => {
    const secured = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: "stats-admin-pw" } });
    const admin = new Narad({ url: secured.url, user: "admin", password: "stats-admin-pw" });
    const carol = new Narad({ url: secured.url, user: "carol", password: "carol-password" });
    const dave = new Narad({ url: secured.url, user: "dave", password: "dave-password" });
    try {
      await admin.createUser({ name: "carol", password: "carol-password" });
      await admin.createUser({ name: "dave", password: "dave-password" });
      await admin.addGrant("carol", { action: "create", pattern: "carol-*" });
      await admin.addGrant("dave", { action: "consume", pattern: "carol-*" });
      await admin.addGrant("dave", { action: "produce", pattern: "carol-*" });
      await carol.createTopic({ name: "carol-q", partitions: 1 });
      await dave.produce("carol-q", "x");
      await assert.rejects(dave.purgeTopic("carol-q"), (e: unknown) => e instanceof NaradRequestError && e.status === 403);
      assert.equal(await carol.purgeTopic("carol-q"), 1);
      await dave.produce("carol-q", "y");
      assert.equal(await admin.purgeTopic("carol-q"), 1);
    } finally {
      await Promise.all([admin.close(), carol.close(), dave.close()]);
      await secured.stop();
      await removeDir(secured.dataDir);
    }
  });
});
