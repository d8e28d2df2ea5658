// One partition's delivery state, over its log and ack log.
//
// Every message in the log below syncedOffset is in exactly one of these states:
//   acked     in the AckLog (below its floor or in its set above)
//   leased    in `leases`, with a deadline and the tag of the delivery that holds it
//   returned  in `returned`: delivered before, available again (nack or lapse), FIFO
//   fresh     at or above `cursor`, never delivered in this boot
//   exhausted in `exhausted`: out of deliveries (max_deliveries) or asked to be dead-lettered, and
//             waiting for its move to the dead-letter topic (./dead-letters.ts); never delivered
//             from here again; settled (acked) only once the move is durable
// Only leased and returned messages cost memory, so a backlog of a million never-delivered
// messages costs nothing here. Leases live in memory only: after a restart every unacked message
// is fresh again (docs/contract.md), but its delivery count is not: a lease that ends without an
// ack records its count in the ack log (on the acks' schedule), so counts survive restarts.
//
// Ordering invariants (docs/architecture.md): a message becomes visible only once fsynced
// (syncedOffset); an ack is recorded in the AckLog before its lease is forgotten.

import assert from "node:assert/strict";
import type { AckLog, PartitionLog, StoredRecord } from "../storage/types.js";
import { MinHeap } from "../platform/heap.js";
import { READ_AHEAD_BYTES, READ_AHEAD_RECORDS, readAheadPool, type ReadAheadPool } from "./read-ahead.js";

/**
 * Delayed messages read before their time and held back, per partition, at most (issue 16 item
 * 13). At the limit fresh messages wait behind them until the earliest comes due: a bound on
 * memory, since the delay itself is in the record and survives a restart.
 */
export const DEFERRED_PER_PARTITION_MAX = 10_000;

/** oldestUnacked(): acked offsets above the floor skipped, at most. */
const OLDEST_SCAN_MAX = 1024;
/** oldestUnacked(): bytes read for the one record (a message is at most 1 MiB). */
const OLDEST_READ_BYTES = 2 * 1_048_576;

export interface Lease {
  tag: number;
  deadlineMs: number; // monotonic
  deliveryCount: number;
}

export interface Taken {
  offset: number;
  tag: number;
  deliveryCount: number;
}

/** Why a receipt handle does not match the live lease. */
export type SettleResult = "ok" | "gone";

export class Partition {
  private cursor: number;
  private readonly leases = new Map<number, Lease>();
  private readonly returned = new Map<number, number>();
  /**
   * Delayed messages taken before their time: offset → when they are due (ms since the epoch,
   * the record's notBefore) and their delivery count so far. Not handed out until due.
   */
  private readonly deferred = new Map<number, { dueMs: number; count: number }>();
  /** Records that failed their checksum: never served (reported in the log at read time). */
  private readonly unreadable = new Set<number>();
  /**
   * Lease deadlines: key the deadline, value the offset, aux the delivery tag. Extended and
   * settled leases leave stale entries, skipped when they come out (their tag or deadline no
   * longer matches the lease) and dropped by a rebuild when they dominate.
   */
  private readonly heap = new MinHeap<number>();
  private tagSeq = 0;
  /**
   * Exhausted messages (see the top): offset → deliveries made. `moving` holds those whose move
   * is under way. The dead-letter rule is `deadLetterMax` deliveries (Infinity: unlimited) while
   * `deadLetters` is on (the topic has a dead-letter topic); set by setDeadLetterRule.
   */
  private readonly exhausted = new Map<number, number>();
  private readonly moving = new Set<number>();
  private deadLetterMax = Number.POSITIVE_INFINITY;
  private deadLetters = false;
  private ruleSet = false;

  /** Counters since boot, for metrics. */
  readonly counts = { delivered: 0, redelivered: 0, acked: 0, nacked: 0, lapsed: 0, extended: 0, deadLettered: 0 };

  /**
   * @param epoch the ownership epoch it was opened at (cluster mode; 0 on a single node).
   * @param firstTag delivery tags continue from here, so a partition closed and opened again in
   *   one boot (moved away and back) never reissues a tag an older handle carries.
   */
  constructor(
    readonly index: number,
    readonly log: PartitionLog,
    readonly acks: AckLog,
    readonly epoch = 0,
    firstTag = 0,
    pool: ReadAheadPool = readAheadPool,
  ) {
    this.cursor = Math.max(acks.floor, log.earliestOffset);
    this.tagSeq = firstTag >>> 0;
    this.ahead = pool.window();
  }

