// Forged and bit-flipped receipt handles on ack, extend, nack, AckNext (consume?ack=) and the
// ack batch. A live handle is taken first; every single-bit flip of its 31 bytes, characters
// swapped in its 42-character text, its non-canonical spellings (the last character's unused
// bits set), truncations, extensions, random and empty strings, a handle
// of another topic and one of a settled delivery are presented. Right answers: 400
// invalid_receipt_handle for every forgery (a batch: status 400 for each), 410 for the settled
// one; and afterwards the live handle still settles with 204, so no forgery touched its lease.

import type { Family, FamilyCtx } from "../context.js";
import { request } from "../wire.js";

const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

export const handles: Family = {
  name: "forged receipt handles",
  nodes: ["secure"],
  async run(ctx: FamilyCtx) {
    const topic = await ctx.topic("hostile-handles", 2);
    const other = await ctx.topic("hostile-handles-other", 2);
    const t = ctx.tally;
    for (let i = 0; i < 6; i++) await ctx.produce(topic, `handle-${i}`);
    await ctx.produce(other, "other");
    const lease = async (tp: string): Promise<string> => {
      const r = await ctx.api("POST", `/v1/topics/${tp}/consume`);
      const h = r.headers.get("narad-receipt-handle");
      await r.arrayBuffer();
      if (h === null) throw new Error(`setup: no message to lease on ${tp} (${r.status})`);
      return h;
    };
    const live = await lease(topic);
    const foreign = await lease(other);
    const settled = await lease(topic);
    if ((await ctx.api("POST", `/v1/topics/${topic}/ack?receipt_handle=${settled}`)).status !== 204) throw new Error("setup: ack failed");

    const bytes = Buffer.from(live, "base64url");
    const forged = new Set<string>();
    for (const i of ctx.rng.sample(bytes.length * 8, ctx.n(12, bytes.length * 8))) {
      const b = Buffer.from(bytes);
      b[i >> 3] = b[i >> 3]! ^ (1 << (i & 7));
      forged.add(b.toString("base64url"));
    }
    for (let i = 0; i < ctx.n(8, 200); i++) {
      const at = ctx.rng.int(0, live.length - 1);
      const c = ctx.rng.pick([...ALPHABET.replace(live[at]!, "")]);
      forged.add(live.slice(0, at) + c + live.slice(at + 1));
    }
    // The last character's 4 unused bits set otherwise: the same bytes, not the handle (400).
    const last = ALPHABET.indexOf(live[41]!);
    for (let low = 1; low < 16; low++) forged.add(live.slice(0, 41) + ALPHABET[(last & ~15) | ((last & 15) ^ low)]!);
    for (let i = 0; i < ctx.n(4, 100); i++) forged.add(Array.from({ length: 42 }, () => ctx.rng.pick([...ALPHABET])).join(""));
    for (const h of [live.slice(0, 41), live + "A", live.slice(1), live.toLowerCase(), live.toUpperCase(), "A".repeat(42), "_".repeat(42), "x", "0".repeat(4096), live.replace(/-/g, "+").replace(/_/g, "/"), bytes.toString("base64"), bytes.toString("hex"), `${live}\u0000`, "é".repeat(42), "%00", live.slice(0, 40) + "=="]) forged.add(h);
    forged.delete(live);

    const q = (h: string) => encodeURIComponent(h);
    const single = async (h: string, want: string) => {
      for (const path of [`/v1/topics/${topic}/ack?receipt_handle=${q(h)}`, `/v1/topics/${topic}/ack?receipt_handle=${q(h)}&extend=true`, `/v1/topics/${topic}/ack?receipt_handle=${q(h)}&extend=0`, `/v1/topics/${topic}/consume?ack=${q(h)}`]) {
        t.judge(`POST ${path}`, await ctx.raw("POST", path), { errors: [want] });
      }
    };
    for (const h of forged) await single(h, "invalid_receipt_handle");
    await single(foreign, "invalid_receipt_handle");
    await single(settled, "receipt_handle_gone");
    // The ack batch: one status per handle, in order.
    const list = [...forged].slice(0, 1000);
    for (const extend of [undefined, true, 0]) {
      const body = JSON.stringify({ receipt_handles: [...list, foreign, settled], ...(extend === undefined ? {} : { extend }) });
      const ex = await ctx.raw("POST", `/v1/topics/${topic}/ack/batch`, body);
      t.judge(`ack batch of ${list.length + 2} forged/foreign/settled handles, extend ${extend}`, ex, {
        ok: [200],
        errors: ["batch_too_large"],
        check: (e) => {
          const results = (JSON.parse(e.responses[0]!.body.toString()) as { results: { receipt_handle: string; status: number }[] }).results;
          const want = [...list.map(() => 400), 400, 410];
          const bad = results.findIndex((r, i) => r.status !== want[i] || r.receipt_handle !== [...list, foreign, settled][i]);
          return results.length !== want.length ? `${results.length} results for ${want.length} handles` : bad >= 0 ? `result ${bad}: ${JSON.stringify(results[bad])}, expected status ${want[bad]}` : undefined;
        },
      });
    }
    // The live lease was not touched: extend works, then the ack settles it, then it is gone.
    for (const [path, want] of [[`ack?receipt_handle=${live}&extend=true`, 204], [`ack?receipt_handle=${live}`, 204], [`ack?receipt_handle=${live}`, 410]] as const) {
      const ex = await ctx.send(request("POST", `/v1/topics/${topic}/${path}`, ctx.headers([["Connection", "close"]])), { responses: 1 });
      t.judge(`the live handle after the forgeries: ${path}`, ex, want === 204 ? { ok: [204] } : { errors: ["receipt_handle_gone"] });
    }
  },
};
