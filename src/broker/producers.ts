// Idempotent producers (SPEC "Idempotent producers"): the dedupe window of each partition, and the
// produce path that consults it.
//
// Why a window per partition, rebuilt from the log. Every record an idempotent produce stores
// carries its producer id and sequence in its attribute block (src/storage/attrs.ts, tag 1), so the
// log itself says which (producer, sequence) pairs a partition holds: a window built by scanning
// the log's recent records survives kill -9 and power loss (the log holds exactly what was
// fsynced, which is everything ever answered 202), a restart, a move (the new owner opens the
// copied log) and a failover (a follower's log holds the same attributes). There is no side table
// that a crash could lose or let drift from the log. The window of a partition is built on the
// first idempotent produce to it after it opens, so a node with no idempotent traffic pays
// nothing at start.
//
// What the window keeps, per (partition, producer): the stored sequences and their offsets, in
// the order they were stored, and a floor: every sequence below it that is not kept is out of the
// window (409 sequence_out_of_window, definite for this request; whether a first send landed is
// unknown). An entry is let go when it is older than `windowMs` (by its record's produce time) or
// when its producer holds more than `sequencesMax` entries on the partition (its oldest first);
// either raises the floor past it. So the window is at least `windowMs` or the producer's last
// `sequencesMax` sequences, whichever is less (the SPEC's promise).
//
// Limits. `entriesMax`: entries of all windows of this node together (their time queues, which
// may hold entries already let go by the per-producer bound until they reach the front). At it,
// the window taking a new sequence lets go of its own oldest entries first (raising their
// producers' floors): the window shrinks below its promise instead of refusing produces; a
// re-send older than what is kept answers 409 and is never stored twice, and
// narad_dedupe_window_evictions_total counts what the limit let go (docs/operations.md). A
// producer's floor outlives its entries while the partition stays open, so a sequence below it
// still answers 409; a window rebuilt after a restart or move knows floors only from the records
// it scanned (docs/contract.md says what that leaves open).
//
// Two sends of one (producer, sequence) in flight at once: the first reserves the sequence before
// its append; the second waits for the first's outcome, then looks again (a duplicate of the
// stored record, or, if the first stored nothing for certain, a new append of its own).
//
// A record whose append failed with an indefinite error but stays in the log (a replicated
// partition's no_quorum: it may still commit) stays in the window at its offset; a re-send of it
// is answered as a duplicate only once that offset is visible (below syncedOffset), and until
// then with the same indefinite error, so a 202 never names a record its acks mode has not made
// durable.

import { Gauge, Counter, type Registry } from "prom-client";
import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import type { Clock } from "../platform/clock.js";
import { systemScheduler, type Scheduler } from "../platform/scheduler.js";
import { decodeAttrs, encodeAttrs, PRODUCER_ID_BYTES } from "../storage/attrs.js";
import type { PartitionLog } from "../storage/types.js";
import { fnv1a32, keyPartition } from "./partitioner.js";

/** Default of producers.dedupe_window_ms. */
export const DEDUPE_WINDOW_MS_DEFAULT = 300_000;
/** Default of producers.window_sequences: a producer's entries kept per partition. */
export const WINDOW_SEQUENCES_DEFAULT = 100_000;
/** Default of producers.dedupe_entries_max: entries of every window of the node together. */
export const DEDUPE_ENTRIES_MAX_DEFAULT = 10_000_000;
/** Default of producers.idle_expiry_ms: an id unused this long is forgotten (7 days). */
export const IDLE_EXPIRY_MS_DEFAULT = 7 * 24 * 3600_000;
/** Sequences per run that share a partition when unkeyed (SPEC: ⌊sequence / 1024⌋). */
export const SEQUENCE_RUN = 1024;
/** A new replicated leader is waited for this long (polled every READY_POLL_MS) before a refusal. */
const READY_WAIT_MS = 5_000;
const READY_POLL_MS = 5;
/** Records read per step of a window's rebuild scan. */
const SCAN_STEP_RECORDS = 1000;
const SCAN_STEP_BYTES = 8 * 1024 * 1024;
/** The largest sequence plus one (2^53). */
export const SEQUENCE_LIMIT = Number.MAX_SAFE_INTEGER + 1;

/** A producer id as the wire spells it: 32 lowercase hex digits (16 bytes). */
export const PRODUCER_ID_RE = /^[0-9a-f]{32}$/;

export interface ProducerRef {
  /** 32 lowercase hex digits. */
  id: string;
  sequence: number;
}

/**
 * The partition of an unkeyed idempotent message: a hash of the producer id and its sequence's
 * run (⌊sequence / 1024⌋), so a re-send through any node reaches the same partition while runs of
 * sequences share one and batches stay whole (docs/api.md states it).
 */