  /** Records read ahead of the cursor, for the consumes that follow (src/broker/read-ahead.ts). */
  private readonly ahead;

  /** The last delivery tag issued. */
  get lastTag(): number {
    return this.tagSeq;
  }

  get inFlight(): number {
    return this.leases.size;
  }

  /** Unacked messages that are durable: available, leased or returned. */
  get backlog(): number {
    const floor = Math.max(this.acks.floor, this.log.earliestOffset);
    return Math.max(0, this.log.syncedOffset - floor - this.acks.ackedAboveFloor);
  }

  /**
   * The oldest unacked durable message (its offset and produce time), or null when every durable
   * message is acked: SQS's ApproximateAgeOfOldestMessage, for metrics and GET /v1/topics/{t}.
   * One record is read when the oldest changed since the last call; acked offsets just above the
   * floor are skipped, at most OLDEST_SCAN_MAX of them (past that the age is of an acked one, an
   * overestimate, until the floor catches up).
   */
  async oldestUnacked(): Promise<{ offset: number; producedAtMs: number } | null> {
    const synced = this.log.syncedOffset;
    let o = Math.max(this.acks.floor, this.log.earliestOffset);
    for (let i = 0; i < OLDEST_SCAN_MAX && o < synced && this.acks.isAcked(o); i++) o++;
    if (o >= synced) return null;
    if (this.oldestMemo?.offset === o) return this.oldestMemo;
    const [r] = await this.log.read(o, 1, OLDEST_READ_BYTES);
    if (r === undefined) return null; // gone by retention meanwhile
    this.oldestMemo = { offset: r.offset, producedAtMs: r.producedAtMs };
    return this.oldestMemo;
  }

  private oldestMemo: { offset: number; producedAtMs: number } | undefined;

  /** Moves leases whose deadline passed back to `returned`. Returns how many lapsed. */
  expire(nowMs: number): number {
    let n = 0;
    const heap = this.heap;
    while (heap.peekKey() <= nowMs) {
      const offset = heap.peekValue()!;
      const tag = heap.peekAux();
      heap.pop();
      const lease = this.leases.get(offset);
      if (lease === undefined || lease.tag !== tag || lease.deadlineMs > nowMs) continue;
      this.leases.delete(offset);
      this.endedUnacked(offset, lease.deliveryCount, false);
      this.counts.lapsed++;
      n++;
    }
    // Extends leave stale entries behind; rebuild when they dominate, so the heap stays bounded.
    if (this.heap.size > 2 * this.leases.size + 1024) this.rebuildHeap();
    return n;
  }

  private rebuildHeap(): void {
    this.heap.clear();
    for (const [offset, l] of this.leases) this.heap.push(l.deadlineMs, offset, l.tag);
  }

  private skipSettledFresh(): void {
    const synced = this.log.syncedOffset;
    const earliest = this.log.earliestOffset;
    if (this.cursor < earliest) this.cursor = earliest;
    while (this.cursor < synced && this.settledOrUnreadable(this.cursor)) this.cursor++;
  }

  private settledOrUnreadable(offset: number): boolean {
    return this.acks.isAcked(offset) || this.unreadable.has(offset);
  }

  /**
   * A lease ended without an ack (lapse, nack, dead_letter=true): its count goes to the ack log,
   * and the message is returned, or exhausted when the dead-letter rule says so.
   */
  private endedUnacked(offset: number, deliveries: number, deadLetter: boolean): void {
    this.acks.recordDeliveries(offset, deliveries, deadLetter);
    if (this.deadLetters && (deadLetter || deliveries >= this.deadLetterMax)) this.exhausted.set(offset, deliveries);
    else this.returned.set(offset, deliveries);
  }

