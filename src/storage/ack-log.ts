// A partition's ack log: which offsets are settled, durable on the schedule the SPEC sets
// (written to the OS every ackFlushIntervalMs, fsynced every ackSyncIntervalMs).
//
// Acks change memory at once (AckedSet) and are buffered as entries; coalesced, so a run of
// in-order acks is one "range" entry. The flush step frames the buffered entries as one
// CRC-protected block and writes it to acks.log; the sync step fdatasyncs the file. In the
// test-only power-loss mode the flush step moves the block to a process-memory buffer instead and
// the sync step writes and fsyncs it, so a SIGKILL then forgets what a power loss would.
//
// Compaction: once acks.log passes ackLogBytesMax, the whole state is written to acks.snapshot
// with writeFileAtomic (fsynced, renamed, directory fsynced) and only then is acks.log truncated,
// so no ack is ever only in a dropped log. Recovery is the snapshot plus a replay of the log;
// both describe a grow-only set, so replaying entries that the snapshot already holds (a crash
// between the two steps) is harmless. Every open folds what it recovered into a fresh snapshot and
// starts an empty log, so new blocks never sit behind a damaged tail.
//
// All file work (flush, sync, compaction, close) runs one step at a time on a promise chain;
// compaction awaits, and a flush must not write into a log that is about to be truncated. It goes
// through the StorageFs of the options, and the two intervals through their Scheduler, so a test
// drives a flush by advancing a ManualScheduler and injects a failing fdatasync.
//
// A failed write is retried by the next flush at the same position (nothing was claimed durable).
// A failed fdatasync is never retried (fsyncgate, see syncStep): the next sync step rewrites the
// whole state as a snapshot instead. So on a full disk acks live in memory (logged at every failed
// flush) and reach the disk once it has room; an open on a full disk, whose compaction cannot be
// written, keeps the old log and appends after its last valid block (a node must start on a full
// disk: the API that frees space is reached through it).
//
// Descriptor: closeIdleFile() lets acks.log's fd go when nothing is buffered or unsynced; the
// next step that writes opens it again.
//
// acks.log block layout (little-endian):
//
//   offset  size  field
//   0       u32   BLOCK_MAGIC ("NACK")
//   4       u32   crc32c of bytes [8, 12 + payloadBytes)
//   8       u32   payloadBytes (a multiple of 16, at most BLOCK_PAYLOAD_BYTES_MAX)
//   12      ...   entries, 16 bytes each:
//                   0  u8   kind: 1 = offsets [offset, offset + count) acked, 2 = floor raised to offset,
//                             3 = offset delivered `count` times, 4 = as 3, and a dead-letter move was
//                             asked for (ack ?dead_letter=true)
//                   1  u8×3 zero
//                   4  u32  count (kinds 1, 3, 4), 0 otherwise
//                   8  u64  offset (u32 low, u32 high)
//
// Delivery counts (kinds 3 and 4; SPEC "Dead letters": counts survive restarts) ride on the same
// blocks and schedule as the acks. They are written when a lease ends without an ack (a nack or a
// lapse) and, at a graceful close, for the leases still held, so a count on disk never exceeds the
// deliveries made: a crash can only forget some, and a message is then delivered a few times more
// than max_deliveries, never fewer. Counts only grow (a replay keeps the larger count, and a
// dead-letter ask once made stays), so replaying entries in any order and any number of times is
// harmless, as for acks. An ack or a floor raise drops an offset's count. A build from before
// counts skips kinds 3 and 4 (logged) and reads the acks as before.
//
// acks.snapshot layout (little-endian):
//
//   0       u32   SNAPSHOT_MAGIC ("NAKS")
//   4       u32   SNAPSHOT_VERSION: 1, or 2 when delivery counts follow the ranges
//   8       u64   floor
//   16      u32   rangeCount
//   20      16×n  ranges: u64 start, u64 end (exclusive), sorted, disjoint, above the floor
//   version 2 only:
//   20+16n  u32   countCount
//   24+16n  16×c  counts: u64 offset, u32 deliveries, u32 flags (bit 0: a dead-letter move was asked)
//   end-4   u32   crc32c of every byte before it
//
// A snapshot without counts is written as version 1, byte for byte as builds before counts did.

