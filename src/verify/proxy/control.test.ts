// The proxy's HTTP control API and the `narad verify proxy` command function, over real sockets.

import { test, describe, before, after } from "node:test";
import assert from "node:assert/strict";
import { startProxy, type Proxy } from "./proxy.js";
import { parseHostPort, runProxyCommand, startProxyControl, type ProxyControl } from "./control.js";
import { connectClient, freePort, startEchoServer, waitUntil, type EchoServer } from "../../../test/support/peers.js";

async function call(control: ProxyControl, method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`http://127.0.0.1:${control.address.port}${path}`, {
    method,
    headers: body === undefined ? {} : { "content-type": "application/json" },
    body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

describe("proxy control API", () => {
  let echo: EchoServer;
  let proxy: Proxy;
  let control: ProxyControl;

  before(async () => {
    echo = await startEchoServer();
    proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: echo.port });
    control = await startProxyControl(proxy, { host: "127.0.0.1", port: 0 });
  });
  after(async () => {
    await control?.close();
    await proxy?.close();
    await echo?.close();
  });

  test("POST, GET and DELETE /toxics change what the proxy does", async () => {
    let r = await call(control, "POST", "/toxics", { direction: "downstream", kind: "latency", latency_ms: 40, jitter_ms: 5 });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { upstream: [], downstream: [{ kind: "latency", latency_ms: 40, jitter_ms: 5 }] });
    r = await call(control, "POST", "/toxics", { direction: "both", kind: "slicer", slice_bytes: 10 });
    assert.equal(r.status, 200);
    r = await call(control, "GET", "/toxics");
    assert.deepEqual(r.json.upstream, [{ kind: "slicer", slice_bytes: 10, slice_delay_ms: 0 }]);
    assert.equal(r.json.downstream.length, 2);
    r = await call(control, "DELETE", "/toxics?direction=downstream&kind=latency");
    assert.deepEqual(r.json.downstream, [{ kind: "slicer", slice_bytes: 10, slice_delay_ms: 0 }]);
    r = await call(control, "POST", "/toxics", { direction: "upstream", kind: "cut" });
    assert.deepEqual(proxy.toxics().upstream.map((t) => t.kind).sort(), ["cut", "slicer"]);
    r = await call(control, "DELETE", "/toxics");
    assert.deepEqual(r.json, { upstream: [], downstream: [] });
    assert.deepEqual(proxy.toxics(), { upstream: [], downstream: [] });
  });

  test("GET /counters reports the traffic", async () => {
    const c = await connectClient(proxy.address.port);
    c.socket.write("counted");
    await c.whenBytes(7);
    const r = await call(control, "GET", "/counters");
    assert.equal(r.status, 200);
    assert.ok(r.json.connections_accepted >= 1);
    assert.ok(r.json.upstream.bytes_forwarded >= 7);
    assert.ok(r.json.downstream.bytes_forwarded >= 7);
    assert.equal(typeof r.json.upstream.cut_ms, "number");
    c.socket.destroy();
  });

  test("bad requests answer JSON errors", async () => {
    let r = await call(control, "POST", "/toxics", { direction: "upstream", kind: "latency", latency_ms: -5 });
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, "bad_toxic");
    r = await call(control, "POST", "/toxics", { direction: "north", kind: "cut" });
    assert.equal(r.status, 400);
    r = await call(control, "POST", "/toxics", { kind: "melt" });
    assert.equal(r.status, 400);
    r = await call(control, "POST", "/toxics", "{not json");
    assert.equal(r.status, 400);
    assert.equal(r.json.error.code, "bad_json");
    r = await call(control, "POST", "/toxics", "x".repeat(100_000));
    assert.equal(r.status, 413);
    r = await call(control, "GET", "/nowhere");
    assert.equal(r.status, 404);
    r = await call(control, "PUT", "/toxics");
    assert.equal(r.status, 405);
    assert.deepEqual(proxy.toxics(), { upstream: [], downstream: [] });
  });
});

describe("narad verify proxy command", () => {
  test("parseHostPort reads HOST:PORT and [IPv6]:PORT", () => {
    assert.deepEqual(parseHostPort("127.0.0.1:7070"), { host: "127.0.0.1", port: 7070 });
    assert.deepEqual(parseHostPort("[::1]:0"), { host: "::1", port: 0 });
    assert.throws(() => parseHostPort("7070"));
    assert.throws(() => parseHostPort("host:port"));
    assert.throws(() => parseHostPort("host:70000"));
  });

  test("runs a proxy with a control API until stopped", async () => {
    const echo = await startEchoServer();
    const stop = new AbortController();
    let done: Promise<void> | undefined;
    try {
      const listenPort = await freePort();
      const controlPort = await freePort();
      const lines: string[] = [];
      const log = console.log;
      console.log = (...args: unknown[]) => void lines.push(args.join(" "));
      try {
        done = runProxyCommand({
          listen: `127.0.0.1:${listenPort}`,
          target: `127.0.0.1:${echo.port}`,
          control: `127.0.0.1:${controlPort}`,
          signal: stop.signal,
        });
        await waitUntil(() => lines.length > 0, "the ready line");
      } finally {
        console.log = log;
      }
      assert.match(lines[0]!, new RegExp(`^narad proxy listening on 127\\.0\\.0\\.1:${listenPort}, forwarding to 127\\.0\\.0\\.1:${echo.port} \\(control http://127\\.0\\.0\\.1:${controlPort}\\)$`));
      const res = await fetch(`http://127.0.0.1:${controlPort}/toxics`, {
        method: "POST",
        body: JSON.stringify({ direction: "both", kind: "latency", latency_ms: 30 }),
      });
      assert.equal(res.status, 200);
      const c = await connectClient(listenPort);
      const t0 = performance.now();
      c.socket.write("via command");
      const t1 = await c.whenBytes(11);
      assert.ok(t1 - t0 >= 60, `round trip ${t1 - t0} ms`);
      c.socket.destroy();
    } finally {
      const log = console.log;
      console.log = () => {};
      stop.abort();
      await done?.catch(() => {});
      console.log = log;
      await echo.close();
    }
  });
});
