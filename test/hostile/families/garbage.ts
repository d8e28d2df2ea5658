// Raw-TCP garbage: random bytes, bytes that are almost HTTP (a valid request with one to three
// bytes flipped, inserted or deleted outside its credentials), huge header lines, many headers,
// the inputs Node answers itself (no Host, a bad Expect, CONNECT), and in the long form
// slowloris: headers that trickle in and never end, which must be cut off at the headers timeout.
//
// Each input is half-closed after it is written, so the node always sees EOF and no parse can
// wait for more: the answer is deterministic (the slowloris inputs, which do wait, are long-form
// only). A mutated request can still be a valid one, so its right answers are a success, or
// any error of the table.

import { ERRORS } from "../../../src/protocol/errors.js";
import type { Family, FamilyCtx } from "../context.js";
import { request } from "../wire.js";

const anyError = [...new Set(Object.values(ERRORS).map((e) => e.status))];

export const garbage: Family = {
  name: "raw-tcp garbage",
  nodes: ["secure", "dev"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-garbage", 2);
    const t = ctx.tally;

    // Random bytes. Only CR/LF before EOF is no request at all: closing then is right.
    for (let i = 0; i < ctx.n(20, 400); i++) {
      const b = ctx.rng.bytes(ctx.rng.pick([1, 2, 8, 64, 512, 4096]));
      const noRequest = b.every((x) => x === 13 || x === 10);
      t.judge(b, await ctx.send(b, { halfClose: true }), { errors: ["bad_request"], close: noRequest });
    }

    // Almost HTTP: valid requests with a few bytes changed outside the Authorization line.
    const templates = [
      () => ({ produce: undefined as Buffer | undefined, bytes: request("GET", "/healthz", [["Host", "x"], ["Connection", "close"]]) }),
      () => ({ produce: undefined, bytes: request("GET", "/v1/topics", ctx.headers([["Connection", "close"]])) }),
      () => {
        const payload = Buffer.from(`almost-http-${ctx.rng.int(0, 1e9)}`);
        return { produce: payload, bytes: request("POST", `/v1/topics/${topic}/messages?key=k`, ctx.headers([["Connection", "close"]]), payload) };
      },
    ];
    for (let i = 0; i < ctx.n(30, 600); i++) {
      const { bytes, produce } = ctx.rng.pick(templates)();
      const text = bytes.toString("latin1");
      const authAt = text.indexOf("Authorization:");
      const authEnd = authAt < 0 ? -1 : text.indexOf("\r\n", authAt) + 2;
      const m = [...bytes];
      for (let k = ctx.rng.int(1, 3); k > 0; k--) {
        let at = ctx.rng.int(0, m.length - 1);
        if (authAt >= 0 && at >= authAt - 2 && at < authEnd) at = Math.max(0, authAt - 3); // never the credentials (a failed login slows that user)
        const op = ctx.rng.int(0, 3);
        if (op === 0) m[at] = m[at]! ^ (1 << ctx.rng.int(0, 7));
        else if (op === 1) m.splice(at, 0, ctx.rng.int(0, 255));
        else if (op === 2) m.splice(at, 1);
        else m[at] = ctx.rng.pick([0, 9, 10, 13, 32, 58, 127, 255]);
      }
      const input = Buffer.from(m);
      const ex = await ctx.send(input, { halfClose: true });
      // The payload may have been mutated: record the 202 without its bytes.
      if (produce !== undefined) ctx.record(topic, ex);
      // A mutation can also end a request early, so that the rest is a second one: each answer
      // is judged.
      t.judge(input, ex, { ok: [200, 202, 204], errors: anyError, close: true, anyCount: true });
    }

    // Huge header lines: under Node's 16 KiB header limit is served; over it is 431.
    for (const size of ctx.long ? [8_000, 16_500, 65_536, 1_048_576] : [8_000, 65_536]) {
      const input = request("GET", "/healthz", [["Host", "x"], ["X-Huge", "h".repeat(size)], ["Connection", "close"]]);
      t.judge(input, await ctx.send(input, { halfClose: true }), size < 16_000 ? { ok: [200] } : { errors: [431] });
    }
    // Many headers: a thousand short ones fit; thousands overflow.
    for (const count of ctx.long ? [100, 1000, 2500, 20_000] : [100, 2500]) {
      const hs: [string, string][] = [["Host", "x"], ["Connection", "close"]];
      for (let i = 0; i < count; i++) hs.push([`X-${i}`, "v"]);
      const input = request("GET", "/healthz", hs);
      t.judge(input, await ctx.send(input, { halfClose: true }), count <= 1000 ? { ok: [200] } : { errors: [431] });
    }
    // A huge request line (the path).
    const longPath = request("GET", "/healthz?" + "q".repeat(70_000), [["Host", "x"], ["Connection", "close"]]);
    t.judge(longPath, await ctx.send(longPath, { halfClose: true }), { errors: [431, 414] });

    // What Node answers itself today (known, issue 12 item 8): the spec's JSON is the right answer.
    const nodeAnswers: [Buffer, number[]][] = [
      [request("GET", "/healthz", [["Connection", "close"]]), [400]],
      [request("GET", "/healthz", [["Host", "x"], ["Expect", "200-ok"], ["Connection", "close"]]), [417, 400]],
      [request("CONNECT", "127.0.0.1:1", [["Host", "127.0.0.1:1"]]), [400, 405]],
    ];
    for (const [input, statuses] of nodeAnswers) t.judge(input, await ctx.send(input, { halfClose: true }), { errors: statuses });

    // Slowloris (long form): a header a byte at a time that never ends. The node must cut it off
    // at http.headers_timeout_ms with 408; a valid request from someone else is served meanwhile.
    if (ctx.long) {
      const setting = ctx.target.settings.headersTimeoutMs;
      const slow = Array.from({ length: 4 }, async () => {
        const head = `POST /v1/topics/${topic}/messages HTTP/1.1\r\nHost: x\r\nX-Slow: `;
        const drip = Array.from({ length: 200 }, () => "s");
        const ex = await ctx.send([head, ...drip], { chunkDelayMs: 250, deadlineMs: 60_000 });
        const late = ex.responses[0] !== undefined && ex.responses[0].atMs > setting + 5_000;
        t.judge(head + "s…(a byte every 250 ms)", ex, { errors: [408], check: () => (late ? `answered after ${ex.responses[0]!.atMs} ms, the setting is ${setting} ms` : undefined) });
      });
      const served = await ctx.produce(topic, "served during slowloris");
      if (!served) t.wrongFound({ input: "a produce while slowloris sockets wait", expected: "202", got: "not 202" });
      else t.passed();
      await Promise.all(slow);
    }
  },
};
