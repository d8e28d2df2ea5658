// Partial bodies: a Content-Length longer than what is sent (or a chunked body cut short), then
// the client half-closes or vanishes. Nothing may be stored or created from such a request: its
// payloads are forbidden markers and its topic names must not exist afterwards. The answer, when
// one can still be read, is the table's 400; closing is right too (the client is gone). In the
// long form the client also stays silent mid-body until the node's request timeout cuts it off
// (408 at http.request_timeout_ms; known, issue 12 item 8).

import type { Family, FamilyCtx } from "../context.js";
import { request } from "../wire.js";

export const partial: Family = {
  name: "partial bodies",
  nodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-partial", 2);
    const t = ctx.tally;
    const mustNotExist: string[] = [];
    for (let i = 0; i < ctx.n(12, 200); i++) {
      const id = `${ctx.rng.int(0, 1e9)}-${i}`;
      const how = ctx.rng.pick(["halfClose", "destroy"] as const);
      const kind = ctx.rng.pick(["produce", "chunked", "batch-json", "batch-binary", "create", "ack-batch"] as const);
      let input: Buffer;
      if (kind === "produce" || kind === "chunked") {
        const payload = Buffer.from(`PARTIAL-${id}-` + "p".repeat(ctx.rng.int(0, 2000)));
        const sent = ctx.rng.int(0, payload.length - 1);
        ctx.ledger.forbid(topic, payload, `partial produce ${id}`);
        ctx.ledger.forbid(topic, payload.subarray(0, sent), `the sent part of partial produce ${id}`);
        input =
          kind === "produce"
            ? Buffer.concat([request("POST", `/v1/topics/${topic}/messages`, ctx.headers([["Content-Length", String(payload.length)]])), payload.subarray(0, sent)])
            : Buffer.concat([request("POST", `/v1/topics/${topic}/messages`, ctx.headers([["Transfer-Encoding", "chunked"]])), Buffer.from(`${payload.length.toString(16)}\r\n`), payload.subarray(0, sent)]);
      } else if (kind === "batch-json" || kind === "batch-binary") {
        const payload = Buffer.from(`PARTIAL-BATCH-${id}`);
        ctx.ledger.forbid(topic, payload, `partial batch ${id}`);
        const body =
          kind === "batch-json"
            ? Buffer.from(JSON.stringify({ messages: [{ payload_base64: payload.toString("base64") }, { payload_base64: payload.toString("base64") }] }))
            : Buffer.concat([Buffer.from([0, 0, 0, 0, 0, 0, 0, payload.length]), payload, Buffer.from([0, 0, 0, 0, 0, 0, 0, payload.length]), payload]);
        const type = kind === "batch-json" ? "application/json" : "application/vnd.narad.batch";
        input = Buffer.concat([request("POST", `/v1/topics/${topic}/messages/batch`, ctx.headers([["Content-Type", type], ["Content-Length", String(body.length)]])), body.subarray(0, body.length - ctx.rng.int(1, 8))]);
      } else if (kind === "create") {
        const name = `hostile-partial-${id}`;
        mustNotExist.push(name);
        const body = Buffer.from(JSON.stringify({ name, partitions: 1 }));
        // Even a complete JSON object must not be acted on while its declared length is not in.
        input = Buffer.concat([request("POST", "/v1/topics", ctx.headers([["Content-Length", String(body.length + ctx.rng.int(1, 100))]])), body]);
      } else {
        const body = Buffer.from(JSON.stringify({ receipt_handles: ["x".repeat(42)] }));
        input = Buffer.concat([request("POST", `/v1/topics/${topic}/ack/batch`, ctx.headers([["Content-Length", String(body.length + 10)]])), body]);
      }
      const ex = await ctx.send(input, how === "halfClose" ? { halfClose: true } : { destroy: true });
      if (how === "destroy") {
        t.passed(); // nothing to read: the client is gone; what counts is checked below
        continue;
      }
      t.judge(input, ex, { errors: ["bad_request"], close: true });
    }
    // None of the topics exists (a request whose body never arrived was not executed).
    for (const name of mustNotExist) {
      const r = await ctx.api("GET", `/v1/topics/${name}`);
      if (r.status !== 404) t.wrongFound({ input: `POST /v1/topics {"name":"${name}"} with a longer Content-Length, then close`, expected: "not created (GET 404)", got: `GET answered ${r.status}` });
      else t.passed();
    }
    // Long form: the client stays silent mid-body; the request timeout must cut it off.
    if (ctx.long) {
      const setting = ctx.target.settings.requestTimeoutMs;
      const payload = Buffer.from(`PARTIAL-SILENT-${ctx.rng.int(0, 1e9)}`);
      ctx.ledger.forbid(topic, payload, "a produce whose body stopped arriving");
      const input = Buffer.concat([request("POST", `/v1/topics/${topic}/messages`, ctx.headers([["Content-Length", String(payload.length + 100)]])), payload]);
      const ex = await ctx.send(input, { deadlineMs: 60_000 });
      const late = ex.responses[0] !== undefined && ex.responses[0].atMs > setting + 5_000;
      t.judge(input, ex, { errors: [408], check: () => (late ? `answered after ${ex.responses[0]!.atMs} ms, the setting is ${setting} ms` : undefined) });
    }
  },
};
