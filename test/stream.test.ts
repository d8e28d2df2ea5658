// The streaming protocol (docs/api.md, "Streaming protocol"; issue 17 item 3), black-box: real
// node processes, real sockets. A raw client (below) speaks the byte layout of
// src/protocol/stream.ts by hand, so malformed frames, credit and cuts can be sent exactly; the
// SDK's transport: "stream" is driven for the cluster and the cut. Whatever got an ok answer is
// checked afterwards by reading every partition back.

import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { Narad, NaradAmbiguousError, NaradClientError, type Produced } from "../src/client/index.js";
import {
  decodeError,
  decodeProduced,
  encodeProduce,
  FRAME,
  FrameReader,
  frameId,
  frameType,
  STREAM_HEADERS,
  type StreamErrorFields,
} from "../src/protocol/stream.js";
import { LIMITS } from "../src/protocol/wire.js";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";
import { startCluster } from "./support/local-cluster.js";
import { WorkloadRuns } from "./support/workload-runs.js";
import { runWorkload } from "../src/verify/workloads/index.js";

const ADMIN_PASSWORD = "stream-admin-password";

type Answer = { kind: "ok"; partition: number; offset: number } | { kind: "error"; e: StreamErrorFields };

/** A hand-written stream client: the handshake, frames as bytes, every answer kept by id. */
class RawStream {
  readonly answers = new Map<number, Answer>();
  readonly order: number[] = [];
  goaway: StreamErrorFields | null = null;
  creditGiven = 0;
  /** CREDIT frames received: every write of answers to frames that took credit opens with one. */
  creditFrames = 0;
  closed: Promise<void>;
  private constructor(
    readonly socket: Socket,
    readonly headers: Record<string, string>,
    rest: Buffer,
  ) {
    const reader = new FrameReader(16 * 1024 * 1024);
    const onData = (b: Buffer): void => {
      reader.push(b);
      for (let f = reader.next(); f !== null; f = reader.next()) {
        const t = frameType(f);
        if (t === FRAME.produced) {
          const p = decodeProduced(f);
          assert.ok(!this.answers.has(p.id), `frame ${p.id} is answered once`);
          this.answers.set(p.id, { kind: "ok", partition: p.partition, offset: p.offset });
          this.order.push(p.id);
        } else if (t === FRAME.error) {
          assert.ok(!this.answers.has(frameId(f)), `frame ${frameId(f)} is answered once`);
          this.answers.set(frameId(f), { kind: "error", e: decodeError(f) });
          this.order.push(frameId(f));
        } else if (t === FRAME.credit) {
          this.creditGiven += f.readUInt32BE(12);
          this.creditFrames++;
        }
        else if (t === FRAME.goaway) this.goaway = decodeError(f);
        else assert.fail(`unknown server frame type ${t}`);
      }
    };
    socket.on("data", onData);
    socket.on("error", () => undefined);
    this.closed = new Promise((r) => socket.once("close", () => r()));
    if (rest.length > 0) onData(rest);
  }

  /** Asks for the upgrade; resolves with the stream, or with the HTTP answer when refused. */
  static open(url: string, authorization?: string): Promise<RawStream | { status: number; body: string; headers: Record<string, string> }> {
    const u = new URL(url);
    return new Promise((resolve, reject) => {
      const s = connect(Number(u.port), u.hostname);
      s.on("error", reject);
      let buf = Buffer.alloc(0);
      const onData = (b: Buffer): void => {
        buf = Buffer.concat([buf, b]);
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = buf.subarray(0, end).toString("latin1").split("\r\n");
        const status = Number(head[0]!.split(" ")[1]);
        const headers: Record<string, string> = {};
        for (const line of head.slice(1)) {
          const c = line.indexOf(":");
          headers[line.slice(0, c).trim().toLowerCase()] = line.slice(c + 1).trim();
        }
        if (status !== 101) {
          const len = Number(headers["content-length"] ?? 0);
          if (buf.length < end + 4 + len) return;
          s.off("data", onData);
          s.destroy();
          resolve({ status, headers, body: buf.subarray(end + 4, end + 4 + len).toString("utf8") });
          return;
        }
        s.off("data", onData);
        resolve(new RawStream(s, headers, buf.subarray(end + 4)));
      };
      s.on("data", onData);
      s.write(`GET /v1/stream HTTP/1.1\r\nHost: ${u.host}\r\nConnection: Upgrade\r\nUpgrade: narad-stream\r\n${authorization !== undefined ? `Authorization: ${authorization}\r\n` : ""}\r\n`);
    });
  }

