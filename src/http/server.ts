// HTTP API version 1: the server and its lifecycle (requests counted in flight, a graceful
// drain) around one router, on which each resource registers its routes. Every answer carries
// Narad-Node and Narad-Boot; every error is the JSON body of the error table
// (src/protocol/errors.ts).
//
// Limits and their answers: single-message bodies over 1 MiB → 413 (reading stops at the
// limit); batch bodies over LIMITS.batchBodyBytesMax → 413; headers must arrive within
// headersTimeoutMs and a whole request within requestTimeoutMs (Node closes the socket with
// 408); a stopping node answers 503 shutting_down and closes the connection.
//
// Requests are served by a Service (src/broker/service.ts): the local broker on a single node,
// the cluster's router in a cluster. Each resource registers its own routes (src/http/routes/),
// each behind the Perm it needs (src/http/authz.ts, src/http/router.ts). In a cluster this
// module also mounts the internal routes other nodes forward to, through the interface it
// declares (src/http/cluster.ts).

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import FindMyWay from "find-my-way";
import type { Logger } from "pino";
import type { Service } from "../broker/service.js";
import type { Authenticator } from "../auth/authenticator.js";
import type { UserStoreApi } from "../auth/user-store-api.js";
import { NaradError } from "../protocol/errors.js";
import { HEADERS } from "../protocol/wire.js";
import { BodyTooLarge } from "./body.js";
import { internalRouteKit, type HttpCluster } from "./cluster.js";
import type { Params } from "./params.js";
import { identify, sendError } from "./respond.js";
import { mountInternal, publicRoutes, type RouteDeps } from "./router.js";
import { messageRoutes } from "./routes/messages.js";
import { nodeRoutes } from "./routes/nodes.js";
import { opsRoutes } from "./routes/ops.js";
import { topicRoutes } from "./routes/topics.js";
import { userRoutes } from "./routes/users.js";

export interface HttpOptions {
  service: Service;
  logger: Logger;
  nodeId: string;
  bootId: string;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  users: UserStoreApi;
  /** Absent with security off (--dev): every request is allowed without credentials. */
  authenticator?: Authenticator;
  nowMs: () => number;
  /** Cluster mode. */
  cluster?: HttpCluster;
  /** A server already listening (cluster mode binds before it knows its advertised address). */
  server?: Server;
}

export interface NaradHttpServer {
  server: Server;
  /** Stop taking requests; resolve when in-flight ones finished (or after graceMs). */
  drain(graceMs: number): Promise<void>;
  setReady(ready: boolean): void;
}

export function createHttpServer(opts: HttpOptions): NaradHttpServer {
  const { service: svc, nodeId, bootId, cluster } = opts;
  const log = opts.logger.child({ module: "http" });
  const router = FindMyWay({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: 400 });
  let inFlight = 0;
  let stopping = false;
  let ready = false;
  let drained: (() => void) | undefined;

  const deps: RouteDeps = { on: publicRoutes(router, svc, opts.authenticator), svc, nodeId, bootId };
  opsRoutes(deps, () => ready && !stopping && (cluster === undefined || cluster.view.isLeaseLive()));
  topicRoutes(deps);
  messageRoutes(deps);
  userRoutes(deps, opts.users, opts.nowMs);
  nodeRoutes(deps, cluster);
  if (cluster !== undefined) mountInternal(router, svc, opts.authenticator, cluster.internal, internalRouteKit(nodeId, bootId));

  // Every answer names the node and its boot (src/http/respond.ts): one header list per server.
  const identityHeaders: readonly string[] = [HEADERS.node, nodeId, HEADERS.boot, bootId];
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    identify(res, identityHeaders);
    if (stopping) {
      res.setHeader("connection", "close");
      sendError(res, new NaradError("shutting_down"));
      return;
    }
    inFlight++;
    res.once("close", () => {
      inFlight--;
      if (stopping && inFlight === 0) drained?.();
    });
    const found = router.find(req.method as "GET", req.url!);
    if (found === null) {
      const path = req.url!.split("?")[0]!;
      const other = (["GET", "POST", "PATCH", "DELETE"] as const).some((m) => m !== req.method && router.find(m, path) !== null);
      return finishWithError(req, res, other ? new NaradError("method_not_allowed", `${req.method} is not allowed on ${path}.`) : new NaradError("not_found", `No route ${req.method} ${path}; see docs/api.md.`));
    }
    try {
      const r = (found.handler as unknown as (req: IncomingMessage, res: ServerResponse, params: Params) => Promise<void> | void)(req, res, found.params);
      if (r instanceof Promise) r.catch((e: unknown) => finishWithError(req, res, e));
    } catch (e) {
      finishWithError(req, res, e);
    }
  };
  const server = opts.server ?? createServer();
  server.keepAliveTimeout = opts.keepAliveTimeoutMs;
  server.headersTimeout = opts.headersTimeoutMs;
  server.requestTimeout = opts.requestTimeoutMs;
  server.removeAllListeners("request");
  server.on("request", onRequest);
  server.on("clientError", (err: NodeJS.ErrnoException, socket) => {
    if (socket.writable && err.code !== "ECONNRESET") {
      const body = JSON.stringify({ error: { code: "bad_request", message: `Malformed HTTP request: ${err.code ?? err.message}.` } });
      socket.end(`HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\nNarad-Node: ${nodeId}\r\nNarad-Boot: ${bootId}\r\n\r\n${body}`);
    } else socket.destroy();
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
      // Stop reading the body: answer, then close the connection.
      res.setHeader("connection", "close");
      res.once("finish", () => req.socket.destroy());
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
      if (inFlight === 0) return Promise.resolve();
      return new Promise<void>((resolve) => {
        const t = setTimeout(resolve, graceMs);
        drained = () => {
          clearTimeout(t);
          resolve();
        };
      });
    },
  };
}
