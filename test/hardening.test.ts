// Regression tests of issue 12 (what an attacker and a bad day found), each named after what
// broke, against real node processes.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { removeDir, startNode, type RunningNode } from "./harness.js";

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
