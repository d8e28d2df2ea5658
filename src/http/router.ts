// How a request reaches its handler. A resource's module registers each route with the Perm it
// needs (src/http/authz.ts); the wrapper made here once per route authenticates the request
// (src/auth), checks the Perm and hands the handler the parsed query and who is asking. With
// security off (--dev, no authenticator) and on the probes, no credentials are read at all.
//
// The cluster's internal routes are mounted here too (ordering invariant 10 of
// docs/architecture.md: internal routes never forward; they are written in
// src/cluster/internal-routes.ts). They need the cluster token first; a data route then checks
// the forwarded client's credentials, as the node it reached did; without any (a node's own
// copy into a child topic, or security off) the token alone stands.

import type { IncomingMessage, ServerResponse } from "node:http";
import type FindMyWay from "find-my-way";
import type { Authenticator } from "../auth/authenticator.js";
import type { Principal } from "../auth/model.js";
import type { RequestContext, Service } from "../broker/service.js";
import { NaradError } from "../protocol/errors.js";
import { authorize, type Perm } from "./authz.js";
import type { InternalRouteKit, InternalRoutes } from "./cluster.js";
import type { Params } from "./params.js";

export type Router = FindMyWay.Instance<FindMyWay.HTTPVersion.V1>;
export type Method = "GET" | "POST" | "PATCH" | "DELETE";

export interface Ctx {
  /** null with security off, and for a node's own internal requests. */
  principal: Principal | null;
  /** What an owner elsewhere must see of this request. */
  req: RequestContext;
}

export type Handler = (req: IncomingMessage, res: ServerResponse, params: Params, query: URLSearchParams, ctx: Ctx) => Promise<void> | void;

/** What a public route keeps in the router: its name in metrics (narad_http_requests_total's route). */
export interface RouteStore {
  route: string;
}

/** Registers a public route behind the Perm it needs. */
export type On = (method: Method, path: string, perm: Perm, h: Handler) => void;

/** What a resource's module is given to register its routes. */
export interface RouteDeps {
  on: On;
  svc: Service;
  nodeId: string;
  bootId: string;
  /**
   * One audit line (module "audit", docs/operations.md "Logs") for a change of topics, users or
   * grants: what, by whom, on what. Never a password. They left no line at all.
   */
  audit: (ctx: Ctx, action: string, fields: Record<string, unknown>) => void;
}

export function publicRoutes(router: Router, svc: Service, authenticator: Authenticator | undefined): On {
  return (method, path, perm, h) => {
    router.on(method, path, (req, res, params) => {
      const q = req.url!.indexOf("?");
      const query = new URLSearchParams(q >= 0 ? req.url!.slice(q + 1) : "");
      const rc: RequestContext = { authorization: req.headers.authorization };
      if (authenticator === undefined || perm === "none") return h(req, res, params as Params, query, { principal: null, req: rc });
      return authenticator.authenticate(req.headers.authorization, req.socket.remoteAddress).then(async (principal) => {
        await authorize(svc, perm, params as Params, principal);
        return h(req, res, params as Params, query, { principal, req: { ...rc, user: { name: principal.name, id: principal.id } } });
      });
    }, { route: `${method} ${path}` } satisfies RouteStore);
  };
}

/** Mounts the cluster's internal routes under their prefix: the token, then the forwarded credentials. */
export function mountInternal(router: Router, svc: Service, authenticator: Authenticator | undefined, internal: InternalRoutes, kit: InternalRouteKit): void {
  for (const route of internal.routes(kit)) {
    const { perm, handler: h } = route;
    router.on(route.method, internal.prefix + route.path, (req, res, params) => {
      if (!internal.fromPeer(req)) throw new NaradError("forbidden", "Internal routes are for the nodes of this cluster.");
      const q = req.url!.indexOf("?");
      const query = new URLSearchParams(q >= 0 ? req.url!.slice(q + 1) : "");
      if (authenticator === undefined || perm === "none" || req.headers.authorization === undefined) return h(req, res, params as Params, query);
      return authenticator.authenticate(req.headers.authorization, req.socket.remoteAddress).then(async (principal) => {
        await authorize(svc, perm, params as Params, principal);
        return h(req, res, params as Params, query);
      });
    });
  }
}
