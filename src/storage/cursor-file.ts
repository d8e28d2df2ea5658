// Copy cursors of one parent partition: for each attached child, the next parent offset to copy.
//
// Durability follows the ack log's schedule on purpose: the cursors are written to the OS every
// ackFlushIntervalMs and fsynced every ackSyncIntervalMs, so a kill makes a child re-copy (and
// deliver again) at most the copies of the last ~100 ms, a power loss those of the last ~1.1 s —
// the same windows in which the contract already lets acked messages come back. setNow() writes
// and syncs at once, for the steps that must be durable before they are answered (attaching a
// child: its starting cursor must exist before the link does, or a restart could copy messages
// produced before the attach).
//
// Beside each cursor the file may keep the parent offsets past it that are already durable on the
// child (a copy stored only in part: the copier sends only the rest again). They follow the same
// schedule, so after a graceful stop a restarted copier still leaves them out; after a kill they
// may be forgotten, and the whole batch is copied again (the contract's kill case).
//
// The file holds two fixed-size slots written alternately, each with a sequence number and a
// CRC32C, so a torn write of one slot leaves the other: recovery takes the valid slot with the
// higher sequence. Byte layout of a slot (SLOT_BYTES = 64 KiB):
//   0   u32  payload length L (JSON, UTF-8)
//   4   u32  CRC32C of bytes [8, 16 + L)
//   8   u64  sequence number (u32 low, u32 high)
//   16  L    JSON {"child": nextOffset, ..., "~stored/child": [offset, ...], ...}
// A "~" cannot begin a topic name, so the stored lists never read as cursors (older versions,
// which keep only numbers, skip them). When the stored lists would not fit the slot they are left
// out of it (logged): the copier then copies those batches whole again after a restart.
// In the test-only power-loss mode a write goes to memory and reaches the file only with the sync.
//
// Damage. One bad slot beside a valid one is a torn write: the other slot is used (it is one
// flush older, so the copies of that flush may go again: at least once). A file with bytes in it
// and no valid slot has lost every cursor: a child copied from 0 would get the whole parent again,
// and one started at the end would miss records the parent answered 202 for (a copy to every
// child attached at the time is a delivery obligation). Neither is safe to guess, so load() sets
// the file aside as children.cursors.damaged (kept for the operator, never overwritten), starts a
// fresh one, and reports `damage` for as long as the set-aside file exists; the partition opener
// then holds every link that has no cursor (docs/operations.md, "A damaged children.cursors").
// A never-written slot (past the end of the file, or all zero: the first write goes to slot 1)
// is not damage.
//
// Files go through the StorageFs and the intervals through the Scheduler of the options. A failed
// write or fdatasync in a timer is logged, not thrown (that would end the process); the cursors
// are then marked dirty, so the next flush writes the whole state into the other slot and the
// next sync covers fresh pages: a failed fsync is never simply retried (fsyncgate).
//
// Descriptor: the file is read at open and its fd let go; the first write opens it again and
// keeps it. A partition with no child (most of them) so holds no descriptor for its cursors.

import { basename, dirname } from "node:path";
import { crc32c } from "@node-rs/crc32";
import type { Logger } from "pino";
import { systemScheduler, type Scheduler, type Timer } from "../platform/scheduler.js";
import { fdatasyncAsync, writeFullySync } from "./files.js";
import { realFs, type StorageFs } from "./fs.js";

/** The file's name in a partition directory. */
export const CURSOR_FILE_NAME = "children.cursors";
/** Appended to the name of a cursor file found damaged, which is set aside under it. */
export const CURSOR_FILE_DAMAGED_SUFFIX = ".damaged";

export const SLOT_BYTES = 64 * 1024;
const HEADER = 16;
/** Most children one parent may have: keeps the JSON within a slot. */
export const CURSORS_MAX = 256;
/** Key prefix of a child's stored-offsets list in the slot's JSON. */
const STORED_PREFIX = "~stored/";
/** A never-written slot reads as zeros (a hole before slot 1, which takes the first write). */
const ZERO_SLOT = Buffer.alloc(SLOT_BYTES);

export interface CursorFileOptions {
  ackFlushIntervalMs: number;
  ackSyncIntervalMs: number;
  powerLoss: boolean;
  logger: Logger;
  /** Runs the flush and sync intervals (default systemScheduler). */
  scheduler?: Scheduler;
  /** Every file operation (default realFs). */
  fs?: StorageFs;
}

