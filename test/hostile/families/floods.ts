// Resource floods, bounded in count and time: many connections at once (each answered, and a
// produce from someone else served while they are all open), idle connections that send
// nothing, long polls up to limits.long_polls (the next one answers 429 too_many_waiters with
// Retry-After; a produce wakes one of them with the message; once they are gone polls are
// taken again), a burst of concurrent produces (202, or 429 overloaded), and in the long form a
// burst of bad logins (401, or 429 too_many_auth_attempts).
//
// "Up to the limit" is reached by waiting on a condition, never on a sleep: probes are sent
// until one is refused, with a deadline.

import { connect, type Socket } from "node:net";
import type { Family, FamilyCtx } from "../context.js";
import { basic } from "../context.js";
import { parseResponse, request, send } from "../wire.js";

export const floods: Family = {
  name: "resource floods",
  nodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-flood", 2);
    const polls = await ctx.topic("hostile-flood-polls", 1);
    const t = ctx.tally;

    // Many connections, all open at once, each with a request answered on it.
    {
      const n = ctx.n(100, 1000);
      const socks: Socket[] = [];
      const answered = await Promise.all(
        Array.from({ length: n }, () =>
          new Promise<number>((resolve) => {
            const s = connect(ctx.port, "127.0.0.1");
            socks.push(s);
            let buf = Buffer.alloc(0);
            const timer = setTimeout(() => resolve(-1), 60_000);
            s.on("connect", () => s.write(request("GET", "/healthz", [["Host", "x"]])));
            s.on("data", (c: Buffer) => {
              buf = Buffer.concat([buf, c]);
              const r = parseResponse(buf, false, false);
              if (r !== null) {
                clearTimeout(timer);
                resolve(r.response.status);
              }
            });
            s.on("error", () => {
              clearTimeout(timer);
              resolve(-2);
            });
          }),
        ),
      );
      const bad = answered.filter((s) => s !== 200);
      if (bad.length > 0) t.wrongFound({ input: `${n} connections open at once, GET /healthz on each`, expected: "200 on each", got: `${bad.length} not 200 (${[...new Set(bad)].join(",")}; -1 no answer, -2 error)` });
      else t.passed();
      const served = await ctx.produce(topic, "served while many connections are open");
      if (!served) t.wrongFound({ input: "a produce while they are open", expected: "202", got: "not 202" });
      else t.passed();
      for (const s of socks) s.destroy();
    }
    // Idle connections that never send a byte; a new connection is still served.
    {
      const idle = Array.from({ length: ctx.n(50, 500) }, () => connect(ctx.port, "127.0.0.1").on("error", () => {}));
      const ex = await send(ctx.port, request("GET", "/healthz", [["Host", "x"], ["Connection", "close"]]), { responses: 1 });
      t.judge(`GET /healthz while ${idle.length} idle connections are open`, ex, { ok: [200] });
      for (const s of idle) s.destroy();
    }
    // Long polls up to the limit.
    {
      const limit = ctx.target.settings.longPolls;
      const waiting: { sock: Socket; answer: Promise<number>; done: boolean }[] = [];
      const poll = (waitMs: number) => {
        const s = connect(ctx.port, "127.0.0.1");
        let buf = Buffer.alloc(0);
        const answer = new Promise<number>((resolve) => {
          s.on("connect", () => s.write(request("POST", `/v1/topics/${polls}/consume?wait_ms=${waitMs}`, ctx.headers())));
          s.on("data", (c: Buffer) => {
            buf = Buffer.concat([buf, c]);
            const r = parseResponse(buf, false, false);
            if (r === null) return;
            const p = r.response;
            if (p.status === 200) ctx.ledger.watch(polls);
            resolve(p.status === 429 && (p.headers["retry-after"] === undefined || !p.body.toString().includes('"too_many_waiters"')) ? -429 : p.status);
          });
          s.on("error", () => resolve(-2));
          s.on("close", () => resolve(-3));
        });
        const w = { sock: s, answer, done: false };
        void answer.then(() => (w.done = true));
        return w;
      };
      for (let i = 0; i < limit; i++) waiting.push(poll(20_000));
      // Probe until one is refused (the limit reached), within a deadline.
      let refused = 0;
      const deadline = Date.now() + 30_000;
      while (refused !== 429 && refused !== -429 && Date.now() < deadline) {
        // A poll refused because a probe held a slot as it arrived is sent again.
        waiting.forEach((w, i) => {
          if (w.done) waiting[i] = poll(20_000);
        });
        const probe = poll(1);
        refused = await probe.answer;
        probe.sock.destroy();
      }
      if (refused !== 429) t.wrongFound({ input: `${limit} long polls waiting (limits.long_polls = ${limit}), one more`, expected: "429 too_many_waiters with Retry-After", got: refused === -429 ? "429 without Retry-After or code" : `never refused (last ${refused})` });
      else t.passed();
      // A produce wakes one waiting poll with the message.
      const ok = await ctx.produce(polls, "wakes a long poll");
      let timer: NodeJS.Timeout | undefined;
      const woke = await Promise.race([
        Promise.any(waiting.map((w) => w.answer.then((s) => (s === 200 ? s : Promise.reject(new Error(String(s))))))).catch(() => -1),
        new Promise<number>((r) => (timer = setTimeout(() => r(-4), 30_000))),
      ]);
      clearTimeout(timer);
      if (!ok || woke !== 200) t.wrongFound({ input: "a produce while the polls wait", expected: "one poll answers 200", got: `produce ${ok ? 202 : "refused"}, poll ${woke}` });
      else t.passed();
      for (const w of waiting) w.sock.destroy();
      // The closed polls leave: a poll is taken again (it waits 1 ms and answers 204).
      let again = 0;
      const until = Date.now() + 30_000;
      while (again !== 204 && again !== 200 && Date.now() < until) {
        const probe = poll(1);
        again = await probe.answer;
        probe.sock.destroy();
      }
      if (again !== 204 && again !== 200) t.wrongFound({ input: "a long poll after the waiting ones closed their connections", expected: "204 (or 200)", got: String(again) });
      else t.passed();
    }
    // A burst of concurrent produces: each 202 (stored) or 429 overloaded.
    {
      const n = ctx.n(50, 500);
      const payloads = Array.from({ length: n }, (_, i) => Buffer.from(`flood-${ctx.rng.int(0, 1e9)}-${i}-` + "f".repeat(ctx.rng.int(0, 4096))));
      const exs = await Promise.all(payloads.map((p) => send(ctx.port, request("POST", `/v1/topics/${topic}/messages`, ctx.headers([["Connection", "close"]]), p), { responses: 1, deadlineMs: 60_000 })));
      exs.forEach((ex, i) => {
        ctx.record(topic, ex, [payloads[i]!]);
        t.judge(`one of ${n} concurrent produces`, ex, { ok: [202], errors: ["overloaded"] });
      });
    }
    // Long form: a burst of bad logins under random names (issue 12 item 3 is their cost).
    if (ctx.long) {
      const exs = await Promise.all(Array.from({ length: 64 }, () => send(ctx.port, request("GET", "/v1/topics", [["Host", "x"], ["Connection", "close"], ["Authorization", basic(`hostile-guess-${ctx.rng.int(0, 1e9)}`, "guess-Password-1")]]), { responses: 1, deadlineMs: 60_000 })));
      // Past 8 password checks in flight the rest are refused at once (issue 12 item 3's fix).
      for (const ex of exs) t.judge("one of 64 concurrent bad logins", ex, { errors: ["unauthorized", "too_many_auth_attempts", "too_many_password_checks"] });
      const served = await ctx.produce(topic, "served after a bad-login burst");
      if (!served) t.wrongFound({ input: "a produce after the bad-login burst", expected: "202", got: "not 202" });
      else t.passed();
    }
  },
};
