// Child topics: the copy of a parent partition's messages into each attached child.
//
// Each (parent partition, child) pair has a copy cursor: the next parent offset to copy, kept in
// the partition's CursorFile. A copier per parent partition reads durable parent records from the
// lowest cursor, hands each child the records at or past its own cursor, and advances the cursor
// only after the child's copy is durable (local children: the child's fsync; remote children:
// the other cluster's 202). So every message that got a 202 on the parent reaches every child
// attached at that time, even if the owner dies right after the 202: the cursor resumes on
// restart. Copies are at least once: a kill can re-copy the last ~ack_flush_ms of copies (the
// cursor's durability window, the same as the ack log's), a power loss the last ~1.1 s.
//
// Delay children: a record is copied only once its parent commit time + delay has passed, so a
// copy is never visible earlier, restarts included. The commit time of a record committed in this
// boot is the moment the copier saw syncedOffset pass it (an upper bound), and its delay is
// measured on the monotonic clock: a wall clock stepped or slewed forward (NTP, a VM's time sync)
// must not make a copy early. For records committed before this boot only the wall clock can
// compare: their produce time + PRE_BOOT_COMMIT_MARGIN_MS.
//
// A copy that failed in part (a remote push whose messages went to several owners of the other
// cluster, or a cluster's fan-out or delay copy to the owners of the child's partitions, and only
// some stored theirs: the sink throws CopyPartlyStored) is sent again without
// the records known stored, at once the first time, then with the back-off: the copier keeps
// their offsets until the cursor passes them, in memory and in the cursor file on the cursors'
// schedule. The cursor still moves only once every record of the batch is durable on the child.
// After a graceful stop the restarted copier still leaves them out; a kill may forget them, and the
// whole batch is copied again (the kill case above).
//
// Limits: a copier reads at most COPY_BATCH_RECORDS / COPY_BATCH_BYTES a round, so the offsets
// kept per child as stored are at most one batch's; remote pushes back off exponentially from
// 100 ms to REMOTE_BACKOFF_MAX_MS while the other cluster is down. The one timer of a copier (its
// next retry or delay copy) goes through the Scheduler it is handed, so a test can drive it.
//
// Remote children are reached through a RemoteSink (below) that the wiring hands in: the broker
// does not import the SDK (docs/architecture.md, the rooms matrix).

import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import type { Scheduler, Timer } from "../platform/scheduler.js";
import type { StoredRecord } from "../storage/types.js";
import type { BrokerFaults } from "./faults.js";
import type { Partition } from "./partition.js";

export const COPY_BATCH_RECORDS = 1000;
export const COPY_BATCH_BYTES = 4 * 1024 * 1024;
export const REMOTE_BACKOFF_MAX_MS = 10_000;
export const PRE_BOOT_COMMIT_MARGIN_MS = 1000;
/** A push to a remote child waits this long for the other cluster's answer, then fails (and is retried). */
export const REMOTE_PUSH_TIMEOUT_MS = 10_000;
/** Commit-time checkpoints kept per partition (older records fall back to the margin rule). */
const CHECKPOINTS_MAX = 4096;

export type ChildKind = "fanout" | "delay" | "replica" | "remote";

export interface ChildLink {
  topic: string;
  kind: ChildKind;
  delay_ms?: number;
  /** Remote children: the other cluster's URL and credentials. */
  url?: string;
  credentials?: { user: string; password: string };
}

/**
 * Delivers copies to one child; resolves once they are durable there. When some of them are
 * durable there and the others failed, it rejects with CopyPartlyStored.
 */
export type CopySink = (link: ChildLink, records: StoredRecord[]) => Promise<void>;

/**
 * The copy cursors of one parent partition, as the copier uses them: src/storage/cursor-file.ts
 * (CursorFile) is the implementation; a seeded bug may wrap it (./seeded-bugs.ts).
 */
export interface CopyCursors {
  get(child: string): number | undefined;
  /** Advances a cursor in memory; it reaches the disk on the ack log's schedule. */
  advance(child: string, next: number): void;
  /** Parent offsets past the child's cursor already durable on the child (none: empty). */
  stored(child: string): readonly number[];
  /** Replaces the child's stored offsets in memory; they reach the disk with the cursors. */
  setStored(child: string, offsets: readonly number[]): void;
  /** Sets (or with undefined removes) a cursor and makes it durable before resolving. */
  setNow(child: string, next: number | undefined): Promise<void>;
  /** Writes and syncs what is buffered, then closes the file. */
  close(): Promise<void>;
}

/**
 * Pushes copies to children on other clusters (kind "remote"). The broker opens one handle per
 * remote link it knows (attached here, read at start, or applied from the control plane) and
 * releases it when the link goes (detached, its topic deleted or dropped). The implementation
 * (src/remote-children.ts, over the SDK) shares one client and connection pool per URL and user
 * among the handles open on it, and closes it with the last one.
 */
