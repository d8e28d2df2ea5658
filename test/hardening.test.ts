// Regression tests of issue 12 (what an attacker and a bad day found), each named after what
// broke, against real node processes.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { mkdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, runNarad, startNode, tempDir, waitFor, type RunningNode } from "./harness.js";

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

  test("/metrics names every topic to any user: a user sees only the series of topics it may see", async () => {
    const json = { ...admin, "content-type": "application/json" };
    for (const name of ["hidden-ledger", "mine-orders"]) {
      assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: json, body: JSON.stringify({ name }) })).status, 201);
      assert.equal((await fetch(`${node.url}/v1/topics/${name}/messages`, { method: "POST", headers: admin, body: "m" })).status, 202);
    }
    assert.equal((await fetch(`${node.url}/v1/users`, { method: "POST", headers: json, body: JSON.stringify({ name: "nosy", password: "nosy-Password-9" }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/users/nosy/grants`, { method: "POST", headers: json, body: JSON.stringify({ action: "consume", pattern: "mine-*" }) })).status, 201);
    const nosy = await (await fetch(`${node.url}/metrics`, { headers: { authorization: basic("nosy", "nosy-Password-9") } })).text();
    assert.doesNotMatch(nosy, /hidden-ledger/);
    assert.match(nosy, /narad_produced_messages_total\{topic="mine-orders"\} 1/);
    assert.match(nosy, /narad_refusals_total/, "series without a topic are still there");
    const all = await (await fetch(`${node.url}/metrics`, { headers: admin })).text();
    assert.match(all, /narad_produced_messages_total\{topic="hidden-ledger"\} 1/);
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

describe("hardening, answers that broke the error contract (a dev node, raw TCP)", () => {
  let node: RunningNode;
  before(async () => {
    node = await startNode({ env: { NARAD_HTTP_HEADERS_TIMEOUT_MS: "1000", NARAD_HTTP_REQUEST_TIMEOUT_MS: "2000" } });
    const r = await fetch(`${node.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "edge", partitions: 1 }) });
    assert.equal(r.status, 201);
  });
  after(async () => {
    await node?.kill();
    if (node) await removeDir(node.dataDir);
  });

  /**
   * Sends bytes on a fresh connection; resolves with everything the node wrote once it closes the
   * connection. halfClose shuts the write side right after them (FIN), as `nc -N` does.
   */
  const raw = (bytes: string, halfClose = false): Promise<string> =>
    new Promise((resolve, reject) => {
      const s = net.connect({ port: node.port, host: "127.0.0.1", allowHalfOpen: halfClose });
      let out = "";
      s.setEncoding("latin1");
      s.on("data", (b: string) => (out += b));
      s.on("error", reject);
      s.on("close", () => resolve(out));
      s.setTimeout(20_000, () => reject(new Error(`no close within 20 s; got ${JSON.stringify(out.slice(0, 200))}`)));
      if (halfClose) s.end(bytes, "latin1");
      else s.write(bytes, "latin1");
    });
  const halfClosed = (bytes: string) => raw(bytes, true);
  const parse = (answer: string) => {
    const [head, ...rest] = answer.split("\r\n\r\n");
    const [statusLine, ...headerLines] = head!.split("\r\n");
    const headers = new Map(headerLines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
    const body = rest.join("\r\n\r\n");
    return { status: Number(statusLine!.split(" ")[1]), headers, body, code: body.startsWith("{") ? (JSON.parse(body) as { error?: { code: string } }).error?.code : undefined };
  };

  test("a 20 000-deep JSON value in a field is a 400 naming the field, not a 500", async () => {
    const body = `{"name":"deep","partitions":${"[".repeat(20_000)}${"]".repeat(20_000)}}`;
    const a = parse(await raw(`POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`));
    assert.equal(a.status, 400);
    assert.equal(a.code, "invalid_argument");
    assert.match(a.body, /partitions must be an integer from 1 to 1024, not an array/);
  });

  test("no Host header, a bad Expect and CONNECT are answered with the JSON error body, not by Node", async () => {
    const noHost = parse(await raw("GET /v1/topics HTTP/1.1\r\n\r\n"));
    assert.equal(noHost.status, 400);
    assert.equal(noHost.code, "bad_request");
    const expect = parse(await raw("POST /v1/topics HTTP/1.1\r\nHost: x\r\nExpect: magic\r\nContent-Length: 2\r\n\r\n"));
    assert.equal(expect.status, 417);
    assert.equal(expect.code, "expectation_failed");
    const connect = parse(await raw("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"));
    assert.equal(connect.status, 405);
    assert.equal(connect.code, "method_not_allowed");
    assert.match(connect.headers.get("allow")!, /GET/);
    // HTTP/1.0 needs no Host.
    assert.equal(parse(await raw("GET /healthz HTTP/1.0\r\n\r\n")).status, 200);
  });

  test("header and request timeouts answer 408 near their setting; header overflow answers 431", async () => {
    const started = Date.now();
    const slow = parse(await raw("GET /v1/topics HTTP/1.1\r\nHost: x\r\n"));
    assert.equal(slow.status, 408);
    assert.equal(slow.code, "request_timeout");
    // Node checks every 30 s by default; ours checks at least every second (a bound, not a speed).
    assert.ok(Date.now() - started < 15_000, `answered after ${Date.now() - started} ms`);
    // A body that stops arriving mid-way is the request timeout's too (it once answered 400).
    const silent = parse(await raw("POST /v1/topics/edge/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npartial"));
    assert.equal(silent.status, 408);
    assert.equal(silent.code, "request_timeout");
    const big = parse(await raw(`GET /v1/topics HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(20_000)}\r\n\r\n`));
    assert.equal(big.status, 431);
    assert.equal(big.code, "header_fields_too_large");
  });

  test("a replay limit above 1 000 is read as 1 000, however many digits it has", async () => {
    for (const limit of ["1001", "9999999999999999", "99999999999999999", "9".repeat(40)]) {
      const r = await fetch(`${node.url}/v1/topics/edge/partitions/0/messages?offset=0&limit=${limit}`);
      assert.equal(r.status, 200, limit);
    }
    for (const limit of ["0", "-1", "1e3", "ten"]) {
      const r = await fetch(`${node.url}/v1/topics/edge/partitions/0/messages?offset=0&limit=${limit}`);
      assert.equal(r.status, 400, limit);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, "invalid_argument");
    }
  });

  test("HEAD and OPTIONS on GET routes: HEAD is GET without a body, OPTIONS and every 405 carry Allow", async () => {
    const head = parse(await raw("HEAD /v1/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert.equal(head.status, 200);
    assert.equal(head.body, "");
    const options = parse(await raw("OPTIONS /v1/topics/edge HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert.equal(options.status, 204);
    assert.equal(options.headers.get("allow"), "GET, PATCH, DELETE, HEAD, OPTIONS");
    const put = parse(await raw("PUT /v1/topics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert.equal(put.status, 405);
    assert.equal(put.code, "method_not_allowed");
    assert.equal(put.headers.get("allow"), "GET, POST, HEAD, OPTIONS");
  });

  test("a half-closed connection got no answer: a whole request sent before the client's FIN is answered, then the connection closes", async () => {
    // A produce waits for its fsync: the FIN arrives while it is in progress.
    const produced = await halfClosed("POST /v1/topics/edge/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nhalfclose");
    assert.equal(parse(produced).status, 202, produced);
    const replay = await fetch(`${node.url}/v1/topics/edge/partitions/0/messages?offset=0&limit=1000`);
    assert.ok(JSON.stringify(await replay.json()).includes(Buffer.from("halfclose").toString("base64")), "stored, and its 202 was sent");
    // Keep-alive requests, two pipelined: both answered, in order, then closed.
    const two = await halfClosed("GET /v1/topics/edge HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    assert.deepEqual([...two.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => m[1]), ["200", "200"], two);
    // A long poll whose client shut its side ends now, answered empty (it would hold its waiter
    // slot for the whole wait; the helper gives up after 20 s, the poll's wait_ms).
    assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "edge-empty", partitions: 1 }) })).status, 201);
    assert.equal(parse(await halfClosed("POST /v1/topics/edge-empty/consume?wait_ms=20000 HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")).status, 204);
    assert.match(await (await fetch(`${node.url}/metrics`)).text(), /^narad_long_polls_waiting 0$/m);
    // A request the FIN cut short never ran: 400, as before.
    const cut = parse(await halfClosed("POST /v1/topics/edge/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\nshort"));
    assert.equal(cut.status, 400);
    assert.equal(cut.code, "bad_request");
  });

  test("a topic path longer than 400 characters answered 404: every name past 200 characters is 400 invalid_topic_name naming the limit", async () => {
    for (const len of [201, 400, 401, 5000, 15_000]) {
      const name = "a".repeat(len);
      for (const [method, path] of [["GET", `/v1/topics/${name}`], ["GET", `/v1/topics/${name}/partitions/0/messages`], ["POST", `/v1/topics/${name}/messages`]] as const) {
        const a = parse(await raw(`${method} ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`));
        assert.equal(a.status, 400, `${method} with a ${len}-character name`);
        assert.equal(a.code, "invalid_topic_name");
        assert.match(a.body, new RegExp(`at most 200 characters; this one has ${len}`));
      }
    }
  });

  test("a definite 400 for a request that was executed: garbage pipelined after a produce leaves the produce its 202 and gets no answer", async () => {
    const answer = await raw("POST /v1/topics/edge/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\npipelinedGARBAGE\x01\x02 not http\r\n\r\n");
    const first = parse(answer);
    assert.equal(first.status, 202, answer);
    assert.equal((answer.match(/HTTP\/1\.1 /g) ?? []).length, 1, `one answer only: ${answer}`);
    const replay = await fetch(`${node.url}/v1/topics/edge/partitions/0/messages?offset=0`);
    const msgs = ((await replay.json()) as { messages: { payload?: string; value?: string }[] }).messages;
    assert.ok(JSON.stringify(msgs).includes(Buffer.from("pipelined").toString("base64")), JSON.stringify(msgs));
  });
});

