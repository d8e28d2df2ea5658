// HTTP API version 1: the server and its lifecycle (requests counted in flight, a graceful
// drain) around one router, on which each resource registers its routes. Every answer carries
// Narad-Node and Narad-Boot; every error is the JSON body of the error table
// (src/protocol/errors.ts).
//
// Limits and their answers: single-message bodies over 1 MiB → 413 (reading stops at the
// limit); batch bodies over LIMITS.batchBodyBytesMax → 413; headers must arrive within
// headersTimeoutMs and a whole request within requestTimeoutMs (408 request_timeout, checked
// every CONNECTION_CHECK_MS at most, not Node's 30 s); headers over 16 KiB → 431; a stopping node
// answers 503 shutting_down and closes the connection.
//
// What Node would answer itself, with no JSON, is answered here with the error table's body: a
// request without Host, an Expect other than 100-continue (417), CONNECT (405), bytes that are
// not HTTP (400). HEAD is served as GET without the body; OPTIONS answers 204 with Allow, and
// every 405 carries Allow.
//
// A malformed request behind one still in flight on its connection (garbage pipelined after a
// produce waiting for its fsync) is answered with nothing: the connection closes once the
// earlier answers are written. A 400 written then would reach the client as the answer to the
// earlier request, a definite "not done" for a message that was stored.
//
// Requests are served by a Service (src/broker/service.ts): the local broker on a single node,
// the cluster's router in a cluster. Each resource registers its own routes (src/http/routes/),
// each behind the Perm it needs (src/http/authz.ts, src/http/router.ts). In a cluster this
// module also mounts the internal routes other nodes forward to, through the interface it
// declares (src/http/cluster.ts).

import { performance } from "node:perf_hooks";
import { createServer, ServerResponse, type IncomingMessage, type Server } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import FindMyWay from "find-my-way";
import type { Logger } from "pino";
import type { Service } from "../broker/service.js";
import type { RouteCounts } from "../broker/metrics.js";
import type { ProducerIdsApi } from "../broker/producer-ids.js";
import type { Authenticator } from "../auth/authenticator.js";
import type { UserStoreApi } from "../auth/user-store-api.js";
import { NaradError } from "../protocol/errors.js";
import { HEADERS } from "../protocol/wire.js";
import { BodyTooLarge } from "./body.js";
import { internalRouteKit, type HttpCluster } from "./cluster.js";
import type { Params } from "./params.js";
import { head, identify, sendError } from "./respond.js";
import { mountInternal, publicRoutes, type RouteDeps, type RouteStore } from "./router.js";
import { messageRoutes } from "./routes/messages.js";
import { nodeRoutes } from "./routes/nodes.js";
import { opsRoutes } from "./routes/ops.js";
import { topicRoutes } from "./routes/topics.js";
import { userRoutes } from "./routes/users.js";
import { createStreamServer, streamCreditBytes } from "./stream.js";
import { STREAM_PROTOCOL } from "../protocol/stream.js";
import { inFlight as processInFlight } from "../platform/in-flight.js";

export interface HttpOptions {
  service: Service;
  logger: Logger;
  nodeId: string;
  bootId: string;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  users: UserStoreApi;
  /** Producer ids (src/broker/producer-ids.ts: a file on one node, PostgreSQL in a cluster); absent: none are kept, idempotent produces are refused. */
  producers?: ProducerIdsApi;
  /** Absent with security off (--dev): every request is allowed without credentials. */
  authenticator?: Authenticator;
  nowMs: () => number;
  /** Cluster mode. */
  cluster?: HttpCluster;
  /** A server already listening (cluster mode binds before it knows its advertised address). */
  server?: Server;
  /** Why the node cannot serve now though it runs (a stopped log, no descriptor free), or null: /readyz says it. */
  notReady?: () => string | null;
  /** The streaming protocol's credit per connection (src/http/stream.ts); default from a 64 MiB limits.pending_sync_bytes. */
  streamCreditBytes?: number;
  /** limits.stream_connections and stream.idle_timeout_ms (src/http/stream.ts has their defaults). */
  streamConnectionsMax?: number;
  streamIdleTimeoutMs?: number;
}

export interface NaradHttpServer {
  server: Server;
  /** Stop taking requests; resolve when in-flight ones finished (or after graceMs). */
  drain(graceMs: number): Promise<void>;
  setReady(ready: boolean): void;
}

