// The storage layer's contract with the broker. The broker sees a partition as two things:
// a PartitionLog (messages, append-only, group-committed) and an AckLog (which offsets are settled).
// Neither knows about leases, HTTP or topics.

import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import type { Scheduler } from "../platform/scheduler.js";
import type { StorageFs } from "./fs.js";

export interface StoredRecord {
  offset: number;
  /** Produce time, ms since the epoch, assigned by the owner when it appended the record. */
  producedAtMs: number;
  key: Buffer | null;
  payload: Buffer;
  /** A control record (record.ts): a replicated partition's epoch marker, never a message. */
  control?: true;
  /** The record's attributes, encoded (./attrs.ts decodes them); absent when it has none. */
  attrs?: Buffer;
}

export interface AppendInput {
  key: Buffer | null;
  payload: Buffer;
  /** Appends a control record (key null, payload empty). */
  control?: true;
  /** Attributes, encoded by ./attrs.ts (1 .. ATTR_BYTES_MAX bytes); none when absent. */
  attrs?: Buffer;
  /**
   * With attrs a block that starts with the producer attribute, shared by a run of records
   * (one buffer, not one each): this record's sequence, written into the block as the log
   * encodes the record (./attrs.ts, setProducerSequence). The block's own sequence bytes are
   * then whatever the last record of the run left there: readers of an AppendInput after the
   * append take the sequence from here.
   */
  producerSequence?: number;
}

export interface StorageOptions {
  clock: Clock;
  logger: Logger;
  /** The group commit's flush is queued with `soon` (default systemScheduler: setImmediate). */
  scheduler?: Scheduler;
  /** Every file operation (default realFs, node:fs itself; tests inject faults, ./fs.ts). */
  fs?: StorageFs;
  /** Roll the active segment when it reaches this many bytes. */
  segmentBytesMax: number;
  /** Roll the active segment when its first record is this old, so retention can act on small topics. */
  segmentAgeMaxMs: number;
  /** Test-only: keep written-but-unsynced bytes in process memory (NARAD_TEST_POWER_LOSS=1). */
  powerLoss: boolean;
  /** Called after every group commit (for the fsync latency metric). Must not throw. */
  onSync?: (info: SyncInfo) => void;
  /** Bound on open file descriptors of sealed segments kept for reads (default 16). */
  openSegmentFdsMax?: number;
  /**
   * fdatasync on the event loop's thread when nothing else is being served (default true;
   * ./partition-log.ts, "Inline fdatasync"). false: always on the threadpool.
   */
  inlineFdatasync?: boolean;
}

/** One completed group commit. */
export interface SyncInfo {
  /** From the start of the write to the end of the fdatasync(s). */
  durationMs: number;
  records: number;
  bytes: number;
  /** Append calls the commit covered. */
  appends: number;
}

export interface RecoveryReport {
  segments: number;
  records: number;
  /** Bytes cut from a torn tail of the active segment. */
  truncatedBytes: number;
  /** Records skipped because their checksum failed (never served). */
  corruptRecords: { segment: string; position: number; reason: string }[];
  /** Index files rebuilt because they were missing or did not match their segment. */
  rebuiltIndexes: string[];
  /**
   * Segments whose name disagreed with the offsets of their records, renamed to NAME.corrupt and
   * not served (absent when there were none).
   */
  setAsideSegments?: { segment: string; firstOffset: number; endOffset: number }[];
}

/**
 * One partition's append-only log: a directory of segment files named by base offset.
 *
 * Invariants (asserted): offsets only grow; syncedOffset <= writtenOffset <= endOffset.
 */
export interface PartitionLog {
  /** The offset the next appended record gets. */
  readonly endOffset: number;
  /** The lowest offset still retained (== endOffset when empty). */
  readonly earliestOffset: number;
  /** Every offset below this is fsynced: durable, and visible to consumers and replay. */
  readonly syncedOffset: number;
  /** Bytes appended but not yet covered by a completed fdatasync (for 429 backpressure). */
  readonly pendingSyncBytes: number;

  /**
   * Assigns consecutive offsets to the records now (synchronously) and queues them for the
   * next group commit. `durable` resolves once an fdatasync covering all of them has completed,
   * and rejects if the write or sync failed (the records' fate is then unknown).
   * Many calls made while one fdatasync runs are covered by the next single fdatasync.
   */
  append(records: AppendInput[], producedAtMs: number): { baseOffset: number; durable: Promise<void> };

