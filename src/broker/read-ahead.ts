// Read-ahead for consumes. Fresh messages are handed out in offset order, so single-message
// consumes walk each partition one record at a time, and one pread per message was a tenth of a
// consume's cost. A partition whose consume reads the record just below its cursor reads ahead
// instead: the next READ_AHEAD_RECORDS (at most READ_AHEAD_BYTES) come back in one read and wait
// in a window for the consumes that follow.
//
// Bounds. One window per partition, and every window of the process shares READ_AHEAD_BUDGET:
// when a new window would pass it, the windows filled longest ago are dropped (LRU by fill).
// Records below the log's synced offset never change, so a window never needs invalidating;
// retention drops the partition's window (Partition.afterRetention) so it serves nothing older
// than the log does.

import type { StoredRecord } from "../storage/types.js";

export const READ_AHEAD_RECORDS = 64;
export const READ_AHEAD_BYTES = 64 * 1024;
/** Bytes all windows of the process may hold together (payload and key bytes). */
export const READ_AHEAD_BUDGET = 16 * 1024 * 1024;

/**
 * One partition's window: the records of one read, by offset. `records` is replaced, never
 * changed in place, so a reader holding it (Partition.readTaken) keeps a consistent view.
 */
export class ReadAheadWindow {
  records: ReadonlyMap<number, StoredRecord> = new Map<number, StoredRecord>();
  bytes = 0;

  constructor(private readonly pool: ReadAheadPool) {}

  get(offset: number): StoredRecord | undefined {
    return this.records.get(offset);
  }

  /** Replaces the window's contents. */
  fill(records: readonly StoredRecord[]): void {
    const m = new Map<number, StoredRecord>();
    let bytes = 0;
    for (const r of records) {
      m.set(r.offset, r);
      bytes += r.payload.length + (r.key?.length ?? 0);
    }
    this.pool.replace(this, bytes);
    this.records = m;
    this.bytes = bytes;
  }

  clear(): void {
    this.pool.replace(this, 0);
    this.records = new Map();
    this.bytes = 0;
  }
}

/** The windows of a process and their shared byte budget. */
export class ReadAheadPool {
  /** Windows holding records, in fill order (oldest first). */
  private readonly filled = new Set<ReadAheadWindow>();
  private bytes = 0;

  constructor(readonly budgetBytes = READ_AHEAD_BUDGET) {}

  get heldBytes(): number {
    return this.bytes;
  }

  window(): ReadAheadWindow {
    return new ReadAheadWindow(this);
  }

  /** Accounts `w` at `bytes` from now on (0: empty), dropping the oldest others while over budget. */
  replace(w: ReadAheadWindow, bytes: number): void {
    if (this.filled.delete(w)) this.bytes -= w.bytes;
    w.bytes = 0;
    if (bytes === 0) return;
    for (const old of this.filled) {
      if (this.bytes + bytes <= this.budgetBytes) break;
      this.filled.delete(old);
      this.bytes -= old.bytes;
      old.records = new Map();
      old.bytes = 0;
    }
    this.filled.add(w);
    this.bytes += bytes;
  }
}

/** The process's pool: every partition's window draws on it unless given another. */
export const readAheadPool = new ReadAheadPool();