test("a missing topic.json deletes the whole topic: a topic whose partitions hold records stays on disk, offline and logged, and comes back when topic.json is restored", async () => {
  const dir = await tempDir();
  try {
    let node = await startNode({ dataDir: dir });
    const json = { "content-type": "application/json" };
    assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: json, body: JSON.stringify({ name: "precious", partitions: 1 }) })).status, 201);
    const batch = { messages: Array.from({ length: 100 }, (_, i) => ({ payload_base64: Buffer.from(`m${i}`).toString("base64") })) };
    assert.equal((await fetch(`${node.url}/v1/topics/precious/messages/batch`, { method: "POST", headers: json, body: JSON.stringify(batch) })).status, 202);
    assert.equal(await node.stop(), 0);
    const meta = join(dir, "topics", "precious", "topic.json");
    const saved = await readFile(meta);
    await rm(meta);
    // An interrupted create beside it: a directory with empty partitions and no topic.json.
    await mkdir(join(dir, "topics", "ghost", "partitions", "0"), { recursive: true });

    node = await startNode({ dataDir: dir, port: node.port });
    assert.equal((await fetch(`${node.url}/v1/topics/precious`)).status, 404, "offline: not served");
    const again = await fetch(`${node.url}/v1/topics`, { method: "POST", headers: json, body: JSON.stringify({ name: "precious" }) });
    assert.equal(again.status, 409, "a create does not wipe the offline topic's records");
    assert.equal(((await again.json()) as { error: { code: string } }).error.code, "topic_exists");
    assert.match(node.output(), /topic.json is missing but the partitions hold records/);
    await assert.rejects(stat(join(dir, "topics", "ghost")), { code: "ENOENT" }, "an interrupted create is still removed");
    assert.equal(await node.stop(), 0);

    await writeFile(meta, saved);
    node = await startNode({ dataDir: dir, port: node.port });
    try {
      const r = await fetch(`${node.url}/v1/topics/precious/partitions/0/messages?offset=0&limit=1000`);
      assert.equal(((await r.json()) as { messages: unknown[] }).messages.length, 100, "every 202 is back with its topic.json");
    } finally {
      await node.kill();
    }
  } finally {
    await removeDir(dir);
  }
});

