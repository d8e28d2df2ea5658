// Seeded bugs for calibrating the verification toolkit (`narad verify calibrate`): each exists so
// the checker can prove it catches it (a checker that has never caught a real bug is untested).
// They are turned on only through the environment variable NARAD_TEST_BUGS (a comma-separated
// list), which src/server.ts refuses unless the node runs with --dev or NARAD_TEST_MODE=1, and is
// the only importer of this module. Each is logged loudly at start.
//
// None of them is a name tested in the data path (./faults.ts): a bug that is a storage lie is a
// wrapper of the storage interface the broker is handed (AckLog, PartitionLog, the copy cursors),
// and the others are the hooks of BrokerFaults, which a production broker leaves at NO_FAULTS.

import type { AppendInput, PartitionLog, StoredRecord } from "../storage/types.js";
import { ForwardingAckLog } from "../storage/forwarding-ack-log.js";
import type { SettleAction } from "./broker.js";
import type { CopyCursors } from "./children.js";
import { NO_FAULTS, type BrokerFaults } from "./faults.js";
import type { Partition } from "./partition.js";

export const SEEDED_BUGS = {
  "acks-not-persisted": "acks settle the lease in memory but never reach the ack log",
  "ack-before-fsync": "a produce answers 202 before the fsync that makes it durable",
  "store-on-429": "a produce refused with 429 is stored anyway",
  "early-lapse": "leases lapse after a quarter of the visibility timeout",
  "nack-drops": "a nack settles the message instead of returning it",
  "accept-replaced-handle": "an older receipt handle of a message still settles its live lease",
  "replay-skip": "replay leaves out the second record of every page",
  "redeliver-acked": "one in five first-delivery acks answers 204 but returns the message",
  "child-skip-on-failure": "a copy to a child that fails (its owner or cluster is down) is skipped, not retried",
  "delay-early-after-restart": "a delay child copies records committed before the restart without waiting for the delay",
  "copy-cursors-not-persisted": "child copy cursors reach the disk only on attach and graceful stop, so a kill makes children copy everything again",
  // Replicated partitions (their hooks are src/cluster/replication/faults.ts; fenced-leader-answers is the
  // control plane's option ownsWithoutLease, src/cluster/control-plane/options.ts).
  "follower-ack-before-fsync": "a follower answers the leader's append at once and syncs its log on a five-second timer (JetStream's sync_interval, two minutes by default), so a quorum 202 may rest on copies a power loss takes back",
  "elect-incomplete-follower": "a failover promotes the first live follower, whether or not it holds every acknowledged record",
  "fenced-leader-answers": "a leader whose lease lapsed trusts its cached view and goes on serving: leases, acks and 202s (the owner check skips the lease deadline)",
  "acks-not-replicated": "acks stay on the leader: a failover redelivers every message acked on the old leader",
  // Issue 14: idempotent producers (./producers.ts) and dead letters (./dead-letters.ts).
  "dedupe-forgets-after-restart": "the dedupe window is not rebuilt from the log at start, so a re-send after a restart is stored again",
  "dead-letter-early": "a message moves to its dead-letter topic when the lease of its (max_deliveries - 1)-th delivery ends",
  "delivery-counts-not-persisted": "delivery counts stay in memory: a restart counts every message's deliveries from 0 again",
  "dead-letter-settle-before-copy": "a dead-letter move settles the message on its topic first and writes the dead-letter copy 500 ms later",
} as const;

export type SeededBugName = keyof typeof SEEDED_BUGS;

/** The names in NARAD_TEST_BUGS, or what is wrong with it. */
export function parseSeededBugs(spec: string | undefined): SeededBugName[] | string {
  const names = (spec ?? "").split(",").map((s) => s.trim()).filter(Boolean);
  for (const n of names) if (!(n in SEEDED_BUGS)) return `unknown test bug ${JSON.stringify(n)}; known: ${Object.keys(SEEDED_BUGS).join(", ")}`;
  return names as SeededBugName[];
}

/** The broker's faults with these bugs on (NO_FAULTS when there are none). */
export function seededFaults(names: readonly SeededBugName[]): BrokerFaults {
  if (names.length === 0) return NO_FAULTS;
  const on = new Set<SeededBugName>(names);
  return {
    openedLog: (log) => (on.has("ack-before-fsync") ? new DurableAtOnce(log) : log),
    openedAcks: (acks) => {
      const a = on.has("acks-not-persisted") ? new AcksInMemoryOnly(acks) : acks;
      return on.has("delivery-counts-not-persisted") ? new CountsInMemoryOnly(a) : a;
    },
    openedCursors: (cursors) => (on.has("copy-cursors-not-persisted") ? new CursorsOnlyOnAttachAndClose(cursors) : cursors),
    storesWhenOverloaded: () => on.has("store-on-429"),
    leaseMs: (vt) => (on.has("early-lapse") ? Math.max(1, Math.floor(vt / 4)) : vt),
    // An older handle of the message settles whatever lease is live on it now.
    settleTag: (p, offset, tag) => (on.has("accept-replaced-handle") ? (p.liveTag(offset) ?? tag) : tag),
    settleAction: (action: SettleAction, p: Partition, offset: number, tag: number): SettleAction => {
      // Answers 204, yet the message comes back: one in five first-delivery acks is a nack.
      if (action === "ack" && on.has("redeliver-acked") && offset % 5 === 0 && p.leaseDeliveryCount(offset, tag) === 1) return "nack";
      if (action === "nack" && on.has("nack-drops")) return "ack";
      return action;
    },
    replayPage: (records) => (on.has("replay-skip") && records.length > 2 ? records.filter((_, i) => i !== 1) : records),
    copyFailed: () => (on.has("child-skip-on-failure") ? "skip" : "retry"),
    // A pre-boot record counts as committed long ago, so its delay copy is due at once.
    preBootCommitMarginMs: (margin) => (on.has("delay-early-after-restart") ? -1e12 : margin),
    deadLetterSettlesFirst: () => on.has("dead-letter-settle-before-copy"),
    rebuildsDedupeWindow: () => !on.has("dedupe-forgets-after-restart"),
    // One delivery fewer than the topic allows.
    maxDeliveries: (max) => (on.has("dead-letter-early") && Number.isFinite(max) ? Math.max(1, max - 1) : max),
  };
}

