// The HTML report opened in headless Chromium (Debian's `chromium`, driven by playwright-core):
// every plot is drawn and the page raises no script error. Skipped, with how to install it, where
// Chromium is absent.

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runNarad } from "./harness.js";
import { checkText } from "../src/verify/checker/index.js";
import { checkStreamText } from "../src/verify/checker/stream/index.js";
import { renderStreamHtml } from "../src/verify/report/stream.js";
import { clientScenario, measureLane, renderClientHtml, type AppEvent, type FaultWindow } from "../src/verify/workloads/client/index.js";

const CHROMIUM = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => existsSync(p));

/** A small history with produces, deliveries, acks, a redelivery and a kill with its evidence. */
function history(): string {
  const lines: object[] = [];
  let i = 0;
  let t = 0;
  const add = (process: string, type: string, f: string, value: object) => lines.push({ index: i++, time_ns: (t += 3_000_000), process, type, f, value });
  lines.push({ index: i++, time_ns: 0, process: "driver", type: "ok", f: "config", value: { ack_flush_ms: 100, ack_sync_ms: 1000, visibility_timeout_ms: 30000, topics: { t: { partitions: 1 } }, children: {} } });
  for (let m = 0; m < 40; m++) {
    add("p1", "invoke", "produce", { topic: "t", msg: `m${m}` });
    add("p1", "ok", "produce", { partition: 0, offset: m, status: 202 });
  }
  add("nemesis", "invoke", "fault", { kind: "kill", node: "n1" });
  add("nemesis", "ok", "fault", { kind: "kill", node: "n1", signal: "SIGKILL" });
  add("nemesis", "invoke", "fault", { kind: "start", node: "n1" });
  add("nemesis", "ok", "fault", { kind: "start", node: "n1", pid: 42, boot: "b2" });
  for (let m = 0; m < 40; m++) {
    add("c1", "invoke", "consume", { topic: "t" });
    add("c1", "ok", "consume", { topic: "t", msg: `m${m}`, partition: 0, offset: m, delivery: `d${m}`, delivery_count: 1, node: "n1", boot: "b2" });
    add("c1", "invoke", "ack", { topic: "t", msg: `m${m}`, delivery: `d${m}` });
    add("c1", "ok", "ack", { status: 204 });
  }
  add("c1", "invoke", "consume", { topic: "t" });
  add("c1", "ok", "consume", { topic: "t", msg: null });
  return lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
}

