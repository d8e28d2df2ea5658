import { test } from "node:test";
import assert from "node:assert/strict";
import { formatDevLine } from "./dev-log.js";

test("--dev log lines for a terminal are readable (they were raw levels and epoch times)", () => {
  const line = JSON.stringify({ level: 40, time: Date.UTC(2026, 0, 2, 3, 4, 5, 678), module: "http", node: "node-1", msg: "something slow", ms: 12, err: "a b" });
  assert.equal(formatDevLine(line), '03:04:05.678 WARN  http: something slow  node=node-1 ms=12 err="a b"\n');
  assert.equal(formatDevLine(JSON.stringify({ level: 30, time: 0, msg: "ready" })), "00:00:00.000 INFO  ready\n");
  assert.equal(formatDevLine("not json"), "not json\n");
});