export class CursorFile {
  private readonly cursors = new Map<string, number>();
  /** Per child: parent offsets past its cursor already durable on the child. */
  private readonly storedOffsets = new Map<string, readonly number[]>();
  private seq = 0;
  private dirty = false;
  private pendingSlot: Buffer | undefined; // power-loss mode: written but not yet synced
  private unsynced = false;
  private readonly flushTimer: Timer;
  private readonly syncTimer: Timer;
  private closed = false;
  /** Opened by the first write (see the top of this file). */
  private fd = -1;
  /**
   * Why the cursors of this partition are unknown, when they are: the file had bytes but no valid
   * slot, or such a file was set aside earlier and is still there. Undefined: the cursors are whole.
   */
  damage: string | undefined;
  /** The file itself has bytes and no valid slot (load() sets it aside). */
  private unreadable = false;

  private constructor(
    private readonly fs: StorageFs,
    private readonly path: string,
    private readonly opts: CursorFileOptions,
  ) {
    const scheduler = opts.scheduler ?? systemScheduler;
    this.flushTimer = scheduler.every(opts.ackFlushIntervalMs, () => {
      try {
        this.flush();
      } catch (err) {
        opts.logger.error({ err }, "writing copy cursors failed; the next flush writes them again");
      }
    });
    this.syncTimer = scheduler.every(opts.ackSyncIntervalMs, () => {
      this.sync().catch((err: unknown) => opts.logger.error({ err }, "syncing copy cursors failed; the next flush rewrites them"));
    });
  }

  /**
   * Opens the file, creating it if missing. A damaged file is left as it is (see load()), with
   * `damage` saying what was wrong.
   */
  static open(path: string, opts: CursorFileOptions): CursorFile {
    const fs = opts.fs ?? realFs;
    fs.closeSync(fs.openSync(path, "a")); // create it if missing; O_APPEND would defeat positioned writes
    const rw = fs.openSync(path, "r"); // read here, let go below: the first write opens it again
    const f = new CursorFile(fs, path, opts);
    let best: { seq: number; map: Record<string, unknown> } | undefined;
    const problems: string[] = [];
    for (let slot = 0; slot < 2; slot++) {
      const buf = Buffer.alloc(SLOT_BYTES);
      const n = fs.readSync(rw, buf, 0, SLOT_BYTES, slot * SLOT_BYTES);
      const bad = (what: string) => {
        if (!buf.subarray(0, n).equals(ZERO_SLOT.subarray(0, n))) problems.push(`slot ${slot}: ${what}`);
      };
      if (n === 0) continue;
      if (n < HEADER) {
        bad(`${n} bytes, shorter than a slot header`);
        continue;
      }
      const len = buf.readUInt32LE(0);
      if (len > SLOT_BYTES - HEADER || HEADER + len > n) {
        bad(`payload length ${len} does not fit the ${n} bytes of the slot`);
        continue;
      }
      if (crc32c(buf.subarray(8, HEADER + len)) !== buf.readUInt32LE(4)) {
        bad("checksum mismatch");
        continue;
      }
      const seq = buf.readUInt32LE(8) + buf.readUInt32LE(12) * 2 ** 32;
      let map: unknown;
      try {
        map = JSON.parse(buf.toString("utf8", HEADER, HEADER + len));
      } catch {
        map = undefined;
      }
      if (typeof map !== "object" || map === null || Array.isArray(map)) {
        bad("checksum right but not a JSON object");
        continue;
      }
      if (best === undefined || seq > best.seq) best = { seq, map: map as Record<string, unknown> };
    }
    if (best !== undefined) {
      if (problems.length > 0) opts.logger.warn({ file: path, problems, seq: best.seq }, "a copy cursor slot is damaged (a torn write); using the other slot");
      f.seq = best.seq;
      for (const [k, v] of Object.entries(best.map)) {
        if (Number.isSafeInteger(v) && (v as number) >= 0) f.cursors.set(k, v as number);
        else if (k.startsWith(STORED_PREFIX) && Array.isArray(v) && v.every((o) => Number.isSafeInteger(o) && o >= 0)) f.storedOffsets.set(k.slice(STORED_PREFIX.length), v as number[]);
      }
      for (const child of f.storedOffsets.keys()) if (!f.cursors.has(child)) f.storedOffsets.delete(child);
    } else if (problems.length > 0) {
      f.unreadable = true;
      f.damage = `no valid slot: ${problems.join("; ")}`;
    }
    fs.closeSync(rw);
    if (f.damage === undefined && exists(fs, path + CURSOR_FILE_DAMAGED_SUFFIX)) {
      f.damage = `${basename(path)}${CURSOR_FILE_DAMAGED_SUFFIX} is still there: an earlier start found the cursors damaged and set them aside`;
    }
    return f;
  }