  /**
   * The topic's dead-letter rule (./dead-letters.ts calls it before the partition is served):
   * at most `max` deliveries (Infinity: no limit), moved only while `enabled` (a dead-letter topic
   * is set). A change re-sorts the messages it concerns; the first call also finds the exhausted
   * ones among the counts the ack log recovered.
   */
  setDeadLetterRule(max: number, enabled: boolean): void {
    if (this.ruleSet && max === this.deadLetterMax && enabled === this.deadLetters) return;
    this.deadLetterMax = max;
    this.deadLetters = enabled;
    this.ruleSet = true;
    for (const [offset, count] of this.exhausted) {
      if (this.moving.has(offset) || (enabled && (count >= max || this.acks.deadLetterAsked(offset)))) continue;
      this.exhausted.delete(offset);
      this.returned.set(offset, count);
    }
    if (!enabled) return;
    for (const [offset, count] of this.returned) {
      if (count >= max || this.acks.deadLetterAsked(offset)) {
        this.returned.delete(offset);
        this.exhausted.set(offset, count);
      }
    }
    const earliest = this.log.earliestOffset;
    this.acks.forEachDelivery((offset, count, asked) => {
      if (offset < earliest || offset >= this.log.syncedOffset || this.leases.has(offset) || this.returned.has(offset)) return;
      if (asked || count >= max) this.exhausted.set(offset, count);
    });
  }

  /** Exhausted messages not yet being moved. */
  get exhaustedWaiting(): number {
    return this.exhausted.size - this.moving.size;
  }

  /** Up to `max` exhausted messages to move now (offset and deliveries), marked as moving. */
  takeExhausted(max: number): { offset: number; deliveries: number }[] {
    const out: { offset: number; deliveries: number }[] = [];
    for (const [offset, deliveries] of this.exhausted) {
      if (out.length >= max) break;
      if (this.moving.has(offset)) continue;
      this.moving.add(offset);
      out.push({ offset, deliveries });
    }
    return out;
  }

  /**
   * The move of an exhausted message is durable in the dead-letter topic (or the message is gone:
   * retention, an unreadable record): it is settled here now. `moved` false: it was not moved and
   * is given back, to be tried again.
   */
  finishMove(offset: number, moved: boolean): void {
    this.moving.delete(offset);
    if (!moved) return;
    if (!this.exhausted.delete(offset)) return;
    this.acks.ack(offset);
    this.counts.deadLettered++;
  }

  /** Drops an exhausted message that can no longer be moved (removed by retention meanwhile). */
  dropExhausted(offset: number): void {
    this.moving.delete(offset);
    this.exhausted.delete(offset);
  }

  /** Graceful close: the leases still held end with the process, and their deliveries count. */
  recordLiveDeliveries(): void {
    for (const [offset, l] of this.leases) this.acks.recordDeliveries(offset, l.deliveryCount);
  }

  hasAvailable(): boolean {
    if (this.returned.size > 0) return true;
    this.skipSettledFresh();
    return this.cursor < this.log.syncedOffset;
  }

  /**
   * Leases up to `max` available messages now: returned ones first (oldest first), then fresh
   * ones in offset order. The caller reads their records and then either keeps the leases or
   * calls `release` for any it could not read.
   */
  take(max: number, nowMs: number, visibilityTimeoutMs: number): Taken[] {
    const out: Taken[] = [];
    const deadlineMs = nowMs + visibilityTimeoutMs;
    const earliest = this.log.earliestOffset;
    for (const [offset, count] of this.returned) {
      if (out.length >= max) break;
      this.returned.delete(offset);
      if (offset < earliest || this.settledOrUnreadable(offset)) continue; // retention removed it meanwhile
      if (this.deadLetters && count >= this.deadLetterMax) {
        this.exhausted.set(offset, count); // out of deliveries (the rule changed): moved, not delivered
        continue;
      }
      out.push(this.lease(offset, count + 1, deadlineMs));
      this.counts.redelivered++;
    }
    while (out.length < max && this.deferred.size < DEFERRED_PER_PARTITION_MAX) {
      this.skipSettledFresh();
      if (this.cursor >= this.log.syncedOffset) break;
      const offset = this.cursor++;
      if (this.exhausted.has(offset)) continue;
      // Deliveries made before a restart count (the ack log keeps them).
      const before = this.acks.deliveries(offset);
      if (before > 0 && this.deadLetters && (before >= this.deadLetterMax || this.acks.deadLetterAsked(offset))) {
        this.exhausted.set(offset, before);
        continue;
      }
      out.push(this.lease(offset, before + 1, deadlineMs));
      if (before > 0) this.counts.redelivered++;
    }
    this.counts.delivered += out.length;
    return out;
  }