import assert from "node:assert/strict";
import path from "node:path";
import type { Logger } from "pino";
import { crc32c } from "@node-rs/crc32";
import type { AckLog, AckLogOptions } from "./types.js";
import { AckedSet } from "./acked-set.js";
import { StorageError } from "./errors.js";
import {
  closeAsync,
  fdatasyncAsync,
  ftruncateAsync,
  openAsync,
  writeFullySync,
} from "./files.js";
import { isAtomicTempName } from "../platform/files.js";
import { systemScheduler, type Scheduler, type Timer } from "../platform/scheduler.js";
import { realFs, type StorageFs } from "./fs.js";

export const ACK_LOG_FILE = "acks.log";
export const ACK_SNAPSHOT_FILE = "acks.snapshot";

const BLOCK_MAGIC = 0x4b43414e; // "NACK" as little-endian bytes
const BLOCK_HEADER_BYTES = 12;
const ENTRY_BYTES = 16;
const BLOCK_PAYLOAD_BYTES_MAX = 1024 * 1024;
const ENTRIES_PER_BLOCK_MAX = BLOCK_PAYLOAD_BYTES_MAX / ENTRY_BYTES;
const KIND_RANGE = 1;
const KIND_FLOOR = 2;
const KIND_DELIVERIES = 3;
const KIND_DEAD_LETTER = 4;
const SNAPSHOT_MAGIC = 0x534b414e; // "NAKS"
const SNAPSHOT_VERSION = 1;
const SNAPSHOT_VERSION_COUNTS = 2;
/**
 * Most offsets with a delivery count kept per partition (in memory and in the snapshot). At the
 * limit a count of a further offset is not kept (logged once per open): that message is counted
 * from 0 again after a restart, so it may be delivered more than max_deliveries times, never fewer.
 */
export const DELIVERY_COUNTS_MAX = 1_000_000;
/** Added to a count in `counts` when a dead-letter move was asked for the offset. */
const DEAD_LETTER_FLAG = 4294967296;
const ACK_LOG_BYTES_MAX_DEFAULT = 4 * 1024 * 1024;
/**
 * Buffered entries beyond this (the disk keeps failing, or acks arrive faster than any flush)
 * are dropped from the buffer and the next sync step writes a snapshot instead: memory stays
 * bounded and no ack is lost, since the snapshot is taken from the in-memory set.
 */
const PENDING_ENTRIES_MAX = 1_000_000;
const TWO_POW_32 = 4294967296;
const U32_MAX = 0xffffffff;

export interface AckLogRecovery {
  snapshotLoaded: boolean;
  /** Why the snapshot could not be used (its acks are forgotten), or null. */
  snapshotProblem: string | null;
  blocks: number;
  entries: number;
  /** Damaged blocks skipped in the middle of the log. */
  corruptBlocks: { position: number; bytes: number; reason: string }[];
  /** Bytes at the end of the log that held no valid block (a torn write). */
  truncatedBytes: number;
}

export interface AckLogStats {
  /** Blocks written to acks.log (in power-loss mode: at sync time). */
  blocksWritten: number;
  /** fdatasyncs of acks.log. */
  syncs: number;
  compactions: number;
}

function writeU64(buf: Buffer, value: number, pos: number): void {
  buf.writeUInt32LE(value >>> 0, pos);
  buf.writeUInt32LE(Math.floor(value / TWO_POW_32), pos + 4);
}

/** Reads a u64; -1 when it does not fit a safe integer (only damage produces that). */
function readU64(buf: Buffer, pos: number): number {
  const hi = buf.readUInt32LE(pos + 4);
  if (hi >= 1 << 21) return -1;
  return hi * TWO_POW_32 + buf.readUInt32LE(pos);
}

/** Entries waiting for the next flush, as parallel arrays (no object per ack). */
class EntryBuffer {
  kinds: number[] = [];
  offsets: number[] = [];
  counts: number[] = [];

  get length(): number {
    return this.kinds.length;
  }

  pushAck(offset: number): void {
    const n = this.kinds.length;
    if (n > 0 && this.kinds[n - 1] === KIND_RANGE && this.offsets[n - 1]! + this.counts[n - 1]! === offset && this.counts[n - 1]! < U32_MAX) {
      this.counts[n - 1]!++;
      return;
    }
    this.kinds.push(KIND_RANGE);
    this.offsets.push(offset);
    this.counts.push(1);
  }

