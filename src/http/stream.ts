// The streaming protocol's server side (byte layout: src/protocol/stream.ts; the contract:
// docs/api.md, "Streaming protocol"). A client asks `GET /v1/stream` with `Upgrade:
// narad-stream` on the HTTP port, authenticated once with the HTTP credentials (Basic; none with
// security off); the 101 names its first byte credit. Then PRODUCE frames come in, pipelined,
// each with the client's id, and each gets one answer frame: PRODUCED (partition, offset) or
// ERROR (status, code, definite: the error table's row, src/protocol/errors.ts, never derived
// here).
//
// The produce path is the HTTP one's service (src/broker/service.ts): frames read together for a
// topic become one Service.produce call, so on a single node they share an append and an fsync,
// and in a cluster a partition owned elsewhere is forwarded exactly as an HTTP produce is (the
// cluster service's produce: its routing, coalescing and per-message results). Each frame is
// checked on its own first (version, type, layout, topic name, grant, size, credit), so one bad
// frame never fails its neighbours; a batch that fails fails each of its frames with the same
// error, and a cluster batch stored in part answers each frame by its own result.
//
// Answers of one commit leave in one socket write: answers are queued and written on the next
// tick, after every continuation of the fsync that resolved them ran (process.nextTick runs once
// the microtask queue is empty), with one CREDIT frame before them giving back the bytes their
// frames took.
//
// Limits and their answers (docs/api.md):
//   - credit: a connection may have `creditBytes` of frames read and not yet answered (an
//     eighth of limits.pending_sync_bytes, at least one largest frame). A frame past it is not
//     read as a message: ERROR 429 credit_exceeded (definite). The SDK never sends past it.
//   - frames in flight: past `framesInFlightMax` unanswered frames the server stops reading the
//     socket until answers go out (TCP pushes back on the client); nothing is refused.
//   - frame size: a length field over the largest produce frame (the HTTP API's 1 MiB payload and
//     4 KiB key) answers its id 413 payload_too_large, then the connection ends as an HTTP 413
//     does: no further frame is read, earlier ones are answered, GOAWAY, close.
//   - a frame that cannot be cut (a length field under the header) is a GOAWAY bad_request and a
//     close; a frame that can be cut but not read (unknown version or type, a topic or key
//     running past its end, attrs bits unknown) is answered ERROR 400 by its id, and reading goes on.
//   - the client does not read its answers: past SOCKET_WRITE_BYTES_MAX unwritten, reading stops
//     until the socket drains.
//   - connections: past `connectionsMax` open (and handshaking) at once, a handshake answers 429
//     too_many_streams with Retry-After, before its credentials are checked.
//   - idle: a connection with nothing in flight and no frame read for `idleTimeoutMs` gets GOAWAY
//     stream_idle and is closed. The GOAWAY rule makes it safe against a frame crossing it: a
//     frame the node did not read before the GOAWAY was never read, and the SDK sends it again on
//     a new connection.
//
// Grants: checked per frame against the principal of the handshake (cached per topic); before
// each batch of frames the user's generation (src/auth/user-store-api.ts: it changes with the
// password, the grants, a delete; in a cluster it is the control plane's row version, re-read by
// every node before a change is answered) is compared with the handshake's; when it moved,
// reading waits while the kept credentials are checked again, and a user deleted or whose
// password changed gets GOAWAY 401 unauthorized after the frames already read are answered.
//
// Draining (SIGTERM): reading stops, every frame read is answered, GOAWAY shutting_down, close.
// A frame the client sent that got no answer before a GOAWAY was never read: definite, resend
// it elsewhere. Without a GOAWAY (a cut connection) an unanswered frame is ambiguous.

import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import type { Socket } from "node:net";
import type { Logger } from "pino";
import { Counter, Gauge } from "prom-client";
import type { Authenticator } from "../auth/authenticator.js";
import { allows, type Principal } from "../auth/model.js";
import type { UserStoreApi } from "../auth/user-store-api.js";
import type { ProduceItem } from "../broker/broker.js";
import type { Produced, RequestContext, Service } from "../broker/service.js";
import { ERRORS, isErrorCode, NaradError } from "../protocol/errors.js";
import { LIMITS } from "../protocol/wire.js";
import {
  CREDIT_FRAME_BYTES,
  decodeProduce,
  encodeError,
  FRAME,
  FrameError,
  FrameReader,
  frameId,
  frameType,
  frameVersion,
  OversizeFrame,
  producedBytes,
  produceFrameBytesMax,
  STREAM_HEADERS,
  STREAM_PATH,
  STREAM_PROTOCOL,
  STREAM_VERSION,
  writeCredit,
  writeProduced,
  type StreamErrorFields,
} from "../protocol/stream.js";
import { topicParam } from "./params.js";
import { inFlight as processInFlight } from "../platform/in-flight.js";

