// The internal routes: what a node serves to the other nodes of its cluster, under
// /internal/v1 (src/cluster/wire.ts), beside the code that calls them (forwarding in
// service.ts and peers.ts, moves in moves.ts). A forwarded produce, consume, settle or replay is
// served from this node's own partitions (the *Local methods of ClusterService); the sync, move,
// freeze and file routes serve placement changes and partition moves.
//
// Ordering invariant 10 of docs/architecture.md, kept here: internal routes never forward. Each
// handler does this node's own part: the local half of the service (which serves from this
// node's partitions or refuses) or this node's part of a move (a move is handed to the target
// node once, by Mover.move, and driven there), so two nodes with different views of the
// placement cannot bounce a request between them.
//
// The HTTP layer mounts these (src/http/router.ts) behind the cluster token (`fromPeer`) and,
// for the data routes, the forwarded client's credentials checked against `perm`. This room may
// not import src/http, so a route is written against node:http and the helpers the HTTP layer
// lends it (InternalHttp below, a part of what src/http/cluster.ts offers): the answers carry the
// node's identity headers and errors the error table's body, as on the public routes. The wiring
// room (src/server.ts) hands the result to the HTTP layer.

import { createReadStream } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { pipeline } from "node:stream/promises";
import type { Delivery, ProduceItem, ReplayResult } from "../broker/broker.js";
import type { SettleOutcome } from "../broker/service.js";
import { NaradError } from "../protocol/errors.js";
import { decodeProducerBatch, LIMITS, PRODUCER_PREFIX_BYTES } from "../protocol/wire.js";
import type { Mover } from "./moves.js";
import type { ClusterService, LocalSettleAction } from "./service.js";
import { INTERNAL_HEADERS, INTERNAL_PREFIX, tokenMatches } from "./wire.js";

/** Forwarded long polls that may wait here at once with a cancellable id (more wait without one). */
const LIMITS_POLLS_MAX = 100_000;

type Params = Record<string, string | undefined>;

/** What the routes use of the HTTP layer (it lends these; src/http/cluster.ts InternalRouteKit). */
export interface InternalHttp {
  readBody(req: IncomingMessage, limitBytes: number): Promise<Buffer>;
  readJson(req: IncomingMessage, limitBytes: number): Promise<unknown>;
  /** A produce batch, JSON or binary, checked as the public batch route checks it. */
  readBatch(req: IncomingMessage): Promise<ProduceItem[]>;
  /** writeHead with the node's identity headers first; `headers` is a flat [name, value, ...] list. */
  head(res: ServerResponse, status: number, headers?: string[]): void;
  sendJson(res: ServerResponse, status: number, body: unknown): void;
  sendEmpty(res: ServerResponse, status: number): void;
  /** Leased messages in the binary encoding (DELIVERIES_TYPE), naming this node as their owner. */
  sendDeliveries(res: ServerResponse, ds: readonly Delivery[]): void;
  sendReplay(res: ServerResponse, r: ReplayResult): void;
  /** Aborts a long poll when its client goes away. */
  abortOnClose(req: IncomingMessage, res: ServerResponse, waitMs: number): AbortSignal;
  outcomeStatus(o: SettleOutcome): number;
  asObject(v: unknown): Record<string, unknown>;
  topicParam(p: Params): string;
  partitionParam(p: Params): number;
  queryInt(q: URLSearchParams, name: string, dflt: number, min: number, max: number): number;
  checkKey(key: string | null): void;
}

export interface InternalRoute {
  method: "GET" | "POST";
  /** Below INTERNAL_PREFIX. */
  path: string;
  /** What the forwarded client must be allowed, when the request carries its credentials. */
  perm: "none" | "produce" | "consume" | "manage";
  handler(req: IncomingMessage, res: ServerResponse, params: Params, query: URLSearchParams): Promise<void> | void;
}

export interface InternalRoutesOptions {
  /** The cluster token (src/cluster/wire.ts) every internal request must carry. */
  token: string;
  service: ClusterService;
  mover: Mover;
  /** The replication routes (src/cluster/replication): leader to follower. */
  replication?: { routes(http: InternalHttp): InternalRoute[] };
}

