// The authorization policy of the API: which grant each route needs (its Perm, named where the
// route is registered) and how a principal is checked against it. Authentication (who is asking)
// is src/auth; this decides what they may do. A refusal is 403 forbidden naming the user and what
// they may not do; a topic that does not exist is 404 only once the principal may see it, so a
// user cannot learn which names exist by probing.
//
// Two rules are not a Perm: creating a topic is checked in its handler (the name is in the body),
// and attaching a child checks the child as well as the parent (src/http/routes/topics.ts).

import type { Service } from "../broker/service.js";
import { allows, canManage, canSee, isAdmin, type Principal } from "../auth/model.js";
import { NaradError } from "../protocol/errors.js";
import { topicParam, type Params } from "./params.js";

/**
 * What a route needs. `none`: no credentials (probes). `user`: any valid user. `admin`.
 * `produce` / `consume`: a matching grant on the path's topic. `see`: any matching grant, owner
 * or admin. `manage`: the topic's owner (by user id) or an admin. `self-or-admin`: the path's user or an admin.
 */
export type Perm = "none" | "user" | "admin" | "produce" | "consume" | "see" | "manage" | "self-or-admin";

/** Resolves if `principal` may do what `perm` names on the route's parameters `p`; throws forbidden (or topic_not_found) otherwise. */
export async function authorize(svc: Service, perm: Perm, p: Params, principal: Principal): Promise<void> {
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
      let ownerId: string | null = null;
      let exists = true;
      try {
        ownerId = (await svc.getTopic(topic)).owner_id;
      } catch (e) {
        if (!(e instanceof NaradError) || e.code !== "topic_not_found") throw e;
        exists = false;
      }
      const ok = perm === "see" ? canSee(principal, topic, ownerId) : canManage(principal, ownerId);
      if (!ok) throw forbidden(perm === "see" ? `see topic ${topic}` : `change or delete topic ${topic} (its owner or an admin may)`);
      if (!exists) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist; create it first.`);
      return;
    }
  }
}