  pushRange(start: number, count: number): void {
    while (count > 0) {
      const n = Math.min(count, U32_MAX);
      this.kinds.push(KIND_RANGE);
      this.offsets.push(start);
      this.counts.push(n);
      start += n;
      count -= n;
    }
  }

  pushCount(kind: number, offset: number, count: number): void {
    this.kinds.push(kind);
    this.offsets.push(offset);
    this.counts.push(count);
  }

  pushFloor(offset: number): void {
    this.kinds.push(KIND_FLOOR);
    this.offsets.push(offset);
    this.counts.push(0);
  }

  clear(): void {
    this.kinds = [];
    this.offsets = [];
    this.counts = [];
  }

  /** Encodes every entry as one or more blocks, concatenated. Layout: top of this file. */
  encode(): Buffer {
    const n = this.kinds.length;
    const blocks = Math.ceil(n / ENTRIES_PER_BLOCK_MAX);
    const buf = Buffer.alloc(blocks * BLOCK_HEADER_BYTES + n * ENTRY_BYTES);
    let pos = 0;
    for (let first = 0; first < n; first += ENTRIES_PER_BLOCK_MAX) {
      const last = Math.min(n, first + ENTRIES_PER_BLOCK_MAX);
      const payloadBytes = (last - first) * ENTRY_BYTES;
      const blockStart = pos;
      buf.writeUInt32LE(BLOCK_MAGIC, pos);
      buf.writeUInt32LE(payloadBytes, pos + 8);
      pos += BLOCK_HEADER_BYTES;
      for (let i = first; i < last; i++) {
        buf[pos] = this.kinds[i]!;
        buf.writeUInt32LE(this.counts[i]!, pos + 4);
        writeU64(buf, this.offsets[i]!, pos + 8);
        pos += ENTRY_BYTES;
      }
      buf.writeUInt32LE(crc32c(buf.subarray(blockStart + 8, pos)), blockStart + 4);
    }
    assert.equal(pos, buf.length);
    return buf;
  }
}

/** Size of the valid block at buf[pos], or a reason it is not one. */
function checkBlock(buf: Buffer, pos: number): number | string {
  if (buf.length - pos < BLOCK_HEADER_BYTES) return "incomplete block header";
  if (buf.readUInt32LE(pos) !== BLOCK_MAGIC) return "bad block magic";
  const payloadBytes = buf.readUInt32LE(pos + 8);
  if (payloadBytes === 0 || payloadBytes % ENTRY_BYTES !== 0 || payloadBytes > BLOCK_PAYLOAD_BYTES_MAX) {
    return "implausible block length";
  }
  const end = pos + BLOCK_HEADER_BYTES + payloadBytes;
  if (end > buf.length) return "incomplete block";
  if (crc32c(buf.subarray(pos + 8, end)) !== buf.readUInt32LE(pos + 4)) return "block checksum mismatch";
  return end - pos;
}

/**
 * The snapshot of `set` and of the delivery counts of offsets it does not hold (offset → count,
 * plus DEAD_LETTER_FLAG when a move was asked). Version 1 when there are no counts.
 */
export function encodeSnapshot(set: AckedSet, counts: ReadonlyMap<number, number> = new Map()): Buffer {
  const kept: [number, number][] = [];
  for (const [offset, v] of counts) if (!set.has(offset)) kept.push([offset, v]);
  const withCounts = kept.length > 0;
  const buf = Buffer.alloc(20 + set.rangeCount * 16 + (withCounts ? 4 + kept.length * 16 : 0) + 4);
  buf.writeUInt32LE(SNAPSHOT_MAGIC, 0);
  buf.writeUInt32LE(withCounts ? SNAPSHOT_VERSION_COUNTS : SNAPSHOT_VERSION, 4);
  writeU64(buf, set.floor, 8);
  buf.writeUInt32LE(set.rangeCount, 16);
  let pos = 20;
  set.forEachRange((start, end) => {
    writeU64(buf, start, pos);
    writeU64(buf, end, pos + 8);
    pos += 16;
  });
  if (withCounts) {
    buf.writeUInt32LE(kept.length, pos);
    pos += 4;
    for (const [offset, v] of kept) {
      writeU64(buf, offset, pos);
      buf.writeUInt32LE(v % DEAD_LETTER_FLAG, pos + 8);
      buf.writeUInt32LE(v >= DEAD_LETTER_FLAG ? 1 : 0, pos + 12);
      pos += 16;
    }
  }
  buf.writeUInt32LE(crc32c(buf.subarray(0, pos)), pos);
  return buf;
}