  static async must(url: string, authorization?: string): Promise<RawStream> {
    const r = await RawStream.open(url, authorization);
    if (!(r instanceof RawStream)) throw new Error(`the upgrade was refused: ${r.status} ${r.body}`);
    return r;
  }

  get credit(): number {
    return Number(this.headers[STREAM_HEADERS.credit]);
  }

  send(...frames: Buffer[]): void {
    this.socket.write(Buffer.concat(frames));
  }

  async answered(ids: Iterable<number>, what = "every frame answered"): Promise<void> {
    const want = [...ids];
    await waitFor(() => want.every((id) => this.answers.has(id)), { what, timeoutMs: 20_000 });
  }

  ok(id: number): { partition: number; offset: number } {
    const a = this.answers.get(id);
    assert.ok(a?.kind === "ok", `frame ${id} answered ok, not ${JSON.stringify(a)}`);
    return a;
  }

  error(id: number): StreamErrorFields {
    const a = this.answers.get(id);
    assert.ok(a?.kind === "error", `frame ${id} answered with an error, not ${JSON.stringify(a)}`);
    return a.e;
  }
}

/** A frame with a given header and raw body. */
function rawFrame(id: number, type: number, body: Buffer, version = 1): Buffer {
  const b = Buffer.alloc(12 + body.length);
  b.writeUInt32BE(8 + body.length, 0);
  b[4] = version;
  b[5] = type;
  b.writeUInt32BE(id, 8);
  body.copy(b, 12);
  return b;
}

