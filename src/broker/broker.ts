// The broker of one node: topics, their partitions, produce, leases, acks and replay, over the
// storage layer. Pure state and logic: it knows nothing of HTTP; operating errors are NaradErrors
// from the one error table, and the HTTP layer maps them.
//
// The rooms of the broker (docs/architecture.md has the map):
//   broker.ts            this file: the data path (produce, consume, settle, replay), long polls,
//                        the lease sweep
//   broker-types.ts      its options and the types of its answers (re-exported here)
//   node-topics.ts       a single node's topic changes (create, update, delete), limits.partitions
//   housekeeping.ts      stopped logs reopened after a back-off, idle descriptors, rolls,
//                        retention, and the gauges /metrics reads
//   topic.ts             one topic's state and the chain that serialises its metadata changes
//   metadata.ts          where metadata lives: topic.json files (a node), control-plane rows (a cluster)
//   cluster-topics.ts    cluster mode: topics and partitions as the control plane places them here
//   partition-opener.ts  opening and closing a partition's storage, copy cursors and copier
//   partition.ts         one partition's delivery state (leases, acks) over its log and ack log
//   children.ts          the copier of a parent partition into its children; child-links.ts the links
//   faults.ts            the typed fault seam (no-op in production); seeded-bugs.ts its test bugs
//
// Layout of the data directory:
//   node.json                          identity (identity.ts)
//   topics/NAME/topic.json             metadata, written atomically, last step of a create
//   topics/NAME/partitions/P/          segments and ack log of partition P (src/storage)
//   cluster/NAME/INCARNATION/...       cluster mode: the partitions this node owns
//   trash/                             topics being deleted (renamed here first, then removed)
//
// Limits and their answers: bytes waiting for fsync over `pendingSyncBytesMax` → 429 overloaded;
// more than `longPollsMax` waiting long polls → 429 too_many_waiters; a consume batch's payload
// over `consumeBytesMax` → fewer messages in that answer; a create or grow past `partitionsMax`
// partitions on this node → 409 partitions_limit (nothing is made).
// Idempotent producers' dedupe windows are bounded in ./producers.ts (producers.*).
//
// Storage that fails (docs/operations.md, "A full disk, no descriptors"). A create or grow that
// fails midway on an errno (ENOSPC, EMFILE, ...) is undone, files and all, and answers 503
// storage_unavailable. A partition log stopped by a failed write or fsync is reopened
// (PartitionLog.reopen: cut back to the fsynced records, recovered from disk) by the next produce
// to it or by housekeeping, after a back-off from FAILED_LOG_RETRY_MS_MIN doubling to
// FAILED_LOG_RETRY_MS_MAX; until then a produce to it answers 503 storage_unavailable before it
// takes any offset, and `notReady()` names it (/readyz). Idle partitions let their descriptors go
// after `idleCloseMs` (housekeeping), and open them again on their next use.
//
// Timers go through the Scheduler handed in (src/platform/scheduler.ts): the lease sweep every
// LEASE_SWEEP_INTERVAL_MS, housekeeping, each long poll's end, and each copier's retry or delay.
// A test hands in a ManualScheduler and drives a lease lapse by advancing it.
//
// Cluster mode (`opts.cluster` set): the topics' metadata lives in the control plane, not in
// topic.json (./cluster-topics.ts). Every owner write (append, lease, ack, extend, nack) first
// checks `cluster.ownsPartition(topic, p, epoch)` (docs/architecture.md, "epoch check before any
// owner write"), and a produce checks it again after its fsync: a 202 is given only while the
// node still owns the partition.

import type { Logger } from "pino";
import type { PartitionStatsJson, TopicStatsJson } from "../protocol/wire.js";
import { NaradError } from "../protocol/errors.js";
import { DEFAULTS, type ChildJson, type CreateTopicRequest, type UpdateTopicRequest } from "../protocol/wire.js";
import { systemScheduler, type Scheduler, type Timer } from "../platform/scheduler.js";
import type { AppendInput, StoredRecord } from "../storage/types.js";
import { encodeAttrs } from "../storage/attrs.js";
import { ChildLinks } from "./child-links.js";
import { NO_REMOTE_SINK, type ChildLink } from "./children.js";
import { ClusterTopics } from "./cluster-topics.js";
import { DeadLetterMover, originOf } from "./dead-letters.js";
import { NO_FAULTS, type BrokerFaults } from "./faults.js";
import { HandleCodec, type VerifiedHandle } from "./handles.js";
import { ControlPlaneRows, emptyTrash, TopicFiles, type MetadataStore } from "./metadata.js";
import { BrokerMetrics, SETTLE_ACTIONS, SETTLE_RESULTS, type PathCounts } from "./metrics.js";
import { Housekeeping } from "./housekeeping.js";
import { errnoOf, NodeTopics } from "./node-topics.js";
import { PartitionOpener } from "./partition-opener.js";
import { DEDUPE_ENTRIES_MAX_DEFAULT, DEDUPE_WINDOW_MS_DEFAULT, DedupeWindows, idempotentGroups, idempotentPartition, producerAttrs, WINDOW_SEQUENCES_DEFAULT, type IdempotentItem, type ProducerRef, type WindowLimits } from "./producers.js";

export type { ReplicatedParts } from "./partition-opener.js";
import type { Partition, Taken } from "./partition.js";
import { groupByPartition, keyPartition } from "./partitioner.js";
import { Topic, type TopicInfo, type TopicOwner, type Waiter } from "./topic.js";

export type { ClusterTopicMeta } from "./cluster-topics.js";

/** How often leases past their deadline are returned (and the long polls they can serve woken). */
export const LEASE_SWEEP_INTERVAL_MS = 50;
export { FAILED_LOG_RETRY_MS_MAX, FAILED_LOG_RETRY_MS_MIN } from "./housekeeping.js";
/** Default of storage.idle_close_ms. */
export const IDLE_CLOSE_MS_DEFAULT = 60_000;

/** Produce items as records, with their attribute block when they have headers or a delay. */
function toAppendInputs(items: readonly ProduceItem[], nowMs: number): { key: Buffer | null; payload: Buffer; attrs?: Buffer }[] {
  return items.map((it) => {
    const key = it.key === null ? null : Buffer.from(it.key, "utf8");
    // The broker's own appends (a dead letter's origin) bring their block whole.
    if (it.attrs !== undefined) return { key, payload: it.payload, attrs: it.attrs };
    if (it.headers === undefined && it.delayMs === undefined) return { key, payload: it.payload };
    const attrs = encodeAttrs({
      ...(it.headers !== undefined ? { headers: it.headers } : {}),
      ...(it.delayMs !== undefined ? { notBeforeMs: nowMs + it.delayMs } : {}),
    });
    return attrs === null ? { key, payload: it.payload } : { key, payload: it.payload, attrs };
  });
}