/**
 * Applies a snapshot to `set` (and its delivery counts to `counts`, in the form encodeSnapshot
 * takes); returns a reason when the bytes are not a valid snapshot.
 */
export function applySnapshot(buf: Buffer, set: AckedSet, counts: Map<number, number> = new Map()): string | null {
  if (buf.length < 24) return "snapshot too short";
  if (buf.readUInt32LE(0) !== SNAPSHOT_MAGIC) return "bad snapshot magic";
  const version = buf.readUInt32LE(4);
  if (version !== SNAPSHOT_VERSION && version !== SNAPSHOT_VERSION_COUNTS) return "unknown snapshot version";
  const ranges = buf.readUInt32LE(16);
  const rangesEnd = 20 + ranges * 16;
  let countsN = 0;
  if (version === SNAPSHOT_VERSION_COUNTS) {
    if (buf.length < rangesEnd + 8) return "snapshot size does not match its range count";
    countsN = buf.readUInt32LE(rangesEnd);
    if (buf.length !== rangesEnd + 4 + countsN * 16 + 4) return "snapshot size does not match its range and count counts";
  } else if (buf.length !== rangesEnd + 4) return "snapshot size does not match its range count";
  const crcPos = buf.length - 4;
  if (crc32c(buf.subarray(0, crcPos)) !== buf.readUInt32LE(crcPos)) return "snapshot checksum mismatch";
  const floor = readU64(buf, 8);
  if (floor < 0) return "snapshot floor out of range";
  set.raiseFloor(floor);
  for (let i = 0; i < ranges; i++) {
    const start = readU64(buf, 20 + i * 16);
    const end = readU64(buf, 28 + i * 16);
    if (start < 0 || end < 0 || end <= start) return `snapshot range ${i} is malformed`;
    set.addRange(start, end);
  }
  for (let i = 0; i < countsN; i++) {
    const at = rangesEnd + 4 + i * 16;
    const offset = readU64(buf, at);
    if (offset < 0) return `snapshot delivery count ${i} is malformed`;
    const v = buf.readUInt32LE(at + 8) + ((buf.readUInt32LE(at + 12) & 1) === 1 ? DEAD_LETTER_FLAG : 0);
    if (!set.has(offset)) counts.set(offset, Math.max(counts.get(offset) ?? 0, v));
  }
  return null;
}

export class FileAckLog implements AckLog {
  readonly recovery: AckLogRecovery = {
    snapshotLoaded: false,
    snapshotProblem: null,
    blocks: 0,
    entries: 0,
    corruptBlocks: [],
    truncatedBytes: 0,
  };
  readonly stats: AckLogStats = { blocksWritten: 0, syncs: 0, compactions: 0 };

  private readonly log: Logger;
  private readonly fs: StorageFs;
  private readonly scheduler: Scheduler;
  private readonly set = new AckedSet();
  /** Delivery counts of unsettled offsets (+ DEAD_LETTER_FLAG: a dead-letter move was asked). */
  private readonly counts = new Map<number, number>();
  private countsFullLogged = false;
  private readonly logPath: string;
  private readonly snapshotPath: string;
  private readonly ackLogBytesMax: number;
  private fd = -1;
  /** Valid bytes in acks.log: where the next block goes (a failed write is overwritten). */
  private logBytes = 0;
  private readonly pending = new EntryBuffer();
  /** Power-loss mode: blocks "written to the OS" that only the sync step puts in the file. */
  private heldBlocks: Buffer[] = [];
  /** Bytes written since the last fdatasync. */
  private dirty = false;
  private snapshotNeeded = false;
  private chain: Promise<void> = Promise.resolve();
  private flushQueued = false;
  private syncQueued = false;
  private flushTimer: Timer | null = null;
  private syncTimer: Timer | null = null;
  private closed = false;
  private closePromise: Promise<void> | null = null;
  /** acks.log exists but its fd was let go while idle (closeIdleFile). */
  private idleClosed = false;
  /** monoMs of the last write to acks.log (closeIdleFile). */
  private lastWriteMs: number;