export function idempotentPartition(producerId: string, sequence: number, partitions: number): number {
  if (partitions === 1) return 0;
  const b = Buffer.allocUnsafe(PRODUCER_ID_BYTES + 8);
  b.write(producerId, 0, PRODUCER_ID_BYTES, "hex");
  const run = Math.floor(sequence / SEQUENCE_RUN);
  b.writeUInt32LE(run >>> 0, PRODUCER_ID_BYTES);
  b.writeUInt32LE(Math.floor(run / 4294967296), PRODUCER_ID_BYTES + 4);
  return fnv1a32(b) % partitions;
}

/** Item indexes per partition of an idempotent request: a key's partition, else the producer's. */
export function idempotentGroups(items: readonly { key: string | Buffer | null; producer?: ProducerRef }[], partitions: number): Map<number, number[]> {
  const groups = new Map<number, number[]>();
  // Consecutive unkeyed messages of one producer and one run share a partition: hashed once.
  let lastId = "";
  let lastRun = -1;
  let lastP = 0;
  for (let i = 0; i < items.length; i++) {
    const it = items[i]!;
    let p: number;
    if (it.key !== null) p = keyPartition(it.key, partitions);
    else {
      const run = Math.floor(it.producer!.sequence / SEQUENCE_RUN);
      if (run !== lastRun || it.producer!.id !== lastId) {
        lastP = idempotentPartition(it.producer!.id, it.producer!.sequence, partitions);
        lastRun = run;
        lastId = it.producer!.id;
      }
      p = lastP;
    }
    const g = groups.get(p);
    if (g) g.push(i);
    else groups.set(p, [i]);
  }
  return groups;
}

/** The attribute block of an idempotent record. */
export function producerAttrs(p: ProducerRef): Buffer {
  return encodeAttrs({ producer: { id: Buffer.from(p.id, "hex"), sequence: p.sequence } })!;
}

/**
 * The attribute blocks of many records, as views of one buffer: the block of the first, copied
 * and given each one's id and sequence (what encodeAttrs writes, byte for byte: tag 1, u16
 * length 24, 16 id bytes, u64 LE sequence; a unit test checks they agree).
 */
export function producerAttrsMany(ps: readonly ProducerRef[]): Buffer[] {
  if (ps.length === 0) return [];
  const one = producerAttrs(ps[0]!);
  const n = one.length;
  const all = Buffer.allocUnsafe(n * ps.length);
  const out = new Array<Buffer>(ps.length);
  let lastId = "";
  for (let i = 0; i < ps.length; i++) {
    const at = i * n;
    const p = ps[i]!;
    one.copy(all, at);
    if (p.id !== ps[0]!.id && p.id !== lastId) all.write(p.id, at + 3, PRODUCER_ID_BYTES, "hex");
    else if (p.id !== ps[0]!.id) all.copy(all, at + 3, at - n + 3, at - n + 3 + PRODUCER_ID_BYTES);
    lastId = p.id;
    all.writeUInt32LE(p.sequence >>> 0, at + 3 + PRODUCER_ID_BYTES);
    all.writeUInt32LE(Math.floor(p.sequence / 4294967296), at + 3 + PRODUCER_ID_BYTES + 4);
    out[i] = all.subarray(at, at + n);
  }
  return out;
}

export interface WindowLimits {
  windowMs: number;
  sequencesMax: number;
  entriesMax: number;
}

/** Sequence runs kept by one producer's state before its arrays are compacted (the head let go). */
const COMPACT_AFTER = 1024;

/**
 * One producer on one partition. Its stored sequences are kept as runs: sequences first ..
 * first + count - 1 stored at offsets offset .. offset + count - 1, sorted by first sequence and
 * disjoint, in three parallel arrays from `head` on (what lies before head was let go). A batch
 * is one run, and so are single produces of a producer that nothing interleaves with (each run
 * that continues the last one, in sequence and in offset, extends it): memory goes with the
 * runs, not with the messages.
 */
class ProducerState {
  firsts: number[] = [];
  counts: number[] = [];
  offsets: number[] = [];
  head = 0;
  /** Sequences held (the sum of counts from head). */
  held = 0;
  /**
   * Runs of sequences [from, to) reserved by appends in flight, each until its append's outcome
   * is known: one entry a request, not one a message (a producer has few requests in flight).
   */
  pending: { from: number; to: number; until: Promise<void> }[] = [];
  /** Sequences below it that are not held are out of the window. */
  floor = 0;

