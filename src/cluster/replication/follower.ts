// A follower replica: this node's copy of a partition another node leads. It holds the same
// files an owner would (log, ack log, replica.json) in the partition's directory, takes writes
// only from the leader, and serves nothing to clients; when this node is elected leader the
// files are closed here and opened as an owned partition, unchanged.
//
// What the leader sends, and what the follower promises in return:
// - join (epoch, the leader's history, end and earliest offset): the follower refuses an epoch
//   older than one it has heard of, cuts its log back to what it shares with the leader's (a
//   deposed leader's unacknowledged tail goes here), or, when it ends below the leader's earliest
//   retained offset, starts again empty at that offset. It answers its end.
// - append (epoch, first offset, records): only at exactly its end, only from the epoch it
//   joined; the records are appended and fsynced (group commit, as any log) before it answers
//   its new end. That answer is the leader's evidence that the records are durable here: never
//   sent before the fsync (Jepsen's NATS 2.12.1 analysis: followers that acknowledged before
//   fsync lost acknowledged writes under power loss).
// - acks: the leader's settled offsets, applied to the ack log, which flushes and fsyncs them on
//   its own schedule, as on the leader.
//
// Requests are handled one at a time per replica (the leader sends one at a time anyway).

import type { Logger } from "pino";
import type { CopyCursors } from "../../broker/children.js";
import type { AckLog, PartitionLog, StorageFs } from "../../storage/index.js";
import type { CursorUpdate } from "./leader.js";
import { resetLogDir, truncateLogDir } from "../../storage/index.js";
import type { ShippedRecord } from "./codec.js";
import { NO_REPLICATION_FAULTS, type ReplicationFaults } from "./faults.js";
import { commonPrefix, cutHistory, lastEpoch, readReplicaFile, writeReplicaFile, type EpochEntry } from "./history.js";

/** Why a follower refused a leader's request; the leader acts on the kind. */
export class ReplicaRefusal extends Error {
  constructor(
    /** stale: the sender's epoch is older than one this replica heard of (it was deposed). rejoin: join first. */
    readonly kind: "stale" | "rejoin",
    message: string,
    readonly end: number,
    readonly epoch: number,
  ) {
    super(message);
    this.name = "ReplicaRefusal";
  }
}

export interface ReplicaStatus {
  end: number;
  lastEpoch: number;
  /** The newest epoch heard of. */
  epoch: number;
  earliest: number;
}

export interface FollowerStorage {
  open(): Promise<{ log: PartitionLog; acks: AckLog; cursors: CopyCursors }>;
  fs: StorageFs;
}

export class FollowerReplica {
  private log!: PartitionLog;
  private acks!: AckLog;
  private cursors!: CopyCursors;
  private history: EpochEntry[] = [];
  /** The history of the leader that joined last, whose records every append brings. */
  private leaderHistory: EpochEntry[] = [];
  private epoch = 0;
  /** The epoch that joined last: appends come only from it. */
  private joinedEpoch = 0;
  private chain: Promise<unknown> = Promise.resolve();
  private closed = false;

  private constructor(
    readonly dir: string,
    private readonly storage: FollowerStorage,
    private readonly logger: Logger,
    private readonly faults: ReplicationFaults,
  ) {}

  static async open(dir: string, storage: FollowerStorage, logger: Logger, faults: ReplicationFaults = NO_REPLICATION_FAULTS): Promise<FollowerReplica> {
    const f = new FollowerReplica(dir, storage, logger, faults);
    ({ log: f.log, acks: f.acks, cursors: f.cursors } = await storage.open());
    const file = await readReplicaFile(dir).catch(async (e: unknown) => {
      // A damaged replica.json: the history is unknown, so nothing here can be trusted to match
      // a leader's log; the first join cuts the whole log and copies it again.
      logger.warn({ err: (e as Error).message }, "replica.json is unreadable; this replica will copy its log again from the leader");
      return { epoch: 0, history: [[0, 0]] as EpochEntry[] };
    });
    f.epoch = file.epoch;
    f.history = cutHistory(file.history, f.log.endOffset);
    return f;
  }

  status(): ReplicaStatus {
    return { end: this.log.endOffset, lastEpoch: lastEpoch(this.history, this.log.endOffset), epoch: this.epoch, earliest: this.log.earliestOffset };
  }

