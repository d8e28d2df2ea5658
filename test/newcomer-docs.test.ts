// Issue 16 item 11: docs that a new user found wrong. docs/api.md said it lists every route but had
// no users and grants routes and no `parent`; the docs cited files that are not in the repository
// (SPEC.md, shared/peers/...); the calibration table of docs/verification.md lacked a seeded bug
// that `narad verify calibrate` runs. These read the sources and the docs, no node needed.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { CALIBRATION_CASES } from "../src/verify/workloads/calibrate.js";
import { REPO_ROOT } from "./harness.js";

const read = (p: string) => readFileSync(join(REPO_ROOT, p), "utf8");
const docs = ["README.md", ...readdirSync(join(REPO_ROOT, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)];

describe("issue 16 item 11: the docs say what is there", () => {
  it("docs/api.md names every public route the server registers (users and grants were missing)", () => {
    const api = read("docs/api.md");
    const dir = join(REPO_ROOT, "src", "http", "routes");
    const routes = readdirSync(dir)
      .filter((f) => f.endsWith(".ts"))
      .flatMap((f) => [...readFileSync(join(dir, f), "utf8").matchAll(/\bon\("(GET|POST|PATCH|DELETE)", "([^"]+)"/g)].map((m) => ({ method: m[1]!, path: m[2]! })));
    assert.ok(routes.length >= 25, `found only ${routes.length} routes`);
    const missing = routes.filter((r) => {
      // docs/api.md writes :topic as {topic} (and :partition as {p} in places).
      const re = new RegExp(`${r.method} ${r.path.replace(/[.*+?^$()|[\]\\]/g, "\\$&").replace(/:[a-z]+/g, "\\{[a-z]+\\}")}(?![\\w/{])`);
      return !re.test(api);
    });
    assert.deepEqual(missing, []);
  });

  it("docs/api.md's topic has every field GET /v1/topics/{t} answers (parent was missing)", () => {
    const api = read("docs/api.md");
    const wire = read("src/protocol/wire.ts");
    const body = (name: string) => new RegExp(`export interface ${name}\\b[^{]*\\{([\\s\\S]*?)\\n\\}`).exec(wire)![1]!;
    const fields = ["TopicJson", "TopicSettingsJson", "ReplicationJson"].flatMap((n) => [...body(n).matchAll(/^\s+([a-z_]+)\??:/gm)].map((m) => m[1]!));
    assert.ok(fields.includes("parent"));
    const line = /^A topic: (.*)$/m.exec(api)![1]!;
    assert.deepEqual(fields.filter((f) => !line.includes(`"${f}"`)), []);
  });

  it("the docs cite only files the repository has (SPEC.md and shared/peers/... are not in it)", () => {
    const cited = new Set<string>();
    for (const d of docs) {
      for (const m of read(d).matchAll(/`((?:src|test|docs|bench|scripts|shared|bin)\/[A-Za-z0-9_./-]+?)`/g)) {
        if (!m[1]!.includes("X")) cited.add(m[1]!);
      }
      for (const m of read(d).matchAll(/\b(SPEC\.md|shared\/peers\/[\w./-]+)/g)) cited.add(`${d}: ${m[1]!}`);
    }
    assert.ok(cited.size > 30);
    const absent = [...cited].filter((p) => p.includes(": ") || !existsSync(join(REPO_ROOT, p.replace(/\/$/, ""))));
    assert.deepEqual(absent, []);
  });

  it("docs/verification.md's calibration table has a row per seeded bug calibrated (copy-cursors-not-persisted was missing)", () => {
    const text = read("docs/verification.md");
    const section = text.slice(text.indexOf("## Calibration"), text.indexOf("## What these tests cannot catch"));
    const rows = section.split("\n").filter((l) => l.startsWith("| ") && !l.startsWith("| seeded bug") && !l.startsWith("|---"));
    const bugs = new Set(CALIBRATION_CASES.map((c) => c.bug).filter((b) => b !== null));
    assert.equal(rows.length, bugs.size, `table rows:\n${rows.join("\n")}\nbugs: ${[...bugs].join(", ")}`);
  });
});
