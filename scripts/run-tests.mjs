// Runs every compiled test file (dist/**/*.test.js) with node's test runner.
// NARAD_TEST_FILTER=substring narrows the set, for working on one area.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";

function walk(dir, out) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (name.endsWith(".test.js")) out.push(p);
  }
  return out;
}
const filter = process.env.NARAD_TEST_FILTER ?? "";
// The longest files start first, so that with two at a time the suite's wall time is not the
// sum of a long file that happened to sort last and everything before it.
const SLOW_FIRST = ["verify-calibrate", "verify-replicated", "verify-client-calibrate", "replication.test", "cluster-scenarios"];
const rank = (f) => {
  const i = SLOW_FIRST.findIndex((s) => f.includes(s));
  return i < 0 ? SLOW_FIRST.length : i;
};
const files = walk("dist", [])
  .filter((f) => f.includes(filter))
  .sort((a, b) => rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0));
if (files.length === 0) {
  console.error(`no test files match ${JSON.stringify(filter)}`);
  process.exit(1);
}
const r = spawnSync(process.execPath, ["--test", "--test-concurrency=2", ...files], { stdio: "inherit" });
process.exit(r.status ?? 1);
