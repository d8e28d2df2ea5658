// The SQL of users and grants, the writes of UserStoreApi (the reads are the cached view's).
// Passwords are hashed here, before the transaction, with the single node's hashPassword, so a
// slow scrypt never holds a row lock. A duplicate user is decided by the primary key. Grant
// changes read the row FOR UPDATE, so two nodes adding grants at once both land; adding a grant
// that exists changes nothing in the list but still moves the generation. Every write NOTIFYs
// `user:NAME` and bumps the row's version, which is the generation the Authenticator's cache of
// password checks is keyed on. A user's id (what topics record their owner by) is given here, at
// the insert, and never changes.

import type pg from "pg";
import { USER_NAME_RE, type Grant } from "../../auth/model.js";
import { checkPassword, hashPassword, newUserId } from "../../auth/store.js";
import type { UserSummary } from "../../auth/user-store-api.js";
import { NaradError } from "../../protocol/errors.js";
import { isUniqueViolation } from "../errors.js";
import type { Write } from "./connections.js";
import { userNotFound } from "./model.js";

export async function addUser(write: Write, name: unknown, password: unknown, nowMs: number, grants: Grant[] = []): Promise<UserSummary> {
  if (typeof name !== "string" || !USER_NAME_RE.test(name)) throw new NaradError("invalid_argument", `User names match ${USER_NAME_RE.source}.`);
  const hash = await hashPassword(checkPassword(password));
  await write([`user:${name}`], async (c) => {
    try {
      await c.query(`INSERT INTO narad.users (name, id, password, grants, created_at, version) VALUES ($1, $2, $3::jsonb, $4::jsonb, $5, nextval('narad.change_seq'))`, [
        name,
        newUserId(),
        JSON.stringify(hash),
        JSON.stringify(grants),
        nowMs,
      ]);
    } catch (e) {
      if (isUniqueViolation(e)) throw new NaradError("user_exists", `User ${JSON.stringify(name)} exists already.`);
      throw e;
    }
  });
  return { name, created_at: nowMs };
}

export async function setPassword(write: Write, name: string, password: unknown): Promise<void> {
  const hash = await hashPassword(checkPassword(password));
  await write([`user:${name}`], async (c) => {
    const r = await c.query("UPDATE narad.users SET password = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(hash)]);
    if (r.rowCount === 0) throw userNotFound(name);
  });
}

export async function deleteUser(write: Write, name: string): Promise<void> {
  await write([`user:${name}`], async (c) => {
    const r = await c.query("DELETE FROM narad.users WHERE name = $1", [name]);
    if (r.rowCount === 0) throw userNotFound(name);
  });
}

/** Idempotent: a grant already held is not added twice. */
export async function addGrant(write: Write, name: string, g: Grant): Promise<Grant> {
  const grant: Grant = { action: g.action, pattern: g.pattern };
  await write([`user:${name}`], async (c) => {
    const grants = await lockGrants(c, name);
    if (!grants.some((x) => x.action === grant.action && x.pattern === grant.pattern)) grants.push(grant);
    await c.query("UPDATE narad.users SET grants = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(grants)]);
  });
  return grant;
}

export async function revokeGrant(write: Write, name: string, g: Grant): Promise<void> {
  await write([`user:${name}`], async (c) => {
    const grants = await lockGrants(c, name);
    const i = grants.findIndex((x) => x.action === g.action && x.pattern === g.pattern);
    if (i < 0) throw new NaradError("grant_not_found", `User ${name} has no grant ${g.action}${g.pattern ? ` on ${g.pattern}` : ""}.`);
    grants.splice(i, 1);
    await c.query("UPDATE narad.users SET grants = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(grants)]);
  });
}

async function lockGrants(c: pg.PoolClient, name: string): Promise<Grant[]> {
  const r = await c.query<{ grants: Grant[] }>("SELECT grants FROM narad.users WHERE name = $1 FOR UPDATE", [name]);
  if (r.rows.length === 0) throw userNotFound(name);
  return r.rows[0]!.grants;
}
