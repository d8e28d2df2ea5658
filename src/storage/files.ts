// File helpers shared by the partition log, the ack log and the cursor file, over the StorageFs
// they were handed (./fs.ts; small durable files are ../platform/files.ts, reached through it).
//
// The promise forms are for the cold paths (open, recovery, close, maintenance). The hot path
// (group commit) calls the callback form of StorageFs directly: exactly one libuv threadpool job
// per fdatasync and nothing else.

import type { StorageFs } from "./fs.js";

/** mode 0o666 (before the umask) is what node:fs uses when none is given. */
export function openAsync(fs: StorageFs, p: string, flags: string, mode = 0o666): Promise<number> {
  return new Promise((resolve, reject) => fs.open(p, flags, mode, (err, fd) => (err ? reject(err) : resolve(fd))));
}

export function closeAsync(fs: StorageFs, fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.close(fd, (err) => (err ? reject(err) : resolve())));
}

export function fsyncAsync(fs: StorageFs, fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
}

export function fdatasyncAsync(fs: StorageFs, fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
}

export function ftruncateAsync(fs: StorageFs, fd: number, lengthBytes: number): Promise<void> {
  return new Promise((resolve, reject) => fs.ftruncate(fd, lengthBytes, (err) => (err ? reject(err) : resolve())));
}

export function fstatSizeAsync(fs: StorageFs, fd: number): Promise<number> {
  return new Promise((resolve, reject) => fs.fstat(fd, (err, st) => (err ? reject(err) : resolve(st.size))));
}

/**
 * Reads `length` bytes at file position `position` into buf[offset..]; fewer only at end of file.
 * Returns the number of bytes read.
 */
export async function readFullyAt(
  fs: StorageFs,
  fd: number,
  buf: Buffer,
  offset: number,
  length: number,
  position: number,
): Promise<number> {
  let done = 0;
  while (done < length) {
    const n = await new Promise<number>((resolve, reject) =>
      fs.read(fd, buf, offset + done, length - done, position + done, (err, bytesRead) =>
        err ? reject(err) : resolve(bytesRead),
      ),
    );
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** readFullyAt, on the calling thread: for data the page cache surely holds (see PartitionLog.readRuns). */
export function readFullyAtSync(fs: StorageFs, fd: number, buf: Buffer, offset: number, length: number, position: number): number {
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, buf, offset + done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** Writes buf[start, end) at file position `position`, looping over short writes. */
export function writeFullySync(fs: StorageFs, fd: number, buf: Buffer, start: number, end: number, position: number): void {
  let off = start;
  let pos = position;
  while (off < end) {
    const n = fs.writeSync(fd, buf, off, end - off, pos);
    if (n <= 0) throw new Error(`short write: wrote ${n} of ${end - off} bytes`);
    off += n;
    pos += n;
  }
}