function basic(user: string, password: string): string {
  return `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
}

/** Every message of a topic, by "partition/offset", read back by replay. */
async function readAll(c: Narad, topic: string, partitions: number): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (let p = 0; p < partitions; p++) {
    let offset = 0;
    for (;;) {
      const page = await c.replay(topic, p, { offset, limit: 1000 });
      for (const m of page.messages) out.set(`${m.partition}/${m.offset}`, m.payload.toString("utf8"));
      if (page.messages.length === 0 || page.nextOffset >= page.endOffset) break;
      offset = page.nextOffset;
    }
  }
  return out;
}

async function withNode(o: Parameters<typeof startNode>[0], fn: (n: RunningNode) => Promise<void>): Promise<void> {
  const n = await startNode(o);
  try {
    await fn(n);
  } finally {
    await n.kill();
    await removeDir(n.dataDir);
  }
}

test("stream: auth refused at the handshake (no or wrong credentials: 401 with the JSON body); a grant missing is 403 per frame; a grant revoked is seen on the next frame; a deleted user gets GOAWAY 401", async () => {
  await withNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: ADMIN_PASSWORD } }, async (n) => {
    const admin = new Narad({ url: n.url, user: "admin", password: ADMIN_PASSWORD });
    await admin.createTopic({ name: "granted" });
    await admin.createTopic({ name: "other" });
    await admin.createUser({ name: "pia", password: "pia-password" });
    await admin.addGrant("pia", { action: "produce", pattern: "granted" });
    await admin.addGrant("pia", { action: "consume", pattern: "granted" });

    const none = await RawStream.open(n.url);
    assert.ok(!(none instanceof RawStream));
    assert.equal(none.status, 401);
    assert.equal((JSON.parse(none.body) as { error: { code: string } }).error.code, "unauthorized");
    const wrong = await RawStream.open(n.url, basic("pia", "not-her-password"));
    assert.ok(!(wrong instanceof RawStream));
    assert.equal(wrong.status, 401);

    const s = await RawStream.must(n.url, basic("pia", "pia-password"));
    assert.ok(s.credit > 0, "the 101 names the credit");
    s.send(encodeProduce(1, "granted", null, Buffer.from("a")), encodeProduce(2, "other", null, Buffer.from("b")), encodeProduce(3, "missing-topic", null, Buffer.from("c")));
    await s.answered([1, 2, 3]);
    s.ok(1);
    const e2 = s.error(2);
    assert.deepEqual([e2.status, e2.code, e2.definite], [403, "forbidden", true]);
    // A grant on the name is checked before existence, as over HTTP: no grant on missing-topic.
    assert.equal(s.error(3).code, "forbidden");

    await admin.revokeGrant("pia", { action: "produce", pattern: "granted" });
    s.send(encodeProduce(4, "granted", null, Buffer.from("d")));
    await s.answered([4]);
    assert.equal(s.error(4).code, "forbidden", "the revoked grant is seen on the same connection");

    await admin.addGrant("pia", { action: "produce", pattern: "granted" });
    s.send(encodeProduce(5, "granted", null, Buffer.from("e")));
    await s.answered([5]);
    s.ok(5);

    await admin.deleteUser("pia");
    s.send(encodeProduce(6, "granted", null, Buffer.from("f")));
    await s.closed;
    assert.equal(s.goaway?.code, "unauthorized");
    assert.equal(s.goaway?.definite, true);
    assert.equal(s.answers.has(6), false, "a frame after the user was deleted is not read");
    const stored = await readAll(admin, "granted", 3);
    assert.deepEqual([...stored.values()].sort(), ["a", "e"]);
    await admin.close();
  });
});

test("stream: malformed frames are answered by id and reading goes on; a frame that cannot be cut is GOAWAY bad_request; a frame over the limit is 413 by id, then GOAWAY and close, earlier frames answered", async () => {
  await withNode({}, async (n) => {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "m" });
    const s = await RawStream.must(n.url);
    const topic = Buffer.from("m");
    s.send(
      rawFrame(10, 0x7e, Buffer.alloc(4)), // unknown type
      rawFrame(11, FRAME.produce, Buffer.concat([Buffer.from([1]), topic, Buffer.from([0xff, 0xff, 0])]), 9), // unknown version
      rawFrame(12, FRAME.produce, Buffer.from([50, 0x6d])), // topic length past the end
      rawFrame(13, FRAME.produce, Buffer.concat([Buffer.from([1]), topic, Buffer.from([0x00, 0x20])])), // key past the end
      rawFrame(14, FRAME.produce, Buffer.concat([Buffer.from([1]), topic, Buffer.from([0xff, 0xff, 0x80]), Buffer.from("x")])), // unknown attrs bit
      rawFrame(15, FRAME.produce, Buffer.concat([Buffer.from([2]), Buffer.from("-x"), Buffer.from([0xff, 0xff, 0]), Buffer.from("x")])), // bad topic name
      rawFrame(16, FRAME.produce, Buffer.concat([Buffer.from([1]), topic, Buffer.from([0xff, 0xff, 1]), Buffer.alloc(24), Buffer.from("x")])), // reserved producer field
      rawFrame(17, FRAME.produce, Buffer.from([])), // no body
      encodeProduce(18, "m", "k", Buffer.from("good")),
    );
    await s.answered([10, 11, 12, 13, 14, 15, 16, 17, 18]);
    for (const id of [10, 11, 12, 13, 14, 17]) {
      const e = s.error(id);
      assert.deepEqual([e.status, e.code, e.definite], [400, "bad_request", true], `frame ${id}`);
    }
    assert.equal(s.error(15).code, "invalid_topic_name");
    assert.equal(s.error(16).code, "invalid_argument");
    s.ok(18);
    assert.equal(s.goaway, null, "the connection lives on after frames it could cut");

    // Over the limit: the payload alone past 1 MiB, then a length field of 3 GB.
    s.send(encodeProduce(19, "m", null, Buffer.from("before")), encodeProduce(20, "m", null, Buffer.alloc(LIMITS.messageBytesMax + 1)));
    await s.answered([19, 20]);
    s.ok(19);
    assert.deepEqual([s.error(20).status, s.error(20).code, s.error(20).definite], [413, "payload_too_large", true], "a payload over 1 MiB in a frame under the frame limit");
    const huge = Buffer.alloc(12);
    huge.writeUInt32BE(3_000_000_000, 0);
    huge[4] = 1;
    huge[5] = FRAME.produce;
    huge.writeUInt32BE(21, 8);
    s.send(encodeProduce(22, "m", null, Buffer.from("just before")), huge);
    await s.closed;
    s.ok(22);
    assert.deepEqual([s.error(21).status, s.error(21).code], [413, "payload_too_large"]);
    assert.equal((s.goaway as StreamErrorFields | null)?.code, "payload_too_large");

    // A length field under the header: nothing to answer by id.
    const s2 = await RawStream.must(n.url);
    const bad = Buffer.alloc(8);
    bad.writeUInt32BE(3, 0);
    s2.send(encodeProduce(1, "m", null, Buffer.from("first")), bad);
    await s2.closed;
    s2.ok(1);
    assert.equal(s2.goaway?.code, "bad_request");
    assert.equal(s2.goaway?.definite, true);

    // An upgrade to another protocol: without a body it is served as HTTP/1.1 (curl --http2
    // asks for h2c so), with one it is refused with the JSON body; so is the stream on another path.
    const u = new URL(n.url);
    const ask = (text: string) =>
      new Promise<string>((resolve) => {
        const sock = connect(Number(u.port), u.hostname);
        let got = "";
        sock.on("data", (b) => (got += b.toString()));
        sock.on("close", () => resolve(got));
        sock.write(text);
      });
    const h2c = await ask(`GET /v1/topics/m HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n`);
    assert.match(h2c, /^HTTP\/1\.1 200 /);
    assert.match(h2c, /"name":"m"/);
    const withBody = await ask(`POST /v1/topics/m/messages HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 3\r\n\r\nabc`);
    assert.match(withBody, /^HTTP\/1\.1 400 /);
    assert.match(withBody, /"code":"bad_request"/);
    const otherPath = await ask(`GET /v1/topics HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: narad-stream\r\n\r\n`);
    assert.match(otherPath, /^HTTP\/1\.1 400 /);
    const stored = await readAll(c, "m", 3);
    assert.deepEqual([...stored.values()].sort(), ["before", "first", "good", "just before"]);
    await c.close();
    assert.equal(n.proc.exitCode, null, "the node is still running");
  });
});

test("stream: the answers of one commit leave in one socket write (each write opens with one CREDIT frame)", async () => {
  await withNode({}, async (n) => {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "coalesce", partitions: 1 });
    const s = await RawStream.must(n.url);
    const frames = Array.from({ length: 500 }, (_, i) => encodeProduce(i + 1, "coalesce", null, Buffer.from(`c${i}`)));
    s.send(...frames);
    await s.answered(frames.map((_, i) => i + 1));
    assert.ok([...s.answers.values()].every((a) => a.kind === "ok"));
    const writes = s.creditFrames;
    assert.ok(writes >= 1 && writes <= 50, `500 answers came in ${writes} writes (one per commit), not one write each`);
    assert.equal(s.creditGiven, frames.reduce((a, f) => a + f.length, 0), "the credit given back is the bytes of the frames answered");
    const metrics = await c.metrics();
    assert.match(metrics, /^narad_stream_connections 1$/m);
    assert.match(metrics, /^narad_stream_frames_total\{answer="ok"\} 500$/m);
    s.socket.destroy();
    await c.close();
  });
});

test("stream: a connection idle past stream.idle_timeout_ms gets GOAWAY stream_idle (408, definite) and is closed; the SDK's next produce opens a new connection by itself", async () => {
  await withNode({ env: { NARAD_STREAM_IDLE_TIMEOUT_MS: "1000" } }, async (n) => {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "idle", partitions: 1 });
    const s = await RawStream.must(n.url);
    s.send(encodeProduce(1, "idle", null, Buffer.from("before the idle")));
    await s.answered([1]);
    s.ok(1);
    // Nothing in flight from here: the sweep closes it once a second has passed without a frame.
    await s.closed;
    assert.ok(s.goaway !== null, "a GOAWAY came before the close");
    assert.equal(s.goaway.code, "stream_idle");
    assert.equal(s.goaway.status, 408);
    assert.equal(s.goaway.definite, true);

    const sdk = new Narad({ url: n.url, transport: "stream" });
    try {
      const first = await sdk.produce("idle", "one");
      // The node counts open stream connections; it falls to 0 once the idle one is closed.
      await waitFor(async () => /^narad_stream_connections 0$/m.test(await c.metrics()), { what: "the SDK's idle stream closed by the node", timeoutMs: 20_000 });
      const second = await sdk.produce("idle", "two");
      assert.deepEqual([first.partition, second.partition], [0, 0]);
      assert.equal(second.offset, first.offset + 1);
    } finally {
      await sdk.close();
    }
    const all = await readAll(c, "idle", 1);
    assert.deepEqual([...all.values()], ["before the idle", "one", "two"]);
    await c.close();
  });
});

test("stream: the SDK writes a long turn of calls in chunks; every call resolves with its own offset, in call order on the partition, and reads back as sent", async () => {
  await withNode({}, async (n) => {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "turn", partitions: 1 });
    const sdk = new Narad({ url: n.url, transport: "stream" });
    try {
      await sdk.produce("turn", "open the connection");
      // 400 calls of about 1 KiB in one turn: about 13 chunks of 32 KiB leave while the turn goes on.
      const bodies = Array.from({ length: 400 }, (_, i) => `${String(i).padStart(4, "0")}-${"x".repeat(1019)}`);
      const results = await Promise.all(bodies.map((b) => sdk.produce("turn", b)));
      const offsets = results.map((r) => r.offset);
      assert.deepEqual(offsets, offsets.map((_, i) => offsets[0]! + i), "offsets follow call order, none shared or skipped");
      const all = await readAll(c, "turn", 1);
      assert.deepEqual([...all.values()].slice(1), bodies);
    } finally {
      await sdk.close();
      await c.close();
    }
  });
});

test("stream: past limits.stream_connections a handshake is refused 429 too_many_streams with Retry-After (the JSON body); a slot freed is taken again", async () => {
  await withNode({ env: { NARAD_LIMITS_STREAM_CONNECTIONS: "2" } }, async (n) => {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "capped", partitions: 1 });
    const a = await RawStream.must(n.url);
    const b = await RawStream.must(n.url);
    const refused = await RawStream.open(n.url);
    assert.ok(!(refused instanceof RawStream), "the third handshake is refused");
    assert.equal(refused.status, 429);
    assert.equal((JSON.parse(refused.body) as { error: { code: string } }).error.code, "too_many_streams");
    assert.equal(refused.headers["retry-after"], "1");
    // The open ones still work.
    a.send(encodeProduce(1, "capped", null, Buffer.from("a")));
    b.send(encodeProduce(1, "capped", null, Buffer.from("b")));
    await a.answered([1]);
    await b.answered([1]);
    a.ok(1);
    b.ok(1);
    b.socket.end();
    await b.closed;
    await waitFor(async () => /^narad_stream_connections 1$/m.test(await c.metrics()), { what: "the closed stream no longer counted", timeoutMs: 20_000 });
    const again = await RawStream.must(n.url);
    again.send(encodeProduce(7, "capped", null, Buffer.from("c")));
    await again.answered([7]);
    again.ok(7);
    again.socket.end();
    a.socket.end();
    await Promise.all([again.closed, a.closed]);
    await c.close();
  });
});

test("stream: a drain (SIGTERM) while frames are in flight answers every frame it read, then GOAWAY shutting_down; frames not answered were not stored", async () => {
  const n = await startNode({});
  try {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "drain" });
    const s = await RawStream.must(n.url);
    let id = 0;
    let signalled = false;
    // Keep frames flowing until the node says GOAWAY; signal it once answers come back, so
    // frames are certainly in flight when it starts to drain.
    while (s.goaway === null && !s.socket.destroyed && id < 200_000) {
      const batch: Buffer[] = [];
      for (let i = 0; i < 50; i++) batch.push(encodeProduce(++id, "drain", null, Buffer.from(`d${id}`)));
      await new Promise<void>((r) => s.socket.write(Buffer.concat(batch), () => r()));
      if (!signalled && s.answers.size > 0) {
        signalled = true;
        n.proc.kill("SIGTERM");
      }
      await new Promise((r) => setImmediate(r));
    }
    await s.closed;
    assert.ok(signalled);
    const goaway = s.goaway as StreamErrorFields | null; // set by the socket's data handler
    assert.equal(goaway?.code, "shutting_down");
    assert.equal(goaway?.definite, true);
    assert.equal((await n.exited).code, 0, "a graceful stop");
    const answeredOk = [...s.answers.entries()].filter(([, a]) => a.kind === "ok");
    assert.ok(answeredOk.length > 0);
    // Read everything back after a restart on the same data.
    const n2 = await startNode({ dataDir: n.dataDir });
    try {
      const c2 = new Narad({ url: n2.url });
      const stored = await readAll(c2, "drain", 3);
      for (const [fid, a] of answeredOk) if (a.kind === "ok") assert.equal(stored.get(`${a.partition}/${a.offset}`), `d${fid}`, `frame ${fid} got an ok and is stored where it said`);
      const storedIds = new Set([...stored.values()]);
      for (let f = 1; f <= id; f++) if (!s.answers.has(f)) assert.ok(!storedIds.has(`d${f}`), `frame ${f} got no answer before the GOAWAY and was not stored`);
      assert.equal(stored.size, answeredOk.length, "nothing else is stored");
      await c2.close();
    } finally {
      await n2.kill();
    }
    await c.close();
  } finally {
    await n.kill();
    await removeDir(n.dataDir);
  }
});

test("stream: a cut connection (the client's, then the node killed) leaves every frame answered or ambiguous, and none that got an ok is lost", async () => {
  const n = await startNode({});
  let n2: RunningNode | undefined;
  try {
    const c = new Narad({ url: n.url });
    await c.createTopic({ name: "cut" });
    // The client cuts its own connection with frames in flight.
    const s = await RawStream.must(n.url);
    const frames: Buffer[] = [];
    for (let id = 1; id <= 3000; id++) frames.push(encodeProduce(id, "cut", id % 5 === 0 ? `k${id}` : null, Buffer.from(`a${id}`)));
    s.send(...frames);
    await waitFor(() => s.answers.size > 0, { what: "a first answer" });
    s.socket.destroy();
    // The SDK's stream: calls keep flowing (512 in flight) and the node is killed among them.
    const sdk = new Narad({ url: n.url, transport: "stream" });
    const outcomes: ({ i: number; r: Produced } | { i: number; e: unknown })[] = [];
    let stop = false;
    let oks = 0;
    const flow = (async () => {
      const inFlight = new Set<Promise<void>>();
      for (let i = 0; !stop; i++) {
        const p: Promise<void> = sdk.produce("cut", `b${i}`).then(
          (r) => {
            oks++;
            outcomes.push({ i, r });
          },
          (e: unknown) => {
            outcomes.push({ i, e });
          },
        );
        inFlight.add(p);
        void p.finally(() => inFlight.delete(p));
        if (inFlight.size >= 512) await Promise.race(inFlight);
      }
      await Promise.all(inFlight);
    })();
    await waitFor(() => oks >= 500, { what: "500 calls answered ok", timeoutMs: 30_000 });
    await n.kill();
    stop = true;
    await flow;
    n2 = await startNode({ dataDir: n.dataDir });
    const c2 = new Narad({ url: n2.url });
    const stored = await readAll(c2, "cut", 3);
    for (const [id, a] of s.answers) if (a.kind === "ok") assert.equal(stored.get(`${a.partition}/${a.offset}`), `a${id}`, `raw frame ${id}`);
    let ambiguous = 0;
    for (const o of outcomes) {
      if ("r" in o) assert.equal(stored.get(`${o.r.partition}/${o.r.offset}`), `b${o.i}`, `call ${o.i} got an ok and is stored where it said`);
      else {
        assert.ok(o.e instanceof NaradClientError, `call ${o.i}: ${String(o.e)}`);
        if (o.e instanceof NaradAmbiguousError) ambiguous++;
        else assert.ok(![...stored.values()].includes(`b${o.i}`), `call ${o.i} failed definitely and is not stored`);
      }
    }
    assert.ok(outcomes.some((o) => "r" in o), "some calls were answered ok");
    assert.ok(ambiguous > 0, "some calls were in flight when the node died: ambiguous");
    await c2.close();
    sdk.destroy();
    await c.close();
  } finally {
    await n2?.kill();
    await n.kill();
    await removeDir(n.dataDir);
  }
});

test("stream: a 3-node cluster (security on) takes produce through the stream of one node; partitions owned elsewhere are forwarded and answered with their owner; frames past the connection's credit are refused 429 credit_exceeded (definite, not stored), the rest stored; a grant revoked through another node is seen on the stream", async () => {
  const adminPassword = "stream-cluster-admin";
  // limits.pending_sync_bytes at its 1 MiB minimum makes the credit one largest frame. A node
  // frozen below holds its forwards for well under a second; the lease and the forward timeout are
  // set far past that so neither can end first on a slow machine.
  const cluster = await startCluster({
    nodes: 3,
    security: true,
    adminPassword,
    env: { NARAD_LIMITS_PENDING_SYNC_BYTES: String(1024 * 1024), NARAD_CLUSTER_NODE_LEASE_MS: "60000", NARAD_CLUSTER_FORWARD_TIMEOUT_MS: "120000" },
  });
  try {
    const admin = new Narad({ url: cluster.urls[0]!, user: "admin", password: adminPassword });
    await admin.createTopic({ name: "spread", partitions: 6 });
    await admin.createUser({ name: "pia", password: "pia-password" });
    await admin.addGrant("pia", { action: "produce", pattern: "spread" });
    await waitFor(async () => {
      const nodes = await admin.nodes();
      return nodes.filter((x) => x.partitions.some((p) => p.topic === "spread")).length === 3;
    }, { what: "every node owning a partition of spread", timeoutMs: 20_000 });
    const sdk = new Narad({ url: cluster.urls[0]!, user: "pia", password: "pia-password", transport: "stream" });
    const rs = await Promise.all(Array.from({ length: 600 }, (_, i) => sdk.produce("spread", `s${i}`, { key: `key-${i}` })));
    const owners = new Set(rs.map((r) => r.owner));
    assert.equal(owners.size, 3, `answers name the three owners: ${[...owners].join(", ")}`);
    const stored = await readAll(admin, "spread", 6);
    rs.forEach((r, i) => assert.equal(stored.get(`${r.partition}/${r.offset}`), `s${i}`));
    assert.equal(stored.size, 600);

    // Credit. A frame's credit comes back with its answer, and the answer of a frame for a
    // partition owned by a frozen node waits for that node: so every frame sent after the credit
    // is spent is read while none is given back, and is refused, whatever the disks' speed. (On
    // one node a fast fdatasync can answer each frame before the next is read, and then no frame
    // is ever past the credit.)
    await admin.createTopic({ name: "credit", partitions: 1 });
    let owner = "";
    await waitFor(async () => {
      owner = (await admin.nodes()).find((x) => x.partitions.some((p) => p.topic === "credit"))?.id ?? "";
      return owner !== "";
    }, { what: "an owner of credit/0", timeoutMs: 20_000 });
    const frozen = cluster.nodes.find((x) => x.id === owner)!;
    const reader = cluster.nodes.find((x) => x.id !== owner)!;
    const s = await RawStream.must(reader.url, basic("admin", adminPassword));
    const payload = Buffer.alloc(200 * 1024, 0x61);
    const frame = (id: number) => encodeProduce(id, "credit", null, Buffer.concat([Buffer.from(`${String(id).padStart(2, "0")}:`), payload]));
    const fit = Math.floor(s.credit / frame(1).length);
    assert.ok(fit >= 1, `a credit of ${s.credit} bytes holds a frame of ${frame(1).length}`);
    const frames = Array.from({ length: fit + 8 }, (_, i) => frame(i + 1));
    frozen.pause();
    try {
      s.send(...frames);
      const past = frames.map((_, i) => i + 1).filter((id) => id > fit);
      await s.answered(past, "every frame past the credit answered");
      for (const id of past) assert.deepEqual([s.error(id).status, s.error(id).code, s.error(id).definite], [429, "credit_exceeded", true], `frame ${id}`);
      assert.equal(s.answers.size, past.length, "the frames within the credit wait for their frozen owner");
      assert.equal(s.creditGiven, 0, "a refused frame took no credit, so its answer gives none back");
    } finally {
      frozen.resume();
    }
    await s.answered(frames.map((_, i) => i + 1));
    for (let id = 1; id <= fit; id++) s.ok(id);
    assert.ok(s.creditGiven > 0, "answers give the credit back");
    const held = await readAll(admin, "credit", 1);
    assert.deepEqual([...held.values()].map((v) => Number(v.split(":")[0])).sort((a, b) => a - b), Array.from({ length: fit }, (_, i) => i + 1), "exactly the frames answered ok are stored");
    s.socket.destroy();

    // The grant lives in PostgreSQL: revoked through another node, it is gone for the stream's
    // next frame (the change is answered once every live node re-read it).
    const admin2 = new Narad({ url: cluster.urls[1]!, user: "admin", password: adminPassword });
    await admin2.revokeGrant("pia", { action: "produce", pattern: "spread" });
    const refused = await sdk.produce("spread", "after revoke").then(
      () => assert.fail("a produce after the grant was revoked was stored"),
      (e: unknown) => e,
    );
    assert.ok(refused instanceof NaradClientError && refused.status === 403 && refused.definite, String(refused));
    await admin2.addGrant("pia", { action: "produce", pattern: "spread" });
    await sdk.produce("spread", "granted again");
    await sdk.close();
    await admin2.close();
    await admin.close();
  } finally {
    await cluster.stop();
  }
});

test("stream: the chaos workload (terminate or kill, then start) with its producers on transport: \"stream\" is judged valid", { timeout: 240_000 }, async () => {
  const runs = new WorkloadRuns("narad-stream-workload-");
  try {
    const seed = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 20261201;
    const r = await runWorkload({ workload: "chaos", outDir: await runs.outDir(), seed, durationS: 8, faultIntervalMs: 1_500, faultHoldMs: 400, faultsMin: 2, transport: "stream" });
    runs.assertValid(r);
    assert.ok(r.counts.produceOk > 0, `seed ${seed}: no produce succeeded`);
    const stops = r.report!.faults.filter((f) => (f.kind === "kill" || f.kind === "terminate") && f.outcome === "ok");
    assert.ok(stops.length >= 2, `seed ${seed}: only ${stops.length} stops happened`);
  } finally {
    await runs.cleanup();
  }
});
