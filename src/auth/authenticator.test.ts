// The authenticator against a real user store on a real data dir, and the password checker on its
// own thread.

import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { NaradError } from "../protocol/errors.js";
import { systemClock } from "../platform/clock.js";
import { withTempDir } from "../../test/support/storage.js";
import { Authenticator } from "./authenticator.js";
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
      assert.deepEqual(await auth.authenticate(basic("alice", "alice-Password-1")), { name: "alice", grants: [] });
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