export const STREAM_LIMITS = {
  /** A connection's credit is limits.pending_sync_bytes divided by this. */
  creditShare: 8,
  /** Unanswered frames per connection before the server stops reading it. */
  framesInFlightMax: 4096,
  /** limits.stream_connections unless set: an operator's bound on descriptors held by streams. */
  connectionsDefault: 1024,
  /** stream.idle_timeout_ms unless set. */
  idleTimeoutDefaultMs: 300_000,
  /** Frames of one topic given to the Service as one produce call, at most. */
  batchFramesMax: 1000,
  /** Payload bytes of one such call, at most (a forwarded batch stays well under the batch limit). */
  batchBytesMax: 4 * 1024 * 1024,
  /** Answer bytes the socket may hold unwritten before reading stops. */
  socketWriteBytesMax: 4 * 1024 * 1024,
  /** Topics whose name and grant checks a connection remembers (past it, they start over). */
  topicChecksMax: 1024,
} as const;

/** After a GOAWAY, how long the server reads and drops what the client still sends before it closes. */
const GOAWAY_LINGER_MS = 2000;

export const STREAM_FRAME_BYTES_MAX = produceFrameBytesMax(LIMITS.messageBytesMax, LIMITS.keyBytesMax);

/** The credit a connection gets: a share of the bytes the node lets wait for fsync, never less than one largest frame. */
export function streamCreditBytes(pendingSyncBytesMax: number): number {
  return Math.max(STREAM_FRAME_BYTES_MAX, Math.floor(pendingSyncBytesMax / STREAM_LIMITS.creditShare));
}

export interface StreamOptions {
  svc: Service;
  users: UserStoreApi;
  authenticator?: Authenticator;
  nodeId: string;
  bootId: string;
  logger: Logger;
  creditBytes: number;
  framesInFlightMax?: number;
  /** Connections open or handshaking at once (limits.stream_connections); default 1024. */
  connectionsMax?: number;
  /** stream.idle_timeout_ms; default 300 000. */
  idleTimeoutMs?: number;
  /** The clock idleness is measured on (ms); default performance.now. */
  nowMs?: () => number;
}

export interface StreamServer {
  /** The HTTP server's 'upgrade' listener. */
  onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Stop reading every connection, answer what was read, GOAWAY, close; resolves when all closed (or after graceMs, destroying the rest). */
  drain(graceMs: number): Promise<void>;
  /** Connections open now. */
  readonly connections: number;
}

function fields(e: NaradError): StreamErrorFields {
  const f: StreamErrorFields = { status: e.status, code: e.code, definite: e.definite, message: e.message };
  if (e.retryAfterS !== undefined) f.retryAfterS = e.retryAfterS;
  return f;
}

