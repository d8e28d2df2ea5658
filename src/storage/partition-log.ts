// A partition's message log: segment files named by base offset, group-committed appends,
// page-cache reads, crash recovery, size/age rolls and time-based retention.
//
// Group commit. append() does everything that must be ordered synchronously: it assigns offsets,
// encodes the records into one staging buffer shared by all appends, and records their positions
// in the in-memory index. One flusher per log then, when no fdatasync is in flight, writes the whole
// staging buffer to the segment file(s) and issues ONE fdatasync on the libuv threadpool. Every
// append queued before that write shares one `durable` promise (one promise per commit, not per
// record or per call), resolved when the fdatasync returns; appends made meanwhile wait for the
// next commit. The flush starts from the scheduler's `soon` (setImmediate), after the poll phase,
// so all appends made by the I/O callbacks of one event-loop turn share it. The fdatasync is the
// only thing a produce waits for, so throughput is bounded by the disk's flush rate times the
// batch size, not by syscalls. Files are reached through the StorageFs passed in (./fs.ts).
//
// Bytes reach the file only in the flush step, immediately followed by fdatasync, in normal and in
// power-loss mode alike (the test-only mode needs nothing extra here): until then they live in
// process memory, so a SIGKILL loses what a power loss would, and neither loses an acknowledged
// record. (Records of a commit whose fdatasync was in flight may survive a kill; they were never
// acknowledged, so either outcome is allowed.)
//
// Limits. The staging buffer holds what waits for the next commit; it is bounded by the broker,
// which refuses produces (429) once pendingSyncBytes passes its limit. Reads are cut into runs of
// at most READ_BYTES_MAX; sealed segments' descriptors are kept in an LRU of openSegmentFdsMax.
//
// Inline fdatasync. Handing the fdatasync to the threadpool costs two thread wakeups (there and
// back) on top of the disk's flush, and on a virtual machine a wakeup across CPUs is tens of µs
// or more; while the loop has other requests to serve, the overlap is worth it. When the process
// serves one request at a time (src/platform/in-flight.ts: this commit and the one before it each
// held the only request in flight, no stream connection is open) and one file is to be synced,
// the flush calls fdatasync on this thread instead: nobody else waits on the loop meanwhile, and
// the answer leaves as soon as the disk returns (a client that sends one request at a time: one
// produce, or an SDK whose concurrent calls make one batch). A request that arrives during it
// waits for it. `storage.inline_fdatasync: false` (inlineFdatasync) turns it off; docs/operations.md has the figures.
//
// Visibility. syncedOffset moves only when an fdatasync completes, and read() never returns a
// record at or above it: consumers never see a record that a crash could take back (see
// docs/architecture.md, "fsync before 202").
//
// Failure. A failed write or fdatasync leaves the file in an unknown state (the kernel may have
// dropped the dirty pages), so the log stops: covered and queued appends reject, later appends
// reject, reads of synced records go on. reopen() (the broker calls it after a back-off, when the
// disk may have room again) cuts every file back to what was fsynced, so a record that was never
// durable is never served, and recovers the log from disk as a start does; while the cause
// remains it fails and the log stays stopped.
//
// Descriptors. A log holds the active segment's fd, the sealed segments' fds of the LRU, and the
// directory's fd (for the fsyncs of creations and removals). closeIdleFiles() lets them all go
// when nothing is staged, syncing or read; the next append or read opens what it needs again,
// so a node's idle partitions pin no descriptor (docs/operations.md, "File descriptors").
//
// Roll. A roll is decided synchronously (in append when the records would pass segmentBytesMax,
// or in maybeRoll/enforceRetention): the staging buffer remembers which byte ranges belong to which
// segment, so queued records are written in order to the segment they were indexed in, and records
// of one append never straddle two segments. The new file is created (and the directory fsynced)
// by the flusher or by the roll, whichever comes first.

import assert from "node:assert/strict";
import path from "node:path";
import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import { systemScheduler, type Scheduler } from "../platform/scheduler.js";
import { inFlight } from "../platform/in-flight.js";
import type {
  AppendInput,
  PartitionLog,
  RecoveryReport,
  StorageOptions,
  StoredRecord,
} from "./types.js";
import { StorageError } from "./errors.js";
import { setProducerSequence } from "./attrs.js";
import {
  checkFrame,
  decodeFrame,
  encodeRecord,
  frameErrorReason,
  frameOffset,
  HEADER_BYTES,
  HEADER_BYTES_ATTRS,
  ATTR_BYTES_MAX,
  KEY_BYTES_MAX,
  PAYLOAD_BYTES_MAX,
} from "./record.js";
import {
  encodeIndex,
  NO_RECORD,
  parseSegmentFileName,
  Segment,
} from "./segment.js";
import {
  closeAsync,
  fdatasyncAsync,
  fsyncAsync,
  ftruncateAsync,
  openAsync,
  readFullyAt,
  readFullyAtSync,
  writeFullySync,
} from "./files.js";
import { isAtomicTempName } from "../platform/files.js";
import { CURSOR_FILE_NAME } from "./cursor-file.js";
import { recoverSegment, setAsideIfMisnamed, type RecoveryContext } from "./segment-recovery.js";
import { realFs, type StorageFs } from "./fs.js";

/** Positions are u32 and NO_RECORD is reserved, so a segment stays well below 4 GiB. */
const SEGMENT_BYTES_LIMIT = 2 * 1024 * 1024 * 1024;
const STAGE_INITIAL_BYTES = 1024 * 1024;
/** A staging buffer grown past this by a burst is given back after the flush. */
const STAGE_KEEP_BYTES = 16 * 1024 * 1024;
/** Largest single fs.read of a run of records (one record may exceed it alone). */
const READ_BYTES_MAX = 8 * 1024 * 1024;
const OPEN_SEGMENT_FDS_DEFAULT = 16;

