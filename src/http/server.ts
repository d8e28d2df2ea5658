// HTTP API version 1: routes, validation, and the mapping of errors to statuses. The only module
// that knows HTTP. Every answer carries Narad-Node and Narad-Boot; every error is the JSON body
// of the error table (src/protocol/errors.ts).
//
// Limits and their answers: single-message bodies over 1 MiB → 413 (reading stops at the
// limit); batch bodies over LIMITS.batchBodyBytesMax → 413; headers must arrive within
// headersTimeoutMs and a whole request within requestTimeoutMs (Node closes the socket with
// 408); a stopping node answers 503 shutting_down and closes the connection.
//
// Requests are served by a Service (src/broker/service.ts): the local broker on a single node,
// the cluster's router (src/cluster/service.ts) in a cluster. In a cluster this module also
// serves the internal routes other nodes forward to (src/cluster/wire.ts): they need the
// cluster token, never forward further, and check the forwarded client's credentials again.

import { createReadStream } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { pipeline } from "node:stream/promises";
import FindMyWay from "find-my-way";
import type { Logger } from "pino";
import type { Delivery, ProduceItem, ReplayResult, SettleAction } from "../broker/broker.js";
import type { RequestContext, Service, SettleOutcome } from "../broker/service.js";
import type { ControlPlane } from "../cluster/control-plane.js";
import type { Mover } from "../cluster/moves.js";
import type { ClusterService, LocalSettleAction } from "../cluster/service.js";
import { INTERNAL_HEADERS, INTERNAL_PREFIX, tokenMatches } from "../cluster/wire.js";
import { NaradError } from "../protocol/errors.js";
import {
  BATCH_BINARY_TYPE,
  decodeBinaryBatch,
  DELIVERIES_TYPE,
  encodeDeliveries,
  HEADERS,
  LIMITS,
  TOPIC_NAME_RE,
  type ConsumedMessageJson,
} from "../protocol/wire.js";
import { readBody, readBodyChunks, readJson, BodyTooLarge } from "./body.js";
import type { Authenticator } from "../auth/authenticator.js";
import { allows, canManage, canSee, isAdmin, parseGrant, type Principal } from "../auth/model.js";
import type { UserStoreApi } from "../auth/user-store-api.js";

/** What the HTTP layer needs of a cluster node beyond the Service. */
export interface ClusterHttp {
  /** The cluster token internal requests must carry. */
  token: string;
  cp: ControlPlane;
  service: ClusterService;
  mover: Mover;
}

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
  cluster?: ClusterHttp;
  /** A server already listening (cluster mode binds before it knows its advertised address). */
  server?: Server;
}

type Params = Record<string, string | undefined>;

/** Forwarded long polls that may wait here at once with a cancellable id (more wait without one). */
const LIMITS_POLLS_MAX = 100_000;
interface Ctx {
  /** null with security off, and for a node's own internal requests. */
  principal: Principal | null;
  /** What an owner elsewhere must see of this request. */
  req: RequestContext;
}
type Handler = (req: IncomingMessage, res: ServerResponse, params: Params, query: URLSearchParams, ctx: Ctx) => Promise<void> | void;

/**
 * What a route needs. `none`: no credentials (probes). `user`: any valid user. `admin`.
 * `produce` / `consume`: a matching grant on the path's topic. `see`: any matching grant, owner
 * or admin. `manage`: the topic's owner or an admin. `self-or-admin`: the path's user or an admin.
 * Creating a topic is checked in its handler, once the name is read from the body.
 */
type Perm = "none" | "user" | "admin" | "produce" | "consume" | "see" | "manage" | "self-or-admin";

export interface NaradHttpServer {
  server: Server;
  /** Stop taking requests; resolve when in-flight ones finished (or after graceMs). */
  drain(graceMs: number): Promise<void>;
  setReady(ready: boolean): void;
}

