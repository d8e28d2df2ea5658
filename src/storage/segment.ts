// One segment of a partition log: a `.log` file of records (see record.ts) and its dense offset
// index, kept in memory as a growable Uint32Array and persisted to a `.index` file when the segment
// is sealed (rolled) or the log is closed.
//
// The index is dense (entry i is the position of record baseOffset + i) because offsets inside a
// segment are consecutive: a lookup is one array access, and 1 000 000 records cost 4 MB. An entry
// equal to NO_RECORD marks an offset whose record recovery found damaged beyond use; reads skip it.
//
// Index file layout (little-endian), written only with writeFileAtomic so it is whole or absent:
//
//   offset        size     field
//   0             4*count  u32 position of record baseOffset + i (NO_RECORD = unreadable)
//   4*count       u32      count
//   4*count+4     u32      INDEX_VERSION (1)
//   4*count+8     f64      maxProducedAtMs of the segment's records (-Infinity when none): what
//                          retention compares, so it need not read the segment
//   4*count+16    u32      crc32c of bytes [0, 4*count + 16)
//   4*count+20    u32      INDEX_MAGIC ("NIDX")
//
// A loaded index is only trusted after it matches the segment (see validateIndex); otherwise the
// segment is scanned and the index rebuilt. Either way the bytes after the last indexed record are
// scanned, so a stale but correct prefix (the active segment's index from an earlier close) is fine.

import assert from "node:assert/strict";
import path from "node:path";
import { crc32c } from "@node-rs/crc32";
import {
  checkFrame,
  frameErrorReason,
  frameOffset,
  frameProducedAtMs,
  HEADER_BYTES,
  RECORD_BYTES_MAX,
  RECORD_BYTES_MIN,
  isRecordVersion,
  FRAME_BYTES_MAX,
} from "./record.js";
import { readFullyAt } from "./files.js";
import type { StorageFs } from "./fs.js";

export const NO_RECORD = 0xffffffff;
const INDEX_VERSION = 1;
const INDEX_MAGIC = 0x5844494e; // "NIDX" read as little-endian bytes
const INDEX_TRAILER_BYTES = 24;
const INDEX_INITIAL_CAPACITY = 1024;

const SEGMENT_NAME_RE = /^(\d{20})\.(log|index)$/;

export function segmentBaseName(baseOffset: number): string {
  return String(baseOffset).padStart(20, "0");
}

/** Parses `00000000000000000042.log` / `.index`; null for anything else (or an offset past 2^53). */
export function parseSegmentFileName(name: string): { baseOffset: number; kind: "log" | "index" } | null {
  const m = SEGMENT_NAME_RE.exec(name);
  if (m === null) return null;
  const baseOffset = Number(m[1]);
  if (!Number.isSafeInteger(baseOffset)) return null;
  return { baseOffset, kind: m[2] as "log" | "index" };
}

export class Segment {
  readonly baseOffset: number;
  readonly logPath: string;
  readonly indexPath: string;
  /** File name of the .log, for reports. */
  readonly name: string;
  /** Open file descriptor, or -1 (sealed segments are opened on demand, bounded by an LRU). */
  fd = -1;
  positions: Uint32Array = new Uint32Array(INDEX_INITIAL_CAPACITY);
  /** Number of offsets in the segment (index entries, NO_RECORD included). */
  count = 0;
  /** Bytes that are in the file (written to the OS, or found by recovery). */
  writtenBytes = 0;
  /** Bytes given to records, including those still queued for the next group commit. */
  appendBytes = 0;
  maxProducedAtMs = -Infinity;
  /** producedAtMs of the first record (age-based roll); NaN while empty. */
  firstProducedAtMs = Number.NaN;
  /** No more appends: a newer segment is active. */
  sealed = false;
  /** The active segment, and sealed ones whose last records are not yet synced, keep their fd. */
  pinned = true;
  /** In-flight reads using fd. */
  refs = 0;
  removed = false;
  /** Background write of the .index after sealing. */
  indexWrite: Promise<void> | null = null;