  /**
   * Opens the file as a partition does: a file with no valid slot is renamed to
   * children.cursors.damaged (kept for the operator, never written again) and a fresh file is
   * started, whose `damage` says so for as long as the set-aside file is there. A file set aside
   * earlier is replaced by the newer one.
   */
  static async load(path: string, opts: CursorFileOptions): Promise<CursorFile> {
    const f = CursorFile.open(path, opts);
    if (!f.unreadable) return f;
    await f.close(); // nothing was written to it
    const aside = path + CURSOR_FILE_DAMAGED_SUFFIX;
    await f.fs.rename(path, aside);
    await f.fs.fsyncDir(dirname(path));
    opts.logger.warn({ file: path, damage: f.damage, setAsideAs: basename(aside) }, "copy cursor file is damaged; set aside, and copies to children without a cursor are held until an operator acts (docs/operations.md)");
    const fresh = CursorFile.open(path, opts);
    fresh.damage = `${f.damage} (set aside as ${basename(aside)})`;
    return fresh;
  }

  get(child: string): number | undefined {
    return this.cursors.get(child);
  }

  children(): string[] {
    return [...this.cursors.keys()];
  }

  /** Advances a cursor in memory; it reaches the disk on the ack schedule. */
  advance(child: string, next: number): void {
    const cur = this.cursors.get(child);
    if (cur !== undefined && next <= cur) return;
    this.cursors.set(child, next);
    this.dirty = true;
  }

  /** Parent offsets past the child's cursor already durable on the child (none: empty). */
  stored(child: string): readonly number[] {
    return this.storedOffsets.get(child) ?? [];
  }

  /** Replaces the child's stored offsets in memory; they reach the disk with the cursors. */
  setStored(child: string, offsets: readonly number[]): void {
    const had = this.storedOffsets.has(child);
    if (offsets.length === 0) this.storedOffsets.delete(child);
    else this.storedOffsets.set(child, [...offsets]);
    if (had || offsets.length > 0) this.dirty = true;
  }

  /** Sets (or with undefined removes) a cursor and makes it durable before resolving. */
  async setNow(child: string, next: number | undefined): Promise<void> {
    this.storedOffsets.delete(child);
    if (next === undefined) this.cursors.delete(child);
    else {
      if (this.cursors.size >= CURSORS_MAX && !this.cursors.has(child)) throw new Error(`a parent partition has at most ${CURSORS_MAX} children`);
      this.cursors.set(child, next);
    }
    this.dirty = true;
    this.flush();
    await this.sync();
  }

  private encode(): Buffer {
    const map: Record<string, number | readonly number[]> = Object.fromEntries(this.cursors);
    for (const [child, offsets] of this.storedOffsets) map[STORED_PREFIX + child] = offsets;
    let json = Buffer.from(JSON.stringify(map), "utf8");
    if (json.length > SLOT_BYTES - HEADER && this.storedOffsets.size > 0) {
      this.opts.logger.warn({ children: [...this.storedOffsets.keys()] }, "the offsets of copies stored in part do not fit the cursor slot; after a restart those batches are copied whole");
      json = Buffer.from(JSON.stringify(Object.fromEntries(this.cursors)), "utf8");
    }
    if (json.length > SLOT_BYTES - HEADER) throw new Error("copy cursors do not fit their slot");
    this.seq++;
    const buf = Buffer.alloc(HEADER + json.length);
    buf.writeUInt32LE(json.length, 0);
    buf.writeUInt32LE(this.seq % 2 ** 32, 8);
    buf.writeUInt32LE(Math.floor(this.seq / 2 ** 32), 12);
    json.copy(buf, HEADER);
    buf.writeUInt32LE(crc32c(buf.subarray(8)), 4);
    return buf;
  }

  /** Writes the cursors to the OS (or, in power-loss mode, to memory). */
  flush(): void {
    if (!this.dirty || this.closed) return;
    this.dirty = false;
    const buf = this.encode();
    if (this.opts.powerLoss) this.pendingSlot = buf;
    else {
      try {
        this.write(buf);
      } catch (err) {
        this.dirty = true;
        throw err;
      }
    }
    this.unsynced = true;
  }

  private write(buf: Buffer): void {
    if (this.fd < 0) this.fd = this.fs.openSync(this.path, "r+");
    writeFullySync(this.fs, this.fd, buf, 0, buf.length, (this.seq % 2) * SLOT_BYTES);
  }

  async sync(): Promise<void> {
    if (!this.unsynced || this.closed) return;
    this.unsynced = false;
    if (this.pendingSlot !== undefined) {
      this.write(this.pendingSlot);
      this.pendingSlot = undefined;
    }
    try {
      await fdatasyncAsync(this.fs, this.fd);
    } catch (err) {
      // The slot's pages may be gone while the kernel calls them clean: write the state again.
      this.dirty = true;
      throw err;
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.flush();
    await this.sync();
    this.closed = true;
    this.flushTimer.cancel();
    this.syncTimer.cancel();
    if (this.fd >= 0) this.fs.closeSync(this.fd);
    this.fd = -1;
  }
}

/** Whether a file exists, through the seam (the cursor file's open is synchronous). */
function exists(fs: StorageFs, path: string): boolean {
  try {
    fs.closeSync(fs.openSync(path, "r"));
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw e;
  }
}
