// The SDK's streaming transport (`transport: "stream"`): produce() over one long-lived
// connection upgraded from the node's HTTP port (docs/api.md, "Streaming protocol"; byte layout
// in src/protocol/stream.ts). Frames are pipelined: calls made in the same tick leave together
// (in writes of WRITE_CHUNK_BYTES or so), each with its own id, and each resolves or rejects with
// its own answer frame.
//
// Design notes
// - Credit: the node names the connection's byte credit at the handshake and gives bytes back in
//   CREDIT frames; a frame is written only while it fits, and the in-flight frame bound the node
//   named is kept too, so the node never has to refuse a frame for credit. Calls beyond wait here
//   in order (bounded by what the caller awaits, as HTTP requests queued in undici's pool are).
// - What each failure means (src/client/errors.ts): an ERROR frame is the error table's row
//   (definite → NaradRequestError, indefinite → NaradAmbiguousError). A GOAWAY says every frame
//   the node read was answered before it, so a frame still unanswered was never read: definite,
//   the GOAWAY's code (shutting_down when the node stops). A connection cut without a GOAWAY
//   leaves its unanswered frames ambiguous (network_error), like an HTTP request whose answer was
//   lost. A call not yet written when a connection ends goes on the next one, and so do the
//   unanswered calls of a GOAWAY stream_idle (the node closed an idle connection while a frame
//   crossed it: never read, so sent again, not failed).
// - The node does not offer the stream (an older node, a proxy that does not pass Upgrade: the
//   handshake answers an error or no 101): the transport says so once and the SDK goes on over
//   HTTP. Wrong credentials at the handshake reject the waiting calls with the 401 (definite).
// - The SDK checks a message before it sends it (topic name, key and payload sizes) so one bad
//   message never costs a connection.

import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import type { Socket } from "node:net";
import { ERRORS } from "../protocol/errors.js";
import {
  decodeError,
  decodeProduced,
  FRAME,
  FrameReader,
  PRODUCED_FRAME_BYTES,
  PRODUCED_OWNER,
  produceFrameBytes,
  STREAM_HEADERS,
  STREAM_PATH,
  STREAM_PROTOCOL,
  STREAM_TOPIC_BYTES_MAX,
  writeProduce,
  type StreamErrorFields,
} from "../protocol/stream.js";
import { LIMITS, TOPIC_NAME_RE } from "../protocol/wire.js";
import { NaradAmbiguousError, NaradConnectionError, NaradRequestError, errorFromResponse, errorFromTransport, type NaradClientError } from "./errors.js";
import type { Produced } from "./types.js";

interface Call {
  topic: string;
  topicBytes: number;
  key: string | null;
  keyBytes: number;
  payload: Uint8Array;
  /** The frame's size, length field included: it is encoded only when written. */
  bytes: number;
  id: number;
  sentAtMs: number;
  resolve: (p: Produced) => void;
  reject: (e: NaradClientError) => void;
  fallback: () => Promise<Produced>;
}

export interface StreamTransportOptions {
  /** The node's URL (its path prefix kept). */
  url: URL;
  authorization: string | undefined;
  requestTimeoutMs: number;
  connectTimeoutMs: number;
}

/**
 * Queued frame bytes that are written at once rather than at the end of the turn. Without it,
 * at 1 024 in flight the node and the SDK took turns: a commit's answers resumed every caller,
 * whose frames left in one write at the turn's end, which the node then read whole while the
 * SDK waited (83–88k msgs/s on this machine); in 32 KiB chunks the two overlap (105–132k).
 * Measured beside 16 and 128 KiB (docs/operations.md).
 */
const WRITE_CHUNK_BYTES = 32 * 1024;

/** How often the oldest unanswered frame is checked against requestTimeoutMs. */
const TIMEOUT_CHECK_MS = 250;

function streamError(e: StreamErrorFields): NaradClientError {
  return e.definite ? new NaradRequestError(e.status, e.code, e.message, true, e.retryAfterS) : new NaradAmbiguousError(e.code, e.message, e.status);
}

function refused(code: keyof typeof ERRORS, message: string): NaradRequestError {
  return new NaradRequestError(ERRORS[code].status, code, message, ERRORS[code].definite);
}