  constructor(dir: string, baseOffset: number) {
    assert.ok(Number.isSafeInteger(baseOffset) && baseOffset >= 0, `bad base offset ${baseOffset}`);
    this.baseOffset = baseOffset;
    const base = segmentBaseName(baseOffset);
    this.name = `${base}.log`;
    this.logPath = path.join(dir, this.name);
    this.indexPath = path.join(dir, `${base}.index`);
  }

  get endOffset(): number {
    return this.baseOffset + this.count;
  }

  pushPosition(position: number): void {
    if (this.count === this.positions.length) {
      const grown = new Uint32Array(this.positions.length * 2);
      grown.set(this.positions);
      this.positions = grown;
    }
    this.positions[this.count++] = position;
  }

  /** Drops the growth slack once no more entries come (sealed segments may be many). */
  trim(): void {
    if (this.positions.length > this.count + 64) this.positions = this.positions.slice(0, Math.max(this.count, 1));
  }

  /**
   * Where the record at index i ends (as far as the index can tell): the next readable record's
   * position, or the written end of the file. A damaged stretch between them is read and rejected.
   */
  recordEnd(i: number): number {
    for (let j = i + 1; j < this.count; j++) {
      const p = this.positions[j]!;
      if (p !== NO_RECORD) return p;
    }
    return this.writtenBytes;
  }

  resetIndex(): void {
    this.positions = new Uint32Array(INDEX_INITIAL_CAPACITY);
    this.count = 0;
    this.maxProducedAtMs = -Infinity;
    this.firstProducedAtMs = Number.NaN;
  }
}

export function encodeIndex(seg: Segment): Buffer {
  const entriesBytes = seg.count * 4;
  const buf = Buffer.allocUnsafe(entriesBytes + INDEX_TRAILER_BYTES);
  for (let i = 0; i < seg.count; i++) buf.writeUInt32LE(seg.positions[i]!, i * 4);
  buf.writeUInt32LE(seg.count, entriesBytes);
  buf.writeUInt32LE(INDEX_VERSION, entriesBytes + 4);
  buf.writeDoubleLE(seg.maxProducedAtMs, entriesBytes + 8);
  buf.writeUInt32LE(crc32c(buf.subarray(0, entriesBytes + 16)), entriesBytes + 16);
  buf.writeUInt32LE(INDEX_MAGIC, entriesBytes + 20);
  return buf;
}

export interface DecodedIndex {
  positions: Uint32Array;
  count: number;
  maxProducedAtMs: number;
}

/** Decodes an index file's bytes; a string says why they are not an index. */
export function decodeIndex(buf: Buffer): DecodedIndex | string {
  if (buf.length < INDEX_TRAILER_BYTES || (buf.length - INDEX_TRAILER_BYTES) % 4 !== 0) {
    return `implausible index size ${buf.length}`;
  }
  const entriesBytes = buf.length - INDEX_TRAILER_BYTES;
  if (buf.readUInt32LE(entriesBytes + 20) !== INDEX_MAGIC) return "bad index magic";
  if (buf.readUInt32LE(entriesBytes + 4) !== INDEX_VERSION) return "unknown index version";
  const count = buf.readUInt32LE(entriesBytes);
  if (count * 4 !== entriesBytes) return "index count does not match its size";
  if (crc32c(buf.subarray(0, entriesBytes + 16)) !== buf.readUInt32LE(entriesBytes + 16)) {
    return "index checksum mismatch";
  }
  const maxProducedAtMs = buf.readDoubleLE(entriesBytes + 8);
  if (Number.isNaN(maxProducedAtMs)) return "bad maxProducedAtMs";
  const positions = new Uint32Array(Math.max(count, INDEX_INITIAL_CAPACITY));
  for (let i = 0; i < count; i++) positions[i] = buf.readUInt32LE(i * 4);
  return { positions, count, maxProducedAtMs };
}