  private serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(() => {
      if (this.closed) throw new ReplicaRefusal("rejoin", "this replica is closing", 0, this.epoch);
      return fn();
    });
    this.chain = run.catch(() => undefined);
    return run;
  }

  join(epoch: number, leaderHistory: EpochEntry[], leaderEnd: number, leaderEarliest: number): Promise<number> {
    return this.serially(async () => {
      if (epoch < this.epoch) throw new ReplicaRefusal("stale", `epoch ${epoch} is older than ${this.epoch}, which this replica has heard of`, this.log.endOffset, this.epoch);
      const end = this.log.endOffset;
      const keep = commonPrefix(this.history, end, leaderHistory, leaderEnd);
      if (end < leaderEarliest || keep < this.log.earliestOffset) {
        // Behind the leader's retention (or sharing nothing it still has): start again there.
        await this.reopenAfter(() => resetLogDir(this.storage.fs, this.dir, leaderEarliest));
        this.logger.warn({ end, leaderEarliest }, "this replica's log was behind the leader's retention; it starts again at the leader's earliest offset");
      } else if (keep < end) {
        await this.reopenAfter(() => truncateLogDir(this.storage.fs, this.dir, keep));
        this.logger.warn({ end, keep, dropped: end - keep }, "dropped records the new leader does not have (never acknowledged)");
      }
      this.epoch = epoch;
      this.joinedEpoch = epoch;
      this.leaderHistory = leaderHistory;
      this.history = cutHistory(leaderHistory, this.log.endOffset);
      await writeReplicaFile(this.dir, { epoch, history: this.history });
      return this.log.endOffset;
    });
  }

  append(epoch: number, first: number, records: ShippedRecord[]): Promise<number> {
    return this.serially(async () => {
      if (epoch < this.epoch) throw new ReplicaRefusal("stale", `epoch ${epoch} is older than ${this.epoch}`, this.log.endOffset, this.epoch);
      if (epoch !== this.joinedEpoch) throw new ReplicaRefusal("rejoin", `epoch ${epoch} has not joined this replica`, this.log.endOffset, this.epoch);
      // A log stopped by a failed write (a full disk) is cut back to what it fsynced and opened
      // again once the cause is gone; until then the leader hears an error and retries.
      if (this.log.failed !== null) await this.log.reopen();
      const end = this.log.endOffset;
      if (first !== end) throw new ReplicaRefusal("rejoin", `records start at ${first}, this replica ends at ${end}`, end, this.epoch);
      if (records.length === 0) return end;
      // The history first: a crash after it and before the records leaves entries past the end,
      // cut at the next open; the other order could leave records of no known epoch. The
      // leader's history came whole with its join (its own epoch's entry included).
      const next = cutHistory(this.leaderHistory, end + records.length);
      if (next.length !== this.history.length) {
        this.history = next;
        await writeReplicaFile(this.dir, { epoch: this.epoch, history: this.history });
      }
      // One append per run of one produce time (the log takes one time per append); one fsync.
      let durable: Promise<void> = Promise.resolve();
      let i = 0;
      while (i < records.length) {
        let j = i + 1;
        while (j < records.length && records[j]!.producedAtMs === records[i]!.producedAtMs && records[j]!.control === records[i]!.control) j++;
        const run = records.slice(i, j);
        const a = this.log.append(
          run.map((r) => (r.control === true ? { key: null, payload: r.payload, control: true as const } : r.attrs !== undefined ? { key: r.key, payload: r.payload, attrs: r.attrs } : { key: r.key, payload: r.payload })),
          run[0]!.producedAtMs,
        );
        durable = a.durable;
        i = j;
      }
      if (this.faults.followerAnswersBeforeFsync) {
        durable.catch(() => undefined); // seeded bug: the answer does not wait for the fsync
        return this.log.endOffset;
      }
      await durable; // the last commit covers every earlier one of this request
      return this.log.endOffset;
    });
  }

  /** The leader's acks and copy cursors, applied here; they reach the disk on their own schedules. */
  applyAcks(epoch: number, floor: number, acked: readonly number[], cursors: readonly CursorUpdate[] = [], ranges: readonly (readonly [number, number])[] = [], deliveries: readonly (readonly [number, number, number])[] = []): Promise<void> {
    return this.serially(() => this.applyAcksNow(epoch, floor, acked, cursors, ranges, deliveries));
  }

  private async applyAcksNow(epoch: number, floor: number, acked: readonly number[], cursors: readonly CursorUpdate[], ranges: readonly (readonly [number, number])[], deliveries: readonly (readonly [number, number, number])[]): Promise<void> {
    if (epoch < this.epoch) return;
    if (floor > this.acks.floor) this.acks.raiseFloor(floor);
    for (const [start, end] of ranges) this.acks.ackRange(start, end);
    // Counts before acks: a count of an offset acked in the same batch is then dropped by its ack.
    for (const [o, count, dead] of deliveries) this.acks.recordDeliveries(o, count, dead === 1);
    for (const o of acked) this.acks.ack(o);
    for (const u of cursors) {
      if (u.next === null) {
        await this.cursors.setNow(u.child, undefined);
        continue;
      }
      this.cursors.advance(u.child, u.next);
      this.cursors.setStored(u.child, u.stored);
    }
  }

  private async reopenAfter(change: () => Promise<unknown>): Promise<void> {
    await this.log.close();
    await this.acks.close();
    await this.cursors.close();
    await change();
    ({ log: this.log, acks: this.acks, cursors: this.cursors } = await this.storage.open());
  }

  /** Housekeeping: the follower's segments age out with the topic's retention, as the leader's. */
  async housekeep(retentionMs: number): Promise<void> {
    await this.serially(async () => {
      await this.log.maybeRoll();
      await this.log.enforceRetention(retentionMs);
      if (this.log.earliestOffset > this.acks.floor) this.acks.raiseFloor(this.log.earliestOffset);
    }).catch((e: unknown) => {
      if (!(e instanceof ReplicaRefusal)) this.logger.warn({ err: (e as Error).message }, "follower housekeeping failed");
    });
  }

  async close(): Promise<void> {
    await this.chain;
    if (this.closed) return;
    this.closed = true;
    await this.log.close().catch((e: unknown) => this.logger.error({ err: (e as Error).message }, "closing a follower's log failed"));
    await this.acks.close().catch((e: unknown) => this.logger.error({ err: (e as Error).message }, "closing a follower's ack log failed"));
    await this.cursors.close().catch((e: unknown) => this.logger.error({ err: (e as Error).message }, "closing a follower's copy cursors failed"));
  }
}