  /** Index of the last run whose first sequence is at most `seq`, or head - 1. */
  private runAtOrBelow(seq: number): number {
    let lo = this.head;
    let hi = this.firsts.length - 1;
    if (hi < lo || this.firsts[hi]! <= seq) return hi;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.firsts[mid]! <= seq) lo = mid + 1;
      else hi = mid - 1;
    }
    return hi;
  }

  offsetOf(seq: number): number | undefined {
    const i = this.runAtOrBelow(seq);
    if (i < this.head) return undefined;
    const d = seq - this.firsts[i]!;
    return d < this.counts[i]! ? this.offsets[i]! + d : undefined;
  }

  /** Whether any of [from, from + count) is held. */
  holdsAny(from: number, count: number): boolean {
    const i = this.runAtOrBelow(from + count - 1);
    return i >= this.head && this.firsts[i]! + this.counts[i]! > from;
  }

  /** Adds a run none of whose sequences is held. */
  insert(first: number, count: number, offset: number): void {
    const n = this.firsts.length;
    const last = n - 1;
    if (last >= this.head && first >= this.firsts[last]! + this.counts[last]!) {
      // After the last run (the usual case): extend it when it continues it, else append.
      if (first === this.firsts[last]! + this.counts[last]! && offset === this.offsets[last]! + this.counts[last]!) this.counts[last]! += count;
      else this.push(first, count, offset);
    } else if (last < this.head) this.push(first, count, offset);
    else {
      const at = this.runAtOrBelow(first) + 1; // before any later run (out-of-order arrival: rare)
      this.firsts.splice(at, 0, first);
      this.counts.splice(at, 0, count);
      this.offsets.splice(at, 0, offset);
    }
    this.held += count;
  }

  private push(first: number, count: number, offset: number): void {
    this.firsts.push(first);
    this.counts.push(count);
    this.offsets.push(offset);
  }

  /** Lets go of the `n` lowest sequences held (the per-producer bound), raising the floor past them. */
  dropLowest(n: number): void {
    while (n > 0 && this.head < this.firsts.length) {
      const c = this.counts[this.head]!;
      if (c <= n) {
        n -= c;
        this.held -= c;
        this.floor = Math.max(this.floor, this.firsts[this.head]! + c);
        this.head++;
      } else {
        this.cutLow(this.head, n);
        this.floor = Math.max(this.floor, this.firsts[this.head]!);
        n = 0;
      }
    }
    this.compact();
  }

  /** Lets go of every held sequence in [from, to) (a queue entry leaving the window). */
  remove(from: number, to: number): void {
    let i = Math.max(this.head, this.runAtOrBelow(from));
    while (i < this.firsts.length && this.firsts[i]! < to) {
      const f = this.firsts[i]!;
      const e = f + this.counts[i]!;
      if (e <= from) {
        i++;
        continue;
      }
      if (f >= from && e <= to) {
        // The whole run.
        this.held -= e - f;
        if (i === this.head) this.head++;
        else {
          this.firsts.splice(i, 1);
          this.counts.splice(i, 1);
          this.offsets.splice(i, 1);
          continue;
        }
      } else if (f >= from) this.cutLow(i, to - f); // its low part
      else if (e <= to) {
        // Its high part.
        this.held -= e - from;
        this.counts[i] = from - f;
      } else {
        // Its middle: split in two.
        this.held -= to - from;
        this.counts[i] = from - f;
        this.firsts.splice(i + 1, 0, to);
        this.counts.splice(i + 1, 0, e - to);
        this.offsets.splice(i + 1, 0, this.offsets[i]! + (to - f));
        return;
      }
      i++;
    }
    this.compact();
  }

  private cutLow(i: number, n: number): void {
    this.firsts[i]! += n;
    this.offsets[i]! += n;
    this.counts[i]! -= n;
    this.held -= n;
  }

  private compact(): void {
    if (this.head > COMPACT_AFTER && this.head * 2 > this.firsts.length) {
      this.firsts = this.firsts.slice(this.head);
      this.counts = this.counts.slice(this.head);
      this.offsets = this.offsets.slice(this.head);
      this.head = 0;
    }
  }
}

export type Lookup = { kind: "new" } | { kind: "stored"; offset: number } | { kind: "wait"; until: Promise<void> } | { kind: "old"; floor: number };
/** The lookup of a sequence not seen: one object for all. */
const NEW: Lookup = Object.freeze({ kind: "new" });

/** Counts shared by every window of a node (the entriesMax bound, the metrics). */
export class WindowTotals {
  /** Sequences in the time queues of every window (what entriesMax bounds). */
  entries = 0;
  evicted = 0;
}

