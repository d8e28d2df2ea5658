// docs/operations.md lists every setting of src/config.ts with its variable and default.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { SETTINGS, envName } from "../src/config.js";
import { REPO_ROOT } from "./harness.js";

test("docs/operations.md lists every setting, its variable and its default", async () => {
  const doc = await readFile(join(REPO_ROOT, "docs", "operations.md"), "utf8");
  for (const s of SETTINGS) {
    const row = doc.split("\n").find((l) => l.startsWith(`| \`${s.key}\` |`));
    assert.ok(row, `no row for ${s.key}`);
    assert.ok(row.includes(`\`${envName(s.key)}\``), `${s.key}: variable`);
    if (s.default !== undefined) assert.ok(row.includes(`\`${s.default}\``), `${s.key}: default`);
    if (s.flag !== undefined) assert.ok(row.includes(`\`${s.flag}\``), `${s.key}: flag`);
  }
});