/**
 * Checks an index against its segment file: positions inside the file and increasing, no more
 * entries than the file could hold, and the last readable entry is a whole record carrying the
 * offset the index says. Returns where that record ends (the scan resumes there), or a reason.
 */
export async function validateIndex(
  fs: StorageFs,
  seg: Segment,
  idx: DecodedIndex,
  fd: number,
  fileSizeBytes: number,
  offsetLimit: number,
): Promise<{ lastIndex: number; endPosition: number; lastProducedAtMs: number } | string> {
  if (idx.count > Math.floor(fileSizeBytes / RECORD_BYTES_MIN)) return "more index entries than the segment can hold";
  if (seg.baseOffset + idx.count > offsetLimit) return "index reaches into the next segment";
  let prev = -1;
  let last = -1;
  for (let i = 0; i < idx.count; i++) {
    const p = idx.positions[i]!;
    if (p === NO_RECORD) continue;
    if (p <= prev || p + RECORD_BYTES_MIN > fileSizeBytes) return `index entry ${i} out of place`;
    prev = p;
    last = i;
  }
  // Nothing readable to check against: the scan from position 0 decides.
  if (last === -1) return { lastIndex: -1, endPosition: 0, lastProducedAtMs: -Infinity };
  const pos = idx.positions[last]!;
  const want = Math.min(RECORD_BYTES_MAX, fileSizeBytes - pos);
  const buf = Buffer.allocUnsafe(want);
  const n = await readFullyAt(fs, fd, buf, 0, want, pos);
  const size = checkFrame(buf, 0, n);
  if (size <= 0) return `last indexed record: ${frameErrorReason(size)}`;
  if (frameOffset(buf, 0) !== seg.baseOffset + last) return "last indexed record has the wrong offset";
  // Records after `last` that the index marks unreadable are re-examined by the scan.
  return { lastIndex: last, endPosition: pos + size, lastProducedAtMs: frameProducedAtMs(buf, 0) };
}

/** producedAtMs of the record at pos, or null when no whole record is there. */
export async function readProducedAtMs(fs: StorageFs, fd: number, fileSizeBytes: number, pos: number): Promise<number | null> {
  const want = Math.min(RECORD_BYTES_MAX, fileSizeBytes - pos);
  if (want < HEADER_BYTES) return null;
  const buf = Buffer.allocUnsafe(want);
  const n = await readFullyAt(fs, fd, buf, 0, want, pos);
  return checkFrame(buf, 0, n) > 0 ? frameProducedAtMs(buf, 0) : null;
}

/**
 * A sliding read window over a file for recovery scans: records are decoded from memory and the
 * window is refilled only when a record could cross its end.
 */
class FileWindow {
  readonly buf: Buffer;
  /** File position of buf[0]. */
  start = 0;
  /** Valid bytes in buf. */
  len = 0;

  constructor(
    private readonly fs: StorageFs,
    private readonly fd: number,
    private readonly fileSizeBytes: number,
    capacityBytes: number,
  ) {
    this.buf = Buffer.allocUnsafe(Math.min(capacityBytes, Math.max(fileSizeBytes, 1)));
  }

  /** True when the window holds a whole record's worth of bytes from pos (or everything to EOF). */
  covers(pos: number): boolean {
    if (pos < this.start) return false;
    const end = this.start + this.len;
    return pos + RECORD_BYTES_MAX <= end || end === this.fileSizeBytes;
  }

  async load(pos: number): Promise<void> {
    const want = Math.min(this.buf.length, this.fileSizeBytes - pos);
    this.start = pos;
    this.len = await readFullyAt(this.fs, this.fd, this.buf, 0, want, pos);
  }
}

const SCAN_WINDOW_BYTES = 8 * 1024 * 1024 + 2 * RECORD_BYTES_MAX;

export interface ScanResult {
  /** Position after the last record kept; the file should end here. */
  validEndBytes: number;
  /** Bytes after validEndBytes that hold no usable record (torn tail or garbage). */
  tailBytes: number;
  tailReason: string | null;
}