/**
 * The dedupe window of one partition (pure state; the clock's time comes in as arguments). The
 * time queue holds every append's run in the order stored: (producer, first sequence, count,
 * produce time). Its size, and the bounds, count sequences (messages), whatever the runs.
 */
export class DedupeWindow {
  private readonly producers = new Map<string, ProducerState>();
  // The time queue, as runs: consecutive sequences of one producer stored by one append
  // (qSeq the first, qCount how many) share an entry, so a batch costs one, not one a message.
  private qState: ProducerState[] = [];
  private qSeq: number[] = [];
  private qCount: number[] = [];
  private qTime: number[] = [];
  private qHead = 0;
  private queued = 0;

  constructor(
    private readonly limits: WindowLimits,
    private readonly totals: WindowTotals = new WindowTotals(),
  ) {}

  /** Sequences in the time queue (what counts against entriesMax). */
  get size(): number {
    return this.queued;
  }

  get producerCount(): number {
    return this.producers.size;
  }

  lookup(id: string, sequence: number, nowMs: number): Lookup {
    this.expire(nowMs);
    const s = this.producers.get(id);
    if (s === undefined) return NEW;
    const offset = s.offsetOf(sequence);
    if (offset !== undefined) return { kind: "stored", offset };
    for (const r of s.pending) if (sequence >= r.from && sequence < r.to) return { kind: "wait", until: r.until };
    if (sequence < s.floor) return { kind: "old", floor: s.floor };
    return NEW;
  }

  /**
   * Whether every sequence of [from, from + count) is new (none held, reserved or below the
   * floor): a batch's one question instead of one lookup a message. Call expire first.
   */
  allNew(id: string, from: number, count: number): boolean {
    const s = this.producers.get(id);
    if (s === undefined) return true;
    if (from < s.floor || s.holdsAny(from, count)) return false;
    for (const r of s.pending) if (r.from < from + count && from < r.to) return false;
    return true;
  }

  /**
   * Reserves sequences for an append in flight until `until` settles (one promise for a whole
   * request: a promise per message would cost more than the rest of its bookkeeping); `release`
   * ends the reservations once the outcome is known.
   */
  reserve(id: string, from: number, count: number, until: Promise<void>): void {
    this.state(id).pending.push({ from, to: from + count, until });
  }

  release(id: string, until: Promise<void>): void {
    const s = this.producers.get(id);
    if (s === undefined || s.pending.length === 0) return;
    if (s.pending.length === 1) {
      if (s.pending[0]!.until === until) s.pending = [];
    } else s.pending = s.pending.filter((r) => r.until !== until);
  }

  /** Records a stored (producer, sequence) at its offset (an append, or the rebuild's scan). */
  add(id: string, sequence: number, offset: number, producedAtMs: number): void {
    this.addRun(id, sequence, 1, offset, producedAtMs);
  }

  /** Records `count` consecutive sequences from `first`, stored at consecutive offsets from `offset`. */
  addRun(id: string, first: number, count: number, offset: number, producedAtMs: number): void {
    const s = this.state(id);
    if (s.holdsAny(first, count)) {
      // Two copies in the log (stored before idempotence was on, or by a build that forgot its
      // window): the first answers. The run is split around what is held, so the queue never
      // lets go of the first copy's entry for the second's.
      for (let k = 0; k < count; ) {
        if (s.offsetOf(first + k) !== undefined) {
          k++;
          continue;
        }
        let j = k + 1;
        while (j < count && s.offsetOf(first + j) === undefined) j++;
        this.addRun(id, first + k, j - k, offset + k, producedAtMs);
        k = j;
      }
      return;
    }
    s.insert(first, count, offset);
    this.qState.push(s);
    this.qSeq.push(first);
    this.qCount.push(count);
    this.qTime.push(producedAtMs);
    this.queued += count;
    this.totals.entries += count;
    if (s.held > this.limits.sequencesMax) s.dropLowest(s.held - this.limits.sequencesMax);
    while (this.totals.entries > this.limits.entriesMax && this.queued > 0) this.totals.evicted += this.popFront();
  }

  /** Lets go of entries older than the window. */
  expire(nowMs: number): void {
    const cutoff = nowMs - this.limits.windowMs;
    while (this.qHead < this.qSeq.length && this.qTime[this.qHead]! < cutoff) this.popFront();
  }

  /** Lets go of everything (the partition closed here). */
  clear(): void {
    this.totals.entries -= this.queued;
    this.queued = 0;
    this.producers.clear();
    this.qState = [];
    this.qSeq = [];
    this.qCount = [];
    this.qTime = [];
    this.qHead = 0;
  }

