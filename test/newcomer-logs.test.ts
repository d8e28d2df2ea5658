// Issue 16 item 7: logs. Topic PATCH and user and grant changes left no line (nothing to audit);
// `--dev` printed pino's raw levels and epoch times on a terminal.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { Narad } from "../src/client/index.js";
import { readyLineScanner } from "../src/protocol/ready-line.js";
import { NARAD_BIN, removeDir, startNode, tempDir, waitFor } from "./harness.js";

interface AuditLine {
  module?: string;
  action?: string;
  by?: string | null;
  [k: string]: unknown;
}

function auditLines(output: string): AuditLine[] {
  return output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as AuditLine)
    .filter((l) => l.module === "audit");
}

describe("issue 16 item 7: logs", () => {
  it("topic, user and grant changes each leave an audit line naming who (they left none)", async () => {
    const node = await startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: "audit-admin-pw", NARAD_LOG_LEVEL: "info" } });
    const admin = new Narad({ url: node.url, user: "admin", password: "audit-admin-pw" });
    try {
      await admin.createTopic({ name: "audited", partitions: 1 });
      await admin.updateTopic("audited", { partitions: 2, retentionMs: 3_600_000 });
      await admin.createUser({ name: "erin", password: "erin-password-1" });
      await admin.setUserPassword("erin", "erin-password-2");
      await admin.addGrant("erin", { action: "consume", pattern: "audited" });
      await admin.revokeGrant("erin", { action: "consume", pattern: "audited" });
      await admin.deleteUser("erin");
      await admin.purgeTopic("audited");
      await admin.deleteTopic("audited");
      const want = ["topic.create", "topic.update", "user.create", "user.password", "grant.add", "grant.revoke", "user.delete", "topic.purge", "topic.delete"];
      const lines = await waitFor(() => {
        const got = auditLines(node.output());
        return want.every((a) => got.some((l) => l.action === a)) ? got : null;
      }, { what: "every audit line" });
      for (const l of lines) assert.equal(l.by, "admin", JSON.stringify(l));
      const update = lines.find((l) => l.action === "topic.update")!;
      assert.equal(update.topic, "audited");
      assert.deepEqual(update.change, { partitions: 2, retention_ms: 3_600_000 });
      assert.equal(lines.find((l) => l.action === "grant.add")!.pattern, "audited");
      assert.doesNotMatch(node.output(), /erin-password/, "no password in any line");
    } finally {
      await admin.close();
      await node.stop();
      await removeDir(node.dataDir);
    }
  });

  it("--dev on a terminal prints lines for people (it printed raw levels and epoch times)", async (t) => {
    if (spawnSync("script", ["--version"]).status !== 0) return t.skip("no script(1) to give the node a terminal");
    const dir = await tempDir();
    // script(1) runs the node on a pseudo-terminal: stderr is a TTY there.
    const cmd = `exec ${process.execPath} ${NARAD_BIN} server start --dev --data-dir ${dir} --listen 127.0.0.1:0`;
    const p = spawn("script", ["-qfec", cmd, "/dev/null"], { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, NARAD_LOG_LEVEL: "info" } });
    let output = "";
    const ready = new Promise<string>((r) => {
      const scan = readyLineScanner((x) => r(x.url));
      p.stdout.on("data", (b: Buffer) => {
        output += b.toString("utf8");
        scan(b.toString("utf8"));
      });
    });
    try {
      const url = await ready;
      const c = new Narad({ url });
      await c.createTopic({ name: "readable", partitions: 1 });
      await c.close();
      await waitFor(() => /\d\d:\d\d:\d\d\.\d{3} INFO  .*topic created.*topic=readable/.test(output), { what: `a readable line in:\n${output}` });
      assert.doesNotMatch(output, /"level":30/);
    } finally {
      p.kill("SIGTERM");
      await new Promise((r) => (p.exitCode !== null ? r(null) : p.once("exit", r)));
      await removeDir(dir);
    }
  });
});