export class StreamTransport {
  /** null: not known yet; false: the node does not offer the stream (HTTP is used). */
  #offered: boolean | null = null;
  #socket: Socket | null = null;
  #connecting = false;
  #closed = false;
  #credit = 0;
  #framesInFlightMax = 1;
  #nextId = 1;
  /** Calls not written yet, in order, and their frames' bytes. */
  #queue: Call[] = [];
  #queuedBytes = 0;
  /** The last topic name that passed the check, and its UTF-8 length: most callers use one topic. */
  #checkedTopic = "";
  #checkedTopicBytes = 0;
  readonly #inFlight = new Map<number, Call>();
  #writeQueued = false;
  #reader: FrameReader | null = null;
  #timer: ReturnType<typeof setInterval> | null = null;
  #closeWaiters: (() => void)[] = [];
  /** Set when the connection is ended because an answer is late: its calls fail request_timeout. */
  #timedOut = false;
  /** Set from a GOAWAY until the connection closes: nothing more is written on it. */
  #goingAway = false;

  constructor(private readonly o: StreamTransportOptions) {}

  /** Produces one message over the stream, or over `fallback` (HTTP) when the node does not offer it. */
  produce(topic: string, payload: Uint8Array | string, key: string | null, fallback: () => Promise<Produced>): Promise<Produced> {
    if (this.#offered === false) return fallback();
    if (this.#closed) return Promise.reject(new NaradConnectionError("produce: the client is closed; nothing was sent"));
    let topicBytes: number;
    if (topic === this.#checkedTopic) topicBytes = this.#checkedTopicBytes;
    else {
      topicBytes = Buffer.byteLength(topic);
      if (topicBytes > STREAM_TOPIC_BYTES_MAX || !TOPIC_NAME_RE.test(topic)) return Promise.reject(refused("invalid_topic_name", `${JSON.stringify(topic.slice(0, 64))} is not a valid topic name.`));
      this.#checkedTopic = topic;
      this.#checkedTopicBytes = topicBytes;
    }
    const keyBytes = key === null ? 0 : Buffer.byteLength(key);
    if (keyBytes > LIMITS.keyBytesMax) return Promise.reject(refused("invalid_argument", `key is over ${LIMITS.keyBytesMax} bytes.`));
    const body = typeof payload === "string" ? Buffer.from(payload) : payload;
    if (body.length > LIMITS.messageBytesMax) return Promise.reject(refused("payload_too_large", ERRORS.payload_too_large.message));
    const id = this.#nextId;
    this.#nextId = this.#nextId >= 0xffffffff ? 1 : this.#nextId + 1;
    const bytes = produceFrameBytes(topicBytes, keyBytes, body.length, false);
    return new Promise<Produced>((resolve, reject) => {
      this.#queue.push({ topic, topicBytes, key, keyBytes, payload: body, bytes, id, sentAtMs: 0, resolve, reject, fallback });
      this.#queuedBytes += bytes;
      // A long run of calls in one turn (the callers an answer resumed) goes out in chunks as it
      // is made, not in one write at its end, so the node works on the first frames while the
      // later calls are still being made here.
      if (this.#socket !== null && this.#queuedBytes >= WRITE_CHUNK_BYTES) this.#write();
      else this.#kick();
    });
  }

  /** Waits for every call to be answered, then closes the connection. */
  close(): Promise<void> {
    this.#closed = true;
    if (this.#queue.length === 0 && this.#inFlight.size === 0) {
      this.#socket?.end();
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.#closeWaiters.push(resolve));
  }

  /** Closes at once: unanswered calls fail ambiguous, unsent ones definite. */
  destroy(): void {
    this.#closed = true;
    this.#socket?.destroy();
    this.#queuedBytes = 0;
    for (const c of this.#queue.splice(0)) c.reject(new NaradConnectionError("produce: the client was destroyed; nothing was sent"));
  }

  #kick(): void {
    if (this.#socket === null) {
      if (!this.#connecting) this.#connect();
      return;
    }
    if (!this.#writeQueued) {
      this.#writeQueued = true;
      process.nextTick(() => this.#write());
    }
  }

  /**
   * Writes every queued frame that fits the credit and the in-flight bound, in one socket write:
   * the frames are encoded straight into the one buffer written.
   */
  #write(): void {
    this.#writeQueued = false;
    const s = this.#socket;
    if (s === null || this.#goingAway) return;
    const q = this.#queue;
    let n = 0;
    let bytes = 0;
    let credit = this.#credit;
    const room = this.#framesInFlightMax - this.#inFlight.size;
    while (n < q.length && n < room && q[n]!.bytes <= credit) {
      credit -= q[n]!.bytes;
      bytes += q[n]!.bytes;
      n++;
    }
    if (n > 0) {
      this.#credit = credit;
      const out = Buffer.allocUnsafe(bytes);
      const now = performance.now();
      let at = 0;
      for (let i = 0; i < n; i++) {
        const c = q[i]!;
        at = writeProduce(out, at, c.id, c.topic, c.topicBytes, c.key, c.keyBytes, c.payload);
        c.sentAtMs = now;
        this.#inFlight.set(c.id, c);
      }
      this.#queue = n === q.length ? [] : q.slice(n);
      this.#queuedBytes -= bytes;
      s.write(out);
    }
    if (this.#inFlight.size > 0 && this.#timer === null) {
      this.#timer = setInterval(() => this.#checkTimeouts(), TIMEOUT_CHECK_MS);
      this.#timer.unref();
    }
  }

  #checkTimeouts(): void {
    const now = performance.now();
    for (const c of this.#inFlight.values()) {
      // Answers come in order of commits, not of ids; the first late one ends the connection
      // (every unanswered frame on it is then ambiguous), so waiting calls are not held longer.
      if (now - c.sentAtMs > this.o.requestTimeoutMs) {
        this.#timedOut = true;
        this.#socket?.destroy();
        return;
      }
    }
  }

  #connect(): void {
    this.#connecting = true;
    const u = this.o.url;
    const headers: Record<string, string> = { connection: "Upgrade", upgrade: STREAM_PROTOCOL };
    if (this.o.authorization !== undefined) headers.authorization = this.o.authorization;
    const tls = u.protocol === "https:";
    const req = (tls ? httpsRequest : httpRequest)({
      host: u.hostname.replace(/^\[|\]$/g, ""),
      port: u.port === "" ? (tls ? 443 : 80) : Number(u.port),
      path: u.pathname.replace(/\/+$/, "") + STREAM_PATH,
      method: "GET",
      headers,
      agent: false,
      timeout: this.o.connectTimeoutMs,
    });
    let settled = false;
    const fail = (e: NaradClientError): void => {
      if (settled) return;
      settled = true;
      this.#connecting = false;
      this.#queuedBytes = 0;
      for (const c of this.#queue.splice(0)) c.reject(e);
      this.#notifyClosed();
    };
    req.on("timeout", () => req.destroy(Object.assign(new Error("connect timeout"), { code: "UND_ERR_CONNECT_TIMEOUT" })));
    req.on("error", (e) => fail(errorFromTransport(e, "produce (stream handshake)", false) instanceof NaradConnectionError ? new NaradConnectionError(`produce: cannot open the stream (${e.message}); nothing was sent`, e) : new NaradConnectionError(`produce: the stream handshake failed (${e.message}); nothing was sent`, e)));
    req.on("response", (res: IncomingMessage) => {
      // No 101: a node that does not offer the stream answers 400/404 (or a proxy answers for
      // it); credentials refused answer 401/403/429, which stand.
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const err = errorFromResponse(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"), res.headers["retry-after"]);
        const status = res.statusCode ?? 0;
        if (status === 400 || status === 404 || status === 405 || status === 426 || status === 501) {
          settled = true;
          this.#connecting = false;
          this.#offered = false;
          this.#queuedBytes = 0;
          for (const c of this.#queue.splice(0)) c.fallback().then(c.resolve, c.reject);
          return;
        }
        fail(err);
      });
      res.on("error", () => fail(new NaradConnectionError("produce: the stream handshake's answer broke off; nothing was sent")));
    });
    req.on("upgrade", (res: IncomingMessage, socket: Socket, head: Buffer) => {
      settled = true;
      this.#connecting = false;
      this.#offered = true;
      this.#credit = Number(res.headers[STREAM_HEADERS.credit] ?? 0);
      this.#framesInFlightMax = Math.max(1, Number(res.headers[STREAM_HEADERS.framesInFlightMax] ?? 1));
      const frameMax = Number(res.headers[STREAM_HEADERS.frameBytesMax] ?? 0) || 2 * LIMITS.messageBytesMax;
      this.#reader = new FrameReader(Math.max(frameMax, 64 * 1024));
      this.#socket = socket;
      socket.setNoDelay(true);
      socket.setTimeout(0);
      let goaway: NaradClientError | null = null;
      const onData = (chunk: Buffer): void => {
        const reader = this.#reader!;
        reader.push(chunk);
        for (;;) {
          let at: number;
          try {
            at = reader.nextAt();
          } catch {
            socket.destroy(new Error("the node sent a frame this client cannot read"));
            return;
          }
          if (at < 0) break;
          // PRODUCED, the answer to nearly every frame, is read in place; the rest are rare.
          const b = reader.bytes;
          const t = b[at + 5]!;
          if (t === FRAME.produced && (b.readUInt16BE(at + 6) & PRODUCED_OWNER) === 0 && b.readUInt32BE(at) + 4 >= PRODUCED_FRAME_BYTES) {
            const c = this.#inFlight.get(b.readUInt32BE(at + 8));
            if (c === undefined) continue;
            this.#inFlight.delete(c.id);
            c.resolve({ partition: b.readUInt32BE(at + 12), offset: b.readUInt32BE(at + 16) * 0x1_0000_0000 + b.readUInt32BE(at + 20), owner: nodeId, ownerBoot: bootId });
            continue;
          }
          const f = b.subarray(at, at + 4 + b.readUInt32BE(at));
          try {
            this.#otherFrame(f, t, nodeId, bootId, socket, (e) => (goaway = e));
          } catch {
            socket.destroy(new Error("the node sent a frame this client cannot read"));
            return;
          }
        }
        if (this.#queue.length > 0) this.#kick();
        else this.#maybeClosed();
      };
      socket.on("data", onData);
      socket.on("error", () => undefined);
      socket.on("close", () => {
        this.#socket = null;
        this.#reader = null;
        if (this.#timer !== null) clearInterval(this.#timer);
        this.#timer = null;
        const lost = this.#timedOut
          ? new NaradAmbiguousError("request_timeout", `produce: no answer on the stream within ${this.o.requestTimeoutMs} ms; the message may or may not be stored`)
          : new NaradAmbiguousError("network_error", "produce: the stream connection closed before the answer came; the message may or may not be stored");
        this.#timedOut = false;
        this.#goingAway = false;
        if (goaway?.code === "stream_idle") {
          // Never read (the GOAWAY rule): back to the front of the queue, in the order sent.
          for (const c of this.#inFlight.values()) this.#queuedBytes += c.bytes;
          this.#queue.unshift(...this.#inFlight.values());
        } else {
          for (const c of this.#inFlight.values()) c.reject(goaway ?? lost);
        }
        this.#inFlight.clear();
        if (this.#queue.length > 0) this.#connect(); // close() waits for every call, queued ones too
        else this.#notifyClosed();
      });
      const nodeId = header(res, "narad-node");
      const bootId = header(res, "narad-boot");
      if (head.length > 0) onData(head);
      this.#kick();
    });
    req.end();
  }

  /** Any answer frame but a plain PRODUCED (read in place by onData). Throws when the frame cannot be read. */
  #otherFrame(f: Buffer, t: number, nodeId: string | null, bootId: string | null, socket: Socket, onGoaway: (e: NaradClientError) => void): void {
    if (t === FRAME.produced) {
      const p = decodeProduced(f);
      const c = this.#inFlight.get(p.id);
      if (c === undefined) return;
      this.#inFlight.delete(p.id);
      c.resolve({ partition: p.partition, offset: p.offset, owner: p.owner ?? nodeId, ownerBoot: p.ownerBoot ?? bootId });
    } else if (t === FRAME.error) {
      const id = f.readUInt32BE(8);
      const c = this.#inFlight.get(id);
      if (c === undefined) return;
      this.#inFlight.delete(id);
      c.reject(streamError(decodeError(f)));
    } else if (t === FRAME.credit) {
      this.#credit += f.readUInt32BE(12);
    } else if (t === FRAME.goaway) {
      const e = decodeError(f);
      onGoaway(new NaradRequestError(e.status, e.code, `${e.message} (the node closed the stream; this message was not read: nothing was stored)`, true, e.retryAfterS));
      this.#goingAway = true;
      socket.end(); // the node reads nothing more; it closes once we did
    }
  }

  #maybeClosed(): void {
    if (this.#closed && this.#queue.length === 0 && this.#inFlight.size === 0) {
      this.#socket?.end();
      this.#notifyClosed();
    }
  }

  #notifyClosed(): void {
    if (!this.#closed || this.#queue.length > 0 || this.#inFlight.size > 0) return;
    for (const w of this.#closeWaiters.splice(0)) w();
  }
}

function header(res: IncomingMessage, name: string): string | null {
  const v = res.headers[name];
  return typeof v === "string" ? v : null;
}