  private state(id: string): ProducerState {
    let s = this.producers.get(id);
    if (s === undefined) {
      s = new ProducerState();
      this.producers.set(id, s);
    }
    return s;
  }

  /** Lets go of the oldest run; returns how many sequences it held. */
  private popFront(): number {
    const s = this.qState[this.qHead]!;
    const first = this.qSeq[this.qHead]!;
    const count = this.qCount[this.qHead]!;
    this.qState[this.qHead] = undefined as unknown as ProducerState; // let it be collected
    this.qHead++;
    this.queued -= count;
    this.totals.entries -= count;
    s.remove(first, first + count);
    if (first + count > s.floor) s.floor = first + count;
    // An emptied producer keeps its floor (a small object) while the window has room; the floor
    // is what answers 409 to a re-send older than the window.
    if (this.qHead > COMPACT_AFTER && this.qHead * 2 > this.qSeq.length) {
      this.qState = this.qState.slice(this.qHead);
      this.qSeq = this.qSeq.slice(this.qHead);
      this.qCount = this.qCount.slice(this.qHead);
      this.qTime = this.qTime.slice(this.qHead);
      this.qHead = 0;
    }
    return count;
  }

  /**
   * Builds the window from a log's recent records: those produced within the window of `nowMs`,
   * at most `entriesMax` records back from the visible end. Reads only visible records.
   * When older records were left out, a producer seen in the scan gets its lowest scanned
   * sequence as its floor: what lies below it may be in the records not scanned, so a re-send of
   * it answers 409 rather than being stored again.
   */
  static async rebuild(log: PartitionLog, limits: WindowLimits, totals: WindowTotals, nowMs: number, logger?: Logger): Promise<DedupeWindow> {
    const w = new DedupeWindow(limits, totals);
    const end = log.syncedOffset;
    const earliest = Math.max(log.earliestOffset, end - limits.entriesMax);
    const cutoff = nowMs - limits.windowMs;
    const start = await firstAtOrAfter(log, earliest, end, cutoff);
    const lowest = new Map<string, number>();
    let scanned = 0;
    for (let at = start; at < end; ) {
      const rs = await log.read(at, Math.min(SCAN_STEP_RECORDS, end - at), SCAN_STEP_BYTES);
      if (rs.length === 0) break;
      for (const r of rs) {
        scanned++;
        if (r.attrs === undefined || r.control === true) continue;
        const a = decodeAttrs(r.attrs);
        if (typeof a === "string" || a.producer === undefined) continue;
        const id = a.producer.id.toString("hex");
        w.add(id, a.producer.sequence, r.offset, r.producedAtMs);
        const lo = lowest.get(id);
        if (lo === undefined || a.producer.sequence < lo) lowest.set(id, a.producer.sequence);
      }
      at = rs[rs.length - 1]!.offset + 1;
    }
    // A scan from the log's first record knows every sequence the partition holds: no floor.
    if (start > log.earliestOffset) for (const [id, lo] of lowest) {
      const s = w.producers.get(id);
      if (s !== undefined && lo > s.floor) s.floor = lo;
    }
    logger?.info({ from: start, to: end, scanned, entries: w.size, producers: w.producers.size }, "dedupe window rebuilt from the log");
    return w;
  }
}

/**
 * The first offset in [lo, end) whose record was produced at or after `cutoffMs` (end when none),
 * by a binary search of single-record reads: produce times grow with offsets (a wall clock set
 * back can make the search start a little late; the window then holds a little less).
 */
async function firstAtOrAfter(log: PartitionLog, lo: number, end: number, cutoffMs: number): Promise<number> {
  let hi = end;
  while (lo < hi) {
    const mid = Math.floor((lo + hi) / 2);
    const [r] = await log.read(mid, 1, 1);
    if (r === undefined) return lo; // nothing readable there: scan from lo
    if (r.producedAtMs >= cutoffMs) hi = Math.min(mid, r.offset);
    else lo = r.offset + 1;
  }
  return lo;
}

/** True when the items are one producer's strictly increasing sequences (the HTTP numbering): none repeats. */
function increasing(items: readonly IdempotentItem[]): boolean {
  const id = items[0]!.producer.id;
  for (let i = 1; i < items.length; i++) {
    const p = items[i]!.producer;
    if (p.id !== id || p.sequence <= items[i - 1]!.producer.sequence) return false;
  }
  return true;
}

/** True when the indexed items are one producer's consecutive sequences (one run of the window). */
function consecutive(items: readonly IdempotentItem[], idxs: readonly number[]): boolean {
  const p0 = items[idxs[0]!]!.producer;
  for (let k = 1; k < idxs.length; k++) {
    const p = items[idxs[k]!]!.producer;
    if (p.id !== p0.id || p.sequence !== p0.sequence + k) return false;
  }
  return true;
}

