// `narad verify check`: exit codes, the printed summary and the report files.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough } from "node:stream";
import { runCheckCommand } from "./command.js";
import { HistoryBuilder } from "../checker/history-builder.js";

async function run(args: Parameters<typeof runCheckCommand>[0]): Promise<{ code: number; out: string }> {
  const out = new PassThrough();
  let text = "";
  out.on("data", (d: Buffer) => (text += d.toString()));
  const code = await runCheckCommand(args, out);
  return { code, out: text };
}

async function inTempDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "narad-check-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function history(kind: "valid" | "invalid" | "unknown"): string {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 10);
  if (kind !== "invalid") {
    b.consume("c1", "t", "m1", "d1", 20, 21);
    b.ack("c1", "t", "m1", "d1", 22, 23);
  }
  if (kind === "unknown") b.fault("kill", 30, 31, { node: "n1" });
  b.empty("c1", "t", 100, 101);
  return b.build().text;
}

test("exit 0 for valid, 1 for invalid, 2 for unknown, with the verdict on the first line", async () => {
  await inTempDir(async (dir) => {
    for (const [kind, code] of [
      ["valid", 0],
      ["invalid", 1],
      ["unknown", 2],
    ] as const) {
      const path = join(dir, `${kind}.jsonl`);
      await writeFile(path, history(kind));
      const r = await run({ history: path });
      assert.equal(r.code, code, r.out);
      assert.match(r.out, new RegExp(`^narad verify check: ${kind.toUpperCase()}`));
    }
  });
});

test("--json and --html write the reports and the summary points at them", async () => {
  await inTempDir(async (dir) => {
    const path = join(dir, "h.jsonl");
    await writeFile(path, history("invalid"));
    const json = join(dir, "r.json");
    const html = join(dir, "r.html");
    const r = await run({ history: path, json, html });
    assert.equal(r.code, 1);
    const report = JSON.parse(await readFile(json, "utf8")) as { format: string; verdict: string; anomalies: Array<{ name: string }> };
    assert.equal(report.format, "narad-check/1");
    assert.equal(report.anomalies[0]!.name, "lost");
    assert.match(await readFile(html, "utf8"), /<svg id="lag"/);
    assert.match(r.out, /reports +JSON .*r\.json · HTML .*r\.html/);
  });
});

test("a malformed history exits 2 and prints the line and the rule; an unreadable one exits 3", async () => {
  await inTempDir(async (dir) => {
    const path = join(dir, "h.jsonl");
    const lines = history("valid").split("\n");
    lines[3] = lines[3]!.replace('"time_ns":20000000', '"time_ns":1');
    await writeFile(path, lines.join("\n"));
    const r = await run({ history: path });
    assert.equal(r.code, 2);
    assert.match(r.out, /malformed history .*, line 4: time_ns 1 goes back/);
    const missing = await run({ history: join(dir, "nope.jsonl") });
    assert.equal(missing.code, 3);
    assert.match(missing.out, /cannot read .*nope\.jsonl: ENOENT/);
  });
});

test("a report that cannot be written exits 3 after printing the summary", async () => {
  await inTempDir(async (dir) => {
    const path = join(dir, "h.jsonl");
    await writeFile(path, history("valid"));
    const r = await run({ history: path, json: join(dir, "no", "such", "r.json") });
    assert.equal(r.code, 3);
    assert.match(r.out, /cannot write .*r\.json: ENOENT/);
    assert.match(r.out, /narad verify check: VALID/);
  });
});