  constructor(
    readonly dir: string,
    private readonly opts: AckLogOptions,
  ) {
    this.log = opts.logger.child({ module: "storage", component: "ack-log", partitionDir: dir });
    this.fs = opts.fs ?? realFs;
    this.scheduler = opts.scheduler ?? systemScheduler;
    this.logPath = path.join(dir, ACK_LOG_FILE);
    this.snapshotPath = path.join(dir, ACK_SNAPSHOT_FILE);
    this.ackLogBytesMax = opts.ackLogBytesMax ?? ACK_LOG_BYTES_MAX_DEFAULT;
    if (!(opts.ackFlushIntervalMs > 0) || !(opts.ackSyncIntervalMs > 0)) {
      throw new RangeError("ackFlushIntervalMs and ackSyncIntervalMs must be > 0");
    }
    this.lastWriteMs = opts.clock.monoMs();
  }

  /**
   * Lets go of acks.log's fd when nothing waits to be written or synced and nothing was written
   * for idleMs; the next step that writes opens it again. Runs as a step of the file chain.
   */
  closeIdleFile(idleMs: number): void {
    if (this.fd < 0 || this.closed || this.flushQueued || this.syncQueued) return;
    void this.enqueue(async () => {
      const idle = this.pending.length === 0 && !this.dirty && this.heldBlocks.length === 0 && !this.snapshotNeeded;
      if (this.fd < 0 || this.closed || !idle || this.opts.clock.monoMs() - this.lastWriteMs < idleMs) return;
      const fd = this.fd;
      this.fd = -1;
      this.idleClosed = true;
      await closeAsync(this.fs, fd);
    }).catch((err: unknown) => this.log.warn({ err }, "closing an idle ack log failed"));
  }

  /** Opens acks.log again after closeIdleFile; false when the log is not open at all. */
  private ensureFd(): boolean {
    if (this.fd >= 0) return true;
    if (!this.idleClosed) return false;
    this.fd = this.fs.openSync(this.logPath, "r+");
    this.idleClosed = false;
    return true;
  }

  /** Descriptors held now (0 or 1; for tests). */
  get openFds(): number {
    return this.fd >= 0 ? 1 : 0;
  }

  get floor(): number {
    return this.set.floor;
  }

  get ackedAboveFloor(): number {
    return this.set.ackedAboveFloor;
  }

  isAcked(offset: number): boolean {
    return this.set.has(offset);
  }

  ack(offset: number): void {
    if (!(Number.isSafeInteger(offset) && offset >= 0)) assert.fail(`bad offset ${offset}`); // the message is built only on failure
    if (this.closed) throw new StorageError("log_closed", `ack log in ${this.dir} is closed`);
    if (!this.set.add(offset)) return;
    if (this.counts.size > 0) this.counts.delete(offset);
    this.pending.pushAck(offset);
    this.boundPending();
  }

  deliveries(offset: number): number {
    const v = this.counts.get(offset);
    return v === undefined ? 0 : v % DEAD_LETTER_FLAG;
  }

  deadLetterAsked(offset: number): boolean {
    return (this.counts.get(offset) ?? 0) >= DEAD_LETTER_FLAG;
  }

  recordDeliveries(offset: number, count: number, deadLetter = false): void {
    if (!(Number.isSafeInteger(offset) && offset >= 0 && Number.isSafeInteger(count) && count >= 0)) assert.fail(`bad delivery count ${count} of ${offset}`);
    if (this.closed) throw new StorageError("log_closed", `ack log in ${this.dir} is closed`);
    if (this.set.has(offset) || !this.mergeCount(offset, count, deadLetter)) return;
    this.pending.pushCount(deadLetter ? KIND_DEAD_LETTER : KIND_DELIVERIES, offset, Math.min(count, U32_MAX));
    this.boundPending();
  }