/** A round of tryConsume handing out what it took: the deliveries so far, the answer's bytes left, when the next delayed message is due. */
interface Handout {
  out: Delivery[];
  budget: number;
  wall: number;
  nextDue: number;
}

/** consumeOne's answer from tryConsume's (a function made once, not a closure a request). */
function firstOrNull(ds: Delivery[]): Delivery | null {
  return ds.length === 0 ? null : ds[0]!;
}

/** A settle action's index in SETTLE_ACTIONS (PathCounts.settled). */
const SETTLE_ACTION_INDEX = Object.fromEntries(SETTLE_ACTIONS.map((a, i) => [a, i])) as Record<SettleAction, number>;

/** tryConsume: takes again after holding back delayed messages, at most this many times a call. */
const DEFER_ROUNDS_MAX = 16;

// Every type of broker-types.ts is the broker's own, as its callers import them from here.
export * from "./broker-types.js";
import {
  MESSAGE_OVERHEAD_BYTES,
  messagesBytesEstimate,
  recordAttrs,
  type BrokerOptions,
  type Delivery,
  type JoinedCommit,
  type ProduceItem,
  type ProduceOneDone,
  type ReplayResult,
  type SettleAction,
  type SettleStatus,
} from "./broker-types.js";

export class Broker {
  readonly metrics: BrokerMetrics;
  /** Cluster mode: the topics and partitions the control plane places here (src/cluster/ownership.ts). */
  readonly placement: ClusterTopics;
  private readonly topics = new Map<string, Topic>();
  private readonly codec: HandleCodec;
  private readonly log: Logger;
  private readonly scheduler: Scheduler;
  private readonly faults: BrokerFaults;
  private readonly store: MetadataStore;
  private readonly partitions: PartitionOpener;
  private readonly links: ChildLinks;
  /** Idempotent producers' dedupe windows, one per open partition (./producers.ts). */
  readonly dedupe: DedupeWindows;
  private readonly deadLetters: DeadLetterMover;
  private waiterCount = 0;
  private pendingSyncBytes = 0;
  /** A single node's topic changes, and limits.partitions (./node-topics.ts). */
  private readonly nodeTopics: NodeTopics;
  /** Housekeeping, stopped logs' reopen back-off, the gauges (./housekeeping.ts). */
  private readonly upkeep: Housekeeping;
  private housekeeping: Timer | undefined;
  private sweeper: Timer | undefined;
  private closed = false;

  private constructor(readonly opts: BrokerOptions) {
    this.log = opts.logger.child({ module: "broker" });
    this.scheduler = opts.scheduler ?? systemScheduler;
    this.faults = opts.faults ?? NO_FAULTS;
    this.codec = new HandleCodec(opts.secret, opts.nodeNum, opts.bootSeq, opts.bootId);
    this.upkeep = new Housekeeping({ topics: this.topics, clock: opts.clock, logger: this.log, idleCloseMs: opts.idleCloseMs ?? IDLE_CLOSE_MS_DEFAULT });
    this.metrics = new BrokerMetrics({ topicGauges: () => this.upkeep.topicGauges(), childGauges: () => this.upkeep.childGauges(), oldestUnackedAges: () => this.upkeep.oldestUnackedAges() });
    this.dedupe = new DedupeWindows({ clock: opts.clock, scheduler: this.scheduler, logger: this.log, limits: opts.dedupe ?? DEDUPE_DEFAULTS, rebuildFromLog: this.faults.rebuildsDedupeWindow() });
    this.dedupe.registerMetrics(this.metrics.registry);
    this.store = opts.cluster === undefined ? new TopicFiles(opts.dataDir, this.log, opts.userIdOf) : new ControlPlaneRows(opts.dataDir, this.log);
    const topic = (name: string) => this.topic(name);
    this.links = new ChildLinks({
      topics: this.topics,
      store: this.store,
      remote: opts.remote ?? NO_REMOTE_SINK,
      cluster: opts.cluster,
      metrics: this.metrics,
      logger: this.log,
      topic,
      appendTo: (t, items) => this.appendTo(t, items),
    });
    this.deadLetters = new DeadLetterMover({
      clock: opts.clock,
      scheduler: this.scheduler,
      logger: this.log,
      metrics: this.metrics,
      faults: this.faults,
      owns: (t, p) => this.owns(t, p),
      append: async (name, items, sources) => {
        if (opts.cluster !== undefined) return opts.cluster.appendDeadLetters(name, items, sources);
        await this.appendTo(this.topic(name), items);
      },
    });
    this.partitions = new PartitionOpener(
      {
        clock: opts.clock,
        scheduler: this.scheduler,
        logger: opts.logger,
        faults: this.faults,
        segmentBytesMax: opts.segmentBytesMax,
        segmentAgeMaxMs: opts.segmentAgeMaxMs,
        ackFlushIntervalMs: opts.ackFlushIntervalMs,
        consumerOffsetCommitIntervalMs: opts.consumerOffsetCommitIntervalMs,
        powerLoss: opts.powerLoss,
        fs: opts.storageFs,
        ...(opts.inlineFdatasync !== undefined ? { inlineFdatasync: opts.inlineFdatasync } : {}),
        onClosed: (p) => this.dedupe.closed(p),
        replicate:
          opts.cluster?.replicate === undefined
            ? undefined
            : {
                prepare: (t, i) => opts.cluster!.replicate!.prepare(t.meta.name, i),
                wrap: (t, i, epoch, dir, log, acks) =>
                  opts.cluster!.replicate!.wrap({
                    meta: t.meta,
                    partition: i,
                    epoch,
                    dir,
                    log,
                    acks,
                    onVisible: () => {
                      this.wake(t);
                      if (t.meta.children.length > 0) t.copiers[i]?.kick();
                    },
                  }),
              },
      },
      (t, i) => this.links.sinkFor(t, i),
    );
    this.nodeTopics = new NodeTopics({
      topics: this.topics,
      store: this.store,
      partitions: this.partitions,
      links: this.links,
      logger: this.log,
      clock: opts.clock,
      defaults: { partitions: opts.defaultPartitions, visibilityTimeoutMs: opts.defaultVisibilityTimeoutMs, retentionMs: opts.defaultRetentionMs },
      partitionsMax: opts.partitionsMax ?? Number.MAX_SAFE_INTEGER,
      topic,
      assertOpen: () => this.assertOpen(),
      endWaiters: (t) => this.endWaiters(t),
      deleted: (name) => this.upkeep.topicDeleted(name),
    });
    this.placement = new ClusterTopics({
      topics: this.topics,
      store: this.store,
      partitions: this.partitions,
      links: this.links,
      logger: this.log,
      clusterMode: opts.cluster !== undefined,
      topic,
      owns: (t, p) => this.owns(t, p),
      notOwner,
      endWaiters: (t) => this.endWaiters(t),
      wake: (t) => this.wake(t),
      assertOpen: () => this.assertOpen(),
    });
  }