/**
 * Scans the segment file from startPos (a record boundary, with seg.count records before it),
 * appending index entries for every record whose frame checks out and carries the next offset.
 * A damaged record followed by good data is skipped (its offsets become NO_RECORD and onCorrupt
 * hears of it); damage with nothing good after it is a torn tail, left to the caller to truncate.
 */
export async function scanSegment(
  fs: StorageFs,
  seg: Segment,
  fd: number,
  fileSizeBytes: number,
  startPos: number,
  offsetLimit: number,
  onCorrupt: (position: number, reason: string, lostOffsets: number) => void,
): Promise<ScanResult> {
  const win = new FileWindow(fs, fd, fileSizeBytes, SCAN_WINDOW_BYTES);
  let pos = startPos;
  while (pos < fileSizeBytes) {
    if (!win.covers(pos)) await win.load(pos);
    const at = pos - win.start;
    const size = checkFrame(win.buf, at, win.len);
    const expected = seg.endOffset;
    if (size > 0 && frameOffset(win.buf, at) === expected && expected < offsetLimit) {
      const producedAtMs = frameProducedAtMs(win.buf, at);
      if (seg.count === 0) seg.firstProducedAtMs = producedAtMs;
      seg.pushPosition(pos);
      if (producedAtMs > seg.maxProducedAtMs) seg.maxProducedAtMs = producedAtMs;
      pos += size;
      continue;
    }
    const reason =
      size > 0
        ? `record carries offset ${frameOffset(win.buf, at)} where ${expected} was expected`
        : frameErrorReason(size);
    const next = await findNextRecord(win, pos, expected, offsetLimit, fileSizeBytes);
    if (next === null) return { validEndBytes: pos, tailBytes: fileSizeBytes - pos, tailReason: reason };
    onCorrupt(pos, reason, next.offset - expected);
    while (seg.endOffset < next.offset) seg.pushPosition(NO_RECORD);
    pos = next.position;
  }
  return { validEndBytes: pos, tailBytes: 0, tailReason: null };
}

/**
 * After damage at badPos, finds the next trustworthy record: first where the damaged record's own
 * length points (the usual case, a flipped bit in a payload), then byte by byte. A candidate must
 * check out and carry an offset no further ahead than the bytes skipped could have held, so a
 * random match cannot make offsets jump.
 */
async function findNextRecord(
  win: FileWindow,
  badPos: number,
  expected: number,
  offsetLimit: number,
  fileSizeBytes: number,
): Promise<{ position: number; offset: number } | null> {
  const tryAt = async (q: number): Promise<number | null> => {
    if (q + HEADER_BYTES > fileSizeBytes) return null;
    if (!win.covers(q)) await win.load(q);
    const at = q - win.start;
    if (!isRecordVersion(win.buf[at + 8])) return null;
    if (checkFrame(win.buf, at, win.len) <= 0) return null;
    const o = frameOffset(win.buf, at);
    const lostMax = Math.floor((q - badPos) / RECORD_BYTES_MIN);
    if (o < expected || o > expected + lostMax || o >= offsetLimit) return null;
    return o;
  };
  if (!win.covers(badPos)) await win.load(badPos);
  const claimed = win.len - (badPos - win.start) >= 4 ? win.buf.readUInt32LE(badPos - win.start) : 0;
  if (claimed >= HEADER_BYTES - 8 && claimed <= FRAME_BYTES_MAX) {
    const q = badPos + 8 + claimed;
    const o = await tryAt(q);
    if (o !== null) return { position: q, offset: o };
  }
  for (let q = badPos + 1; q + HEADER_BYTES <= fileSizeBytes; q++) {
    // Cheap precheck inline: most positions fail on the version byte without an await.
    if (win.covers(q) && !isRecordVersion(win.buf[q - win.start + 8])) continue;
    const o = await tryAt(q);
    if (o !== null) return { position: q, offset: o };
  }
  return null;
}
