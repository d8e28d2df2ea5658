// The contract suite: black-box tests over real HTTP of every status code of SPEC.md's API.
// One test body for every deployment: `defineContractSuite` takes a function that brings up a
// deployment (one node today; a three-node cluster later) and spreads requests across its URLs.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { connect } from "node:net";
import { waitFor } from "./harness.js";
import { BATCH_BINARY_TYPE, DELIVERIES_TYPE, LIMITS, decodeDeliveries, encodeBinaryBatch, type WireDelivery } from "../src/protocol/wire.js";

export interface Deployment {
  /** Base URLs of the nodes; requests are spread across them. */
  urls: string[];
  stop(): Promise<void>;
}

type Json = Record<string, unknown>;

export function defineContractSuite(name: string, deploy: () => Promise<Deployment>): void {
  describe(`contract: ${name}`, () => {
    let d: Deployment;
    let turn = 0;
    const url = () => d.urls[turn++ % d.urls.length]!;
    const req = (method: string, path: string, body?: RequestInit["body"], headers: Record<string, string> = {}) =>
      fetch(url() + path, { method, body, headers });
    const json = (method: string, path: string, body?: unknown) =>
      req(method, path, body === undefined ? undefined : JSON.stringify(body), { "content-type": "application/json" });
    let seq = 0;
    const topicName = (prefix = "t") => `${prefix}-${process.pid}-${seq++}-${randomBytes(3).toString("hex")}`;
    const createTopic = async (body: Json = {}) => {
      const name = topicName();
      const r = await json("POST", "/v1/topics", { name, ...body });
      assert.equal(r.status, 201, await r.clone().text());
      return name;
    };
    const errorCode = async (r: Response) => {
      const b = (await r.json()) as { error: { code: string; message: string } };
      assert.equal(typeof b.error.message, "string");
      assert.ok(b.error.message.length > 0);
      return b.error.code;
    };
    const produce = async (topic: string, payload: RequestInit["body"], key?: string) => {
      const r = await req("POST", `/v1/topics/${topic}/messages${key === undefined ? "" : `?key=${encodeURIComponent(key)}`}`, payload);
      assert.equal(r.status, 202, await r.clone().text());
      return (await r.json()) as { partition: number; offset: number };
    };
    const consume = async (topic: string, waitMs = 0) => {
      const r = await req("POST", `/v1/topics/${topic}/consume?wait_ms=${waitMs}`);
      if (r.status === 204) return null;
      assert.equal(r.status, 200, await r.clone().text());
      const h = r.headers;
      return {
        body: Buffer.from(await r.arrayBuffer()),
        handle: h.get("narad-receipt-handle")!,
        partition: Number(h.get("narad-partition")),
        offset: Number(h.get("narad-offset")),
        key: h.get("narad-key"),
        deliveryCount: Number(h.get("narad-delivery-count")),
        producedAt: Number(h.get("narad-produced-at")),
        owner: h.get("narad-owner"),
        ownerBoot: h.get("narad-owner-boot"),
      };
    };
    const ack = (topic: string, handle: string, extra = "") => req("POST", `/v1/topics/${topic}/ack?receipt_handle=${encodeURIComponent(handle)}${extra}`);
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

    before(async () => {
      d = await deploy();
    });
    after(async () => {
      await d?.stop();
    });

    test("probes and metrics answer, and every answer names the node and its boot", async () => {
      for (const path of ["/healthz", "/readyz"]) {
        const r = await req("GET", path);
        assert.equal(r.status, 200);
        assert.ok(r.headers.get("narad-node"));
        assert.match(r.headers.get("narad-boot") ?? "", /^[0-9a-f]{16}$/);
      }
      const m = await req("GET", "/metrics");
      assert.equal(m.status, 200);
      const text = await m.text();
      for (const metric of ["narad_produced_messages_total", "narad_commit_seconds", "narad_topic_backlog_messages", "narad_refusals_total"]) {
        assert.ok(text.includes(metric), `metrics lack ${metric}`);
      }
      const missing = await req("GET", "/no/such/route");
      assert.equal(missing.status, 404);
      assert.equal(await errorCode(missing), "not_found");
      assert.ok(missing.headers.get("narad-node"));
      const wrong = await req("PUT", "/v1/topics");
      assert.equal(wrong.status, 405);
      assert.equal(await errorCode(wrong), "method_not_allowed");
    });

    test("topics: create, list, describe, update, delete, with every refusal", async () => {
      const name = topicName();
      const r = await json("POST", "/v1/topics", { name });
      assert.equal(r.status, 201);
      const t = (await r.json()) as Json;
      assert.equal(t.name, name);
      assert.equal(t.partitions, 3);
      assert.equal(t.visibility_timeout_ms, 30_000);
      assert.equal(t.retention_ms, 7 * 24 * 3600 * 1000);
      assert.ok("owner" in t);
      assert.deepEqual(t.children, []);

      const again = await json("POST", "/v1/topics", { name });
      assert.equal(again.status, 409);
      assert.equal(await errorCode(again), "topic_exists");

      for (const bad of ["", "-x", ".x", "a b", "a/b", "x".repeat(201), "ü", 42, null]) {
        const b = await json("POST", "/v1/topics", { name: bad });
        assert.equal(b.status, 400, `name ${JSON.stringify(bad)}`);
        assert.equal(await errorCode(b), "invalid_topic_name");
      }
      assert.equal((await json("POST", "/v1/topics", { name: "x".repeat(200) + "" })).status, 201);
      for (const bad of [{ partitions: 0 }, { partitions: -1 }, { partitions: 1.5 }, { partitions: "3" }, { partitions: 100000 }, { visibility_timeout_ms: 0 }, { retention_ms: -5 }, { colour: "blue" }]) {
        const b = await json("POST", "/v1/topics", { name: topicName(), ...bad });
        assert.equal(b.status, 400, JSON.stringify(bad));
        assert.equal(await errorCode(b), "invalid_argument");
      }
      const malformed = await req("POST", "/v1/topics", "{not json", { "content-type": "application/json" });
      assert.equal(malformed.status, 400);
      assert.equal(await errorCode(malformed), "invalid_json");
      const notObject = await json("POST", "/v1/topics", [1, 2]);
      assert.equal(notObject.status, 400);

      const list = (await (await req("GET", "/v1/topics")).json()) as { topics: Json[] };
      assert.ok(list.topics.some((x) => x.name === name));
      const desc = await req("GET", `/v1/topics/${name}`);
      assert.equal(desc.status, 200);
      assert.equal(((await desc.json()) as Json).name, name);
      const unknown = await req("GET", `/v1/topics/${topicName("nope")}`);
      assert.equal(unknown.status, 404);
      assert.equal(await errorCode(unknown), "topic_not_found");

      const up = await json("PATCH", `/v1/topics/${name}`, { partitions: 5, visibility_timeout_ms: 1234, retention_ms: 60_000 });
      assert.equal(up.status, 200);
      const upj = (await up.json()) as Json;
      assert.deepEqual([upj.partitions, upj.visibility_timeout_ms, upj.retention_ms], [5, 1234, 60_000]);
      const down = await json("PATCH", `/v1/topics/${name}`, { partitions: 4 });
      assert.equal(down.status, 400);
      assert.equal(await errorCode(down), "partitions_decrease");
      assert.equal((await json("PATCH", `/v1/topics/${topicName("nope")}`, { partitions: 9 })).status, 404);
      // The new partitions take messages (keys m0..m19 hash to all five of them).
      const keys = new Set<number>();
      for (let i = 0; i < 20; i++) keys.add((await produce(name, `m${i}`, `m${i}`)).partition);
      assert.deepEqual([...keys].sort(), [0, 1, 2, 3, 4]);

      assert.equal((await req("DELETE", `/v1/topics/${name}`)).status, 204);
      assert.equal((await req("GET", `/v1/topics/${name}`)).status, 404);
      assert.equal((await req("DELETE", `/v1/topics/${name}`)).status, 404);
      const p = await req("POST", `/v1/topics/${name}/messages`, "x");
      assert.equal(p.status, 404);
      assert.equal(await errorCode(p), "topic_not_found");
      // A topic of the same name can be made again, and starts empty.
      assert.equal((await json("POST", "/v1/topics", { name, partitions: 1 })).status, 201);
      assert.equal(await consume(name), null);
    });

    test("produce and consume: binary payloads come back byte for byte, with every header", async () => {
      const topic = await createTopic({ partitions: 1 });
      const all = Buffer.alloc(256 * 4);
      for (let i = 0; i < all.length; i++) all[i] = i % 256;
      const before = Date.now();
      const r = await produce(topic, all, "clé/1 2");
      assert.deepEqual(r, { partition: 0, offset: 0 });
      const m = await consume(topic);
      assert.ok(m);
      assert.ok(m.body.equals(all));
      assert.equal(m.partition, 0);
      assert.equal(m.offset, 0);
      assert.equal(decodeURIComponent(m.key!), "clé/1 2");
      assert.equal(m.deliveryCount, 1);
      assert.ok(m.producedAt >= before - 5000 && m.producedAt <= Date.now() + 5000);
      assert.ok(m.owner);
      assert.match(m.ownerBoot ?? "", /^[0-9a-f]{16}$/);
      assert.equal((await ack(topic, m.handle)).status, 204);

      await produce(topic, new Uint8Array(0));
      const empty = await consume(topic);
      assert.ok(empty);
      assert.equal(empty.body.length, 0);
      assert.equal(empty.key, null);
    });

    test("a produce's 202 names the owner that stored the message and its boot, through whichever node it came", async () => {
      const topic = await createTopic({ partitions: 1 });
      const answers: { owner: string | null; ownerBoot: string | null }[] = [];
      // One produce through each node: in a cluster most of them are forwarded to the owner.
      for (let i = 0; i < d.urls.length; i++) {
        const r = await req("POST", `/v1/topics/${topic}/messages`, `m${i}`);
        assert.equal(r.status, 202, await r.clone().text());
        assert.deepEqual(Object.keys((await r.json()) as Json).sort(), ["offset", "partition"]);
        answers.push({ owner: r.headers.get("narad-owner"), ownerBoot: r.headers.get("narad-owner-boot") });
      }
      // The lease holder of a consume is the partition's owner: the same node, the same boot.
      const m = await consume(topic);
      assert.ok(m);
      for (const a of answers) assert.deepEqual(a, { owner: m.owner, ownerBoot: m.ownerBoot });
    });

    test("exactly 1 MiB is accepted and one byte more is 413, which stores nothing", async () => {
      const topic = await createTopic({ partitions: 1 });
      const big = randomBytes(1_048_576);
      const r = await produce(topic, big);
      const over = await req("POST", `/v1/topics/${topic}/messages`, randomBytes(1_048_577));
      assert.equal(over.status, 413);
      assert.equal(await errorCode(over), "payload_too_large");
      const m = await consume(topic);
      assert.ok(m);
      assert.equal(m.offset, r.offset);
      assert.ok(m.body.equals(big));
      assert.equal(await consume(topic), null, "the refused message must not be stored");
      const rep = (await (await req("GET", `/v1/topics/${topic}/partitions/0/messages`)).json()) as Json;
      assert.equal(rep.end_offset, 1);
      // Without a Content-Length (chunked), the node counts as it reads and stops storing at the
      // limit. It answers 413, then reads and drops the rest for at most LINGER_AFTER_REFUSAL_MS
      // (so the client reads the 413 before any RST) and closes: a bound in time, not in bytes.
      // A fast loopback sent a whole 64 MiB in that time once, so the body here is one no client
      // can send in the linger (8 GiB of one reused chunk): only a node that never closes reaches its end.
      const bodyBytes = 8 * 1024 * 1024 * 1024;
      let sent = 0;
      const chunk = randomBytes(64 * 1024);
      const stream = new ReadableStream<Uint8Array>({
        pull(c) {
          if (sent >= bodyBytes) return c.close();
          sent += chunk.length;
          c.enqueue(chunk);
        },
      });
      const chunked = await fetch(url() + `/v1/topics/${topic}/messages`, { method: "POST", body: stream, duplex: "half" } as RequestInit).catch((e: Error) => e);
      if (chunked instanceof Response) {
        assert.equal(chunked.status, 413);
        assert.equal(await errorCode(chunked), "payload_too_large");
      }
      assert.ok(sent < bodyBytes, `the node closed the connection long before the end of an 8 GiB body (it read ${sent} bytes)`);
      assert.equal((await req("GET", "/healthz")).status, 200);
      assert.equal(await consume(topic), null);
    });

    test("keys pick one partition; no key goes to the partitions in turn, a run of messages on each", async () => {
      const topic = await createTopic({ partitions: 4 });
      const parts = new Set<number>();
      for (let i = 0; i < 10; i++) parts.add((await produce(topic, `k${i}`, "customer-42")).partition);
      assert.equal(parts.size, 1);
      const unknown = await req("POST", `/v1/topics/${topicName("nope")}/messages`, "x");
      assert.equal(unknown.status, 404);
    });

    test("unkeyed single produces filled each partition in turn one message at a time (8.9 messages an fdatasync on 3 partitions): now a run of 1 MiB or 1000 messages fills one partition, then the next takes a run; each message is stored once", async () => {
      // Runs are each node's own (docs/api.md, "Partitioning"): one node takes every request here.
      const via = d.urls[0]!;
      const topic = await createTopic({ partitions: 4 });
      const quarter = 256 * 1024; // four fill a run's 1 MiB
      const places: { partition: number; offset: number }[] = [];
      for (let i = 0; i < 17; i++) {
        const body = Buffer.alloc(quarter, i);
        body.write(`sticky-${i}`);
        const r = await fetch(`${via}/v1/topics/${topic}/messages`, { method: "POST", body });
        assert.equal(r.status, 202, await r.clone().text());
        places.push((await r.json()) as { partition: number; offset: number });
      }
      const first = places[0]!.partition;
      assert.deepEqual(places.map((x) => x.partition), places.map((_, i) => (first + Math.floor(i / 4)) % 4), "runs of four 256 KiB messages, the partitions in turn");
      // Replay: each message once, where its 202 said, and nothing else in the topic.
      const stored = new Map<string, number>();
      for (let p = 0; p < 4; p++) {
        const page = (await (await req("GET", `/v1/topics/${topic}/partitions/${p}/messages?limit=100`)).json()) as { messages: { offset: number; payload_base64: string }[] };
        for (const m of page.messages) {
          const tag = /^sticky-\d+/.exec(Buffer.from(m.payload_base64, "base64").subarray(0, 12).toString("latin1"))![0];
          assert.equal(stored.has(tag), false, `${tag} stored twice`);
          stored.set(tag, p * 1_000_000 + m.offset);
        }
      }
      assert.equal(stored.size, 17);
      places.forEach((x, i) => assert.equal(stored.get(`sticky-${i}`), x.partition * 1_000_000 + x.offset));
    });

    test("a produce with Prefer: return=minimal gets a 202 without a body, its place in headers; without it, JSON; an error stays JSON", async () => {
      const topic = await createTopic({ partitions: 2 });
      const minimal = await req("POST", `/v1/topics/${topic}/messages?key=a`, "m1", { prefer: "return=minimal" });
      assert.equal(minimal.status, 202);
      assert.equal(await minimal.text(), "");
      assert.equal(minimal.headers.get("content-length"), "0");
      assert.equal(minimal.headers.get("preference-applied"), "return=minimal");
      assert.equal(minimal.headers.get("content-type"), null);
      const at = { partition: Number(minimal.headers.get("narad-partition")), offset: Number(minimal.headers.get("narad-offset")) };
      assert.ok(minimal.headers.get("narad-owner") && minimal.headers.get("narad-owner-boot"));
      // RFC 7240's forms: another preference beside it, a quoted value, any case.
      const again = await req("POST", `/v1/topics/${topic}/messages?key=a`, "m2", { prefer: 'respond-async, RETURN="Minimal"; x=1' });
      assert.equal(again.status, 202);
      assert.equal(await again.text(), "");
      assert.deepEqual([Number(again.headers.get("narad-partition")), Number(again.headers.get("narad-offset"))], [at.partition, at.offset + 1]);
      // Without it (or with another return), the JSON answer as before.
      for (const prefer of [undefined, "return=representation"]) {
        const full = await req("POST", `/v1/topics/${topic}/messages?key=a`, "m3", prefer === undefined ? {} : { prefer });
        assert.equal(full.status, 202);
        assert.equal(full.headers.get("preference-applied"), null);
        assert.equal(full.headers.get("narad-offset"), null);
        const b = (await full.json()) as { partition: number; offset: number };
        assert.equal(b.partition, at.partition);
      }
      const missing = await req("POST", `/v1/topics/${topicName("nope")}/messages`, "x", { prefer: "return=minimal" });
      assert.equal(missing.status, 404);
      assert.equal(missing.headers.get("preference-applied"), null);
      assert.equal(await errorCode(missing), "topic_not_found");
      const replay = (await (await req("GET", `/v1/topics/${topic}/partitions/${at.partition}/messages?offset=${at.offset}`)).json()) as { messages: { payload_base64: string }[] };
      assert.deepEqual(replay.messages.map((m) => Buffer.from(m.payload_base64, "base64").toString()), ["m1", "m2", "m3", "m3"]);
    });

    test("batch produce: one 202 for all in request order; one message over the limit refuses the batch", async () => {
      const topic = await createTopic({ partitions: 2 });
      const msgs = Array.from({ length: 50 }, (_, i) => ({ key: i % 2 ? `k${i}` : undefined, payload_base64: Buffer.from(`msg-${i}`).toString("base64") }));
      const r = await json("POST", `/v1/topics/${topic}/messages/batch`, { messages: msgs });
      assert.equal(r.status, 202);
      const results = ((await r.json()) as { results: { partition: number; offset: number }[] }).results;
      assert.equal(results.length, 50);
      // Binary encoding.
      const { encodeBinaryBatch, BATCH_BINARY_TYPE } = await import("../src/protocol/wire.js");
      const bin = encodeBinaryBatch([{ payload: Buffer.from("b0") }, { key: "kk", payload: Buffer.from([0, 255, 1]) }]);
      const rb = await req("POST", `/v1/topics/${topic}/messages/batch`, bin, { "content-type": BATCH_BINARY_TYPE });
      assert.equal(rb.status, 202, await rb.clone().text());
      assert.equal(((await rb.json()) as { results: unknown[] }).results.length, 2);
      // Replay finds each message at the offset its result named.
      const seen = new Map<string, string>();
      for (const p of [0, 1]) {
        const rep = (await (await req("GET", `/v1/topics/${topic}/partitions/${p}/messages?limit=1000`)).json()) as { messages: { offset: number; payload_base64: string }[] };
        for (const m of rep.messages) seen.set(`${p}/${m.offset}`, Buffer.from(m.payload_base64, "base64").toString());
      }
      results.forEach((x, i) => assert.equal(seen.get(`${x.partition}/${x.offset}`), `msg-${i}`));
      const ends = async () => {
        let n = 0;
        for (const p of [0, 1]) n += ((await (await req("GET", `/v1/topics/${topic}/partitions/${p}/messages?limit=1`)).json()) as { end_offset: number }).end_offset;
        return n;
      };
      const before = await ends();
      const over = await json("POST", `/v1/topics/${topic}/messages/batch`, {
        messages: [{ payload_base64: "aGk=" }, { payload_base64: randomBytes(1_048_577).toString("base64") }],
      });
      assert.equal(over.status, 413);
      assert.equal(await errorCode(over), "payload_too_large");
      assert.equal(await ends(), before, "a refused batch stores nothing");
      for (const [body, code] of [
        [{ messages: [{ payload_base64: "not base64!" }] }, "invalid_argument"],
        [{ messages: [] }, "invalid_argument"],
        [{ msgs: [] }, "invalid_argument"],
        [{ messages: [{ key: 5, payload_base64: "" }] }, "invalid_argument"],
      ] as const) {
        const b = await json("POST", `/v1/topics/${topic}/messages/batch`, body);
        assert.equal(b.status, 400, JSON.stringify(body));
        assert.equal(await errorCode(b), code);
      }
      const badBin = await req("POST", `/v1/topics/${topic}/messages/batch`, Buffer.from([0, 0, 0, 9, 1]), { "content-type": BATCH_BINARY_TYPE });
      assert.equal(badBin.status, 400);
      assert.equal(await errorCode(badBin), "bad_request");
      // JSON bodies take the types curl and fetch send by default (text/plain too); another type is 415.
      const media = await req("POST", `/v1/topics/${topic}/messages/batch`, "x", { "content-type": "application/xml" });
      assert.equal(media.status, 415);
      assert.equal(await errorCode(media), "unsupported_media_type");
      // Past the batch limits: one message more than LIMITS.batchMessagesMax, and a body over
      // LIMITS.batchBodyBytesMax (refused without reading it all).
      const tooMany = encodeBinaryBatch(Array.from({ length: LIMITS.batchMessagesMax + 1 }, () => ({ payload: Buffer.from("x") })));
      const many = await req("POST", `/v1/topics/${topic}/messages/batch`, tooMany, { "content-type": BATCH_BINARY_TYPE });
      assert.equal(many.status, 413);
      assert.equal(await errorCode(many), "batch_too_large");
      // The body's length is declared and none of it is sent: the answer comes anyway. (Sending a
      // part would race the close: a socket closed with unread bytes is reset, and a reset can
      // drop the answer before the client reads it.)
      const u = new URL(url());
      const sock = connect(Number(u.port), u.hostname);
      let answer = "";
      sock.on("data", (b: Buffer) => (answer += b.toString("latin1")));
      const closed = new Promise<void>((res) => sock.once("close", () => res()).once("error", () => res()));
      sock.write(
        `POST /v1/topics/${topic}/messages/batch HTTP/1.1\r\nHost: narad\r\nContent-Type: ${BATCH_BINARY_TYPE}\r\n` +
          `Content-Length: ${LIMITS.batchBodyBytesMax + 1}\r\n\r\n`,
      );
      await closed;
      assert.match(answer, /^HTTP\/1\.1 413 /, answer);
      assert.match(answer, /"code":"batch_too_large"/);
      assert.equal(await ends(), before);
    });

    test("a leased message is not handed out twice; ack settles it and a second ack is 410", async () => {
      const topic = await createTopic({ partitions: 2 });
      await produce(topic, "only");
      const m = await consume(topic);
      assert.ok(m);
      assert.equal(await consume(topic), null);
      assert.equal((await ack(topic, m.handle)).status, 204);
      const again = await ack(topic, m.handle);
      assert.equal(again.status, 410);
      assert.equal(await errorCode(again), "receipt_handle_gone");
      assert.equal(await consume(topic), null);
    });

    test("nack makes the message available at once with a new handle; the old handle is 410", async () => {
      const topic = await createTopic({ partitions: 1 });
      await produce(topic, "n");
      const m1 = await consume(topic);
      assert.ok(m1);
      assert.equal((await ack(topic, m1.handle, "&extend=0")).status, 204);
      const m2 = await consume(topic);
      assert.ok(m2);
      assert.equal(m2.offset, m1.offset);
      assert.equal(m2.deliveryCount, 2);
      assert.notEqual(m2.handle, m1.handle);
      assert.equal((await ack(topic, m1.handle)).status, 410, "a replaced handle is gone");
      assert.equal((await ack(topic, m1.handle, "&extend=true")).status, 410);
      assert.equal((await ack(topic, m2.handle)).status, 204);
    });

    test("consume?ack=H acks H and leases the next in one request; a refused ack leases nothing", async () => {
      const topic = await createTopic({ partitions: 2 });
      for (const p of ["a", "b", "c"]) await produce(topic, p);
      const consumeAcking = (handle: string, extra = "") => req("POST", `/v1/topics/${topic}/consume?ack=${encodeURIComponent(handle)}${extra}`);
      const m1 = await consume(topic);
      assert.ok(m1);
      const r2 = await consumeAcking(m1.handle);
      assert.equal(r2.status, 200, await r2.clone().text());
      const h2 = r2.headers.get("narad-receipt-handle")!;
      const seen = [m1.body.toString(), await r2.text()];
      assert.equal((await ack(topic, m1.handle)).status, 410, "the piggybacked ack settled m1");

      // Refusals answer as the ack would and lease nothing: the third message stays available.
      const gone = await consumeAcking(m1.handle);
      assert.equal(gone.status, 410);
      assert.equal(await errorCode(gone), "receipt_handle_gone");
      for (const bad of [consumeAcking("garbage"), req("POST", `/v1/topics/${topic}/consume?ack=`)]) {
        const r = await bad;
        assert.equal(r.status, 400);
        assert.equal(await errorCode(r), "invalid_receipt_handle");
      }
      const badWait = await consumeAcking(h2, "&wait_ms=-1");
      assert.equal(badWait.status, 400, "a bad wait_ms refuses the request before the ack");
      assert.equal(await errorCode(badWait), "invalid_argument");

      const r3 = await consumeAcking(h2, "&wait_ms=50");
      assert.equal(r3.status, 200, await r3.clone().text());
      const h3 = r3.headers.get("narad-receipt-handle")!;
      seen.push(await r3.text());
      assert.deepEqual(seen.sort(), ["a", "b", "c"], "each message once, none handed out twice");
      // The last ack rides on a consume that finds nothing: 204, and the ack took effect.
      const last = await consumeAcking(h3);
      assert.equal(last.status, 204);
      assert.equal((await ack(topic, h3)).status, 410);
      assert.equal((await ack(topic, h2)).status, 410);
      assert.equal(await consume(topic), null);
    });

    test("a lapsed lease comes back with a new handle, and the lapsed handle is 410", async () => {
      const topic = await createTopic({ partitions: 1, visibility_timeout_ms: 300 });
      await produce(topic, "lapse");
      const m1 = await consume(topic);
      assert.ok(m1);
      const m2 = await waitFor(() => consume(topic), { timeoutMs: 5000, what: "the lease to lapse" });
      assert.equal(m2.offset, m1.offset);
      assert.equal(m2.deliveryCount, 2);
      assert.equal((await ack(topic, m1.handle)).status, 410);
      assert.equal((await ack(topic, m2.handle)).status, 204);
    });

    test("extend restarts a full visibility timeout from now", async () => {
      const vt = 1500;
      const topic = await createTopic({ partitions: 1, visibility_timeout_ms: vt });
      await produce(topic, "slow work");
      const m = await consume(topic);
      assert.ok(m);
      const t0 = Date.now();
      // Extend twice, each time after most of a timeout has passed: the lease must hold past
      // 2x the timeout from the first delivery, which only a restart from now explains.
      await sleep(vt * 0.7);
      assert.equal((await ack(topic, m.handle, "&extend=true")).status, 204);
      await sleep(vt * 0.7);
      assert.equal((await ack(topic, m.handle, "&extend=true")).status, 204);
      await sleep(vt * 0.7);
      assert.ok(Date.now() - t0 > vt * 2);
      assert.equal(await consume(topic), null, "the extended lease still holds the message");
      assert.equal((await ack(topic, m.handle)).status, 204);
    });

    test("malformed, forged and foreign receipt handles are 400; unknown topics 404", async () => {
      const a = await createTopic({ partitions: 1 });
      const b = await createTopic({ partitions: 1 });
      await produce(a, "x");
      const m = await consume(a);
      assert.ok(m);
      const forged = Buffer.from(m.handle, "base64url");
      forged[forged.length - 1]! ^= 1;
      for (const h of ["garbage", "", "%00%ff", forged.toString("base64url"), m.handle.slice(0, -1), "A".repeat(42)]) {
        const r = await ack(a, h);
        assert.equal(r.status, 400, `handle ${JSON.stringify(h)}`);
        assert.equal(await errorCode(r), "invalid_receipt_handle");
      }
      const foreign = await ack(b, m.handle);
      assert.equal(foreign.status, 400, "a handle of another topic");
      const none = await req("POST", `/v1/topics/${a}/ack`);
      assert.equal(none.status, 400);
      const badExtend = await ack(a, m.handle, "&extend=maybe");
      assert.equal(badExtend.status, 400);
      assert.equal(await errorCode(badExtend), "invalid_argument");
      assert.equal((await ack(topicName("nope"), m.handle)).status, 404);
      assert.equal((await req("POST", `/v1/topics/${topicName("nope")}/consume`)).status, 404);
      assert.equal((await ack(a, m.handle)).status, 204, "the real handle still works after all that");
    });

    test("long poll answers when a message arrives, not at the end of its wait", async () => {
      const topic = await createTopic({ partitions: 3 });
      const t0 = Date.now();
      const waiting = consume(topic, 15_000);
      // Produce only once the poll is waiting on some node (the gauge counts waiting polls).
      await waitFor(async () => {
        let n = 0;
        for (const u of d.urls) {
          const m = /^narad_long_polls_waiting (\d+)/m.exec(await (await fetch(`${u}/metrics`)).text());
          n += Number(m?.[1] ?? 0);
        }
        return n > 0;
      }, { timeoutMs: 5000, what: "the long poll to be waiting" });
      await produce(topic, "wake up");
      const m = await waiting;
      const elapsed = Date.now() - t0;
      assert.ok(m);
      assert.equal(m.body.toString(), "wake up");
      assert.ok(elapsed < 10_000, `answered after ${elapsed} ms of a 15 000 ms wait`);
      const t1 = Date.now();
      assert.equal(await consume(topic, 300), null);
      assert.ok(Date.now() - t1 >= 290, "an empty long poll waits its wait_ms");
      for (const bad of ["20001", "-1", "abc", "1.5"]) {
        const r = await req("POST", `/v1/topics/${topic}/consume?wait_ms=${bad}`);
        assert.equal(r.status, 400, bad);
      }
    });

    test("consume batch and ack batch: per-handle statuses in request order", async () => {
      const topic = await createTopic({ partitions: 3 });
      const msgs = Array.from({ length: 120 }, (_, i) => ({ payload_base64: Buffer.from(`b${i}`).toString("base64") }));
      assert.equal((await json("POST", `/v1/topics/${topic}/messages/batch`, { messages: msgs })).status, 202);
      const r = await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=100&wait_ms=0`);
      assert.equal(r.status, 200);
      const got = ((await r.json()) as { messages: Json[] }).messages;
      assert.equal(got.length, 100);
      for (const m of got) {
        for (const f of ["receipt_handle", "partition", "offset", "key", "delivery_count", "produced_at", "payload_base64"]) assert.ok(f in m, f);
        assert.equal(m.delivery_count, 1);
      }
      const handles = got.map((m) => m.receipt_handle as string);
      assert.equal(new Set(got.map((m) => `${m.partition}/${m.offset}`)).size, 100);
      const first = await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: handles.slice(0, 10) });
      assert.equal(first.status, 200);
      const mixed = await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: [handles[0], "junk", handles[10]] });
      assert.equal(mixed.status, 200);
      const statuses = ((await mixed.json()) as { results: { receipt_handle: string; status: number; error?: string }[] }).results;
      assert.deepEqual(statuses.map((s) => s.status), [410, 400, 204]);
      // Each refusal names its code, as the single ack's error body would (docs/api.md).
      assert.deepEqual(statuses.map((s) => s.error), ["receipt_handle_gone", "invalid_receipt_handle", undefined]);
      assert.equal(statuses[1]!.receipt_handle, "junk");
      const nack = await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: handles.slice(11, 20), extend: 0 });
      assert.deepEqual(((await nack.json()) as { results: { status: number }[] }).results.map((x) => x.status), Array(9).fill(204));
      const rest = ((await (await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=100`)).json()) as { messages: Json[] }).messages;
      assert.equal(rest.length, 29, "20 never delivered + 9 nacked");
      assert.equal(rest.filter((m) => m.delivery_count === 2).length, 9);
      const empty = await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=5`);
      assert.deepEqual(((await empty.json()) as { messages: unknown[] }).messages, []);
      for (const bad of ["0", "101", "x"]) assert.equal((await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=${bad}`)).status, 400);
      assert.equal((await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: "nope" })).status, 400);
    });

    test("consume batch in the binary encoding carries the same messages as JSON, byte for byte", async () => {
      const topic = await createTopic({ partitions: 3 });
      const sent = Array.from({ length: 60 }, (_, i) => ({ key: i % 3 === 0 ? null : `k-${i}-é`, payload: randomBytes(i * 37) }));
      const body = encodeBinaryBatch(sent);
      const p = await req("POST", `/v1/topics/${topic}/messages/batch`, body, { "content-type": BATCH_BINARY_TYPE });
      assert.equal(p.status, 202, await p.clone().text());
      const byPayload = new Map(sent.map((m) => [m.payload.toString("hex"), m]));
      const got: WireDelivery[] = [];
      while (got.length < sent.length) {
        const r = await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=25`, undefined, { accept: DELIVERIES_TYPE });
        assert.equal(r.status, 200);
        assert.equal(r.headers.get("content-type"), DELIVERIES_TYPE);
        const ds = decodeDeliveries(Buffer.from(await r.arrayBuffer()));
        assert.ok(Array.isArray(ds), String(ds));
        assert.ok(ds.length > 0 && ds.length <= 25);
        got.push(...ds);
      }
      assert.equal(got.length, sent.length);
      for (const d of got) {
        const m = byPayload.get(d.payload.toString("hex"));
        assert.ok(m !== undefined, "a payload that was not sent");
        assert.equal(d.key === null ? null : d.key.toString("utf8"), m.key);
        assert.equal(d.deliveryCount, 1);
        assert.equal(d.receiptHandle.length, 42);
        assert.ok(d.owner.length > 0 && d.ownerBoot.length > 0);
        assert.ok(d.producedAtMs > Date.now() - 60_000 && d.producedAtMs <= Date.now());
      }
      assert.equal(new Set(got.map((d) => `${d.partition}/${d.offset}`)).size, sent.length);
      // The handles work like any others: ack half, and the acked ones are 410 the second time.
      const half = got.slice(0, 30).map((d) => d.receiptHandle);
      const a = (await (await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: half })).json()) as { results: { status: number }[] };
      assert.deepEqual(a.results.map((x) => x.status), Array(30).fill(204));
      const again = (await (await json("POST", `/v1/topics/${topic}/ack/batch`, { receipt_handles: half.slice(0, 2) })).json()) as { results: { status: number }[] };
      assert.deepEqual(again.results.map((x) => x.status), [410, 410]);
      // Nothing left: the binary answer is an empty body.
      const empty = await req("POST", `/v1/topics/${topic}/consume/batch?max_messages=10`, undefined, { accept: DELIVERIES_TYPE });
      assert.equal(empty.status, 200);
      assert.equal((await empty.arrayBuffer()).byteLength, 0);
    });

    test("replay returns every message in offset order, acked or not, without a lease", async () => {
      const topic = await createTopic({ partitions: 1 });
      for (let i = 0; i < 30; i++) await produce(topic, `r${i}`);
      for (let i = 0; i < 10; i++) {
        const m = await consume(topic);
        assert.ok(m);
        assert.equal((await ack(topic, m.handle)).status, 204);
      }
      const page = async (q: string) => {
        const r = await req("GET", `/v1/topics/${topic}/partitions/0/messages${q}`);
        assert.equal(r.status, 200);
        return (await r.json()) as { messages: { offset: number; payload_base64: string; key: string | null; produced_at: number }[]; next_offset: number; earliest_offset: number; end_offset: number };
      };
      const all = await page("");
      assert.deepEqual(all.messages.map((m) => m.offset), Array.from({ length: 30 }, (_, i) => i));
      assert.deepEqual(all.messages.map((m) => Buffer.from(m.payload_base64, "base64").toString()), Array.from({ length: 30 }, (_, i) => `r${i}`));
      assert.equal(all.next_offset, 30);
      assert.equal(all.earliest_offset, 0);
      assert.equal(all.end_offset, 30);
      const p2 = await page("?offset=25&limit=3");
      assert.deepEqual(p2.messages.map((m) => m.offset), [25, 26, 27]);
      assert.equal(p2.next_offset, 28);
      const past = await page("?offset=99");
      assert.deepEqual(past.messages, []);
      assert.equal((await page("?limit=5000")).messages.length, 30, "a limit above 1000 is read as 1000");
      // Replay took no lease: the 20 unacked messages are all still there to consume.
      let n = 0;
      while (await consume(topic)) n++;
      assert.equal(n, 20);
      assert.equal((await req("GET", `/v1/topics/${topic}/partitions/7/messages`)).status, 404);
      for (const q of ["?offset=-1", "?offset=x", "?limit=0", "?limit=abc"]) assert.equal((await req("GET", `/v1/topics/${topic}/partitions/0/messages${q}`)).status, 400, q);
      assert.equal((await req("GET", `/v1/topics/${topic}/partitions/x/messages`)).status, 400);
    });

    test("bad input of every kind gets a JSON error and the node keeps serving", async () => {
      const topic = await createTopic({ partitions: 1 });
      await produce(topic, "keep me");
      const cases: [string, string, RequestInit["body"] | undefined, Record<string, string>][] = [
        ["POST", "/v1/topics", "\u0000\u0001", { "content-type": "application/json" }],
        ["POST", "/v1/topics", "null", { "content-type": "application/json" }],
        ["POST", "/v1/topics", '{"name": "a", "partitions": 1e400}', { "content-type": "application/json" }],
        ["POST", "/v1/topics", "", { "content-type": "application/json" }],
        ["PATCH", `/v1/topics/${topic}`, '{"partitions": null}', { "content-type": "application/json" }],
        ["POST", `/v1/topics/${topic}/ack/batch`, '{"receipt_handles": [1,2]}', {}],
        ["POST", `/v1/topics/${topic}/messages/batch`, '{"messages": [null]}', {}],
        ["POST", `/v1/topics/${encodeURIComponent("../../etc")}/messages`, "x", {}],
        ["GET", `/v1/topics/${"x".repeat(300)}`, undefined, {}],
      ];
      for (const [method, path, body, headers] of cases) {
        const r = await req(method, path, body, headers);
        assert.ok(r.status >= 400 && r.status < 500, `${method} ${path} → ${r.status}`);
        assert.ok((r.headers.get("content-type") ?? "").includes("application/json"));
        await errorCode(r);
      }
      // Not HTTP at all: a JSON 400 bad_request, and the connection is closed.
      const u = new URL(url());
      const sock = connect(Number(u.port), u.hostname);
      let answer = "";
      sock.on("data", (b: Buffer) => (answer += b.toString("latin1")));
      const closed = new Promise<void>((res) => sock.once("close", () => res()).once("error", () => res()));
      sock.write("HELLO THERE\r\n\r\n");
      await closed;
      assert.match(answer, /^HTTP\/1\.1 400 /, answer);
      assert.match(answer, /"code":"bad_request"/);
      const m = await consume(topic);
      assert.ok(m);
      assert.equal(m.body.toString(), "keep me");
    });
  });
}
