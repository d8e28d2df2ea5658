// Issue 16 item 6: what the CLI did to a new user in the first hour. Each test is named after
// what broke: a stack trace when piped into head, a pino stack trace for a bad log level, usage
// errors exiting 1 or 2 depending on the command, a 401 that did not say how to log in.

import { before, describe, it } from "node:test";
import { nodeForSuite } from "./support/suite-node.js";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Narad } from "../src/client/index.js";
import { NARAD_BIN, REPO_ROOT, removeDir, runNarad, startNode, tempDir } from "./harness.js";

describe("issue 16 item 6: the CLI's first hour", () => {
  const suite = nodeForSuite();
  before(async () => {
    const c = new Narad({ url: suite.node.url });
    await c.createTopic({ name: "many", partitions: 1 });
    await c.produceBatch("many", Array.from({ length: 5000 }, (_, i) => ({ payload: `line ${i} ${"x".repeat(40)}` })));
    await c.close();
  });

  it("narad replay piped into a reader that leaves (head) exits 0 quietly (it crashed with an EPIPE stack trace)", async () => {
    const p = spawn(process.execPath, [NARAD_BIN, "replay", "many", "--partition", "0", "--url", suite.node.url], { cwd: REPO_ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    p.stderr.on("data", (b: Buffer) => (stderr += b.toString("utf8")));
    // Like `head -1`: read the first chunk, then close the pipe.
    await new Promise<void>((r) => p.stdout.once("data", () => r()));
    p.stdout.destroy();
    const code = await new Promise<number | null>((r) => p.once("close", (c) => r(c)));
    assert.equal(stderr, "", "nothing on stderr");
    assert.equal(code, 0);
  });

  it("a bad NARAD_LOG_LEVEL refuses the start with one line (it was a pino stack trace)", async () => {
    const dir = await tempDir();
    try {
      const r = await runNarad(["server", "start", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0"], { env: { NARAD_LOG_LEVEL: "loud" } });
      assert.equal(r.code, 1);
      assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
      assert.match(r.stderr, /^narad: .*log_level must be one of fatal, error, warn, info, debug, trace, silent, not "loud"/);
    } finally {
      await removeDir(dir);
    }
  });

  it("usage errors exit 2 on every command, with one narad: usage: line (commander's exit 1 on server, verify and unknown commands)", async () => {
    const cases = [
      ["bogus-command"],
      ["server", "start", "--bogus"],
      ["server", "bogus"],
      ["verify", "run"],
      ["verify", "check", "--bogus"],
      ["topic", "create"],
      ["topic", "list", "--bogus"],
      ["node", "list", "--bogus"],
      ["partition", "move"],
      ["produce"],
    ];
    for (const args of cases) {
      const r = await runNarad(args);
      assert.equal(r.code, 2, `narad ${args.join(" ")}: ${r.stderr}`);
      assert.match(r.stderr, /^narad: usage: /, `narad ${args.join(" ")}`);
      assert.equal(r.stderr.trim().split("\n").length, 1, `narad ${args.join(" ")}: ${r.stderr}`);
    }
  });

  it("a 401 names --user and NARAD_USER (it only said the credentials were missing)", async () => {
    const secured = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: "first-hour-admin" } });
    try {
      const r = await runNarad(["topic", "list", "--url", secured.url], { env: { NARAD_USER: "", NARAD_PASSWORD: "" } });
      assert.equal(r.code, 1);
      assert.match(r.stderr, /^narad: unauthorized: .*--user and --password, or NARAD_USER and NARAD_PASSWORD/);
      const ok = await runNarad(["topic", "list", "--url", secured.url, "--user", "admin", "--password", "first-hour-admin"]);
      assert.equal(ok.code, 0, ok.stderr);
    } finally {
      await secured.stop();
      await removeDir(secured.dataDir);
    }
  });
});

describe("issue 16 item 9: parent, and child topics from the CLI", () => {
  const suite = nodeForSuite();

  it("narad child attach, list and detach work a child topic (only raw HTTP could), and parent is kept by the SDK and topic describe --json (both dropped it)", async () => {
    const url = ["--url", suite.node.url];
    for (const t of ["orders", "audit"]) assert.equal((await runNarad(["topic", "create", t, ...url])).code, 0);
    const attach = await runNarad(["child", "attach", "orders", "audit", "--kind", "delay", "--delay-ms", "250", "--json", ...url]);
    assert.equal(attach.code, 0, attach.stderr);
    assert.deepEqual(JSON.parse(attach.stdout), { topic: "audit", kind: "delay", delay_ms: 250 });
    const list = await runNarad(["child", "list", "orders", "--json", ...url]);
    assert.deepEqual(JSON.parse(list.stdout), { children: [{ topic: "audit", kind: "delay", delay_ms: 250 }] });

    const c = new Narad({ url: suite.node.url });
    try {
      assert.deepEqual((await c.getTopic("audit")).parent, { topic: "orders", kind: "delay" });
      assert.equal((await c.getTopic("orders")).parent, null);
    } finally {
      await c.close();
    }
    const described = await runNarad(["topic", "describe", "audit", "--json", ...url]);
    assert.deepEqual((JSON.parse(described.stdout) as { parent: unknown }).parent, { topic: "orders", kind: "delay" });
    assert.match((await runNarad(["topic", "describe", "audit", ...url])).stdout, /^parent\s+orders \(delay\)$/m);

    const bad = await runNarad(["child", "attach", "orders", "audit", "--kind", "sideways", ...url]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^narad: usage: --kind must be one of fanout, delay, replica, remote/);
    const twice = await runNarad(["child", "attach", "orders", "audit", "--kind", "fanout", ...url]);
    assert.equal(twice.code, 1);
    assert.match(twice.stderr, /^narad: child_exists: /);
    assert.equal((await runNarad(["child", "detach", "orders", "audit", ...url])).code, 0);
    assert.equal((await runNarad(["child", "list", "orders", ...url])).stdout, "no children\n");
  });
});
