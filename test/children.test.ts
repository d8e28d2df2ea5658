// Child topics on one node (fan-out, delay) and to another node (remote), black-box over HTTP.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";

const cleanup: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanup.reverse()) await c();
});

async function node(opts: Parameters<typeof startNode>[0] = {}): Promise<RunningNode> {
  const n = await startNode(opts);
  cleanup.push(() => n.kill());
  if (opts.dataDir === undefined) cleanup.push(() => removeDir(n.dataDir));
  return n;
}

function api(url: string, auth?: string) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (auth) headers.authorization = auth;
  return {
    json: (method: string, path: string, body?: unknown) => fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) }),
    produce: async (topic: string, payload: string, key?: string) => {
      const r = await fetch(`${url}/v1/topics/${topic}/messages${key ? `?key=${encodeURIComponent(key)}` : ""}`, { method: "POST", body: payload, headers });
      assert.equal(r.status, 202, await r.clone().text());
      return (await r.json()) as { partition: number; offset: number };
    },
    /** Consumes and acks everything available now (waits `waitMs` for each batch). */
    drain: async (topic: string, waitMs = 0) => {
      const out: { payload: string; key: string | null }[] = [];
      for (;;) {
        const r = await fetch(`${url}/v1/topics/${topic}/consume/batch?max_messages=100&wait_ms=${waitMs}`, { method: "POST", headers });
        assert.equal(r.status, 200);
        const ms = ((await r.json()) as { messages: { receipt_handle: string; payload_base64: string; key: string | null }[] }).messages;
        if (ms.length === 0) return out;
        for (const m of ms) out.push({ payload: Buffer.from(m.payload_base64, "base64").toString(), key: m.key });
        const a = await fetch(`${url}/v1/topics/${topic}/ack/batch`, { method: "POST", headers, body: JSON.stringify({ receipt_handles: ms.map((m) => m.receipt_handle) }) });
        assert.equal(a.status, 200);
      }
    },
  };
}

