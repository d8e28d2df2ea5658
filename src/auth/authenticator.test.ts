// The authenticator against a real user store on a real data dir, and the password checker on its
// own thread.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { NaradError } from "../protocol/errors.js";
import { systemClock } from "../platform/clock.js";
import { withTempDir } from "../../test/support/storage.js";
import { ManualScheduler } from "../platform/manual.js";
import { AUTH_LIMITS, Authenticator } from "./authenticator.js";
import { PASSWORD_CHECK_LIMITS, PasswordChecker } from "./password-checker.js";
import { hashPassword, UserStore } from "./store.js";

const basic = (user: string, pw: string) => `Basic ${Buffer.from(`${user}:${pw}`).toString("base64")}`;

test("unauthenticated password checks starve fsync: more than checksMax at once answer 429 too_many_password_checks before any hashing", async () => {
  await withTempDir(async (dir) => {
    const store = await UserStore.open(dir);
    await store.addUser("alice", "alice-Password-1", Date.now());
    const auth = new Authenticator(store, systemClock);
    try {
      // Random names: the per-name slowdown cannot catch these; only the global cap can.
      const tries = 50;
      const outcomes = await Promise.allSettled(
        Array.from({ length: tries }, () => auth.authenticate(basic(`guess-${randomBytes(6).toString("hex")}`, "wrong-password"))),
      );
      const codes = outcomes.map((o) => (o.status === "rejected" && o.reason instanceof NaradError ? o.reason.code : String(o.status)));
      const refused = codes.filter((c) => c === "too_many_password_checks").length;
      assert.equal(codes.filter((c) => c === "unauthorized").length, PASSWORD_CHECK_LIMITS.checksMax, codes.join(","));
      assert.equal(refused, tries - PASSWORD_CHECK_LIMITS.checksMax);
      const r = outcomes.find((o) => o.status === "rejected" && (o.reason as NaradError).code === "too_many_password_checks") as PromiseRejectedResult;
      const e = r.reason as NaradError;
      assert.equal(e.status, 429);
      assert.equal(e.definite, true);
      assert.equal(e.retryAfterS, PASSWORD_CHECK_LIMITS.retryAfterS);
      // Once the queue drained, the right password is checked and accepted.
      assert.deepEqual(await auth.authenticate(basic("alice", "alice-Password-1")), { name: "alice", id: store.get("alice")!.id, grants: [] });
    } finally {
      await auth.close();
    }
  });
});

test("password checker: right and wrong passwords on its own thread; a closed checker refuses what was in flight", async () => {
  const checker = new PasswordChecker(4);
  const h = await hashPassword("correct horse battery");
  assert.equal(await checker.verify(h, "correct horse battery"), true);
  assert.equal(await checker.verify(h, "correct horse battery!"), false);
  assert.equal(checker.inFlight, 0);
  const inFlight = checker.verify(h, "correct horse battery");
  assert.equal(checker.inFlight, 1);
  const refused = assert.rejects(inFlight, /closed/);
  await checker.close();
  await refused;
  // A check after close starts a new thread.
  assert.equal(await checker.verify(h, "correct horse battery"), true);
  await checker.close();
});

/**
 * Settles `p`, moving the manual scheduler forward 100 ms at a time only while the attempt waits
 * on it (a timer is pending); real work (the password thread) is waited for in real time, up to a
 * deadline. Returns the manual milliseconds the attempt waited.
 */
async function settle<T>(s: ManualScheduler, p: Promise<T>, stepMs = 100, idle: () => boolean = () => true): Promise<{ ms: number; value?: T; error?: unknown }> {
  let done: { value?: T; error?: unknown } | undefined;
  p.then((value) => (done = { value }), (error: unknown) => (done = { error }));
  let ms = 0;
  const deadline = Date.now() + 30_000;
  while (done === undefined) {
    if (Date.now() > deadline) throw new Error("the attempt never settled");
    // First let the attempt run as far as it can without time moving.
    await new Promise((r) => setTimeout(r, 1));
    if (done === undefined && s.pending > 0 && idle()) {
      s.advance(stepMs);
      ms += stepMs;
    }
  }
  return { ms, ...done };
}

