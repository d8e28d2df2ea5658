// Copy cursor files on disk: cursors and the offsets of copies stored in part survive a close and
// reopen; lists that do not fit the slot are left out (logged), never the cursors; a file with no
// valid slot is set aside and reported, a torn slot falls back to the other.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CURSOR_FILE_DAMAGED_SUFFIX, CURSOR_FILE_NAME, CursorFile } from "./cursor-file.js";
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

test("a garbage children.cursors was not logged and its cursors read as none (the copier copied the parent again): it is set aside, logged, and reported as damage", async () => {
  await withTempDir(async (dir) => {
    const cap = captureLogger();
    const path = join(dir, CURSOR_FILE_NAME);
    const opts = { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger: cap.logger };
    const a = CursorFile.open(path, opts);
    a.advance("fan", 42);
    await a.close();
    const garbage = Buffer.from("this is not a cursor file, but it is not empty either\n".repeat(40));
    await writeFile(path, garbage);
    const b = await CursorFile.load(path, opts);
    assert.equal(b.get("fan"), undefined, "no cursor is made up");
    assert.match(b.damage ?? "", /no valid slot: slot 0: payload length \d+ does not fit/);
    assert.match(b.damage ?? "", /set aside as children\.cursors\.damaged/);
    const [w] = cap.warnings("copy cursor file is damaged");
    assert.equal(w?.file, path, "the warning names the file");
    assert.deepEqual(await readFile(path + CURSOR_FILE_DAMAGED_SUFFIX), garbage, "the damaged bytes are kept, untouched");
    b.advance("other", 7); // the fresh file takes new cursors...
    await b.close();
    const c = await CursorFile.load(path, opts);
    assert.equal(c.get("other"), 7);
    assert.match(c.damage ?? "", /children\.cursors\.damaged is still there/, "...and the damage is reported while the set-aside file is there");
    await c.close();
    await rm(path + CURSOR_FILE_DAMAGED_SUFFIX);
    const d = await CursorFile.load(path, opts);
    assert.equal(d.damage, undefined, "removing the set-aside file is the operator's word");
    assert.equal(d.get("other"), 7);
    await d.close();
  });
});

test("a torn write of one cursor slot is not damage: the other slot is used and it is logged; a never-written slot is not logged", async () => {
  await withTempDir(async (dir) => {
    const cap = captureLogger();
    const path = join(dir, CURSOR_FILE_NAME);
    const opts = { ackFlushIntervalMs: NEVER_MS, ackSyncIntervalMs: NEVER_MS, powerLoss: false, logger: cap.logger };
    const a = CursorFile.open(path, opts);
    await a.setNow("fan", 10); // seq 1: slot 1 (slot 0 is a hole of zeros)
    await a.close();
    const b = await CursorFile.load(path, opts);
    assert.equal(b.damage, undefined);
    assert.equal(cap.warnings("slot").length, 0, "a never-written slot is no news");
    await b.setNow("fan", 20); // seq 2: slot 0
    await b.close();
    const bytes = await readFile(path);
    bytes[20] = bytes[20]! ^ 0xff; // slot 0's JSON: a torn write of the newer slot
    await writeFile(path, bytes);
    const c = await CursorFile.load(path, opts);
    assert.equal(c.damage, undefined);
    assert.equal(c.get("fan"), 10, "the older slot: copies since may go again (at least once), none is skipped");
    assert.equal(cap.warnings("a copy cursor slot is damaged").length, 1);
    await c.close();
    await assert.rejects(readFile(path + CURSOR_FILE_DAMAGED_SUFFIX), { code: "ENOENT" });
  });
});
