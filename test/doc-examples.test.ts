// The examples of README.md and docs/*.md, run against a real node, so an example cannot drift
// from the product (issue 16, "What it must show"). The convention (docs/operations.md,
// "Examples in the docs"):
//
//   ```sh          run with bash -e -o pipefail against a fresh --dev node: `localhost:7070` and
//                  `127.0.0.1:7070` are that node, `narad` (and `bin/narad`) the CLI, NARAD_URL set
//   ```sh secure   the same against a node with security on, NARAD_USER/NARAD_PASSWORD the admin
//   ```ts          an SDK snippet, transpiled and run as a module on a fresh secure node with
//                  `narad` (an admin client) and what the snippets assume (topics orders and
//                  renders with messages, `handle` a live receipt handle of orders) prepared
//   ... norun      an info string with `norun` is not run (a server start, a cluster, a loop
//                  that runs until signalled, an outage); other languages (json, sql, none) are
//                  not code to run
//
// A `sh` block whose lines start with `$ ` is a transcript: each command runs and its output
// (stdout and stderr) must be the lines that follow it.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync, spawn } from "node:child_process";
import { chmod, mkdir, rm, writeFile } from "node:fs/promises";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Narad } from "../src/client/index.js";
import { NARAD_BIN, REPO_ROOT, removeDir, startNode, tempDir, type RunningNode } from "./harness.js";

interface Block {
  file: string;
  line: number;
  lang: string;
  words: string[];
  text: string;
}

const DOCS = ["README.md", ...readdirSync(join(REPO_ROOT, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];
const ADMIN_PASSWORD = "doc-examples-admin";

function blocks(file: string): Block[] {
  const lines = readFileSync(join(REPO_ROOT, file), "utf8").split("\n");
  const out: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```(\S+)(.*)$/.exec(lines[i]!);
    if (open === null) continue;
    const indent = open[1]!.length;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !/^\s*```\s*$/.test(lines[j]!); j++) body.push(lines[j]!.slice(indent));
    out.push({ file, line: i + 1, lang: open[2]!, words: open[3]!.trim().split(/\s+/).filter(Boolean), text: body.join("\n") + "\n" });
    i = j;
  }
  return out;
}

const all = DOCS.flatMap(blocks);
const runnable = (b: Block) => ["sh", "bash", "ts"].includes(b.lang) && !b.words.includes("norun");

async function nodeFor(secure: boolean): Promise<RunningNode> {
  return secure ? startNode({ dev: false, env: { NARAD_ADMIN_PASSWORD: ADMIN_PASSWORD } }) : startNode();
}

/** A working directory with the CLI as `narad` and `bin/narad`, and the files the examples read. */
async function workDir(): Promise<string> {
  const dir = await tempDir("narad-doc-");
  await mkdir(join(dir, "bin"));
  const shim = join(dir, "bin", "narad");
  await writeFile(shim, `#!/bin/sh\nexec ${JSON.stringify(process.execPath)} ${JSON.stringify(NARAD_BIN)} "$@"\n`);
  await chmod(shim, 0o755);
  await writeFile(join(dir, "picture.png"), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0, 1, 2, 3]));
  await writeFile(join(dir, "password.txt"), "alice-first-password\n");
  await writeFile(join(dir, "new-password.txt"), "alice-second-password\n");
  return dir;
}

function envFor(node: RunningNode, dir: string, secure: boolean): NodeJS.ProcessEnv {
  return {
    ...process.env,
    PATH: `${join(dir, "bin")}:${process.env.PATH ?? ""}`,
    NARAD_URL: node.url,
    ...(secure ? { NARAD_USER: "admin", NARAD_PASSWORD: ADMIN_PASSWORD } : { NARAD_USER: "", NARAD_PASSWORD: "" }),
  };
}

const hostPort = (node: RunningNode) => new URL(node.url).host;
const localize = (text: string, node: RunningNode) => text.replace(/\b(localhost|127\.0\.0\.1):7070\b/g, hostPort(node));

