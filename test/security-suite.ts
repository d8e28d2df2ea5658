// The security suite: users, grants and HTTP Basic auth, black-box over real HTTP against a
// deployment with security on. One test body for every deployment (test/support/deployment.ts):
// requests go through the nodes in turn, and every answer that must not depend on the node (a
// 401, a 403, a 200 on a read) is asked of every node. On a cluster a request for a partition
// that reaches a node which does not own it is forwarded with the user's credentials and
// authorized again at the owner (cluster-scenarios.test.ts checks the owner's own check with a
// hand-made forward); here the user sees the same answers whichever node the request reached.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { runNarad } from "./harness.js";
import type { Deploy, Deployment } from "./support/deployment.js";

const ADMIN_PW = "admin-Secret-42";
const ALICE_PW = "alice-Password-1";
const BOB_PW = "bob-Password-22";

const basic = (user: string, pw: string) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;

export function defineSecuritySuite(name: string, deploy: Deploy): void {
  describe(`security: ${name}`, () => {
    let d: Deployment;
    let turn = 0;
    /** The next node's URL: requests spread across the nodes. */
    const next = () => d.urls[turn++ % d.urls.length]!;
    type As = (method: string, path: string, body?: unknown, raw?: boolean, url?: string) => Promise<Response>;
    const as =
      (user: string, pw: string): As =>
      (method, path, body, raw, url = next()) =>
        fetch(url + path, {
          method,
          body: body === undefined ? undefined : raw ? (body as string) : JSON.stringify(body),
          headers: { authorization: basic(user, pw), "content-type": "application/json" },
        });
    /** The status of the same request through every node, in node order. */
    const everywhere = async (who: As, method: string, path: string, body?: unknown, raw?: boolean) => {
      const statuses: number[] = [];
      for (const url of d.urls) {
        const r = await who(method, path, body, raw, url);
        await r.arrayBuffer();
        statuses.push(r.status);
      }
      return statuses;
    };
    const each = (status: number) => d.urls.map(() => status);
    const admin = as("admin", ADMIN_PW);
    let alice = as("alice", ALICE_PW);
    const bob = as("bob", BOB_PW);
    const code = async (r: Response) => ((await r.json()) as { error: { code: string } }).error.code;

    before(async () => {
      d = await deploy({ adminPassword: ADMIN_PW });
    });
    after(async () => {
      await d?.stop();
    });

    test("missing or wrong credentials are 401 with WWW-Authenticate; probes need none", async () => {
      for (const url of d.urls) {
        for (const headers of [{} as Record<string, string>, { authorization: basic("admin", "wrong-password") }, { authorization: basic("nobody", "x-password") }, { authorization: "Bearer abc" }, { authorization: "Basic !!!" }]) {
          const r = await fetch(`${url}/v1/topics`, { headers });
          assert.equal(r.status, 401, JSON.stringify(headers));
          assert.equal(r.headers.get("www-authenticate"), 'Basic realm="narad"');
          assert.equal(await code(r), "unauthorized");
        }
        assert.equal((await fetch(`${url}/healthz`)).status, 200);
        assert.equal((await fetch(`${url}/readyz`)).status, 200);
        assert.equal((await fetch(`${url}/metrics`)).status, 401);
      }
      assert.deepEqual(await everywhere(admin, "GET", "/metrics"), each(200));
      assert.deepEqual(await everywhere(admin, "GET", "/v1/topics"), each(200));
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
      for (const url of d.urls) {
        const grants = (await (await admin("GET", "/v1/users/alice/grants", undefined, false, url)).json()) as { grants: unknown[] };
        assert.equal(grants.grants.length, 3, `alice's grants through ${url}`);
      }

      // create: the pattern's prefix, not a lookalike; the creator owns the topic.
      const created = await alice("POST", "/v1/topics", { name: "orders-eu", partitions: 1 });
      assert.equal(created.status, 201);
      assert.equal(((await created.json()) as { owner: string }).owner, "alice");
      assert.deepEqual(await everywhere(alice, "POST", "/v1/topics", { name: "ordersX" }), each(403));
      assert.deepEqual(await everywhere(alice, "POST", "/v1/topics", { name: "payments" }), each(403));
      assert.equal((await admin("POST", "/v1/topics", { name: "ordersX", partitions: 1 })).status, 201);
      assert.equal((await admin("POST", "/v1/topics", { name: "orders-us", partitions: 1 })).status, 201);

      // produce
      assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "hello", true)).status, 202);
      assert.equal((await alice("POST", "/v1/topics/orders-us/messages", "hi us", true)).status, 202);
      const denied = await alice("POST", "/v1/topics/ordersX/messages", "no", true);
      assert.equal(denied.status, 403);
      assert.equal(await code(denied), "forbidden");
      assert.deepEqual(await everywhere(alice, "POST", "/v1/topics/ordersX/messages", "no", true), each(403));
      assert.deepEqual(await everywhere(bob, "POST", "/v1/topics/orders-eu/messages", "no", true), each(403));
      assert.deepEqual(await everywhere(bob, "POST", "/v1/topics/orders-eu/messages/batch", { messages: [] }), each(403));

      // consume, ack, replay: bob only on orders-eu. The lease, its extension and its ack go
      // through three different nodes in turn.
      const m = await bob("POST", "/v1/topics/orders-eu/consume");
      assert.equal(m.status, 200);
      assert.equal(await m.text(), "hello");
      const handle = m.headers.get("narad-receipt-handle")!;
      assert.equal((await alice("POST", `/v1/topics/orders-eu/ack?receipt_handle=${handle}&extend=true`)).status, 204, "alice may consume orders-*");
      assert.equal((await bob("POST", `/v1/topics/orders-eu/ack?receipt_handle=${handle}`)).status, 204);
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics/orders-eu/partitions/0/messages"), each(200));
      assert.deepEqual(await everywhere(bob, "POST", "/v1/topics/orders-us/consume"), each(403));
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics/orders-us/partitions/0/messages"), each(403));
      assert.deepEqual(await everywhere(bob, "POST", "/v1/topics/orders-us/ack/batch", { receipt_handles: [] }), each(403));
      assert.deepEqual(await everywhere(bob, "POST", "/v1/topics/ordersX/consume/batch"), each(403));

      // visibility: a list shows what the user may see, through every node.
      const names = async (who: As, url: string) => ((await (await who("GET", "/v1/topics", undefined, false, url)).json()) as { topics: { name: string }[] }).topics.map((t) => t.name);
      for (const url of d.urls) {
        assert.deepEqual(await names(bob, url), ["orders-eu"]);
        assert.deepEqual(await names(alice, url), ["orders-eu", "orders-us"]);
        assert.deepEqual(await names(admin, url), ["orders-eu", "orders-us", "ordersX"]);
      }
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics/orders-us"), each(403));
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics/orders-eu"), each(200));

      // ownership: the owner changes and deletes its own topic, not others' that its grants match.
      assert.equal((await alice("PATCH", "/v1/topics/orders-eu", { partitions: 2 })).status, 200);
      assert.deepEqual(await everywhere(bob, "PATCH", "/v1/topics/orders-eu", { partitions: 3 }), each(403));
      assert.deepEqual(await everywhere(alice, "PATCH", "/v1/topics/orders-us", { partitions: 3 }), each(403));
      assert.deepEqual(await everywhere(alice, "DELETE", "/v1/topics/orders-us"), each(403));
      assert.deepEqual(await everywhere(bob, "DELETE", "/v1/topics/orders-eu"), each(403));

      // admin only
      assert.deepEqual(await everywhere(alice, "GET", "/v1/users"), each(403));
      assert.deepEqual(await everywhere(alice, "POST", "/v1/users", { name: "mallory", password: "mallory-pw-1" }), each(403));
      assert.deepEqual(await everywhere(alice, "POST", "/v1/users/alice/grants", { action: "admin" }), each(403));
      for (const url of d.urls) {
        const users = (await (await admin("GET", "/v1/users", undefined, false, url)).json()) as { users: { name: string }[] };
        assert.deepEqual(users.users.map((u) => u.name), ["admin", "alice", "bob"]);
      }
    });

    test("a deleted user is locked out at once, and revoked grants stop at once", async () => {
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics"), each(200), "bob's credentials are cached by now");
      assert.equal((await admin("DELETE", "/v1/users/bob")).status, 204);
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics"), each(401));
      assert.equal((await admin("DELETE", "/v1/users/bob")).status, 404);
      assert.deepEqual(await everywhere(alice, "POST", "/v1/topics/orders-eu/messages", "x", true), each(202));
      assert.equal((await admin("DELETE", "/v1/users/alice/grants?action=produce&pattern=orders-*")).status, 204);
      assert.deepEqual(await everywhere(alice, "POST", "/v1/topics/orders-eu/messages", "x", true), each(403));
      assert.equal((await admin("DELETE", "/v1/users/alice/grants?action=produce&pattern=orders-*")).status, 404);
      assert.equal((await admin("POST", "/v1/users/alice/grants", { action: "produce", pattern: "orders-*" })).status, 201);
    });

    test("a user given a deleted user's name does not own its topics: the topic shows no owner, and only an admin changes or deletes it", async () => {
      const first = as("erin", "erin-Password-1");
      const second = as("erin", "erin-Password-2");
      assert.equal((await admin("POST", "/v1/users", { name: "erin", password: "erin-Password-1" })).status, 201);
      assert.equal((await admin("POST", "/v1/users/erin/grants", { action: "create", pattern: "erin-*" })).status, 201);
      const made = await first("POST", "/v1/topics", { name: "erin-ledger", partitions: 1 });
      assert.equal(made.status, 201);
      assert.equal(((await made.json()) as { owner: string | null }).owner, "erin");
      assert.equal((await admin("DELETE", "/v1/users/erin")).status, 204);
      assert.equal((await admin("POST", "/v1/users", { name: "erin", password: "erin-Password-2" })).status, 201);
      assert.equal((await admin("POST", "/v1/users/erin/grants", { action: "create", pattern: "erin-*" })).status, 201);
      for (const url of d.urls) {
        const shown = (await (await second("GET", "/v1/topics/erin-ledger", undefined, false, url)).json()) as { owner: string | null };
        assert.equal(shown.owner, null, `the deleted owner shows as null through ${url}`);
      }
      assert.deepEqual(await everywhere(second, "PATCH", "/v1/topics/erin-ledger", { partitions: 2 }), each(403));
      assert.deepEqual(await everywhere(second, "DELETE", "/v1/topics/erin-ledger"), each(403));
      const own = await second("POST", "/v1/topics", { name: "erin-new", partitions: 1 });
      assert.equal(own.status, 201);
      assert.equal(((await own.json()) as { owner: string | null }).owner, "erin", "what the new erin creates is hers");
      assert.equal((await second("DELETE", "/v1/topics/erin-new")).status, 204);
      assert.equal((await admin("DELETE", "/v1/topics/erin-ledger")).status, 204);
    });

    test("a user changes its own password; the old one stops working at once", async () => {
      const next = "alice-Password-2";
      assert.deepEqual(await everywhere(alice, "GET", "/v1/topics"), each(200), "alice's credentials are cached by now");
      assert.equal((await alice("PATCH", "/v1/users/alice", { password: next })).status, 200);
      assert.deepEqual(await everywhere(alice, "GET", "/v1/topics"), each(401));
      alice = as("alice", next);
      assert.deepEqual(await everywhere(alice, "GET", "/v1/topics"), each(200));
      assert.deepEqual(await everywhere(alice, "PATCH", "/v1/users/admin", { password: "hijacked-pw" }), each(403));
    });

    test("repeated failures for one user are slowed down, and the waiting ones bounded", async () => {
      assert.equal((await admin("POST", "/v1/users", { name: "dave", password: "dave-Password-1" })).status, 201);
      const wrong = as("dave", "not-the-password");
      // Each node counts the failures it sees, per user and client address
      // (src/auth/authenticator.ts), so the guesses go through one node at a time: the same
      // answers through every node.
      for (const url of d.urls) {
        for (let i = 0; i < 5; i++) assert.equal((await wrong("GET", "/v1/topics", undefined, false, url)).status, 401);
        const statuses = await Promise.all(Array.from({ length: 30 }, () => wrong("GET", "/v1/topics", undefined, false, url).then((r) => r.status)));
        assert.ok(statuses.includes(429), `some of 30 concurrent guesses through ${url} must be refused outright, got ${statuses.join(",")}`);
        assert.ok(statuses.every((s) => s === 401 || s === 429));
      }
      // Other users are not affected.
      assert.deepEqual(await everywhere(admin, "GET", "/v1/topics"), each(200));
    });

    test("the CLI and SDK take credentials from flags and NARAD_USER/NARAD_PASSWORD", async () => {
      const flags = await runNarad(["topic", "list", "--url", next(), "--user", "admin", "--password", ADMIN_PW]);
      assert.equal(flags.code, 0, flags.stderr);
      assert.match(flags.stdout, /orders-eu/);
      const env = await runNarad(["topic", "list", "--url", next()], { env: { NARAD_USER: "admin", NARAD_PASSWORD: ADMIN_PW } });
      assert.equal(env.code, 0, env.stderr);
      const none = await runNarad(["topic", "list", "--url", next()], { env: { NARAD_USER: "", NARAD_PASSWORD: "" } });
      assert.notEqual(none.code, 0);
      assert.match(none.stderr, /unauthorized/);
      const { Narad } = await import("../src/client/index.js");
      const c = new Narad({ url: next(), user: "admin", password: ADMIN_PW });
      assert.ok((await c.listTopics()).length >= 2);
      const bad = new Narad({ url: next(), user: "admin", password: "nope-nope" });
      await assert.rejects(bad.listTopics(), (e: Error & { status?: number }) => e.status === 401);
      await c.destroy();
      await bad.destroy();
    });

    test("grants survive a restart, and no password is stored in clear under the data dir", async () => {
      assert.deepEqual(await d.stopAll(), d.nodes.map(() => 0));
      await d.startAll({ env: { NARAD_ADMIN_PASSWORD: "" } });
      assert.equal((await alice("POST", "/v1/topics/orders-eu/messages", "after restart", true)).status, 202);
      assert.deepEqual(await everywhere(bob, "GET", "/v1/topics"), each(401));
      assert.deepEqual(await everywhere(admin, "GET", "/v1/users/alice/grants"), each(200));
      const files: string[] = [];
      const walk = async (dir: string) => {
        for (const n of await readdir(dir)) {
          const p = join(dir, n);
          if ((await stat(p)).isDirectory()) await walk(p);
          else files.push(p);
        }
      };
      for (const n of d.nodes) await walk(n.dataDir);
      for (const f of files) {
        const bytes = await readFile(f);
        for (const pw of [ADMIN_PW, ALICE_PW, BOB_PW, "alice-Password-2", "dave-Password-1"]) {
          assert.equal(bytes.indexOf(Buffer.from(pw)), -1, `${f} holds a password in clear`);
        }
      }
      for (const n of d.nodes) assert.match(n.output(), /^(?![\s\S]*admin-Secret-42)/, "logs never hold the password");
    });
  });
}