export function createStreamServer(o: StreamOptions): StreamServer {
  const log = o.logger.child({ module: "stream" });
  const sessions = new Set<Session>();
  let stopping = false;
  let handshaking = 0;
  const framesInFlightMax = o.framesInFlightMax ?? STREAM_LIMITS.framesInFlightMax;
  const connectionsMax = o.connectionsMax ?? STREAM_LIMITS.connectionsDefault;
  const idleTimeoutMs = o.idleTimeoutMs ?? STREAM_LIMITS.idleTimeoutDefaultMs;
  const now = o.nowMs ?? (() => performance.now());
  // One sweep for every connection, running only while there are any: a timer per connection
  // re-armed per frame would cost more than the frames.
  let sweep: ReturnType<typeof setInterval> | null = null;
  const sweepEveryMs = Math.max(100, Math.min(5000, Math.floor(idleTimeoutMs / 4)));
  const sweepIdle = (): void => {
    const t = now();
    for (const s of sessions) if (s.idleSince(t) >= idleTimeoutMs) void s.goAway(new NaradError("stream_idle", `The stream connection carried no frame for ${idleTimeoutMs} ms (stream.idle_timeout_ms) and had nothing in flight; connect again.`));
  };
  const closed = (s: Session): void => {
    if (sessions.delete(s)) processInFlight.streamClosed();
    if (sessions.size === 0 && sweep !== null) {
      clearInterval(sweep);
      sweep = null;
    }
  };
  new Gauge({ name: "narad_stream_connections", help: "Open streaming-protocol connections", registers: [o.svc.metrics.registry], collect() { this.set(sessions.size); } });
  const frames = new Counter({ name: "narad_stream_frames_total", help: "Frames answered on streaming-protocol connections, by answer (ok, error)", labelNames: ["answer"], registers: [o.svc.metrics.registry] });
  const answered = { ok: frames.labels("ok"), error: frames.labels("error") };

  const refuse = (socket: Duplex, e: NaradError, reason: string): void => {
    o.svc.metrics.refusals.inc({ status: String(e.status), code: e.code });
    const body = JSON.stringify(e.toBody());
    const extra = (e.retryAfterS !== undefined ? `Retry-After: ${e.retryAfterS}\r\n` : "") + (e.status === 401 ? `WWW-Authenticate: Basic realm="narad"\r\n` : "");
    socket.end(
      `HTTP/1.1 ${e.status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n${extra}Narad-Node: ${o.nodeId}\r\nNarad-Boot: ${o.bootId}\r\n\r\n${body}`,
    );
  };

  return {
    get connections() {
      return sessions.size;
    },
    onUpgrade(req, socket, head) {
      socket.on("error", () => socket.destroy());
      const path = req.url!.split("?")[0]!;
      const wanted = String(req.headers.upgrade ?? "").toLowerCase();
      if (stopping) return refuse(socket, new NaradError("shutting_down"), "Service Unavailable");
      if (path !== STREAM_PATH) {
        return refuse(socket, new NaradError("bad_request", `This node upgrades only ${STREAM_PATH} (to ${STREAM_PROTOCOL}); send ${req.method} ${path.slice(0, 200)} without an Upgrade header.`), "Bad Request");
      }
      if (wanted !== STREAM_PROTOCOL) return refuse(socket, new NaradError("bad_request", `${STREAM_PATH} upgrades to ${STREAM_PROTOCOL} only, not ${JSON.stringify(wanted.slice(0, 64))}.`), "Bad Request");
      if (req.method !== "GET") return refuse(socket, new NaradError("method_not_allowed", `${STREAM_PATH} is asked with GET.`), "Method Not Allowed");
      if (sessions.size + handshaking >= connectionsMax) {
        return refuse(socket, new NaradError("too_many_streams", `This node has ${connectionsMax} stream connections open (limits.stream_connections); retry later, or produce over HTTP.`, { retryAfterS: 1 }), "Too Many Requests");
      }
      handshaking++;
      const authorization = req.headers.authorization;
      const auth = o.authenticator === undefined ? Promise.resolve(null) : o.authenticator.authenticate(authorization, req.socket.remoteAddress);
      auth.finally(() => handshaking--).then(
        (principal) => {
          if (stopping) return refuse(socket, new NaradError("shutting_down"), "Service Unavailable");
          if (socket.destroyed) return;
          const s = new Session(socket as Socket, principal, authorization, o, log, framesInFlightMax, answered, now, () => closed(s));
          sessions.add(s);
          processInFlight.streamOpened();
          if (sweep === null) {
            sweep = setInterval(sweepIdle, sweepEveryMs);
            sweep.unref();
          }
          socket.write(
            `HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${STREAM_PROTOCOL}\r\nConnection: Upgrade\r\n` +
              `Narad-Node: ${o.nodeId}\r\nNarad-Boot: ${o.bootId}\r\n` +
              `${STREAM_HEADERS.version}: ${STREAM_VERSION}\r\n${STREAM_HEADERS.credit}: ${o.creditBytes}\r\n` +
              `${STREAM_HEADERS.frameBytesMax}: ${STREAM_FRAME_BYTES_MAX}\r\n${STREAM_HEADERS.framesInFlightMax}: ${framesInFlightMax}\r\n\r\n`,
          );
          s.start(head);
        },
        (e: unknown) => {
          const err = e instanceof NaradError ? e : new NaradError("internal");
          if (!(e instanceof NaradError)) log.error({ err: e instanceof Error ? e.stack : String(e) }, "stream handshake failed");
          refuse(socket, err, err.status === 401 ? "Unauthorized" : err.status === 429 ? "Too Many Requests" : "Error");
        },
      );
    },
    drain(graceMs) {
      stopping = true;
      if (sessions.size === 0) return Promise.resolve();
      const all = [...sessions].map((s) => s.goAway(new NaradError("shutting_down")));
      return new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          for (const s of sessions) s.destroy();
          resolve();
        }, graceMs);
        void Promise.all(all).then(() => {
          clearTimeout(t);
          resolve();
        });
      });
    },
  };
}