  forEachDelivery(fn: (offset: number, count: number, deadLetter: boolean) => void): void {
    for (const [offset, v] of this.counts) if (!this.set.has(offset)) fn(offset, v % DEAD_LETTER_FLAG, v >= DEAD_LETTER_FLAG);
  }

  /** Counts only grow and a dead-letter ask stays; false when nothing changed (or at the bound). */
  private mergeCount(offset: number, count: number, deadLetter: boolean): boolean {
    const cur = this.counts.get(offset);
    const c = Math.max((cur ?? 0) % DEAD_LETTER_FLAG, Math.min(count, U32_MAX));
    const next = c + (deadLetter || (cur ?? 0) >= DEAD_LETTER_FLAG ? DEAD_LETTER_FLAG : 0);
    if (next === cur) return false;
    if (cur === undefined && this.counts.size >= DELIVERY_COUNTS_MAX) {
      if (!this.countsFullLogged) this.log.warn({ countsMax: DELIVERY_COUNTS_MAX }, "delivery counts of more unsettled messages than the bound: further counts are kept in memory by the broker only, and start again after a restart");
      this.countsFullLogged = true;
      return false;
    }
    this.counts.set(offset, next);
    return true;
  }

  /** Drops the counts of offsets that are settled now. */
  private pruneCounts(): void {
    if (this.counts.size === 0) return;
    for (const offset of this.counts.keys()) if (this.set.has(offset)) this.counts.delete(offset);
  }

  ackRange(start: number, end: number): void {
    if (!(Number.isSafeInteger(start) && Number.isSafeInteger(end) && start >= 0 && end >= start)) assert.fail(`bad range ${start}..${end}`);
    if (this.closed) throw new StorageError("log_closed", `ack log in ${this.dir} is closed`);
    const from = Math.max(start, this.set.floor);
    if (from >= end) return;
    this.set.addRange(from, end);
    this.pruneCounts();
    this.pending.pushRange(from, end - from);
    this.boundPending();
  }

  settledRanges(rangesMax: number): { floor: number; ranges: [number, number][] } {
    const ranges: [number, number][] = [];
    this.set.forEachRange((s, e) => {
      if (ranges.length < rangesMax) ranges.push([s, e]);
    });
    return { floor: this.set.floor, ranges };
  }

  raiseFloor(offset: number): void {
    if (!(Number.isSafeInteger(offset) && offset >= 0)) assert.fail(`bad offset ${offset}`); // the message is built only on failure
    if (this.closed) throw new StorageError("log_closed", `ack log in ${this.dir} is closed`);
    if (!this.set.raiseFloor(offset)) return;
    this.pruneCounts();
    this.pending.pushFloor(offset);
    this.boundPending();
  }

  private boundPending(): void {
    if (this.pending.length < PENDING_ENTRIES_MAX) return;
    this.pending.clear();
    this.snapshotNeeded = true;
  }

  /** The timer's flush step, callable directly (tests). */
  runFlushStep(): Promise<void> {
    return this.enqueue(() => this.flushStep());
  }

  /** The timer's sync step, callable directly (tests). */
  runSyncStep(): Promise<void> {
    return this.enqueue(() => this.syncStep());
  }

  /**
   * Resolves once every file step queued so far (by a timer or a call) is done, failed ones
   * included: a test advances a ManualScheduler, then awaits this.
   */
  drained(): Promise<void> {
    return this.chain;
  }

  flushAndSync(): Promise<void> {
    return this.enqueue(async () => {
      this.flushStep();
      await this.syncStep();
    });
  }

  close(): Promise<void> {
    this.closePromise ??= this.closeNow();
    return this.closePromise;
  }

  private async closeNow(): Promise<void> {
    this.closed = true;
    this.flushTimer?.cancel();
    this.syncTimer?.cancel();
    try {
      await this.flushAndSync();
    } finally {
      if (this.fd >= 0) {
        const fd = this.fd;
        this.fd = -1;
        await closeAsync(this.fs, fd).catch(() => {});
      }
    }
  }

  private enqueue(step: () => void | Promise<void>): Promise<void> {
    const run = this.chain.then(step);
    this.chain = run.catch(() => {});
    return run;
  }

