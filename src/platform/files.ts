// Durable small files, for every part that keeps one (node identity, users, topic metadata,
// segment indexes, ack snapshots, freeze markers).
//
// writeFileAtomic is the one way such a file is replaced: readers see either the old content or the
// new, never a mix, and once the promise resolves the new content survives a power loss. That
// needs four steps: write a temp file, fsync it (data before name), rename over the target, fsync
// the directory (the rename itself lives in the directory).

import fsp from "node:fs/promises";
import path from "node:path";
import { randomBytes } from "node:crypto";

export async function writeFileAtomic(filePath: string, data: string | Buffer): Promise<void> {
  const tmp = `${filePath}.${randomBytes(6).toString("hex")}.tmp`;
  let handle: fsp.FileHandle | null = await fsp.open(tmp, "wx", 0o644);
  try {
    await handle.writeFile(data);
    await handle.sync();
    await handle.close();
    handle = null;
    await fsp.rename(tmp, filePath);
  } catch (err) {
    if (handle !== null) await handle.close().catch(() => {});
    await fsp.unlink(tmp).catch(() => {});
    throw err;
  }
  await fsyncDir(path.dirname(filePath));
}

/** A small file's text, or undefined when there is none (any other error is thrown). */
export async function readFileIfExists(filePath: string): Promise<string | undefined> {
  try {
    return await fsp.readFile(filePath, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** True for the temp files writeFileAtomic leaves behind when the process dies mid-way. */
export function isAtomicTempName(name: string): boolean {
  return /\.[0-9a-f]{12}\.tmp$/.test(name);
}

/** Makes creations, renames and removals of entries in `dir` durable. */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await fsp.open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
