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
    const { chromium } = await import("playwright-core");
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    });
    try {
      const page = await browser.newPage();
      const errors: string[] = [];
      page.on("pageerror", (e) => errors.push(e.message));
      page.on("console", (m) => {
        if (m.type() === "error") errors.push(m.text());
      });
      await page.goto(`file://${html}`);
      await page.waitForSelector("body[data-ready='true']", { timeout: 15_000 });
      for (const id of ["timeline", "throughput", "latency", "lag"]) {
        const drawn = await page.$eval(`svg#${id}`, (el) => ({ drawn: el.getAttribute("data-drawn"), shapes: el.querySelectorAll("path, rect, line, circle").length }));
        assert.equal(drawn.drawn, "true", `svg#${id} drawn`);
        assert.ok(drawn.shapes > 0, `svg#${id} has shapes`);
      }
      assert.ok((await page.$$("svg#timeline rect.fault")).length > 0, "the fault window is shaded on the timeline");
      assert.deepEqual(errors, []);
      assert.equal(await page.$eval("#verdict", (el) => el.textContent), "VALID");
    } finally {
      await browser.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