  /** Frames the buffered entries as a block and hands it to the OS (or, power-loss mode, to memory). */
  private flushStep(): void {
    if (this.pending.length === 0 || !this.ensureFd()) return;
    const block = this.pending.encode();
    if (this.opts.powerLoss) {
      this.heldBlocks.push(block);
    } else {
      // On failure nothing is cleared and logBytes stays: the next attempt overwrites the partial write.
      writeFullySync(this.fs, this.fd, block, 0, block.length, this.logBytes);
      this.logBytes += block.length;
      this.lastWriteMs = this.opts.clock.monoMs();
      this.dirty = true;
      this.stats.blocksWritten++;
    }
    this.pending.clear();
  }

  private async syncStep(): Promise<void> {
    if (this.heldBlocks.length === 0 && !this.dirty && !this.snapshotNeeded && this.logBytes <= this.ackLogBytesMax) return;
    if (!this.ensureFd()) return;
    if (this.heldBlocks.length > 0) {
      const data = this.heldBlocks.length === 1 ? this.heldBlocks[0]! : Buffer.concat(this.heldBlocks);
      writeFullySync(this.fs, this.fd, data, 0, data.length, this.logBytes);
      this.logBytes += data.length;
      this.dirty = true;
      this.stats.blocksWritten += this.heldBlocks.length;
      this.heldBlocks = [];
    }
    // When a snapshot is due it covers every ack in memory: syncing the log first would be moot.
    if (this.dirty && !this.snapshotNeeded) {
      this.dirty = false;
      try {
        await fdatasyncAsync(this.fs, this.fd);
      } catch (err) {
        // Never retry a failed fsync (fsyncgate): the kernel may have dropped the dirty pages and
        // marked them clean, so a second fdatasync would succeed without them. The in-memory set
        // is whole, so the next sync step writes it as a fresh snapshot (a new file with its own
        // fsync, then the log is truncated) instead.
        this.snapshotNeeded = true;
        throw err;
      }
      this.stats.syncs++;
    }
    if (this.snapshotNeeded || this.logBytes > this.ackLogBytesMax) await this.compact();
  }

  /** Snapshot first (durable), then drop the log: an ack is always in one of the two. */
  private async compact(): Promise<void> {
    const snapshot = encodeSnapshot(this.set, this.counts);
    await this.fs.writeFileAtomic(this.snapshotPath, snapshot);
    this.snapshotNeeded = false;
    // Blocks not yet in the file (power-loss mode) are covered by the snapshot; they are still
    // written later, harmlessly, since replaying an ack twice changes nothing.
    await ftruncateAsync(this.fs, this.fd, 0);
    this.logBytes = 0;
    await fdatasyncAsync(this.fs, this.fd);
    this.dirty = false;
    this.stats.compactions++;
    this.log.debug({ snapshotBytes: snapshot.length, floor: this.set.floor, ranges: this.set.rangeCount }, "ack log compacted");
  }

  private startTimers(): void {
    this.flushTimer = this.scheduler.every(this.opts.ackFlushIntervalMs, () => {
      if (this.flushQueued) return;
      this.flushQueued = true;
      this.enqueue(() => {
        this.flushQueued = false;
        this.flushStep();
      }).catch((err: unknown) => this.log.error({ err }, "writing acks failed; retrying at the next flush"));
    });
    this.syncTimer = this.scheduler.every(this.opts.ackSyncIntervalMs, () => {
      if (this.syncQueued) return;
      this.syncQueued = true;
      this.enqueue(async () => {
        this.syncQueued = false;
        await this.syncStep();
      }).catch((err: unknown) => this.log.error({ err }, "syncing acks failed; the next sync writes a fresh snapshot"));
    });
  }

