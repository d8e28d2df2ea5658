// The SDK's stream transport against a peer that follows the byte layout but chooses exactly when
// to say GOAWAY: the race a real node makes only by chance (a frame crossing an idle close).
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { once } from "node:events";
import { decodeProduce, encodeError, FRAME, FrameReader, frameId, producedBytes, STREAM_HEADERS, writeProduced } from "../protocol/stream.js";
import { StreamTransport } from "./stream-transport.js";
import { NaradRequestError } from "./errors.js";

/** Serves the handshake; then `onFrame` for each whole frame of each connection, by connection number. */
function peer(onFrame: (conn: number, socket: Socket, frame: Buffer) => void) {
  let conns = 0;
  const server = createServer((socket) => {
    const conn = ++conns;
    let head = Buffer.alloc(0);
    let reader: FrameReader | null = null;
    socket.on("error", () => undefined);
    socket.on("data", (b: Buffer) => {
      if (reader === null) {
        head = Buffer.concat([head, b]);
        const end = head.indexOf("\r\n\r\n");
        if (end < 0) return;
        socket.write(
          `HTTP/1.1 101 Switching Protocols\r\nUpgrade: narad-stream\r\nConnection: Upgrade\r\nNarad-Node: n1\r\nNarad-Boot: b1\r\n` +
            `${STREAM_HEADERS.version}: 1\r\n${STREAM_HEADERS.credit}: 1048576\r\n${STREAM_HEADERS.frameBytesMax}: 1100000\r\n${STREAM_HEADERS.framesInFlightMax}: 16\r\n\r\n`,
        );
        reader = new FrameReader(2 * 1024 * 1024);
        b = head.subarray(end + 4);
      }
      reader.push(b);
      for (let f = reader.next(); f !== null; f = reader.next()) onFrame(conn, socket, f);
    });
  });
  return server;
}

test("a frame that crossed a GOAWAY stream_idle is sent again on a new connection, not failed; a GOAWAY shutting_down fails it definite", async () => {
  const seen: { conn: number; payload: string }[] = [];
  const server = peer((conn, socket, f) => {
    const p = decodeProduce(f, 4096);
    seen.push({ conn, payload: Buffer.from(p.payload).toString() });
    if (conn === 1) {
      // Not read, as far as the protocol goes: GOAWAY, no answer, close.
      socket.end(encodeError(FRAME.goaway, 0, { status: 408, code: "stream_idle", definite: true, message: "idle" }));
    } else if (conn === 2) {
      const out = Buffer.alloc(producedBytes());
      writeProduced(out, 0, frameId(f), 0, 42);
      socket.write(out);
      socket.end(encodeError(FRAME.goaway, 0, { status: 503, code: "shutting_down", definite: true, message: "stopping" }));
    } else {
      socket.end(encodeError(FRAME.goaway, 0, { status: 503, code: "shutting_down", definite: true, message: "stopping" }));
    }
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const port = (server.address() as { port: number }).port;
  const t = new StreamTransport({ url: new URL(`http://127.0.0.1:${port}`), authorization: undefined, requestTimeoutMs: 10_000, connectTimeoutMs: 5_000 });
  const http = () => Promise.reject(new Error("no HTTP fallback expected: the peer offers the stream"));
  try {
    const r = await t.produce("t", "crossing", null, http);
    assert.deepEqual({ partition: r.partition, offset: r.offset }, { partition: 0, offset: 42 });
    assert.deepEqual(seen, [
      { conn: 1, payload: "crossing" },
      { conn: 2, payload: "crossing" },
    ]);
    // Connection 3 says shutting_down without reading: the call fails, definite, naming it.
    await assert.rejects(t.produce("t", "stopping", null, http), (e: unknown) => e instanceof NaradRequestError && e.code === "shutting_down" && e.definite);
  } finally {
    t.destroy();
    server.close();
  }
});
