// Odd paths and keys, written raw (an HTTP client would normalise them): encoded slashes, dot
// segments, doubled slashes, very long names, raw and encoded unicode, NUL, bad % escapes,
// query oddities (empty, repeated, undecodable, keys at and past 4096 bytes, replay limits),
// topic names at and past the limits of docs/api.md, methods a route does not take, and HEAD
// and OPTIONS on GET routes.
//
// A path that does not name a route answers 404 not_found; one that names a route with a
// parameter that is not a valid name answers 400 (invalid_topic_name, invalid_argument) or, when
// the router cannot take it at all (an undecodable escape), 404 not_found: both are the table's
// answers and neither reveals anything, since no topic can have that name. A name past 200
// characters, however long, is 400 invalid_topic_name naming the limit (it was 404 past 400
// characters, the router's old parameter limit).

import type { Family, FamilyCtx } from "../context.js";
import type { Expect } from "../judge.js";

export const paths: Family = {
  name: "odd paths and keys",
  nodes: ["secure", "dev"],
  shortNodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-paths", 1);
    const queue = await ctx.topic("hostile-paths-q", 1);
    const t = ctx.tally;
    const get = async (path: string, e: Expect, method = "GET", known?: Parameters<typeof t.judge>[3]) => {
      const ex = await ctx.raw(method, path);
      t.judge(`${method} ${path}`, ex, e, known);
    };
    const badName: Expect = { errors: ["invalid_topic_name", "not_found"] };
    const noRoute: Expect = { errors: ["not_found"] };

    // Encoded slashes, dot segments, doubled and trailing slashes, case.
    await get(`/v1/topics/${topic}%2Fx`, badName);
    await get(`/v1/topics/${topic}%2fx`, badName);
    await get(`/v1/topics%2F${topic}`, noRoute);
    await get(`/v1/topics/..%2F..%2Fhealthz`, badName);
    await get(`/v1/topics/%2E%2E`, badName);
    await get(`/v1/topics/..`, { errors: ["invalid_topic_name", "not_found"], ok: [200] });
    await get(`/v1/topics/.`, { errors: ["invalid_topic_name", "not_found"], ok: [200] });
    await get(`/v1/topics/x/../${topic}`, { errors: ["not_found"], ok: [200] });
    await get(`/v1/./topics`, { errors: ["not_found"], ok: [200] });
    await get(`/./healthz`, { errors: ["not_found"], ok: [200] });
    await get(`//v1/topics`, { errors: ["not_found"], ok: [200] });
    await get(`/v1//topics`, { errors: ["not_found"], ok: [200] });
    await get(`/v1/topics/`, { ok: [200] });
    await get(`/v1/topics/${topic}/`, { ok: [200] });
    await get(`/V1/TOPICS`, noRoute);
    await get(`/healthz?`, { ok: [200] });
    await get(`/healthz?x`, { ok: [200] });
    await get(`/healthz?&&&==&`, { ok: [200] });
    await get(`/healthz#frag`, { ok: [200], errors: ["bad_request", "not_found"] });
    await get(`http://127.0.0.1/healthz`, { ok: [200] });
    await get(`*`, { errors: ["not_found", "bad_request"] }, "OPTIONS");
    await get(`healthz`, { errors: ["not_found", "bad_request"] });

    // Very long names: 200 characters is a valid name; past it is not.
    for (const len of ctx.long ? [200, 201, 399, 400, 401, 1000, 5000, 15_000] : [200, 201, 401, 5000]) {
      const name = ctx.rng.pick(["a", "Z", "9"]).repeat(len);
      const tooLong: Expect = { errors: ["invalid_topic_name"], check: (e) => (e.responses[0]?.body.toString().includes(`at most 200 characters; this one has ${len}`) ? undefined : "the answer does not name the 200-character limit") };
      await get(`/v1/topics/${name}`, len <= 200 ? { errors: ["topic_not_found"] } : tooLong);
      await get(`/v1/topics/${name}/partitions/0/messages`, len <= 200 ? { errors: ["topic_not_found"] } : tooLong);
    }

    // Unicode raw (not allowed in a request target: 400) and percent-encoded (not a valid name).
    for (const raw of ["é", "日本", "\u{1F600}", "\u202E"]) {
      const ex = await ctx.send(Buffer.concat([Buffer.from("GET /v1/topics/"), Buffer.from(raw, "utf8"), Buffer.from(` HTTP/1.1\r\n${ctx.headers().map(([k, v]) => `${k}: ${v}\r\n`).join("")}Connection: close\r\n\r\n`)]), { halfClose: true });
      t.judge(`GET /v1/topics/${raw} (raw UTF-8)`, ex, { errors: ["bad_request"] });
      await get(`/v1/topics/${encodeURIComponent(raw)}`, badName);
    }
    for (const esc of ["%C0%AF", "%FF", "%E2%80", "%00", "%", "%z", "%zz", "%2", "%%", "a%00b", "%0d%0aX-Injected:%201"]) {
      await get(`/v1/topics/${esc}`, badName);
    }
    // NUL and other control bytes raw in the path: not a request target.
    for (const c of ["\x00", "\x01", "\x7f", "\t"]) {
      const ex = await ctx.send(`GET /v1/topics/a${c}b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, { halfClose: true });
      t.judge(`GET /v1/topics/a${c}b`, ex, { errors: ["bad_request"] });
    }

    // Query oddities on produce: keys that decode oddly, keys at and past 4096 bytes.
    const keys: [string, number][] = [
      ["", 202], ["a&key=b", 202], ["%zz", 202], ["%00", 202], ["a+b", 202], ["%C3%A9", 202], ["%FF", 202],
      ["k".repeat(4096), 202], ["k".repeat(4097), 400], ["%C3%A9".repeat(2048), 202], ["%C3%A9".repeat(2049), 400],
    ];
    for (const [k, want] of keys) {
      const payload = Buffer.from(`paths-key-${ctx.rng.int(0, 1e9)}`);
      const path = `/v1/topics/${topic}/messages?key=${k}`;
      const ex = await ctx.raw("POST", path, payload);
      ctx.record(topic, ex, [payload]);
      t.judge(`POST ${path}`, ex, want === 202 ? { ok: [202] } : { errors: ["invalid_argument"] });
    }
    {
      const payload = Buffer.from("paths-no-equals");
      const ex = await ctx.raw("POST", `/v1/topics/${topic}/messages?key`, payload);
      ctx.record(topic, ex, [payload]);
      t.judge(`POST ?key (no =)`, ex, { ok: [202] });
    }
    // wait_ms: only 0..20000 as digits (the consumes are on an empty queue with tiny waits).
    const waits: [string, boolean][] = [["0", true], ["", true], ["1", true], ["%31", true], ["1&wait_ms=99999", true], ["-1", false], ["20001", false], ["1e3", false], ["0x10", false], ["1.5", false], ["%201", false], ["1%00", false], ["99999999999999999999", false], ["%zz", false], ["NaN", false]];
    for (const [w, okay] of waits) await get(`/v1/topics/${queue}/consume?wait_ms=${w}`, okay ? { ok: [204] } : { errors: ["invalid_argument"] }, "POST");
    for (const m of ["0", "101", "-1", "1e1", "abc"]) await get(`/v1/topics/${queue}/consume/batch?max_messages=${m}`, { errors: ["invalid_argument"] }, "POST");
    await get(`/v1/topics/${queue}/consume/batch?max_messages=100&wait_ms=0`, { ok: [200] }, "POST");
    // Replay: limit above 1000 is read as 1000 (docs/api.md), offsets past the end are empty.
    for (const l of ["1", "1000", "1001", "5000", "", "10&limit=abc"]) await get(`/v1/topics/${topic}/partitions/0/messages?limit=${l}`, { ok: [200] });
    for (const l of ["99999999999999999", "9".repeat(40)]) await get(`/v1/topics/${topic}/partitions/0/messages?limit=${l}`, { ok: [200] }, "GET");
    for (const l of ["0", "-1", "1e3", "abc"]) await get(`/v1/topics/${topic}/partitions/0/messages?limit=${l}`, { errors: ["invalid_argument"] });
    for (const o of ["0", "9007199254740991", "999999"]) await get(`/v1/topics/${topic}/partitions/0/messages?offset=${o}`, { ok: [200] });
    for (const o of ["-1", "9007199254740992", "1.0", "x"]) await get(`/v1/topics/${topic}/partitions/0/messages?offset=${o}`, { errors: ["invalid_argument"] });
    for (const p of ["1", "99999", "%31"]) await get(`/v1/topics/${topic}/partitions/${p}/messages`, { errors: ["partition_not_found"] });
    await get(`/v1/topics/${topic}/partitions/%30/messages`, { ok: [200] });
    for (const p of ["-1", "0x1", "999999", "1.0", "%zz", " 0"]) await get(`/v1/topics/${topic}/partitions/${p}/messages`, { errors: ["invalid_argument", "not_found", "bad_request"] });

    // Topic names at and past the limits, created through the body.
    const names: [string, boolean][] = [
      ["a".repeat(200), true], ["a".repeat(201), false], ["", false], [".a", false], ["-a", false], ["_a", false], ["a.b-c_D9", true],
      ["é", false], ["a b", false], ["a/b", false], ["a\u0000b", false], ["a*", false], ["a\nb", false], ["A".repeat(199) + "é", false], ["a:b", false],
    ];
    for (const [name, valid] of names) {
      const body = JSON.stringify({ name, partitions: 1 });
      const ex = await ctx.raw("POST", "/v1/topics", body, [["Content-Type", "application/json"]]);
      t.judge(`POST /v1/topics ${body}`, ex, valid ? { ok: [201] } : { errors: ["invalid_topic_name"] });
      if (valid && ex.responses[0]?.status === 201) {
        const again = await ctx.raw("POST", "/v1/topics", body);
        t.judge(`POST /v1/topics ${body} again`, again, { errors: ["topic_exists"] });
        const del = await ctx.raw("DELETE", `/v1/topics/${name}`);
        t.judge(`DELETE /v1/topics/${name}`, del, { ok: [204] });
      }
    }

    // Methods a route does not take: 405 with Allow. HEAD and OPTIONS on GET routes (known).
    for (const [m, p] of [["PUT", "/v1/topics"], ["DELETE", "/v1/topics"], ["POST", "/healthz"], ["TRACE", "/v1/topics"], ["PATCH", `/v1/topics/${topic}/messages`], ["GET", `/v1/topics/${topic}/consume`]] as const) {
      await get(p, { errors: [405] }, m);
    }
    for (const p of ["/healthz", "/readyz", "/v1/topics", `/v1/topics/${topic}`, "/metrics"]) {
      await get(p, { ok: [200], head: true }, "HEAD");
      await get(p, { ok: [200, 204], check: (ex) => (ex.responses[0]?.headers.allow === undefined ? "no Allow" : undefined) }, "OPTIONS");
    }
    // Methods Node does not know at all.
    for (const m of ["FOO", "get", "G\u00c9T"]) {
      const ex = await ctx.send(`${m} /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, { halfClose: true });
      t.judge(`${m} /healthz`, ex, { errors: ["bad_request", 405, 501] });
    }
  },
};