test("every partition's children.cursors was logged as 'not a segment' at every start: a restart logs no such warning", async () => {
  const dir = await tempDir();
  try {
    let node = await startNode({ dataDir: dir });
    assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "quiet", partitions: 3 }) })).status, 201);
    assert.equal(await node.stop(), 0);
    for (let p = 0; p < 3; p++) await stat(join(dir, "topics", "quiet", "partitions", String(p), "children.cursors"));
    node = await startNode({ dataDir: dir, port: node.port });
    try {
      assert.equal((await fetch(`${node.url}/v1/topics/quiet`)).status, 200);
      assert.doesNotMatch(node.output(), /not a segment/);
    } finally {
      await node.kill();
    }
  } finally {
    await removeDir(dir);
  }
});

test("a garbage children.cursors was not logged and the copier copied the parent again: it is logged and set aside, the copy is held (a metric) until the child is attached again, and nothing is copied twice", async () => {
  const dir = await tempDir();
  const json = { "content-type": "application/json" };
  const replayed = async (url: string, topic: string) => {
    const r = await fetch(`${url}/v1/topics/${topic}/partitions/0/messages?offset=0&limit=1000`);
    return ((await r.json()) as { messages: { payload_base64: string }[] }).messages.map((m) => Buffer.from(m.payload_base64, "base64").toString());
  };
  let node: RunningNode | undefined;
  try {
    node = await startNode({ dataDir: dir });
    for (const name of ["src", "copy"]) assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: json, body: JSON.stringify({ name, partitions: 1 }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/topics/src/children`, { method: "POST", headers: json, body: JSON.stringify({ topic: "copy", kind: "fanout" }) })).status, 201);
    for (let i = 0; i < 20; i++) assert.equal((await fetch(`${node.url}/v1/topics/src/messages`, { method: "POST", body: `m${i}` })).status, 202);
    const first = node.url;
    await waitFor(async () => (await replayed(first, "copy")).length === 20, { timeoutMs: 10_000, what: "20 copies" });
    assert.equal(await node.stop(), 0);
    const file = join(dir, "topics", "src", "partitions", "0", "children.cursors");
    await writeFile(file, Buffer.from("garbage where the cursors were\n".repeat(100)));

    node = await startNode({ dataDir: dir, port: node.port });
    const started = node;
    await waitFor(() => /copy to child held/.test(started.output()), { timeoutMs: 10_000, what: "the held copy logged" });
    assert.match(node.output(), /copy cursor file is damaged/);
    assert.ok(node.output().includes(file), "the warning names the file");
    await stat(`${file}.damaged`);
    const metrics = await (await fetch(`${node.url}/metrics`)).text();
    assert.match(metrics, /narad_child_copy_held_partitions\{parent="src",child="copy"\} 1/);
    for (let i = 0; i < 5; i++) assert.equal((await fetch(`${node.url}/v1/topics/src/messages`, { method: "POST", body: `held${i}` })).status, 202);
    // The operator's word (docs/operations.md): attach the child again, copies resume at the end.
    assert.equal((await fetch(`${node.url}/v1/topics/src/children/copy`, { method: "DELETE" })).status, 204);
    assert.equal((await fetch(`${node.url}/v1/topics/src/children`, { method: "POST", headers: json, body: JSON.stringify({ topic: "copy", kind: "fanout" }) })).status, 201);
    for (let i = 0; i < 3; i++) assert.equal((await fetch(`${node.url}/v1/topics/src/messages`, { method: "POST", body: `after${i}` })).status, 202);
    await waitFor(async () => (await replayed(started.url, "copy")).length >= 23, { timeoutMs: 10_000, what: "the copies after the attach" });
    const got = await replayed(node.url, "copy");
    assert.deepEqual(got, [...Array.from({ length: 20 }, (_, i) => `m${i}`), "after0", "after1", "after2"], "the first 20 once, nothing copied twice");
    assert.match(await (await fetch(`${node.url}/metrics`)).text(), /narad_child_copy_held_partitions\{parent="src",child="copy"\} 0/);
    assert.equal(await node.stop(), 0);

    node = await startNode({ dataDir: dir, port: node.port });
    const url = node.url;
    assert.equal((await fetch(`${url}/v1/topics/src/messages`, { method: "POST", body: "later" })).status, 202);
    await waitFor(async () => (await replayed(url, "copy")).length === 24, { timeoutMs: 10_000, what: "the copy after the restart" });
    assert.doesNotMatch(node.output(), /copy to child held/, "the re-attached child has a cursor again");
  } finally {
    await node?.kill();
    await removeDir(dir);
  }
});

/** A graceful stop exits 0; anything else says how it ended and what the node printed. */
async function stoppedCleanly(node: RunningNode): Promise<void> {
  const code = await node.stop();
  const { signal } = await node.exited;
  assert.equal(code, 0, `the node's graceful stop ended with code ${code}, signal ${signal}:\n${node.output().slice(-4000)}`);
}

test("a deleted node.json was regenerated silently with a new id and secret: beside topics the start is refused with one line, a corrupt one too, and --new-identity or the restored file starts it", async () => {
  const dir = await tempDir();
  try {
    let node = await startNode({ dataDir: dir }); // a fresh data dir gets a node.json
    const idFile = join(dir, "node.json");
    const saved = await readFile(idFile);
    assert.equal((JSON.parse(saved.toString()) as { node_id: string }).node_id, node.nodeId);
    assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "kept", partitions: 1 }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/topics/kept/messages`, { method: "POST", body: "m" })).status, 202);
    await stoppedCleanly(node);
    const start = (...extra: string[]) => runNarad(["server", "start", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0", ...extra]);
    const oneLine = (r: { code: number | null; stderr: string }, re: RegExp) => {
      assert.notEqual(r.code, 0);
      const lines = r.stderr.trim().split("\n");
      assert.equal(lines.length, 1, r.stderr);
      assert.match(lines[0]!, re);
    };

    await rm(idFile);
    oneLine(await start(), /node\.json is missing but the data directory holds topics \(topics\/\): restore node\.json from a backup, or start with --new-identity/);
    await assert.rejects(stat(idFile), { code: "ENOENT" }, "no identity is made up");
    await writeFile(idFile, "{ not json");
    oneLine(await start(), /node\.json is corrupt/);

    await writeFile(idFile, saved); // restored from a backup: the same node
    node = await startNode({ dataDir: dir });
    assert.equal((JSON.parse(saved.toString()) as { node_id: string }).node_id, node.nodeId);
    await stoppedCleanly(node);

    await rm(idFile);
    node = await startNode({ dataDir: dir, args: ["--new-identity"] }); // the operator's word
    try {
      assert.notEqual(node.nodeId, (JSON.parse(saved.toString()) as { node_id: string }).node_id);
      const r = await fetch(`${node.url}/v1/topics/kept/partitions/0/messages?offset=0`);
      assert.equal(((await r.json()) as { messages: unknown[] }).messages.length, 1, "the topic's 202 is still there");
    } finally {
      await node.kill();
    }
  } finally {
    await removeDir(dir);
  }
});

test("a new user given a deleted user's name inherited its topics: it may not change or delete them, they show no owner, and that holds after a restart", async () => {
  const dir = await tempDir();
  let node: RunningNode | undefined;
  const env = { NARAD_ADMIN_PASSWORD: ADMIN_PW };
  const json = { authorization: basic("admin", ADMIN_PW), "content-type": "application/json" };
  const dana = (pw: string) => ({ authorization: basic("dana", pw), "content-type": "application/json" });
  try {
    node = await startNode({ dataDir: dir, dev: false, env });
    const addDana = async (pw: string) => {
      assert.equal((await fetch(`${node!.url}/v1/users`, { method: "POST", headers: json, body: JSON.stringify({ name: "dana", password: pw }) })).status, 201);
      assert.equal((await fetch(`${node!.url}/v1/users/dana/grants`, { method: "POST", headers: json, body: JSON.stringify({ action: "create", pattern: "dana-*" }) })).status, 201);
    };
    await addDana("dana-Password-1");
    assert.equal((await fetch(`${node!.url}/v1/topics`, { method: "POST", headers: dana("dana-Password-1"), body: JSON.stringify({ name: "dana-books", partitions: 1 }) })).status, 201);
    assert.equal((await fetch(`${node!.url}/v1/topics/dana-books/messages`, { method: "POST", headers: json, body: "kept" })).status, 202);
    assert.equal((await fetch(`${node!.url}/v1/users/dana`, { method: "DELETE", headers: json })).status, 204);
    await addDana("dana-Password-2");
    const imposter = dana("dana-Password-2");
    const refusedOnce = async () => {
      assert.equal((await fetch(`${node!.url}/v1/topics/dana-books`, { method: "DELETE", headers: imposter })).status, 403);
      assert.equal((await fetch(`${node!.url}/v1/topics/dana-books`, { method: "PATCH", headers: imposter, body: JSON.stringify({ partitions: 2 }) })).status, 403);
      const shown = (await (await fetch(`${node!.url}/v1/topics/dana-books`, { headers: json })).json()) as { owner: string | null };
      assert.equal(shown.owner, null, "its owner was deleted");
    };
    await refusedOnce();
    assert.equal(await node.stop(), 0);
    node = await startNode({ dataDir: dir, dev: false, env, port: node.port });
    await refusedOnce();
    const r = await fetch(`${node.url}/v1/topics/dana-books/partitions/0/messages?offset=0`, { headers: json });
    assert.equal(((await r.json()) as { messages: unknown[] }).messages.length, 1, "the topic and its message are still there");
  } finally {
    await node?.kill();
    await removeDir(dir);
  }
});

test("topics and users written before owner ids keep their owners at the upgrade, mapped once by name; an owner deleted before it leaves its topic to no one", async () => {
  const dir = await tempDir();
  let node: RunningNode | undefined;
  const env = { NARAD_ADMIN_PASSWORD: ADMIN_PW };
  const json = { authorization: basic("admin", ADMIN_PW), "content-type": "application/json" };
  const as = (user: string) => ({ authorization: basic(user, `${user}-Password-1`), "content-type": "application/json" });
  const usersFile = join(dir, "security", "users.json");
  const topicFile = (t: string) => join(dir, "topics", t, "topic.json");
  try {
    node = await startNode({ dataDir: dir, dev: false, env });
    for (const user of ["bert", "cleo"]) {
      assert.equal((await fetch(`${node.url}/v1/users`, { method: "POST", headers: json, body: JSON.stringify({ name: user, password: `${user}-Password-1` }) })).status, 201);
      assert.equal((await fetch(`${node.url}/v1/users/${user}/grants`, { method: "POST", headers: json, body: JSON.stringify({ action: "create", pattern: `${user}-*` }) })).status, 201);
      assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: as(user), body: JSON.stringify({ name: `${user}-log`, partitions: 1 }) })).status, 201);
    }
    assert.equal(await node.stop(), 0);

    // The files as the build before owner ids wrote them: users without ids, topics with their
    // owner's name only; and cleo deleted under that build.
    const users = JSON.parse(await readFile(usersFile, "utf8")) as { users: Record<string, { id?: string }> };
    for (const u of Object.values(users.users)) delete u.id;
    delete users.users.cleo;
    await writeFile(usersFile, JSON.stringify(users, null, 2));
    for (const t of ["bert-log", "cleo-log"]) {
      const meta = JSON.parse(await readFile(topicFile(t), "utf8")) as { owner_id?: string; owner: string };
      assert.equal(typeof meta.owner_id, "string", "this build records the owner's id");
      delete meta.owner_id;
      await writeFile(topicFile(t), JSON.stringify(meta, null, 2));
    }

    node = await startNode({ dataDir: dir, dev: false, env, port: node.port });
    const upgraded = JSON.parse(await readFile(usersFile, "utf8")) as { users: Record<string, { id: string }> };
    assert.match(upgraded.users.bert!.id, /^[0-9a-f]{32}$/, "every user got an id, written back");
    assert.match(upgraded.users.admin!.id, /^[0-9a-f]{32}$/);
    const bertMeta = JSON.parse(await readFile(topicFile("bert-log"), "utf8")) as { owner: string | null; owner_id: string | null };
    assert.deepEqual([bertMeta.owner, bertMeta.owner_id], ["bert", upgraded.users.bert!.id], "bert-log: owned by the id of the user named bert at the upgrade");
    const cleoMeta = JSON.parse(await readFile(topicFile("cleo-log"), "utf8")) as { owner: string | null; owner_id: string | null };
    assert.deepEqual([cleoMeta.owner, cleoMeta.owner_id], [null, null], "cleo-log: its owner's name had no user at the upgrade");
    assert.equal((await fetch(`${node.url}/v1/topics/bert-log`, { method: "PATCH", headers: as("bert"), body: JSON.stringify({ partitions: 2 }) })).status, 200, "the owner still manages its topic");

    // A user given cleo's name after the upgrade does not inherit cleo-log, also after another start.
    assert.equal((await fetch(`${node.url}/v1/users`, { method: "POST", headers: json, body: JSON.stringify({ name: "cleo", password: "cleo-Password-1" }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/users/cleo/grants`, { method: "POST", headers: json, body: JSON.stringify({ action: "create", pattern: "cleo-*" }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/topics/cleo-log`, { method: "DELETE", headers: as("cleo") })).status, 403);
    assert.equal(await node.stop(), 0);
    const before = await readFile(topicFile("cleo-log"), "utf8");
    node = await startNode({ dataDir: dir, dev: false, env, port: node.port });
    assert.equal(await readFile(topicFile("cleo-log"), "utf8"), before, "mapped once: a later start leaves it as it is");
    assert.equal((await fetch(`${node.url}/v1/topics/cleo-log`, { method: "DELETE", headers: as("cleo") })).status, 403);
    assert.equal((await fetch(`${node.url}/v1/topics/bert-log`, { method: "DELETE", headers: as("bert") })).status, 204);
  } finally {
    await node?.kill();
    await removeDir(dir);
  }
});

test("restoring an older node.json made old receipt handles valid: a handle from before the restart answers 410, and the new lease stays live", async () => {
  const dir = await tempDir();
  let node: RunningNode | undefined;
  const json = { "content-type": "application/json" };
  try {
    node = await startNode({ dataDir: dir });
    assert.equal((await fetch(`${node.url}/v1/topics`, { method: "POST", headers: json, body: JSON.stringify({ name: "leased", partitions: 1, visibility_timeout_ms: 600_000 }) })).status, 201);
    assert.equal((await fetch(`${node.url}/v1/topics/leased/messages`, { method: "POST", body: "m" })).status, 202);
    assert.equal(await node.stop(), 0);
    const older = await readFile(join(dir, "node.json"));

    const consume = async () => {
      const r = await fetch(`${node!.url}/v1/topics/leased/consume`, { method: "POST" });
      assert.equal(r.status, 200);
      assert.equal(await r.text(), "m");
      return r.headers.get("narad-receipt-handle")!;
    };
    node = await startNode({ dataDir: dir, port: node.port });
    const old = await consume();
    assert.equal(await node.stop(), 0);
    await writeFile(join(dir, "node.json"), older); // the same boot sequence again at the next start

    node = await startNode({ dataDir: dir, port: node.port });
    const fresh = await consume();
    // Same boot sequence, partition, offset and delivery tag: keyed by node.json alone, the two
    // handles were the same bytes, and the old one settled the new lease.
    assert.notEqual(fresh, old);
    const gone = await fetch(`${node.url}/v1/topics/leased/ack?receipt_handle=${old}`, { method: "POST" });
    assert.equal(gone.status, 410);
    assert.equal(((await gone.json()) as { error: { code: string } }).error.code, "receipt_handle_gone");
    const batch = await fetch(`${node.url}/v1/topics/leased/ack/batch`, { method: "POST", headers: json, body: JSON.stringify({ receipt_handles: [old] }) });
    assert.deepEqual(((await batch.json()) as { results: { status: number }[] }).results.map((x) => x.status), [410]);
    assert.equal((await fetch(`${node.url}/v1/topics/leased/ack?receipt_handle=${fresh}&extend=true`, { method: "POST" })).status, 204, "the new lease is still live");
    assert.equal((await fetch(`${node.url}/v1/topics/leased/ack?receipt_handle=${fresh}`, { method: "POST" })).status, 204);
  } finally {
    await node?.kill();
    await removeDir(dir);
  }
});
