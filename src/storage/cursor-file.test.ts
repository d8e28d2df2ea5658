// Copy cursor files on disk: cursors and the offsets of copies stored in part survive a close and
// reopen; lists that do not fit the slot are left out (logged), never the cursors.

import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { CursorFile } from "./cursor-file.js";
import { captureLogger, withTempDir } from "../../test/support/storage.js";

const NEVER_MS = 100_000_000;

test("cursors and stored offsets survive a close and reopen; a detach drops both", async () => {
  await withTempDir(async (dir) => {
    const logger = captureLogger().logger;
    const open = () => CursorFile.open(join(dir, "c"), { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger });
    const a = open();
    a.advance("fan", 10);
    a.advance("remote-t", 7);
    a.setStored("remote-t", [8, 10, 11]);
    await a.close();
    const b = open();
    assert.deepEqual(b.children().sort(), ["fan", "remote-t"], "stored lists are not cursors");
    assert.equal(b.get("remote-t"), 7);
    assert.deepEqual(b.stored("remote-t"), [8, 10, 11]);
    assert.deepEqual(b.stored("fan"), []);
    b.setStored("remote-t", []);
    await b.setNow("fan", undefined);
    await b.close();
    const c = open();
    assert.deepEqual(c.children(), ["remote-t"]);
    assert.deepEqual(c.stored("remote-t"), []);
    await c.close();
  });
});

test("stored offsets that do not fit the slot are left out, the cursors kept, and it is logged", async () => {
  await withTempDir(async (dir) => {
    const cap = captureLogger();
    const open = () => CursorFile.open(join(dir, "c"), { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger: cap.logger });
    const a = open();
    a.advance("big", 1_000_000_000);
    a.setStored("big", Array.from({ length: 10_000 }, (_, i) => 1_000_000_000 + i)); // ~110 KB of JSON
    await a.close();
    assert.equal(cap.warnings("do not fit the cursor slot").length, 1);
    const b = open();
    assert.equal(b.get("big"), 1_000_000_000);
    assert.deepEqual(b.stored("big"), []);
    await b.close();
  });
});
