// The filesystem storage works through, passed in (StorageOptions.fs, AckLogOptions.fs,
// CursorFileOptions.fs) so that a test can put a full disk or a failing fsync under a real log
// (test/support/fault-fs.ts wraps realFs and injects ENOSPC, EIO, ...). Every file operation of
// src/storage goes through one of these methods; nothing else in storage imports node:fs.
//
// The methods keep the forms the code uses them in, because the form is the cost:
// - Sync ones run on the event loop: reads and writes that hit the page cache (the group commit
//   writes its staging buffer synchronously, hot reads pread on the loop; see partition-log.ts).
// - Callback ones are one libuv threadpool job each and allocate no promise: the group commit
//   issues exactly one fdatasync per touched file per commit and nothing else, and that stays so.
//   Promise forms of them are the small helpers of ./files.ts, for the cold paths.
// - Promise ones are path-level work of open, recovery, retention and compaction.
// Each operation has exactly one entry point here, so a fault injected for it reaches every use.
//
// realFs is node:fs itself (its functions, not wrappers), so the default seam costs nothing.

import fs from "node:fs";
import fsp from "node:fs/promises";
import { fsyncDir, writeFileAtomic } from "../platform/files.js";

export type FsCallback = (err: NodeJS.ErrnoException | null) => void;

/** What readdir gives storage: a name and whether it is a regular file. */
export interface DirEntry {
  name: string;
  isFile(): boolean;
}

export interface StorageFs {
  // ---- on the event loop ----
  openSync(path: string, flags: string, mode?: number): number;
  closeSync(fd: number): void;
  /** pread: may return fewer bytes than asked (0 at end of file). */
  readSync(fd: number, buf: Buffer, offset: number, length: number, position: number): number;
  /** pwrite: may write fewer bytes than asked (a disk filling up); throws ENOSPC, EIO, ... */
  writeSync(fd: number, buf: Buffer, offset: number, length: number, position: number): number;

  // ---- one threadpool job each, no promise ----
  open(path: string, flags: string, mode: number, cb: (err: NodeJS.ErrnoException | null, fd: number) => void): void;
  close(fd: number, cb: FsCallback): void;
  /** pread on the threadpool. */
  read(
    fd: number,
    buf: Buffer,
    offset: number,
    length: number,
    position: number,
    cb: (err: NodeJS.ErrnoException | null, bytesRead: number) => void,
  ): void;
  fdatasync(fd: number, cb: FsCallback): void;
  /** fdatasync on the calling thread (a commit with nothing else to serve: ./partition-log.ts). */
  fdatasyncSync(fd: number): void;
  fsync(fd: number, cb: FsCallback): void;
  ftruncate(fd: number, lengthBytes: number, cb: FsCallback): void;
  fstat(fd: number, cb: (err: NodeJS.ErrnoException | null, stats: { size: number }) => void): void;

  // ---- path-level, promises ----
  mkdirp(path: string): Promise<void>;
  readdir(path: string): Promise<DirEntry[]>;
  readFile(path: string): Promise<Buffer>;
  unlink(path: string): Promise<void>;
  /** Renames a file (recovery sets damaged files aside under a new name; fsyncDir makes it durable). */
  rename(from: string, to: string): Promise<void>;
  /** Replaces a small file whole: temp file, fsync, rename, directory fsync (../platform/files.ts). */
  writeFileAtomic(path: string, data: Buffer): Promise<void>;
  /** Makes creations, renames and removals in `dir` durable. */
  fsyncDir(dir: string): Promise<void>;
}

export const realFs: StorageFs = {
  openSync: fs.openSync,
  closeSync: fs.closeSync,
  readSync: fs.readSync,
  writeSync: fs.writeSync,
  open: fs.open,
  close: fs.close,
  read: fs.read,
  fdatasync: fs.fdatasync,
  fdatasyncSync: fs.fdatasyncSync,
  fsync: fs.fsync,
  ftruncate: fs.ftruncate,
  fstat: fs.fstat,
  mkdirp: async (p) => {
    await fsp.mkdir(p, { recursive: true });
  },
  readdir: (p) => fsp.readdir(p, { withFileTypes: true }),
  readFile: (p) => fsp.readFile(p),
  unlink: (p) => fsp.unlink(p),
  rename: (from, to) => fsp.rename(from, to),
  writeFileAtomic,
  fsyncDir,
};
