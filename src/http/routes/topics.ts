// Topics and their children: create, list, read, change and delete a topic; attach, list and
// detach a child topic (fanout, delay, replica, or remote in another cluster). Who may: any user
// with a create grant creates (checked here, as the name is in the body) and owns what they
// create; its owner or an admin changes, deletes and attaches (src/http/authz.ts).
//
// A topic records its owner by user id; the wire shows the owner's name, and `null` once that
// user is deleted (docs/security.md): a user created later with the same name is another user,
// who neither owns the topic nor is shown as its owner.

import { allows, canManage, canSee, type Principal } from "../../auth/model.js";
import type { Service } from "../../broker/service.js";
import { redrive } from "../../broker/redrive.js";
import type { UserStoreApi } from "../../auth/user-store-api.js";
import type { TopicInfo } from "../../broker/service.js";
import { NaradError } from "../../protocol/errors.js";
import { LIMITS, TOPIC_NAME_RE, type TopicJson } from "../../protocol/wire.js";
import { authorize } from "../authz.js";
import { readJson } from "../body.js";
import { asObject, onlyFields, optAcks, optDeadLetters, optInt, shown, topicParam } from "../params.js";
import { sendEmpty, sendJson } from "../respond.js";
import type { RouteDeps } from "../router.js";

/** A topic as the wire shows it: the owner's name while that user exists, else null; no id. */
export function topicAnswer(t: TopicInfo, users: UserStoreApi): TopicJson {
  const { owner_id: ownerId, ...json } = t;
  const owned = json.owner !== null && ownerId !== null && users.get(json.owner)?.id === ownerId;
  return { ...json, owner: owned ? json.owner : null };
}

/**
 * Naming a dead_letter_topic sends messages into it (the broker's moves, a consumer's
 * dead_letter=true), so the user who names it must be allowed to produce there: a produce grant on
 * it, or owning it. A topic that does not exist answers as one without rights would (403) unless
 * a grant covers the name, so the answer does not tell which names exist.
 */
async function mayDeadLetterInto(svc: Service, principal: Principal | null, dlq: unknown): Promise<void> {
  if (principal === null || typeof dlq !== "string" || allows(principal, "produce", dlq)) return;
  const ownerId = await svc.getTopic(dlq).then(
    (t) => t.owner_id,
    () => null,
  );
  if (!canManage(principal, ownerId)) {
    throw new NaradError("forbidden", `User ${principal.name} may not name ${dlq} as a dead_letter_topic: that needs produce on it (or owning it); ask an admin for a grant.`);
  }
}