/** What the produce path needs of a partition. */
export interface WindowPartition {
  readonly index: number;
  readonly log: PartitionLog;
}

export interface IdempotentItem {
  /** A string key is stored as its UTF-8 bytes. */
  key: string | Buffer | null;
  payload: Buffer;
  producer: ProducerRef;
}

export interface IdempotentResult {
  partition: number;
  offset: number;
  duplicate?: true;
}

/** A new idempotent record: a run's records share one attribute block (AppendInput.producerSequence). */
export interface FreshRecord {
  key: Buffer | null;
  payload: Buffer;
  attrs: Buffer;
  producerSequence?: number;
}

/**
 * Appends the given items (index lists per partition) and resolves with their offsets once
 * durable; `onAssigned` is called with each partition's base offset as soon as the log assigned
 * it (before the fsync), so a failure after it is known to have left the records in the log.
 */
export type AppendFn = (
  items: FreshRecord[],
  groups: Map<number, number[]>,
  onAssigned: (partition: number, baseOffset: number) => void,
) => Promise<{ partition: number; offset: number }[]>;

export interface DedupeOptions {
  clock: Clock;
  /** Waits for a replicated partition's new leader to confirm what it holds (default: timers). */
  scheduler?: Scheduler;
  logger: Logger;
  limits: WindowLimits;
  /** False only under the seeded bug dedupe-forgets-after-restart: windows start empty. */
  rebuildFromLog?: boolean;
}

/** Every dedupe window of a node, and the idempotent produce path over them. */
export class DedupeWindows {
  readonly totals = new WindowTotals();
  private readonly windows = new Map<WindowPartition, Promise<DedupeWindow>>();
  /** The windows built (a produce takes them without waiting on their promise). */
  private readonly built = new Map<WindowPartition, DedupeWindow>();
  private readonly log: Logger;
  private duplicates: Counter<"topic"> | undefined;

  constructor(private readonly o: DedupeOptions) {
    this.log = o.logger.child({ module: "producers" });
  }

  registerMetrics(r: Registry): void {
    this.duplicates = new Counter({ name: "narad_produce_duplicates_total", help: "Idempotent produces answered as duplicates (stored before, nothing stored again), per topic", labelNames: ["topic"], registers: [r] });
    const totals = this.totals;
    const windows = this.windows;
    new Gauge({
      name: "narad_dedupe_window_entries",
      help: "Entries (producer, sequence) held by the dedupe windows of this node's partitions",
      registers: [r],
      collect() {
        this.set(totals.entries);
      },
    });
    new Gauge({
      name: "narad_dedupe_window_partitions",
      help: "Partitions of this node whose dedupe window is built",
      registers: [r],
      collect() {
        this.set(windows.size);
      },
    });
    new Counter({
      name: "narad_dedupe_window_evictions_total",
      help: "Dedupe window entries let go before their time because producers.dedupe_entries_max was reached",
      registers: [r],
      collect() {
        this.reset();
        this.inc(totals.evicted);
      },
    });
  }

  /** The partition closed here: its window goes (a later open rebuilds it from the log). */
  closed(p: WindowPartition): void {
    const w = this.windows.get(p);
    if (w === undefined) return;
    this.windows.delete(p);
    this.built.delete(p);
    void w.then((x) => x.clear(), () => undefined);
  }

  /**
   * One idempotent message without an await (Broker.produceOneIdempotent): when `p`'s window is
   * built and the sequence is new there, appends it through `append` (which must not await) and
   * reserves the sequence until the append's outcome is in the window, as appendFresh does for a
   * request; returns what `append` returned. Otherwise does nothing and returns null: produce()
   * answers it (a duplicate, a send of it in flight, a sequence below the window, no window yet).
   */
  appendOne(p: WindowPartition, producer: ProducerRef, nowMs: number, append: () => { baseOffset: number; durable: Promise<void> }): { baseOffset: number; durable: Promise<void> } | null {
    const w = this.built.get(p);
    if (w === undefined || w.lookup(producer.id, producer.sequence, nowMs).kind !== "new") return null;
    // Appended first (a throw leaves nothing reserved), reserved before anything else can run: a
    // re-send meanwhile finds the reservation and waits for `until`, which never rejects.
    const placed = append();
    const record = () => w.add(producer.id, producer.sequence, placed.baseOffset, nowMs);
    const until: Promise<void> = placed.durable.then(
      () => {
        record();
        w.release(producer.id, until);
      },
      () => {
        // A record its log still holds (the append did not stop it) may yet become visible: it
        // stays in the window, so a re-send is never stored beside it (as in appendFresh).
        if (p.log.failed === null) record();
        w.release(producer.id, until);
      },
    );
    w.reserve(producer.id, producer.sequence, 1, until);
    return placed;
  }

