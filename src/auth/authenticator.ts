// HTTP Basic authentication against the user store.
//
// scrypt costs ~50 ms of CPU by design, far too much for every request, so a successful check
// is remembered: the cache key is SHA-256 over a per-process secret, the user and the password
// (the password itself is never kept), and an entry is valid only while the user's generation
// in the store is unchanged. Deleting a user or changing its password or grants bumps the
// generation, so a deleted user is locked out on its very next request.
//
// Unknown users are checked against a dummy hash, so the answer takes as long as for a real one
// and does not reveal which names exist.
//
// Repeated failures for one user name from one client address are slowed down: after
// `failuresFree` failures within `failureWindowMs`, each further attempt waits until
// `nextAllowedMs`, which moves out by 100 ms · 2^(failures − failuresFree), at most
// `slowdownMaxMs`. The wait bounds the guess rate whatever the concurrency. No attempt waits
// longer than `slowdownMaxMs`: one whose turn is further out, or one past `waitingMax` waiting,
// is answered 429 at once with Retry-After. So a user's right password is never held for long:
// it waits at most one slot, and only when its own address has been failing. The record is per
// (name, address) because it was per name: a stranger failing 40 times as `alice` held alice's
// right password, sent from anywhere, unanswered for over a minute (a targeted lockout). Many
// addresses guessing together are bounded by the password checker's cap instead. A success
// clears its own record. The table is bounded (`trackedMax`; oldest out).
//
// The checks themselves run on the PasswordChecker's own thread, at most a few at once
// (./password-checker.ts), so guesses under random names cannot starve the fsyncs of libuv's pool.

import { createHash, randomBytes } from "node:crypto";
import { NaradError } from "../protocol/errors.js";
import type { Clock } from "../platform/clock.js";
import { systemScheduler, type Scheduler } from "../platform/scheduler.js";
import type { Principal } from "./model.js";
import type { UserStoreApi } from "./user-store-api.js";
import { hashPassword } from "./store.js";
import { PasswordChecker } from "./password-checker.js";

export const AUTH_LIMITS = {
  failuresFree: 5,
  failureWindowMs: 15 * 60_000,
  slowdownBaseMs: 100,
  slowdownMaxMs: 5000,
  waitingMax: 16,
  trackedMax: 10_000,
  cacheMax: 10_000,
} as const;

interface FailureRecord {
  failures: number;
  lastMs: number;
  nextAllowedMs: number;
  waiting: number;
}

export class Authenticator {
  private readonly secret = randomBytes(32);
  private readonly cache = new Map<string, { user: string; generation: number }>();
  private readonly failures = new Map<string, FailureRecord>();
  /** Computed once, on the first check: concurrent first checks share it. */
  private dummy: ReturnType<typeof hashPassword> | undefined;

  constructor(
    private readonly store: UserStoreApi,
    private readonly clock: Clock,
    private readonly checker: PasswordChecker = new PasswordChecker(),
    private readonly scheduler: Scheduler = systemScheduler,
  ) {}

  /** Stops the password thread (at shutdown; the thread never keeps the process alive itself). */
  close(): Promise<void> {
    return this.checker.close();
  }

  private unauthorized(message: string): NaradError {
    return new NaradError("unauthorized", message);
  }

  /**
   * Returns the principal of a valid `Authorization: Basic` header, or throws 401, or 429 when
   * this name's failures from this address are being slowed down or too many password checks are
   * in flight. `clientAddress` is the peer's address (the slowdown is kept per name and address).
   */
  async authenticate(header: string | undefined, clientAddress = ""): Promise<Principal> {
    if (header === undefined || !/^Basic [A-Za-z0-9+/=]+$/i.test(header.trim())) {
      throw this.unauthorized("Send HTTP Basic credentials (Authorization: Basic ...).");
    }
    const decoded = Buffer.from(header.trim().slice(6), "base64").toString("utf8");
    const colon = decoded.indexOf(":");
    if (colon <= 0) throw this.unauthorized("The Basic credentials are malformed; send user:password.");
    const user = decoded.slice(0, colon);
    const password = decoded.slice(colon + 1);
    const key = createHash("sha256").update(this.secret).update(user).update("\0").update(password).digest("base64");
    const hit = this.cache.get(key);
    if (hit !== undefined && this.store.generation(hit.user) === hit.generation) {
      this.cache.delete(key);
      this.cache.set(key, hit); // most recently used last
      return { name: user, id: this.store.get(user)!.id, grants: this.store.grants(user) };
    }
    const failureKey = `${user}\0${clientAddress}`;
    await this.waitTurn(failureKey);
    const rec = this.store.get(user);
    const generation = this.store.generation(user);
    this.dummy ??= hashPassword(randomBytes(16).toString("hex"));
    const dummy = await this.dummy;
    const ok = await this.checker.verify(rec?.password ?? dummy, password);
    if (!ok || rec === undefined || generation === undefined || this.store.generation(user) !== generation) {
      this.recordFailure(failureKey);
      throw this.unauthorized("The user name or password is wrong.");
    }
    this.failures.delete(failureKey);
    this.cache.set(key, { user, generation });
    if (this.cache.size > AUTH_LIMITS.cacheMax) this.cache.delete(this.cache.keys().next().value!);
    return { name: user, id: rec.id, grants: this.store.grants(user) };
  }

  private async waitTurn(key: string): Promise<void> {
    const f = this.failures.get(key);
    if (f === undefined || f.failures < AUTH_LIMITS.failuresFree) return;
    const now = this.clock.monoMs();
    if (now - f.lastMs > AUTH_LIMITS.failureWindowMs) {
      this.failures.delete(key);
      return;
    }
    const slotMs = Math.min(AUTH_LIMITS.slowdownBaseMs * 2 ** (f.failures - AUTH_LIMITS.failuresFree), AUTH_LIMITS.slowdownMaxMs);
    const waitMs = f.nextAllowedMs - now;
    if (waitMs <= 0) {
      // The slot is free now: take it, so the attempts that arrive with this one wait for theirs
      // (returning without taking it let any number of concurrent guesses through together).
      f.nextAllowedMs = now + slotMs;
      return;
    }
    if (f.waiting >= AUTH_LIMITS.waitingMax || waitMs > AUTH_LIMITS.slowdownMaxMs) {
      throw new NaradError("too_many_auth_attempts", undefined, { retryAfterS: Math.ceil(waitMs / 1000) });
    }
    f.waiting++;
    // One attempt per slot: the next one waits for the slot after this.
    f.nextAllowedMs += slotMs;
    await this.scheduler.sleep(waitMs);
    f.waiting--;
  }

  private recordFailure(key: string): void {
    const now = this.clock.monoMs();
    let f = this.failures.get(key);
    if (f === undefined) {
      if (this.failures.size >= AUTH_LIMITS.trackedMax) this.failures.delete(this.failures.keys().next().value!);
      f = { failures: 0, lastMs: now, nextAllowedMs: now, waiting: 0 };
      this.failures.set(key, f);
    }
    f.failures++;
    f.lastMs = now;
    if (f.failures >= AUTH_LIMITS.failuresFree) {
      const delay = Math.min(AUTH_LIMITS.slowdownBaseMs * 2 ** (f.failures - AUTH_LIMITS.failuresFree), AUTH_LIMITS.slowdownMaxMs);
      f.nextAllowedMs = Math.max(f.nextAllowedMs, now) + delay;
    }
  }
}
