// The stream model's reports and `narad verify check` on a stream history: the recorder's lines
// read back, the summary printed the spec's way, the HTML page's fault and silence shading.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Writable } from "node:stream";
import { checkStreamText, historyModel } from "../checker/stream/index.js";
import { StreamHistoryWriter } from "../history/stream.js";
import { runCheckCommand } from "./command.js";
import { formatStreamSummary, renderStreamHtml } from "./stream.js";

const MS = 1_000_000;

test("the summary prints silence in seconds with two decimals; the HTML page shades the fault and the silence after it", () => {
  const lines: string[] = [];
  const L = (ms: number, process: string, type: string, f: string, value: unknown) =>
    lines.push(JSON.stringify({ index: lines.length, time_ns: Math.round(ms * MS), process, type, f, value }));
  L(0, "driver", "ok", "config", { model: "stream", stream: "S", system: "t", client: "c@1", api: "ordered", prediction: "resumes within 3 s" });
  L(1, "p0", "invoke", "publish", { stream: "S", msg: 1 });
  L(2, "p0", "ok", "publish", { seq: 1 });
  L(40, "nemesis", "invoke", "fault", { kind: "cut", mode: "reset" });
  L(40, "nemesis", "ok", "fault", { kind: "cut" });
  L(1000, "p0", "invoke", "publish", { stream: "S", msg: 2 });
  L(1001, "p0", "ok", "publish", { seq: 2 });
  L(8040, "nemesis", "invoke", "fault", { kind: "heal" });
  L(8040, "nemesis", "ok", "fault", { kind: "heal", stopped: { connections_reset: 1 } });
  L(20010, "c0", "ok", "deliver", { msg: 1, seq: 1 });
  L(20011, "c0", "ok", "deliver", { msg: 2, seq: 2 });
  L(20012, "c0", "invoke", "drain", { until_seq: 2 });
  L(20013, "c0", "ok", "drain", { seq: 2 });
  const r = checkStreamText(lines.join("\n") + "\n");
  const text = formatStreamSummary(r);
  assert.match(text, /silence after cut \(reset\) \(ended 8\.04 s\): 11\.97 s/);
  assert.match(text, /lag          max 20\.01 s \(seq 1\)/);
  assert.match(text, /prediction   resumes within 3 s/);
  const html = renderStreamHtml(r);
  assert.equal(html.match(/<rect class="silence"/g)?.length, 1);
  assert.equal(html.match(/<rect class="fault"/g)?.length, 1);
  assert.match(html, /resumes within 3 s/);
});

test("the recorder writes what the checker reads; narad verify check sends a stream history to the stream model", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-stream-"));
  try {
    const path = join(dir, "h.jsonl");
    let t = 0n;
    const clock = { nowNs: () => Number((t += 1_000_000n)) };
    const chunks: string[] = [];
    const sink = new Writable({
      write(c, _e, cb) {
        chunks.push(String(c));
        cb();
      },
    });
    const w = new StreamHistoryWriter(sink, { model: "stream", stream: "S", system: "t", client: "c@1", api: "ordered", prediction: "no silence" }, { clock });
    w.invoke("p0", "publish", { stream: "S", msg: 1 });
    w.complete("p0", "ok", { seq: 1 });
    w.clientEvent("c0", "reconnect");
    w.deliver("c0", 1, 1);
    w.invoke("c0", "drain", { until_seq: 1 });
    w.complete("c0", "ok", { seq: 1 });
    await w.close();
    await writeFile(path, chunks.join(""));
    assert.equal(await historyModel(path), "stream");
    let printed = "";
    const out = new Writable({
      write(c, _e, cb) {
        printed += String(c);
        cb();
      },
    });
    const code = await runCheckCommand({ history: path, json: join(dir, "r.json"), html: join(dir, "r.html") }, out);
    assert.equal(code, 0, printed);
    assert.match(printed, /VALID — every acknowledged publish \(1\) delivered once, in stream order/);
    assert.match(printed, /client       reconnect ×1/);
    assert.match(printed, /prediction   no silence/);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