  private windowOf(p: WindowPartition, topic: string): Promise<DedupeWindow> {
    let w = this.windows.get(p);
    if (w === undefined) {
      // A replicated partition's new leader cannot say yet what it holds: its old epoch's tail
      // becomes visible only with its marker, and a window built without it would store a
      // re-send of that tail again.
      // It is waited for (a topic just created, a failover a moment ago), then refused.
      w = this.whenReady(p, topic).then(() =>
        this.o.rebuildFromLog === false ? new DedupeWindow(this.o.limits, this.totals) : DedupeWindow.rebuild(p.log, this.o.limits, this.totals, this.o.clock.nowMs(), this.log.child({ topic, partition: p.index })),
      );
      this.windows.set(p, w);
      w.then(
        (x) => {
          if (this.windows.get(p) === w) this.built.set(p, x);
        },
        () => {
          if (this.windows.get(p) === w) this.windows.delete(p);
        },
      );
    }
    return w;
  }

  private async whenReady(p: WindowPartition, topic: string): Promise<void> {
    const until = this.o.clock.monoMs() + READY_WAIT_MS;
    while (p.log.ready === false) {
      if (this.o.clock.monoMs() >= until) {
        throw new NaradError("not_owner", `${topic}/${p.index} has a new leader that has not yet confirmed what its replicas hold; nothing was stored. Retry shortly.`);
      }
      await (this.o.scheduler ?? systemScheduler).sleep(READY_POLL_MS);
    }
  }

  /**
   * An idempotent produce: each item's (producer, sequence) looked up in its partition's window;
   * stored ones answer their original offset (duplicate), in-flight ones wait for their first
   * send, new ones are appended with their producer attribute. A sequence out of the window
   * refuses the whole request (409, nothing stored).
   */
  async produce(topic: string, parts: readonly (WindowPartition | undefined)[], items: readonly IdempotentItem[], groups: Map<number, number[]>, append: AppendFn): Promise<IdempotentResult[]> {
    const results = new Array<IdempotentResult>(items.length);
    for (let round = 0; ; round++) {
      const wins = new Map<number, DedupeWindow>();
      for (const p of groups.keys()) {
        const part = parts[p];
        if (part === undefined) throw new NaradError("not_owner", `This node does not serve ${topic}/${p} now; retry shortly.`);
        wins.set(p, this.built.get(part) ?? (await this.windowOf(part, topic)));
      }
      // From here to the reservations nothing awaits: a second send of the same sequence that
      // arrives meanwhile finds the first's reservation.
      const nowMs = this.o.clock.nowMs();
      const waits: Promise<void>[] = [];
      const fresh = new Map<number, number[]>();
      let old: { sequence: number; floor: number } | undefined;
      let unconfirmed = false;
      // One (producer, sequence) twice in one request (a cluster merges forwards of concurrent
      // sends into one batch): the later copies are answered from the first.
      const firstOf = items.length > 1 && !increasing(items) ? new Map<string, number>() : undefined;
      const copies: [number, number][] = [];
      for (const [p, idxs] of groups) {
        const w = wins.get(p)!;
        w.expire(nowMs);
        // A batch's usual case, one question for all: one producer's next sequences, none seen.
        if (firstOf === undefined && idxs.length > 1 && consecutive(items, idxs)) {
          const head = items[idxs[0]!]!.producer;
          if (w.allNew(head.id, head.sequence, idxs.length)) {
            fresh.set(p, idxs);
            continue;
          }
        }
        for (const i of idxs) {
          const it = items[i]!;
          if (firstOf !== undefined) {
            const k = `${it.producer.id}:${it.producer.sequence}`;
            const f = firstOf.get(k);
            if (f !== undefined) {
              copies.push([i, f]);
              continue;
            }
            firstOf.set(k, i);
          }
          const l = w.lookup(it.producer.id, it.producer.sequence, nowMs);
          if (l.kind === "stored") {
            if (l.offset >= parts[p]!.log.syncedOffset) unconfirmed = true;
            results[i] = { partition: p, offset: l.offset, duplicate: true };
          } else if (l.kind === "wait") waits.push(l.until);
          else if (l.kind === "old") old ??= { sequence: it.producer.sequence, floor: l.floor };
          else {
            const f = fresh.get(p);
            if (f) f.push(i);
            else fresh.set(p, [i]);
          }
        }
      }
      if (old !== undefined) {
        throw new NaradError(
          "sequence_out_of_window",
          `Sequence ${old.sequence} of producer ${items[0]!.producer.id} is older than the dedupe window of ${topic} (it keeps sequences from ${old.floor} on, and at least the last producers.dedupe_window_ms); nothing was stored, and whether an earlier send of it landed is not known.`,
        );
      }
      if (waits.length > 0) {
        await Promise.all(waits); // the first sends' outcomes; then look again
        continue;
      }
      if (unconfirmed) {
        throw new NaradError("no_quorum", `An earlier send of this sequence is stored on the leader of ${topic} but not yet confirmed by its acks mode; retry (the re-send is answered once it is).`);
      }
      if (fresh.size > 0) await this.appendFresh(topic, parts, items, fresh, wins, append, results);
      for (const [i, f] of copies) results[i] = { partition: results[f]!.partition, offset: results[f]!.offset, duplicate: true };
      const dups = items.length - [...fresh.values()].reduce((n, x) => n + x.length, 0);
      if (dups > 0) this.duplicates?.inc({ topic }, dups);
      return results;
    }
  }