  private lease(offset: number, deliveryCount: number, deadlineMs: number): Taken {
    if (this.leases.has(offset)) assert.fail(`offset ${offset} leased twice`); // the message is built only on failure
    const tag = (this.tagSeq = (this.tagSeq + 1) >>> 0);
    this.leases.set(offset, { tag, deadlineMs, deliveryCount });
    this.heap.push(deadlineMs, offset, tag);
    return { offset, tag, deliveryCount };
  }

  /**
   * Holds back a message taken before its delay ended (`dueMs`, ms since the epoch): its lease is
   * undone and it is offered again once releaseDue() sees it due.
   */
  defer(offset: number, tag: number, dueMs: number): void {
    const lease = this.leases.get(offset);
    if (lease === undefined || lease.tag !== tag) return;
    this.leases.delete(offset);
    this.counts.delivered--;
    this.deferred.set(offset, { dueMs, count: lease.deliveryCount - 1 });
  }

  /** Makes held-back messages whose time came available; returns when the next one is due (Infinity: none). */
  releaseDue(wallMs: number): number {
    if (this.deferred.size === 0) return Infinity;
    let next = Infinity;
    for (const [offset, d] of this.deferred) {
      if (d.dueMs <= wallMs) {
        this.deferred.delete(offset);
        this.returned.set(offset, d.count);
      } else if (d.dueMs < next) next = d.dueMs;
    }
    return next;
  }

  /** Undoes a lease the caller could not serve. Unreadable records are never offered again. */
  release(offset: number, tag: number, unreadable: boolean): void {
    const lease = this.leases.get(offset);
    if (lease === undefined || lease.tag !== tag) return;
    this.leases.delete(offset);
    if (unreadable) this.unreadable.add(offset);
    else if (lease.deliveryCount > 1) this.returned.set(offset, lease.deliveryCount - 1);
    else {
      // A first delivery that never reached the client: offer it again as if new.
      this.returned.set(offset, 0);
    }
  }

  private live(offset: number, tag: number, nowMs: number): Lease | undefined {
    const lease = this.leases.get(offset);
    if (lease === undefined || lease.tag !== tag) return undefined;
    if (lease.deadlineMs <= nowMs) {
      // Lapsed but not swept yet: settle it as lapsed now so the answer is consistent.
      this.leases.delete(offset);
      this.endedUnacked(offset, lease.deliveryCount, false);
      this.counts.lapsed++;
      return undefined;
    }
    return lease;
  }

  /** Ack: the ack is recorded in the ack log before the lease is forgotten. */
  ack(offset: number, tag: number, nowMs: number): SettleResult {
    if (this.live(offset, tag, nowMs) === undefined) return "gone";
    this.acks.ack(offset);
    this.leases.delete(offset);
    this.counts.acked++;
    return "ok";
  }

  /** The tag of the live lease of an offset, if it is leased. */
  liveTag(offset: number): number | undefined {
    return this.leases.get(offset)?.tag;
  }

  /** The delivery count of the live lease with this tag, if any. */
  leaseDeliveryCount(offset: number, tag: number): number | undefined {
    const l = this.leases.get(offset);
    return l !== undefined && l.tag === tag ? l.deliveryCount : undefined;
  }

  extend(offset: number, tag: number, nowMs: number, visibilityTimeoutMs: number): SettleResult {
    const lease = this.live(offset, tag, nowMs);
    if (lease === undefined) return "gone";
    lease.deadlineMs = nowMs + visibilityTimeoutMs;
    this.heap.push(lease.deadlineMs, offset, tag);
    this.counts.extended++;
    return "ok";
  }

  nack(offset: number, tag: number, nowMs: number): SettleResult {
    const lease = this.live(offset, tag, nowMs);
    if (lease === undefined) return "gone";
    this.leases.delete(offset);
    this.endedUnacked(offset, lease.deliveryCount, false);
    this.counts.nacked++;
    return "ok";
  }

  /**
   * ack ?dead_letter=true: the lease ends and the message is moved to the dead-letter topic now,
   * whatever its count (the caller checked that the topic has one). The ask is kept in the ack
   * log, so a restart before the move is durable moves it then rather than delivering it again.
   */
  deadLetter(offset: number, tag: number, nowMs: number): SettleResult {
    const lease = this.live(offset, tag, nowMs);
    if (lease === undefined || !this.deadLetters) return "gone";
    this.leases.delete(offset);
    this.endedUnacked(offset, lease.deliveryCount, true);
    return "ok";
  }