  static async open(opts: BrokerOptions): Promise<Broker> {
    const b = new Broker(opts);
    await emptyTrash(opts.dataDir);
    for (const meta of await b.store.load()) {
      const t = new Topic(meta, b.store.dirOf(meta.name, meta.incarnation));
      b.links.syncRemotes(t);
      for (let i = 0; i < meta.partitions; i++) await b.partitions.open(t, i, 0);
      b.topics.set(meta.name, t);
      b.nodeTopics.adopt(meta.partitions);
    }
    // A start never refuses the topics it has; the limit stops only new ones.
    if (b.nodeTopics.partitionsHeld > b.partitionsMax) {
      b.log.warn({ partitions: b.nodeTopics.partitionsHeld, partitionsMax: b.partitionsMax }, "this node holds more partitions than limits.partitions; creates and grows are refused until topics are deleted");
    }
    b.housekeeping = b.scheduler.every(opts.housekeepingIntervalMs, () => void b.upkeep.run());
    b.sweeper = b.scheduler.every(LEASE_SWEEP_INTERVAL_MS, () => b.sweepLeases());
    return b;
  }

  /** The epoch check before an owner write; always true on a single node. */
  private owns(t: Topic, p: Partition): boolean {
    return this.opts.cluster === undefined || this.opts.cluster.ownsPartition(t.meta.name, p.index, p.epoch);
  }