/** A segment that took a record this recently is read on the event loop (see readRuns). */
const HOT_READ_MS = 60_000;

export interface LogStats {
  /** Group commits completed: one fdatasync round (a roll makes a round sync two files). */
  syncs: number;
  /** fdatasync calls issued on segment files. */
  fdatasyncs: number;
  /** Of those, the ones made on the event loop's own thread (see "Inline fdatasync" above). */
  inlineFdatasyncs: number;
  appends: number;
  records: number;
  bytesSynced: number;
  /** Records read() refused because their checksum or framing failed (never served). */
  corruptReads: number;
  /** Duration of the last group commit (write + fdatasync). */
  lastSyncMs: number;
}

interface Commit {
  readonly promise: Promise<void>;
  resolve: () => void;
  reject: (err: Error) => void;
  /** Every offset below this is covered. */
  endOffset: number;
  bytes: number;
  records: number;
  appends: number;
}

function newCommit(): Commit {
  let resolve!: () => void;
  let reject!: (err: Error) => void;
  const promise = new Promise<void>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  // The caller may drop `durable` (e.g. it already answered 500); a failed commit is logged here,
  // so it must not also become an unhandled rejection that kills the process.
  promise.catch(() => {});
  return { promise, resolve, reject, endOffset: 0, bytes: 0, records: 0, appends: 0 };
}

function rejectedHandled(err: Error): Promise<void> {
  const p = Promise.reject(err);
  p.catch(() => {});
  return p;
}

export class FilePartitionLog implements PartitionLog {
  readonly recovery: RecoveryReport = {
    segments: 0,
    records: 0,
    truncatedBytes: 0,
    corruptRecords: [],
    rebuiltIndexes: [],
  };
  readonly stats: LogStats = {
    syncs: 0,
    fdatasyncs: 0,
    inlineFdatasyncs: 0,
    appends: 0,
    records: 0,
    bytesSynced: 0,
    corruptReads: 0,
    lastSyncMs: 0,
  };

  private readonly log: Logger;
  private readonly clock: Clock;
  private readonly scheduler: Scheduler;
  private readonly inlineFdatasync: boolean;
  private readonly fs: StorageFs;
  private readonly segmentBytesMax: number;
  private readonly segmentAgeMaxMs: number;
  private readonly openSegmentFdsMax: number;

  private segments: Segment[] = [];
  private active!: Segment;
  private dirFd = -1;

  private endOffsetValue = 0;
  private writtenOffset = 0;
  private syncedOffsetValue = 0;
  private pendingSyncBytesValue = 0;

  /** Encoded records not yet written; `groups` says which bytes go to which segment. */
  private stage: Buffer = Buffer.allocUnsafe(STAGE_INITIAL_BYTES);
  private stageBytes = 0;
  private groups: { seg: Segment; start: number; end: number }[] = [];
  /** The commit collecting appends now, and the one whose fdatasync is in flight. */
  private collecting: Commit | null = null;
  private syncing: Commit | null = null;
  private flushScheduled = false;
  private dirSyncNeeded = false;
  /** Sealed segments whose last records are not synced yet (they keep their fd pinned). */
  private sealing: Segment[] = [];
  private failure: StorageError | null = null;
  private closing = false;
  private closePromise: Promise<void> | null = null;
  private idleWaiters: (() => void)[] = [];
  private readsInFlight = 0;
  /** Maintenance (roll, retention) runs one at a time. */
  private maintenance: Promise<unknown> = Promise.resolve();
  /** Sealed segments with an open fd and no pin, least recently used first. */
  private readonly fdCache = new Map<Segment, true>();
  private readonly backgroundWrites = new Set<Promise<void>>();
  /** The active segment's file exists but its fd was let go by closeIdleFiles. */
  private activeClosed = false;
  /** A reopen after a failure in progress: reads wait for it (it swaps the segments). */
  private reopening: Promise<void> | null = null;
  /** Maintenance runs (roll, retention) started and not finished: they use the fds. */
  private maintaining = 0;
  /** monoMs of the last append or read (closeIdleFiles). */
  private lastUseMs: number;

  constructor(
    readonly dir: string,
    private readonly opts: StorageOptions,
  ) {
    this.log = opts.logger.child({ module: "storage", partitionDir: dir });
    this.clock = opts.clock;
    this.scheduler = opts.scheduler ?? systemScheduler;
    this.inlineFdatasync = opts.inlineFdatasync ?? true;
    this.fs = opts.fs ?? realFs;
    if (!(opts.segmentBytesMax > 0 && opts.segmentBytesMax <= SEGMENT_BYTES_LIMIT)) {
      throw new RangeError(`segmentBytesMax must be in (0, ${SEGMENT_BYTES_LIMIT}], got ${opts.segmentBytesMax}`);
    }
    if (!(opts.segmentAgeMaxMs > 0)) throw new RangeError(`segmentAgeMaxMs must be > 0, got ${opts.segmentAgeMaxMs}`);
    this.segmentBytesMax = opts.segmentBytesMax;
    this.segmentAgeMaxMs = opts.segmentAgeMaxMs;
    this.openSegmentFdsMax = Math.max(1, opts.openSegmentFdsMax ?? OPEN_SEGMENT_FDS_DEFAULT);
    this.lastUseMs = this.clock.monoMs();
  }

  get endOffset(): number {
    return this.endOffsetValue;
  }
  get earliestOffset(): number {
    return this.segments[0]!.baseOffset;
  }
  get syncedOffset(): number {
    return this.syncedOffsetValue;
  }
  get pendingSyncBytes(): number {
    return this.pendingSyncBytesValue;
  }
  /** The error that stopped the log, if any. */
  get failed(): StorageError | null {
    return this.failure;
  }
  /** Memory held by the in-memory offset indexes (4 bytes per record plus growth slack). */
  get indexMemoryBytes(): number {
    let bytes = 0;
    for (const seg of this.segments) bytes += seg.positions.byteLength;
    return bytes;
  }
  /** Segment base offsets, oldest first (for tests and diagnostics). */
  get segmentBaseOffsets(): number[] {
    return this.segments.map((s) => s.baseOffset);
  }

