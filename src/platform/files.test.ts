import { test } from "node:test";
import assert from "node:assert/strict";
import fsp from "node:fs/promises";
import path from "node:path";
import { writeFileAtomic } from "./files.js";
import { withTempDir } from "../../test/support/storage.js";

test("writeFileAtomic creates and replaces files and leaves no temp files", async () => {
  await withTempDir(async (dir) => {
    const file = path.join(dir, "topic.json");
    await writeFileAtomic(file, '{"v":1}');
    assert.equal(await fsp.readFile(file, "utf8"), '{"v":1}');
    await writeFileAtomic(file, Buffer.from([0, 1, 2, 255]));
    assert.deepEqual([...(await fsp.readFile(file))], [0, 1, 2, 255]);
    await writeFileAtomic(file, "");
    assert.equal((await fsp.stat(file)).size, 0);
    assert.deepEqual(await fsp.readdir(dir), ["topic.json"]);
  });
});

test("writeFileAtomic into a missing directory fails and leaves nothing behind", async () => {
  await withTempDir(async (dir) => {
    await assert.rejects(writeFileAtomic(path.join(dir, "nope", "x.json"), "x"), { code: "ENOENT" });
    assert.deepEqual(await fsp.readdir(dir), []);
  });
});
