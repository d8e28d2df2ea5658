// Request smuggling forms: Content-Length with Transfer-Encoding (both orders), two
// Content-Lengths, chunked bodies with bad chunk sizes, obs-fold, odd whitespace around a
// header's name, and request lines that are almost right. Each input is a produce whose body
// hides a second produce (a "smuggled" request with its own marker payload): a right node either
// refuses the whole input with one 400, or reads it the one way HTTP/1.1 allows; it never
// executes the hidden request, so no stored message may equal a smuggled marker, and a refused
// outer produce must not be stored either.

import type { Family, FamilyCtx } from "../context.js";

export const smuggling: Family = {
  name: "request smuggling",
  nodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-smuggle", 1);
    const t = ctx.tally;
    const auth = ctx.headers().map(([k, v]) => `${k}: ${v}\r\n`).join("");
    let n = 0;
    /** A produce request line + headers (as written) + body; the body hides a second produce. */
    const caseOf = (headers: string, body: (inner: string) => string, line = `POST /v1/topics/${topic}/messages HTTP/1.1`) => {
      const id = `${ctx.rng.int(0, 1e9)}-${n++}`;
      const marker = `SMUGGLED-${id}`;
      const inner = `POST /v1/topics/${topic}/messages HTTP/1.1\r\n${auth}Content-Length: ${marker.length}\r\n\r\n${marker}`;
      return { input: `${line}\r\n${auth}${headers}\r\n${body(inner)}`, id, inner, marker };
    };
    const refused = async (headers: string, body: (inner: string) => string, line?: string) => {
      const { input, id, marker } = caseOf(headers, body, line);
      ctx.ledger.forbid(topic, marker, `smuggled request ${id}`);
      const ex = await ctx.send(input, { halfClose: true });
      // Refused as a whole: the outer produce must not be stored either.
      const b = input.slice(input.indexOf("\r\n\r\n") + 4);
      ctx.ledger.forbid(topic, b, `outer body of refused smuggling input ${id}`);
      ctx.record(topic, ex);
      t.judge(input, ex, { errors: ["bad_request"] });
    };
    const chunked = (s: string) => `${s.length.toString(16)}\r\n${s}\r\n0\r\n\r\n`;

    // CL + TE, both orders, with a body framed for either reading.
    await refused("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused("Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused("Content-Length: 300\r\nTransfer-Encoding: chunked\r\n", (inner) => chunked("x") + inner);
    await refused("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused("Transfer-Encoding: xchunked\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused("Transfer-Encoding: chunked, identity\r\n", (inner) => `0\r\n\r\n${inner}`);
    // Two Content-Lengths that disagree, and a list.
    await refused("Content-Length: 0\r\nContent-Length: 5\r\n", (inner) => `hello${inner}`);
    await refused("Content-Length: 5, 0\r\n", (inner) => `hello${inner}`);
    // Bad chunk sizes.
    for (const size of ["zz", "-1", "0x5", "5 5", "FFFFFFFFFFFFFFFFFFFF", "+5", "5\t", " 5", ""]) {
      await refused("Transfer-Encoding: chunked\r\n", (inner) => `${size}\r\nhello\r\n0\r\n\r\n${inner}`);
    }
    // A chunk longer than its size says, and one shorter.
    await refused("Transfer-Encoding: chunked\r\n", (inner) => `3\r\nhello\r\n0\r\n\r\n${inner}`);
    await refused("Transfer-Encoding: chunked\r\n", (inner) => `9\r\nhello\r\n0\r\n\r\n${inner}`);
    // obs-fold: a header continued on the next line (RFC 9112 lets a server refuse it).
    await refused("X-Folded: a\r\n b\r\nContent-Length: 5\r\n", (inner) => `hello${inner}`);
    await refused("Transfer-Encoding:\r\n chunked\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused("Content-Length:\r\n 5\r\n", (inner) => `hello${inner}`);
    // Whitespace or junk around a header name; control bytes in values; bare CR/LF.
    await refused("Content-Length : 5\r\n", (inner) => `hello${inner}`);
    await refused("Transfer-Encoding : chunked\r\n", (inner) => `0\r\n\r\n${inner}`);
    await refused(" Content-Length: 5\r\n", (inner) => `hello${inner}`);
    await refused("Content-Length: +5\r\n", (inner) => `hello${inner}`);
    await refused("Content-Length: 0x5\r\n", (inner) => `hello${inner}`);
    await refused("Content-Length: 5\x00\r\n", (inner) => `hello${inner}`);
    await refused("X-Bad: a\rb\r\nContent-Length: 5\r\n", (inner) => `hello${inner}`);
    await refused("X-Bad: a\nContent-Length: 0\r\n", (inner) => `hello${inner}`);
    await refused("Content-Length: 99999999999999999999\r\n", (inner) => `hello${inner}`);

    // Inputs HTTP/1.1 reads one way: the hidden request is body bytes of the outer produce (or a
    // second request on the connection, answered in turn), never executed out of order.
    const accepted = async (headers: string, body: (inner: string) => string, payload: (inner: string) => string) => {
      const { input, inner, marker, id } = caseOf(headers, body);
      ctx.ledger.forbid(topic, marker, `smuggled request ${id}`);
      const p = Buffer.from(payload(inner), "latin1");
      const ex = await ctx.send(input, { responses: 1 });
      ctx.record(topic, ex, [p]);
      t.judge(input, ex, { ok: [202] });
    };
    await accepted("Transfer-Encoding: chunked\r\n", (inner) => chunked(inner), (inner) => inner);
    await accepted("Transfer-Encoding: Chunked\r\n", (inner) => chunked(inner), (inner) => inner);
    await accepted("Transfer-Encoding: chunked\r\n", (inner) => `${inner.length.toString(16)};ext=1\r\n${inner}\r\n0\r\nX-Trailer: t\r\n\r\n`, (inner) => inner);

    // Framings HTTP lets a server read either way: refused with one 400 (or 501), or read as
    // the last coding / on word boundaries, when what follows is a second request on the
    // connection, answered in turn. Never one answer that executed the hidden request alone.
    const either = async (headers: string, body: (inner: string) => string, outerPayload: string, line?: string) => {
      const { input, inner, marker } = caseOf(headers, body, line);
      const ex = await ctx.send(input, { halfClose: true });
      ctx.record(topic, ex, [Buffer.from(outerPayload), Buffer.from(marker)]);
      void inner;
      t.judge(input, ex, { ok: [202], errors: ["bad_request", 501, 505], close: true, count: 2, check: (e) => (e.responses[0]!.status === 202 && e.responses.length === 1 && e.end !== "closed" ? "one 202 for two requests" : undefined) });
    };
    await either("Transfer-Encoding: identity, chunked\r\n", (inner) => `0\r\n\r\n${inner}`, "");
    for (const line of ["POST  /v1/topics/x/messages HTTP/1.1", "POST /v1/topics/x/messages  HTTP/1.1", "POST\t/v1/topics/x/messages HTTP/1.1", "POST /v1/topics/x/messages HTTP/1.1 ", "POST /v1/topics/x/messages HTTP/1.10", "POST /v1/topics/x/messages HTTP/2.0", "POST /v1/topics/x/messages HTTP/1", "POST /v1/topics/x/messages http/1.1", "POST /v1/topics/x/messages"]) {
      await either("Content-Length: 5\r\n", (inner) => `hello${inner}`, "hello", line.replace("/x/", `/${topic}/`));
    }
  },
};