export function createHttpServer(opts: HttpOptions): NaradHttpServer {
  const { service: svc, nodeId, bootId } = opts;
  const cluster = opts.cluster;
  const log = opts.logger.child({ module: "http" });
  const router = FindMyWay({ ignoreTrailingSlash: true, caseSensitive: true, maxParamLength: 400 });
  const routes = new Map<string, Set<string>>();
  let inFlight = 0;
  let stopping = false;
  let ready = false;
  let drained: (() => void) | undefined;

  const authz = async (perm: Perm, p: Params, principal: Principal): Promise<void> => {
    const forbidden = (what: string) => new NaradError("forbidden", `User ${principal.name} may not ${what}; ask an admin for a grant.`);
    switch (perm) {
      case "none":
      case "user":
        return;
      case "admin":
        if (!isAdmin(principal)) throw forbidden("do this (admin only)");
        return;
      case "self-or-admin":
        if (!isAdmin(principal) && p.name !== principal.name) throw forbidden(`change user ${p.name}`);
        return;
      case "produce":
      case "consume": {
        const topic = topicParam(p);
        if (!allows(principal, perm, topic)) throw forbidden(`${perm} on topic ${topic}`);
        return;
      }
      case "see":
      case "manage": {
        const topic = topicParam(p);
        let owner: string | null = null;
        let exists = true;
        try {
          owner = (await svc.getTopic(topic)).owner;
        } catch (e) {
          if (!(e instanceof NaradError) || e.code !== "topic_not_found") throw e;
          exists = false;
        }
        const ok = perm === "see" ? canSee(principal, topic, owner) : canManage(principal, owner);
        if (!ok) throw forbidden(perm === "see" ? `see topic ${topic}` : `change or delete topic ${topic} (its owner or an admin may)`);
        if (!exists) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist; create it first.`);
        return;
      }
    }
  };

  const on = (method: "GET" | "POST" | "PATCH" | "DELETE", path: string, perm: Perm, h: Handler) => {
    router.on(method, path, (req, res, params) => {
      const q = req.url!.indexOf("?");
      const query = new URLSearchParams(q >= 0 ? req.url!.slice(q + 1) : "");
      const rc: RequestContext = { authorization: req.headers.authorization };
      if (opts.authenticator === undefined || perm === "none") return h(req, res, params as Params, query, { principal: null, req: rc });
      return opts.authenticator.authenticate(req.headers.authorization).then(async (principal) => {
        await authz(perm, params as Params, principal);
        return h(req, res, params as Params, query, { principal, req: { ...rc, user: principal.name } });
      });
    });
    const m = routes.get(path) ?? new Set<string>();
    m.add(method);
    routes.set(path, m);
  };

  // ---- probes and metrics ---------------------------------------------------------------------
  on("GET", "/healthz", "none", (_req, res) => sendJson(res, 200, { status: "ok", node: nodeId, boot: bootId }));
  on("GET", "/readyz", "none", (_req, res) =>
    ready && !stopping && (cluster === undefined || cluster.cp.isLeaseLive())
      ? sendJson(res, 200, { status: "ready" })
      : sendError(res, new NaradError("shutting_down", "The node is not serving its partitions now: it is starting, stopping, or its control-plane lease lapsed.")),
  );
  on("GET", "/metrics", "user", async (_req, res) => {
    const text = await svc.metrics.registry.metrics();
    head(res, 200, ["content-type", svc.metrics.registry.contentType]);
    res.end(text);
  });

  // ---- topics ---------------------------------------------------------------------------------
  on("POST", "/v1/topics", "user", async (req, res, _p, _q, ctx) => {
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    const name = body.name;
    if (typeof name !== "string" || !TOPIC_NAME_RE.test(name)) {
      throw new NaradError("invalid_topic_name", `Topic name ${JSON.stringify(name)} is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$.`);
    }
    if (ctx.principal !== null && !allows(ctx.principal, "create", name)) {
      throw new NaradError("forbidden", `User ${ctx.principal.name} may not create topic ${name}; ask an admin for a create grant.`);
    }
    onlyFields(body, ["name", "partitions", "visibility_timeout_ms", "retention_ms"]);
    const topic = await svc.createTopic(
      {
        name,
        partitions: optInt(body, "partitions", 1, LIMITS.partitionsMax),
        visibility_timeout_ms: optInt(body, "visibility_timeout_ms", LIMITS.visibilityTimeoutMsMin, LIMITS.visibilityTimeoutMsMax),
        retention_ms: optInt(body, "retention_ms", LIMITS.retentionMsMin, LIMITS.retentionMsMax),
      },
      ctx.principal?.name ?? null,
    );
    sendJson(res, 201, topic);
  });
  on("GET", "/v1/topics", "user", (_req, res, _p, _q, ctx) =>
    sendJson(res, 200, { topics: svc.listTopics().filter((t) => ctx.principal === null || canSee(ctx.principal, t.name, t.owner)) }),
  );
  on("GET", "/v1/topics/:topic", "see", async (_req, res, p) => sendJson(res, 200, await svc.getTopic(topicParam(p))));
  on("PATCH", "/v1/topics/:topic", "manage", async (req, res, p) => {
    const name = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["partitions", "visibility_timeout_ms", "retention_ms"]);
    const topic = await svc.updateTopic(name, {
      partitions: optInt(body, "partitions", 1, LIMITS.partitionsMax),
      visibility_timeout_ms: optInt(body, "visibility_timeout_ms", LIMITS.visibilityTimeoutMsMin, LIMITS.visibilityTimeoutMsMax),
      retention_ms: optInt(body, "retention_ms", LIMITS.retentionMsMin, LIMITS.retentionMsMax),
    });
    sendJson(res, 200, topic);
  });
  on("DELETE", "/v1/topics/:topic", "manage", async (_req, res, p) => {
    await svc.deleteTopic(topicParam(p));
    sendEmpty(res, 204);
  });

  // ---- child topics ------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/children", "manage", async (req, res, p, _q, ctx) => {
    const parent = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["topic", "kind", "delay_ms", "url", "credentials"]);
    const child = body.topic;
    if (typeof child !== "string" || !TOPIC_NAME_RE.test(child)) throw new NaradError("invalid_topic_name", `The child topic ${JSON.stringify(child)} is not a valid topic name.`);
    const kind = body.kind;
    if (kind !== "fanout" && kind !== "delay" && kind !== "replica" && kind !== "remote") {
      throw new NaradError("invalid_argument", "kind must be fanout, delay, replica or remote.");
    }
    if (kind === "delay") {
      if (optInt(body, "delay_ms", 1, LIMITS.retentionMsMax) === undefined) throw new NaradError("invalid_argument", "A delay child needs delay_ms (an integer, at least 1).");
    } else if (body.delay_ms !== undefined) throw new NaradError("invalid_argument", "delay_ms is only for delay children.");
    let url: string | undefined;
    let credentials: { user: string; password: string } | undefined;
    if (kind === "remote") {
      if (typeof body.url !== "string" || !/^https?:\/\/[^\s/]+/.test(body.url)) throw new NaradError("invalid_argument", "A remote child needs url: the http(s) URL of a node of the other cluster.");
      url = body.url.replace(/\/+$/, "");
      const c = body.credentials;
      if (c !== undefined && c !== null) {
        const o = c as Record<string, unknown>;
        if (typeof o !== "object" || typeof o.user !== "string" || typeof o.password !== "string") throw new NaradError("invalid_argument", "credentials must be {\"user\", \"password\"}.");
        credentials = { user: o.user, password: o.password };
      }
    } else {
      if (body.url !== undefined || body.credentials !== undefined) throw new NaradError("invalid_argument", "url and credentials are only for remote children.");
      if (ctx.principal !== null && kind === "replica" && !allows(ctx.principal, "create", child)) {
        throw new NaradError("forbidden", `User ${ctx.principal.name} may not create topic ${child} (a replica child is created by the attach); ask an admin for a create grant.`);
      }
      if (ctx.principal !== null && kind !== "replica") await authz("manage", { topic: child }, ctx.principal);
    }
    const link = await svc.attachChild(parent, {
      topic: child,
      kind,
      ...(kind === "delay" ? { delay_ms: body.delay_ms as number } : {}),
      ...(url !== undefined ? { url } : {}),
      ...(credentials !== undefined ? { credentials } : {}),
    }, ctx.req);
    sendJson(res, 201, link);
  });
  on("GET", "/v1/topics/:topic/children", "see", async (_req, res, p) => sendJson(res, 200, { children: await svc.listChildren(topicParam(p)) }));
  on("DELETE", "/v1/topics/:topic/children/:child", "manage", async (_req, res, p, _q, ctx) => {
    await svc.detachChild(topicParam(p), p.child ?? "", ctx.req);
    sendEmpty(res, 204);
  });

  // ---- produce --------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/messages", "produce", async (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    await svc.checkTopic(topic); // 404 before reading a body for a topic that does not exist
    const key = q.get("key");
    checkKey(key);
    const payload = await readBody(req, LIMITS.messageBytesMax);
    const [r] = await svc.produce(topic, [{ key, payload }], ctx.req);
    // The owner that stored it, as a consume names the lease's owner (the verification toolkit
    // records it: a kill of that node is what can make a child receive a copy twice).
    sendJson(res, 202, { partition: r!.partition, offset: r!.offset }, [HEADERS.owner, r!.owner ?? nodeId, HEADERS.ownerBoot, r!.ownerBoot ?? bootId]);
  });
  on("POST", "/v1/topics/:topic/messages/batch", "produce", async (req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    await svc.checkTopic(topic);
    const items = await readBatch(req);
    const results = await svc.produce(topic, items, ctx.req);
    sendJson(res, 202, { results: results.map((r) => ({ partition: r.partition, offset: r.offset })) });
  });
  const readBatch = async (req: IncomingMessage): Promise<ProduceItem[]> => {
    const type = (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
    let items: { key: string | null; payload: Buffer }[];
    if (type === BATCH_BINARY_TYPE) {
      const decoded = decodeBinaryBatch(await readBodyChunks(req, LIMITS.batchBodyBytesMax, "batch_too_large"));
      if (typeof decoded === "string") throw new NaradError("bad_request", `The binary batch is malformed: ${decoded}.`);
      items = decoded;
    } else if (type === "" || type === "application/json") {
      const body = asObject(await readJson(req, LIMITS.batchBodyBytesMax));
      const msgs = body.messages;
      if (!Array.isArray(msgs)) throw new NaradError("invalid_argument", "The body must be {\"messages\": [{\"key\"?, \"payload_base64\"}]}.");
      items = msgs.map((m: unknown, i) => {
        if (typeof m !== "object" || m === null) throw new NaradError("invalid_argument", `messages[${i}] is not an object.`);
        const o = m as Record<string, unknown>;
        if (typeof o.payload_base64 !== "string" || !isBase64(o.payload_base64)) {
          throw new NaradError("invalid_argument", `messages[${i}].payload_base64 must be a base64 string.`);
        }
        if (o.key !== undefined && o.key !== null && typeof o.key !== "string") throw new NaradError("invalid_argument", `messages[${i}].key must be a string.`);
        const key = (o.key as string | null | undefined) ?? null;
        checkKey(key, `messages[${i}].key`);
        return { key, payload: Buffer.from(o.payload_base64, "base64") };
      });
    } else {
      throw new NaradError("unsupported_media_type", `Send the batch as application/json or ${BATCH_BINARY_TYPE}, not ${type}.`);
    }
    if (items.length === 0) throw new NaradError("invalid_argument", "The batch has no messages.");
    if (items.length > LIMITS.batchMessagesMax) throw new NaradError("batch_too_large", `A batch holds at most ${LIMITS.batchMessagesMax} messages.`);
    items.forEach((it, i) => {
      if (it.payload.length > LIMITS.messageBytesMax) {
        throw new NaradError("payload_too_large", `messages[${i}] is ${it.payload.length} bytes, over the 1 MiB (${LIMITS.messageBytesMax} bytes) limit; the whole batch was refused.`);
      }
      checkKey(it.key, `messages[${i}].key`);
    });
    return items;
  };

  // ---- consume ----------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/consume", "consume", async (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
    // ?ack=H: ack the previous delivery first, in the same round trip (JetStream's AckNext). A
    // refused ack answers as the ack would have and leases nothing. Once the ack took effect, a
    // consume refused for certain (429 too many waiters, 503) answers 204: the ack is done and
    // nothing was leased, which a definite error would deny. An ambiguous one stays ambiguous.
    const ackHandle = q.get("ack");
    if (ackHandle === "") throw new NaradError("invalid_receipt_handle", "?ack= names no receipt handle.");
    if (ackHandle !== null) await ack(topic, ackHandle, "ack", ctx);
    let d: Delivery | undefined;
    try {
      [d] = await svc.consume(topic, 1, waitMs, abortOnClose(req, res, waitMs), ctx.req);
    } catch (e) {
      if (ackHandle !== null && e instanceof NaradError && e.definite) return sendEmpty(res, 204);
      throw e;
    }
    if (d === undefined) return sendEmpty(res, 204);
    const r = d.record;
    const headers = [
      "content-type", "application/octet-stream",
      "content-length", String(r.payload.length),
      HEADERS.receiptHandle, d.receiptHandle,
      HEADERS.partition, String(d.partition),
      HEADERS.offset, String(d.offset),
      HEADERS.deliveryCount, String(d.deliveryCount),
      HEADERS.producedAt, String(r.producedAtMs),
      HEADERS.owner, d.owner ?? nodeId,
      HEADERS.ownerBoot, d.ownerBoot ?? bootId,
    ];
    if (r.key !== null) headers.push(HEADERS.key, encodeURIComponent(r.key.toString("utf8")));
    head(res, 200, headers);
    res.end(r.payload);
  });
  on("POST", "/v1/topics/:topic/consume/batch", "consume", async (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const max = queryInt(q, "max_messages", 10, 1, LIMITS.consumeBatchMax);
    const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
    const binary = wantsDeliveries(req);
    const ds = await svc.consume(topic, max, waitMs, abortOnClose(req, res, waitMs), ctx.req);
    if (binary) return sendDeliveries(res, ds);
    sendJson(res, 200, { messages: ds.map((d) => toJsonMessage(d, d.owner ?? nodeId, d.ownerBoot ?? bootId)), owner: nodeId, owner_boot: bootId });
  });
  const sendDeliveries = (res: ServerResponse, ds: readonly Delivery[]): void => {
    const body = encodeDeliveries(
      ds.map((d) => ({
        partition: d.partition,
        offset: d.offset,
        deliveryCount: d.deliveryCount,
        producedAtMs: d.record.producedAtMs,
        receiptHandle: d.receiptHandle,
        owner: d.owner ?? nodeId,
        ownerBoot: d.ownerBoot ?? bootId,
        key: d.record.key,
        payload: d.record.payload,
      })),
    );
    head(res, 200, ["content-type", DELIVERIES_TYPE, "content-length", String(body.length), HEADERS.owner, nodeId, HEADERS.ownerBoot, bootId]);
    res.end(body);
  };

  // ---- ack, extend, nack -----------------------------------------------------------------------
  /** Settles one handle; throws the error the ack answers with when it is refused. */
  const ack = async (topic: string, handle: string, action: SettleAction, ctx: Ctx): Promise<void> => {
    const [outcome] = await svc.settle(topic, [handle], action, ctx.req);
    if (outcome instanceof NaradError) throw outcome;
    if (outcome !== 204) throw new NaradError(outcome === 410 ? "receipt_handle_gone" : "invalid_receipt_handle");
  };
  on("POST", "/v1/topics/:topic/ack", "consume", async (_req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const handle = q.get("receipt_handle");
    if (handle === null || handle === "") throw new NaradError("invalid_receipt_handle", "Send the receipt handle as ?receipt_handle=H.");
    await ack(topic, handle, settleAction(q.get("extend")), ctx);
    sendEmpty(res, 204);
  });
  on("POST", "/v1/topics/:topic/ack/batch", "consume", async (req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    const handles = body.receipt_handles;
    if (!Array.isArray(handles) || handles.some((h) => typeof h !== "string")) {
      throw new NaradError("invalid_argument", "The body must be {\"receipt_handles\": [\"...\"], \"extend\"?: true | 0}.");
    }
    if (handles.length > LIMITS.ackBatchMax) throw new NaradError("batch_too_large", `An ack batch holds at most ${LIMITS.ackBatchMax} handles.`);
    const ext = body.extend;
    const action: SettleAction =
      ext === undefined || ext === false || ext === null ? "ack" : ext === true || ext === "true" ? "extend" : ext === 0 || ext === "0" ? "nack" : badExtend();
    const outcomes = await svc.settle(topic, handles as string[], action, ctx.req);
    sendJson(res, 200, { results: outcomes.map((o, i) => ({ receipt_handle: handles[i] as string, status: outcomeStatus(o) })) });
  });

  // ---- replay -----------------------------------------------------------------------------------
  on("GET", "/v1/topics/:topic/partitions/:partition/messages", "consume", async (_req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const partition = partitionParam(p);
    const offset = queryInt(q, "offset", 0, 0, Number.MAX_SAFE_INTEGER);
    const limit = Math.min(queryInt(q, "limit", LIMITS.replayLimitDefault, 1, Number.MAX_SAFE_INTEGER), LIMITS.replayLimitMax);
    const r = await svc.replay(topic, partition, offset, limit, ctx.req);
    if ("json" in r) {
      head(res, 200, ["content-type", "application/json", "content-length", String(r.json.length)]);
      res.end(r.json);
      return;
    }
    sendReplay(res, r);
  });
  const sendReplay = (res: ServerResponse, r: ReplayResult) =>
    sendJson(res, 200, {
      messages: r.records.map((x) => ({
        offset: x.offset,
        key: x.key === null ? null : x.key.toString("utf8"),
        produced_at: x.producedAtMs,
        payload_base64: x.payload.toString("base64"),
      })),
      next_offset: r.nextOffset,
      earliest_offset: r.earliestOffset,
      end_offset: r.endOffset,
    });

  // ---- users and grants --------------------------------------------------------------------------
  const users = opts.users;
  const userParam = (p: Params) => {
    const name = p.name ?? "";
    if (users.get(name) === undefined) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
    return name;
  };
  on("POST", "/v1/users", "admin", async (req, res) => {
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["name", "password"]);
    sendJson(res, 201, await users.addUser(body.name, body.password, opts.nowMs()));
  });
  on("GET", "/v1/users", "admin", (_req, res) => sendJson(res, 200, { users: users.list() }));
  on("PATCH", "/v1/users/:name", "self-or-admin", async (req, res, p) => {
    const name = userParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["password"]);
    await users.setPassword(name, body.password);
    sendJson(res, 200, users.list().find((u) => u.name === name));
  });
  on("DELETE", "/v1/users/:name", "admin", async (_req, res, p) => {
    await users.deleteUser(userParam(p));
    sendEmpty(res, 204);
  });
  on("POST", "/v1/users/:name/grants", "admin", async (req, res, p) => {
    const name = userParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["action", "pattern"]);
    const g = parseGrant(body.action, body.pattern);
    if (typeof g === "string") throw new NaradError("invalid_argument", `${g}.`);
    sendJson(res, 201, await users.addGrant(name, g));
  });
  on("GET", "/v1/users/:name/grants", "admin", (_req, res, p) => sendJson(res, 200, { grants: users.grants(userParam(p)) }));
  on("DELETE", "/v1/users/:name/grants", "admin", async (_req, res, p, q) => {
    const name = userParam(p);
    const g = parseGrant(q.get("action") ?? undefined, q.get("pattern") ?? undefined);
    if (typeof g === "string") throw new NaradError("invalid_argument", `${g}.`);
    await users.revokeGrant(name, g);
    sendEmpty(res, 204);
  });

  // ---- cluster: nodes and moves --------------------------------------------------------------------
  on("GET", "/v1/nodes", "user", (_req, res, _p, _q, ctx) => {
    const visible = (topic: string) => ctx.principal === null || canSee(ctx.principal, topic, svc.listTopics().find((t) => t.name === topic)?.owner ?? null);
    if (cluster === undefined) {
      const partitions = svc.listTopics().filter((t) => visible(t.name)).flatMap((t) => Array.from({ length: t.partitions }, (_, i) => ({ topic: t.name, partition: i, epoch: 0 })));
      return sendJson(res, 200, { nodes: [{ id: nodeId, node_number: 0, advertise_url: null, boot: bootId, state: "live", partitions }] });
    }
    sendJson(res, 200, {
      nodes: cluster.cp.nodes().map((n) => ({
        id: n.id,
        node_number: n.nodeNumber,
        advertise_url: n.advertiseUrl,
        boot: n.bootId,
        state: n.state,
        partitions: cluster.cp
          .ownedBy(n.id)
          .filter((x) => visible(x.topic))
          .map((x) => (x.state === "moving" ? { topic: x.topic, partition: x.partition, epoch: x.epoch, moving_to: x.moveTo } : { topic: x.topic, partition: x.partition, epoch: x.epoch })),
      })),
    });
  });
  on("POST", "/v1/topics/:topic/partitions/:partition/move", "admin", async (req, res, p) => {
    const topic = topicParam(p);
    const partition = partitionParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["to"]);
    if (typeof body.to !== "string" || body.to === "") throw new NaradError("invalid_argument", "Send {\"to\": NODE}, the id of the node to move the partition to.");
    if (cluster === undefined) throw new NaradError("invalid_argument", "Moving partitions needs a cluster (--control-plane); a single node owns every partition.");
    sendJson(res, 200, await cluster.mover.move(topic, partition, body.to));
  });

  // ---- cluster: internal routes (src/cluster/wire.ts) ------------------------------------------------
  if (cluster !== undefined) {
    const cs = cluster.service;
    const mover = cluster.mover;
    /**
     * An internal route: only with the cluster token. A data route also checks the forwarded
     * client's credentials, as the node it reached did; without any (a node's own copy into a
     * child topic, or security off) the token alone stands.
     */
    const internal = (method: "GET" | "POST", path: string, perm: Perm, h: Handler) => {
      router.on(method, INTERNAL_PREFIX + path, (req, res, params) => {
        if (!tokenMatches(cluster.token, req.headers[INTERNAL_HEADERS.token])) throw new NaradError("forbidden", "Internal routes are for the nodes of this cluster.");
        const q = req.url!.indexOf("?");
        const query = new URLSearchParams(q >= 0 ? req.url!.slice(q + 1) : "");
        const rc: RequestContext = { authorization: req.headers.authorization };
        if (opts.authenticator === undefined || perm === "none" || req.headers.authorization === undefined) return h(req, res, params as Params, query, { principal: null, req: rc });
        return opts.authenticator.authenticate(req.headers.authorization).then(async (principal) => {
          await authz(perm, params as Params, principal);
          return h(req, res, params as Params, query, { principal, req: rc });
        });
      });
    };
    internal("POST", "/topics/:topic/partitions/:partition/messages", "produce", async (req, res, p, q) => {
      const key = q.get("key");
      checkKey(key);
      const payload = await readBody(req, LIMITS.messageBytesMax);
      const [r] = await cs.produceLocal(topicParam(p), partitionParam(p), [{ key, payload }]);
      sendJson(res, 202, r);
    });
    internal("POST", "/topics/:topic/partitions/:partition/messages/batch", "produce", async (req, res, p) => {
      const results = await cs.produceLocal(topicParam(p), partitionParam(p), await readBatch(req));
      sendJson(res, 202, { results });
    });
    // Long polls forwarded here, by the id the forwarding node gave them, so it can cancel one
    // without closing the connection: a poll that leased messages as it was cancelled still
    // answers them, and the forwarding node releases them (src/cluster/service.ts).
    const polls = new Map<string, AbortController>();
    internal("POST", "/topics/:topic/consume", "consume", async (req, res, p, q) => {
      const max = queryInt(q, "max_messages", 1, 1, LIMITS.consumeBatchMax);
      const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
      const pollId = q.get("poll");
      let signal = abortOnClose(req, res, waitMs);
      if (pollId !== null && waitMs > 0 && polls.size < LIMITS_POLLS_MAX && !polls.has(pollId)) {
        const ac = new AbortController();
        signal.addEventListener("abort", () => ac.abort(), { once: true });
        polls.set(pollId, ac);
        res.once("close", () => polls.delete(pollId));
        signal = ac.signal;
      }
      sendDeliveries(res, await cs.consumeLocal(topicParam(p), max, waitMs, signal));
    });
    internal("POST", "/polls/:poll/cancel", "none", (_req, res, p) => {
      polls.get(p.poll ?? "")?.abort();
      sendEmpty(res, 204);
    });
    internal("POST", "/topics/:topic/settle", "consume", async (req, res, p) => {
      const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
      const handles = body.receipt_handles;
      const action = body.action;
      if (!Array.isArray(handles) || handles.some((h) => typeof h !== "string") || handles.length > LIMITS.ackBatchMax) throw new NaradError("invalid_argument", "receipt_handles must be an array of strings.");
      if (action !== "ack" && action !== "extend" && action !== "nack" && action !== "release") throw new NaradError("invalid_argument", "action must be ack, extend, nack or release.");
      const outcomes = await cs.settleLocal(topicParam(p), handles as string[], action as LocalSettleAction);
      sendJson(res, 200, { statuses: outcomes.map(outcomeStatus) });
    });
    internal("GET", "/topics/:topic/partitions/:partition/messages", "consume", async (_req, res, p, q) => {
      const offset = queryInt(q, "offset", 0, 0, Number.MAX_SAFE_INTEGER);
      const limit = Math.min(queryInt(q, "limit", LIMITS.replayLimitDefault, 1, Number.MAX_SAFE_INTEGER), LIMITS.replayLimitMax);
      sendReplay(res, await cs.replayLocal(topicParam(p), partitionParam(p), offset, limit));
    });
    internal("POST", "/topics/:topic/cursors", "manage", async (req, res, p) => {
      const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
      const parts = body.partitions;
      if (typeof body.child !== "string" || typeof body.set !== "boolean" || !Array.isArray(parts) || parts.some((x) => !Number.isSafeInteger(x))) {
        throw new NaradError("invalid_argument", "The body must be {\"child\", \"partitions\": [...], \"set\": true | false}.");
      }
      await cs.setCursorsLocal(topicParam(p), body.child, parts as number[], body.set);
      sendEmpty(res, 204);
    });
    internal("POST", "/sync", "none", async (req, res) => {
      const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
      const targets = body.targets;
      if (!Array.isArray(targets) || targets.some((t) => typeof t !== "string")) throw new NaradError("invalid_argument", "targets must be an array of strings.");
      await cs.sync(targets as string[]);
      sendEmpty(res, 204);
    });
    internal("POST", "/moves", "none", async (req, res) => {
      const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
      if (typeof body.topic !== "string" || !Number.isSafeInteger(body.partition)) throw new NaradError("invalid_argument", "The body must be {\"topic\", \"partition\"}.");
      sendJson(res, 200, await mover.drive(body.topic, body.partition as number));
    });
    internal("POST", "/partitions/:topic/:partition/freeze", "none", async (_req, res, p, q) => {
      await cs.freeze(topicParam(p), partitionParam(p), queryInt(q, "epoch", 0, 1, Number.MAX_SAFE_INTEGER), q.get("to") ?? "");
      sendEmpty(res, 204);
    });
    internal("GET", "/partitions/:topic/:partition/files", "none", async (_req, res, p, q) => {
      const files = await mover.localManifest(topicParam(p), partitionParam(p), queryInt(q, "epoch", 0, 1, Number.MAX_SAFE_INTEGER), q.get("final") === "1");
      sendJson(res, 200, { files });
    });
    internal("GET", "/partitions/:topic/:partition/files/:name", "none", async (_req, res, p, q) => {
      const path = await mover.localFile(topicParam(p), partitionParam(p), queryInt(q, "epoch", 0, 1, Number.MAX_SAFE_INTEGER), p.name ?? "", q.get("final") === "1");
      const from = queryInt(q, "from", 0, 0, Number.MAX_SAFE_INTEGER);
      const stream = createReadStream(path, { start: from });
      await new Promise<void>((resolve, reject) => {
        stream.once("open", () => resolve());
        stream.once("error", (e: NodeJS.ErrnoException) => reject(e.code === "ENOENT" ? new NaradError("not_found", `No file ${p.name} in the partition.`) : e));
      });
      head(res, 200, ["content-type", "application/octet-stream"]);
      await pipeline(stream, res);
    });
  }

  // Every answer names the node and its boot: the send functions below put these first in the
  // header list they give writeHead. (Not res.setHeader here: once any header is set that way,
  // Node sends every later one through setHeader's checks too, which cost more than the route.)
  const identityHeaders: readonly string[] = [HEADERS.node, nodeId, HEADERS.boot, bootId];
  const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    (res as Answer)[IDENTITY] = identityHeaders;
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

function toJsonMessage(d: Delivery, owner: string, ownerBoot: string): ConsumedMessageJson {
  const r = d.record;
  return {
    receipt_handle: d.receiptHandle,
    partition: d.partition,
    offset: d.offset,
    key: r.key === null ? null : r.key.toString("utf8"),
    delivery_count: d.deliveryCount,
    produced_at: r.producedAtMs,
    payload_base64: r.payload.toString("base64"),
    owner,
    owner_boot: ownerBoot,
  };
}

/** True when the client asked for the binary consume/batch answer (Accept names DELIVERIES_TYPE). */
function wantsDeliveries(req: IncomingMessage): boolean {
  const a = req.headers.accept;
  return a !== undefined && a.includes(DELIVERIES_TYPE);
}

const IDENTITY = Symbol("narad.identityHeaders");
type Answer = ServerResponse & { [IDENTITY]?: readonly string[] };

/** writeHead with the node's identity headers first; `headers` is a flat [name, value, ...] list. */
function head(res: ServerResponse, status: number, headers: string[] = []): void {
  const id = (res as Answer)[IDENTITY];
  res.writeHead(status, id === undefined ? headers : [...id, ...headers]);
}

function sendJson(res: ServerResponse, status: number, body: unknown, extra: string[] = []): void {
  const bytes = Buffer.from(JSON.stringify(body)); // encoded once (not measured as a string, then encoded again)
  head(res, status, ["content-type", "application/json", "content-length", String(bytes.length), ...extra]);
  res.end(bytes);
}

function sendEmpty(res: ServerResponse, status: number): void {
  head(res, status);
  res.end();
}

function sendError(res: ServerResponse, e: NaradError): void {
  const extra: string[] = [];
  if (e.retryAfterS !== undefined) extra.push("retry-after", String(e.retryAfterS));
  if (e.status === 401) extra.push("www-authenticate", 'Basic realm="narad"');
  sendJson(res, e.status, e.toBody(), extra);
}

/** Never aborted: what a consume that does not wait gets, since it has nothing to give up. */
const NEVER_ABORTED = new AbortController().signal;

/** Aborts a long poll when its client goes away; a consume with wait_ms 0 needs none (the cost shows). */
function abortOnClose(req: IncomingMessage, res: ServerResponse, waitMs: number): AbortSignal {
  if (waitMs === 0) return NEVER_ABORTED;
  const ac = new AbortController();
  res.once("close", () => {
    if (!res.writableFinished) ac.abort();
  });
  void req;
  return ac.signal;
}

function partitionParam(p: Params): number {
  const ps = p.partition ?? "";
  if (!/^\d{1,5}$/.test(ps)) throw new NaradError("invalid_argument", `Partition ${JSON.stringify(ps)} is not a partition number.`);
  return Number(ps);
}

function outcomeStatus(o: SettleOutcome): number {
  return o instanceof NaradError ? o.status : o;
}

function topicParam(p: Params): string {
  const name = p.topic ?? "";
  if (!TOPIC_NAME_RE.test(name)) throw new NaradError("invalid_topic_name", `${JSON.stringify(name)} is not a valid topic name.`);
  return name;
}

function asObject(v: unknown): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new NaradError("invalid_argument", "The body must be a JSON object.");
  return v as Record<string, unknown>;
}

function onlyFields(o: Record<string, unknown>, allowed: string[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new NaradError("invalid_argument", `Unknown field ${JSON.stringify(k)}; allowed: ${allowed.join(", ")}.`);
  }
}

function optInt(o: Record<string, unknown>, field: string, min: number, max: number): number | undefined {
  const v = o[field];
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min || v > max) {
    throw new NaradError("invalid_argument", `${field} must be an integer from ${min} to ${max}, not ${JSON.stringify(v)}.`);
  }
  return v;
}

function queryInt(q: URLSearchParams, name: string, dflt: number, min: number, max: number): number {
  const s = q.get(name);
  if (s === null || s === "") return dflt;
  if (!/^\d{1,16}$/.test(s)) throw new NaradError("invalid_argument", `${name} must be an integer from ${min} to ${max}, not ${JSON.stringify(s)}.`);
  const v = Number(s);
  if (v < min || v > max) throw new NaradError("invalid_argument", `${name} must be from ${min} to ${max}, not ${v}.`);
  return v;
}

function settleAction(extend: string | null): SettleAction {
  if (extend === null) return "ack";
  if (extend === "true") return "extend";
  if (extend === "0") return "nack";
  return badExtend();
}

function badExtend(): never {
  throw new NaradError("invalid_argument", "extend must be true (restart the lease) or 0 (end it now).");
}

function checkKey(key: string | null, what = "key"): void {
  if (key !== null && Buffer.byteLength(key) > LIMITS.keyBytesMax) {
    throw new NaradError("invalid_argument", `${what} is over ${LIMITS.keyBytesMax} bytes.`);
  }
}

function isBase64(s: string): boolean {
  return s.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(s);
}