export function internalRoutes(o: InternalRoutesOptions): {
  prefix: string;
  fromPeer(req: IncomingMessage): boolean;
  routes(http: InternalHttp): InternalRoute[];
} {
  return {
    prefix: INTERNAL_PREFIX,
    fromPeer: (req) => tokenMatches(o.token, req.headers[INTERNAL_HEADERS.token]),
    routes: (http) => [...routes(o.service, o.mover, http), ...(o.replication?.routes(http) ?? [])],
  };
}

function routes(cs: ClusterService, mover: Mover, http: InternalHttp): InternalRoute[] {
  const { asObject, topicParam, partitionParam, queryInt } = http;
  /** The placement epoch a move's request names (?epoch=, at least 1). */
  const epochOf = (q: URLSearchParams) => queryInt(q, "epoch", 0, 1, Number.MAX_SAFE_INTEGER);
  // Long polls forwarded here, by the id the forwarding node gave them, so it can cancel one
  // without closing the connection: a poll that leased messages as it was cancelled still
  // answers them, and the forwarding node releases them (src/cluster/service.ts).
  const polls = new Map<string, AbortController>();
  return [
    {
      method: "POST",
      path: "/topics/:topic/partitions/:partition/messages",
      perm: "produce",
      handler: async (req, res, p, q) => {
        const key = q.get("key");
        http.checkKey(key);
        const payload = await http.readBody(req, LIMITS.messageBytesMax);
        const [r] = await cs.produceLocal(topicParam(p), partitionParam(p), [{ key, payload }]);
        http.sendJson(res, 202, r);
      },
    },
    {
      // An idempotent produce (src/broker/producers.ts): each message with its producer.
      method: "POST",
      path: "/topics/:topic/partitions/:partition/messages/idempotent",
      perm: "produce",
      handler: async (req, res, p) => {
        const items = decodeProducerBatch(await http.readBody(req, LIMITS.batchBodyBytesMax + PRODUCER_PREFIX_BYTES * LIMITS.batchMessagesMax));
        if (typeof items === "string") throw new NaradError("bad_request", `The forwarded idempotent batch is malformed: ${items}.`);
        const results = await cs.produceLocal(topicParam(p), partitionParam(p), items);
        http.sendJson(res, 202, { results });
      },
    },
    {
      method: "POST",
      path: "/topics/:topic/partitions/:partition/messages/batch",
      perm: "produce",
      handler: async (req, res, p) => {
        const results = await cs.produceLocal(topicParam(p), partitionParam(p), await http.readBatch(req));
        http.sendJson(res, 202, { results });
      },
    },
    {
      method: "POST",
      path: "/topics/:topic/consume",
      perm: "consume",
      handler: async (req, res, p, q) => {
        const max = queryInt(q, "max_messages", 1, 1, LIMITS.consumeBatchMax);
        const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
        const pollId = q.get("poll");
        let signal = http.abortOnClose(req, res, waitMs);
        if (pollId !== null && waitMs > 0 && polls.size < LIMITS_POLLS_MAX && !polls.has(pollId)) {
          const ac = new AbortController();
          signal.addEventListener("abort", () => ac.abort(), { once: true });
          polls.set(pollId, ac);
          res.once("close", () => polls.delete(pollId));
          signal = ac.signal;
        }
        http.sendDeliveries(res, await cs.consumeLocal(topicParam(p), max, waitMs, signal));
      },
    },
    {
      method: "POST",
      path: "/polls/:poll/cancel",
      perm: "none",
      handler: (_req, res, p) => {
        polls.get(p.poll ?? "")?.abort();
        http.sendEmpty(res, 204);
      },
    },
    {
      method: "POST",
      path: "/topics/:topic/settle",
      perm: "consume",
      handler: async (req, res, p) => {
        const body = asObject(await http.readJson(req, LIMITS.controlBodyBytesMax));
        const handles = body.receipt_handles;
        const action = body.action;
        if (!Array.isArray(handles) || handles.some((h) => typeof h !== "string") || handles.length > LIMITS.ackBatchMax) throw new NaradError("invalid_argument", "receipt_handles must be an array of strings.");
        if (action !== "ack" && action !== "extend" && action !== "nack" && action !== "release") throw new NaradError("invalid_argument", "action must be ack, extend, nack or release.");
        const outcomes = await cs.settleLocal(topicParam(p), handles as string[], action as LocalSettleAction);
        http.sendJson(res, 200, { statuses: outcomes.map(http.outcomeStatus) });
      },
    },
    {
      method: "GET",
      path: "/topics/:topic/partitions/:partition/messages",
      perm: "consume",
      handler: async (_req, res, p, q) => {
        const offset = queryInt(q, "offset", 0, 0, Number.MAX_SAFE_INTEGER);
        const limit = Math.min(queryInt(q, "limit", LIMITS.replayLimitDefault, 1, Number.MAX_SAFE_INTEGER), LIMITS.replayLimitMax);
        http.sendReplay(res, await cs.replayLocal(topicParam(p), partitionParam(p), offset, limit));
      },
    },
    {
      method: "POST",
      path: "/topics/:topic/cursors",
      perm: "manage",
      handler: async (req, res, p) => {
        const body = asObject(await http.readJson(req, LIMITS.controlBodyBytesMax));
        const parts = body.partitions;
        if (typeof body.child !== "string" || typeof body.set !== "boolean" || !Array.isArray(parts) || parts.some((x) => !Number.isSafeInteger(x))) {
          throw new NaradError("invalid_argument", "The body must be {\"child\", \"partitions\": [...], \"set\": true | false}.");
        }
        await cs.setCursorsLocal(topicParam(p), body.child, parts as number[], body.set);
        http.sendEmpty(res, 204);
      },
    },
    {
      method: "POST",
      path: "/sync",
      perm: "none",
      handler: async (req, res) => {
        const body = asObject(await http.readJson(req, LIMITS.controlBodyBytesMax));
        const targets = body.targets;
        if (!Array.isArray(targets) || targets.some((t) => typeof t !== "string")) throw new NaradError("invalid_argument", "targets must be an array of strings.");
        await cs.sync(targets as string[]);
        http.sendEmpty(res, 204);
      },
    },
    {
      method: "POST",
      path: "/moves",
      perm: "none",
      handler: async (req, res) => {
        const body = asObject(await http.readJson(req, LIMITS.controlBodyBytesMax));
        if (typeof body.topic !== "string" || !Number.isSafeInteger(body.partition)) throw new NaradError("invalid_argument", "The body must be {\"topic\", \"partition\"}.");
        http.sendJson(res, 200, await mover.drive(body.topic, body.partition as number));
      },
    },
    {
      method: "POST",
      path: "/partitions/:topic/:partition/freeze",
      perm: "none",
      handler: async (_req, res, p, q) => {
        await cs.freeze(topicParam(p), partitionParam(p), epochOf(q), q.get("to") ?? "");
        http.sendEmpty(res, 204);
      },
    },
    {
      method: "GET",
      path: "/partitions/:topic/:partition/files",
      perm: "none",
      handler: async (_req, res, p, q) => {
        const files = await mover.localManifest(topicParam(p), partitionParam(p), epochOf(q), q.get("final") === "1");
        http.sendJson(res, 200, { files });
      },
    },
    {
      method: "GET",
      path: "/partitions/:topic/:partition/files/:name",
      perm: "none",
      handler: async (_req, res, p, q) => {
        const path = await mover.localFile(topicParam(p), partitionParam(p), epochOf(q), p.name ?? "", q.get("final") === "1");
        const from = queryInt(q, "from", 0, 0, Number.MAX_SAFE_INTEGER);
        const stream = createReadStream(path, { start: from });
        await new Promise<void>((resolve, reject) => {
          stream.once("open", () => resolve());
          stream.once("error", (e: NodeJS.ErrnoException) => reject(e.code === "ENOENT" ? new NaradError("not_found", `No file ${p.name} in the partition.`) : e));
        });
        http.head(res, 200, ["content-type", "application/octet-stream"]);
        await pipeline(stream, res);
      },
    },
  ];
}