/** One queued answer: a PRODUCED (result) or an encoded ERROR frame. */
interface Answer {
  id: number;
  cost: number;
  result?: Produced;
  error?: Buffer;
}

interface Batch {
  topic: string;
  ids: number[];
  costs: number[];
  items: ProduceItem[];
  bytes: number;
}

class Session {
  private readonly reader = new FrameReader(STREAM_FRAME_BYTES_MAX);
  private creditUsed = 0;
  private inFlight = 0;
  private answers: Answer[] = [];
  private flushQueued = false;
  /** Set once no more frames are read (GOAWAY pending or sent). */
  private closing: NaradError | null = null;
  private goneAway = false;
  private authChecking = false;
  private generation: number | undefined;
  /** Per topic named on this connection: why a produce to it is refused (a bad name, no grant), or null. */
  private readonly topicChecks = new Map<string, NaradError | null>();
  private readonly batches = new Map<string, Batch>();
  private readonly ctx: RequestContext;
  private closed!: Promise<void>;
  /** When the last frame was read or answer written (the idle sweep's measure). */
  private lastActiveMs: number;

  constructor(
    private readonly socket: Socket,
    private principal: Principal | null,
    private readonly authorization: string | undefined,
    private readonly o: StreamOptions,
    private readonly log: Logger,
    private readonly framesInFlightMax: number,
    private readonly answered: { ok: { inc(n?: number): void }; error: { inc(n?: number): void } },
    private readonly now: () => number,
    onClose: () => void,
  ) {
    this.lastActiveMs = now();
    this.generation = principal === null ? undefined : o.users.generation(principal.name);
    this.ctx = { authorization, user: principal === null ? null : { name: principal.name, id: principal.id } };
    this.closed = new Promise<void>((resolve) =>
      socket.once("close", () => {
        onClose();
        resolve();
      }),
    );
  }

