// JSON bombs and numbers out of range, in every route that reads a JSON body: 20 000-deep nesting
// in a field (and the body itself), huge arrays, duplicate keys, __proto__, numbers out of range
// (1e400, -0, 1.5, 2^53 + 1), strings where numbers go and numbers where strings go, invalid
// UTF-8, a BOM, trailing garbage. The right answer is a 4xx of the table (invalid_json,
// invalid_argument, invalid_topic_name, batch_too_large), or the success a valid body gets.
//
// Numbers are judged against JSON's own reading of them: a numeral is the number JSON.parse
// makes of it, and a field takes it when it is a safe integer within the field's bounds.

import type { Family, FamilyCtx } from "../context.js";
import type { Expect } from "../judge.js";

const deep = (n: number) => "[".repeat(n) + "]".repeat(n);
const deepObj = (n: number) => '{"a":'.repeat(n) + "1" + "}".repeat(n);

export const json: Family = {
  name: "json bombs",
  nodes: ["secure", "dev"],
  shortNodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-json", 1);
    const t = ctx.tally;
    let seq = 0;
    const fresh = () => `hostile-json-${ctx.rng.int(0, 1e9)}-${seq++}`;
    await ctx.api("POST", "/v1/users", { name: "hostile-json-user", password: "json-user-Password-1" });
    const post = async (method: string, path: string, body: string | Buffer, e: Expect, contentType = "application/json") => {
      const ex = await ctx.raw(method, path, body, [["Content-Type", contentType]]);
      t.judge(`${method} ${path} ${typeof body === "string" ? body : body.toString("latin1")}`, ex, e);
      return ex;
    };
    const cleanup = async (ex: { responses: { status: number; body: Buffer }[] }) => {
      if (ex.responses[0]?.status !== 201) return;
      const name = (JSON.parse(ex.responses[0].body.toString()) as { name?: string }).name;
      if (typeof name === "string" && name.startsWith("hostile-json-")) await ctx.api("DELETE", `/v1/topics/${name}`);
    };
    const bad: Expect = { errors: ["invalid_argument", "invalid_json", "invalid_topic_name"] };
    const depth = ctx.n(20_000, 100_000);

    // Deep nesting in each field of each JSON route.
    const fields: [string, string, (v: string) => string][] = [
      ["POST", "/v1/topics", (v) => `{"name":${v}}`],
      ["POST", "/v1/topics", (v) => `{"name":"${fresh()}","partitions":${v}}`],
      ["POST", "/v1/topics", (v) => `{"name":"${fresh()}","visibility_timeout_ms":${v}}`],
      ["POST", "/v1/topics", (v) => `{"name":"${fresh()}","retention_ms":${v}}`],
      ["POST", "/v1/topics", (v) => `{"name":"${fresh()}",${JSON.stringify("x")}:${v}}`],
      ["PATCH", `/v1/topics/${topic}`, (v) => `{"partitions":${v}}`],
      ["PATCH", `/v1/topics/${topic}`, (v) => `{"retention_ms":${v}}`],
      ["POST", `/v1/topics/${topic}/messages/batch`, (v) => `{"messages":${v}}`],
      ["POST", `/v1/topics/${topic}/messages/batch`, (v) => `{"messages":[${v}]}`],
      ["POST", `/v1/topics/${topic}/messages/batch`, (v) => `{"messages":[{"payload_base64":${v}}]}`],
      ["POST", `/v1/topics/${topic}/messages/batch`, (v) => `{"messages":[{"payload_base64":"","key":${v}}]}`],
      ["POST", `/v1/topics/${topic}/ack/batch`, (v) => `{"receipt_handles":${v}}`],
      ["POST", `/v1/topics/${topic}/ack/batch`, (v) => `{"receipt_handles":[],"extend":${v}}`],
      ["POST", `/v1/topics/${topic}/children`, (v) => `{"topic":${v},"kind":"fanout"}`],
      ["POST", `/v1/topics/${topic}/children`, (v) => `{"topic":"x","kind":${v}}`],
      ["POST", `/v1/topics/${topic}/children`, (v) => `{"topic":"${fresh()}","kind":"delay","delay_ms":${v}}`],
      ["POST", "/v1/users", (v) => `{"name":${v},"password":"long-enough-1"}`],
      ["POST", "/v1/users", (v) => `{"name":"hostile-json-u2","password":${v}}`],
      ["PATCH", "/v1/users/hostile-json-user", (v) => `{"password":${v}}`],
      ["POST", "/v1/users/hostile-json-user/grants", (v) => `{"action":${v},"pattern":"x"}`],
      ["POST", "/v1/users/hostile-json-user/grants", (v) => `{"action":"consume","pattern":${v}}`],
      ["POST", `/v1/topics/${topic}/partitions/0/move`, (v) => `{"to":${v}}`],
    ];
    for (const [method, path, body] of fields) {
      for (const v of ctx.long ? [deep(depth), deepObj(50_000)] : [ctx.rng.pick([deep(depth), deepObj(depth)])]) {
        const e = { errors: ["invalid_argument", "invalid_json", "invalid_topic_name", "topic_not_found"] };
        await cleanup(await post(method, path, body(v), e));
      }
    }
    // The whole body deep, and beyond the body limit (413).
    await post("POST", "/v1/topics", deep(depth), bad);
    await post("POST", "/v1/topics", deep(600_000), { errors: ["batch_too_large", "payload_too_large"], close: true });

    // Huge arrays and long strings.
    const many = (n: number, item: string) => "[" + Array.from({ length: n }, () => item).join(",") + "]";
    await post("POST", `/v1/topics/${topic}/ack/batch`, `{"receipt_handles":${many(300_000, "1")}}`, { errors: ["invalid_argument"] });
    await post("POST", `/v1/topics/${topic}/ack/batch`, `{"receipt_handles":${many(1001, '"x"')}}`, { errors: ["batch_too_large"] });
    await post("POST", `/v1/topics/${topic}/ack/batch`, `{"receipt_handles":${many(1000, '"x"')}}`, { ok: [200] });
    await post("POST", `/v1/topics/${topic}/messages/batch`, `{"messages":${many(10_001, '{"payload_base64":""}')}}`, { errors: ["batch_too_large"] });
    await post("POST", "/v1/topics", `{"name":"${"n".repeat(1_000_000)}"}`, { errors: ["invalid_topic_name"] });
    await post("POST", "/v1/topics", `{"name":"${fresh()}","pad":"${"p".repeat(900_000)}"}`, { errors: ["invalid_argument"] });
    if (ctx.long) {
      const payloads = Array.from({ length: 10_000 }, () => Buffer.alloc(0));
      const ex = await post("POST", `/v1/topics/${topic}/messages/batch`, `{"messages":${many(10_000, '{"payload_base64":""}')}}`, { ok: [202] });
      ctx.record(topic, { ...ex, responses: [] });
      if (ex.responses[0]?.status === 202) ctx.ledger.record202(topic, ex.responses[0].body, payloads);
    }

    // Duplicate keys: JSON.parse keeps the last; the node must act on one reading only.
    {
      const a = fresh();
      const b = fresh();
      const ex = await post("POST", "/v1/topics", `{"name":"${a}","name":"${b}","partitions":1}`, { ok: [201], errors: ["invalid_argument", "invalid_json"] });
      if (ex.responses[0]?.status === 201) {
        const made = (JSON.parse(ex.responses[0].body.toString()) as { name: string }).name;
        const other = made === a ? b : a;
        const r = await ctx.api("GET", `/v1/topics/${other}`);
        if (r.status !== 404) t.wrongFound({ input: `duplicate "name" keys`, expected: `only ${made} exists`, got: `${other} answered ${r.status}` });
        else t.passed();
        await ctx.api("DELETE", `/v1/topics/${made}`);
      }
    }
    await cleanup(await post("POST", "/v1/topics", `{"name":"${fresh()}","partitions":1,"partitions":2}`, { ok: [201], errors: ["invalid_argument"] }));
    for (const k of ["__proto__", "constructor", "prototype", "toString", "hasOwnProperty"]) {
      await post("POST", "/v1/topics", `{"name":"${fresh()}","${k}":{"partitions":5}}`, { errors: ["invalid_argument"] });
    }
    await post("POST", "/v1/users", `{"name":"hostile-json-u3","password":"long-enough-1","__proto__":{"admin":true}}`, { errors: ["invalid_argument"] });

    // Numbers: JSON's reading of each numeral decides; the field's bounds from docs/api.md.
    const numerals = ["0", "1", "2", "-1", "1.5", "1.0", "1e0", "1E0", "2.0000000000000001", "1e400", "-1e400", "-0", "0.0", "-0.0", "9007199254740993", "9007199254740991", "1e-400", "01", "+1", "0x10", ".5", "1.", "NaN", "Infinity", "-Infinity", '"1"', "true", "false", "null", "[]", "{}", "[1]", '"1e3"', "1 2"];
    const bounded: [string, number, number][] = [["partitions", 1, 2], ["visibility_timeout_ms", 1, 43_200_000], ["retention_ms", 1000, 315_360_000_000]];
    const extraNumerals = ["43200000", "43200001", "1000", "999", "315360000000", "315360000001", "1e3", "1024", "1025", "4.32e7"];
    for (const [field, min, max] of bounded) {
      const all = [...numerals, ...extraNumerals];
      for (const num of ctx.rng.sample(all.length, ctx.n(8, all.length)).map((i) => all[i]!)) {
        let e: Expect;
        try {
          const v: unknown = JSON.parse(`{"v":${num}}`).v;
          const okay = typeof v === "number" && Number.isSafeInteger(v) && v >= min && v <= max;
          // A topic of more partitions is not made here: each partition holds file descriptors.
          if (field === "partitions" && typeof v === "number" && Number.isSafeInteger(v) && v > max && v <= 1024) continue;
          e = okay ? { ok: [201] } : { errors: ["invalid_argument"] };
        } catch {
          e = { errors: ["invalid_json"] };
        }
        await cleanup(await post("POST", "/v1/topics", `{"name":"${fresh()}","${field}":${num}}`, e));
      }
    }
    // Patching numbers, and strings where names go.
    for (const num of ["1", "0", "-0", "1e400", '"2"', "1.5"]) {
      const v = (() => { try { return JSON.parse(num) as unknown; } catch { return undefined; } })();
      const e: Expect = v === 1 ? { ok: [200] } : v === 0 || v === -0 ? { errors: ["invalid_argument", "partitions_decrease"] } : { errors: ["invalid_argument"] };
      await post("PATCH", `/v1/topics/${topic}`, `{"partitions":${num}}`, e);
    }
    for (const v of ["5", "true", "null", "[]", "{}", '"x\\u0000y"', '"\\ud800"']) {
      await post("POST", "/v1/topics", `{"name":${v}}`, { errors: ["invalid_topic_name"] });
      await post("POST", "/v1/users", `{"name":${v},"password":"long-enough-1"}`, { errors: ["invalid_argument"] });
      await post("POST", "/v1/users/hostile-json-user/grants", `{"action":${v},"pattern":"x"}`, { errors: ["invalid_argument"] });
    }
    // ack batch extend values (docs/api.md: true | 0; a JSON 0 is 0 however it is written).
    for (const [v, okay] of [["true", true], ['"true"', true], ["0", true], ['"0"', true], ["-0", true], ["0.0", true], ["false", true], ["null", true], ["1", false], ['"1"', false], ["[]", false], ["{}", false], ['"yes"', false]] as const) {
      await post("POST", `/v1/topics/${topic}/ack/batch`, `{"receipt_handles":["x"],"extend":${v}}`, okay ? { ok: [200] } : { errors: ["invalid_argument"] });
    }
    // Batch produce bodies.
    for (const [body, e] of [
      ['{"messages":[]}', { errors: ["invalid_argument"] }],
      ['{"messages":[{"payload_base64":"!!"}]}', { errors: ["invalid_argument"] }],
      ['{"messages":[{"payload_base64":"aGk"}]}', { errors: ["invalid_argument"] }],
      ['{"messages":[{"payload_base64":"aGk=","key":5}]}', { errors: ["invalid_argument"] }],
      [`{"messages":[{"payload_base64":"aGk=","key":"${"k".repeat(4097)}"}]}`, { errors: ["invalid_argument"] }],
      ['{"messages":[null]}', { errors: ["invalid_argument"] }],
      ['{"messages":{"0":{"payload_base64":""}}}', { errors: ["invalid_argument"] }],
      ['{"messages":"x"}', { errors: ["invalid_argument"] }],
    ] as [string, Expect][]) {
      await post("POST", `/v1/topics/${topic}/messages/batch`, body, e);
    }
    for (const [ct, e] of [["application/xml", { errors: ["unsupported_media_type"] }], ["text/plain", { ok: [202] }], ["application/x-www-form-urlencoded", { ok: [202] }], ["APPLICATION/JSON; charset=utf-8", { ok: [202] }]] as [string, Expect][]) {
      const p = Buffer.from(`json-ct-${ctx.rng.int(0, 1e9)}`);
      const ex = await post("POST", `/v1/topics/${topic}/messages/batch`, JSON.stringify({ messages: [{ payload_base64: p.toString("base64") }] }), e, ct);
      if (ex.responses[0]?.status === 202) ctx.ledger.record202(topic, ex.responses[0].body, [p]);
    }

    // Not JSON, or not an object.
    const notJson: [string | Buffer, Expect][] = [
      ["", { errors: ["invalid_json"] }], ["   ", { errors: ["invalid_json"] }], ["null", bad], ['"x"', bad], ["[]", bad], ["5", bad],
      ["{}x", { errors: ["invalid_json"] }], ['{"name":"a"}}', { errors: ["invalid_json"] }], ["{'name':'a'}", { errors: ["invalid_json"] }],
      ['{"name":"a",}', { errors: ["invalid_json"] }], ['{"name":"a" /* c */}', { errors: ["invalid_json"] }], ['{"name":NaN}', { errors: ["invalid_json"] }],
      ["\uFEFF{\"name\":\"a\"}", { errors: ["invalid_json", "invalid_argument", "invalid_topic_name"] }],
      [Buffer.from([0x7b, 0x22, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0x3a, 0x22, 0xff, 0xfe, 0x22, 0x7d]), bad],
      [Buffer.from([0x7b, 0x22, 0x6e, 0x61, 0x6d, 0x65, 0x22, 0x3a, 0x22, 0xc0, 0xaf, 0x22, 0x7d]), bad],
      [Buffer.from('{"name":"a\u0000"}'), { errors: ["invalid_json"] }], // a raw control byte in a JSON string
      ['{"name":"a\\u0000"}', bad],
    ];
    for (const [body, e] of notJson) {
      for (const [m, p] of [["POST", "/v1/topics"], ["POST", `/v1/topics/${topic}/ack/batch`], ["POST", "/v1/users"]]) await post(m!, p!, body, e);
    }
    await ctx.api("DELETE", "/v1/users/hostile-json-user");
  },
};