/** acks-not-persisted: an ack settles the offset in memory and never reaches the ack log. */
class AcksInMemoryOnly extends ForwardingAckLog {
  private readonly memAcked = new Set<number>();

  override isAcked(offset: number): boolean {
    return this.inner.isAcked(offset) || this.memAcked.has(offset);
  }

  override ack(offset: number): void {
    this.memAcked.add(offset);
  }

  override ackRange(start: number, end: number): void {
    for (let o = start; o < end; o++) this.memAcked.add(o);
  }

  override settledRanges(rangesMax: number): { floor: number; ranges: [number, number][] } {
    return this.inner.settledRanges(rangesMax); // what reached the ack log: none of this bug's acks
  }
}

/** delivery-counts-not-persisted: counts live in this wrapper's memory, never in the ack log. */
class CountsInMemoryOnly extends ForwardingAckLog {
  private readonly counts = new Map<number, { count: number; dead: boolean }>();

  override deliveries(offset: number): number {
    return this.inner.isAcked(offset) ? 0 : (this.counts.get(offset)?.count ?? 0);
  }

  override deadLetterAsked(offset: number): boolean {
    return !this.inner.isAcked(offset) && this.counts.get(offset)?.dead === true;
  }

  override recordDeliveries(offset: number, count: number, deadLetter = false): void {
    const cur = this.counts.get(offset);
    this.counts.set(offset, { count: Math.max(cur?.count ?? 0, count), dead: deadLetter || cur?.dead === true });
  }

  override forEachDelivery(fn: (offset: number, count: number, deadLetter: boolean) => void): void {
    for (const [offset, c] of this.counts) if (!this.inner.isAcked(offset)) fn(offset, c.count, c.dead);
  }
}

/** ack-before-fsync: an append counts as durable at once, before its fsync. */
class DurableAtOnce implements PartitionLog {
  constructor(private readonly inner: PartitionLog) {}

  get endOffset(): number {
    return this.inner.endOffset;
  }

  get earliestOffset(): number {
    return this.inner.earliestOffset;
  }

  get syncedOffset(): number {
    return this.inner.syncedOffset;
  }

  get pendingSyncBytes(): number {
    return this.inner.pendingSyncBytes;
  }

  get recovery() {
    return this.inner.recovery;
  }

  append(records: AppendInput[], producedAtMs: number): { baseOffset: number; durable: Promise<void> } {
    const { baseOffset, durable } = this.inner.append(records, producedAtMs);
    durable.catch(() => undefined);
    return { baseOffset, durable: Promise.resolve() };
  }

  read(fromOffset: number, maxRecords: number, maxBytes: number): Promise<StoredRecord[]> {
    return this.inner.read(fromOffset, maxRecords, maxBytes);
  }

  maybeRoll(): Promise<void> {
    return this.inner.maybeRoll();
  }

  enforceRetention(retentionMs: number): Promise<number> {
    return this.inner.enforceRetention(retentionMs);
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  get failed(): Error | null {
    return this.inner.failed;
  }

  reopen(): Promise<void> {
    return this.inner.reopen();
  }

  closeIdleFiles(idleMs: number): number {
    return this.inner.closeIdleFiles(idleMs);
  }
}

/**
 * copy-cursors-not-persisted: advanced cursors (and stored lists) stay in memory and reach the
 * cursor file only when a cursor is set at once (an attach or detach) or the file is closed (a
 * graceful stop), so a kill makes children copy everything since the attach again.
 */
class CursorsOnlyOnAttachAndClose implements CopyCursors {
  private readonly cursors = new Map<string, number>();
  private readonly storedOffsets = new Map<string, readonly number[]>();

  constructor(private readonly inner: CopyCursors) {}

  get(child: string): number | undefined {
    return this.cursors.get(child) ?? this.inner.get(child);
  }

  advance(child: string, next: number): void {
    const cur = this.get(child);
    if (cur !== undefined && next <= cur) return;
    this.cursors.set(child, next);
  }

  stored(child: string): readonly number[] {
    return this.storedOffsets.get(child) ?? this.inner.stored(child);
  }

  setStored(child: string, offsets: readonly number[]): void {
    this.storedOffsets.set(child, [...offsets]);
  }

  async setNow(child: string, next: number | undefined): Promise<void> {
    this.handOver();
    await this.inner.setNow(child, next);
  }

  async close(): Promise<void> {
    this.handOver();
    await this.inner.close();
  }

  /** Gives the cursors kept in memory to the file, which writes them with what comes next. */
  private handOver(): void {
    for (const [child, next] of this.cursors) this.inner.advance(child, next);
    for (const [child, offsets] of this.storedOffsets) this.inner.setStored(child, offsets);
    this.cursors.clear();
    this.storedOffsets.clear();
  }
}