/** How often, at most, Node checks the header and request timeouts (its default is 30 s). */
const CONNECTION_CHECK_MS = 1000;

const METHODS = ["GET", "POST", "PATCH", "DELETE"] as const;

/**
 * A node:http server with Narad's settings: the timeouts checked often enough to answer near
 * their setting, and a missing Host answered by us (as JSON) rather than by Node.
 */
export function createHttpListener(o: { headersTimeoutMs: number; requestTimeoutMs: number }): Server {
  return createServer({
    requireHostHeader: false,
    connectionsCheckingInterval: Math.max(10, Math.min(CONNECTION_CHECK_MS, Math.floor(Math.min(o.headersTimeoutMs, o.requestTimeoutMs) / 4))),
  });
}

/**
 * A path parameter as long as a request line can be (Node's 16 KiB header limit answers 431
 * past it), so a name too long is refused by its own check, naming the bound (400
 * invalid_topic_name), rather than not routed at all (it was 404 past 400 characters).
 */
const ROUTE_PARAM_CHARS_MAX = 16 * 1024;

/** Requests on a socket whose answers are not finished (for the pipelined-garbage rule above). */
const PENDING = Symbol("narad.pendingAnswers");
/** The answer of the socket's newest request (its request is `res.req`). */
const LAST = Symbol("narad.lastAnswer");
type Counted = Duplex & {
  [PENDING]?: number;
  [LAST]?: ServerResponse;
  /** End the connection once this few answers are still pending (set by a parse error). */
  naradEndAt?: number;
};

/**
 * How long a connection answered 413 while its client was still sending the body keeps reading
 * (and discarding) before it closes anyway. Closing a socket with unread bytes makes the kernel
 * send RST, and an RST that reaches the client before it read the 413 discards the answer: the
 * client saw "write EPIPE" or "ECONNRESET", an ambiguous failure, for a definite refusal
 * (issue 16 item 1). So the answer is sent, our side shut (FIN), and the rest of the body read
 * until the client shuts its side or this much time passed.
 */
export const LINGER_AFTER_REFUSAL_MS = 2000;
/** Marks a socket in its lingering close: a request parsed from what it still sends is dropped. */
const LINGERING = Symbol("narad.lingering");

/**
 * Makes Node's close of this connection (it calls destroySoon once the answer with
 * `Connection: close` is written) a lingering close: FIN now, destroy at the client's FIN or
 * after LINGER_AFTER_REFUSAL_MS. The request is resumed so its remaining body is read and dropped.
 * test/newcomer-sdk.test.ts fails if Node stops closing through destroySoon.
 */
function lingerAfterAnswer(req: IncomingMessage): void {
  const socket = req.socket as Socket & { destroySoon(): void; [LINGERING]?: true };
  socket[LINGERING] = true;
  req.resume();
  socket.destroySoon = () => {
    socket.end();
    const t = setTimeout(() => socket.destroy(), LINGER_AFTER_REFUSAL_MS);
    socket.once("end", () => socket.destroy());
    socket.once("close", () => clearTimeout(t));
  };
}

/** When an answer's request arrived (performance.now()) and its route's metrics slot. */
const STARTED_MS = Symbol("narad.startedMs");
const ROUTE = Symbol("narad.route");
type Tracked = ServerResponse & { [STARTED_MS]?: number; [ROUTE]?: RouteSlot };
/** A route's metrics (see "Request metrics" below), kept on its router entry under SLOT. */
interface RouteSlot {
  counts: RouteCounts;
  timed: { hist: { observe(v: number): void }; ok: (status: number) => boolean } | undefined;
}
const SLOT = Symbol("narad.routeSlot");

/** Closes a connection once what was written to it reached the kernel. */
function endAfterWrites(socket: Duplex): void {
  socket.once("finish", () => socket.destroy());
  socket.end();
}

const NO_QUERY = Object.freeze({});
const unparsedQuery = (): Record<string, string> => NO_QUERY;

/** A server built without producer ids (some tests): ids are neither minted nor known. */
const NO_PRODUCERS: ProducerIdsApi = {
  mint: () => Promise.reject(new NaradError("not_found", "This server keeps no producer ids.")),
  use: () => Promise.reject(new NaradError("unknown_producer")),
  usedRecently: () => false,
};

