// `narad server start`: the ready line, configuration precedence, and one-line reasons for
// every way a start can fail; and a data directory with corrupt files still starts.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { mkdir, writeFile, readdir, appendFile } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, runNarad, startNode, tempDir, waitFor, type RunningNode } from "./harness.js";

const cleanup: (() => Promise<unknown>)[] = [];
after(async () => {
  for (const c of cleanup.reverse()) await c();
});

async function node(opts: Parameters<typeof startNode>[0] = {}): Promise<RunningNode> {
  const n = await startNode(opts);
  cleanup.push(() => n.kill(), () => removeDir(n.dataDir));
  return n;
}

function oneLine(stderr: string): string {
  const lines = stderr.trim().split("\n");
  assert.equal(lines.length, 1, `expected one line, got:\n${stderr}`);
  assert.match(lines[0]!, /^narad: /);
  return lines[0]!;
}

describe("server start", () => {
  test("prints one ready line naming the URL, node and data dir", async () => {
    const n = await node({ args: ["--node-id", "alpha"] });
    assert.equal(n.nodeId, "alpha");
    assert.match(n.output(), /^narad listening on http:\/\/127\.0\.0\.1:\d+ \(node alpha, data .+\)$/m);
    const h = await fetch(`${n.url}/healthz`);
    assert.equal(h.headers.get("narad-node"), "alpha");
  });

  test("flags beat NARAD_* variables, which beat the config file", async () => {
    const dir = await tempDir();
    cleanup.push(() => removeDir(dir));
    const cfg = join(dir, "narad.json");
    await writeFile(cfg, JSON.stringify({ node_id: "from-file", topic_defaults: { partitions: 5 } }));
    const a = await node({ args: ["--config", cfg] });
    assert.equal(a.nodeId, "from-file");
    const t = await fetch(`${a.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "x" }) });
    assert.equal(((await t.json()) as { partitions: number }).partitions, 5);
    const b = await node({ args: ["--config", cfg], env: { NARAD_NODE_ID: "from-env" } });
    assert.equal(b.nodeId, "from-env");
    const c = await node({ args: ["--config", cfg, "--node-id", "from-flag"], env: { NARAD_NODE_ID: "from-env" } });
    assert.equal(c.nodeId, "from-flag");
  });

  test("a port in use is one line and a non-zero exit", async () => {
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(0, "127.0.0.1", r));
    cleanup.push(() => new Promise((r) => blocker.close(r)));
    const port = (blocker.address() as { port: number }).port;
    const dir = await tempDir();
    cleanup.push(() => removeDir(dir));
    const r = await runNarad(["server", "start", "--dev", "--data-dir", dir, "--listen", `127.0.0.1:${port}`]);
    assert.notEqual(r.code, 0);
    assert.match(oneLine(r.stderr), /in use/);
  });

  test("an unusable data dir, bad flags and bad config files are one line each", async () => {
    const dir = await tempDir();
    cleanup.push(() => removeDir(dir));
    const file = join(dir, "a-file");
    await writeFile(file, "x");
    const cases: [string[], RegExp, Record<string, string>?][] = [
      [["--data-dir", file], /data directory .* not usable/],
      [["--data-dir", join(file, "sub")], /data directory .* not usable/],
      [["--data-dir", dir, "--listen", "nonsense"], /--listen/],
      [["--data-dir", dir, "--listen", "127.0.0.1:99999"], /--listen/],
      [["--data-dir", dir, "--node-id", "bad id!"], /--node-id/],
      [["--data-dir", dir, "--config", join(dir, "missing.json")], /cannot read config file/],
      [["--data-dir", dir], /NARAD_STORAGE_SEGMENT_BYTES/, { NARAD_STORAGE_SEGMENT_BYTES: "lots" }],
      [["--data-dir", dir], /NARAD_TEST_BUGS/, { NARAD_TEST_BUGS: "no-such-bug" }],
    ];
    const bad = join(dir, "bad.json");
    await writeFile(bad, "{ not json");
    cases.push([["--data-dir", dir, "--config", bad], /not valid JSON/]);
    const unknown = join(dir, "unknown.json");
    await writeFile(unknown, JSON.stringify({ storage: { segment_bites: 5 } }));
    cases.push([["--data-dir", dir, "--config", unknown], /unknown setting "storage.segment_bites"/]);
    const range = join(dir, "range.json");
    await writeFile(range, JSON.stringify({ storage: { consumer_offset_commit_interval_ms: 0 } }));
    cases.push([["--data-dir", dir, "--config", range], /consumer_offset_commit_interval_ms must be from/]);
    for (const [args, re, env] of cases) {
      const r = await runNarad(["server", "start", "--dev", ...args], { env });
      assert.notEqual(r.code, 0, args.join(" "));
      assert.match(oneLine(r.stderr), re, args.join(" "));
    }
  });

  test("without --dev and without users it refuses with one line naming NARAD_ADMIN_PASSWORD", async () => {
    const dir = await tempDir();
    cleanup.push(() => removeDir(dir));
    const env = { NARAD_ADMIN_PASSWORD: "" };
    const r = await runNarad(["server", "start", "--data-dir", dir, "--listen", "127.0.0.1:0"], { env });
    assert.notEqual(r.code, 0);
    assert.match(oneLine(r.stderr), /NARAD_ADMIN_PASSWORD/);
    const short = await runNarad(["server", "start", "--data-dir", dir, "--listen", "127.0.0.1:0"], { env: { NARAD_ADMIN_PASSWORD: "short" } });
    assert.notEqual(short.code, 0);
    assert.match(oneLine(short.stderr), /NARAD_ADMIN_PASSWORD: password must be 8/);
  });

  test("seeded bugs (NARAD_TEST_BUGS) are refused with one line unless --dev or NARAD_TEST_MODE=1", async () => {
    const dir = await tempDir();
    cleanup.push(() => removeDir(dir));
    const secure = { NARAD_ADMIN_PASSWORD: "a-long-password" };
    const listen = ["--listen", "127.0.0.1:0"];
    // The exit code of another start refusal, for comparison.
    const other = await runNarad(["server", "start", "--data-dir", dir, "--listen", "nonsense"], { env: secure });
    const r = await runNarad(["server", "start", "--data-dir", dir, ...listen], { env: { ...secure, NARAD_TEST_BUGS: "early-lapse" } });
    assert.notEqual(r.code, 0);
    assert.equal(r.code, other.code, "the same exit code as other start refusals");
    assert.match(oneLine(r.stderr), /NARAD_TEST_BUGS .*refused unless .*--dev or NARAD_TEST_MODE=1/);
    const notOne = await runNarad(["server", "start", "--data-dir", dir, ...listen], { env: { ...secure, NARAD_TEST_BUGS: "early-lapse", NARAD_TEST_MODE: "0" } });
    assert.equal(notOne.code, other.code, "NARAD_TEST_MODE must be exactly 1");
    // An empty list is no bug: a production start is not refused for it.
    const empty = await node({ dev: false, env: { ...secure, NARAD_TEST_BUGS: "" } });
    assert.equal((await fetch(`${empty.url}/healthz`)).status, 200);
    assert.doesNotMatch(empty.output(), /SEEDED BUG/);
    // With the test flag the node starts, and says loudly which bug is on.
    const flagged = await node({ dev: false, env: { ...secure, NARAD_TEST_BUGS: "early-lapse", NARAD_TEST_MODE: "1" } });
    assert.equal((await fetch(`${flagged.url}/healthz`)).status, 200);
    await waitFor(() => /TEST-ONLY SEEDED BUG IS ON/.test(flagged.output()) && /early-lapse/.test(flagged.output()), { what: "the seeded-bug warning" });
    // --dev alone is enough (a local node: nothing to protect).
    const dev = await node({ env: { NARAD_TEST_BUGS: "early-lapse" } });
    assert.equal((await fetch(`${dev.url}/healthz`)).status, 200);
  });

  test("corrupt files in the data dir: the node starts, reports them, and serves what is sound", async () => {
    const n1 = await node();
    for (const name of ["good", "broken"]) {
      assert.equal((await fetch(`${n1.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name, partitions: 1 }) })).status, 201);
      for (let i = 0; i < 5; i++) assert.equal((await fetch(`${n1.url}/v1/topics/${name}/messages`, { method: "POST", body: `${name}-${i}` })).status, 202);
    }
    assert.equal(await n1.stop(), 0);
    const topics = join(n1.dataDir, "topics");
    await writeFile(join(topics, "broken", "topic.json"), "{ this is not json");
    await mkdir(join(topics, "not a topic name"), { recursive: true });
    await mkdir(join(topics, "half-created"), { recursive: true });
    const pdir = join(topics, "good", "partitions", "0");
    const seg = (await readdir(pdir)).find((f) => f.endsWith(".log"))!;
    await appendFile(join(pdir, seg), Buffer.from("torn tail garbage \u0000\u0001\u0002"));
    await writeFile(join(pdir, "99999.log"), "junk");
    await writeFile(join(n1.dataDir, "stray-file"), "junk");
    const n2 = await node({ dataDir: n1.dataDir });
    const list = ((await (await fetch(`${n2.url}/v1/topics`)).json()) as { topics: { name: string }[] }).topics.map((t) => t.name);
    assert.deepEqual(list, ["good"]);
    const rep = (await (await fetch(`${n2.url}/v1/topics/good/partitions/0/messages`)).json()) as { messages: { payload_base64: string }[] };
    assert.deepEqual(rep.messages.map((m) => Buffer.from(m.payload_base64, "base64").toString()), ["good-0", "good-1", "good-2", "good-3", "good-4"]);
    assert.equal((await fetch(`${n2.url}/v1/topics/good/messages`, { method: "POST", body: "after" })).status, 202);
    assert.match(n2.output(), /topic\.json is corrupt/);
  });
});
