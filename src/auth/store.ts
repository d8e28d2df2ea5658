// Users and grants of one node, in DATA/security/users.json, written atomically (temp file,
// fsync, rename, directory fsync) after every change and before the change is answered.
// Passwords are kept only as scrypt hashes. Each user has an id, given at creation and kept with
// it (topics record their owner by it); a file written before ids existed gets one per user at
// the first start that reads it, written back before the node serves. In a cluster the same data moves into the control
// plane (src/cluster/control-plane.ts); both implement UserStoreApi (./user-store-api.ts), which is what the HTTP layer
// and the authenticator see.

import { randomBytes, scrypt as scryptCb, timingSafeEqual, type ScryptOptions } from "node:crypto";
import { mkdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../platform/files.js";
import { NaradError } from "../protocol/errors.js";
import type { UserStoreApi } from "./user-store-api.js";
import { PASSWORD_BYTES_MAX, PASSWORD_BYTES_MIN, USER_ID_RE, USER_NAME_RE, type Grant, isAction } from "./model.js";

/** scrypt cost: N = 2^14, r = 8, p = 1 (16 MiB, ~50 ms here); recorded per hash so it can change. */
const SCRYPT = { N: 16384, r: 8, p: 1, keylen: 32 } as const;

interface PasswordHash {
  alg: "scrypt";
  n: number;
  r: number;
  p: number;
  salt_b64: string;
  hash_b64: string;
}

interface UserRecord {
  id: string;
  password: PasswordHash;
  created_at: number;
  grants: Grant[];
}

interface FileShape {
  version: 1;
  users: Record<string, UserRecord>;
}

function scrypt(password: Buffer, salt: Buffer, keylen: number, opts: ScryptOptions): Promise<Buffer> {
  return new Promise((res, rej) => scryptCb(password, salt, keylen, opts, (e, k) => (e ? rej(e) : res(k))));
}

/** A new user's id: 16 random bytes, hex (USER_ID_RE); never reused, whatever the user's name. */
export function newUserId(): string {
  return randomBytes(16).toString("hex");
}

export async function hashPassword(password: string): Promise<PasswordHash> {
  const salt = randomBytes(16);
  const hash = await scrypt(Buffer.from(password, "utf8"), salt, SCRYPT.keylen, { N: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, maxmem: 64 * 1024 * 1024 });
  return { alg: "scrypt", n: SCRYPT.N, r: SCRYPT.r, p: SCRYPT.p, salt_b64: salt.toString("base64"), hash_b64: hash.toString("base64") };
}

export async function verifyPassword(h: PasswordHash, password: string): Promise<boolean> {
  const expected = Buffer.from(h.hash_b64, "base64");
  const got = await scrypt(Buffer.from(password, "utf8"), Buffer.from(h.salt_b64, "base64"), expected.length, { N: h.n, r: h.r, p: h.p, maxmem: 64 * 1024 * 1024 });
  return got.length === expected.length && timingSafeEqual(got, expected);
}

export function checkPassword(password: unknown): string {
  if (typeof password !== "string") throw new NaradError("invalid_argument", "password must be a string.");
  const n = Buffer.byteLength(password);
  if (n < PASSWORD_BYTES_MIN || n > PASSWORD_BYTES_MAX) {
    throw new NaradError("invalid_argument", `password must be ${PASSWORD_BYTES_MIN} to ${PASSWORD_BYTES_MAX} bytes.`);
  }
  return password;
}

export class UserStore implements UserStoreApi {
  private data: FileShape = { version: 1, users: {} };
  /** Bumped on every change of a user, so cached authentications of the old state die at once. */
  private readonly generations = new Map<string, number>();
  private generationSeq = 0;
  private chain: Promise<unknown> = Promise.resolve();

  private constructor(private readonly path: string) {}

  static async open(dataDir: string): Promise<UserStore> {
    const dir = join(dataDir, "security");
    await mkdir(dir, { recursive: true });
    const s = new UserStore(join(dir, "users.json"));
    let text: string | undefined;
    try {
      text = await readFile(s.path, "utf8");
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    if (text !== undefined) s.data = parseFile(text, s.path);
    // Written before users had ids: give each one now, durably, before anything is served.
    const legacy = Object.values(s.data.users).filter((u) => u.id === undefined);
    if (legacy.length > 0) {
      for (const u of legacy) u.id = newUserId();
      await writeFileAtomic(s.path, JSON.stringify(s.data, null, 2) + "\n");
    }
    for (const name of Object.keys(s.data.users)) s.generations.set(name, ++s.generationSeq);
    return s;
  }

  get userCount(): number {
    return Object.keys(this.data.users).length;
  }

  generation(name: string): number | undefined {
    return this.generations.get(name);
  }

  get(name: string): UserRecord | undefined {
    return Object.prototype.hasOwnProperty.call(this.data.users, name) ? this.data.users[name] : undefined;
  }

  list(): { name: string; created_at: number }[] {
    return Object.entries(this.data.users)
      .map(([name, u]) => ({ name, created_at: u.created_at }))
      .sort((a, b) => a.name.localeCompare(b.name));
  }

  grants(name: string): Grant[] {
    const u = this.get(name);
    if (u === undefined) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
    return u.grants;
  }

  /** Serialises changes, each persisted before it resolves. */
  private change<T>(fn: (next: FileShape) => T, touched: string): Promise<T> {
    const run = this.chain.then(async () => {
      const next = structuredClone(this.data);
      const r = fn(next);
      await writeFileAtomic(this.path, JSON.stringify(next, null, 2) + "\n");
      this.data = next;
      if (Object.prototype.hasOwnProperty.call(next.users, touched)) this.generations.set(touched, ++this.generationSeq);
      else this.generations.delete(touched);
      return r;
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  async addUser(name: unknown, password: unknown, nowMs: number, grants: Grant[] = []): Promise<{ name: string; created_at: number }> {
    if (typeof name !== "string" || !USER_NAME_RE.test(name)) {
      throw new NaradError("invalid_argument", `User names match ${USER_NAME_RE.source}.`);
    }
    const hash = await hashPassword(checkPassword(password));
    return this.change((next) => {
      if (Object.prototype.hasOwnProperty.call(next.users, name)) throw new NaradError("user_exists", `User ${JSON.stringify(name)} exists already.`);
      next.users[name] = { id: newUserId(), password: hash, created_at: nowMs, grants };
      return { name, created_at: nowMs };
    }, name);
  }

  async setPassword(name: string, password: unknown): Promise<void> {
    const hash = await hashPassword(checkPassword(password));
    await this.change((next) => {
      const u = next.users[name];
      if (u === undefined || !Object.prototype.hasOwnProperty.call(next.users, name)) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
      u.password = hash;
    }, name);
  }

  async deleteUser(name: string): Promise<void> {
    await this.change((next) => {
      if (!Object.prototype.hasOwnProperty.call(next.users, name)) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
      delete next.users[name];
    }, name);
  }

  async addGrant(name: string, g: Grant): Promise<Grant> {
    return this.change((next) => {
      const u = Object.prototype.hasOwnProperty.call(next.users, name) ? next.users[name] : undefined;
      if (u === undefined) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
      if (!u.grants.some((x) => x.action === g.action && x.pattern === g.pattern)) u.grants.push(g);
      return g;
    }, name);
  }

  async revokeGrant(name: string, g: Grant): Promise<void> {
    await this.change((next) => {
      const u = Object.prototype.hasOwnProperty.call(next.users, name) ? next.users[name] : undefined;
      if (u === undefined) throw new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
      const i = u.grants.findIndex((x) => x.action === g.action && x.pattern === g.pattern);
      if (i < 0) throw new NaradError("grant_not_found", `User ${name} has no grant ${g.action}${g.pattern ? ` on ${g.pattern}` : ""}.`);
      u.grants.splice(i, 1);
    }, name);
  }
}

function parseFile(text: string, path: string): FileShape {
  let j: unknown;
  try {
    j = JSON.parse(text);
  } catch (e) {
    throw new Error(`${path} is corrupt (${(e as Error).message})`);
  }
  const f = j as Partial<FileShape>;
  if (typeof f !== "object" || f === null || f.version !== 1 || typeof f.users !== "object" || f.users === null) {
    throw new Error(`${path} is corrupt (missing version or users)`);
  }
  const ids = new Set<string>();
  for (const [name, u] of Object.entries(f.users)) {
    const ok =
      USER_NAME_RE.test(name) &&
      typeof u === "object" &&
      u !== null &&
      (u.id === undefined || (typeof u.id === "string" && USER_ID_RE.test(u.id))) &&
      typeof u.password?.salt_b64 === "string" &&
      typeof u.password?.hash_b64 === "string" &&
      Number.isSafeInteger(u.password?.n) &&
      Array.isArray(u.grants) &&
      u.grants.every((g) => isAction(g.action) && (g.pattern === null || typeof g.pattern === "string"));
    if (!ok) throw new Error(`${path} is corrupt (user ${JSON.stringify(name)} is malformed)`);
    if (u.id !== undefined) {
      // Two users with one id would own each other's topics.
      if (ids.has(u.id)) throw new Error(`${path} is corrupt (user ${JSON.stringify(name)} has another user's id)`);
      ids.add(u.id);
    }
  }
  return f as FileShape;
}
