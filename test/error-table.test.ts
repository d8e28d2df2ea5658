// One error table: docs/api.md must list exactly the codes of src/protocol/errors.ts, with the
// same status and definiteness.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { ERRORS } from "../src/protocol/errors.js";
import { REPO_ROOT } from "./harness.js";

test("docs/api.md lists every error code with its status and definiteness", async () => {
  const doc = await readFile(join(REPO_ROOT, "docs", "api.md"), "utf8");
  const rows = new Map<string, { status: number; definite: boolean }>();
  for (const m of doc.matchAll(/^\| `([a-z_]+)` \| (\d{3}) \| (yes|no) \|/gm)) {
    rows.set(m[1]!, { status: Number(m[2]), definite: m[3] === "yes" });
  }
  const table = Object.entries(ERRORS).map(([code, e]) => [code, { status: e.status, definite: e.definite }] as const);
  assert.deepEqual(new Map(table), rows);
  for (const [code, e] of Object.entries(ERRORS)) {
    assert.ok(e.message.length > 10, `${code} has a message that says what to do`);
  }
});