describe("child topics", () => {
  test("a fan-out child gets every message produced after the attach, keys included, and none before", async () => {
    const n = await node();
    const c = api(n.url);
    assert.equal((await c.json("POST", "/v1/topics", { name: "orders", partitions: 2 })).status, 201);
    assert.equal((await c.json("POST", "/v1/topics", { name: "audit", partitions: 3 })).status, 201);
    for (let i = 0; i < 20; i++) await c.produce("orders", `before-${i}`);
    const at = await c.json("POST", "/v1/topics/orders/children", { topic: "audit", kind: "fanout" });
    assert.equal(at.status, 201, await at.clone().text());
    assert.deepEqual(await at.json(), { topic: "audit", kind: "fanout" });
    for (let i = 0; i < 30; i++) await c.produce("orders", `after-${i}`, i % 2 ? `k${i}` : undefined);
    const parent = (await (await c.json("GET", "/v1/topics/orders")).json()) as { children: unknown[] };
    assert.deepEqual(parent.children, [{ topic: "audit", kind: "fanout" }]);
    const child = (await (await c.json("GET", "/v1/topics/audit")).json()) as { parent: unknown };
    assert.deepEqual(child.parent, { topic: "orders", kind: "fanout" });
    const got: { payload: string; key: string | null }[] = [];
    await waitFor(async () => {
      got.push(...(await c.drain("audit", 200)));
      return got.length >= 30;
    }, { timeoutMs: 10_000, what: "30 copies" });
    assert.deepEqual(got.map((m) => m.payload).sort(), Array.from({ length: 30 }, (_, i) => `after-${i}`).sort());
    for (const m of got) {
      const i = Number(m.payload.split("-")[1]);
      assert.equal(m.key, i % 2 ? `k${i}` : null);
    }
    // The parent keeps its own delivery obligation: all 50 are there to consume.
    assert.equal((await c.drain("orders")).length, 50);
    const metrics = await (await fetch(`${n.url}/metrics`)).text();
    assert.match(metrics, /narad_child_copied_messages_total\{parent="orders",child="audit"\} 30/);
    assert.match(metrics, /narad_child_lag_messages\{parent="orders",child="audit"\} 0/);
    // Detached: no more copies.
    assert.equal((await c.json("DELETE", "/v1/topics/orders/children/audit")).status, 204);
    await c.produce("orders", "after-detach");
    assert.deepEqual(((await (await c.json("GET", "/v1/topics/orders/children")).json()) as { children: unknown[] }).children, []);
    assert.deepEqual(await c.drain("audit", 300), []);
  });

  test("the rules: one parent, no grandchildren, existing children, no replica on one node", async () => {
    const n = await node();
    const c = api(n.url);
    for (const name of ["p", "q", "c1", "c2"]) assert.equal((await c.json("POST", "/v1/topics", { name, partitions: 1 })).status, 201);
    assert.equal((await c.json("POST", "/v1/topics/p/children", { topic: "c1", kind: "fanout" })).status, 201);
    const cases: [string, unknown, number, string][] = [
      ["c1", { topic: "c2", kind: "fanout" }, 400, "invalid_child"], // a child cannot have children
      ["q", { topic: "c1", kind: "fanout" }, 400, "invalid_child"], // a second parent
      ["q", { topic: "p", kind: "fanout" }, 400, "invalid_child"], // p has children
      ["p", { topic: "c1", kind: "fanout" }, 409, "child_exists"],
      ["p", { topic: "p", kind: "fanout" }, 400, "invalid_child"],
      ["p", { topic: "nope", kind: "fanout" }, 404, "topic_not_found"],
      ["p", { topic: "c2", kind: "replica" }, 400, "invalid_child"],
      ["p", { topic: "c2", kind: "delay" }, 400, "invalid_argument"],
      ["p", { topic: "c2", kind: "fanout", delay_ms: 5 }, 400, "invalid_argument"],
      ["p", { topic: "c2", kind: "remote" }, 400, "invalid_argument"],
      ["p", { topic: "c2", kind: "teleport" }, 400, "invalid_argument"],
      ["p", { topic: "bad name", kind: "fanout" }, 400, "invalid_topic_name"],
      ["nope", { topic: "c2", kind: "fanout" }, 404, "topic_not_found"],
    ];
    for (const [parent, body, status, code] of cases) {
      const r = await c.json("POST", `/v1/topics/${parent}/children`, body);
      assert.equal(r.status, status, `${parent} ← ${JSON.stringify(body)}`);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, code);
    }
    const notAttached = await c.json("DELETE", "/v1/topics/p/children/c2");
    assert.equal(notAttached.status, 404);
    assert.equal(((await notAttached.json()) as { error: { code: string } }).error.code, "child_not_found");
    // Deleting a child detaches it from its parent.
    assert.equal((await c.json("DELETE", "/v1/topics/c1")).status, 204);
    assert.deepEqual(((await (await c.json("GET", "/v1/topics/p")).json()) as { children: unknown[] }).children, []);
    await c.produce("p", "still fine");
  });

  test("a delay child's copy is never visible before the delay, even across a kill and restart", async () => {
    const n1 = await node();
    const c1 = api(n1.url);
    assert.equal((await c1.json("POST", "/v1/topics", { name: "jobs", partitions: 1 })).status, 201);
    assert.equal((await c1.json("POST", "/v1/topics", { name: "retry", partitions: 1 })).status, 201);
    const delayMs = 1500;
    assert.equal((await c1.json("POST", "/v1/topics/jobs/children", { topic: "retry", kind: "delay", delay_ms: delayMs })).status, 201);
    const sentAt = Date.now();
    await c1.produce("jobs", "later");
    const early = await c1.drain("retry");
    assert.deepEqual(early, [], "nothing visible at once");
    const got = await waitFor(async () => {
      const d = await c1.drain("retry", 500);
      return d.length > 0 ? d : null;
    }, { timeoutMs: 10_000, what: "the delayed copy" });
    assert.ok(Date.now() - sentAt >= delayMs, "delivered only after the delay");
    assert.deepEqual(got.map((m) => m.payload), ["later"]);

    // Across a crash: produce, kill at once, restart; the copy still waits for its delay.
    const sent2 = Date.now();
    await c1.produce("jobs", "after-crash");
    await n1.kill();
    const n2 = await node({ dataDir: n1.dataDir });
    const c2 = api(n2.url);
    const got2 = await waitFor(async () => {
      const d = await c2.drain("retry", 500);
      if (d.length > 0) assert.ok(Date.now() - sent2 >= delayMs, `delivered ${Date.now() - sent2} ms after the produce, before the ${delayMs} ms delay`);
      return d.length > 0 ? d : null;
    }, { timeoutMs: 15_000, what: "the delayed copy after a restart" });
    assert.deepEqual(got2.map((m) => m.payload), ["after-crash"]);
  });

  test("kill -9 right after 202s: every message reaches the fan-out child after the restart", async () => {
    const n1 = await node();
    const c1 = api(n1.url);
    assert.equal((await c1.json("POST", "/v1/topics", { name: "src", partitions: 3 })).status, 201);
    assert.equal((await c1.json("POST", "/v1/topics", { name: "dst", partitions: 2 })).status, 201);
    assert.equal((await c1.json("POST", "/v1/topics/src/children", { topic: "dst", kind: "fanout" })).status, 201);
    const acked = new Set<string>();
    let seq = 0;
    let stop = false;
    const loops = Array.from({ length: 16 }, async () => {
      while (!stop) {
        const p = `m-${seq++}`;
        try {
          const r = await fetch(`${n1.url}/v1/topics/src/messages`, { method: "POST", body: p });
          if (r.status === 202) acked.add(p);
          await r.arrayBuffer();
        } catch {
          // in flight when the node died: ambiguous
        }
      }
    });
    await waitFor(() => acked.size >= 1500, { timeoutMs: 60_000, what: "1500 produces" });
    await n1.kill();
    stop = true;
    await Promise.all(loops);
    const n2 = await node({ dataDir: n1.dataDir });
    const c2 = api(n2.url);
    const seen = new Set<string>();
    await waitFor(async () => {
      for (const m of await c2.drain("dst", 300)) seen.add(m.payload);
      return [...acked].every((p) => seen.has(p));
    }, { timeoutMs: 30_000, what: "every acknowledged message in the child" });
    for (const p of seen) assert.match(p, /^m-\d+$/);
  });

  test("a remote child is pushed to another node with credentials, and catches up after it was down", async () => {
    const remote1 = await node({ dev: false, env: { NARAD_ADMIN_PASSWORD: "remote-admin-pw" } });
    const auth = `Basic ${Buffer.from("admin:remote-admin-pw").toString("base64")}`;
    const r1 = api(remote1.url, auth);
    assert.equal((await r1.json("POST", "/v1/topics", { name: "mirror", partitions: 2 })).status, 201);
    const local = await node();
    const l = api(local.url);
    assert.equal((await l.json("POST", "/v1/topics", { name: "events", partitions: 2 })).status, 201);
    const at = await l.json("POST", "/v1/topics/events/children", {
      topic: "mirror",
      kind: "remote",
      url: remote1.url,
      credentials: { user: "admin", password: "remote-admin-pw" },
    });
    assert.equal(at.status, 201, await at.clone().text());
    const listed = JSON.stringify(await (await l.json("GET", "/v1/topics/events")).json());
    assert.ok(!listed.includes("remote-admin-pw"), "credentials are never shown");
    for (let i = 0; i < 10; i++) await l.produce("events", `e-${i}`, `key-${i}`);
    const seen = new Map<string, string | null>();
    await waitFor(async () => {
      for (const m of await r1.drain("mirror", 200)) seen.set(m.payload, m.key);
      return seen.size >= 10;
    }, { timeoutMs: 10_000, what: "10 remote copies" });
    assert.equal(seen.get("e-3"), "key-3");

    await remote1.stop();
    for (let i = 10; i < 20; i++) await l.produce("events", `e-${i}`);
    await waitFor(async () => /narad_child_lag_messages\{parent="events",child="mirror"\} [1-9]/.test(await (await fetch(`${local.url}/metrics`)).text()), {
      timeoutMs: 10_000,
      what: "the lag to show while the remote is down",
    });
    const remote2 = await node({ dev: false, dataDir: remote1.dataDir, port: remote1.port, env: { NARAD_ADMIN_PASSWORD: "" } });
    const r2 = api(remote2.url, auth);
    await waitFor(async () => {
      for (const m of await r2.drain("mirror", 300)) seen.set(m.payload, m.key);
      return seen.size >= 20;
    }, { timeoutMs: 30_000, what: "the remote to catch up" });
    assert.deepEqual([...seen.keys()].sort(), Array.from({ length: 20 }, (_, i) => `e-${i}`).sort());
  });
});