  start(head: Buffer): void {
    this.socket.setNoDelay(true);
    this.socket.on("data", (chunk: Buffer) => {
      if (this.goneAway) return; // read and dropped: see maybeFinish
      this.reader.push(chunk);
      this.pump();
    });
    this.socket.on("drain", () => this.pump());
    // A client that shuts its side still gets the answers of what it sent, then the close.
    this.socket.on("end", () => {
      if (this.closing === null) this.closing = new NaradError("bad_request", "The client ended the connection.");
      this.maybeFinish();
    });
    if (head.length > 0) {
      this.reader.push(head);
      this.pump();
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** How long the connection has had nothing in flight and read nothing (0 while busy or closing). */
  idleSince(t: number): number {
    if (this.closing !== null || this.inFlight > 0 || this.answers.length > 0 || this.batches.size > 0) return 0;
    return t - this.lastActiveMs;
  }

  /** Stops reading; answers what was read; GOAWAY `reason`; closes. Resolves once closed. */
  goAway(reason: NaradError): Promise<void> {
    if (this.closing === null) this.closing = reason;
    this.socket.pause();
    this.maybeFinish();
    return this.closed;
  }

  /** Reads every whole frame the reader holds, unless reading is held back. */
  private pump(): void {
    if (this.closing !== null || this.authChecking || this.socket.destroyed) return;
    if (this.principal !== null && this.o.users.generation(this.principal.name) !== this.generation) return this.recheck();
    while (this.inFlight < this.framesInFlightMax) {
      let f: Buffer | null;
      try {
        f = this.reader.next();
      } catch (e) {
        this.submitBatches();
        if (e instanceof OversizeFrame) {
          this.inFlight++;
          this.answerError(e.id, 0, new NaradError("payload_too_large", `Frame ${e.id} is ${e.bytes} bytes; the largest frame is ${STREAM_FRAME_BYTES_MAX} (a 1 MiB payload, a 4 KiB key). The connection ends, as an HTTP 413 does.`));
          void this.goAway(new NaradError("payload_too_large", "A frame was over the size limit; no further frame is read."));
        } else {
          void this.goAway(new NaradError("bad_request", `Malformed stream: ${(e as Error).message}; no further frame is read.`));
        }
        return;
      }
      if (f === null) break;
      this.read(f);
    }
    this.submitBatches();
    const heldBack = this.inFlight >= this.framesInFlightMax || this.socket.writableLength > STREAM_LIMITS.socketWriteBytesMax;
    if (heldBack) this.socket.pause();
    else this.socket.resume();
  }

  /** The user changed (grants, password, deleted): check the kept credentials again before reading on. */
  private recheck(): void {
    this.submitBatches();
    this.authChecking = true;
    this.socket.pause();
    this.o.authenticator!.authenticate(this.authorization, this.socket.remoteAddress).then(
      (p) => {
        this.authChecking = false;
        this.principal = p;
        this.generation = this.o.users.generation(p.name);
        this.topicChecks.clear();
        this.pump();
      },
      (e: unknown) => {
        this.authChecking = false;
        void this.goAway(e instanceof NaradError && e.code === "unauthorized" ? new NaradError("unauthorized", "The user's password changed or the user was deleted; connect again with valid credentials.") : e instanceof NaradError ? e : new NaradError("internal"));
      },
    );
  }

  /** One whole frame: checked on its own, then added to its topic's batch. */
  private read(f: Buffer): void {
    const id = frameId(f);
    const cost = f.length;
    this.inFlight++;
    this.lastActiveMs = this.now();
    if (frameVersion(f) !== STREAM_VERSION) return this.answerError(id, 0, new NaradError("bad_request", `Frame version ${frameVersion(f)} is not served; this node speaks version ${STREAM_VERSION}.`));
    if (frameType(f) !== FRAME.produce) return this.answerError(id, 0, new NaradError("bad_request", `Frame type 0x${frameType(f).toString(16)} is not served by this node (docs/api.md, "Streaming protocol").`));
    if (this.creditUsed + cost > this.o.creditBytes) {
      return this.answerError(id, 0, new NaradError("credit_exceeded", `Frame ${id} (${cost} bytes) is past the connection's credit (${this.o.creditBytes - this.creditUsed} of ${this.o.creditBytes} bytes left); it was not read as a message.`));
    }
    this.creditUsed += cost;
    let topic: string;
    let item: ProduceItem;
    try {
      const p = decodeProduce(f, LIMITS.keyBytesMax);
      topic = p.topic;
      let refusal = this.topicChecks.get(topic);
      if (refusal === undefined) {
        refusal = this.checkTopic(topic);
        if (this.topicChecks.size >= STREAM_LIMITS.topicChecksMax) this.topicChecks.clear();
        this.topicChecks.set(topic, refusal);
      }
      if (refusal !== null) throw refusal;
      if (p.producer !== undefined) throw new NaradError("invalid_argument", "The producer field of a produce frame is reserved for idempotent producers, which this node does not serve on the stream yet.");
      if (p.payload.length > LIMITS.messageBytesMax) throw new NaradError("payload_too_large");
      item = { key: p.key, payload: p.payload };
    } catch (e) {
      return this.answerError(id, cost, e instanceof NaradError ? e : new NaradError("bad_request", `Frame ${id}: ${e instanceof FrameError ? e.message : String(e)}.`));
    }
    let b = this.batches.get(topic);
    if (b === undefined) {
      b = { topic, ids: [], costs: [], items: [], bytes: 0 };
      this.batches.set(topic, b);
    }
    b.ids.push(id);
    b.costs.push(cost);
    b.items.push(item);
    b.bytes += item.payload.length;
    if (b.ids.length >= STREAM_LIMITS.batchFramesMax || b.bytes >= STREAM_LIMITS.batchBytesMax) {
      this.batches.delete(topic);
      this.submit(b);
    }
  }

  /** A topic name's refusal before anything is stored: not a name (400), or no produce grant on it (403, checked first as over HTTP: 404 only once the user may). */
  private checkTopic(topic: string): NaradError | null {
    try {
      topicParam({ topic });
    } catch (e) {
      return e as NaradError;
    }
    if (this.principal !== null && !allows(this.principal, "produce", topic)) {
      return new NaradError("forbidden", `User ${this.principal.name} may not produce on topic ${topic}; ask an admin for a grant.`);
    }
    return null;
  }

  private submitBatches(): void {
    if (this.batches.size === 0) return;
    for (const b of this.batches.values()) this.submit(b);
    this.batches.clear();
  }

  private submit(b: Batch): void {
    let p: Promise<Produced[]>;
    try {
      p = this.o.svc.produce(b.topic, b.items, this.ctx);
    } catch (e) {
      p = Promise.reject(e);
    }
    p.then(
      (results) => {
        for (let i = 0; i < b.ids.length; i++) this.answer({ id: b.ids[i]!, cost: b.costs[i]!, result: results[i]! });
      },
      (e: unknown) => {
        const err = e instanceof NaradError ? e : this.internal(e);
        for (let i = 0; i < b.ids.length; i++) {
          const r = err.results?.[i];
          if (r === undefined) this.answerError(b.ids[i]!, b.costs[i]!, err);
          else if (r.status === "stored") this.answer({ id: b.ids[i]!, cost: b.costs[i]!, result: { partition: r.partition, offset: r.offset } });
          else if (r.status === "not_stored") this.answerError(b.ids[i]!, b.costs[i]!, isErrorCode(r.code) ? new NaradError(r.code, `${ERRORS[r.code].message} (this message's part of the batch)`) : new NaradError("unavailable"));
          else this.answerError(b.ids[i]!, b.costs[i]!, err);
        }
      },
    );
  }

  private internal(e: unknown): NaradError {
    this.log.error({ err: e instanceof Error ? e.stack : String(e) }, "stream produce failed");
    return new NaradError("internal");
  }

  private answerError(id: number, cost: number, e: NaradError): void {
    this.o.svc.metrics.refusals.inc({ status: String(e.status), code: e.code });
    this.answer({ id, cost, error: encodeError(FRAME.error, id, fields(e)) });
  }

  private answer(a: Answer): void {
    this.answers.push(a);
    if (!this.flushQueued) {
      this.flushQueued = true;
      process.nextTick(() => this.flush());
    }
  }

  /** Writes every queued answer, after one CREDIT frame giving back their frames' bytes, in one socket write. */
  private flush(): void {
    this.flushQueued = false;
    const as = this.answers;
    this.answers = [];
    let credit = 0;
    let bytes = CREDIT_FRAME_BYTES;
    for (const a of as) {
      credit += a.cost;
      bytes += a.error !== undefined ? a.error.length : producedBytes(this.ownerOf(a.result!));
    }
    this.inFlight -= as.length;
    this.creditUsed -= credit;
    this.lastActiveMs = this.now();
    let errors = 0;
    for (const a of as) if (a.error !== undefined) errors++;
    if (errors > 0) this.answered.error.inc(errors);
    if (as.length > errors) this.answered.ok.inc(as.length - errors);
    if (!this.socket.destroyed && this.socket.writable) {
      const out = Buffer.allocUnsafe(bytes);
      let at = credit > 0 ? writeCredit(out, 0, credit) : 0;
      for (const a of as) {
        if (a.error !== undefined) at += a.error.copy(out, at);
        else at = writeProduced(out, at, a.id, a.result!.partition, a.result!.offset, this.ownerOf(a.result!));
      }
      this.socket.write(out.subarray(0, at));
    }
    if (this.closing !== null) this.maybeFinish();
    else this.pump();
  }

  /** The owner field of an answer: only a produce stored by another node names it. */
  private ownerOf(r: Produced): { node: string; boot: string } | undefined {
    return r.owner === undefined || r.owner === this.o.nodeId ? undefined : { node: r.owner, boot: r.ownerBoot ?? "" };
  }

  /** Once reading stopped and every frame read is answered: GOAWAY, then close. */
  private maybeFinish(): void {
    if (this.closing === null || this.goneAway) return;
    this.submitBatches();
    if (this.inFlight > 0 || this.answers.length > 0) return; // flush() calls again
    this.goneAway = true;
    if (this.socket.destroyed || !this.socket.writable) {
      this.socket.destroy();
      return;
    }
    // Closing a socket whose kernel buffer still holds unread bytes (frames the client sent
    // after the last one read) sends a reset, and a reset can make the client's kernel drop the
    // answers and the GOAWAY it had not read yet. So the rest is read and dropped until the
    // client closes its side, GOAWAY_LINGER_MS at most.
    this.socket.end(encodeError(FRAME.goaway, 0, fields(this.closing)));
    this.socket.resume();
    setTimeout(() => this.socket.destroy(), GOAWAY_LINGER_MS).unref();
  }
}
