// The reports: the summary fits a screen and names the anomalies' operations; the HTML page is
// self-contained, escapes what the history says, and (where Chromium is installed) draws every
// plot without a script error.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { checkEvents } from "../checker/check.js";
import { HistoryBuilder } from "../checker/history-builder.js";
import { simulateHistory } from "../checker/simulate.js";
import { formatSummary } from "./terminal.js";
import { renderHtml } from "./html.js";
import { renderJson } from "./json.js";

function invalidRun(lost: number): ReturnType<typeof checkEvents> {
  const b = new HistoryBuilder();
  for (let i = 0; i < lost; i++) b.produce("p1", "t", `m${i}</script><script>alert(1)</script>`, i * 2, i * 2 + 1);
  b.fault("kill", 10, 11, { node: "n1" });
  b.fault("start", 12, 20, { node: "n1" }, "ok", { boot: "b2" });
  b.empty("c1", "t", 1000, 1001);
  return checkEvents(b.build().events);
}

test("the terminal summary stays on one screen and lists anomalies with their operations", () => {
  const r = invalidRun(40);
  const text = formatSummary(r, { jsonPath: "out.json", htmlPath: "out.html" });
  const lines = text.trimEnd().split("\n");
  assert.ok(lines.length <= 30, `${lines.length} lines`);
  assert.match(lines[0]!, /^narad verify check: INVALID — 40 anomalies: 40 lost/);
  assert.match(text, /lost +m0<\/script>.* on t · ops 1, \d+/);
  assert.match(text, /… 30 more in the JSON report/);
  assert.match(text, /reports +JSON out\.json · HTML out\.html/);
});

test("the JSON report is the Report, parseable", () => {
  const r = invalidRun(2);
  assert.deepEqual(JSON.parse(renderJson(r)), JSON.parse(JSON.stringify(r)));
});

test("the HTML report is one self-contained file with the plot hooks, and escapes the history's strings", () => {
  const html = renderHtml(invalidRun(3));
  for (const id of ["timeline", "throughput", "latency", "lag"]) assert.match(html, new RegExp(`<svg id="${id}"`));
  // Nothing fetched: no src or href attributes, no CSS url() or @import (the SVG namespace URI is only a name).
  assert.doesNotMatch(html, /\ssrc=|\shref=|url\(|@import|fetch\(|XMLHttpRequest/);
  assert.equal(html.match(/<script/g)!.length, 2);
  assert.doesNotMatch(html, /<script>alert/);
  const data = html.match(/<script type="application\/json" id="narad-data">(.*?)<\/script>/s)![1]!;
  const parsed = JSON.parse(data) as { series: { buckets: number } };
  assert.ok(parsed.series.buckets > 0);
});

test("the HTML report draws every plot in headless Chromium", { skip: existsSync("/usr/bin/chromium") ? false : "Chromium is not installed: apt-get update && apt-get install -y chromium (then npm test runs this)" }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-report-"));
  try {
    const r = checkEvents(simulateHistory({ seed: 11, durationMs: 400 }));
    const path = join(dir, "report.html");
    await writeFile(path, renderHtml(r));
    const out = spawnSync(
      "/usr/bin/chromium",
      [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        `--user-data-dir=${join(dir, "profile")}`,
        "--dump-dom",
        `file://${path}`,
      ],
      { encoding: "utf8", timeout: 60_000 },
    );
    // data-ready is set by the last statement of the script: any script error leaves it unset.
    assert.match(out.stdout, /<body[^>]*data-ready="true"/, out.stderr.slice(-2000));
    for (const id of ["timeline", "throughput", "latency", "lag"]) {
      assert.match(out.stdout, new RegExp(`<svg id="${id}"[^>]*data-drawn="true"`));
    }
    assert.ok((out.stdout.match(/<path class="series/g) ?? []).length >= 10);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("the summary and the HTML page name the next wave's anomalies (duplicate-produce, dead letters)", () => {
  const b = new HistoryBuilder({ topics: { t: { partitions: 1, max_deliveries: 1, dead_letter_topic: "d" }, d: { partitions: 1 } }, visibility_timeout_ms: 1_000 });
  b.idempotentProduce("p1", "t", "m1", "prod-1", 0, 0, 10, "ok", { partition: 0, offset: 0 });
  b.idempotentProduce("p1", "t", "m1", "prod-1", 0, 20, 30, "ok", { partition: 0, offset: 1 });
  b.consume("c1", "t", "m1", "h1", 40, 41);
  b.handle("nack", "c1", "t", "m1", "h1", 50, 51);
  b.produce("p1", "t", "m2", 60, 70);
  b.consume("c1", "t", "m2", "h2", 80, 81);
  b.handle("nack", "c1", "t", "m2", "h2", 90, 91);
  b.consume("c1", "t", "m2", "h3", 100, 101);
  b.ack("c1", "t", "m2", "h3", 110, 111);
  b.empty("c1", "t", 3000, 3001);
  b.empty("c2", "d", 3000, 3001);
  const r = checkEvents(b.build().events);
  const names = Object.keys(r.anomalyCounts).sort();
  assert.deepEqual(names, ["delivered-after-dead-letter", "duplicate-produce", "lost"]);
  const text = formatSummary(r);
  const html = renderHtml(r);
  for (const name of names) {
    assert.match(text, new RegExp(`${name} ×1`));
    assert.ok(html.includes(name), name);
  }
});