test("a targeted lockout: after 40 failed logins for one name, its right password is answered at once from another address and within one slot from the same one", async () => {
  await withTempDir(async (dir) => {
    const store = await UserStore.open(dir);
    await store.addUser("alice", "alice-Password-1", Date.now());
    const s = new ManualScheduler();
    const auth = new Authenticator(store, s.clock, new PasswordChecker(), s);
    try {
      const refusedCodes = new Set<string>();
      for (let i = 0; i < 40; i++) {
        const r = await settle(s, auth.authenticate(basic("alice", `guess-${i}`), "10.0.0.66"));
        assert.ok(r.error instanceof NaradError, "a wrong password is refused");
        refusedCodes.add(r.error.code);
        // Each attempt waits at most one slot, never the sum of many.
        assert.ok(r.ms <= AUTH_LIMITS.slowdownMaxMs + 100, `attempt ${i} waited ${r.ms} ms`);
      }
      // Wrong passwords answer 401, or 429 when the address's next turn is over one slot away.
      assert.ok(refusedCodes.has("unauthorized"));
      for (const c of refusedCodes) assert.ok(c === "unauthorized" || c === "too_many_auth_attempts", c);
      // The stranger's guesses are slowed: many at once from its address are refused outright.
      const burst = await Promise.all(Array.from({ length: 5 }, () => settle(s, auth.authenticate(basic("alice", "again"), "10.0.0.66"))));
      assert.ok(burst.some((r) => r.error instanceof NaradError && r.error.code === "too_many_auth_attempts"), "a burst from the failing address meets 429");
      // Alice, from her own address: no wait at all.
      const mine = await settle(s, auth.authenticate(basic("alice", "alice-Password-1"), "192.0.2.10"));
      assert.deepEqual(mine.value, { name: "alice", id: store.get("alice")!.id, grants: [] });
      assert.equal(mine.ms, 0);
      // Alice behind the stranger's own address: answered within one slot (or told when to retry).
      const shared = await settle(s, auth.authenticate(basic("alice", "alice-Password-1"), "10.0.0.66"));
      if (shared.error !== undefined) {
        assert.ok(shared.error instanceof NaradError && shared.error.code === "too_many_auth_attempts");
        assert.ok(shared.error.retryAfterS! <= AUTH_LIMITS.slowdownMaxMs / 1000 * 2);
      } else {
        assert.deepEqual(shared.value, { name: "alice", id: store.get("alice")!.id, grants: [] });
        assert.ok(shared.ms <= AUTH_LIMITS.slowdownMaxMs + 100, `waited ${shared.ms} ms`);
      }
    } finally {
      await auth.close();
    }
  });
});

test("a burst of guesses after a quiet spell takes one slot each: the first is checked, the rest wait or are refused (the free slot was not taken)", async () => {
  await withTempDir(async (dir) => {
    const store = await UserStore.open(dir);
    await store.addUser("dave", "dave-Password-1", Date.now());
    const s = new ManualScheduler();
    const checker = new PasswordChecker();
    const auth = new Authenticator(store, s.clock, checker, s);
    try {
      for (let i = 0; i < AUTH_LIMITS.failuresFree; i++) await settle(s, auth.authenticate(basic("dave", `guess-${i}`), "10.0.0.7"));
      s.advance(AUTH_LIMITS.slowdownMaxMs * 2); // the next slot is long past
      // 30 at once: the first takes the free slot and is checked at once; each other one waits
      // for a slot of its own or is refused, so none is checked alongside the first.
      const t0 = s.clock.monoMs();
      const attempts = Array.from({ length: 30 }, () =>
        auth.authenticate(basic("dave", "burst"), "10.0.0.7").then(
          () => ({ code: "ok", atMs: s.clock.monoMs() }),
          (e: unknown) => ({ code: e instanceof NaradError ? e.code : String(e), atMs: s.clock.monoMs() }),
        ),
      );
      // Manual time moves only while no password check runs, 10 ms at a time (a slot is 100 ms).
      const outcomes = (await Promise.all(attempts.map((a) => settle(s, a, 10, () => checker.inFlight === 0)))).map((r) => r.value!);
      assert.deepEqual(outcomes[0], { code: "unauthorized", atMs: t0 }, "the first took the free slot: checked with no wait");
      const waited = outcomes.slice(1).filter((o) => o.code === "unauthorized");
      const refused = outcomes.slice(1).filter((o) => o.code === "too_many_auth_attempts");
      assert.equal(waited.length + refused.length, 29);
      assert.ok(waited.length <= AUTH_LIMITS.waitingMax, `${waited.length} waited`);
      // Each one that was checked waited for a slot of its own, after the first's.
      const times = [outcomes[0]!, ...waited].map((o) => o.atMs).sort((a, b) => a - b);
      assert.ok(times.slice(1).every((t) => t > t0), `checked at ${times.join(",")} after ${t0}`);
      assert.equal(new Set(times).size, times.length, `one slot each: ${times.join(",")}`);
    } finally {
      await auth.close();
    }
  });
});