export function createHttpServer(opts: HttpOptions): NaradHttpServer {
  const { service: svc, nodeId, bootId, cluster } = opts;
  const log = opts.logger.child({ module: "http" });
  // The query is parsed once, by the route (src/http/router.ts, URLSearchParams): find-my-way
  // would parse it too, for a result nobody reads.
  const router = FindMyWay({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: ROUTE_PARAM_CHARS_MAX, querystringParser: unparsedQuery });
  let inFlight = 0;
  let stopping = false;
  let ready = false;
  let drained: (() => void) | undefined;

  const auditLog = opts.logger.child({ module: "audit" });
  const audit: RouteDeps["audit"] = (ctx, action, fields) => auditLog.info({ action, by: ctx.principal?.name ?? null, ...fields }, action);
  const deps: RouteDeps = { on: publicRoutes(router, svc, opts.authenticator), svc, nodeId, bootId, audit };
  opsRoutes(deps, () => ready && !stopping && (cluster === undefined || cluster.view.isLeaseLive()), opts.notReady ?? (() => null));
  topicRoutes(deps, opts.users);
  messageRoutes(deps, opts.producers ?? NO_PRODUCERS);
  userRoutes(deps, opts.users, opts.nowMs);
  nodeRoutes(deps, cluster);
  if (cluster !== undefined) mountInternal(router, svc, opts.authenticator, cluster.internal, internalRouteKit(nodeId, bootId));

  // Request metrics (docs/operations.md): a count per route and status, and the latency of the
  // routes users time (produce, consume, ack). Each route has one slot, made at its first answer
  // and kept on its router entry: the count is a plain number handed to the counter at a scrape
  // (BrokerMetrics.routeCounts), the latency goes to its histogram's child (issue 17: a labelled
  // count and a map lookup by a string made per answer cost more than the consume's lease).
  const m = svc.metrics;
  const timed = new Map<string, { hist: { observe(v: number): void }; ok: (status: number) => boolean }>([
    ["POST /v1/topics/:topic/messages", { hist: m.produceLatency.counts("single"), ok: (s) => s === 202 }],
    ["POST /v1/topics/:topic/messages/batch", { hist: m.produceLatency.counts("batch"), ok: (s) => s === 202 }],
    ["POST /v1/topics/:topic/consume", { hist: m.consumeLatency.counts("single"), ok: (s) => s === 200 }],
    ["POST /v1/topics/:topic/consume/batch", { hist: m.consumeLatency.counts("batch"), ok: (s) => s === 200 }],
    ["POST /v1/topics/:topic/ack", { hist: m.ackLatency.counts("single"), ok: (s) => s === 204 }],
    ["POST /v1/topics/:topic/ack/batch", { hist: m.ackLatency.counts("batch"), ok: (s) => s === 200 }],
  ]);
  const slotOf = (route: string): RouteSlot => ({ counts: m.routeCounts(route), timed: timed.get(route) });
  const unmatched = slotOf("unmatched");
  const internal = slotOf("internal");
  const answered = (slot: RouteSlot, status: number, ms: number): void => {
    const t = slot.timed;
    if (t !== undefined && t.ok(status)) t.hist.observe(ms / 1000);
    slot.counts.count(status);
  };

  /** An answer's end (written, or its connection gone): the counts in flight, its metrics. */
  const onAnswerClosed = function (this: Tracked): void {
    const socket = this.req.socket as Counted;
    inFlight--;
    processInFlight.requestEnded();
    if (--socket[PENDING]! === socket.naradEndAt) endAfterWrites(socket);
    if (stopping && inFlight === 0) drained?.();
    answered(this[ROUTE]!, this.statusCode, performance.now() - this[STARTED_MS]!);
  };
  // Every answer names the node and its boot (src/http/respond.ts): one header list per server.
  const identityHeaders: readonly string[] = [HEADERS.node, nodeId, HEADERS.boot, bootId];
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    identify(res, identityHeaders);
    if ((req.socket as Socket & { [LINGERING]?: true })[LINGERING]) {
      req.socket.destroy(); // bytes after a refused body: not a request anyone waits on
      return;
    }
    if (stopping) {
      res.setHeader("connection", "close");
      sendError(res, new NaradError("shutting_down"));
      return;
    }
    inFlight++;
    processInFlight.requestStarted();
    const socket = req.socket as Counted;
    socket[PENDING] = (socket[PENDING] ?? 0) + 1;
    socket[LAST] = res; // no object per request: the request is res.req
    const tracked = res as Tracked;
    tracked[STARTED_MS] = performance.now();
    tracked[ROUTE] = unmatched;
    res.on("close", onAnswerClosed); // one listener made per server, not a closure per request
    if (req.headers.host === undefined && req.httpVersionMajor === 1 && req.httpVersionMinor === 1) {
      res.setHeader("connection", "close");
      return finishWithError(req, res, new NaradError("bad_request", "An HTTP/1.1 request needs a Host header."));
    }
    const found = router.find((req.method === "HEAD" ? "GET" : req.method) as "GET", req.url!);
    if (found === null) {
      const path = req.url!.split("?")[0]!;
      const allowed = METHODS.filter((m) => router.find(m, path) !== null);
      if (allowed.length === 0) return finishWithError(req, res, new NaradError("not_found", `No route ${req.method} ${path}; see docs/api.md.`));
      const allow = (allowed.includes("GET") ? [...allowed, "HEAD"] : allowed).concat("OPTIONS").join(", ");
      if (req.method === "OPTIONS") {
        head(res, 204, ["allow", allow]);
        res.end();
        return;
      }
      res.setHeader("allow", allow);
      return finishWithError(req, res, new NaradError("method_not_allowed", `${req.method} is not allowed on ${path}; allowed: ${allow}.`));
    }
    // An internal route (src/cluster/internal-routes.ts) has no store: find-my-way gives null.
    const store = found.store as (RouteStore & { [SLOT]?: RouteSlot }) | null | undefined;
    tracked[ROUTE] = store == null ? internal : (store[SLOT] ??= slotOf(store.route));
    try {
      const r = (found.handler as unknown as (req: IncomingMessage, res: ServerResponse, params: Params) => Promise<void> | void)(req, res, found.params);
      if (r instanceof Promise) r.catch((e: unknown) => finishWithError(req, res, e));
    } catch (e) {
      finishWithError(req, res, e);
    }
  };
  const server = opts.server ?? createHttpListener(opts);
  // A client that sends a whole request and then shuts its side (FIN: `nc -N`, HTTP/1.0-style
  // clients, shutdown(SHUT_WR)) still reads: it gets its answer, then the connection closes.
  // Without this Node aborts the request at the FIN and closes unanswered, even after a produce
  // was stored. A request cut off by the FIN is still a parse error (400, clientError below).
  // Node 20 has no createServer option for it and @types/node does not list the property (Node's
  // own http server reads it in socketOnEnd); test/hardening.test.ts fails if it stops working.
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  server.keepAliveTimeout = opts.keepAliveTimeoutMs;
  server.headersTimeout = opts.headersTimeoutMs;
  server.requestTimeout = opts.requestTimeoutMs;
  server.removeAllListeners("request");
  server.on("request", onRequest);
  // Answers Node would give without JSON, or not at all, written by hand on the socket.
  const answerRaw = (socket: Duplex, e: NaradError, reason: string, extra = ""): void => {
    const body = JSON.stringify(e.toBody());
    socket.end(`HTTP/1.1 ${e.status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n${extra}Narad-Node: ${nodeId}\r\nNarad-Boot: ${bootId}\r\n\r\n${body}`);
  };
  server.on("clientError", (err: NodeJS.ErrnoException, raw: Duplex) => {
    const socket = raw as Counted;
    if (!socket.writable || err.code === "ECONNRESET") {
      socket.destroy();
      return;
    }
    const pending = socket[PENDING] ?? 0;
    const last = socket[LAST];
    if (pending > 0 && last !== undefined) {
      if (!last.req.complete && pending === 1 && !last.headersSent) {
        // The error is in the body of the one request in flight, which therefore never ran:
        // it is that request's answer.
        last.setHeader("connection", "close");
        last.once("finish", () => socket.destroy());
        // A body that stopped arriving is the request timeout's (408), not malformed.
        sendError(last, err.code === "ERR_HTTP_REQUEST_TIMEOUT" ? new NaradError("request_timeout") : new NaradError("bad_request", `Malformed HTTP request: ${err.code ?? err.message}.`));
        return;
      }
      // Earlier requests on this connection are still being answered: let them finish, then
      // close without answering the garbage (see the note at the top). A request whose body the
      // error broke off never completes, so it is not waited for.
      socket.naradEndAt = last.req.complete ? 0 : 1;
      if (pending === socket.naradEndAt) endAfterWrites(socket);
      return;
    }
    if (err.code === "ERR_HTTP_REQUEST_TIMEOUT") answerRaw(socket, new NaradError("request_timeout"), "Request Timeout");
    else if (err.code === "HPE_HEADER_OVERFLOW") answerRaw(socket, new NaradError("header_fields_too_large"), "Request Header Fields Too Large");
    else answerRaw(socket, new NaradError("bad_request", `Malformed HTTP request: ${err.code ?? err.message}.`), "Bad Request");
  });
  // The streaming protocol (GET /v1/stream, Upgrade: narad-stream): src/http/stream.ts.
  const streams = createStreamServer({ svc, users: opts.users, nodeId, bootId, logger: opts.logger, creditBytes: opts.streamCreditBytes ?? streamCreditBytes(64 * 1024 * 1024), ...(opts.streamConnectionsMax !== undefined ? { connectionsMax: opts.streamConnectionsMax } : {}), ...(opts.streamIdleTimeoutMs !== undefined ? { idleTimeoutMs: opts.streamIdleTimeoutMs } : {}), ...(opts.authenticator !== undefined ? { authenticator: opts.authenticator } : {}) });
  // With an upgrade listener Node hands every Upgrade request here. One for another protocol
  // without a body (curl --http2 asks for h2c on a GET) is served as the HTTP/1.1 request it also
  // is, as Node would without the listener, then the connection closes; with a body it is refused.
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!ready) return answerRaw(socket, new NaradError("shutting_down", "The node is starting; retry shortly."), "Service Unavailable");
    const bodyless = head.length === 0 && req.headers["transfer-encoding"] === undefined && (req.headers["content-length"] ?? "0") === "0";
    if (String(req.headers.upgrade).toLowerCase() !== STREAM_PROTOCOL && bodyless) {
      const res = new ServerResponse(req);
      res.shouldKeepAlive = false;
      res.assignSocket(socket as Socket);
      res.once("finish", () => endAfterWrites(socket));
      return onRequest(req, res);
    }
    streams.onUpgrade(req, socket, head);
  });
  server.on("checkExpectation", (req: IncomingMessage, res: ServerResponse) => {
    identify(res, identityHeaders);
    res.setHeader("connection", "close");
    sendError(res, new NaradError("expectation_failed", `Expect: ${String(req.headers.expect).slice(0, 64)} is not supported; only 100-continue is.`));
  });
  server.on("connect", (_req: IncomingMessage, socket: Duplex) => {
    socket.on("error", () => socket.destroy());
    answerRaw(socket, new NaradError("method_not_allowed", "CONNECT is not served here; Narad is not a proxy."), "Method Not Allowed", `Allow: ${METHODS.join(", ")}, HEAD, OPTIONS\r\n`);
  });

  function finishWithError(req: IncomingMessage, res: ServerResponse, e: unknown): void {
    let err: NaradError;
    if (e instanceof NaradError) err = e;
    else {
      log.error({ err: e instanceof Error ? e.stack : String(e), method: req.method, url: req.url }, "request failed");
      err = new NaradError("internal");
    }
    svc.metrics.refusals.inc({ status: String(err.status), code: err.code });
    if (res.headersSent) {
      res.destroy();
      return;
    }
    if (e instanceof BodyTooLarge) {
      // Stop storing the body: answer, then close the connection without losing the answer.
      res.setHeader("connection", "close");
      lingerAfterAnswer(req);
    }
    sendError(res, err);
  }

  return {
    server,
    setReady(r: boolean) {
      ready = r;
    },
    drain(graceMs: number) {
      stopping = true;
      svc.releaseWaiters();
      server.close();
      server.closeIdleConnections();
      const streamsDrained = streams.drain(graceMs);
      if (inFlight === 0) return streamsDrained;
      const requests = new Promise<void>((resolve) => {
        const t = setTimeout(resolve, graceMs);
        drained = () => {
          clearTimeout(t);
          resolve();
        };
      });
      return Promise.all([requests, streamsDrained]).then(() => undefined);
    },
  };
}