  private async appendFresh(
    topic: string,
    parts: readonly (WindowPartition | undefined)[],
    items: readonly IdempotentItem[],
    fresh: Map<number, number[]>,
    wins: Map<number, DedupeWindow>,
    append: AppendFn,
    results: IdempotentResult[],
  ): Promise<void> {
    const sub: FreshRecord[] = [];
    const subGroups = new Map<number, number[]>();
    const origin: number[] = []; // sub index → item index
    let settle!: () => void;
    const until = new Promise<void>((r) => (settle = r));
    // Partitions whose fresh items are one producer's consecutive sequences: one run each,
    // whose records share one attribute block that the log numbers as it writes them (a block
    // of their own each cost more than the rest of the dedupe work).
    const runs = new Set<number>();
    for (const [p, idxs] of fresh) {
      const w = wins.get(p)!;
      const g: number[] = [];
      const head = items[idxs[0]!]!.producer;
      const run = consecutive(items, idxs);
      if (run) {
        runs.add(p);
        w.reserve(head.id, head.sequence, idxs.length, until);
        const block = producerAttrs(head);
        for (let k = 0; k < idxs.length; k++) {
          const it = items[idxs[k]!]!;
          g.push(sub.length);
          origin.push(idxs[k]!);
          sub.push({ key: typeof it.key === "string" ? Buffer.from(it.key, "utf8") : it.key, payload: it.payload, attrs: block, producerSequence: head.sequence + k });
        }
      } else {
        const attrs = producerAttrsMany(idxs.map((i) => items[i]!.producer));
        for (let k = 0; k < idxs.length; k++) {
          const it = items[idxs[k]!]!;
          w.reserve(it.producer.id, it.producer.sequence, 1, until);
          g.push(sub.length);
          origin.push(idxs[k]!);
          sub.push({ key: typeof it.key === "string" ? Buffer.from(it.key, "utf8") : it.key, payload: it.payload, attrs: attrs[k]! });
        }
      }
      subGroups.set(p, g);
    }
    const assigned = new Map<number, number>();
    const producedAtMs = this.o.clock.nowMs();
    const record = (p: number, base: number) => {
      const w = wins.get(p)!;
      const g = subGroups.get(p)!;
      const head = items[origin[g[0]!]!]!.producer;
      if (runs.has(p)) return w.addRun(head.id, head.sequence, g.length, base, producedAtMs);
      for (let k = 0; k < g.length; k++) {
        const it = items[origin[g[k]!]!]!;
        w.add(it.producer.id, it.producer.sequence, base + k, producedAtMs);
      }
    };
    try {
      const rs = await append(sub, subGroups, (p, base) => assigned.set(p, base));
      for (const [p, base] of assigned) record(p, base);
      for (let j = 0; j < rs.length; j++) results[origin[j]!] = rs[j]!;
    } catch (e) {
      // Records the log assigned and still holds (its append did not stop it) may yet become
      // visible: they stay in the window, so a re-send is never stored beside them. A stopped
      // log is cut back to what was fsynced when reopened: what it assigned is gone.
      for (const [p, base] of assigned) if (parts[p]?.log.failed === null) record(p, base);
      throw e;
    } finally {
      for (const [p, g] of subGroups) {
        const w = wins.get(p)!;
        if (runs.has(p)) {
          w.release(items[origin[g[0]!]!]!.producer.id, until);
          continue;
        }
        let last = "";
        for (const j of g) {
          const id = items[origin[j]!]!.producer.id;
          if (id !== last) w.release(id, until);
          last = id;
        }
      }
      settle();
    }
  }
}