  // ---------------------------------------------------------------------------------------------
  // Append and group commit

  append(records: AppendInput[], producedAtMs: number): { baseOffset: number; durable: Promise<void> } {
    const baseOffset = this.endOffsetValue;
    if (this.failure !== null) return { baseOffset, durable: rejectedHandled(this.failure) };
    if (this.closing) {
      return { baseOffset, durable: rejectedHandled(new StorageError("log_closed", `partition log ${this.dir} is closed`)) };
    }
    if (!(Number.isSafeInteger(producedAtMs) && producedAtMs >= 0)) assert.fail(`bad producedAtMs ${producedAtMs}`); // the message is built only on failure
    const n = records.length;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const r = records[i]!;
      if (r.payload.length > PAYLOAD_BYTES_MAX) {
        throw new RangeError(`payload of ${r.payload.length} bytes is over the ${PAYLOAD_BYTES_MAX}-byte limit`);
      }
      const keyBytes = r.key === null ? 0 : r.key.length;
      if (keyBytes > KEY_BYTES_MAX) throw new RangeError(`key of ${keyBytes} bytes is over the ${KEY_BYTES_MAX}-byte limit`);
      if (r.attrs !== undefined && (r.attrs.length === 0 || r.attrs.length > ATTR_BYTES_MAX)) throw new RangeError(`attributes of ${r.attrs.length} bytes: 1 to ${ATTR_BYTES_MAX} bytes`);
      if (r.producerSequence !== undefined && r.attrs === undefined) throw new RangeError("a producer sequence without its attribute block");
      total += (r.attrs === undefined ? HEADER_BYTES : HEADER_BYTES_ATTRS + r.attrs.length) + keyBytes + r.payload.length;
    }
    if (n === 0) return { baseOffset, durable: Promise.resolve() };
    if (this.activeClosed) {
      // Nothing is assigned yet: a refusal here is definite and leaves the log as it was.
      try {
        this.reopenActiveFd();
      } catch (err) {
        const cause = err as Error;
        return {
          baseOffset,
          durable: rejectedHandled(new StorageError("storage_failed", `cannot open ${this.active.logPath}: ${cause.message}`, { cause })),
        };
      }
    }

    let seg = this.active;
    if (seg.appendBytes > 0 && seg.appendBytes + total > this.segmentBytesMax) seg = this.rollActive("size");
    assert.ok(seg.appendBytes + total < NO_RECORD, "segment position would overflow u32");

    if (this.stageBytes + total > this.stage.length) this.growStage(this.stageBytes + total);
    const stage = this.stage;
    const start = this.stageBytes;
    const segPosAtStart = seg.appendBytes - start;
    const wasEmpty = seg.count === 0;
    let p = start;
    for (let i = 0; i < n; i++) {
      const r = records[i]!;
      seg.pushPosition(segPosAtStart + p);
      if (r.producerSequence !== undefined) setProducerSequence(r.attrs!, r.producerSequence);
      p = encodeRecord(stage, p, baseOffset + i, producedAtMs, r.key, r.payload, r.control === true, r.attrs ?? null);
    }
    assert.equal(p - start, total);
    const last = this.groups.length > 0 ? this.groups[this.groups.length - 1]! : null;
    if (last !== null && last.seg === seg) last.end = p;
    else this.groups.push({ seg, start, end: p });
    this.stageBytes = p;
    seg.appendBytes += total;
    if (wasEmpty) seg.firstProducedAtMs = producedAtMs;
    if (producedAtMs > seg.maxProducedAtMs) seg.maxProducedAtMs = producedAtMs;

