// A StorageFs for tests that delegates every call to the real one (real files, real fsync) and
// injects the faults a bad day brings: a disk that fills up (short writes, then ENOSPC), an
// fdatasync that fails with EIO, any call failing with any errno. It also counts calls per
// operation and file, and keeps the order of the file-changing ones, so a test can say "no
// fdatasync was retried" or "the snapshot was written before the log was truncated".
//
// Faults are matched by operation and by the path of the file (fd-based calls are mapped back to
// the path they were opened with). A faulty callback answers on a later turn, as libuv does.

import os from "node:os";
import { realFs, type DirEntry, type FsCallback, type StorageFs } from "../../src/storage/fs.js";

export type FsOp = keyof StorageFs;

export interface Fault {
  op: FsOp;
  /** An errno name: "ENOSPC", "EIO", ... */
  code: string;
  /** Only calls on files whose path ends with this (default: every file). */
  pathEndsWith?: string;
  /** How many matching calls fail (default: all of them until cleared). */
  times?: number;
}

/** One file-changing call, in the order they were made. */
export interface FsEvent {
  op: FsOp;
  path: string;
  /** The error it answered with, if it failed (injected or real). */
  code: string | null;
}

/** Bound on the event list: a runaway test must not grow it without end. */
const EVENTS_MAX = 100_000;

const CHANGING: ReadonlySet<FsOp> = new Set<FsOp>(["writeSync", "fdatasync", "fsync", "ftruncate", "unlink", "rename", "writeFileAtomic", "fsyncDir"]);

export function errnoError(code: string, op: string, path: string): NodeJS.ErrnoException {
  const errno = (os.constants.errno as Record<string, number | undefined>)[code];
  const err: NodeJS.ErrnoException = new Error(`${code}: injected fault, ${op} '${path}'`);
  err.code = code;
  if (errno !== undefined) err.errno = -errno;
  err.syscall = op;
  err.path = path;
  return err;
}

export class FaultFs implements StorageFs {
  readonly events: FsEvent[] = [];
  private readonly faults: Fault[] = [];
  private readonly counts = new Map<string, number>();
  private readonly paths = new Map<number, string>();
  /** Bytes writeSync may still put in matching files before the disk is full; null: unbounded. */
  private spaceBytes: number | null = null;
  private spacePathEndsWith = "";

  constructor(private readonly real: StorageFs = realFs) {}

  /** Makes matching calls fail with `code` (see Fault). */
  inject(fault: Fault): void {
    this.faults.push({ ...fault });
  }

  /**
   * The disk fills up: writes to files ending with `pathEndsWith` may put `bytes` more bytes in,
   * the write that crosses the limit is short (as write(2) is), and the next one fails ENOSPC.
   */
  fillDiskAfter(bytes: number, pathEndsWith = ""): void {
    this.spaceBytes = bytes;
    this.spacePathEndsWith = pathEndsWith;
  }

  /** Removes every fault and gives the disk its space back. */
  clear(): void {
    this.faults.length = 0;
    this.spaceBytes = null;
  }

  /** Calls of `op` made so far on files whose path ends with `pathEndsWith`. */
  count(op: FsOp, pathEndsWith = ""): number {
    let n = 0;
    for (const [key, c] of this.counts) {
      const sep = key.indexOf("\0");
      if (key.slice(0, sep) === op && key.slice(sep + 1).endsWith(pathEndsWith)) n += c;
    }
    return n;
  }

  /** The path an fd was opened with (for reports). */
  pathOf(fd: number): string {
    return this.paths.get(fd) ?? `fd ${fd}`;
  }

  /** Counts the call, records it, and returns the injected error it must fail with, if any. */
  private enter(op: FsOp, path: string): NodeJS.ErrnoException | null {
    const key = `${op}\0${path}`;
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    let err: NodeJS.ErrnoException | null = null;
    for (let i = 0; i < this.faults.length; i++) {
      const f = this.faults[i]!;
      if (f.op !== op || (f.pathEndsWith !== undefined && !path.endsWith(f.pathEndsWith))) continue;
      if (f.times !== undefined && --f.times <= 0) this.faults.splice(i, 1);
      err = errnoError(f.code, op, path);
      break;
    }
    this.record(op, path, err);
    return err;
  }

  private record(op: FsOp, path: string, err: NodeJS.ErrnoException | null): void {
    if (CHANGING.has(op) && this.events.length < EVENTS_MAX) this.events.push({ op, path, code: err?.code ?? null });
  }

  /** Answers a callback on a later turn, as a threadpool job would. */
  private later(cb: (err: NodeJS.ErrnoException) => void, err: NodeJS.ErrnoException): void {
    setImmediate(() => cb(err));
  }