export interface RemoteSink {
  open(link: ChildLink): RemoteChild;
  /** Closes every client (the broker is closing). */
  close(): Promise<void>;
}

export interface RemoteChild {
  /**
   * Produces the records to the remote child; resolves once the other cluster answered 202 for
   * all, rejects with CopyPartlyStored when only some were stored.
   */
  push(records: StoredRecord[]): Promise<void>;
  /** The link is gone; a push after this rejects. */
  release(): Promise<void>;
}

/** For a broker built without one (unit tests): remote links are kept, and their pushes fail (and are retried). */
export const NO_REMOTE_SINK: RemoteSink = {
  open: (link) => ({
    push: () => Promise.reject(new Error(`no remote sink: cannot push to ${link.url ?? "?"} (remote children need the server's wiring)`)),
    release: () => Promise.resolve(),
  }),
  close: () => Promise.resolve(),
};

/** A copy of which only some records are durable on the child: their parent offsets. */
export class CopyPartlyStored extends Error {
  constructor(
    readonly storedOffsets: readonly number[],
    cause: unknown,
  ) {
    super(`${storedOffsets.length} of the copies were stored, the others failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "CopyPartlyStored";
  }
}

interface LinkState {
  backoffMs: number;
  retryAtMono: number;
  copied: number;
  failures: number;
  /** Produce time of the oldest record not yet copied, when known. */
  pendingSinceMs: number | undefined;
  /** Parent offsets at or past the cursor already durable on the child (a copy that failed in part). */
  stored: Set<number>;
}

export interface CopierOptions {
  topic: string;
  partition: Partition;
  cursors: CopyCursors;
  /** The parent's links now (they change with attach and detach). */
  links: () => readonly ChildLink[];
  sink: CopySink;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  faults: BrokerFaults;
}

export class PartitionCopier {
  readonly topic: string;
  readonly partition: Partition;
  readonly cursors: CopyCursors;
  private readonly log: Logger;
  private running = false;
  private again = false;
  private timer: Timer | undefined;
  private closed = false;
  private readonly state = new Map<string, LinkState>();
  /** (first offset not yet seen synced, monotonic time it was seen) checkpoints, ascending. */
  private readonly checkpoints: { below: number; atMono: number }[] = [];
  private lastSynced: number;
  /** The copy round running now, so close() can wait for it. */
  private inFlight: Promise<void> = Promise.resolve();

  constructor(private readonly o: CopierOptions) {
    this.topic = o.topic;
    this.partition = o.partition;
    this.cursors = o.cursors;
    this.log = o.logger;
    this.lastSynced = o.partition.log.syncedOffset;
  }

  /**
   * Per child: copies made since start, lag in messages, failures, and whether the copy is held
   * (a link without a cursor: its cursor file was damaged, partition-opener.ts; the lag is then
   * every retained record, as far as anyone can tell).
   */
  stats(): { child: string; kind: ChildKind; copied: number; lagMessages: number; lagSeconds: number; failures: number; held: boolean }[] {
    const synced = this.partition.log.syncedOffset;
    const now = this.o.clock.nowMs();
    return this.o.links().map((l) => {
      const s = this.state.get(l.topic);
      const known = this.cursors.get(l.topic);
      const cur = known ?? this.partition.log.earliestOffset;
      const lagMessages = Math.max(0, synced - Math.max(cur, this.partition.log.earliestOffset));
      const since = lagMessages > 0 ? s?.pendingSinceMs : undefined;
      return {
        child: l.topic,
        kind: l.kind,
        copied: s?.copied ?? 0,
        lagMessages,
        lagSeconds: since === undefined ? 0 : Math.max(0, (now - since) / 1000),
        failures: s?.failures ?? 0,
        held: known === undefined,
      };
    });
  }

  /** Notes that records became durable, and copies them. */
  kick(): void {
    if (this.closed) return;
    const synced = this.partition.log.syncedOffset;
    if (synced > this.lastSynced) {
      this.checkpoints.push({ below: synced, atMono: this.o.clock.monoMs() });
      if (this.checkpoints.length > CHECKPOINTS_MAX) this.checkpoints.splice(0, this.checkpoints.length - CHECKPOINTS_MAX);
      this.lastSynced = synced;
    }
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = true;
    this.inFlight = this.run().finally(() => {
      this.running = false;
      if (this.again && !this.closed) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** How long until the delay copy of `r` is due (0 or less: now). */
  private dueInMs(r: StoredRecord, delayMs: number): number {
    for (const c of this.checkpoints) if (r.offset < c.below) return c.atMono + delayMs - this.o.clock.monoMs();
    return r.producedAtMs + this.o.faults.preBootCommitMarginMs(PRE_BOOT_COMMIT_MARGIN_MS) + delayMs - this.o.clock.nowMs();
  }

  private schedule(delayMs: number): void {
    if (this.closed) return;
    const at = Math.max(1, Math.ceil(delayMs));
    this.timer?.cancel();
    this.timer = this.o.scheduler.after(at, () => {
      this.timer = undefined;
      this.kick();
    });
  }

  private async run(): Promise<void> {
    const links = this.o.links();
    if (links.length === 0) return;
    const log = this.partition.log;
    let nextWakeMs = Infinity;
    for (const link of links) {
      if (this.closed) return;
      let st = this.state.get(link.topic);
      if (st === undefined) {
        // Copies stored in part before a graceful stop are still known stored (cursor-file.ts).
        st = { backoffMs: 0, retryAtMono: 0, copied: 0, failures: 0, pendingSinceMs: undefined, stored: new Set(this.cursors.stored(link.topic)) };
        this.state.set(link.topic, st);
      }
      const now = this.o.clock.monoMs();
      if (st.retryAtMono > now) {
        nextWakeMs = Math.min(nextWakeMs, st.retryAtMono - now);
        continue;
      }
      let restSent = false;
      for (let rounds = 0; rounds < 64 && !this.closed; rounds++) {
        let cursor = this.cursors.get(link.topic);
        if (cursor === undefined) break; // detached meanwhile
        if (cursor < log.earliestOffset) cursor = log.earliestOffset; // retention removed them first
        const synced = log.syncedOffset;
        if (cursor >= synced) {
          st.pendingSinceMs = undefined;
          break;
        }
        const records = await log.read(cursor, Math.min(COPY_BATCH_RECORDS, synced - cursor), COPY_BATCH_BYTES);
        if (records.length === 0) {
          this.cursors.advance(link.topic, synced);
          break;
        }
        st.pendingSinceMs = records[0]!.producedAtMs;
        let due = records;
        if (link.kind === "delay") {
          const firstLate = records.findIndex((r) => this.dueInMs(r, link.delay_ms!) > 0);
          if (firstLate >= 0) {
            due = records.slice(0, firstLate);
            nextWakeMs = Math.min(nextWakeMs, this.dueInMs(records[firstLate]!, link.delay_ms!));
          }
        }
        if (due.length > 0) {
          // A control record (a replicated partition's epoch marker) is no message: never copied.
          const send = due.filter((r) => r.control !== true && (st.stored.size === 0 || !st.stored.has(r.offset)));
          try {
            if (send.length > 0) await this.o.sink(link, send);
          } catch (e) {
            st.failures++;
            if (this.o.faults.copyFailed() === "skip") {
              this.cursors.advance(link.topic, due[due.length - 1]!.offset + 1);
              break;
            }
            if (e instanceof CopyPartlyStored) {
              for (const o of e.storedOffsets) st.stored.add(o);
              this.cursors.setStored(link.topic, [...st.stored]);
              this.log.warn({ child: link.topic, kind: link.kind, err: e.message, storedKept: st.stored.size }, "copy to child stored in part; sending the rest again");
              // The rest goes again at once, once a round (the other cluster now routes it around
              // the owner that failed), so a graceful stop seldom finds a batch half copied.
              if (!restSent) {
                restSent = true;
                continue;
              }
            }
            st.backoffMs = Math.min(Math.max(100, st.backoffMs * 2), REMOTE_BACKOFF_MAX_MS);
            st.retryAtMono = this.o.clock.monoMs() + st.backoffMs;
            nextWakeMs = Math.min(nextWakeMs, st.backoffMs);
            this.log.warn({ child: link.topic, kind: link.kind, err: (e as Error).message, retryInMs: st.backoffMs }, "copy to child failed; retrying");
            break;
          }
          st.backoffMs = 0;
          st.copied += due.length;
          const next = due[due.length - 1]!.offset + 1;
          this.cursors.advance(link.topic, next);
          if (st.stored.size > 0) {
            for (const o of st.stored) if (o < next) st.stored.delete(o);
            this.cursors.setStored(link.topic, [...st.stored]);
          }
          st.pendingSinceMs = due.length < records.length ? records[due.length]!.producedAtMs : undefined;
        }
        if (due.length < records.length) break; // the rest is not due yet
      }
    }
    if (nextWakeMs < Infinity) this.schedule(nextWakeMs);
    else if (this.o.links().some((l) => (this.cursors.get(l.topic) ?? Infinity) < log.syncedOffset)) this.again = true;
  }

  /** Resolves when the copy round running now (if any) has ended. */
  async settled(): Promise<void> {
    await this.inFlight.catch(() => undefined);
  }

  /**
   * Stops copying. Waits for the round in flight, so a copy made before a graceful stop has its
   * cursor written and synced with the rest: after SIGTERM nothing is copied twice.
   */
  async close(): Promise<void> {
    this.closed = true;
    this.timer?.cancel();
    await this.inFlight.catch(() => undefined);
    await this.cursors.close();
  }
}