/** Runs a block (with -e: the first failing command fails it) or a transcript's command (without: `; echo $?`). */
function run(cmd: string, cwd: string, env: NodeJS.ProcessEnv, strict = true): { code: number | null; out: string } {
  const r = spawnSync("bash", [...(strict ? ["-e", "-o", "pipefail"] : []), "-c", cmd], { cwd, env, encoding: "utf8", timeout: 60_000 });
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

describe("doc examples: the runnable code blocks of README.md and docs/*.md, against a real node", () => {
  it("the convention finds blocks to run in the README and the client docs", () => {
    const ran = all.filter(runnable);
    assert.ok(ran.some((b) => b.file === "README.md" && b.lang === "sh"));
    assert.ok(ran.filter((b) => b.file === "docs/client.md" && b.lang === "ts").length >= 5);
    assert.ok(ran.some((b) => b.file === "docs/client.md" && b.words.includes("secure")));
  });

  for (const b of all.filter((x) => runnable(x) && x.lang !== "ts")) {
    it(`${b.file}:${b.line} (${[b.lang, ...b.words].join(" ")}) runs as written`, async () => {
      const secure = b.words.includes("secure");
      const node = await nodeFor(secure);
      const dir = await workDir();
      try {
        const env = envFor(node, dir, secure);
        const text = localize(b.text, node);
        if (/^\$ /m.test(text)) {
          // A transcript: each `$ command` and the output lines after it.
          const steps = text.split(/^\$ /m).slice(1);
          for (const step of steps) {
            const [cmd, ...expected] = step.trimEnd().split("\n");
            // One stream, in the order written, as a terminal shows it.
            const r = run(`{ ${cmd}
} 2>&1`, dir, env, false);
            assert.equal(r.out.trimEnd(), localize(expected.join("\n"), node), `$ ${cmd}`);
          }
        } else {
          const r = run(text, dir, env);
          assert.equal(r.code, 0, `exit ${r.code}; output:\n${r.out}`);
        }
      } finally {
        await node.stop();
        await removeDir(node.dataDir);
        await removeDir(dir);
      }
    });
  }

  const snippets = all.filter((x) => runnable(x) && x.lang === "ts");
  it(`the ${snippets.length} SDK snippets (\`\`\`ts) run as written`, async () => {
    // Transpiled inside the repository, so `narad/client` resolves to this package (its exports).
    const dir = join(REPO_ROOT, "dist", "doc-examples");
    await rm(dir, { recursive: true, force: true });
    await mkdir(dir, { recursive: true });
    const names = snippets.map((b, i) => `snippet${i}_${b.file.replace(/\W+/g, "_")}_${b.line}`);
    for (const [i, b] of snippets.entries()) {
      const lines = b.text.split("\n");
      const imports = lines.filter((l) => /^import .* from /.test(l));
      const rest = lines.filter((l) => !/^import .* from /.test(l)).join("\n");
      const ownClient = /\bconst narad = new Narad\(/.test(rest);
      const prelude = [
        `import { Narad as DocNarad } from "narad/client";`,
        ...imports,
        ownClient ? "" : `const narad = new DocNarad({ url: process.env.NARAD_URL!, user: process.env.NARAD_USER, password: process.env.NARAD_PASSWORD });`,
        // What the snippets take as given.
        `const handle = process.env.DOC_HANDLE!;`,
        `const password = "copier-password"; const body = "a message";`,
        `const log = { warn: (..._a: unknown[]) => undefined }; const render = (..._a: unknown[]) => "rendered";`,
        `const later = async (_s?: number) => undefined; const recordMaybeSent = async (..._a: unknown[]) => undefined;`,
        `void handle; void password; void body; void log; void render; void later; void recordMaybeSent; void DocNarad;`,
      ];
      const end = ownClient ? "" : "\nawait narad.close();\n";
      await writeFile(join(dir, `${names[i]}.ts`), `${prelude.join("\n")}\n${rest}${end}\nexport {};\n`);
    }
    const tsc = spawnSync(join(REPO_ROOT, "node_modules", ".bin", "tsc"), ["--ignoreConfig", "--noCheck", "--module", "nodenext", "--target", "es2022", "--rootDir", dir, "--outDir", dir, ...names.map((n) => join(dir, `${n}.ts`))], { encoding: "utf8" });
    assert.equal(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
    const failures: string[] = [];
    for (const [i, b] of snippets.entries()) {
      const node = await nodeFor(true);
      const c = new Narad({ url: node.url, user: "admin", password: ADMIN_PASSWORD });
      try {
        let liveHandle = "";
        if (!/createTopic\(\{ name: "orders"/.test(b.text)) {
          for (const name of ["orders", "renders"]) {
            await c.createTopic({ name, partitions: 3 });
            await c.produceBatch(name, Array.from({ length: 6 }, (_, k) => ({ payload: `${name} ${k}` })));
          }
          liveHandle = (await c.consume("orders"))!.receiptHandle;
        }
        // .mjs: run as a module (the repository's package.json is ESM too; this keeps it explicit).
        const js = join(dir, `${names[i]}.mjs`);
        await writeFile(js, readFileSync(join(dir, `${names[i]}.js`)));
        const r = await new Promise<{ code: number | null; out: string }>((resolve) => {
          const p = spawn(process.execPath, [js], { cwd: REPO_ROOT, env: { ...process.env, NARAD_URL: node.url, NARAD_USER: "admin", NARAD_PASSWORD: ADMIN_PASSWORD, DOC_HANDLE: liveHandle } });
          let out = "";
          p.stdout.on("data", (x: Buffer) => (out += x.toString()));
          p.stderr.on("data", (x: Buffer) => (out += x.toString()));
          const t = setTimeout(() => p.kill("SIGKILL"), 60_000);
          p.on("close", (code) => {
            clearTimeout(t);
            resolve({ code, out });
          });
        });
        if (r.code !== 0) failures.push(`${b.file}:${b.line}: exit ${r.code}\n${r.out.slice(0, 1500)}`);
      } finally {
        await c.close();
        await node.stop();
        await removeDir(node.dataDir);
      }
    }
    await rm(dir, { recursive: true, force: true });
    assert.deepEqual(failures, []);
  });
});
