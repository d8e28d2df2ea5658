// Regression tests of issue 12 (what an attacker and a bad day found), each named after what
// broke, against real node processes.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { removeDir, runNarad, startNode, tempDir, type RunningNode } from "./harness.js";

const ADMIN_PW = "admin-Secret-42";
const basic = (user: string, pw: string) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;

describe("hardening, security on", () => {
  let node: RunningNode;
  const admin = { authorization: basic("admin", ADMIN_PW) };

  before(async () => {
    node = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: ADMIN_PW } });
  });
  after(async () => {
    await node?.kill();
    if (node) await removeDir(node.dataDir);
  });

  test("unauthenticated password checks starve fsync: a flood of bad logins under random names is capped (429) and an authenticated produce is stored", async () => {
    const create = await fetch(`${node.url}/v1/topics`, { method: "POST", headers: { ...admin, "content-type": "application/json" }, body: JSON.stringify({ name: "flood" }) });
    assert.equal(create.status, 201);
    const guesses = Array.from({ length: 64 }, () =>
      fetch(`${node.url}/v1/topics`, { headers: { authorization: basic(`guess-${randomBytes(6).toString("hex")}`, "wrong-password") } }),
    );
    const produce = fetch(`${node.url}/v1/topics/flood/messages`, { method: "POST", headers: admin, body: "while strangers guess" });
    const answers = await Promise.all(guesses);
    const statuses = answers.map((r) => r.status);
    assert.ok(statuses.every((s) => s === 401 || s === 429), statuses.join(","));
    const refused = answers.filter((r) => r.status === 429);
    assert.ok(refused.length > 0, "64 checks at once overflow the 8 allowed in flight");
    for (const r of refused) {
      assert.equal(r.headers.get("retry-after"), "1");
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, "too_many_password_checks");
    }
    for (const r of answers.filter((a) => a.status === 401)) assert.equal(((await r.json()) as { error: { code: string } }).error.code, "unauthorized");
    const p = await produce;
    assert.equal(p.status, 202);
    const consumed = await fetch(`${node.url}/v1/topics/flood/consume`, { method: "POST", headers: admin });
    assert.equal(consumed.status, 200);
    assert.equal(await consumed.text(), "while strangers guess");
    // The right password of a user not yet cached is still checked once the flood is over.
    const users = await fetch(`${node.url}/v1/users`, { method: "POST", headers: { ...admin, "content-type": "application/json" }, body: JSON.stringify({ name: "late", password: "late-Password-7" }) });
    assert.equal(users.status, 201);
    const late = await fetch(`${node.url}/metrics`, { headers: { authorization: basic("late", "late-Password-7") } });
    assert.equal(late.status, 200);
  });
});

test("two processes can share one data directory: a second start on it is refused with one line naming the first, and a kill -9 frees it", async () => {
  const dir = await tempDir();
  const first = await startNode({ dataDir: dir });
  try {
    const create = await fetch(`${first.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "shared" }) });
    assert.equal(create.status, 201);
    assert.equal((await fetch(`${first.url}/v1/topics/shared/messages`, { method: "POST", body: "m0" })).status, 202);
    const second = await runNarad(["server", "start", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0"]);
    assert.notEqual(second.code, 0);
    const lines = second.stderr.trim().split("\n");
    assert.equal(lines.length, 1, second.stderr);
    assert.match(lines[0]!, new RegExp(`data directory .* is in use by narad pid ${first.proc.pid} \\(serving ${first.url.replace(/[.]/g, "\\.")}\\)`));
    // The first node still serves, and still owns its offsets.
    assert.equal((await fetch(`${first.url}/v1/topics/shared/messages`, { method: "POST", body: "m1" })).status, 202);
    await first.kill();
    const again = await startNode({ dataDir: dir });
    try {
      const replay = await fetch(`${again.url}/v1/topics/shared/partitions/0/messages?offset=0`);
      const partitions = (await (await fetch(`${again.url}/v1/topics/shared`)).json()) as { partitions: number };
      let stored = 0;
      for (let p = 0; p < partitions.partitions; p++) {
        const r = await fetch(`${again.url}/v1/topics/shared/partitions/${p}/messages?offset=0`);
        stored += ((await r.json()) as { messages: unknown[] }).messages.length;
      }
      assert.equal(replay.status, 200);
      assert.equal(stored, 2, "both 202s are there after the kill -9");
    } finally {
      await again.kill();
    }
  } finally {
    await first.kill();
    await removeDir(dir);
  }
});
