// Each answer of the data path reaches the socket in one write (issue 17): res.end(body) queued
// the head, the body and an empty chunk on a corked socket and flushed them with one writev of
// three buffers, ~9 µs a request more than one write. The node runs in this process
// (test/support/in-process-node.ts) so the test can count, on each accepted socket, the writes
// node:net hands the kernel: every call of the socket's _write (one chunk) and _writev (several).
// A raw TCP client sends one request at a time on one keep-alive connection and reads each answer
// whole before the next, so every write of an answer has happened when its last byte arrived.

import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startInProcessNode } from "./support/in-process-node.js";

interface Counts {
  write: number;
  writev: number;
}

/** Counts the writes of every socket the server accepts (all of this test's on one connection). */
function countWrites(counts: Counts): (server: import("node:http").Server) => void {
  return (server) =>
    server.on("connection", (socket: Socket) => {
      const s = socket as Socket & { _write: (...a: unknown[]) => void; _writev: (...a: unknown[]) => void };
      const write = s._write.bind(s);
      const writev = s._writev.bind(s);
      s._write = (...a) => {
        counts.write++;
        write(...a);
      };
      s._writev = (...a) => {
        counts.writev++;
        writev(...a);
      };
    });
}

/** One HTTP/1.1 client connection: a request, then its whole answer (Content-Length framed). */
class RawClient {
  private buf = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  private constructor(private readonly socket: Socket) {
    socket.on("data", (b: Buffer) => {
      this.buf = Buffer.concat([this.buf, b]);
      this.wake?.();
    });
  }

  static async open(port: number): Promise<RawClient> {
    const socket = connect(port, "127.0.0.1");
    await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject));
    socket.setNoDelay(true);
    return new RawClient(socket);
  }

  async request(method: string, path: string, body = Buffer.alloc(0), headers: Record<string, string> = {}): Promise<{ status: number; headers: Map<string, string>; body: Buffer }> {
    const lines = [`${method} ${path} HTTP/1.1`, "Host: test", `Content-Length: ${body.length}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
    this.socket.write(Buffer.concat([Buffer.from(`${lines.join("\r\n")}\r\n\r\n`, "latin1"), body]));
    for (;;) {
      const end = this.buf.indexOf("\r\n\r\n");
      if (end >= 0) {
        const [statusLine, ...fields] = this.buf.subarray(0, end).toString("latin1").split("\r\n");
        const hs = new Map(fields.map((f) => [f.slice(0, f.indexOf(":")).toLowerCase(), f.slice(f.indexOf(":") + 1).trim()]));
        assert.equal(hs.get("transfer-encoding"), undefined, "answers are framed by Content-Length");
        const length = Number(hs.get("content-length") ?? 0);
        if (this.buf.length >= end + 4 + length) {
          const answer = { status: Number(statusLine!.split(" ")[1]), headers: hs, body: this.buf.subarray(end + 4, end + 4 + length) };
          this.buf = this.buf.subarray(end + 4 + length);
          return answer;
        }
      }
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

test("every answer of the data path (produce JSON or minimal, consume, ack, errors) was a writev of three chunks: each is now one socket write", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-writes-"));
  const counts: Counts = { write: 0, writev: 0 };
  const node = await startInProcessNode(dir, undefined, countWrites(counts));
  const client = await RawClient.open(Number(new URL(node.url).port));
  try {
    const answers: { what: string; status: number; writes: Counts }[] = [];
    const expect = async (what: string, status: number, send: () => ReturnType<RawClient["request"]>) => {
      const before = { ...counts };
      const r = await send();
      assert.equal(r.status, status, `${what}: ${r.body.toString()}`);
      answers.push({ what, status, writes: { write: counts.write - before.write, writev: counts.writev - before.writev } });
      return r;
    };
    await expect("create", 201, () => client.request("POST", "/v1/topics", Buffer.from(JSON.stringify({ name: "t", partitions: 3 })), { "content-type": "application/json" }));
    const payload = Buffer.alloc(1024, 0xc3); // bytes that are not ASCII come back as they are
    await expect("produce, JSON", 202, () => client.request("POST", "/v1/topics/t/messages", payload));
    await expect("produce, keyed", 202, () => client.request("POST", "/v1/topics/t/messages?key=k%C3%A9", payload));
    const minimal = await expect("produce, Prefer: return=minimal", 202, () => client.request("POST", "/v1/topics/t/messages", payload, { prefer: "return=minimal" }));
    assert.equal(minimal.body.length, 0);
    await expect("produce with a delay (the routed path)", 202, () => client.request("POST", "/v1/topics/t/messages?delay_ms=1", payload));
    await expect("produce to no topic", 404, () => client.request("POST", "/v1/topics/none/messages", payload));
    const quoted = await expect("an error quoting what it was sent (not ASCII)", 400, () => client.request("POST", "/v1/topics/t/consume?wait_ms=%C3%A9"));
    assert.equal(Buffer.byteLength(quoted.body.toString("utf8")), Number(quoted.headers.get("content-length")));
    assert.match((JSON.parse(quoted.body.toString("utf8")) as { error: { message: string } }).error.message, /"é"/);
    const c1 = await expect("consume", 200, () => client.request("POST", "/v1/topics/t/consume"));
    assert.deepEqual(c1.body, payload);
    const c2 = await expect("consume, acking the last", 200, () => client.request("POST", `/v1/topics/t/consume?ack=${c1.headers.get("narad-receipt-handle")}`));
    await expect("consume, acking a settled handle", 410, () => client.request("POST", `/v1/topics/t/consume?ack=${c1.headers.get("narad-receipt-handle")}`));
    await expect("consume, acking a forged handle", 400, () => client.request("POST", "/v1/topics/t/consume?ack=garbage"));
    await expect("ack", 204, () => client.request("POST", `/v1/topics/t/ack?receipt_handle=${c2.headers.get("narad-receipt-handle")}`));
    await expect("ack again", 410, () => client.request("POST", `/v1/topics/t/ack?receipt_handle=${c2.headers.get("narad-receipt-handle")}`));
    // One partition: the first consume reads its record from the log (and reads ahead), the next
    // is served from memory without an await (issue 17); each answer is one write either way.
    await expect("create a topic of one partition", 201, () => client.request("POST", "/v1/topics", Buffer.from(JSON.stringify({ name: "one", partitions: 1 })), { "content-type": "application/json" }));
    for (let i = 0; i < 3; i++) await expect("produce to it", 202, () => client.request("POST", "/v1/topics/one/messages?key=k", payload));
    const fromLog = await expect("consume, the record read from the log", 200, () => client.request("POST", "/v1/topics/one/consume"));
    const fromMemory = await expect("consume acking it, the record in memory", 200, () => client.request("POST", `/v1/topics/one/consume?ack=${fromLog.headers.get("narad-receipt-handle")}`));
    assert.equal(fromMemory.headers.get("narad-offset"), "1");
    assert.deepEqual(fromMemory.body, payload);
    await expect("consume batch, binary", 200, () => client.request("POST", "/v1/topics/t/consume/batch?max_messages=10", undefined, { accept: "application/vnd.narad.deliveries" }));
    await expect("consume, nothing left", 204, () => client.request("POST", "/v1/topics/t/consume"));
    for (const a of answers) assert.deepEqual(a.writes, { write: 1, writev: 0 }, `${a.what} (${a.status})`);
  } finally {
    client.close();
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
