// Password checks of unauthenticated requests, kept away from the durable path.
//
// scrypt is slow on purpose (~50 ms of CPU a check). Node's async crypto.scrypt runs on libuv's
// thread pool, the same four threads that run every fdatasync of the group commit, so strangers
// guessing passwords with random user names (which the per-name slowdown cannot catch) used to
// queue ahead of produces' fsyncs: 64 concurrent bad logins raised an authenticated produce's
// median latency from 5.5 ms to 1.7 s. Here every check runs on one thread of its own, and at most
// `checksMax` checks may be queued or running at once; one more is refused at once with
// `429 too_many_password_checks` (definite, with Retry-After), before any work is done for it.
// Successful logins are cached by the Authenticator, so users with valid credentials rarely come
// here at all.

import { timingSafeEqual } from "node:crypto";
import { Worker } from "node:worker_threads";
import { NaradError } from "../protocol/errors.js";
import type { PasswordHash } from "./user-store-api.js";

export const PASSWORD_CHECK_LIMITS = {
  /** Checks queued or running at once on the password thread; more answer 429. */
  checksMax: 8,
  /** The Retry-After of that 429: about the time the queue takes to drain. */
  retryAfterS: 1,
} as const;

interface Pending {
  resolve: (hash: Buffer) => void;
  reject: (err: Error) => void;
}

export class PasswordChecker {
  private worker: Worker | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextId = 0;

  constructor(private readonly checksMax: number = PASSWORD_CHECK_LIMITS.checksMax) {}

  /** Checks in the queue or running. */
  get inFlight(): number {
    return this.pending.size;
  }

  /**
   * True when `password` matches `h`. Throws NaradError too_many_password_checks (synchronously
   * decided, before any hashing) when `checksMax` checks are already in flight.
   */
  async verify(h: PasswordHash, password: string): Promise<boolean> {
    if (this.pending.size >= this.checksMax) {
      throw new NaradError("too_many_password_checks", undefined, { retryAfterS: PASSWORD_CHECK_LIMITS.retryAfterS });
    }
    const expected = Buffer.from(h.hash_b64, "base64");
    const got = await this.hash(password, h.salt_b64, h.n, h.r, h.p, expected.length);
    return got.length === expected.length && timingSafeEqual(got, expected);
  }

  /** Stops the thread; checks in flight are refused. */
  async close(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    this.failAll(new Error("the password checker was closed"));
    if (w !== undefined) await w.terminate();
  }

  private hash(password: string, salt_b64: string, n: number, r: number, p: number, keylen: number): Promise<Buffer> {
    const id = this.nextId++;
    const w = this.thread();
    // Held (ref'd) only while a check is in flight: an idle thread never keeps the process alive.
    if (this.pending.size === 0) w.ref();
    const done = new Promise<Buffer>((resolve, reject) => this.pending.set(id, { resolve, reject }));
    w.postMessage({ id, password, salt_b64, n, r, p, keylen });
    return done;
  }

  private thread(): Worker {
    if (this.worker !== undefined) return this.worker;
    const w = new Worker(new URL("./password-thread.js", import.meta.url));
    w.on("message", (m: { id: number; hash_b64?: string; error?: string }) => {
      const p = this.pending.get(m.id);
      if (p === undefined) return;
      this.pending.delete(m.id);
      if (this.pending.size === 0) w.unref();
      if (m.hash_b64 !== undefined) p.resolve(Buffer.from(m.hash_b64, "base64"));
      else p.reject(new Error(`password check failed: ${m.error}`));
    });
    const lost = (err: Error): void => {
      if (this.worker === w) this.worker = undefined; // the next check starts a new thread
      this.failAll(err);
    };
    w.on("error", lost);
    w.on("exit", (code) => lost(new Error(`the password thread exited (code ${code})`)));
    // An idle thread never keeps the process alive (a server is kept alive by its socket). After
    // the listeners: attaching a message listener refs the thread again.
    w.unref();
    this.worker = w;
    return w;
  }

  private failAll(err: Error): void {
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) p.reject(err);
  }
}
