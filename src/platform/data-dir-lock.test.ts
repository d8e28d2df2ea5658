import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, symlink } from "node:fs/promises";
import { join } from "node:path";
import { withTempDir } from "../../test/support/storage.js";
import { DataDirLockedError, lockDataDir } from "./data-dir-lock.js";

const lockModule = new URL("./data-dir-lock.js", import.meta.url).href;

/** A real process that takes the lock, says so, and holds it until killed. */
async function holder(dir: string, platform: string): Promise<{ pid: number; kill: () => Promise<void> }> {
  const script = `
    import { lockDataDir } from ${JSON.stringify(lockModule)};
    const l = await lockDataDir(${JSON.stringify(dir)}, ${JSON.stringify(platform)});
    l.setUrl("http://127.0.0.1:7999");
    console.log("locked");
    setInterval(() => {}, 1000);`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    child.stdout.on("data", (b: Buffer) => b.toString().includes("locked") && resolve());
    child.on("exit", (code) => reject(new Error(`holder exited with ${code} before locking`)));
  });
  const exited = new Promise((r) => child.on("exit", r));
  return { pid: child.pid!, kill: async () => void (child.kill("SIGKILL"), await exited) };
}

for (const platform of ["linux", "darwin"] as const) {
  test(`two processes can share one data directory: the second is refused naming the holder, and a kill -9 frees it (${platform} form)`, async () => {
    await withTempDir(async (dir) => {
      const h = await holder(dir, platform);
      try {
        await assert.rejects(lockDataDir(dir, platform), (e: unknown) => {
          assert.ok(e instanceof DataDirLockedError);
          assert.deepEqual(e.holder, { pid: h.pid, url: "http://127.0.0.1:7999" });
          assert.match(e.message, new RegExp(`in use by narad pid ${h.pid} \\(serving http://127.0.0.1:7999\\)`));
          return true;
        });
      } finally {
        await h.kill();
      }
      // The kernel released it with the process: no stale lock to clean by hand.
      const mine = await lockDataDir(dir, platform);
      await assert.rejects(lockDataDir(dir, platform), DataDirLockedError);
      await mine.release();
      const again = await lockDataDir(dir, platform);
      await again.release();
    });
  });
}

test("the same data directory through a symlink is the same lock", async () => {
  await withTempDir(async (root) => {
    const dir = join(root, "data");
    await mkdir(dir);
    await symlink(dir, join(root, "alias"));
    const l = await lockDataDir(dir);
    try {
      await assert.rejects(lockDataDir(join(root, "alias")), DataDirLockedError);
    } finally {
      await l.release();
    }
  });
});