    this.endOffsetValue += n;
    this.pendingSyncBytesValue += total;
    this.lastUseMs = this.clock.monoMs();
    const commit = this.collecting ?? (this.collecting = newCommit());
    commit.endOffset = this.endOffsetValue;
    commit.bytes += total;
    commit.records += n;
    commit.appends++;
    this.stats.appends++;
    this.stats.records += n;
    this.scheduleFlush();
    return { baseOffset, durable: commit.promise };
  }

  private growStage(neededBytes: number): void {
    const grown = Buffer.allocUnsafe(Math.max(neededBytes, this.stage.length * 2));
    this.stage.copy(grown, 0, 0, this.stageBytes);
    this.stage = grown;
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || this.syncing !== null || this.failure !== null) return;
    this.flushScheduled = true;
    this.scheduler.soon(this.flush);
  }

  /** Writes everything staged, then one fdatasync round covering it. */
  private readonly flush = (): void => {
    this.flushScheduled = false;
    if (this.syncing !== null || this.failure !== null) return;
    const commit = this.collecting;
    if (commit === null) return;
    this.collecting = null;
    const groups = this.groups;
    this.groups = [];
    const t0 = this.clock.monoMs();
    const touched: Segment[] = [];
    try {
      for (const g of groups) {
        const seg = g.seg;
        if (seg.fd < 0) this.createSegmentFile(seg);
        writeFullySync(this.fs, seg.fd, this.stage, g.start, g.end, seg.writtenBytes);
        seg.writtenBytes += g.end - g.start;
        if (!touched.includes(seg)) touched.push(seg);
      }
    } catch (err) {
      this.fail(err, "write", commit);
      return;
    }
    // Give back a staging buffer that a burst blew up, but not one the steady load needs.
    if (this.stage.length > STAGE_KEEP_BYTES && this.stageBytes < this.stage.length / 4) {
      this.stage = Buffer.allocUnsafe(STAGE_INITIAL_BYTES);
    }
    this.stageBytes = 0;
    assert.ok(commit.endOffset >= this.writtenOffset);
    this.writtenOffset = commit.endOffset;
    this.syncing = commit;

    const dirSync = this.dirSyncNeeded;
    if (dirSync) {
      try {
        this.openDirFd();
      } catch (err) {
        this.fail(err, "directory open", commit);
        return;
      }
    }
    this.dirSyncNeeded = false;
    if (inFlight.quietCommit(commit.appends) && !dirSync && touched.length === 1 && this.inlineFdatasync) {
      // Nobody else can be waiting on the loop: sync on this thread (see above).
      this.stats.fdatasyncs++;
      this.stats.inlineFdatasyncs++;
      let err: Error | null = null;
      try {
        this.fs.fdatasyncSync(touched[0]!.fd);
      } catch (e) {
        err = e instanceof Error ? e : new Error(String(e));
      }
      this.syncDone(commit, err, t0);
      return;
    }
    let outstanding = touched.length + (dirSync ? 1 : 0);
    let firstError: Error | null = null;
    const done = (err: Error | null): void => {
      if (err !== null && firstError === null) firstError = err;
      if (--outstanding === 0) this.syncDone(commit, firstError, t0);
    };
    for (const seg of touched) {
      this.stats.fdatasyncs++;
      this.fs.fdatasync(seg.fd, done);
    }
    // A new segment's records are durable only once its directory entry is.
    if (dirSync) this.fs.fsync(this.dirFd, done);
  };

  private syncDone(commit: Commit, err: Error | null, t0: number): void {
    assert.equal(this.syncing, commit);
    this.syncing = null;
    if (err !== null) {
      this.fail(err, "fdatasync", commit);
      return;
    }
    assert.ok(commit.endOffset >= this.syncedOffsetValue, "syncedOffset must only grow");
    assert.ok(commit.endOffset <= this.writtenOffset, "syncedOffset must not pass writtenOffset");
    this.syncedOffsetValue = commit.endOffset;
    this.pendingSyncBytesValue -= commit.bytes;
    assert.ok(this.pendingSyncBytesValue >= 0);
    const durationMs = this.clock.monoMs() - t0;
    this.stats.syncs++;
    this.stats.bytesSynced += commit.bytes;
    this.stats.lastSyncMs = durationMs;
    this.finishSealed();
    commit.resolve();
    if (this.opts.onSync !== undefined) {
      try {
        this.opts.onSync({ durationMs, records: commit.records, bytes: commit.bytes, appends: commit.appends });
      } catch (cbErr) {
        this.log.warn({ err: cbErr }, "onSync callback threw");
      }
    }
    if (this.collecting !== null) this.scheduleFlush();
    else this.wakeIdle();
  }

  private fail(err: unknown, what: string, commit: Commit | null): void {
    const cause = err instanceof Error ? err : new Error(String(err));
    const failure = new StorageError(
      "storage_failed",
      `${what} failed on partition log ${this.dir}: ${cause.message}; the log refuses appends until it is reopened`,
      { cause },
    );
    this.failure = failure;
    this.log.error({ err: cause, what }, "partition log failed; appends are refused from now on");
    commit?.reject(failure);
    this.collecting?.reject(failure);
    this.collecting = null;
    this.groups = [];
    this.stageBytes = 0;
    this.wakeIdle();
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }

  /** Resolves once nothing is staged or syncing (or the log failed) and no read is in flight. */
  private async waitIdle(): Promise<void> {
    const busy = (): boolean =>
      ((this.collecting !== null || this.syncing !== null) && this.failure === null) || this.readsInFlight > 0;
    while (busy()) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  // ---------------------------------------------------------------------------------------------
  // Segments: roll, files, descriptors

  private createSegmentFile(seg: Segment): void {
    assert.ok(seg.fd < 0);
    // wx: a file with this base offset can only be left from something we do not understand.
    seg.fd = this.fs.openSync(seg.logPath, "wx+", 0o644);
    seg.writtenBytes = 0;
    this.dirSyncNeeded = true;
  }

  /** Seals the active segment and starts an empty one at endOffset (its file comes later). */
  private rollActive(reason: string): Segment {
    const old = this.active;
    assert.ok(old.count > 0, "never roll an empty segment");
    assert.equal(old.endOffset, this.endOffsetValue);
    old.sealed = true;
    old.trim();
    // A sealed segment's fd is opened on demand (for reads); only the active one is flagged.
    this.activeClosed = false;
    this.sealing.push(old);
    const seg = new Segment(this.dir, this.endOffsetValue);
    this.segments.push(seg);
    this.active = seg;
    this.log.debug({ sealed: old.name, next: seg.name, reason }, "segment rolled");
    this.finishSealed();
    return seg;
  }

  /** Sealed segments whose records are all synced: persist their index, release their fd pin. */
  private finishSealed(): void {
    if (this.sealing.length === 0) return;
    const still: Segment[] = [];
    for (const seg of this.sealing) {
      if (seg.endOffset > this.syncedOffsetValue) {
        still.push(seg);
        continue;
      }
      seg.pinned = false;
      if (seg.fd >= 0) {
        this.fdCache.set(seg, true);
        this.evictFds();
      }
      this.persistIndex(seg);
    }
    this.sealing = still;
  }

  private persistIndex(seg: Segment): void {
    const data = encodeIndex(seg);
    const write = this.fs.writeFileAtomic(seg.indexPath, data).catch((err: unknown) => {
      // The index is a cache of the segment: losing it costs a scan at the next open, nothing else.
      this.log.warn({ err, segment: seg.name }, "could not write segment index; it will be rebuilt at next open");
    });
    seg.indexWrite = write;
    this.backgroundWrites.add(write);
    void write.finally(() => {
      this.backgroundWrites.delete(write);
      if (seg.indexWrite === write) seg.indexWrite = null;
    });
  }

  private async ensureActiveFile(): Promise<void> {
    const seg = this.active;
    if (seg.fd >= 0) return;
    try {
      this.createSegmentFile(seg);
      // The flusher also fsyncs the directory before its next commit covers this segment
      // (dirSyncNeeded stays set), so records are never durable before their file's entry.
      await fsyncAsync(this.fs, this.openDirFd());
    } catch (err) {
      this.fail(err, "segment creation", null);
      throw this.failure;
    }
  }

  private acquireFd(seg: Segment): number {
    if (seg === this.active && this.activeClosed) this.reopenActiveFd();
    else if (seg.fd < 0) seg.fd = this.fs.openSync(seg.logPath, "r");
    if (!seg.pinned) {
      this.fdCache.delete(seg);
      this.fdCache.set(seg, true);
    }
    seg.refs++;
    return seg.fd;
  }

  private releaseFd(seg: Segment): void {
    seg.refs--;
    assert.ok(seg.refs >= 0);
    if (seg.refs > 0) return;
    if (seg.removed) this.closeSegmentFd(seg);
    else this.evictFds();
  }

  private evictFds(): void {
    if (this.fdCache.size <= this.openSegmentFdsMax) return;
    for (const seg of this.fdCache.keys()) {
      if (this.fdCache.size <= this.openSegmentFdsMax) break;
      if (seg.refs > 0) continue;
      this.fdCache.delete(seg);
      this.closeSegmentFd(seg);
    }
  }

  private closeSegmentFd(seg: Segment): void {
    if (seg.fd < 0) return;
    const fd = seg.fd;
    seg.fd = -1;
    this.fs.close(fd, (err) => {
      if (err) this.log.warn({ err, segment: seg.name }, "closing a segment file failed");
    });
  }

  /** The directory's fd, opened when a creation or removal must be made durable. */
  private openDirFd(): number {
    if (this.dirFd < 0) this.dirFd = this.fs.openSync(this.dir, "r");
    return this.dirFd;
  }

  private fsyncDirFd(): Promise<void> {
    let fd: number;
    try {
      fd = this.openDirFd();
    } catch (err) {
      return Promise.reject(err);
    }
    return fsyncAsync(this.fs, fd);
  }

  private reopenActiveFd(): void {
    assert.ok(this.activeClosed && this.active.fd < 0);
    this.active.fd = this.fs.openSync(this.active.logPath, "r+");
    this.activeClosed = false;
  }

  /**
   * Lets go of every descriptor this log holds when it has been idle (no append or read) for
   * idleMs and nothing is staged, syncing or being read: the next append or read opens what it
   * needs again. Returns how many descriptors it closed.
   */
  closeIdleFiles(idleMs: number): number {
    if (this.closing || this.failure !== null || this.reopening !== null || this.maintaining > 0) return 0;
    if (this.clock.monoMs() - this.lastUseMs < idleMs) return 0;
    if (this.collecting !== null || this.syncing !== null || this.flushScheduled || this.readsInFlight > 0 || this.sealing.length > 0 || this.dirSyncNeeded) return 0;
    let closed = 0;
    for (const seg of this.segments) {
      if (seg.fd < 0 || seg.refs > 0) continue;
      if (seg === this.active) this.activeClosed = true;
      this.fdCache.delete(seg);
      this.closeSegmentFd(seg);
      closed++;
    }
    if (this.dirFd >= 0) {
      const fd = this.dirFd;
      this.dirFd = -1;
      this.fs.close(fd, (err) => {
        if (err) this.log.warn({ err }, "closing the partition directory failed");
      });
      closed++;
    }
    return closed;
  }

  /** Descriptors held now (for tests and the descriptor budget). */
  get openFds(): number {
    let n = this.dirFd >= 0 ? 1 : 0;
    for (const seg of this.segments) if (seg.fd >= 0) n++;
    return n;
  }

  // ---------------------------------------------------------------------------------------------
  // Reopen after a failure

  /**
   * After a failure: cuts every segment file back to what was fsynced (what a failed write or
   * fsync left past it was never acknowledged, and its pages may be gone while the kernel calls
   * them clean: fsyncgate), then recovers the log from disk as a start does, and takes appends
   * again. Rejects, leaving the log stopped and its synced records readable, while the cause
   * remains (the disk still full, no descriptor free). Nothing to do on a log that did not fail.
   */
  reopen(): Promise<void> {
    if (this.failure === null || this.closing) return Promise.resolve();
    this.reopening ??= this.reopenNow().finally(() => {
      this.reopening = null;
    });
    return this.reopening;
  }

  private async reopenNow(): Promise<void> {
    // A commit whose fdatasync is in flight still counts if it succeeds; reads use the old files.
    while (this.syncing !== null || this.readsInFlight > 0) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    await this.maintenance;
    await Promise.all([...this.backgroundWrites]);
    const synced = this.syncedOffsetValue;
    await this.cutToSynced(synced);
    const fresh = new FilePartitionLog(this.dir, this.opts);
    try {
      await fresh.recover();
      if (fresh.endOffset !== synced) {
        throw new StorageError("storage_failed", `partition log ${this.dir} recovered to offset ${fresh.endOffset}, but ${synced} were synced`);
      }
    } catch (err) {
      await fresh.close().catch(() => {});
      this.log.warn({ err: (err as Error).message }, "the failed partition log could not be reopened yet");
      throw err;
    }
    this.adopt(fresh);
    this.log.warn({ endOffset: synced, failure: this.failure?.message }, "the failed partition log was reopened: appends are taken again");
    this.failure = null;
  }

  /** Cuts each segment file to the bytes of records below `synced`; removes segments past it. */
  private async cutToSynced(synced: number): Promise<void> {
    let dirChanged = false;
    for (const seg of this.segments) {
      if (seg.endOffset <= synced) continue;
      if (seg.baseOffset > synced) {
        await this.fs.unlink(seg.logPath).catch((err: NodeJS.ErrnoException) => {
          if (err.code !== "ENOENT") throw err;
        });
        await this.fs.unlink(seg.indexPath).catch(() => {});
        dirChanged = true;
        continue;
      }
      const keepBytes = seg.baseOffset === synced ? 0 : seg.positions[synced - seg.baseOffset]!;
      assert.ok(keepBytes !== NO_RECORD, "a record past syncedOffset is never a damaged one");
      let fd = seg.fd;
      let own = false;
      if (fd < 0) {
        try {
          fd = await openAsync(this.fs, seg.logPath, "r+");
          own = true;
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
          // Never created (a roll's file failed): the segment named by `synced` is made now, so
          // the log on disk still says where offsets go on.
          if (seg.baseOffset !== synced) continue;
          fd = await openAsync(this.fs, seg.logPath, "w+", 0o644);
          own = true;
          dirChanged = true;
        }
      }
      try {
        await ftruncateAsync(this.fs, fd, keepBytes);
        await fdatasyncAsync(this.fs, fd);
      } finally {
        if (own) await closeAsync(this.fs, fd).catch(() => {});
      }
      this.log.warn({ segment: seg.name, bytes: seg.writtenBytes - keepBytes, endOffset: synced }, "cut the bytes a failed commit left past the synced records");
    }
    if (dirChanged) await fsyncAsync(this.fs, this.openDirFd());
  }

  /** Takes the state of a log freshly recovered from the same directory; ours is let go. */
  private adopt(fresh: FilePartitionLog): void {
    for (const seg of this.segments) {
      assert.equal(seg.refs, 0);
      this.closeSegmentFd(seg);
    }
    if (this.dirFd >= 0) {
      this.fs.close(this.dirFd, () => {});
      this.dirFd = -1;
    }
    this.fdCache.clear();
    this.segments = fresh.segments;
    this.active = fresh.active;
    this.dirFd = fresh.dirFd;
    for (const seg of fresh.fdCache.keys()) this.fdCache.set(seg, true);
    this.activeClosed = false;
    this.endOffsetValue = fresh.endOffsetValue;
    this.writtenOffset = fresh.writtenOffset;
    this.syncedOffsetValue = fresh.syncedOffsetValue;
    // Failed commits never gave their bytes back; nothing is staged now.
    this.pendingSyncBytesValue = 0;
    this.stageBytes = 0;
    this.groups = [];
    this.sealing = [];
    this.collecting = null;
    this.dirSyncNeeded = false;
    Object.assign(this.recovery, fresh.recovery);
    this.lastUseMs = this.clock.monoMs();
  }

  /** Chains a maintenance step, counted in `maintaining` from its call to its end. */
  private maintain<T>(step: () => Promise<T>): Promise<T> {
    this.maintaining++;
    const run = this.maintenance.then(step).finally(() => this.maintaining--);
    this.maintenance = run.catch(() => {});
    return run;
  }

  async maybeRoll(): Promise<void> {
    return this.maintain(async () => {
      if (this.failure !== null || this.closing) return;
      const a = this.active;
      if (a.count === 0) return;
      if (a.appendBytes >= this.segmentBytesMax) this.rollActive("size");
      else if (this.clock.nowMs() - a.firstProducedAtMs >= this.segmentAgeMaxMs) this.rollActive("age");
      else return;
      await this.ensureActiveFile();
    });
  }

  async enforceRetention(retentionMs: number): Promise<number> {
    return this.maintain(() => this.enforceRetentionNow(retentionMs));
  }

  private async enforceRetentionNow(retentionMs: number): Promise<number> {
    if (this.failure !== null || this.closing) return this.earliestOffset;
    const cutoffMs = this.clock.nowMs() - retentionMs;
    const a = this.active;
    // An old active segment is rolled so that it can go; the partition keeps an empty active
    // segment named by endOffset, so offsets never go back.
    if (a.count > 0 && a.maxProducedAtMs < cutoffMs) {
      this.rollActive("retention");
      await this.ensureActiveFile();
    }
    const removed: Segment[] = [];
    while (this.segments.length > 1) {
      const s = this.segments[0]!;
      assert.notEqual(s, this.active);
      // Records still waiting for their fdatasync are removed by a later pass.
      if (s.endOffset > this.syncedOffsetValue) break;
      // maxProducedAtMs is -Infinity for a segment with no readable record.
      if (s.maxProducedAtMs >= cutoffMs) break;
      this.segments.shift();
      removed.push(s);
    }
    if (removed.length === 0) return this.earliestOffset;
    for (const s of removed) await this.removeSegment(s);
    await this.fsyncDirFd().catch((err: unknown) => this.log.warn({ err }, "directory fsync after retention failed"));
    this.log.info(
      { removed: removed.map((s) => s.name), earliestOffset: this.earliestOffset, retentionMs },
      "retention removed segments",
    );
    return this.earliestOffset;
  }

  private async removeSegment(seg: Segment): Promise<void> {
    seg.removed = true;
    this.fdCache.delete(seg);
    if (seg.refs === 0) this.closeSegmentFd(seg);
    if (seg.indexWrite !== null) await seg.indexWrite;
    for (const p of [seg.logPath, seg.indexPath]) {
      await this.fs.unlink(p).catch((err: NodeJS.ErrnoException) => {
        if (err.code !== "ENOENT") this.log.warn({ err, file: p }, "could not remove expired segment file");
      });
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Read

  async read(fromOffset: number, maxRecords: number, maxBytes: number): Promise<StoredRecord[]> {
    if (this.closing) throw new StorageError("log_closed", `partition log ${this.dir} is closed`);
    if (!Number.isSafeInteger(fromOffset)) assert.fail(`bad fromOffset ${fromOffset}`); // the message is built only on failure
    // A reopen swaps the segments: a read starts before it or after it. Synced records are read
    // the same either way (the reopen keeps every one of them).
    if (this.reopening !== null) await this.reopening.catch(() => {});
    this.readsInFlight++;
    this.lastUseMs = this.clock.monoMs();
    try {
      return await this.readRuns(fromOffset, maxRecords, maxBytes);
    } finally {
      if (--this.readsInFlight === 0) this.wakeIdle();
    }
  }

  private async readRuns(fromOffset: number, maxRecords: number, maxBytes: number): Promise<StoredRecord[]> {
    const out: StoredRecord[] = [];
    let from = Math.max(fromOffset, this.earliestOffset);
    let payloadBytes = 0;
    while (out.length < maxRecords && from < this.syncedOffsetValue) {
      // close() waits for reads in flight, but a read must not start a new run once it began.
      if (this.closing && out.length > 0) break;
      // Retention may have removed segments while this read awaited.
      from = Math.max(from, this.earliestOffset);
      const k = this.segmentIndexFor(from);
      if (k < 0) break;
      const seg = this.segments[k]!;
      if (from >= seg.endOffset) {
        // A gap between segments (records lost to damage before a later segment began).
        const next = this.segments[k + 1];
        if (next === undefined) break;
        from = next.baseOffset;
        continue;
      }
      const limit = Math.min(seg.endOffset, this.syncedOffsetValue) - seg.baseOffset;
      const i = from - seg.baseOffset;
      if (seg.positions[i] === NO_RECORD) {
        this.reportCorruptRead(seg, from, -1, "record was unreadable at recovery");
        from++;
        continue;
      }
      // Plan one contiguous run [i, j) and read it with one fs.read.
      const startPos = seg.positions[i]!;
      let j = i;
      let runEnd = startPos;
      let runDataBytes = 0;
      while (j < limit && out.length + (j - i) < maxRecords) {
        const p = seg.positions[j]!;
        if (p === NO_RECORD) break;
        const end = seg.recordEnd(j);
        // Key plus payload: an upper bound of the payload, known before reading.
        const dataBytes = end - p - HEADER_BYTES;
        const first = out.length === 0 && j === i;
        if (!first && (payloadBytes + runDataBytes + dataBytes > maxBytes || end - startPos > READ_BYTES_MAX)) break;
        runDataBytes += dataBytes;
        runEnd = end;
        j++;
      }
      if (j === i) break;
      const buf = Buffer.allocUnsafe(runEnd - startPos);
      const fd = this.acquireFd(seg);
      let got: number;
      try {
        // Recently written data is in the page cache (this process wrote it, synchronously), so
        // a pread on this thread costs a few microseconds, against a thread-pool round trip and
        // two context switches, which dominated single-message consumes. "Recent": the two
        // newest segments, or a segment that took a record within HOT_READ_MS. Older data may be
        // on disk only: it is read on the thread pool, so a slow disk never stalls the loop.
        const hot = k >= this.segments.length - 2 || this.clock.nowMs() - seg.maxProducedAtMs < HOT_READ_MS;
        got = hot ? readFullyAtSync(this.fs, fd, buf, 0, buf.length, startPos) : await readFullyAt(this.fs, fd, buf, 0, buf.length, startPos);
      } finally {
        this.releaseFd(seg);
      }
      for (let r = i; r < j; r++) {
        const at = seg.positions[r]! - startPos;
        const slotEnd = Math.min(seg.recordEnd(r) - startPos, got);
        const size = checkFrame(buf, at, slotEnd);
        const offset = seg.baseOffset + r;
        if (size <= 0) {
          this.reportCorruptRead(seg, offset, at + startPos, frameErrorReason(size));
          continue;
        }
        if (frameOffset(buf, at) !== offset) {
          this.reportCorruptRead(seg, offset, at + startPos, `record carries offset ${frameOffset(buf, at)}`);
          continue;
        }
        const rec = decodeFrame(buf, at, size);
        out.push(rec);
        payloadBytes += rec.payload.length;
      }
      from = seg.baseOffset + j;
    }
    return out;
  }

  /** Index of the last segment whose baseOffset <= offset, or -1. */
  private segmentIndexFor(offset: number): number {
    const segs = this.segments;
    let lo = 0;
    let hi = segs.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (segs[mid]!.baseOffset <= offset) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  }

  private reportCorruptRead(seg: Segment, offset: number, position: number, reason: string): void {
    this.stats.corruptReads++;
    this.log.warn({ segment: seg.name, offset, position, reason }, "skipping a damaged record; it is never served");
  }

  // ---------------------------------------------------------------------------------------------
  // Close

  close(): Promise<void> {
    this.closePromise ??= this.closeNow();
    return this.closePromise;
  }

  private async closeNow(): Promise<void> {
    this.closing = true;
    // A flush is already scheduled for anything collecting; syncDone schedules the next one.
    await this.waitIdle();
    await this.maintenance;
    await Promise.all([...this.backgroundWrites]);
    if (this.reopening !== null) await this.reopening.catch(() => {});
    const active = this.segments.length > 0 ? this.active : null;
    if (this.failure === null && active !== null && active.count > 0 && (active.fd >= 0 || this.activeClosed)) {
      // Saves the next open a scan of the active segment.
      await this.fs.writeFileAtomic(active.indexPath, encodeIndex(active)).catch((err: unknown) =>
        this.log.warn({ err }, "could not write the active segment's index"),
      );
    }
    for (const seg of this.segments) {
      if (seg.fd >= 0) {
        const fd = seg.fd;
        seg.fd = -1;
        await closeAsync(this.fs, fd).catch(() => {});
      }
    }
    this.fdCache.clear();
    if (this.dirFd >= 0) {
      await closeAsync(this.fs, this.dirFd).catch(() => {});
      this.dirFd = -1;
    }
    this.log.debug({ endOffset: this.endOffsetValue }, "partition log closed");
    if (this.failure !== null) throw this.failure;
  }

  // ---------------------------------------------------------------------------------------------
  // Recovery

  /** What the per-segment steps of recovery (./segment-recovery.ts) work with. */
  private recoveryContext(): RecoveryContext {
    return { dir: this.dir, fs: this.fs, log: this.log, recovery: this.recovery };
  }

  async recover(): Promise<void> {
    if (this.opts.powerLoss) {
      this.log.warn("TEST-ONLY power-loss mode: unsynced bytes are kept in process memory");
    }
    await this.fs.mkdirp(this.dir);
    const entries = await this.fs.readdir(this.dir);
    const logBases: number[] = [];
    const indexBases = new Set<number>();
    for (const e of entries) {
      const parsed = parseSegmentFileName(e.name);
      if (parsed === null || !e.isFile()) {
        if (isAtomicTempName(e.name) && /^\d{20}\.index\./.test(e.name)) {
          // An index write that died half-way; the index is rewritten when needed.
          await this.fs.unlink(path.join(this.dir, e.name)).catch(() => {});
        } else if (!e.name.startsWith("acks.") && !e.name.startsWith(CURSOR_FILE_NAME)) {
          // The ack log's and the copy cursors' files share the directory; anything else is news.
          this.log.warn({ file: e.name }, "ignoring a file that is not a segment in the partition directory");
        }
        continue;
      }
      if (parsed.kind === "log") logBases.push(parsed.baseOffset);
      else indexBases.add(parsed.baseOffset);
    }
    logBases.sort((a, b) => a - b);
    // A segment whose records disagree with its name is set aside before any segment is
    // recovered: trusted, it would cut the records of the segment before it (see misnamedSegment).
    let asideEnd = 0;
    for (let k = logBases.length - 1; k >= 0; k--) {
      const end = await setAsideIfMisnamed(this.recoveryContext(), logBases[k]!);
      if (end === null) continue;
      asideEnd = Math.max(asideEnd, end);
      logBases.splice(k, 1);
    }
    const logSet = new Set(logBases);
    for (const base of indexBases) {
      if (logSet.has(base)) continue;
      const seg = new Segment(this.dir, base);
      this.log.warn({ file: path.basename(seg.indexPath) }, "removing an index file that has no segment");
      await this.fs.unlink(seg.indexPath).catch(() => {});
    }

    for (let k = 0; k < logBases.length; k++) {
      const isLast = k === logBases.length - 1;
      const nextBase = isLast ? Number.MAX_SAFE_INTEGER : logBases[k + 1]!;
      const seg = await recoverSegment(this.recoveryContext(), logBases[k]!, isLast, nextBase, indexBases.has(logBases[k]!));
      this.segments.push(seg);
    }
    const lastEnd = this.segments.length === 0 ? 0 : this.segments[this.segments.length - 1]!.endOffset;
    if (this.segments.length === 0 || asideEnd > lastEnd) {
      // Offsets of records set aside were answered 202 and may be acked: they are never handed
      // out again, so a new active segment starts past them.
      const prev = this.segments[this.segments.length - 1];
      if (prev !== undefined && prev.count > 0) await this.fs.writeFileAtomic(prev.indexPath, encodeIndex(prev));
      const seg = new Segment(this.dir, Math.max(asideEnd, lastEnd));
      this.createSegmentFile(seg);
      this.dirSyncNeeded = false;
      this.segments.push(seg);
      await this.fsyncDirFd();
    }
    this.active = this.segments[this.segments.length - 1]!;
    for (const seg of this.segments) {
      if (seg === this.active) continue;
      seg.sealed = true;
      seg.pinned = false;
      seg.trim();
      if (seg.fd >= 0) this.fdCache.set(seg, true);
    }
    this.evictFds();
    // Recovered bytes may still be only in the page cache (the last run was killed): make them
    // durable before they become visible.
    await fdatasyncAsync(this.fs, this.active.fd);

    this.endOffsetValue = this.active.endOffset;
    this.writtenOffset = this.endOffsetValue;
    this.syncedOffsetValue = this.endOffsetValue;
    this.recovery.segments = this.segments.length;
    let records = 0;
    for (const seg of this.segments) {
      for (let i = 0; i < seg.count; i++) if (seg.positions[i] !== NO_RECORD) records++;
    }
    this.recovery.records = records;
    const damaged =
      this.recovery.truncatedBytes > 0 ||
      this.recovery.corruptRecords.length > 0 ||
      this.recovery.rebuiltIndexes.length > 0 ||
      this.recovery.setAsideSegments !== undefined;
    this.log[damaged ? "warn" : "debug"](
      {
        segments: this.recovery.segments,
        records,
        earliestOffset: this.earliestOffset,
        endOffset: this.endOffsetValue,
        truncatedBytes: this.recovery.truncatedBytes,
        corruptRecords: this.recovery.corruptRecords.length,
        rebuiltIndexes: this.recovery.rebuiltIndexes,
      },
      "partition log recovered",
    );
  }

}

/** Opens (creating if needed) and recovers the partition log in `dir`. */
export async function openPartitionLog(dir: string, opts: StorageOptions): Promise<FilePartitionLog> {
  const log = new FilePartitionLog(dir, opts);
  try {
    await log.recover();
  } catch (err) {
    // Recovery never fails on file content; this is the data directory being unusable (EACCES,
    // ENOSPC, EMFILE...). Release what was opened and let the caller say so.
    await log.close().catch(() => {});
    throw err;
  }
  return log;
}