  /**
   * Purge (POST /v1/topics/{t}/purge): every durable message is settled as if acked, leased or
   * not, by raising the ack floor to the synced offset (one ack-log record; the caller syncs it
   * before answering). Live leases end: their acks answer 410. Returns how many were unacked.
   */
  purge(): number {
    const upTo = this.log.syncedOffset;
    const purged = this.backlog;
    if (upTo > this.acks.floor) this.acks.raiseFloor(upTo);
    for (const offset of this.leases.keys()) if (offset < upTo) this.leases.delete(offset);
    for (const offset of this.returned.keys()) if (offset < upTo) this.returned.delete(offset);
    for (const offset of this.deferred.keys()) if (offset < upTo) this.deferred.delete(offset);
    for (const offset of this.exhausted.keys()) if (offset < upTo && !this.moving.has(offset)) this.exhausted.delete(offset);
    this.rebuildHeap();
    if (this.cursor < upTo) this.cursor = upTo;
    this.ahead.clear();
    this.oldestMemo = undefined;
    return purged;
  }

  /** After retention: forget state below the new earliest offset. */
  afterRetention(): void {
    const earliest = this.log.earliestOffset;
    this.acks.raiseFloor(earliest);
    for (const offset of this.leases.keys()) if (offset < earliest) this.leases.delete(offset);
    for (const offset of this.returned.keys()) if (offset < earliest) this.returned.delete(offset);
    for (const offset of this.deferred.keys()) if (offset < earliest) this.deferred.delete(offset);
    for (const offset of this.unreadable) if (offset < earliest) this.unreadable.delete(offset);
    for (const offset of this.exhausted.keys()) if (offset < earliest && !this.moving.has(offset)) this.exhausted.delete(offset);
    if (this.cursor < earliest) this.cursor = earliest;
    this.ahead.clear();
  }

  /** Lets go of what this partition read ahead (it is being closed). */
  dropReadAhead(): void {
    this.ahead.clear();
  }

  /**
   * The records of taken leases, by offset (a map holding at least those; an offset missing from
   * it could not be read). At once, without a Promise, when the read-ahead window holds them all
   * (a single consume, most of the time: issue 17): the window's own map then, which a fill
   * replaces rather than changes. Otherwise read from the log (readTakenFromLog).
   */
  readTaken(taken: readonly Taken[], maxBytes: number): ReadonlyMap<number, StoredRecord> | Promise<ReadonlyMap<number, StoredRecord>> {
    const earliest = this.log.earliestOffset;
    const window = this.ahead.records;
    for (const x of taken) {
      if (x.offset < earliest || !window.has(x.offset)) return this.readTakenFromLog(taken, maxBytes);
    }
    return window;
  }

  /**
   * Reads the records of taken leases; consecutive offsets share one read. A run that ends just
   * below the cursor (fresh messages, handed out in offset order) reads ahead of it, and later
   * runs are served from that window when it holds them.
   */
  private async readTakenFromLog(taken: readonly Taken[], maxBytes: number): Promise<Map<number, StoredRecord>> {
    const out = new Map<number, StoredRecord>();
    const offsets = taken.map((t) => t.offset).sort((a, b) => a - b);
    const earliest = this.log.earliestOffset;
    let i = 0;
    while (i < offsets.length) {
      let j = i + 1;
      while (j < offsets.length && offsets[j] === offsets[j - 1]! + 1) j++;
      const last = offsets[j - 1]!;
      let from = offsets[i]!;
      while (from <= last) {
        const near = this.ahead.get(from);
        if (near !== undefined && from >= earliest) {
          out.set(from, near);
          from++;
          continue;
        }
        if (last === this.cursor - 1 && last - from + 1 < READ_AHEAD_RECORDS) {
          const upTo = Math.min(from + READ_AHEAD_RECORDS, this.log.syncedOffset);
          const recs = await this.log.read(from, upTo - from, Math.min(maxBytes, READ_AHEAD_BYTES));
          if (recs.length === 0) break;
          this.ahead.fill(recs);
          if (this.ahead.get(from) === undefined) from = recs[0]!.offset; // unreadable ones were skipped
          continue;
        }
        const recs = await this.log.read(from, last - from + 1, maxBytes);
        if (recs.length === 0) break;
        for (const r of recs) if (r.offset >= from && r.offset <= last) out.set(r.offset, r);
        from = recs[recs.length - 1]!.offset + 1;
      }
      i = j;
    }
    return out;
  }
}
