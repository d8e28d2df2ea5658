// Users and their grants: admins add, list and delete users and grant or revoke actions on topic
// patterns; a user may change their own password (self-or-admin, src/http/authz.ts). Passwords
// and grants are checked by the user store (src/auth), which answers the error table's codes.

import type { UserStoreApi } from "../../auth/user-store-api.js";
import { parseGrant } from "../../auth/model.js";
import { NaradError } from "../../protocol/errors.js";
import { LIMITS } from "../../protocol/wire.js";
import { readJson } from "../body.js";
import { asObject, onlyFields, shown, type Params } from "../params.js";
import { sendEmpty, sendJson } from "../respond.js";
import type { RouteDeps } from "../router.js";

export function userRoutes({ on, audit }: RouteDeps, users: UserStoreApi, nowMs: () => number): void {
  const userParam = (p: Params) => {
    const name = p.name ?? "";
    if (users.get(name) === undefined) throw new NaradError("user_not_found", `No user ${shown(name)}.`);
    return name;
  };
  on("POST", "/v1/users", "admin", async (req, res, _p, _q, ctx) => {
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["name", "password"]);
    const u = await users.addUser(body.name, body.password, nowMs());
    audit(ctx, "user.create", { user: u.name });
    sendJson(res, 201, u);
  });
  on("GET", "/v1/users", "admin", (_req, res) => sendJson(res, 200, { users: users.list() }));
  on("PATCH", "/v1/users/:name", "self-or-admin", async (req, res, p, _q, ctx) => {
    const name = userParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["password"]);
    await users.setPassword(name, body.password);
    audit(ctx, "user.password", { user: name });
    sendJson(res, 200, users.list().find((u) => u.name === name));
  });
  on("DELETE", "/v1/users/:name", "admin", async (_req, res, p, _q, ctx) => {
    const name = userParam(p);
    await users.deleteUser(name);
    audit(ctx, "user.delete", { user: name });
    sendEmpty(res, 204);
  });
  on("POST", "/v1/users/:name/grants", "admin", async (req, res, p, _q, ctx) => {
    const name = userParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["action", "pattern"]);
    const g = parseGrant(body.action, body.pattern);
    if (typeof g === "string") throw new NaradError("invalid_argument", `${g}.`);
    const added = await users.addGrant(name, g);
    audit(ctx, "grant.add", { user: name, grant: g.action, pattern: g.pattern });
    sendJson(res, 201, added);
  });
  on("GET", "/v1/users/:name/grants", "admin", (_req, res, p) => sendJson(res, 200, { grants: users.grants(userParam(p)) }));
  on("DELETE", "/v1/users/:name/grants", "admin", async (_req, res, p, q, ctx) => {
    const name = userParam(p);
    const g = parseGrant(q.get("action") ?? undefined, q.get("pattern") ?? undefined);
    if (typeof g === "string") throw new NaradError("invalid_argument", `${g}.`);
    await users.revokeGrant(name, g);
    audit(ctx, "grant.revoke", { user: name, grant: g.action, pattern: g.pattern });
    sendEmpty(res, 204);
  });
}