  private topic(name: string): Topic {
    const t = this.topics.get(name);
    if (t === undefined || t.deleted) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(name)} does not exist; create it first.`);
    return t;
  }

  // ---- topics (a single node; a cluster's are in the control plane) ----------------------------

  listTopics(): TopicInfo[] {
    return [...this.topics.values()].filter((t) => !t.deleted).map((t) => t.toJson()).sort((a, b) => a.name.localeCompare(b.name));
  }

  getTopic(name: string): TopicInfo {
    return this.topic(name).toJson();
  }

  /** Backlog, in-flight leases and the oldest unacked age of the topic's open partitions (issue 16 item 12). */
  async topicStats(name: string): Promise<TopicStatsJson> {
    const t = this.topic(name);
    const mono = this.opts.clock.monoMs();
    const now = this.opts.clock.nowMs();
    const partitions: PartitionStatsJson[] = [];
    for (const p of t.open()) {
      p.expire(mono); // leases past their deadline are not in flight
      const oldest = await p.oldestUnacked().catch(() => null);
      partitions.push({ partition: p.index, backlog: p.backlog, in_flight: p.inFlight, oldest_unacked_age_ms: oldest === null ? 0 : Math.max(0, now - oldest.producedAtMs) });
    }
    return {
      backlog: partitions.reduce((s, p) => s + p.backlog, 0),
      in_flight: partitions.reduce((s, p) => s + p.in_flight, 0),
      oldest_unacked_age_ms: partitions.reduce((m, p) => Math.max(m, p.oldest_unacked_age_ms), 0),
      partitions,
    };
  }

  /** Settles every durable message of the topic's open partitions; resolves once the ack logs synced it. */
  async purgeTopic(name: string): Promise<number> {
    this.assertOpen();
    const t = this.topic(name);
    let purged = 0;
    for (const p of t.open()) purged += p.purge();
    await Promise.all(t.open().map((p) => p.acks.flushAndSync()));
    this.log.info({ topic: name, purged }, "topic purged");
    return purged;
  }

  /** 404 topic_not_found unless the topic exists (the check before a produce reads its body). */
  assertTopic(name: string): void {
    this.topic(name);
  }

  /** limits.partitions of this node. */
  get partitionsMax(): number {
    return this.opts.partitionsMax ?? Number.MAX_SAFE_INTEGER;
  }

  async createTopic(req: CreateTopicRequest, owner: TopicOwner | null): Promise<TopicInfo> {
    return this.nodeTopics.create(req, owner);
  }

  updateTopic(name: string, req: UpdateTopicRequest): Promise<TopicInfo> {
    return this.nodeTopics.update(name, req);
  }

  deleteTopic(name: string): Promise<void> {
    return this.nodeTopics.delete(name);
  }

  // ---- child topics (./child-links.ts) ----------------------------------------------------------

  listChildren(parent: string): ChildJson[] {
    return this.topic(parent).toJson().children;
  }

  /** Attaches a child (single node): cursors before links (docs/contract.md, docs/architecture.md). */
  attachChild(parentName: string, link: ChildLink): Promise<ChildJson> {
    this.assertOpen();
    return this.links.attach(parentName, link);
  }

  detachChild(parentName: string, childName: string): Promise<void> {
    this.assertOpen();
    return this.links.detach(parentName, childName);
  }

  // ---- produce --------------------------------------------------------------------------------

  /**
   * Cluster mode: appends every item to one partition this node owns, and answers only if it
   * still owns it once the fsync returned (fencing: docs/architecture.md). NaradError not_owner
   * (definite: nothing was written) when it does not own the partition now; ownership_lost
   * (indefinite) when it lost it while the write was in flight.
   */
  async produceTo(topicName: string, partition: number, items: ProduceItem[]): Promise<{ partition: number; offset: number; duplicate?: true }[]> {
    this.assertOpen();
    const t = this.topic(topicName);
    const p = t.partitions[partition];
    if (p === undefined || !this.owns(t, p)) throw notOwner(topicName, partition);
    const bytes = messagesBytesEstimate(items);
    if (this.pendingSyncBytes + bytes > this.opts.pendingSyncBytesMax && this.pendingSyncBytes > 0) {
      throw new NaradError("overloaded", undefined, { retryAfterS: 1 });
    }
    const groups = new Map([[partition, items.map((_, i) => i)]]);
    // One clock reading for the produce time and a delay's not-before, so a delayed message is
    // never due before its produce time plus the delay.
    const nowMs = this.opts.clock.nowMs();
    const results = items[0]?.producer !== undefined ? await this.appendIdempotent(t, items, groups) : await this.appendGroups(t, toAppendInputs(items, nowMs), groups, undefined, nowMs);
    if (!this.owns(t, p)) {
      throw new NaradError("ownership_lost", `This node lost its lease on ${topicName}/${partition} while the write was in flight; the message may or may not be stored.`);
    }
    (t.producedCounter ??= this.metrics.produced.labels(topicName)).inc(items.length);
    return results;
  }

  /** Appends the items, resolves once they are all durable; results in request order. */
  async produce(topicName: string, items: ProduceItem[]): Promise<{ partition: number; offset: number; duplicate?: true }[]> {
    this.assertOpen();
    const t = this.topic(topicName);
    const bytes = messagesBytesEstimate(items);
    const overloaded = this.pendingSyncBytes + bytes > this.opts.pendingSyncBytesMax && this.pendingSyncBytes > 0;
    if (overloaded && !this.faults.storesWhenOverloaded()) {
      throw new NaradError("overloaded", undefined, { retryAfterS: 1 });
    }
    const results =
      items[0]?.producer !== undefined
        ? await this.appendIdempotent(t, items, idempotentGroups(items, t.partitions.length))
        : await this.appendToAt(t, items);
    if (overloaded) throw new NaradError("overloaded", undefined, { retryAfterS: 1 }); // reached only when the faults store it anyway
    (t.producedCounter ??= this.metrics.produced.labels(topicName)).inc(items.length);
    return results;
  }

  /**
   * Appends to a topic's partitions and resolves once every record is durable (fsync before
   * 202: docs/architecture.md). Used by produce and by copies into child topics.
   */
  /** appendTo with one clock reading for the produce time and a delay's not-before. */
  private appendToAt(t: Topic, items: readonly ProduceItem[]): Promise<{ partition: number; offset: number }[]> {
    const nowMs = this.opts.clock.nowMs();
    return this.appendTo(t, toAppendInputs(items, nowMs), nowMs);
  }

  private async appendTo(t: Topic, items: { key: Buffer | null; payload: Buffer; attrs?: Buffer }[], nowMs?: number): Promise<{ partition: number; offset: number }[]> {
    const n = t.partitions.length;
    // Unkeyed messages of one request go together to the current run's partition (a sticky
    // partitioner, as Kafka's producer has: ./partitioner.ts): one append and one fdatasync per
    // request, and successive requests share a partition's group commits until the run is full.
    const groups = groupByPartition(items.map((it) => it.key), n, t.unkeyed.forItems(n, items));
    return this.appendGroups(t, items, groups, undefined, nowMs);
  }

  /**
   * An idempotent produce (./producers.ts): duplicates answered from the partitions' dedupe
   * windows, the rest appended with their producer attribute. Never routed elsewhere.
   */
  private appendIdempotent(t: Topic, items: ProduceItem[], groups: Map<number, number[]>): Promise<{ partition: number; offset: number; duplicate?: true }[]> {
    // The dedupe window writes each record's producer attribute itself: headers and a delay are
    // not carried on this path yet (refused rather than dropped).
    for (const it of items) {
      if (it.headers !== undefined || it.delayMs !== undefined) {
        return Promise.reject(new NaradError("not_implemented", "Headers and a delay do not go with an idempotent produce yet; nothing was stored."));
      }
    }
    // Every item has a producer when the first has (ProduceItem.producer); taken as they are.
    return this.dedupe.produce(t.meta.name, t.partitions, items as IdempotentItem[], groups, (sub, g, onAssigned) => this.appendGroups(t, sub, g, onAssigned));
  }

  /**
   * Appends each group to its partition (which must be open) and waits for every fsync.
   * `onAssigned` hears each partition's base offset as its log assigns it (./producers.ts).
   */
  private async appendGroups(
    t: Topic,
    items: AppendInput[],
    groups: Map<number, number[]>,
    onAssigned?: (partition: number, baseOffset: number) => void,
    /** The produce time (default: now). */
    nowMs?: number,
  ): Promise<{ partition: number; offset: number }[]> {
    const bytes = messagesBytesEstimate(items);
    const now = nowMs ?? this.opts.clock.nowMs();
    const started = this.opts.clock.monoMs();
    const results = new Array<{ partition: number; offset: number }>(items.length);
    const durables: Promise<void>[] = [];
    // A stopped log is reopened here when its back-off is over; one still stopped refuses the
    // whole request before any partition takes an offset, so the refusal is definite.
    for (const p of groups.keys()) {
      const part = t.partitions[p];
      if (part !== undefined && part.log.failed !== null) await this.upkeep.reopenIfDue(t, part);
    }
    for (const p of groups.keys()) {
      const part = t.partitions[p];
      if (part === undefined) throw notOwner(t.meta.name, p); // closed while a reopen was awaited
      if (part.log.failed !== null) {
        throw new NaradError("storage_unavailable", `Partition ${p} of topic ${t.meta.name} stopped after a failed write (${errnoOf(part.log.failed)}); it is reopened once its disk takes writes again. Nothing was written.`);
      }
    }
    for (const [p, idxs] of groups) {
      const { baseOffset, durable } = t.partitions[p]!.log.append(
        idxs.map((i) => items[i]!),
        now,
      );
      idxs.forEach((i, j) => (results[i] = { partition: p, offset: baseOffset + j }));
      onAssigned?.(p, baseOffset);
      durables.push(durable);
    }
    this.pendingSyncBytes += bytes;
    try {
      await Promise.all(durables); // fsync before 202 (docs/architecture.md)
    } catch (e) {
      throw this.appendFailed(t, groups.keys(), e);
    } finally {
      this.pendingSyncBytes -= bytes;
    }
    this.appendDurable(t, groups.keys(), started);
    return results;
  }

  /** What an append whose fsync failed answers; a partition whose log stopped starts its back-off. */
  private appendFailed(t: Topic, partitions: Iterable<number>, e: unknown): NaradError {
    // A replicated partition answers for its copies (no_quorum: the followers did not confirm
    // in time); anything else is this node's disk.
    if (e instanceof NaradError) return e;
    this.log.error({ err: (e as Error).message, topic: t.meta.name }, "append failed");
    for (const p of partitions) {
      const part = t.partitions[p];
      if (part !== undefined && part.log.failed !== null) this.upkeep.noteStopped(t, part);
    }
    return new NaradError("storage_failed");
  }

  /** After an append is durable: its commit time, the long polls it can serve, the children's copiers. */
  private appendDurable(t: Topic, partitions: Iterable<number>, startedMono: number): void {
    this.metrics.commitLatency.observe((this.opts.clock.monoMs() - startedMono) / 1000);
    this.wake(t);
    if (t.meta.children.length > 0) for (const p of partitions) t.copiers[p]?.kick();
  }

  /**
   * One plain message (no producer id, headers or delay) on the single node, without an await:
   * produce() for a one-item request, checked and appended now, `done` told once the message is
   * durable (fsync before 202: docs/architecture.md) or why it was refused. The HTTP single
   * produce's path (issue 17: produce() cost it seven awaits, a Promise.all and a Map a request).
   * What produce() refuses before storing (topic_not_found, overloaded, shutting_down) is thrown
   * here; a partition whose log stopped takes produce() itself, which reopens it when due.
   */
  produceOne(topicName: string, key: string | null, payload: Buffer, done: ProduceOneDone): void {
    this.assertOpen();
    const t = this.topic(topicName);
    const bytes = payload.length + (key?.length ?? 0) + MESSAGE_OVERHEAD_BYTES;
    const overloaded = this.singleOverloaded(bytes);
    const n = t.partitions.length;
    const p = key === null ? t.unkeyed.next(n, 1, payload.length) : keyPartition(key, n);
    const part = t.partitions[p];
    if (overloaded || part === undefined || part.log.failed !== null) {
      this.produce(topicName, [{ key, payload }]).then((r) => done(null, r[0]!), (e: unknown) => done(e));
      return;
    }
    const { baseOffset, durable } = part.log.append([{ key: key === null ? null : Buffer.from(key, "utf8"), payload }], this.opts.clock.nowMs());
    this.joinCommit(t, p, durable, bytes);
    durable.then(
      () => done(null, { partition: p, offset: baseOffset }),
      (e: unknown) => done(this.appendFailed(t, [p], e)),
    );
  }

  /**
   * One idempotent message on the single node, without an await: produceOne's path, for the
   * usual case of a (producer, sequence) its partition's built window has never seen, which the
   * window reserves while the message is appended with its producer attribute
   * (DedupeWindows.appendOne). Every other case (a duplicate, a send of it in flight, a sequence
   * below the window, a window not built yet, a stopped log, overload) goes through produce().
   */
  produceOneIdempotent(topicName: string, key: string | null, payload: Buffer, producer: ProducerRef, done: ProduceOneDone): void {
    this.assertOpen();
    const t = this.topic(topicName);
    const bytes = payload.length + (key?.length ?? 0) + MESSAGE_OVERHEAD_BYTES;
    const overloaded = this.singleOverloaded(bytes);
    const n = t.partitions.length;
    const p = key === null ? idempotentPartition(producer.id, producer.sequence, n) : keyPartition(key, n);
    const part = t.partitions[p];
    const now = this.opts.clock.nowMs();
    const placed =
      overloaded || part === undefined || part.log.failed !== null
        ? null
        : this.dedupe.appendOne(part, producer, now, () => {
            const r = part.log.append([{ key: key === null ? null : Buffer.from(key, "utf8"), payload, attrs: producerAttrs(producer) }], now);
            this.joinCommit(t, p, r.durable, bytes);
            return r;
          });
    if (placed === null) {
      this.produce(topicName, [{ key, payload, producer }]).then((r) => done(null, r[0]!), (e: unknown) => done(e));
      return;
    }
    placed.durable.then(
      () => done(null, { partition: p, offset: placed.baseOffset }),
      (e: unknown) => done(this.appendFailed(t, [p], e)),
    );
  }

  /**
   * Whether a single produce of `bytes` finds the bytes waiting for fsync at their limit: thrown as
   * 429 overloaded, unless a seeded fault stores it anyway (then true: it takes produce(), which
   * stores it and answers 429).
   */
  private singleOverloaded(bytes: number): boolean {
    const overloaded = this.pendingSyncBytes + bytes > this.opts.pendingSyncBytesMax && this.pendingSyncBytes > 0;
    if (overloaded && !this.faults.storesWhenOverloaded()) throw new NaradError("overloaded", undefined, { retryAfterS: 1 });
    return overloaded;
  }

  /**
   * A single produce's place in its partition's commit. What follows the fsync is done once per
   * commit (the log's one promise a commit), not per message: its bytes leave the pending count,
   * its time and messages are counted, long polls and copiers are woken. Registered before the
   * answers, it runs before them.
   */
  private joinCommit(t: Topic, p: number, durable: Promise<void>, bytes: number): void {
    let j = t.joining[p];
    if (j === undefined || j.durable !== durable) {
      const joined: JoinedCommit = { durable, messages: 0, bytes: 0, startedMono: this.opts.clock.monoMs() };
      t.joining[p] = j = joined;
      durable.then(() => this.joinedDurable(t, p, joined), () => this.joinedEnded(t, p, joined));
    }
    j.messages++;
    j.bytes += bytes;
    this.pendingSyncBytes += bytes;
  }

  /** A commit that single produces joined is durable: what appendGroups does after its fsync, once for them all. */
  private joinedDurable(t: Topic, p: number, j: JoinedCommit): void {
    this.joinedEnded(t, p, j);
    this.appendDurable(t, [p], j.startedMono);
    (t.producedCounter ??= this.metrics.produced.labels(t.meta.name)).inc(j.messages);
  }

  private joinedEnded(t: Topic, p: number, j: JoinedCommit): void {
    this.pendingSyncBytes -= j.bytes;
    if (t.joining[p] === j) t.joining[p] = undefined;
  }

  // ---- consume --------------------------------------------------------------------------------

  /**
   * Leases up to `max` messages. With waitMs > 0 and nothing available, waits until a message
   * becomes available (produce, nack, lapse) or the wait ends. `signal` aborts the wait when the
   * client goes away.
   */
  async consume(topicName: string, max: number, waitMs: number, signal?: AbortSignal): Promise<Delivery[]> {
    this.assertOpen();
    const t = this.topic(topicName);
    if (t.waiters.length === 0) {
      const d = await this.tryConsume(t, max);
      if (d.length > 0 || waitMs <= 0) return d;
    }
    if (waitMs <= 0) return [];
    if (this.waiterCount >= this.opts.longPollsMax) throw new NaradError("too_many_waiters", undefined, { retryAfterS: 1 });
    return new Promise<Delivery[]>((resolve) => {
      const w: Waiter = { max, resolve, done: false, timer: undefined };
      w.timer = this.scheduler.after(waitMs, () => {
        const i = t.waiters.indexOf(w);
        if (i >= 0) t.waiters.splice(i, 1);
        this.finishWaiter(w, []);
      });
      t.waiters.push(w);
      this.waiterCount++;
      this.metrics.waiters.set(this.waiterCount);
      signal?.addEventListener(
        "abort",
        () => {
          const i = t.waiters.indexOf(w);
          if (i >= 0) t.waiters.splice(i, 1);
          this.finishWaiter(w, []);
        },
        { once: true },
      );
      this.wake(t);
    });
  }

  private finishWaiter(w: Waiter, d: Delivery[]): void {
    if (w.done) return;
    w.done = true;
    w.timer?.cancel();
    this.waiterCount--;
    this.metrics.waiters.set(this.waiterCount);
    w.resolve(d);
  }

  /** When a held-back delayed message of each topic is next due (a timer is set for it then). */
  private readonly dueWakes = new WeakMap<Topic, { atMono: number; timer: Timer }>();

  /** Wakes the topic's long polls when its next delayed message comes due, in `inMs`. */
  private wakeWhenDue(t: Topic, inMs: number): void {
    const at = this.opts.clock.monoMs() + Math.max(0, inMs);
    const w = this.dueWakes.get(t);
    if (w !== undefined && w.atMono <= at) return; // one set for earlier already
    w?.timer.cancel();
    const timer = this.scheduler.after(Math.max(1, inMs), () => {
      this.dueWakes.delete(t);
      if (!t.deleted) this.wake(t);
    });
    this.dueWakes.set(t, { atMono: at, timer });
  }

  /** Serves waiting long polls in arrival order while messages are available. */
  private wake(t: Topic): void {
    if (t.waiters.length === 0) return;
    const wall = this.opts.clock.nowMs();
    let nextDue = Infinity;
    for (const p of t.open()) nextDue = Math.min(nextDue, p.releaseDue(wall));
    if (nextDue !== Infinity) this.wakeWhenDue(t, nextDue - wall);
    if (t.serving) {
      t.serveAgain = true;
      return;
    }
    t.serving = true;
    void (async () => {
      try {
        do {
          t.serveAgain = false;
          while (t.waiters.length > 0 && !t.deleted && t.hasAvailable()) {
            const w = t.waiters.shift()!;
            if (w.done) continue;
            const d = await this.tryConsume(t, w.max);
            if (w.done) {
              // The client left while its records were read: let the leases go at once.
              this.releaseDeliveries(t, d);
              continue;
            }
            if (d.length === 0) {
              t.waiters.unshift(w);
              break;
            }
            this.finishWaiter(w, d);
          }
        } while (t.serveAgain);
      } catch (e) {
        this.log.error({ err: (e as Error).message }, "serving long polls failed");
      } finally {
        t.serving = false;
      }
    })();
  }

  private releaseDeliveries(t: Topic, d: Delivery[]): void {
    for (const x of d) {
      const p = t.partitions[x.partition];
      const f = this.codec.verify(t.meta.incarnation, [x.receiptHandle])[0];
      if (p && f) p.release(x.offset, f.tag, false);
    }
    if (d.length > 0) this.wake(t);
  }

  /** Delayed messages held back by this broker so far (tryConsume takes again after any). */
  private deferrals = 0;

  /**
   * One message leased now, for a single consume on one node (the HTTP consume's path, issue 17):
   * consume(topic, 1, 0) without an await when the record is in memory (its partition's
   * read-ahead window), which is the case for all but one in READ_AHEAD_RECORDS fresh messages.
   * A Promise only when a record must be read from the log. null when nothing is available now,
   * or when long polls wait on the topic already (they are served first, as consume() does):
   * the caller waits through consume() if it may. Throws what consume() refuses at once
   * (topic_not_found, shutting_down).
   */
  consumeOne(topicName: string): Delivery | null | Promise<Delivery | null> {
    this.assertOpen();
    const t = this.topic(topicName);
    if (t.waiters.length > 0) return null;
    const d = this.tryConsume(t, 1);
    if (d instanceof Promise) return d.then(firstOrNull);
    return d.length === 0 ? null : d[0]!;
  }

  /**
   * Leases up to `max`: a take that met delayed messages not yet due held them back, so it takes
   * again (up to DEFER_ROUNDS_MAX times) for what lies behind them, rather than answer empty.
   * Synchronous while every record it needs is in memory; from the first read of the log on, a
   * Promise (tryConsumeRest).
   */
  private tryConsume(t: Topic, max: number): Delivery[] | Promise<Delivery[]> {
    let out: Delivery[] = [];
    for (let round = 0; round < DEFER_ROUNDS_MAX && out.length < max; round++) {
      const before = this.deferrals;
      const d = this.tryConsumeOnce(t, max - out.length);
      if (d instanceof Promise) return this.tryConsumeRest(t, max, out, round, before, d);
      out = out.length === 0 ? d : out.concat(d);
      if (this.deferrals === before) break;
    }
    return out;
  }

  /** tryConsume's rounds from one that reads the log (`pending`) on. */
  private async tryConsumeRest(t: Topic, max: number, out: Delivery[], round: number, before: number, pending: Promise<Delivery[]>): Promise<Delivery[]> {
    let d = await pending;
    for (;;) {
      out = out.length === 0 ? d : out.concat(d);
      if (this.deferrals === before || ++round >= DEFER_ROUNDS_MAX || out.length >= max) return out;
      before = this.deferrals;
      d = await this.tryConsumeOnce(t, max - out.length);
    }
  }

  /** One round of tryConsume: takes leases on the partitions in turn, then reads and hands out their records. */
  private tryConsumeOnce(t: Topic, max: number): Delivery[] | Promise<Delivery[]> {
    const now = this.opts.clock.monoMs();
    const wall = this.opts.clock.nowMs();
    let nextDue = Infinity;
    const vt = this.faults.leaseMs(t.meta.visibility_timeout_ms);
    const n = t.partitions.length;
    if (n === 0) return [];
    const takenBy: { p: Partition; taken: Taken[] }[] = [];
    let got = 0;
    const start = t.consumeRr++ % n;
    if (t.consumeRr > 0x3fffffff) t.consumeRr %= n;
    for (let i = 0; i < n && got < max; i++) {
      const p = t.partitions[(start + i) % n];
      if (p === undefined || !this.owns(t, p)) continue;
      this.deadLetters.prepare(t, p);
      p.expire(now);
      nextDue = Math.min(nextDue, p.releaseDue(wall));
      const taken = p.take(max - got, now, vt);
      if (taken.length > 0) {
        takenBy.push({ p, taken });
        got += taken.length;
      }
    }
    if (got === 0) return [];
    const h: Handout = { out: [], budget: this.opts.consumeBytesMax, wall, nextDue };
    for (let i = 0; i < takenBy.length; i++) {
      const { p, taken } = takenBy[i]!;
      const records = p.readTaken(taken, h.budget);
      if (records instanceof Promise) return this.handOutRest(t, takenBy, i, records, h);
      this.handOut(t, p, taken, records, h);
    }
    return this.handedOut(t, h);
  }

  /** tryConsumeOnce from the first partition whose records are read from the log (`pending`) on. */
  private async handOutRest(t: Topic, takenBy: readonly { p: Partition; taken: Taken[] }[], from: number, pending: Promise<ReadonlyMap<number, StoredRecord>>, h: Handout): Promise<Delivery[]> {
    for (let i = from; i < takenBy.length; i++) {
      const { p, taken } = takenBy[i]!;
      let records: ReadonlyMap<number, StoredRecord>;
      try {
        records = await (i === from ? pending : p.readTaken(taken, h.budget));
      } catch (e) {
        this.log.error({ err: (e as Error).message, partition: p.index }, "read failed");
        for (const x of taken) p.release(x.offset, x.tag, false);
        continue;
      }
      this.handOut(t, p, taken, records, h);
    }
    return this.handedOut(t, h);
  }

  /** Hands out the leases taken on `p` whose records were read; the others are undone. */
  private handOut(t: Topic, p: Partition, taken: readonly Taken[], records: ReadonlyMap<number, StoredRecord>, h: Handout): void {
    const out = h.out;
    const keep: Taken[] = [];
    for (const x of taken) {
      const r = records.get(x.offset);
      if (r === undefined) {
        p.release(x.offset, x.tag, x.offset >= p.log.earliestOffset);
      } else if (r.control === true) {
        // A replicated partition's epoch marker whose ack did not reach this node before it
        // became the leader: no message, settled here and never delivered.
        p.release(x.offset, x.tag, true);
        p.acks.ack(x.offset);
      } else if (out.length + keep.length > 0 && h.budget - r.payload.length < 0) {
        p.release(x.offset, x.tag, false); // over this answer's byte budget: next time
      } else if (r.attrs !== undefined && (recordAttrs(r).notBeforeMs ?? 0) > h.wall) {
        // A delayed message read before its time: held back until due (a restart reads it again).
        const due = recordAttrs(r).notBeforeMs!;
        p.defer(x.offset, x.tag, due);
        this.deferrals++;
        h.nextDue = Math.min(h.nextDue, due);
      } else {
        h.budget -= r.payload.length;
        keep.push(x);
      }
    }
    if (keep.length === 0) return;
    const incarnation = t.meta.incarnation;
    // One handle (a single consume) is minted without the arrays of a batch's.
    const handles = keep.length === 1 ? undefined : this.codec.mint(incarnation, keep.map((x) => ({ partition: p.index, offset: x.offset, tag: x.tag })));
    for (let i = 0; i < keep.length; i++) {
      const x = keep[i]!;
      const record = records.get(x.offset)!;
      const receiptHandle = handles === undefined ? this.codec.mintOne(incarnation, p.index, x.offset, x.tag) : handles[i]!;
      const d: Delivery = { partition: p.index, offset: x.offset, deliveryCount: x.deliveryCount, receiptHandle, record };
      if (record.attrs !== undefined) {
        const origin = originOf(record);
        const headers = recordAttrs(record).headers;
        if (origin !== undefined) d.origin = origin;
        if (headers !== undefined) d.headers = headers;
      }
      out.push(d);
    }
  }

  /** The end of a round: the next delayed message's wake-up, the deliveries counted. */
  private handedOut(t: Topic, h: Handout): Delivery[] {
    if (h.nextDue !== Infinity) this.wakeWhenDue(t, h.nextDue - h.wall);
    if (h.out.length > 0) {
      let redeliveries = 0;
      for (const d of h.out) if (d.deliveryCount > 1) redeliveries++;
      const c = this.countsOf(t);
      c.delivered += h.out.length;
      c.redelivered += redeliveries;
    }
    return h.out;
  }

  /** The topic's deliveries and settles not yet handed to their counters (./metrics.ts, PathCounts). */
  private countsOf(t: Topic): PathCounts {
    let c = t.counts;
    if (c === undefined || c.dropped) t.counts = c = this.metrics.pathCounts(t.meta.name);
    return c;
  }

  /** Settles receipt handles; one status per handle, in order. */
  settle(topicName: string, handles: string[], action: SettleAction): SettleStatus[] {
    return this.settleIn(topicName, handles, action, null);
  }

  /** settle(), adding to `touched` the partitions whose handles answered 204. */
  private settleIn(topicName: string, handles: string[], action: SettleAction, touched: Set<Partition> | null): SettleStatus[] {
    const t = this.settling(topicName, action);
    const fields = this.codec.verify(t.meta.incarnation, handles);
    const now = this.opts.clock.monoMs();
    const c = this.countsOf(t);
    const out = new Array<SettleStatus>(fields.length);
    for (let i = 0; i < fields.length; i++) {
      const f = fields[i]!;
      out[i] = this.settleHandle(t, f, action, now, c);
      if (touched !== null && out[i] === 204) touched.add(t.partitions[f!.partition]!);
    }
    this.settled(t);
    return out;
  }

  /**
   * settle(), resolved once what its 204s promise is on disk. A dead_letter=true ask is fsynced in
   * the ack log before it is answered: the move is the message's from its 204 on (SPEC "Dead
   * letters"), and a kill after it still moves it (the restart finds the ask in the ack log). Acks,
   * extends and nacks answer at once and reach the disk on the ack log's schedule (docs/contract.md).
   */
  async settleDurable(topicName: string, handles: string[], action: SettleAction): Promise<SettleStatus[]> {
    if (action !== "dead_letter") return this.settle(topicName, handles, action);
    // Only the ack logs of the partitions whose asks were taken: the others have nothing to promise.
    const touched = new Set<Partition>();
    const out = this.settleIn(topicName, handles, action, touched);
    await Promise.all([...touched].map((p) => p.acks.flushAndSync()));
    return out;
  }

  /**
   * One receipt handle settled, for a single ack (or the ack riding on a consume) on one node:
   * settle(topic, [handle], action)[0] without its arrays (issue 17).
   */
  settleOne(topicName: string, handle: string, action: SettleAction): SettleStatus {
    const t = this.settling(topicName, action);
    const s = this.settleHandle(t, this.codec.verifyOne(t.meta.incarnation, handle), action, this.opts.clock.monoMs(), this.countsOf(t));
    this.settled(t);
    return s;
  }

  /** The topic a settle acts on, once it may: what settle refuses for the whole request is thrown here. */
  private settling(topicName: string, action: SettleAction): Topic {
    this.assertOpen();
    const t = this.topic(topicName);
    if (action === "dead_letter" && t.meta.dead_letter_topic === null) {
      throw new NaradError("no_dead_letter_topic", `Topic ${topicName} has no dead_letter_topic; set one (PATCH) before dead-lettering its messages.`);
    }
    this.settleWokeWaiters = false;
    this.settleExhausted = false;
    return t;
  }

  /**
   * What the settles of one request left to do once, after them all (set by settleVerified,
   * reset by settling): a nack made a message available to the long polls; a nack or
   * dead_letter=true may have made a dead-letter move due.
   */
  private settleWokeWaiters = false;
  private settleExhausted = false;

  private settled(t: Topic): void {
    if (this.settleWokeWaiters) this.wake(t);
    if (this.settleExhausted) this.deadLetters.kick(t);
  }

  /** Settles one verified handle (null: it did not verify) and counts its outcome in `c`. */
  private settleHandle(t: Topic, f: VerifiedHandle | null, action: SettleAction, now: number, c: PathCounts): SettleStatus {
    const s = this.settleVerified(t, f, action, now);
    const result = s === 204 ? 0 : s === 410 ? 1 : s === 503 ? 2 : 3; // SETTLE_RESULTS' order
    c.settled[SETTLE_ACTION_INDEX[action] * SETTLE_RESULTS.length + result]!++;
    return s;
  }

  private settleVerified(t: Topic, f: VerifiedHandle | null, action: SettleAction, now: number): SettleStatus {
    if (f === null || f.partition >= t.meta.partitions) return 400;
    const p = t.partitions[f.partition];
    if (p === undefined || !this.owns(t, p)) return 503; // cluster mode: not served here now
    if (!f.current) return 410; // an earlier lease holder: another node, or an earlier process of this one (./handles.ts)
    const faults = this.faults;
    const tag = faults.settleTag(p, f.offset, f.tag);
    this.deadLetters.prepare(t, p);
    let r: "ok" | "gone";
    switch (faults.settleAction(action, p, f.offset, tag)) {
      case "ack":
        r = p.ack(f.offset, tag, now);
        break;
      case "extend":
        r = p.extend(f.offset, tag, now, t.meta.visibility_timeout_ms);
        break;
      case "nack":
        r = p.nack(f.offset, tag, now);
        if (r === "ok") this.settleWokeWaiters = true;
        if (r === "ok" && p.exhaustedWaiting > 0) this.settleExhausted = true;
        break;
      case "dead_letter":
        r = p.deadLetter(f.offset, tag, now);
        if (r === "ok") this.settleExhausted = true;
        break;
    }
    return r === "ok" ? 204 : 410;
  }

  /**
   * Cluster mode: undoes leases that never reached a client (a long poll on another partition
   * answered first), restoring their delivery counts.
   */
  releaseLeases(topicName: string, handles: string[]): void {
    const t = this.topic(topicName);
    const fields = this.codec.verify(t.meta.incarnation, handles);
    for (const f of fields) {
      if (f === null || !f.current) continue;
      t.partitions[f.partition]?.release(f.offset, f.tag, false);
    }
    this.wake(t);
  }

  // ---- replay ---------------------------------------------------------------------------------

  async replay(topicName: string, partition: number, offset: number, limit: number): Promise<ReplayResult> {
    this.assertOpen();
    const t = this.topic(topicName);
    if (partition >= t.meta.partitions) throw new NaradError("partition_not_found", `Topic ${topicName} has partitions 0..${t.meta.partitions - 1}.`);
    const p = t.partitions[partition];
    // A node whose lease lapsed may have been deposed: its log can be behind the new leader's
    // (a stale read, which the checker calls a `skip`), so it serves no replay either.
    if (p === undefined || !this.owns(t, p)) throw notOwner(topicName, partition);
    if (p.log.ready === false) {
      throw new NaradError("not_owner", `${topicName}/${partition} has a new leader that has not yet confirmed what its replicas hold; retry shortly.`);
    }
    const earliest = p.log.earliestOffset;
    const end = p.log.syncedOffset;
    const from = Math.max(offset, earliest);
    const records = this.faults.replayPage(from < end ? await p.log.read(from, Math.min(limit, end - from), this.opts.consumeBytesMax) : []);
    const nextOffset = records.length > 0 ? records[records.length - 1]!.offset + 1 : Math.min(from, Math.max(end, earliest));
    // A control record (a replicated partition's epoch marker) is no message: a gap in the page.
    const messages = records.some((r) => r.control === true) ? records.filter((r) => r.control !== true) : records;
    return { records: messages, nextOffset, earliestOffset: earliest, endOffset: end };
  }

  // ---- housekeeping and shutdown ----------------------------------------------------------------

  private sweepLeases(): void {
    const now = this.opts.clock.monoMs();
    for (const t of this.topics.values()) {
      let lapsed = 0;
      for (const p of t.partitions) {
        if (p === undefined) continue;
        this.deadLetters.prepare(t, p);
        lapsed += p.expire(now);
      }
      if (lapsed > 0) this.wake(t);
      this.deadLetters.kick(t);
    }
  }

  /**
   * Why this node's storage cannot take writes now, or null (/readyz, which anyone may ask: it
   * counts partitions and names no topic; the log names them).
   */
  storageProblem(): string | null {
    return this.upkeep.storageProblem();
  }

  private assertOpen(): void {
    if (this.closed) throw new NaradError("shutting_down");
  }

  /** Answers long polls now (empty), so a graceful stop does not wait out their wait_ms. */
  releaseWaiters(): void {
    for (const t of this.topics.values()) this.endWaiters(t);
  }

  /** Answers the topic's long polls now (empty). */
  private endWaiters(t: Topic): void {
    for (const w of t.waiters.splice(0)) this.finishWaiter(w, []);
  }

  /** Flushes and fsyncs every log and ack log, then closes them. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.housekeeping?.cancel();
    this.sweeper?.cancel();
    this.releaseWaiters();
    await this.deadLetters.close();
    for (const t of this.topics.values()) await this.partitions.closeAll(t);
    await this.links.close();
  }
}

/** producers.* defaults (./producers.ts). */
const DEDUPE_DEFAULTS: WindowLimits = { windowMs: DEDUPE_WINDOW_MS_DEFAULT, sequencesMax: WINDOW_SEQUENCES_DEFAULT, entriesMax: DEDUPE_ENTRIES_MAX_DEFAULT };

function notOwner(topic: string, partition: number): NaradError {
  return new NaradError("not_owner", `This node does not serve ${topic}/${partition} now (it is not its owner, its lease lapsed, or the partition is frozen for a move); retry shortly.`);
}

export { DEFAULTS };
