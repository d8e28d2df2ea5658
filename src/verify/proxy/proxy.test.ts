// The fault proxy over real sockets, with a plain TCP echo server as its target. Timing asserts
// are lower bounds only (a toxic delays at least this much); waits are conditions with deadlines.

import { test, describe, before, after, afterEach } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { startProxy, BANDWIDTH_BURST_MS, type Proxy, type ProxyOptions } from "./proxy.js";
import { connectClient, freePort, sha256, startEchoServer, waitUntil, type EchoServer, type RecordingClient } from "../../../test/support/peers.js";

describe("fault proxy", () => {
  let echo: EchoServer;
  const proxies: Proxy[] = [];
  const clients: RecordingClient[] = [];

  before(async () => {
    echo = await startEchoServer();
  });
  afterEach(async () => {
    for (const c of clients.splice(0)) c.socket.destroy();
    for (const p of proxies.splice(0)) await p.close();
  });
  after(async () => {
    await echo.close();
  });

  async function proxy(extra: Partial<ProxyOptions> = {}): Promise<Proxy> {
    const p = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: echo.port, ...extra });
    proxies.push(p);
    return p;
  }
  async function client(p: Proxy): Promise<RecordingClient> {
    const c = await connectClient(p.address.port);
    clients.push(c);
    return c;
  }

  test("bytes pass through unchanged in both directions", async () => {
    const p = await proxy();
    const c = await client(p);
    const size = 8 * 1024 * 1024 + 17;
    const payload = randomBytes(size);
    c.socket.write(payload);
    await c.whenBytes(size);
    assert.equal(c.bytes(), size);
    assert.equal(sha256(c.data()), sha256(payload));
    const k = p.counters();
    assert.equal(k.connectionsAccepted, 1);
    assert.equal(k.connectionsActive, 1);
    assert.equal(k.upstream.bytesReceived, size);
    assert.equal(k.upstream.bytesForwarded, size);
    assert.equal(k.downstream.bytesReceived, size);
    assert.equal(k.downstream.bytesForwarded, size);
    assert.equal(k.upstream.bytesDelayed, 0);
    assert.equal(k.upstream.bytesDropped, 0);
  });

  test("a client's FIN reaches the target and the target's FIN reaches the client", async () => {
    const p = await proxy();
    const c = await client(p);
    c.socket.end(Buffer.from("last words"));
    await waitUntil(() => c.closed, "the connection to close");
    assert.equal(c.data().toString(), "last words");
    assert.equal(c.ended, true);
    await waitUntil(() => p.counters().connectionsActive === 0, "the proxy to forget the connection");
  });

  test("a cut by source holds only the connections whose first request names that node, and healFrom lets them go", async () => {
    const p = await proxy();
    const fromN1 = await client(p);
    const fromN2 = await client(p);
    const plain = await client(p);
    const head = (node: string | null) => `POST /internal/v1/x HTTP/1.1\r\nhost: h\r\n${node === null ? "" : `Narad-Forwarded-By: ${node}\r\n`}content-length: 0\r\n\r\n`;
    // The sources are learnt from the first bytes, before any cut.
    fromN1.socket.write(head("n1"));
    fromN2.socket.write(head("n2"));
    plain.socket.write(head(null));
    await fromN1.whenBytes(head("n1").length);
    await fromN2.whenBytes(head("n2").length);
    await plain.whenBytes(head(null).length);
    p.cutFrom("n1");
    assert.deepEqual(p.cutSources(), ["n1"]);
    fromN1.socket.write("held");
    fromN2.socket.write("flows");
    plain.socket.write("flows too");
    await fromN2.whenBytes(head("n2").length + 5);
    await plain.whenBytes(head(null).length + 9);
    await waitUntil(() => p.counters().upstream.bytesQueued === 4, "the proxy to hold n1's bytes");
    assert.equal(fromN1.bytes(), head("n1").length);
    assert.equal(p.counters().connectionsCutBySource, 1);
    // A new connection from the cut source is held from its first request on.
    const late = await client(p);
    late.socket.write(head("n1"));
    await waitUntil(() => p.counters().connectionsCutBySource === 2, "the new connection of n1 to be held");
    assert.equal(late.bytes(), 0);
    p.healFrom("n1");
    await fromN1.whenBytes(head("n1").length + 4);
    await late.whenBytes(head("n1").length);
    assert.equal(fromN1.data().toString().slice(-4), "held");
    assert.equal(p.counters().connectionsCutBySource, 0);
  });

  test("an upstream cut holds bytes in the proxy and heal delivers them in order", async () => {
    const p = await proxy();
    const c = await client(p);
    p.cut("upstream");
    const payload = randomBytes(100_000);
    c.socket.write(payload);
    await waitUntil(() => p.counters().upstream.bytesReceived === payload.length, "the proxy to hold every byte");
    let k = p.counters();
    assert.equal(k.upstream.bytesForwarded, 0);
    assert.equal(k.upstream.bytesQueued, payload.length);
    assert.equal(c.bytes(), 0);
    p.heal();
    await c.whenBytes(payload.length);
    assert.equal(sha256(c.data()), sha256(payload));
    k = p.counters();
    assert.equal(k.upstream.bytesForwarded, payload.length);
    assert.equal(k.upstream.bytesDelayed, payload.length);
    assert.ok(k.upstream.cutMs >= 0);
    assert.deepEqual(p.toxics(), { upstream: [], downstream: [] });
  });

  test("a downstream cut lets the target hear the client but not answer", async () => {
    const p = await proxy();
    const c = await client(p);
    p.cut("downstream");
    c.socket.write("ping");
    await waitUntil(() => p.counters().downstream.bytesReceived === 4, "the echo to reach the proxy");
    assert.equal(p.counters().upstream.bytesForwarded, 4);
    assert.equal(c.bytes(), 0);
    p.heal("downstream");
    await c.whenBytes(4);
    assert.equal(c.data().toString(), "ping");
  });

  test("a connection opened during an upstream cut is held, not connected, until heal", async () => {
    const p = await proxy();
    p.cut("both");
    const acceptedBefore = echo.accepted();
    const c = await client(p);
    c.socket.write("held");
    await waitUntil(() => p.counters().upstream.bytesReceived === 4, "the proxy to accept and read the held connection");
    assert.equal(p.counters().connectionsHeld, 1);
    assert.equal(echo.accepted(), acceptedBefore);
    p.heal();
    await c.whenBytes(4);
    assert.equal(c.data().toString(), "held");
    assert.equal(echo.accepted(), acceptedBefore + 1);
    assert.equal(p.counters().connectionsHeld, 0);
  });

  test("past the cut buffer bound the connection is dropped with a reset", async () => {
    const cutBufferBytesMax = 64 * 1024;
    const p = await proxy({ cutBufferBytesMax });
    const c = await client(p);
    p.cut("upstream");
    c.socket.write(randomBytes(4 * cutBufferBytesMax));
    await waitUntil(() => c.closed, "the dropped connection to close at the client");
    assert.equal(c.errorCode, "ECONNRESET");
    const k = p.counters();
    assert.equal(k.connectionsDropped, 1);
    assert.equal(k.connectionsActive, 0);
    assert.ok(k.upstream.bytesDropped > cutBufferBytesMax, `dropped ${k.upstream.bytesDropped}`);
    assert.equal(k.upstream.bytesForwarded, 0);
  });

  test("latency delays each direction by at least the set amount", async () => {
    const p = await proxy();
    const latencyMs = 150;
    p.setToxic("both", { kind: "latency", latencyMs });
    const c = await client(p);
    const t0 = performance.now();
    c.socket.write("x");
    const t1 = await c.whenBytes(1);
    assert.ok(t1 - t0 >= 2 * latencyMs, `round trip took ${t1 - t0} ms, expected ≥ ${2 * latencyMs}`);
    assert.equal(p.counters().upstream.bytesDelayed, 1);
    assert.equal(p.counters().downstream.bytesDelayed, 1);
  });

  test("latency with jitter keeps byte order within a connection", async () => {
    const p = await proxy();
    p.setToxic("upstream", { kind: "latency", latencyMs: 10, jitterMs: 10 });
    p.setToxic("downstream", { kind: "latency", latencyMs: 5, jitterMs: 5 });
    const c = await client(p);
    const parts: Buffer[] = [];
    for (let i = 0; i < 200; i++) {
      const b = Buffer.from(`${i},`);
      parts.push(b);
      c.socket.write(b);
      // Let the chunks reach the proxy separately, so each gets its own jittered due time.
      if (i % 10 === 0) await new Promise((r) => setImmediate(r));
    }
    const all = Buffer.concat(parts);
    await c.whenBytes(all.length);
    assert.equal(c.data().toString(), all.toString());
  });

  test("reset on downstream: the client sees ECONNRESET, and so does a new connection", async () => {
    const p = await proxy();
    const c = await client(p);
    c.socket.write("hello");
    await c.whenBytes(5);
    p.setToxic("downstream", { kind: "reset" });
    await waitUntil(() => c.closed, "the reset connection to close");
    assert.equal(c.errorCode, "ECONNRESET");
    const c2 = await client(p);
    await waitUntil(() => c2.closed, "a new connection to be reset");
    assert.equal(c2.errorCode, "ECONNRESET");
    const k = p.counters();
    assert.equal(k.connectionsReset, 2);
    assert.equal(k.connectionsActive, 0);
    p.removeToxic("downstream", "reset");
    const c3 = await client(p);
    c3.socket.write("again");
    await c3.whenBytes(5);
    assert.equal(c3.data().toString(), "again");
  });

  test("reset on upstream: the node sees ECONNRESET", async () => {
    const p = await proxy();
    const c = await client(p);
    c.socket.write("hello");
    await c.whenBytes(5);
    const before = echo.errors().filter((e) => e === "ECONNRESET").length;
    p.setToxic("upstream", { kind: "reset" });
    await waitUntil(() => echo.errors().filter((e) => e === "ECONNRESET").length > before, "the node to see a reset");
    await waitUntil(() => c.closed, "the client side to close");
    assert.equal(p.counters().connectionsReset, 1);
  });

  test("a bandwidth limit makes a transfer take at least size / rate", async () => {
    const p = await proxy();
    const bandwidthBytesPerS = 400_000;
    p.setToxic("downstream", { kind: "bandwidth", bandwidthBytesPerS });
    const c = await client(p);
    const size = 200_000;
    const payload = randomBytes(size);
    const t0 = performance.now();
    c.socket.write(payload);
    const t1 = await c.whenBytes(size);
    // The bucket starts empty, so the whole transfer is paid for at the set rate.
    const minMs = (size / bandwidthBytesPerS) * 1000;
    assert.ok(t1 - t0 >= minMs, `took ${t1 - t0} ms, expected ≥ ${minMs} (burst ${BANDWIDTH_BURST_MS} ms)`);
    assert.equal(sha256(c.data()), sha256(payload));
    assert.equal(p.counters().downstream.bytesForwarded, size);
  });

  test("the slicer delivers the same bytes in more, smaller chunks", async () => {
    const p = await proxy();
    const sliceBytes = 100;
    p.setToxic("downstream", { kind: "slicer", sliceBytes, sliceDelayMs: 3 });
    const c = await client(p);
    const payload = randomBytes(3000);
    c.socket.write(payload);
    await c.whenBytes(payload.length);
    assert.equal(sha256(c.data()), sha256(payload));
    // 30 slices 3 ms apart; a busy event loop may read a few together, never all of them.
    assert.ok(c.chunks.length >= 5, `only ${c.chunks.length} chunks: ${c.chunks.map((b) => b.length)}`);
    assert.equal(p.counters().downstream.bytesForwarded, payload.length);
  });

  test("a connection to a target that is down is reset and counted", async () => {
    const port = await freePort();
    const p = await proxy({ targetPort: port });
    const c = await client(p);
    await waitUntil(() => c.closed, "the connection to a dead target to close");
    assert.equal(c.errorCode, "ECONNRESET");
    assert.equal(p.counters().upstreamConnectFailures, 1);
  });

  test("past connectionsMax new connections are refused with a reset", async () => {
    const p = await proxy({ connectionsMax: 1 });
    const c1 = await client(p);
    c1.socket.write("a");
    await c1.whenBytes(1);
    const c2 = await client(p);
    await waitUntil(() => c2.closed, "the extra connection to be refused");
    assert.equal(c2.errorCode, "ECONNRESET");
    assert.equal(p.counters().connectionsRefused, 1);
  });

  test("bad toxic values are refused with a RangeError", async () => {
    const p = await proxy();
    assert.throws(() => p.setToxic("upstream", { kind: "latency", latencyMs: -1 }), RangeError);
    assert.throws(() => p.setToxic("upstream", { kind: "bandwidth", bandwidthBytesPerS: 0 }), RangeError);
    assert.throws(() => p.setToxic("upstream", { kind: "slicer", sliceBytes: 0 }), RangeError);
    assert.throws(() => p.setToxic("sideways" as "upstream", { kind: "cut" }), RangeError);
    assert.throws(() => p.setToxic("upstream", { kind: "melt" } as unknown as { kind: "cut" }), RangeError);
    assert.deepEqual(p.toxics(), { upstream: [], downstream: [] });
  });
});