test("the HTML report draws every plot in headless Chromium with no script errors", { skip: CHROMIUM === undefined ? "Chromium is not installed: apt-get update && apt-get install -y chromium (then npm test runs this)" : false }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-report-"));
  try {
    const h = join(dir, "history.jsonl");
    const html = join(dir, "report.html");
    await writeFile(h, history());
    const r = await runNarad(["verify", "check", h, "--html", html, "--json", join(dir, "report.json")]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    await inChromium(html, async (page) => {
      for (const id of ["timeline", "throughput", "latency", "lag"]) {
        const drawn = await page.$eval(`svg#${id}`, (el) => ({ drawn: el.getAttribute("data-drawn"), shapes: el.querySelectorAll("path, rect, line, circle").length }));
        assert.equal(drawn.drawn, "true", `svg#${id} drawn`);
        assert.ok(drawn.shapes > 0, `svg#${id} has shapes`);
      }
      assert.ok((await page.$$("svg#timeline rect.fault")).length > 0, "the fault window is shaded on the timeline");
      // The silence after the kill's start, until the next delivery, shaded on every plot.
      for (const id of ["timeline", "throughput", "lag"]) assert.ok((await page.$$(`svg#${id} rect.silence`)).length > 0, `the silence is shaded on svg#${id}`);
      assert.equal(await page.$eval("#verdict", (el) => el.textContent), "VALID");
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

const LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];

/** Opens `html` (a file) in headless Chromium and runs `fn` on the page; script errors fail the test. */
async function inChromium(html: string, fn: (page: import("playwright-core").Page) => Promise<void>): Promise<void> {
  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: LAUNCH_ARGS });
  try {
    const page = await browser.newPage();
    const errors: string[] = [];
    page.on("pageerror", (e) => errors.push(e.message));
    page.on("console", (m) => {
      if (m.type() === "error") errors.push(m.text());
    });
    await page.goto(`file://${html}`);
    await page.waitForSelector("body[data-ready='true']", { timeout: 15_000 });
    await fn(page);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
}

const SKIP = CHROMIUM === undefined ? "Chromium is not installed: apt-get update && apt-get install -y chromium (then npm test runs this)" : false;

test("the stream model's report shades the silence after a cut and sets the prediction beside the measure", { skip: SKIP }, async () => {
  const lines: string[] = [];
  const L = (ms: number, process: string, type: string, f: string, value: unknown) => lines.push(JSON.stringify({ index: lines.length, time_ns: Math.round(ms * 1e6), process, type, f, value }));
  L(0, "driver", "ok", "config", { model: "stream", stream: "S", system: "t", client: "c@1", api: "ordered", prediction: "delivery resumes within 3 s of the heal" });
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
  const dir = await mkdtemp(join(tmpdir(), "narad-report-"));
  try {
    const html = join(dir, "stream.html");
    await writeFile(html, renderStreamHtml(checkStreamText(lines.join("\n") + "\n")));
    await inChromium(html, async (page) => {
      const silence = await page.$$eval("svg#deliveries rect.silence", (els) => els.map((e) => ({ x: Number(e.getAttribute("x")), w: Number(e.getAttribute("width")), title: e.textContent })));
      assert.equal(silence.length, 1);
      assert.ok(silence[0]!.w > 100, "the shading spans the 11.97 s from the heal to the next delivery");
      assert.match(silence[0]!.title ?? "", /silence 11\.97 s/);
      const fault = await page.$$eval("svg#deliveries rect.fault", (els) => els.map((e) => Number(e.getAttribute("x")) + Number(e.getAttribute("width"))));
      assert.ok(Math.abs(fault[0]! - silence[0]!.x) < 1, "the silence starts where the fault ends");
      const row = await page.$eval("table", (t) => t.textContent ?? "");
      assert.match(row, /delivery resumes within 3 s of the heal/);
      assert.match(row, /silence 11\.97 s/);
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a client run's report puts its findings first, each bound beside its measure, and shades the silence after each fault", { skip: SKIP }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-report-"));
  try {
    const report = checkText(history());
    const sc = clientScenario("cut-3s")!;
    // The application's record: m0..m39 acknowledged by 120 ms, a cut healed at 200 ms, the first
    // delivery after it 2.2 s later (a silence past the 1 s bound: a finding).
    const MS = 1e6;
    const producedNs = new Map(Array.from({ length: 40 }, (_, m) => [`m${m}`, (m * 3 + 1) * MS]));
    const events: AppEvent[] = [];
    for (let m = 0; m < 40; m++) {
      const t = (2_400 + m) * MS;
      events.push({ tNs: t, lane: "process", kind: "deliver", msg: `m${m}`, deliveryCount: 1 }, { tNs: t, lane: "process", kind: "handled", msg: `m${m}` });
    }
    const faults: FaultWindow[] = [{ kind: "cut", startNs: 130 * MS, endNs: 200 * MS, endsLeases: false, lane: null }];
    const lane = measureLane({ api: "process", topic: "t", prediction: sc.predictions.process, producedNs, events, faults, visibilityTimeoutMs: 4_000 });
    const found = lane.checks.filter((c) => !c.ok).map((c) => `process: ${c.bound} predicted ${c.predicted}, measured ${c.measured}`);
    const html = join(dir, "client.html");
    await writeFile(html, renderClientHtml(report, sc, [lane], faults, events, found));
    await inChromium(html, async (page) => {
      assert.equal(await page.$eval("#findings", (el) => el.getAttribute("data-count")), String(found.length));
      assert.match(await page.$eval("#findings", (el) => el.textContent ?? ""), /process: silence predicted ≤ 1\.00 s after each fault, measured worst 2\.20 s/);
      const rows = await page.$$eval("table.prediction[data-api='process'] tr.check", (trs) => trs.map((tr) => ({ ok: tr.getAttribute("data-ok"), text: tr.textContent ?? "" })));
      assert.equal(rows.length, 6);
      assert.ok(rows.some((r) => r.ok === "false" && /silence/.test(r.text)));
      for (const id of ["timeline", "throughput"]) {
        const titles = await page.$$eval(`svg#${id} rect.silence`, (els) => els.map((e) => e.textContent ?? ""));
        assert.ok(titles.some((t) => /process: silence 2\.20 s after cut \(predicted ≤ 1\.00 s\)/.test(t)), `svg#${id}: ${titles.join(" | ")}`);
      }
      // The findings come before the plots.
      const order = (await page.evaluate("document.getElementById('findings').compareDocumentPosition(document.getElementById('timeline')) & Node.DOCUMENT_POSITION_FOLLOWING")) as number;
      assert.ok(order > 0);
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
