import assert from "node:assert/strict";
import { test } from "node:test";
import { formatReadyLine, parseReadyLine, readyLineScanner, type ReadyLine } from "./ready-line.js";

test("the ready line is read back as printed, from output split anywhere", () => {
  const line = formatReadyLine({ url: "http://[::1]:7071", nodeId: "n2", dataDir: "/tmp/a dir/x" });
  assert.deepEqual(parseReadyLine(line), { url: "http://[::1]:7071", port: 7071, nodeId: "n2", dataDir: "/tmp/a dir/x" });
  assert.equal(parseReadyLine("narad listening on http://127.0.0.1 (node n1, data /d)"), null); // no port: not ours
  const text = `warming up\n${formatReadyLine({ url: "http://127.0.0.1:40000", nodeId: "n1", dataDir: "/d" })}\n${line}\n`;
  for (let cut = 0; cut <= text.length; cut += 7) {
    const got: ReadyLine[] = [];
    const scan = readyLineScanner((r) => got.push(r));
    scan(text.slice(0, cut));
    scan(text.slice(cut));
    assert.deepEqual(got.map((r) => [r.port, r.nodeId]), [[40000, "n1"]], `cut at ${cut}`);
  }
  const got: ReadyLine[] = [];
  const scan = readyLineScanner((r) => got.push(r));
  scan("x".repeat(70 * 1024)); // a runaway partial line is dropped, not kept
  scan(`\n${line}\n`);
  assert.equal(got.length, 1);
});