  openSync(path: string, flags: string, mode?: number): number {
    const err = this.enter("openSync", path);
    if (err !== null) throw err;
    const fd = this.real.openSync(path, flags, mode);
    this.paths.set(fd, path);
    return fd;
  }

  closeSync(fd: number): void {
    const err = this.enter("closeSync", this.pathOf(fd));
    this.paths.delete(fd);
    this.real.closeSync(fd);
    if (err !== null) throw err;
  }

  readSync(fd: number, buf: Buffer, offset: number, length: number, position: number): number {
    const err = this.enter("readSync", this.pathOf(fd));
    if (err !== null) throw err;
    return this.real.readSync(fd, buf, offset, length, position);
  }

  writeSync(fd: number, buf: Buffer, offset: number, length: number, position: number): number {
    const path = this.pathOf(fd);
    const err = this.enter("writeSync", path);
    if (err !== null) throw err;
    if (this.spaceBytes !== null && path.endsWith(this.spacePathEndsWith)) {
      if (this.spaceBytes === 0) {
        const full = errnoError("ENOSPC", "writeSync", path);
        this.events[this.events.length - 1]!.code = "ENOSPC";
        throw full;
      }
      const n = this.real.writeSync(fd, buf, offset, Math.min(length, this.spaceBytes), position);
      this.spaceBytes -= n;
      return n;
    }
    return this.real.writeSync(fd, buf, offset, length, position);
  }

  open(path: string, flags: string, mode: number, cb: (err: NodeJS.ErrnoException | null, fd: number) => void): void {
    const err = this.enter("open", path);
    if (err !== null) return this.later((e) => cb(e, -1), err);
    this.real.open(path, flags, mode, (e, fd) => {
      if (e === null) this.paths.set(fd, path);
      cb(e, fd);
    });
  }

  close(fd: number, cb: FsCallback): void {
    const err = this.enter("close", this.pathOf(fd));
    this.paths.delete(fd);
    this.real.close(fd, (e) => cb(err ?? e));
  }

  read(fd: number, buf: Buffer, offset: number, length: number, position: number, cb: (err: NodeJS.ErrnoException | null, bytesRead: number) => void): void {
    const err = this.enter("read", this.pathOf(fd));
    if (err !== null) return this.later((e) => cb(e, 0), err);
    this.real.read(fd, buf, offset, length, position, cb);
  }

  fdatasync(fd: number, cb: FsCallback): void {
    const err = this.enter("fdatasync", this.pathOf(fd));
    if (err !== null) return this.later(cb, err);
    this.real.fdatasync(fd, cb);
  }

  fdatasyncSync(fd: number): void {
    const err = this.enter("fdatasync", this.pathOf(fd));
    if (err !== null) throw err;
    this.real.fdatasyncSync(fd);
  }

  fsync(fd: number, cb: FsCallback): void {
    const err = this.enter("fsync", this.pathOf(fd));
    if (err !== null) return this.later(cb, err);
    this.real.fsync(fd, cb);
  }

  ftruncate(fd: number, lengthBytes: number, cb: FsCallback): void {
    const err = this.enter("ftruncate", this.pathOf(fd));
    if (err !== null) return this.later(cb, err);
    this.real.ftruncate(fd, lengthBytes, cb);
  }

  fstat(fd: number, cb: (err: NodeJS.ErrnoException | null, stats: { size: number }) => void): void {
    const err = this.enter("fstat", this.pathOf(fd));
    if (err !== null) return this.later((e) => cb(e, { size: 0 }), err);
    this.real.fstat(fd, cb);
  }

  async mkdirp(path: string): Promise<void> {
    const err = this.enter("mkdirp", path);
    if (err !== null) throw err;
    return this.real.mkdirp(path);
  }

  async readdir(path: string): Promise<DirEntry[]> {
    const err = this.enter("readdir", path);
    if (err !== null) throw err;
    return this.real.readdir(path);
  }

  async readFile(path: string): Promise<Buffer> {
    const err = this.enter("readFile", path);
    if (err !== null) throw err;
    return this.real.readFile(path);
  }

  async unlink(path: string): Promise<void> {
    const err = this.enter("unlink", path);
    if (err !== null) throw err;
    return this.real.unlink(path);
  }

  async rename(from: string, to: string): Promise<void> {
    const err = this.enter("rename", from);
    if (err !== null) throw err;
    return this.real.rename(from, to);
  }

  async writeFileAtomic(path: string, data: Buffer): Promise<void> {
    const err = this.enter("writeFileAtomic", path);
    if (err !== null) throw err;
    return this.real.writeFileAtomic(path, data);
  }

  async fsyncDir(dir: string): Promise<void> {
    const err = this.enter("fsyncDir", dir);
    if (err !== null) throw err;
    return this.real.fsyncDir(dir);
  }
}
