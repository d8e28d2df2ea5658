// The client commands of `narad` as a user runs them: bin/narad in a child process against a
// real node, checking stdout bytes, the one-line stderr errors and the exit codes
// (0 ok, 1 definite failure, 2 usage, 3 ambiguous, 4 cannot connect).

import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createServer } from "node:net";
import { Narad } from "../src/client/index.js";
import { removeDir, runNarad, startNode, tempDir, type RunningNode } from "./harness.js";

let seq = 0;
function topicName(what: string): string {
  return `cli-${what}-${process.pid}-${++seq}`;
}

function allBytes(): Buffer {
  const b = Buffer.alloc(300);
  for (let i = 0; i < b.length; i++) b[i] = (i * 37 + 11) & 0xff;
  return b;
}

/** One stderr line in the documented shape, naming `code`. */
function assertErrorLine(stderr: string, code: string): void {
  assert.match(stderr, new RegExp(`^narad: ${code}: [^\\n]+\\n$`), `stderr was: ${JSON.stringify(stderr)}`);
}

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

describe("narad client commands", () => {
  let node: RunningNode;
  let client: Narad;
  let scratch: string;
  // Every command gets the node's URL the way most users would: from the environment.
  let env: Record<string, string>;
  const narad = (args: string[], opts: { input?: Buffer | string; env?: Record<string, string> } = {}) =>
    runNarad(args, { input: opts.input, env: { ...env, ...opts.env } });

  before(async () => {
    node = await startNode();
    client = new Narad({ url: node.url });
    scratch = await tempDir("narad-cli-test-");
    env = { NARAD_URL: node.url };
  });

  after(async () => {
    await client?.destroy();
    await node?.stop();
    if (node) await removeDir(node.dataDir);
    if (scratch) await removeDir(scratch);
  });

  it("topic create, list, describe, update and delete", async () => {
    const name = topicName("topic");
    const created = await narad(["topic", "create", name, "--partitions", "2", "--visibility-timeout-ms", "5000", "--retention-ms", "3600000"]);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, new RegExp(`^created topic ${name} \\(2 partitions, visibility timeout 5000 ms, retention 3600000 ms\\)\\n$`));

    const again = await narad(["topic", "create", name]);
    assert.equal(again.code, 1);
    assertErrorLine(again.stderr, "topic_exists");

    const listed = await narad(["topic", "list", "--json"]);
    assert.equal(listed.code, 0, listed.stderr);
    const topics = (JSON.parse(listed.stdout) as { topics: { name: string; partitions: number }[] }).topics;
    assert.ok(topics.some((t) => t.name === name && t.partitions === 2));
    const table = await narad(["topic", "list"]);
    assert.match(table.stdout, /^NAME\s+PARTITIONS\s+VISIBILITY_MS\s+RETENTION_MS\s+OWNER\n/);
    assert.match(table.stdout, new RegExp(`\\n${name}\\s+2\\s+5000\\s+3600000\\s`));

    const described = await narad(["topic", "describe", name, "--json"]);
    assert.equal(described.code, 0, described.stderr);
    const t = JSON.parse(described.stdout) as Record<string, unknown>;
    assert.equal(t.name, name);
    assert.equal(t.partitions, 2);
    assert.equal(t.visibility_timeout_ms, 5000);
    assert.equal(t.retention_ms, 3_600_000);
    assert.deepEqual(t.children, []);
    const people = await narad(["topic", "describe", name]);
    assert.match(people.stdout, /^name\s+cli-topic-/m);
    assert.match(people.stdout, /^retention\s+3600000 ms \(1 h\)$/m);

    const updated = await narad(["topic", "update", name, "--partitions", "3", "--visibility-timeout-ms", "7000", "--json"]);
    assert.equal(updated.code, 0, updated.stderr);
    const u = JSON.parse(updated.stdout) as Record<string, unknown>;
    assert.equal(u.partitions, 3);
    assert.equal(u.visibility_timeout_ms, 7000);
    const lower = await narad(["topic", "update", name, "--partitions", "1"]);
    assert.equal(lower.code, 1);
    assertErrorLine(lower.stderr, "partitions_decrease");
    const nothing = await narad(["topic", "update", name]);
    assert.equal(nothing.code, 2);
    assertErrorLine(nothing.stderr, "usage");

    const deleted = await narad(["topic", "delete", name]);
    assert.equal(deleted.code, 0, deleted.stderr);
    assert.equal(deleted.stdout, `deleted topic ${name}\n`);
    const missing = await narad(["topic", "describe", name]);
    assert.equal(missing.code, 1);
    assertErrorLine(missing.stderr, "topic_not_found");
    assert.equal(missing.stdout, "");
  });

  it("produce from an argument prints partition and offset; consume prints the body and acks it", async () => {
    const topic = topicName("arg");
    await client.createTopic({ name: topic, partitions: 1 });
    const p = await narad(["produce", topic, "hello world", "--key", "k/1 é"]);
    assert.equal(p.code, 0, p.stderr);
    assert.equal(p.stdout, "partition 0 offset 0\n");
    const pj = await narad(["produce", topic, "second", "--json"]);
    assert.deepEqual(JSON.parse(pj.stdout), { partition: 0, offset: 1 });

    const c = await narad(["consume", topic, "--wait-ms", "5000"]);
    assert.equal(c.code, 0, c.stderr);
    assert.equal(c.stdout, "hello world", "exactly the bytes, no decoration when piped");

    const cj = await narad(["consume", topic, "--wait-ms", "5000", "--json"]);
    assert.equal(cj.code, 0, cj.stderr);
    const m = JSON.parse(cj.stdout) as Record<string, unknown>;
    assert.equal(m.topic, topic);
    assert.equal(m.partition, 0);
    assert.equal(m.offset, 1);
    assert.equal(m.key, null);
    assert.equal(m.delivery_count, 1);
    assert.equal(m.acked, true);
    assert.equal(m.payload, "second");
    assert.equal(m.payload_base64, Buffer.from("second").toString("base64"));
    assert.equal(m.owner, node.nodeId);
    assert.equal(typeof m.receipt_handle, "string");

    // Both were acked: nothing is left, and an empty consume is not an error.
    const empty = await narad(["consume", topic]);
    assert.equal(empty.code, 0, empty.stderr);
    assert.equal(empty.stdout, "");
    const page = await client.replay(topic, 0);
    assert.equal(page.messages[0]!.key, "k/1 é");
  });

  it("produce from stdin and from --file carries binary bytes exactly", async () => {
    const topic = topicName("binary");
    await client.createTopic({ name: topic, partitions: 1 });
    const bytes = allBytes();
    const p = await narad(["produce", topic], { input: bytes });
    assert.equal(p.code, 0, p.stderr);
    assert.equal(p.stdout, "partition 0 offset 0\n");
    const file = join(scratch, "payload.bin");
    const fileBytes = Buffer.concat([bytes, Buffer.from([0, 0, 0x0a])]);
    await writeFile(file, fileBytes);
    const pf = await narad(["produce", topic, "--file", file]);
    assert.equal(pf.code, 0, pf.stderr);
    const empty = await narad(["produce", topic], { input: Buffer.alloc(0) });
    assert.equal(empty.code, 0, empty.stderr);

    const c1 = await narad(["consume", topic, "--wait-ms", "5000"]);
    assert.equal(c1.code, 0, c1.stderr);
    assert.deepEqual(c1.stdoutBytes, bytes);
    const c2 = await narad(["consume", topic, "--wait-ms", "5000"]);
    assert.deepEqual(c2.stdoutBytes, fileBytes);
    const c3 = await narad(["consume", topic, "--wait-ms", "5000", "--json"]);
    const m3 = JSON.parse(c3.stdout) as Record<string, unknown>;
    assert.equal(m3.offset, 2);
    assert.equal(m3.payload_base64, "");

    const missingFile = await narad(["produce", topic, "--file", join(scratch, "nope.bin")]);
    assert.equal(missingFile.code, 1);
    assertErrorLine(missingFile.stderr, "file_unreadable");
  });

  it("--no-ack leaves the message leased; it comes back after the visibility timeout", async () => {
    const topic = topicName("noack");
    await client.createTopic({ name: topic, partitions: 1, visibilityTimeoutMs: 500 });
    await client.produce(topic, "keep me");
    const first = await narad(["consume", topic, "--wait-ms", "5000", "--no-ack", "--json"]);
    assert.equal(first.code, 0, first.stderr);
    const m1 = JSON.parse(first.stdout) as Record<string, unknown>;
    assert.equal(m1.acked, false);
    assert.equal(m1.delivery_count, 1);
    const second = await narad(["consume", topic, "--wait-ms", "5000", "--json"]);
    const m2 = JSON.parse(second.stdout) as Record<string, unknown>;
    assert.equal(m2.offset, m1.offset);
    assert.equal(m2.delivery_count, 2);
    assert.equal(m2.acked, true);
    assert.equal(await client.consume(topic, { waitMs: 1000 }), null, "acked by the second consume");
  });

  it("--count consumes several messages, one per line", async () => {
    const topic = topicName("count");
    await client.createTopic({ name: topic, partitions: 1 });
    await client.produceBatch(topic, [{ payload: "a" }, { payload: "b" }, { payload: "c" }]);
    const c = await narad(["consume", topic, "--count", "5", "--wait-ms", "500"]);
    assert.equal(c.code, 0, c.stderr);
    assert.deepEqual(c.stdout.split("\n").filter(Boolean).sort(), ["a", "b", "c"]);
  });

  it("replay prints a partition in offset order without leasing", async () => {
    const topic = topicName("replay");
    await client.createTopic({ name: topic, partitions: 1 });
    for (let i = 0; i < 5; i++) await client.produce(topic, `r${i}`, { key: i === 1 ? "one" : undefined });
    await client.produce(topic, Buffer.from([0xff, 0x00]));
    const all = await narad(["replay", topic, "--partition", "0", "--json"]);
    assert.equal(all.code, 0, all.stderr);
    const lines = all.stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    assert.deepEqual(lines.map((l) => l.offset), [0, 1, 2, 3, 4, 5]);
    assert.equal(lines[1]!.key, "one");
    assert.equal(lines[2]!.payload, "r2");
    assert.equal(lines[5]!.payload_base64, Buffer.from([0xff, 0x00]).toString("base64"));
    assert.equal(lines[5]!.payload, undefined, "binary payloads have no text form");

    const some = await narad(["replay", topic, "--partition", "0", "--offset", "2", "--limit", "2"]);
    assert.equal(some.code, 0, some.stderr);
    const rows = some.stdout.trim().split("\n").map((l) => l.split("\t"));
    assert.deepEqual(rows.map((r) => [r[0], r[1], r[3]]), [["2", "-", "r2"], ["3", "-", "r3"]]);

    const m = await client.consume(topic, { waitMs: 1000 });
    assert.ok(m, "replay took no lease");

    const noPartition = await narad(["replay", topic]);
    assert.equal(noPartition.code, 2);
    assertErrorLine(noPartition.stderr, "usage");
    const badPartition = await narad(["replay", topic, "--partition", "9"]);
    assert.equal(badPartition.code, 1);
    assert.match(badPartition.stderr, /^narad: \w+_not_found: [^\n]+\n$/);
  });

  it("an unknown topic is one error line and exit 1", async () => {
    const topic = topicName("missing");
    for (const args of [["produce", topic, "x"], ["consume", topic], ["topic", "describe", topic], ["topic", "delete", topic]]) {
      const r = await narad(args);
      assert.equal(r.code, 1, `${args.join(" ")}: ${r.stderr}`);
      assertErrorLine(r.stderr, "topic_not_found");
      assert.equal(r.stdout, "");
    }
  });

  it("user and grant commands with credentials from flags and the environment (security on)", async () => {
    const adminPassword = "cli-admin-secret";
    const secured = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: adminPassword } });
    try {
      const asAdmin = { NARAD_URL: secured.url, NARAD_USER: "admin", NARAD_PASSWORD: adminPassword };
      const noCreds = await narad(["topic", "list", "--url", secured.url]);
      assert.equal(noCreds.code, 1);
      assertErrorLine(noCreds.stderr, "unauthorized");

      const added = await narad(["user", "add", "bob"], { env: asAdmin, input: "bob-password\n" });
      assert.equal(added.code, 0, added.stderr);
      assert.equal(added.stdout, "created user bob\n");
      const listed = await narad(["user", "list", "--json"], { env: asAdmin });
      assert.deepEqual((JSON.parse(listed.stdout) as { users: { name: string }[] }).users.map((u) => u.name).sort(), ["admin", "bob"]);

      const g = await narad(["grant", "add", "bob", "create", "bob-*"], { env: asAdmin });
      assert.equal(g.code, 0, g.stderr);
      const g2 = await narad(["grant", "add", "bob", "produce", "bob-*", "--json"], { env: asAdmin });
      assert.deepEqual(JSON.parse(g2.stdout), { action: "produce", pattern: "bob-*" });
      const grants = await narad(["grant", "list", "bob"], { env: asAdmin });
      assert.match(grants.stdout, /^ACTION\s+PATTERN\ncreate\s+bob-\*\nproduce\s+bob-\*\n$/);

      // Bob's credentials as flags, beating the admin's in the environment.
      const asBob = ["--user", "bob", "--password", "bob-password"];
      const created = await narad(["topic", "create", "bob-1", ...asBob], { env: asAdmin });
      assert.equal(created.code, 0, created.stderr);
      const forbidden = await narad(["topic", "create", "alice-1", ...asBob], { env: asAdmin });
      assert.equal(forbidden.code, 1);
      assertErrorLine(forbidden.stderr, "forbidden");

      const revoked = await narad(["grant", "revoke", "bob", "create", "bob-*"], { env: asAdmin });
      assert.equal(revoked.code, 0, revoked.stderr);
      const after = await narad(["grant", "list", "bob", "--json"], { env: asAdmin });
      assert.deepEqual(JSON.parse(after.stdout), { grants: [{ action: "produce", pattern: "bob-*" }] });
      const badAction = await narad(["grant", "add", "bob", "fly", "x"], { env: asAdmin });
      assert.equal(badAction.code, 2);

      const deleted = await narad(["user", "delete", "bob"], { env: asAdmin });
      assert.equal(deleted.code, 0, deleted.stderr);
      const gone = await narad(["grant", "list", "bob"], { env: asAdmin });
      assert.equal(gone.code, 1);
      assertErrorLine(gone.stderr, "user_not_found");
    } finally {
      await secured.stop();
      await removeDir(secured.dataDir);
    }
  });

  it("an unreachable URL is exit 4, a bad flag exit 2, and --url beats NARAD_URL", async () => {
    const dead = `http://127.0.0.1:${await freePort()}`;
    const r = await narad(["topic", "list", "--url", dead]);
    assert.equal(r.code, 4);
    assertErrorLine(r.stderr, "connection_failed");

    const viaEnv = await narad(["topic", "list"], { env: { NARAD_URL: dead } });
    assert.equal(viaEnv.code, 4);
    const flagWins = await narad(["topic", "list", "--url", node.url], { env: { NARAD_URL: dead } });
    assert.equal(flagWins.code, 0, flagWins.stderr);

    const badFlag = await narad(["topic", "create", "x", "--partitions", "many"]);
    assert.equal(badFlag.code, 2);
    assertErrorLine(badFlag.stderr, "usage");
    const missingArg = await narad(["produce"]);
    assert.equal(missingArg.code, 2);
    assertErrorLine(missingArg.stderr, "usage");
  });
});
