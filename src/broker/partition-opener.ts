// Opens and closes one topic's partitions on this node: the partition's log and ack log (handed
// through the faults' `opened*` hooks, ./faults.ts), its Partition, its copy cursors and copier.
//
// Delivery tags continue across a partition closed and opened again in one boot (cluster mode:
// moved away and back), so a receipt handle of an earlier lease never matches a new one
// (docs/architecture.md, "receipt handles outlive owners"). The last tag of each closed partition
// is kept per topic and incarnation, and dropped when the topic is deleted or dropped from this
// node (`forget`); a topic created again is a new incarnation, whose handles the old ones never
// match (the incarnation is under the handle's MAC). So the map holds at most one number per
// partition of a topic this node knows: bounded by the topics themselves.

import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import type { Scheduler } from "../platform/scheduler.js";
import { CURSOR_FILE_NAME, CursorFile } from "../storage/cursor-file.js";
import { openAckLog, openPartitionLog, type AckLog, type PartitionLog, type StorageFs } from "../storage/index.js";
import { PartitionCopier, type CopyCursors, type CopySink } from "./children.js";
import type { BrokerFaults } from "./faults.js";
import { Partition } from "./partition.js";
import type { Topic } from "./topic.js";

/** An owned replicated partition's parts as replication wraps them (src/cluster/replication). */
export interface ReplicatedParts {
  log: PartitionLog;
  acks: AckLog;
  /** Wraps the copy cursors, so that they reach the followers too. */
  cursors?: (c: CopyCursors) => CopyCursors;
}

export interface PartitionStorageOptions {
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  faults: BrokerFaults;
  segmentBytesMax: number;
  segmentAgeMaxMs: number;
  ackFlushIntervalMs: number;
  consumerOffsetCommitIntervalMs: number;
  powerLoss: boolean;
  /** The filesystem of the partition's files (default node:fs). */
  fs?: StorageFs;
  /** StorageOptions.inlineFdatasync (default true). */
  inlineFdatasync?: boolean;
  /** A partition closed here (its dedupe window goes with it, ./producers.ts). */
  onClosed?: (p: Partition) => void;
  /**
   * Cluster mode: wraps an owned partition of a replicated topic (replication_factor above 1) so
   * that its appends and acks reach its followers (src/cluster/replication).
   */
  replicate?: {
    /** Before the files open: a follower replica of the same files is closed first. */
    prepare(t: Topic, i: number): Promise<void>;
    wrap(t: Topic, i: number, epoch: number, dir: string, log: PartitionLog, acks: AckLog): Promise<ReplicatedParts>;
  };
}

export class PartitionOpener {
  /** Per topic name: the incarnation and the last delivery tag of each of its closed partitions. */
  private readonly lastTags = new Map<string, { incarnation: number; tags: Map<number, number> }>();

  constructor(
    private readonly o: PartitionStorageOptions,
    /** The copy sink of partition i of topic t (children.ts). */
    private readonly sinkFor: (t: Topic, i: number) => CopySink,
  ) {}

  /**
   * Opens the log and ack log in a partition directory (created if need be). A follower replica of
   * a replicated partition keeps the same files (src/cluster/replication), opened through here.
   */
  async openFiles(pdir: string, logger: Logger, logScheduler?: Scheduler): Promise<{ log: PartitionLog; acks: AckLog }> {
    const o = this.o;
    await mkdir(pdir, { recursive: true });
    const log = await openPartitionLog(pdir, {
      clock: o.clock,
      logger,
      segmentBytesMax: o.segmentBytesMax,
      segmentAgeMaxMs: o.segmentAgeMaxMs,
      powerLoss: o.powerLoss,
      // A seeded bug's follower log commits on a timer (src/cluster/replication/faults.ts).
      scheduler: logScheduler ?? o.scheduler,
      fs: o.fs,
      ...(o.inlineFdatasync !== undefined ? { inlineFdatasync: o.inlineFdatasync } : {}),
    });
    const r = log.recovery;
    if (r.truncatedBytes > 0 || r.corruptRecords.length > 0 || r.rebuiltIndexes.length > 0) {
      logger.warn({ recovery: r }, "partition recovered");
    }
    // A part that fails to open (EMFILE, ENOSPC) lets go of the parts opened before it: a
    // failed create must not leak descriptors into the node that goes on.
    let acks: AckLog;
    try {
      acks = await openAckLog(pdir, {
        clock: o.clock,
        logger,
        ackFlushIntervalMs: o.ackFlushIntervalMs,
        ackSyncIntervalMs: o.consumerOffsetCommitIntervalMs,
        powerLoss: o.powerLoss,
        scheduler: o.scheduler,
        fs: o.fs,
      });
    } catch (e) {
      await log.close().catch(() => undefined);
      throw e;
    }
    return { log, acks };
  }

  /** Opens a partition directory's copy cursors (children.cursors). */
  openCursorFile(pdir: string, logger: Logger): Promise<CursorFile> {
    const o = this.o;
    return CursorFile.load(join(pdir, CURSOR_FILE_NAME), {
      ackFlushIntervalMs: o.ackFlushIntervalMs,
      ackSyncIntervalMs: o.consumerOffsetCommitIntervalMs,
      powerLoss: o.powerLoss,
      logger,
      scheduler: o.scheduler,
      fs: o.fs,
    });
  }

