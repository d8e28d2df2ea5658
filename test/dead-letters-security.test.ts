// Grants of the dead-letter routes (docs/security.md): a redrive needs consume on the dead-letter
// topic and produce on every topic it produces to; dead_letter=true is an ack, under consume. A
// refused redrive moves nothing it was refused for, and leaves the messages in the dead-letter
// topic. Real process with security on, real HTTP.

import assert from "node:assert/strict";
import { after, test } from "node:test";
import { waitFor } from "./harness.js";
import { singleNode, type Deployment } from "./support/deployment.js";

const ADMIN_PW = "dlq-admin-password";
const ALICE_PW = "alice-password-1";
const basic = (u: string, p: string) => `Basic ${Buffer.from(`${u}:${p}`).toString("base64")}`;

let d: Deployment | undefined;
after(async () => {
  await d?.stop();
});

test("redrive needs consume on the dead-letter topic and produce on its targets; dead_letter=true needs consume", async () => {
  d = await singleNode({ adminPassword: ADMIN_PW });
  const url = d.urls[0]!;
  const call = async (auth: string, method: string, path: string, body?: unknown) => {
    const r = await fetch(url + path, { method, headers: { authorization: auth, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : null, headers: r.headers };
  };
  const admin = basic("admin", ADMIN_PW);
  const alice = basic("alice", ALICE_PW);
  assert.equal((await call(admin, "POST", "/v1/topics", { name: "jobs-dlq" })).status, 201);
  assert.equal((await call(admin, "POST", "/v1/topics", { name: "jobs", partitions: 1, dead_letter_topic: "jobs-dlq" })).status, 201);
  assert.equal((await call(admin, "POST", "/v1/users", { name: "alice", password: ALICE_PW })).status, 201);
  assert.equal((await call(admin, "POST", "/v1/users/alice/grants", { action: "consume", pattern: "jobs" })).status, 201);
  assert.equal((await fetch(`${url}/v1/topics/jobs/messages`, { method: "POST", headers: { authorization: admin }, body: "j1" })).status, 202);

  // alice consumes jobs and dead-letters the message: an ack, under her consume grant.
  const r = await fetch(`${url}/v1/topics/jobs/consume?wait_ms=2000`, { method: "POST", headers: { authorization: alice } });
  assert.equal(r.status, 200);
  await r.arrayBuffer();
  const handle = r.headers.get("narad-receipt-handle")!;
  assert.equal((await fetch(`${url}/v1/topics/jobs/ack?receipt_handle=${encodeURIComponent(handle)}&dead_letter=true`, { method: "POST", headers: { authorization: alice } })).status, 204);
  const inDlq = async () => {
    let n = 0;
    for (let p = 0; p < 3; p++) n += ((await call(admin, "GET", `/v1/topics/jobs-dlq/partitions/${p}/messages`)).body!.messages as unknown[]).length;
    return n;
  };
  await waitFor(async () => (await inDlq()) === 1, { timeoutMs: 10_000, what: "the dead letter" });

  // No consume on the dead-letter topic: 403.
  assert.equal((await call(alice, "POST", "/v1/topics/jobs-dlq/redrive", {})).status, 403);
  assert.equal((await call(admin, "POST", "/v1/users/alice/grants", { action: "consume", pattern: "jobs-dlq" })).status, 201);
  // Consume there, but no produce on the origin: 403, and the message stays in the dead-letter topic.
  const refused = await call(alice, "POST", "/v1/topics/jobs-dlq/redrive", {});
  assert.equal(refused.status, 403, JSON.stringify(refused.body));
  const nowhere = await call(admin, "POST", "/v1/topics/jobs-dlq/redrive", { max_messages: 1, to: "jobs-dlq-nowhere" });
  assert.equal(nowhere.status, 404);
  // Nothing was taken out: a consume of the dead-letter topic still gets it (then lets it go).
  const still = await fetch(`${url}/v1/topics/jobs-dlq/consume?wait_ms=2000`, { method: "POST", headers: { authorization: admin } });
  assert.equal(still.status, 200);
  await still.arrayBuffer();
  assert.equal((await fetch(`${url}/v1/topics/jobs-dlq/ack?receipt_handle=${encodeURIComponent(still.headers.get("narad-receipt-handle")!)}&extend=0`, { method: "POST", headers: { authorization: admin } })).status, 204);
  assert.equal((await call(admin, "POST", "/v1/users/alice/grants", { action: "produce", pattern: "jobs" })).status, 201);
  const ok = await call(alice, "POST", "/v1/topics/jobs-dlq/redrive", {});
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  assert.deepEqual(ok.body, { moved: 1, skipped: 0 });
  const back = await fetch(`${url}/v1/topics/jobs/consume?wait_ms=2000`, { method: "POST", headers: { authorization: alice } });
  assert.equal(back.status, 200);
  assert.equal(Buffer.from(await back.arrayBuffer()).toString(), "j1");
});

test("naming a dead_letter_topic needs produce on it or owning it: a topic owner cannot send messages into another's topic", async () => {
  const url = d!.urls[0]!;
  const call = async (auth: string, method: string, path: string, body?: unknown) => {
    const r = await fetch(url + path, { method, headers: { authorization: auth, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await r.text();
    return { status: r.status, body: text ? (JSON.parse(text) as { error?: { code: string } }) : null };
  };
  const admin = basic("admin", ADMIN_PW);
  const alice = basic("alice", ALICE_PW);
  assert.equal((await call(admin, "POST", "/v1/topics", { name: "bobs-topic" })).status, 201);
  assert.equal((await call(admin, "POST", "/v1/users/alice/grants", { action: "create", pattern: "alice-*" })).status, 201);
  let r = await call(alice, "POST", "/v1/topics", { name: "alice-src", max_deliveries: 2, dead_letter_topic: "bobs-topic" });
  assert.equal(r.status, 403, JSON.stringify(r.body));
  r = await call(alice, "POST", "/v1/topics", { name: "alice-src", max_deliveries: 2, dead_letter_topic: "no-such-topic" });
  assert.equal(r.status, 403, "a name no grant covers answers as a topic without rights does");
  assert.equal((await call(alice, "POST", "/v1/topics", { name: "alice-src" })).status, 201);
  r = await call(alice, "PATCH", "/v1/topics/alice-src", { dead_letter_topic: "bobs-topic" });
  assert.equal(r.status, 403, JSON.stringify(r.body));
  // Her own topic, or one she may produce to, she may name.
  assert.equal((await call(alice, "POST", "/v1/topics", { name: "alice-dlq" })).status, 201);
  r = await call(alice, "PATCH", "/v1/topics/alice-src", { max_deliveries: 2, dead_letter_topic: "alice-dlq" });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  r = await call(alice, "PATCH", "/v1/topics/alice-src", { dead_letter_topic: "jobs" }); // produce on jobs: granted above
  assert.equal(r.status, 200, JSON.stringify(r.body));
});
