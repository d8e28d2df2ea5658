// The dependency direction of docs/architecture.md ("Rooms and who may import whom"), checked.
// Every import in src/ (static, re-export, or dynamic with a literal specifier) is read; an edge
// between rooms that the matrix below does not allow fails, and so does any cycle between rooms.
// The matrix is the one in docs/architecture.md: a change to one is a change to both (a test
// below compares them).
//
// A room is a folder of src/ (src/verify's parts are rooms of their own: the checker must not
// reach the workloads that feed it); src/server.ts and src/config.ts are the wiring room.
// Unit tests (*.test.ts) beside the code may also import test/support, and nothing else more.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** Which rooms each room may import (besides itself). Keep in step with docs/architecture.md. */
export const ALLOWED: Record<string, readonly string[]> = {
  protocol: [],
  platform: [],
  storage: ["protocol", "platform"],
  broker: ["storage", "protocol", "platform"],
  auth: ["protocol", "platform"],
  cluster: ["broker", "auth", "storage", "protocol", "platform"],
  http: ["broker", "auth", "protocol", "platform"],
  client: ["protocol"],
  "verify/history": ["protocol", "platform"],
  "verify/checker": ["verify/history", "protocol", "platform"],
  "verify/report": ["verify/checker", "verify/history", "protocol", "platform"],
  "verify/proxy": ["protocol", "platform"],
  "verify/nemesis": ["verify/proxy", "protocol", "platform"],
  "verify/workloads": ["verify/history", "verify/checker", "verify/report", "verify/nemesis", "verify/proxy", "client", "protocol", "platform"],
  cli: ["wiring", "verify/workloads", "verify/checker", "verify/report", "verify/history", "verify/nemesis", "verify/proxy", "client", "protocol", "platform"],
  wiring: ["broker", "auth", "cluster", "http", "storage", "client", "protocol", "platform"],
};

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const SRC = join(ROOT, "src");

function roomOf(fileFromSrc: string): string {
  const parts = fileFromSrc.split("/");
  if (parts.length === 1) return "wiring";
  if (parts[0] === "verify") return `verify/${parts[1]}`;
  return parts[0]!;
}

function walk(dir: string, out: string[] = []): string[] {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p, out);
    else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

interface Edge {
  file: string;
  line: number;
  specifier: string;
  from: string;
  to: string;
}

const SPECIFIER = /(?:\bfrom\s*|\bimport\s*\(\s*|^\s*import\s+)(["'])([^"']+)\1/gm;

function edges(): Edge[] {
  const out: Edge[] = [];
  for (const abs of walk(SRC)) {
    const file = relative(SRC, abs);
    const text = readFileSync(abs, "utf8");
    for (const m of text.matchAll(SPECIFIER)) {
      const specifier = m[2]!;
      if (!specifier.startsWith(".")) continue; // a package (node:, npm): not a room
      const line = text.slice(0, m.index).split("\n").length;
      const target = relative(SRC, resolve(dirname(abs), specifier));
      const isTest = file.endsWith(".test.ts");
      if (target.startsWith("..")) {
        const outside = relative(ROOT, resolve(dirname(abs), specifier));
        if (isTest && outside.startsWith("test/support/")) continue;
        out.push({ file, line, specifier, from: roomOf(file), to: `outside src (${outside})` });
        continue;
      }
      out.push({ file, line, specifier, from: roomOf(file), to: roomOf(target) });
    }
  }
  return out;
}

test("every import in src/ follows the room matrix of docs/architecture.md", () => {
  const all = edges();
  assert.ok(all.length > 200, `read only ${all.length} imports: is the scan broken?`);
  const bad = all.filter((e) => e.from !== e.to && !(ALLOWED[e.from] ?? []).includes(e.to));
  assert.deepEqual(
    bad.map((e) => `src/${e.file}:${e.line} (${e.from}) imports ${e.specifier} (${e.to})`),
    [],
    "imports outside the matrix at the top of test/layering.test.ts",
  );
  for (const room of new Set(all.map((e) => e.from))) assert.ok(room in ALLOWED, `room ${room} is not in the matrix`);
});

test("no import cycle between rooms", () => {
  const graph = new Map<string, Set<string>>();
  for (const e of edges()) {
    if (e.from === e.to || e.to.startsWith("outside")) continue;
    if (!graph.has(e.from)) graph.set(e.from, new Set());
    graph.get(e.from)!.add(e.to);
  }
  const cycles: string[] = [];
  const state = new Map<string, "open" | "done">();
  const stack: string[] = [];
  const visit = (n: string): void => {
    state.set(n, "open");
    stack.push(n);
    for (const m of graph.get(n) ?? []) {
      if (state.get(m) === "open") cycles.push([...stack.slice(stack.indexOf(m)), m].join(" -> "));
      else if (!state.has(m)) visit(m);
    }
    stack.pop();
    state.set(n, "done");
  };
  for (const n of [...graph.keys()].sort()) if (!state.has(n)) visit(n);
  assert.deepEqual(cycles, []);
});

test("docs/architecture.md shows the same matrix as this file", () => {
  const doc = readFileSync(join(ROOT, "docs/architecture.md"), "utf8");
  assert.match(doc, /test\/layering\.test\.ts/, "docs/architecture.md names the file that holds the matrix");
  for (const [room, allowed] of Object.entries(ALLOWED)) {
    const row = doc.split("\n").find((l) => l.startsWith(`| \`${room}\` |`));
    assert.ok(row !== undefined, `docs/architecture.md has no matrix row for ${room}`);
    const listed = [...row.split("|")[2]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!).sort();
    assert.deepEqual(listed, [...allowed].sort(), `docs/architecture.md's row for ${room}`);
  }
});