  /**
   * Reads up to maxRecords consecutive records starting at fromOffset (raised to earliestOffset),
   * stopping before maxBytes of payload would be passed (at least one record is returned if any),
   * and never at or past syncedOffset. A record whose checksum fails is skipped and reported, never
   * served; the result may then have a gap (offsets are in the records).
   */
  read(fromOffset: number, maxRecords: number, maxBytes: number): Promise<StoredRecord[]>;

  /** Rolls the active segment if it is over size or age. Called by the broker's housekeeping tick. */
  maybeRoll(): Promise<void>;

  /**
   * Removes whole closed segments whose newest record is older than nowMs - retentionMs.
   * Never removes a segment holding a record younger than that. Returns the new earliestOffset.
   */
  enforceRetention(retentionMs: number): Promise<number>;

  /** Flushes and fsyncs everything, then closes files. Further appends reject. */
  close(): Promise<void>;

  /** What recovery found when the log was opened. */
  readonly recovery: RecoveryReport;

  /**
   * False while the log cannot yet say how much of it is visible: a replicated partition's new
   * leader before its epoch marker commits (src/cluster/replication/leader.ts). A replay then
   * answers 503 rather than an empty page. Absent: always ready.
   */
  readonly ready?: boolean;

  /** The error that stopped the log (a failed write or fdatasync), or null: it takes appends. */
  readonly failed: Error | null;

  /**
   * After a failure: cuts the files back to what was fsynced and recovers from disk, as a start
   * does; the log then takes appends again. Rejects, and the log stays stopped, while the cause
   * remains. Resolves at once on a log that did not fail.
   */
  reopen(): Promise<void>;

  /** Lets go of its descriptors if idle for idleMs (they are opened again on demand); returns how many. */
  closeIdleFiles(idleMs: number): number;
}

/**
 * A partition's settled offsets: a floor (every offset below is acked) and the acked offsets
 * above it. Acks are buffered in memory, written to the OS every ackFlushIntervalMs and fsynced
 * every ackSyncIntervalMs (timers owned by the AckLog). A kill may forget up to ~ackFlushIntervalMs
 * of acks; a power loss up to ~ackSyncIntervalMs + ackFlushIntervalMs. close() writes and syncs all.
 */
export interface AckLog {
  /** Every offset below the floor is acked (or gone by retention). */
  readonly floor: number;
  isAcked(offset: number): boolean;
  /** Marks the offset acked (in memory now; on disk by the timers). Idempotent. */
  ack(offset: number): void;
  /** Raises the floor, e.g. to the log's earliestOffset after retention. */
  raiseFloor(offset: number): void;
  /** Marks [start, end) acked (a follower taking its leader's whole ack state). Idempotent. */
  ackRange(start: number, end: number): void;
  /** The floor and the acked ranges above it ([start, end), in order), at most `rangesMax` of them. */
  settledRanges(rangesMax: number): { floor: number; ranges: [number, number][] };
  /** Number of acked offsets at or above the floor (for metrics). */
  readonly ackedAboveFloor: number;
  /**
   * Deliveries recorded for an unsettled offset (0: none). Kept with the acks, on their schedule
   * (./ack-log.ts), so delivery counts survive restarts (SPEC "Dead letters").
   */
  deliveries(offset: number): number;
  /** Whether a dead-letter move was asked for the unsettled offset (ack ?dead_letter=true). */
  deadLetterAsked(offset: number): boolean;
  /** Records that the offset was delivered `count` times (counts only grow); `deadLetter`: a move was asked. */
  recordDeliveries(offset: number, count: number, deadLetter?: boolean): void;
  /** Every unsettled offset with a recorded count. */
  forEachDelivery(fn: (offset: number, count: number, deadLetter: boolean) => void): void;
  /** Writes and fsyncs every buffered ack now (SIGTERM path). */
  flushAndSync(): Promise<void>;
  /** Lets go of its descriptor when nothing waits to be written and nothing was for idleMs. */
  closeIdleFile(idleMs: number): void;
  close(): Promise<void>;
}

export interface AckLogOptions {
  clock: Clock;
  logger: Logger;
  /** Runs the flush and sync intervals (default systemScheduler). */
  scheduler?: Scheduler;
  /** Every file operation (default realFs). */
  fs?: StorageFs;
  ackFlushIntervalMs: number;
  ackSyncIntervalMs: number;
  powerLoss: boolean;
  /** Compact (snapshot + fresh log) once the ack log file passes this size (default 4 MiB). */
  ackLogBytesMax?: number;
}
