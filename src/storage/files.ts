// File helpers shared by the partition log and the ack log (small durable files are
// ../platform/files.ts).
//
// The callback-style wrappers exist because the hot path (group commit) wants exactly one libuv
// threadpool job per fdatasync and nothing else; fs/promises' FileHandle adds its own bookkeeping.

import fs from "node:fs";

export function openAsync(p: string, flags: string): Promise<number> {
  return new Promise((resolve, reject) => fs.open(p, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

export function closeAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.close(fd, (err) => (err ? reject(err) : resolve())));
}

export function fsyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fsync(fd, (err) => (err ? reject(err) : resolve())));
}

export function fdatasyncAsync(fd: number): Promise<void> {
  return new Promise((resolve, reject) => fs.fdatasync(fd, (err) => (err ? reject(err) : resolve())));
}

export function ftruncateAsync(fd: number, lengthBytes: number): Promise<void> {
  return new Promise((resolve, reject) => fs.ftruncate(fd, lengthBytes, (err) => (err ? reject(err) : resolve())));
}

export function fstatSizeAsync(fd: number): Promise<number> {
  return new Promise((resolve, reject) => fs.fstat(fd, (err, st) => (err ? reject(err) : resolve(st.size))));
}

/**
 * Reads `length` bytes at file position `position` into buf[offset..]; fewer only at end of file.
 * Returns the number of bytes read.
 */
export async function readFullyAt(
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
export function readFullyAtSync(fd: number, buf: Buffer, offset: number, length: number, position: number): number {
  let done = 0;
  while (done < length) {
    const n = fs.readSync(fd, buf, offset + done, length - done, position + done);
    if (n === 0) break;
    done += n;
  }
  return done;
}

/** Writes buf[start, end) at file position `position`, looping over short writes. */
export function writeFullySync(fd: number, buf: Buffer, start: number, end: number, position: number): void {
  let off = start;
  let pos = position;
  while (off < end) {
    const n = fs.writeSync(fd, buf, off, end - off, pos);
    if (n <= 0) throw new Error(`short write: wrote ${n} of ${end - off} bytes`);
    off += n;
    pos += n;
  }
}