  /** Opens partition i of t at `epoch` (0 on a single node). */
  async open(t: Topic, i: number, epoch: number): Promise<void> {
    const o = this.o;
    const pdir = join(t.dir, "partitions", String(i));
    const logger = o.logger.child({ topic: t.meta.name, partition: i });
    const replicated = o.replicate !== undefined && t.meta.replication_factor > 1;
    if (replicated) await o.replicate!.prepare(t, i);
    const files = await this.openFiles(pdir, logger);
    let log = o.faults.openedLog(files.log);
    let acks = o.faults.openedAcks(files.acks);
    let wrapCursors: ((c: CopyCursors) => CopyCursors) | undefined;
    if (replicated) {
      try {
        ({ log, acks, cursors: wrapCursors } = await o.replicate!.wrap(t, i, epoch, pdir, log, acks));
      } catch (e) {
        await log.close().catch(() => undefined);
        await acks.close().catch(() => undefined);
        throw e;
      }
    }
    let cursorFile: CursorFile;
    try {
      cursorFile = await this.openCursorFile(pdir, logger);
    } catch (e) {
      await log.close().catch(() => {});
      await acks.close().catch(() => {});
      throw e;
    }
    const part = new Partition(i, log, acks, epoch, this.firstTag(t, i));
    t.partitions[i] = part;
    const opened = o.faults.openedCursors(cursorFile);
    const cursors = wrapCursors?.(opened) ?? opened;
    // A link without a cursor here means the partition was added after the attach: every
    // record in it was produced after the attach, so copying starts at its beginning. Unless the
    // cursor file was found damaged: then the link's cursor is unknown, and copying from 0 would
    // copy the whole parent again, from the end would skip records owed to the child. The copy
    // to it is held (the copier skips a link without a cursor; narad_child_copy_held_partitions)
    // until an operator acts (docs/operations.md, "A damaged children.cursors").
    for (const l of t.meta.children) {
      if (cursors.get(l.topic) !== undefined) continue;
      if (cursorFile.damage === undefined) cursors.advance(l.topic, 0);
      else logger.warn({ child: l.topic, file: CURSOR_FILE_NAME, damage: cursorFile.damage }, "copy to child held: its copy cursor is unknown (the cursor file was damaged); detach and attach it again, or remove the set-aside file to copy it again from the start (docs/operations.md)");
    }
    const copier = new PartitionCopier({
      topic: t.meta.name,
      partition: part,
      cursors,
      links: () => t.meta.children,
      sink: this.sinkFor(t, i),
      clock: o.clock,
      scheduler: o.scheduler,
      logger: logger.child({ module: "children" }),
      faults: o.faults,
    });
    t.copiers[i] = copier;
    if (t.meta.children.length > 0) copier.kick();
  }

  /** Closes partition i of t if it is open: its copier, log and ack log, flushed and synced. */
  async close(t: Topic, i: number): Promise<void> {
    const p = t.partitions[i];
    const c = t.copiers[i];
    t.partitions[i] = undefined;
    t.copiers[i] = undefined;
    // A cursor file that cannot be written now (a full disk) must not keep the rest from closing.
    if (c !== undefined) await c.close().catch((err: unknown) => this.o.logger.error({ topic: t.meta.name, partition: i, err: (err as Error).message }, "the partition's copy cursors could not be closed cleanly"));
    if (p !== undefined) {
      this.rememberTag(t, i, p.lastTag);
      p.dropReadAhead();
      // The leases still held end here: their deliveries count after the next open (SPEC "Dead letters").
      try {
        p.recordLiveDeliveries();
      } catch (err) {
        this.o.logger.warn({ topic: t.meta.name, partition: i, err: (err as Error).message }, "the delivery counts of live leases could not be recorded");
      }
      // Each part is closed even when another fails: a log stopped by a failed write or fsync
      // rejects its close, and its ack log must still be flushed and synced (nothing the failed
      // log held past its last fsync was ever answered 202).
      const logger = this.o.logger.child({ topic: t.meta.name, partition: i });
      await p.log.close().catch((err: unknown) => logger.error({ err: (err as Error).message }, "the partition's log failed; closed without its unsynced tail"));
      await p.acks.close().catch((err: unknown) => logger.error({ err: (err as Error).message }, "the partition's ack log could not be closed cleanly"));
      this.o.onClosed?.(p);
    }
  }

  /** Closes every open partition of t. */
  async closeAll(t: Topic): Promise<void> {
    for (let i = 0; i < t.partitions.length; i++) await this.close(t, i);
  }

  /** The topic is gone from this node (deleted, dropped, created again): its tags go too. */
  forget(t: Topic): void {
    if (this.lastTags.get(t.meta.name)?.incarnation === t.meta.incarnation) this.lastTags.delete(t.meta.name);
  }

  /** Tags remembered now (for tests of the bound). */
  get rememberedTopics(): number {
    return this.lastTags.size;
  }

  private firstTag(t: Topic, i: number): number {
    const e = this.lastTags.get(t.meta.name);
    return e !== undefined && e.incarnation === t.meta.incarnation ? (e.tags.get(i) ?? 0) : 0;
  }

  private rememberTag(t: Topic, i: number, tag: number): void {
    let e = this.lastTags.get(t.meta.name);
    if (e === undefined || e.incarnation !== t.meta.incarnation) {
      e = { incarnation: t.meta.incarnation, tags: new Map() };
      this.lastTags.set(t.meta.name, e);
    }
    e.tags.set(i, tag);
  }
}