  async recover(): Promise<void> {
    if (this.opts.powerLoss) this.log.warn("TEST-ONLY power-loss mode: unsynced acks are kept in process memory");
    await this.fs.mkdirp(this.dir);
    for (const { name } of await this.fs.readdir(this.dir)) {
      // A snapshot write that died before its rename; the old snapshot is still in place.
      if (name.startsWith(`${ACK_SNAPSHOT_FILE}.`) && isAtomicTempName(name)) {
        await this.fs.unlink(path.join(this.dir, name)).catch(() => {});
      }
    }
    let snapshot: Buffer | null = null;
    try {
      snapshot = await this.fs.readFile(this.snapshotPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (snapshot !== null) {
      const problem = applySnapshot(snapshot, this.set, this.counts);
      if (problem === null) this.recovery.snapshotLoaded = true;
      else {
        this.recovery.snapshotProblem = problem;
        this.log.error({ problem }, "ack snapshot is damaged; acks it held are forgotten and those messages come back");
      }
    }

    let logData: Buffer | null = null;
    try {
      logData = await this.fs.readFile(this.logPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    if (logData !== null && logData.length > 0) this.replay(logData);
    this.pruneCounts();

    let created = false;
    try {
      this.fd = await openAsync(this.fs, this.logPath, "r+");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
      this.fd = await openAsync(this.fs, this.logPath, "w+");
      created = true;
    }
    if (created) await this.fs.fsyncDir(this.dir);
    if ((logData !== null && logData.length > 0) || this.recovery.snapshotProblem !== null) {
      try {
        await this.compact();
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== "ENOSPC" && code !== "EDQUOT") throw err;
        // The disk is full: keep the old log (every ack it holds is in memory too), write new
        // blocks after its last valid one, and compact at the first sync step that has room.
        this.logBytes = (logData?.length ?? 0) - this.recovery.truncatedBytes;
        this.snapshotNeeded = true;
        this.log.warn({ err: code }, "the disk is full: the ack log is not compacted at open; acks are kept in memory until it has room");
      }
    }
    const damaged =
      this.recovery.snapshotProblem !== null || this.recovery.corruptBlocks.length > 0 || this.recovery.truncatedBytes > 0;
    this.log[damaged ? "warn" : "debug"](
      { ...this.recovery, floor: this.set.floor, ackedAboveFloor: this.set.ackedAboveFloor },
      "ack log recovered",
    );
    this.startTimers();
  }

  /** Applies every valid block; skips damaged ones (resyncing on the next valid block). */
  private replay(buf: Buffer): void {
    let pos = 0;
    while (pos < buf.length) {
      const r = checkBlock(buf, pos);
      if (typeof r === "number") {
        this.applyBlock(buf, pos, r);
        pos += r;
        continue;
      }
      let next = -1;
      for (let q = buf.indexOf(MAGIC_BYTES, pos + 1); q >= 0; q = buf.indexOf(MAGIC_BYTES, q + 1)) {
        if (typeof checkBlock(buf, q) === "number") {
          next = q;
          break;
        }
      }
      if (next < 0) {
        this.recovery.truncatedBytes = buf.length - pos;
        this.log.warn({ position: pos, bytes: buf.length - pos, reason: r }, "ack log ends in a torn or damaged tail");
        return;
      }
      this.recovery.corruptBlocks.push({ position: pos, bytes: next - pos, reason: r });
      this.log.warn({ position: pos, bytes: next - pos, reason: r }, "skipping a damaged ack log block; its acks are forgotten");
      pos = next;
    }
  }

  private applyBlock(buf: Buffer, pos: number, size: number): void {
    this.recovery.blocks++;
    for (let e = pos + BLOCK_HEADER_BYTES; e < pos + size; e += ENTRY_BYTES) {
      const kind = buf[e];
      const count = buf.readUInt32LE(e + 4);
      const offset = readU64(buf, e + 8);
      this.recovery.entries++;
      if (offset < 0) continue;
      if (kind === KIND_RANGE) this.set.addRange(offset, offset + count);
      else if (kind === KIND_FLOOR) this.set.raiseFloor(offset);
      else if (kind === KIND_DELIVERIES || kind === KIND_DEAD_LETTER) {
        if (!this.set.has(offset)) this.mergeCount(offset, count, kind === KIND_DEAD_LETTER);
      } else this.log.warn({ kind }, "unknown ack log entry kind ignored");
    }
  }
}

const MAGIC_BYTES = (() => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(BLOCK_MAGIC, 0);
  return b;
})();

/** Opens (creating if needed) and recovers the ack log of the partition in `dir`. */
export async function openAckLog(dir: string, opts: AckLogOptions): Promise<FileAckLog> {
  const log = new FileAckLog(dir, opts);
  try {
    await log.recover();
  } catch (err) {
    await log.close().catch(() => {});
    throw err;
  }
  return log;
}
