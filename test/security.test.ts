// Users, grants and HTTP Basic auth, black-box over real HTTP against a node with security on.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, runNarad, startNode, type RunningNode } from "./harness.js";

const ADMIN_PW = "admin-Secret-42";
const ALICE_PW = "alice-Password-1";
const BOB_PW = "bob-Password-22";

const basic = (user: string, pw: string) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;

describe("security", () => {
  let node: RunningNode;
  const as =
    (user: string, pw: string) =>
    (method: string, path: string, body?: unknown, raw?: boolean) =>
      fetch(node.url + path, {
        method,
        body: body === undefined ? undefined : raw ? (body as string) : JSON.stringify(body),
        headers: { authorization: basic(user, pw), "content-type": "application/json" },
      });
  const admin = as("admin", ADMIN_PW);
  let alice = as("alice", ALICE_PW);
  const bob = as("bob", BOB_PW);
  const code = async (r: Response) => ((await r.json()) as { error: { code: string } }).error.code;

  before(async () => {
    node = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: ADMIN_PW } });
  });
  after(async () => {
    await node?.kill();
    if (node) await removeDir(node.dataDir);
  });

  test("missing or wrong credentials are 401 with WWW-Authenticate; probes need none", async () => {
    for (const headers of [{} as Record<string, string>, { authorization: basic("admin", "wrong-password") }, { authorization: basic("nobody", "x-password") }, { authorization: "Bearer abc" }, { authorization: "Basic !!!" }]) {
      const r = await fetch(`${node.url}/v1/topics`, { headers });
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.equal(r.headers.get("www-authenticate"), 'Basic realm="narad"');
      assert.equal(await code(r), "unauthorized");
    }
    assert.equal((await fetch(`${node.url}/healthz`)).status, 200);
    assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
    assert.equal((await fetch(`${node.url}/metrics`)).status, 401);
    assert.equal((await admin("GET", "/metrics")).status, 200);
    assert.equal((await admin("GET", "/v1/topics")).status, 200);
  });

  test("users and grants: every action against matching and non-matching topics", async () => {
    assert.equal((await admin("POST", "/v1/users", { name: "alice", password: ALICE_PW })).status, 201);
    assert.equal((await admin("POST", "/v1/users", { name: "bob", password: BOB_PW })).status, 201);
    assert.equal((await admin("POST", "/v1/users", { name: "bob", password: BOB_PW })).status, 409);
    assert.equal((await admin("POST", "/v1/users", { name: "carol", password: "short" })).status, 400);
    assert.equal((await admin("POST", "/v1/users", { name: "bad name", password: "long enough" })).status, 400);
    for (const action of ["produce", "consume", "create"]) {
      assert.equal((await admin("POST", "/v1/users/alice/grants", { action, pattern: "orders-*" })).status, 201);
    }
    assert.equal((await admin("POST", "/v1/users/bob/grants", { action: "consume", pattern: "orders-eu" })).status, 201);
    assert.equal((await admin("POST", "/v1/users/bob/grants", { action: "admin", pattern: "x" })).status, 400);
    assert.equal((await admin("POST", "/v1/users/bob/grants", { action: "fly", pattern: "x" })).status, 400);
    assert.equal((await admin("POST", "/v1/users/nobody/grants", { action: "consume", pattern: "x" })).status, 404);
    const grants = (await (await admin("GET", "/v1/users/alice/grants")).json()) as { grants: unknown[] };
    assert.equal(grants.grants.length, 3);

    // create: the pattern's prefix, not a lookalike; the creator owns the topic.
    const created = await alice("POST", "/v1/topics", { name: "orders-eu", partitions: 1 });
    assert.equal(created.status, 201);
    assert.equal(((await created.json()) as { owner: string }).owner, "alice");
    assert.equal((await alice("POST", "/v1/topics", { name: "ordersX" })).status, 403);
    assert.equal((await alice("POST", "/v1/topics", { name: "payments" })).status, 403);
    assert.equal((await admin("POST", "/v1/topics", { name: "ordersX", partitions: 1 })).status, 201);
    assert.equal((await admin("POST", "/v1/topics", { name: "orders-us", partitions: 1 })).status, 201);

    // produce
    assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "hello", true)).status, 202);
    assert.equal((await alice("POST", "/v1/topics/orders-us/messages", "hi us", true)).status, 202);
    const denied = await alice("POST", "/v1/topics/ordersX/messages", "no", true);
    assert.equal(denied.status, 403);
    assert.equal(await code(denied), "forbidden");
    assert.equal((await bob("POST", "/v1/topics/orders-eu/messages", "no", true)).status, 403);
    assert.equal((await bob("POST", "/v1/topics/orders-eu/messages/batch", { messages: [] })).status, 403);

    // consume, ack, replay: bob only on orders-eu.
    const m = await bob("POST", "/v1/topics/orders-eu/consume");
    assert.equal(m.status, 200);
    assert.equal(await m.text(), "hello");
    const handle = m.headers.get("narad-receipt-handle")!;
    assert.equal((await alice("POST", `/v1/topics/orders-eu/ack?receipt_handle=${handle}&extend=true`)).status, 204, "alice may consume orders-*");
    assert.equal((await bob("POST", `/v1/topics/orders-eu/ack?receipt_handle=${handle}`)).status, 204);
    assert.equal((await bob("GET", "/v1/topics/orders-eu/partitions/0/messages")).status, 200);
    assert.equal((await bob("POST", "/v1/topics/orders-us/consume")).status, 403);
    assert.equal((await bob("GET", "/v1/topics/orders-us/partitions/0/messages")).status, 403);
    assert.equal((await bob("POST", "/v1/topics/orders-us/ack/batch", { receipt_handles: [] })).status, 403);
    assert.equal((await bob("POST", "/v1/topics/ordersX/consume/batch")).status, 403);

    // visibility: a list shows what the user may see.
    const names = async (who: ReturnType<typeof as>) => ((await (await who("GET", "/v1/topics")).json()) as { topics: { name: string }[] }).topics.map((t) => t.name);
    assert.deepEqual(await names(bob), ["orders-eu"]);
    assert.deepEqual(await names(alice), ["orders-eu", "orders-us"]);
    assert.deepEqual(await names(admin), ["orders-eu", "orders-us", "ordersX"]);
    assert.equal((await bob("GET", "/v1/topics/orders-us")).status, 403);
    assert.equal((await bob("GET", "/v1/topics/orders-eu")).status, 200);

    // ownership: the owner changes and deletes its own topic, not others' that its grants match.
    assert.equal((await alice("PATCH", "/v1/topics/orders-eu", { partitions: 2 })).status, 200);
    assert.equal((await bob("PATCH", "/v1/topics/orders-eu", { partitions: 3 })).status, 403);
    assert.equal((await alice("PATCH", "/v1/topics/orders-us", { partitions: 3 })).status, 403);
    assert.equal((await alice("DELETE", "/v1/topics/orders-us")).status, 403);
    assert.equal((await bob("DELETE", "/v1/topics/orders-eu")).status, 403);

    // admin only
    assert.equal((await alice("GET", "/v1/users")).status, 403);
    assert.equal((await alice("POST", "/v1/users", { name: "mallory", password: "mallory-pw-1" })).status, 403);
    assert.equal((await alice("POST", "/v1/users/alice/grants", { action: "admin" })).status, 403);
    const users = (await (await admin("GET", "/v1/users")).json()) as { users: { name: string }[] };
    assert.deepEqual(users.users.map((u) => u.name), ["admin", "alice", "bob"]);
  });

  test("a deleted user is locked out at once, and revoked grants stop at once", async () => {
    assert.equal((await bob("GET", "/v1/topics")).status, 200, "bob's credentials are cached by now");
    assert.equal((await admin("DELETE", "/v1/users/bob")).status, 204);
    assert.equal((await bob("GET", "/v1/topics")).status, 401);
    assert.equal((await admin("DELETE", "/v1/users/bob")).status, 404);
    assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "x", true)).status, 202);
    assert.equal((await admin("DELETE", "/v1/users/alice/grants?action=produce&pattern=orders-*")).status, 204);
    assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "x", true)).status, 403);
    assert.equal((await admin("DELETE", "/v1/users/alice/grants?action=produce&pattern=orders-*")).status, 404);
    assert.equal((await admin("POST", "/v1/users/alice/grants", { action: "produce", pattern: "orders-*" })).status, 201);
  });

  test("a user changes its own password; the old one stops working at once", async () => {
    const next = "alice-Password-2";
    assert.equal((await alice("PATCH", "/v1/users/alice", { password: next })).status, 200);
    assert.equal((await alice("GET", "/v1/topics")).status, 401);
    alice = as("alice", next);
    assert.equal((await alice("GET", "/v1/topics")).status, 200);
    assert.equal((await alice("PATCH", "/v1/users/admin", { password: "hijacked-pw" })).status, 403);
  });

  test("repeated failures for one user are slowed down, and the waiting ones bounded", async () => {
    assert.equal((await admin("POST", "/v1/users", { name: "dave", password: "dave-Password-1" })).status, 201);
    const wrong = as("dave", "not-the-password");
    for (let i = 0; i < 5; i++) assert.equal((await wrong("GET", "/v1/topics")).status, 401);
    const statuses = await Promise.all(Array.from({ length: 30 }, () => wrong("GET", "/v1/topics").then((r) => r.status)));
    assert.ok(statuses.includes(429), `some of 30 concurrent guesses must be refused outright, got ${statuses.join(",")}`);
    assert.ok(statuses.every((s) => s === 401 || s === 429));
    // Other users are not affected.
    assert.equal((await admin("GET", "/v1/topics")).status, 200);
  });

  test("the CLI and SDK take credentials from flags and NARAD_USER/NARAD_PASSWORD", async () => {
    const flags = await runNarad(["topic", "list", "--url", node.url, "--user", "admin", "--password", ADMIN_PW]);
    assert.equal(flags.code, 0, flags.stderr);
    assert.match(flags.stdout, /orders-eu/);
    const env = await runNarad(["topic", "list", "--url", node.url], { env: { NARAD_USER: "admin", NARAD_PASSWORD: ADMIN_PW } });
    assert.equal(env.code, 0, env.stderr);
    const none = await runNarad(["topic", "list", "--url", node.url], { env: { NARAD_USER: "", NARAD_PASSWORD: "" } });
    assert.notEqual(none.code, 0);
    assert.match(none.stderr, /unauthorized/);
    const { Narad } = await import("../src/client/index.js");
    const c = new Narad({ url: node.url, user: "admin", password: ADMIN_PW });
    assert.ok((await c.listTopics()).length >= 2);
    const bad = new Narad({ url: node.url, user: "admin", password: "nope-nope" });
    await assert.rejects(bad.listTopics(), (e: Error & { status?: number }) => e.status === 401);
  });

  test("grants survive a restart, and no password is stored in clear under the data dir", async () => {
    assert.equal(await node.stop(), 0);
    node = await startNode({ dev: false, dataDir: node.dataDir, env: { NARAD_ADMIN_PASSWORD: "" } });
    assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "after restart", true)).status, 202);
    assert.equal((await bob("GET", "/v1/topics")).status, 401);
    assert.equal((await admin("GET", "/v1/users/alice/grants")).status, 200);
    const files: string[] = [];
    const walk = async (d: string) => {
      for (const n of await readdir(d)) {
        const p = join(d, n);
        if ((await stat(p)).isDirectory()) await walk(p);
        else files.push(p);
      }
    };
    await walk(node.dataDir);
    for (const f of files) {
      const bytes = await readFile(f);
      for (const pw of [ADMIN_PW, ALICE_PW, BOB_PW, "alice-Password-2", "dave-Password-1"]) {
        assert.equal(bytes.indexOf(Buffer.from(pw)), -1, `${f} holds a password in clear`);
      }
    }
    assert.match(node.output(), /^(?![\s\S]*admin-Secret-42)/, "logs never hold the password");
  });
});

describe("--dev", () => {
  test("takes requests with no credentials", async () => {
    const n = await startNode({ dev: true });
    try {
      assert.equal((await fetch(`${n.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "open" }) })).status, 201);
      assert.equal((await fetch(`${n.url}/v1/topics/open/messages`, { method: "POST", body: "x" })).status, 202);
      assert.equal((await fetch(`${n.url}/v1/users`)).status, 200);
    } finally {
      await n.kill();
      await removeDir(n.dataDir);
    }
  });
});
