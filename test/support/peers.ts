// Test peers for the proxy and nemesis tests: a plain TCP echo server (the proxy's target), a
// client that records what it receives, and a condition wait with a deadline. These are peers
// on real sockets, not mocks of Narad; only tests import this module.

import net from "node:net";
import { createHash } from "node:crypto";

/** Polls `cond` until it returns a truthy value; throws naming `what` when the deadline passes. */
export async function waitUntil<T>(cond: () => T | Promise<T>, what: string, timeoutMs = 10_000): Promise<NonNullable<T>> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v as NonNullable<T>;
    if (performance.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

export function sha256(b: Buffer): string {
  return createHash("sha256").update(b).digest("hex");
}

export interface EchoServer {
  port: number;
  /** Connections the echo server has accepted so far. */
  accepted(): number;
  /** Error codes its connections saw (ECONNRESET when the proxy reset toward the node). */
  errors(): string[];
  close(): Promise<void>;
}

/** A TCP server that writes back every byte it reads, and ends when its peer ends. */
export function startEchoServer(): Promise<EchoServer> {
  const sockets = new Set<net.Socket>();
  let accepted = 0;
  const errors: string[] = [];
  const server = net.createServer((s) => {
    accepted++;
    sockets.add(s);
    s.on("error", (e: NodeJS.ErrnoException) => errors.push(e.code ?? e.message));
    s.on("close", () => sockets.delete(s));
    s.pipe(s);
  });
  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        accepted: () => accepted,
        errors: () => [...errors],
        close: () =>
          new Promise<void>((r) => {
            for (const s of sockets) s.destroy();
            server.close(() => r());
          }),
      });
    });
  });
}

/** A connected client socket and everything that happened to it. */
export interface RecordingClient {
  socket: net.Socket;
  chunks: Buffer[];
  bytes(): number;
  data(): Buffer;
  /** The first error's code, if any. */
  errorCode: string | null;
  closed: boolean;
  ended: boolean;
  /** performance.now() when the byte count first reached n (see `whenBytes`). */
  whenBytes(n: number, timeoutMs?: number): Promise<number>;
}

export function connectClient(port: number, host = "127.0.0.1"): Promise<RecordingClient> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const c: RecordingClient = {
      socket,
      chunks: [],
      bytes: () => c.chunks.reduce((n, b) => n + b.length, 0),
      data: () => Buffer.concat(c.chunks),
      errorCode: null,
      closed: false,
      ended: false,
      whenBytes: async (n, timeoutMs = 20_000) => {
        await waitUntil(() => c.bytes() >= n, `${n} bytes at the client (have ${c.bytes()})`, timeoutMs);
        return performance.now();
      },
    };
    socket.setNoDelay(true);
    socket.on("data", (b: Buffer) => c.chunks.push(b));
    socket.on("end", () => (c.ended = true));
    socket.on("close", () => (c.closed = true));
    socket.on("error", (e: NodeJS.ErrnoException) => {
      c.errorCode ??= e.code ?? e.message;
    });
    // A proxy may reset a connection as soon as it accepts it, before our connect completes:
    // that is an outcome to record, not a failure to connect.
    socket.once("connect", () => resolve(c));
    socket.once("close", () => resolve(c));
  });
}

/** A port that was free a moment ago (bound to 0 and released). */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, host, () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}