export function topicRoutes({ on, svc, audit }: RouteDeps, users: UserStoreApi): void {
  on("POST", "/v1/topics", "user", async (req, res, _p, _q, ctx) => {
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    const name = body.name;
    if (name === undefined) throw new NaradError("invalid_topic_name", 'The topic\'s "name" is required: {"name": "orders"}; it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$.');
    if (typeof name !== "string" || !TOPIC_NAME_RE.test(name)) {
      throw new NaradError("invalid_topic_name", `Topic name ${shown(name)} is not valid: it must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$.`);
    }
    if (ctx.principal !== null && !allows(ctx.principal, "create", name)) {
      throw new NaradError("forbidden", `User ${ctx.principal.name} may not create topic ${name}; ask an admin for a create grant.`);
    }
    onlyFields(body, ["name", "partitions", "visibility_timeout_ms", "retention_ms", "replication_factor", "acks", "max_deliveries", "dead_letter_topic"]);
    await mayDeadLetterInto(svc, ctx.principal, body.dead_letter_topic);
    const replicationFactor = optInt(body, "replication_factor", 1, LIMITS.replicationFactorMax);
    const acks = optAcks(body);
    if (acks === "quorum" && (replicationFactor ?? 1) === 1) {
      throw new NaradError("invalid_argument", 'acks "quorum" needs replication_factor 2 or more (with one copy, the leader\'s fsync is the only one).');
    }
    const topic = await svc.createTopic(
      {
        name,
        partitions: optInt(body, "partitions", 1, LIMITS.partitionsMax),
        visibility_timeout_ms: optInt(body, "visibility_timeout_ms", LIMITS.visibilityTimeoutMsMin, LIMITS.visibilityTimeoutMsMax),
        retention_ms: optInt(body, "retention_ms", LIMITS.retentionMsMin, LIMITS.retentionMsMax),
        replication_factor: replicationFactor,
        acks,
        ...optDeadLetters(body),
      },
      ctx.principal === null ? null : { name: ctx.principal.name, id: ctx.principal.id },
    );
    audit(ctx, "topic.create", { topic: name, partitions: topic.partitions });
    sendJson(res, 201, topicAnswer(topic, users));
  });
  on("GET", "/v1/topics", "user", (_req, res, _p, _q, ctx) =>
    sendJson(res, 200, {
      topics: svc
        .listTopics()
        .filter((t) => ctx.principal === null || canSee(ctx.principal, t.name, t.owner_id))
        .map((t) => topicAnswer(t, users)),
    }),
  );
  on("GET", "/v1/topics/:topic", "see", async (_req, res, p) => {
    const name = topicParam(p);
    const topic = topicAnswer(await svc.getTopic(name), users);
    sendJson(res, 200, svc.topicStats === undefined ? topic : { ...topic, stats: await svc.topicStats(name) });
  });
  on("POST", "/v1/topics/:topic/purge", "manage", async (_req, res, p, _q, ctx) => {
    if (svc.purgeTopic === undefined) throw new NaradError("not_implemented", "Purge is not built for a cluster yet; nothing was purged.");
    const topic = topicParam(p);
    const purged = await svc.purgeTopic(topic);
    audit(ctx, "topic.purge", { topic, purged });
    sendJson(res, 200, { purged });
  });
  on("PATCH", "/v1/topics/:topic", "manage", async (req, res, p, _q, ctx) => {
    const name = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["partitions", "visibility_timeout_ms", "retention_ms", "acks", "max_deliveries", "dead_letter_topic"]);
    await mayDeadLetterInto(svc, ctx.principal, body.dead_letter_topic);
    const topic = await svc.updateTopic(name, {
      ...optDeadLetters(body),
      acks: optAcks(body),
      partitions: optInt(body, "partitions", 1, LIMITS.partitionsMax),
      visibility_timeout_ms: optInt(body, "visibility_timeout_ms", LIMITS.visibilityTimeoutMsMin, LIMITS.visibilityTimeoutMsMax),
      retention_ms: optInt(body, "retention_ms", LIMITS.retentionMsMin, LIMITS.retentionMsMax),
    });
    audit(ctx, "topic.update", { topic: name, change: body });
    sendJson(res, 200, topicAnswer(topic, users));
  });
  // Redrive (src/broker/redrive.ts): consume on the dead-letter topic (this route's Perm), and
  // produce on each target, checked as a produce route would be.
  on("POST", "/v1/topics/:topic/redrive", "consume", async (req, res, p, _q, ctx) => {
    const dlq = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["max_messages", "to"]);
    const maxMessages = optInt(body, "max_messages", 1, LIMITS.redriveMessagesMax) ?? LIMITS.redriveMessagesDefault;
    const to = body.to;
    if (to !== undefined && (typeof to !== "string" || !TOPIC_NAME_RE.test(to))) throw new NaradError("invalid_topic_name", `to ${shown(to)} is not a topic name.`);
    if (to === dlq) throw new NaradError("invalid_argument", "to names the dead-letter topic itself; name the topic to produce its messages to.");
    const mayProduce = async (topic: string) => {
      if (ctx.principal !== null) await authorize(svc, "produce", { topic }, ctx.principal);
      await svc.checkTopic(topic);
    };
    await svc.checkTopic(dlq);
    if (to !== undefined) await mayProduce(to);
    sendJson(res, 200, await redrive(svc, dlq, { maxMessages, ...(to !== undefined ? { to } : {}), mayProduce }, ctx.req));
  });
  on("DELETE", "/v1/topics/:topic", "manage", async (_req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    await svc.deleteTopic(topic);
    audit(ctx, "topic.delete", { topic });
    sendEmpty(res, 204);
  });

  // ---- child topics ------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/children", "manage", async (req, res, p, _q, ctx) => {
    const parent = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["topic", "kind", "delay_ms", "url", "credentials"]);
    const child = body.topic;
    if (typeof child !== "string" || !TOPIC_NAME_RE.test(child)) throw new NaradError("invalid_topic_name", `The child topic ${shown(child)} is not a valid topic name.`);
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
      if (ctx.principal !== null && kind !== "replica") await authorize(svc, "manage", { topic: child }, ctx.principal);
    }
    const link = await svc.attachChild(parent, {
      topic: child,
      kind,
      ...(kind === "delay" ? { delay_ms: body.delay_ms as number } : {}),
      ...(url !== undefined ? { url } : {}),
      ...(credentials !== undefined ? { credentials } : {}),
    }, ctx.req);
    audit(ctx, "child.attach", { topic: parent, child, kind, ...(url !== undefined ? { url } : {}) });
    sendJson(res, 201, link);
  });
  on("GET", "/v1/topics/:topic/children", "see", async (_req, res, p) => sendJson(res, 200, { children: await svc.listChildren(topicParam(p)) }));
  on("DELETE", "/v1/topics/:topic/children/:child", "manage", async (_req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    await svc.detachChild(topic, p.child ?? "", ctx.req);
    audit(ctx, "child.detach", { topic, child: p.child ?? "" });
    sendEmpty(res, 204);
  });
}
