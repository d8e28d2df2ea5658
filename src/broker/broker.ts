// The broker of one node: topics, their partitions, produce, leases, acks and replay, over the
// storage layer. Pure state and logic: it knows nothing of HTTP; operating errors are NaradErrors
// from the one error table, and the HTTP layer maps them.
//
// Layout of the data directory:
//   node.json                          identity (identity.ts)
//   topics/NAME/topic.json             metadata, written atomically, last step of a create
//   topics/NAME/partitions/P/          segments and ack log of partition P (src/storage)
//   trash/                             topics being deleted (renamed here first, then removed)
//
// Limits and their answers: bytes waiting for fsync over `pendingSyncBytesMax` → 429 overloaded;
// more than `waitersMax` waiting long polls → 429 too_many_waiters; a consume batch's payload
// over `consumeBytesMax` → fewer messages in that answer.
//
// Cluster mode (`opts.cluster` set): the topics' metadata lives in the control plane, not in
// topic.json; src/cluster/ownership.ts tells the broker which topics exist (applyClusterTopic,
// dropClusterTopic) and which partitions this node owns, at which epoch (openClusterPartition,
// closeClusterPartition). A topic's `partitions` array is then sparse: only owned partitions are
// open here, under DATA/cluster/NAME/INCARNATION/partitions/P. Every owner write (append, lease,
// ack, extend, nack) first checks `cluster.ownsPartition(topic, p, epoch)` (docs/architecture.md,
// "epoch check before any owner write"), and a produce checks it again after its fsync: a 202 is
// given only while the node still owns the partition.

import assert from "node:assert/strict";
import { randomBytes, randomInt } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import { DEFAULTS, LIMITS, TOPIC_NAME_RE, type ChildJson, type TopicJson } from "../protocol/wire.js";
import { CursorFile } from "../storage/cursor-file.js";
import { Narad, NaradPartialBatchError } from "../client/index.js";
import { CopyPartlyStored, PartitionCopier, REMOTE_PUSH_TIMEOUT_MS, type ChildLink } from "./children.js";
import { writeFileAtomic } from "../platform/files.js";
import { openAckLog, openPartitionLog, type StorageFs } from "../storage/index.js";
import type { Clock } from "../platform/clock.js";
import type { StoredRecord } from "../storage/types.js";
import { HandleCodec } from "./handles.js";
import { BrokerMetrics } from "./metrics.js";
import { Partition, type Taken } from "./partition.js";
import { groupByPartition } from "./partitioner.js";
import type { TestBugs } from "./test-bugs.js";

export interface BrokerOptions {
  dataDir: string;
  clock: Clock;
  logger: Logger;
  nodeId: string;
  bootId: string;
  bootSeq: number;
  /** The node's number in receipt handles: 0 on a single node, assigned by the control plane in a cluster. */
  nodeNum: number;
  secret: Buffer;
  segmentBytesMax: number;
  segmentAgeMaxMs: number;
  ackFlushIntervalMs: number;
  ackSyncIntervalMs: number;
  powerLoss: boolean;
  pendingSyncBytesMax: number;
  waitersMax: number;
  consumeBytesMax: number;
  housekeepingIntervalMs: number;
  defaultPartitions: number;
  defaultVisibilityTimeoutMs: number;
  defaultRetentionMs: number;
  bugs: TestBugs;
  /** Set in cluster mode. */
  cluster?: BrokerCluster;
  /** The filesystem of every partition's files (default node:fs; tests inject faults). */
  storageFs?: StorageFs;
}

/** What the broker needs from the cluster (src/cluster). */
export interface BrokerCluster {
  /** From memory: this node's lease is live and it owns the partition at exactly this epoch. */
  ownsPartition(topic: string, partition: number, epoch: number): boolean;
  /**
   * Appends copies to a local child topic wherever its partitions live; resolves once durable
   * there. With `partition`, into exactly that partition (a replica keeps its parent's partitions).
   */
  copyToChild(child: string, records: StoredRecord[], partition?: number): Promise<void>;
}

/** A topic's metadata as the control plane keeps it (cluster mode). */
export interface ClusterTopicMeta {
  name: string;
  incarnation: number;
  partitions: number;
  visibility_timeout_ms: number;
  retention_ms: number;
  owner: string | null;
  children: ChildLink[];
  parent: { topic: string; kind: ChildJson["kind"] } | null;
  created_at: number;
}

/** A topic's metadata: topic.json on one node, the control plane's row in a cluster. */
type TopicMeta = ClusterTopicMeta;

interface Waiter {
  max: number;
  resolve: (d: Delivery[]) => void;
  timer: NodeJS.Timeout;
  done: boolean;
}

class Topic {
  /** Sparse in cluster mode: only the partitions this node owns are open. */
  partitions: (Partition | undefined)[] = [];
  copiers: (PartitionCopier | undefined)[] = [];
  readonly waiters: Waiter[] = [];
  produceRr = 0;
  consumeRr = 0;
  serving = false;
  serveAgain = false;
  deleted = false;
  /** Serialises metadata changes (update, delete) of this topic. */
  metaChain: Promise<unknown> = Promise.resolve();

  constructor(
    public meta: TopicMeta,
    readonly dir: string,
  ) {}

  hasAvailable(): boolean {
    for (const p of this.partitions) if (p?.hasAvailable()) return true;
    return false;
  }

  /** The open partitions. */
  open(): Partition[] {
    const out: Partition[] = [];
    for (const p of this.partitions) if (p !== undefined) out.push(p);
    return out;
  }

  toJson(): TopicJson {
    const m = this.meta;
    return {
      name: m.name,
      partitions: m.partitions,
      visibility_timeout_ms: m.visibility_timeout_ms,
      retention_ms: m.retention_ms,
      owner: m.owner,
      children: m.children.map(
        (c): ChildJson => (c.delay_ms === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delay_ms: c.delay_ms }),
      ),
      parent: m.parent,
      created_at: m.created_at,
    };
  }
}

export interface Delivery {
  partition: number;
  offset: number;
  deliveryCount: number;
  receiptHandle: string;
  record: StoredRecord;
  /** Cluster mode: the owner that holds the lease, when it is another node. */
  owner?: string;
  ownerBoot?: string;
}

export interface ProduceItem {
  key: string | null;
  payload: Buffer;
}

export type SettleAction = "ack" | "extend" | "nack";
/** 503: the partition is not served here now (cluster mode: not owned, lease lapsed, frozen). */
export type SettleStatus = 204 | 400 | 410 | 503;

export interface ReplayResult {
  records: StoredRecord[];
  nextOffset: number;
  earliestOffset: number;
  endOffset: number;
}

export class Broker {
  readonly metrics: BrokerMetrics;
  private readonly topics = new Map<string, Topic>();
  private readonly creating = new Set<string>();
  private readonly codec: HandleCodec;
  private readonly log: Logger;
  private waiterCount = 0;
  /** SDK clients of remote children, by URL and user. */
  private readonly remotes = new Map<string, Narad>();
  private pendingSyncBytes = 0;
  /** Cluster mode: the last delivery tag per closed partition, so a reopen never reissues one. */
  private readonly lastTags = new Map<string, number>();
  private housekeeping: NodeJS.Timeout | undefined;
  private sweeper: NodeJS.Timeout | undefined;
  private closed = false;

  private constructor(readonly opts: BrokerOptions) {
    this.log = opts.logger.child({ module: "broker" });
    this.codec = new HandleCodec(opts.secret, opts.nodeNum, opts.bootSeq);
    this.metrics = new BrokerMetrics({ topicGauges: () => this.topicGauges(), childGauges: () => this.childGauges() });
  }

  static async open(opts: BrokerOptions): Promise<Broker> {
    const b = new Broker(opts);
    await mkdir(join(opts.dataDir, "topics"), { recursive: true });
    await rm(join(opts.dataDir, "trash"), { recursive: true, force: true });
    if (opts.cluster === undefined) {
      for (const name of await readdir(join(opts.dataDir, "topics"))) {
        await b.loadTopic(name);
      }
    } else {
      await mkdir(join(opts.dataDir, "cluster"), { recursive: true });
      const single = await readdir(join(opts.dataDir, "topics"));
      if (single.length > 0) b.log.warn({ topics: single.length }, "this data directory holds single-node topics; a cluster node does not serve them");
    }
    b.housekeeping = setInterval(() => void b.runHousekeeping(), opts.housekeepingIntervalMs);
    b.housekeeping.unref();
    b.sweeper = setInterval(() => b.sweepLeases(), 50);
    b.sweeper.unref();
    return b;
  }

  private async loadTopic(name: string): Promise<void> {
    const dir = join(this.opts.dataDir, "topics", name);
    if (!TOPIC_NAME_RE.test(name)) {
      this.log.warn({ dir }, "ignoring a directory under topics/ whose name is not a topic name");
      return;
    }
    let meta: TopicMeta;
    try {
      meta = parseMeta(JSON.parse(await readFile(join(dir, "topic.json"), "utf8")), name);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") {
        // A create that crashed before its last step never answered 201: finish removing it.
        this.log.warn({ dir }, "removing a topic directory without topic.json (an interrupted create)");
        await rm(dir, { recursive: true, force: true });
        return;
      }
      this.log.error({ dir, err: (e as Error).message }, "topic.json is corrupt; the topic is not served until it is repaired");
      return;
    }
    const t = new Topic(meta, dir);
    await this.openPartitions(t, meta.partitions);
    this.topics.set(name, t);
  }

  private async openPartitions(t: Topic, count: number): Promise<void> {
    for (let i = t.partitions.length; i < count; i++) await this.openPartitionAt(t, i, 0);
  }

  private async openPartitionAt(t: Topic, i: number, epoch: number): Promise<void> {
    const o = this.opts;
    {
      const pdir = join(t.dir, "partitions", String(i));
      await mkdir(pdir, { recursive: true });
      const logger = o.logger.child({ topic: t.meta.name, partition: i });
      const log = await openPartitionLog(pdir, {
        clock: o.clock,
        logger,
        segmentBytesMax: o.segmentBytesMax,
        segmentAgeMaxMs: o.segmentAgeMaxMs,
        powerLoss: o.powerLoss,
        fs: o.storageFs,
      });
      const r = log.recovery;
      if (r.truncatedBytes > 0 || r.corruptRecords.length > 0 || r.rebuiltIndexes.length > 0) {
        logger.warn({ recovery: r }, "partition recovered");
      }
      const acks = await openAckLog(pdir, {
        clock: o.clock,
        logger,
        ackFlushIntervalMs: o.ackFlushIntervalMs,
        ackSyncIntervalMs: o.ackSyncIntervalMs,
        powerLoss: o.powerLoss,
        fs: o.storageFs,
      });
      const tagKey = `${t.meta.name}/${t.meta.incarnation}/${i}`;
      const part = new Partition(i, log, acks, epoch, this.lastTags.get(tagKey) ?? 0);
      t.partitions[i] = part;
      const cursors = CursorFile.open(join(pdir, "children.cursors"), {
        ackFlushIntervalMs: o.ackFlushIntervalMs,
        ackSyncIntervalMs: o.ackSyncIntervalMs,
        powerLoss: o.powerLoss,
        logger,
        fs: o.storageFs,
        periodicFlush: !o.bugs.has("copy-cursors-not-persisted"), // seeded bug
      });
      // A link without a cursor here means the partition was added after the attach: every
      // record in it was produced after the attach, so copying starts at its beginning.
      for (const l of t.meta.children) if (cursors.get(l.topic) === undefined) cursors.advance(l.topic, 0);
      const copier = new PartitionCopier(t.meta.name, part, cursors, () => t.meta.children, (l, r) => this.copyTo(t, l, r, i), o.clock, logger.child({ module: "children" }), o.bugs);
      t.copiers[i] = copier;
      if (t.meta.children.length > 0) copier.kick();
    }
  }

  /** Closes one open partition (its copier, log and ack log, flushed and synced). */
  private async closePartitionAt(t: Topic, i: number): Promise<void> {
    const p = t.partitions[i];
    const c = t.copiers[i];
    t.partitions[i] = undefined;
    t.copiers[i] = undefined;
    if (c !== undefined) await c.close();
    if (p !== undefined) {
      this.lastTags.set(`${t.meta.name}/${t.meta.incarnation}/${i}`, p.lastTag);
      p.dropReadAhead();
      await p.log.close();
      await p.acks.close();
    }
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

  // ---- topics ---------------------------------------------------------------------------------

  listTopics(): TopicJson[] {
    return [...this.topics.values()].filter((t) => !t.deleted).map((t) => t.toJson()).sort((a, b) => a.name.localeCompare(b.name));
  }

  getTopic(name: string): TopicJson {
    return this.topic(name).toJson();
  }

  /** 404 topic_not_found unless the topic exists (the check before a produce reads its body). */
  assertTopic(name: string): void {
    this.topic(name);
  }

  async createTopic(req: { name: string; partitions?: number; visibility_timeout_ms?: number; retention_ms?: number }, owner: string | null): Promise<TopicJson> {
    this.assertOpen();
    const name = req.name;
    if (this.topics.has(name) || this.creating.has(name)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(name)} exists already.`);
    this.creating.add(name);
    try {
      const meta: TopicMeta = {
        name,
        incarnation: randomInt(1, 0xffffffff),
        partitions: req.partitions ?? this.opts.defaultPartitions,
        visibility_timeout_ms: req.visibility_timeout_ms ?? this.opts.defaultVisibilityTimeoutMs,
        retention_ms: req.retention_ms ?? this.opts.defaultRetentionMs,
        owner,
        children: [],
        parent: null,
        created_at: this.opts.clock.nowMs(),
      };
      const dir = join(this.opts.dataDir, "topics", name);
      await rm(dir, { recursive: true, force: true });
      await mkdir(join(dir, "partitions"), { recursive: true });
      const t = new Topic(meta, dir);
      await this.openPartitions(t, meta.partitions);
      await writeFileAtomic(join(dir, "topic.json"), JSON.stringify(meta, null, 2) + "\n");
      this.topics.set(name, t);
      this.log.info({ topic: name, partitions: meta.partitions }, "topic created");
      return t.toJson();
    } finally {
      this.creating.delete(name);
    }
  }

  async updateTopic(name: string, req: { partitions?: number; visibility_timeout_ms?: number; retention_ms?: number }): Promise<TopicJson> {
    this.assertOpen();
    const t = this.topic(name);
    const run = t.metaChain.then(async () => {
      if (t.deleted) throw new NaradError("topic_not_found");
      if (req.partitions !== undefined && req.partitions < t.meta.partitions) {
        throw new NaradError("partitions_decrease", `Topic ${name} has ${t.meta.partitions} partitions; partitions can only grow.`);
      }
      const next: TopicMeta = {
        ...t.meta,
        partitions: req.partitions ?? t.meta.partitions,
        visibility_timeout_ms: req.visibility_timeout_ms ?? t.meta.visibility_timeout_ms,
        retention_ms: req.retention_ms ?? t.meta.retention_ms,
      };
      // New partitions first, metadata last: a crash in between leaves empty partition
      // directories that the next start ignores until the metadata names them.
      await this.openPartitions(t, next.partitions);
      await writeFileAtomic(join(t.dir, "topic.json"), JSON.stringify(next, null, 2) + "\n");
      t.meta = next;
      return t.toJson();
    });
    t.metaChain = run.catch(() => undefined);
    return run;
  }

  async deleteTopic(name: string): Promise<void> {
    this.assertOpen();
    const t = this.topic(name);
    t.deleted = true;
    const run = t.metaChain.then(async () => {
      for (const w of t.waiters.splice(0)) this.finishWaiter(w, []);
      await this.detachAllLinks(t);
      for (let i = 0; i < t.partitions.length; i++) await this.closePartitionAt(t, i);
      const trash = join(this.opts.dataDir, "trash");
      await mkdir(trash, { recursive: true });
      const dest = join(trash, `${name}.${t.meta.incarnation}.${randomBytes(4).toString("hex")}`);
      await rename(t.dir, dest);
      this.topics.delete(name);
      this.log.info({ topic: name }, "topic deleted");
      void rm(dest, { recursive: true, force: true }).catch((e: Error) => this.log.warn({ err: e.message }, "could not remove deleted topic files"));
    });
    t.metaChain = run.catch(() => undefined);
    return run;
  }

  // ---- cluster mode: topics and partitions as the control plane places them ------------------

  /** Where a cluster topic's partitions live on this node: one directory per incarnation. */
  clusterTopicDir(name: string, incarnation: number): string {
    return join(this.opts.dataDir, "cluster", name, String(incarnation));
  }

  /** The epoch an owned partition is open at here, or undefined when it is not open. */
  openEpoch(name: string, partition: number): number | undefined {
    return this.topics.get(name)?.partitions[partition]?.epoch;
  }

  /** The incarnation of the topic as this broker knows it. */
  knownIncarnation(name: string): number | undefined {
    const t = this.topics.get(name);
    return t === undefined || t.deleted ? undefined : t.meta.incarnation;
  }

  /** Adds or updates a topic's metadata (cluster mode; no files are written). */
  applyClusterTopic(m: ClusterTopicMeta): void {
    assert.ok(this.opts.cluster !== undefined, "applyClusterTopic is for cluster mode");
    const t = this.topics.get(m.name);
    const meta: TopicMeta = { ...m, children: m.children.map((c) => ({ ...c })) };
    if (t === undefined || t.deleted) {
      this.topics.set(m.name, new Topic(meta, this.clusterTopicDir(m.name, m.incarnation)));
      return;
    }
    assert.equal(t.meta.incarnation, m.incarnation, "a recreated topic must be dropped first");
    const before = new Set(t.meta.children.map((c) => c.topic));
    t.meta = meta;
    for (const c of t.copiers) {
      if (c === undefined) continue;
      for (const l of meta.children) {
        // An attach reaches every owner before the link is written (src/cluster/service.ts); a
        // link that arrives without a cursor here missed that step: start at the end, so no
        // message from before the attach is copied.
        if (!before.has(l.topic) && c.cursors.get(l.topic) === undefined) {
          this.log.warn({ topic: m.name, partition: c.partition.index, child: l.topic }, "a child link arrived without its copy cursor; copying starts at the end");
          c.cursors.advance(l.topic, c.partition.log.endOffset);
        }
      }
      if (meta.children.length > 0) c.kick();
    }
  }

  /** Removes a topic (deleted, or created again as a new incarnation) and its files here. */
  async dropClusterTopic(name: string): Promise<void> {
    const t = this.topics.get(name);
    if (t === undefined) return;
    t.deleted = true;
    for (const w of t.waiters.splice(0)) this.finishWaiter(w, []);
    const run = t.metaChain.then(async () => {
      for (let i = 0; i < t.partitions.length; i++) await this.closePartitionAt(t, i);
      if (this.topics.get(name) === t) this.topics.delete(name);
      await this.trash(t.dir);
      this.log.info({ topic: name, incarnation: t.meta.incarnation }, "topic dropped from this node");
    });
    t.metaChain = run.catch(() => undefined);
    return run;
  }

  /** Opens a partition this node owns at `epoch` (a reopen when it is open at another epoch). */
  async openClusterPartition(name: string, partition: number, epoch: number): Promise<void> {
    this.assertOpen();
    const t = this.topic(name);
    const run = t.metaChain.then(async () => {
      if (t.deleted) return;
      const open = t.partitions[partition];
      if (open !== undefined && open.epoch === epoch) return;
      if (open !== undefined) await this.closePartitionAt(t, partition);
      await this.openPartitionAt(t, partition, epoch);
      this.log.info({ topic: name, partition, epoch }, "partition opened");
      this.wake(t);
    });
    t.metaChain = run.catch(() => undefined);
    return run;
  }

  /**
   * Closes a partition here (flushing and syncing its log, ack log and copy cursors). With
   * `remove`, its files go too: the partition moved to another node, which has the copy.
   */
  async closeClusterPartition(name: string, partition: number, remove: boolean): Promise<void> {
    const t = this.topics.get(name);
    if (t === undefined) return;
    const run = t.metaChain.then(async () => {
      const wasOpen = t.partitions[partition] !== undefined;
      await this.closePartitionAt(t, partition);
      if (remove) await this.trash(join(t.dir, "partitions", String(partition)));
      if (wasOpen || remove) this.log.info({ topic: name, partition, removed: remove }, "partition closed");
    });
    t.metaChain = run.catch(() => undefined);
    return run;
  }

  /**
   * Cluster mode, attaching or detaching a child: sets the child's copy cursor of one owned
   * partition to its current end (durably, before the link is written anywhere), or removes it.
   */
  async setChildCursor(name: string, partition: number, child: string, set: boolean): Promise<void> {
    const t = this.topic(name);
    const c = t.copiers[partition];
    const p = t.partitions[partition];
    if (c === undefined || p === undefined || !this.owns(t, p)) throw notOwner(name, partition);
    await c.cursors.setNow(child, set ? p.log.endOffset : undefined);
  }

  /** Whether a partition's directory exists here (open or not). */
  async hasPartitionFiles(name: string, incarnation: number, partition: number): Promise<boolean> {
    try {
      await stat(this.partitionDir(name, incarnation, partition));
      return true;
    } catch {
      return false;
    }
  }

  /** A cluster partition's directory on this node. */
  partitionDir(name: string, incarnation: number, partition: number): string {
    return join(this.clusterTopicDir(name, incarnation), "partitions", String(partition));
  }

  /** Renames a directory into DATA/trash, then removes it in the background. */
  private async trash(dir: string): Promise<void> {
    const trash = join(this.opts.dataDir, "trash");
    await mkdir(trash, { recursive: true });
    const dest = join(trash, `${randomBytes(6).toString("hex")}`);
    try {
      await rename(dir, dest);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
      throw e;
    }
    void rm(dest, { recursive: true, force: true }).catch((e: Error) => this.log.warn({ err: e.message }, "could not remove files of a dropped partition"));
  }

  // ---- child topics -----------------------------------------------------------------------------

  private async saveMeta(t: Topic, next: TopicMeta): Promise<void> {
    await writeFileAtomic(join(t.dir, "topic.json"), JSON.stringify(next, null, 2) + "\n");
    t.meta = next;
  }

  listChildren(parent: string): ChildJson[] {
    return this.topic(parent).toJson().children;
  }

  /**
   * Attaches a child. Its copy cursors start at the parent's current end, and are made durable
   * before the link is, so no message produced before the attach is ever copied (docs/contract.md).
   */
  async attachChild(parentName: string, link: ChildLink): Promise<ChildJson> {
    this.assertOpen();
    const parent = this.topic(parentName);
    const bad = (m: string) => new NaradError("invalid_child", m);
    if (link.kind === "replica") throw bad("Replica children keep a copy on other nodes and need a cluster (--control-plane); use a fanout child on one node.");
    if (parent.meta.parent !== null) throw bad(`${parentName} is a child of ${parent.meta.parent.topic}; a child cannot have children.`);
    if (parent.meta.children.some((c) => c.topic === link.topic && (c.kind === "remote") === (link.kind === "remote"))) {
      throw new NaradError("child_exists", `${link.topic} is attached to ${parentName} already.`);
    }
    let child: Topic | undefined;
    if (link.kind !== "remote") {
      if (link.topic === parentName) throw bad("A topic cannot be its own child.");
      child = this.topic(link.topic);
      if (child.meta.parent !== null) throw bad(`${link.topic} is a child of ${child.meta.parent.topic} already; a child has one parent.`);
      if (child.meta.children.length > 0) throw bad(`${link.topic} has children of its own; a child cannot have children.`);
    }
    const run = parent.metaChain.then(async () => {
      for (const c of parent.copiers) if (c !== undefined) await c.cursors.setNow(link.topic, c.partition.log.endOffset);
      if (child !== undefined) await this.saveMeta(child, { ...child.meta, parent: { topic: parentName, kind: link.kind } });
      await this.saveMeta(parent, { ...parent.meta, children: [...parent.meta.children, link] });
      this.log.info({ parent: parentName, child: link.topic, kind: link.kind }, "child attached");
      return parent.toJson().children.find((c) => c.topic === link.topic)!;
    });
    parent.metaChain = run.catch(() => undefined);
    return run;
  }

  async detachChild(parentName: string, childName: string): Promise<void> {
    this.assertOpen();
    const parent = this.topic(parentName);
    if (!parent.meta.children.some((c) => c.topic === childName)) {
      throw new NaradError("child_not_found", `${childName} is not a child of ${parentName}.`);
    }
    const run = parent.metaChain.then(async () => {
      await this.unlink(parent, childName);
    });
    parent.metaChain = run.catch(() => undefined);
    return run;
  }

  private async unlink(parent: Topic, childName: string): Promise<void> {
    await this.saveMeta(parent, { ...parent.meta, children: parent.meta.children.filter((c) => c.topic !== childName) });
    for (const c of parent.copiers) if (c !== undefined) await c.cursors.setNow(childName, undefined);
    const child = this.topics.get(childName);
    if (child !== undefined && child.meta.parent?.topic === parent.meta.name) await this.saveMeta(child, { ...child.meta, parent: null });
    this.log.info({ parent: parent.meta.name, child: childName }, "child detached");
  }

  /** A deleted topic leaves its parent's children and frees its own children. */
  private async detachAllLinks(t: Topic): Promise<void> {
    const parentName = t.meta.parent?.topic;
    const parent = parentName === undefined ? undefined : this.topics.get(parentName);
    if (parent !== undefined && !parent.deleted) await this.unlink(parent, t.meta.name);
    for (const l of t.meta.children) {
      const child = this.topics.get(l.topic);
      if (l.kind !== "remote" && child !== undefined && child.meta.parent?.topic === t.meta.name) await this.saveMeta(child, { ...child.meta, parent: null });
    }
  }

  /** Copies records into one child; resolves once they are durable there. */
  private async copyTo(parent: Topic, link: ChildLink, records: StoredRecord[], partition: number): Promise<void> {
    if (link.kind === "remote") {
      const id = `${link.url}|${link.credentials?.user ?? ""}`;
      let client = this.remotes.get(id);
      if (client === undefined) {
        client = new Narad({ url: link.url!, user: link.credentials?.user, password: link.credentials?.password, requestTimeoutMs: REMOTE_PUSH_TIMEOUT_MS });
        this.remotes.set(id, client);
      }
      try {
        await client.produceBatch(
          link.topic,
          records.map((r) => ({ key: r.key === null ? undefined : r.key.toString("utf8"), payload: r.payload })),
        );
      } catch (e) {
        // Stored in part (its messages went to several owners there): the copier sends the rest again.
        if (e instanceof NaradPartialBatchError) throw new CopyPartlyStored(records.filter((_, i) => e.results[i]!.status === "stored").map((r) => r.offset), e);
        throw e;
      }
      return;
    }
    if (this.opts.cluster !== undefined) {
      await this.opts.cluster.copyToChild(link.topic, records, link.kind === "replica" ? partition : undefined);
      this.metrics.childCopied.inc({ parent: parent.meta.name, child: link.topic }, records.length);
      return;
    }
    const child = this.topics.get(link.topic);
    if (child === undefined || child.deleted) throw new Error(`child topic ${link.topic} of ${parent.meta.name} is gone`);
    await this.appendTo(child, records.map((r) => ({ key: r.key, payload: r.payload })));
    this.metrics.childCopied.inc({ parent: parent.meta.name, child: link.topic }, records.length);
  }

  // ---- produce --------------------------------------------------------------------------------

  /**
   * Cluster mode: appends every item to one partition this node owns, and answers only if it
   * still owns it once the fsync returned (fencing: docs/architecture.md). NaradError not_owner
   * (definite: nothing was written) when it does not own the partition now; ownership_lost
   * (indefinite) when it lost it while the write was in flight.
   */
  async produceTo(topicName: string, partition: number, items: ProduceItem[]): Promise<{ partition: number; offset: number }[]> {
    this.assertOpen();
    const t = this.topic(topicName);
    const p = t.partitions[partition];
    if (p === undefined || !this.owns(t, p)) throw notOwner(topicName, partition);
    let bytes = 0;
    for (const it of items) bytes += it.payload.length + (it.key?.length ?? 0) + 32;
    if (this.pendingSyncBytes + bytes > this.opts.pendingSyncBytesMax && this.pendingSyncBytes > 0) {
      throw new NaradError("overloaded", undefined, { retryAfterS: 1 });
    }
    const results = await this.appendGroups(
      t,
      items.map((it) => ({ key: it.key === null ? null : Buffer.from(it.key, "utf8"), payload: it.payload })),
      new Map([[partition, items.map((_, i) => i)]]),
    );
    if (!this.owns(t, p)) {
      throw new NaradError("ownership_lost", `This node lost its lease on ${topicName}/${partition} while the write was in flight; the message may or may not be stored.`);
    }
    this.metrics.produced.inc({ topic: topicName }, items.length);
    return results;
  }

  /** Appends the items, resolves once they are all durable; results in request order. */
  async produce(topicName: string, items: ProduceItem[]): Promise<{ partition: number; offset: number }[]> {
    this.assertOpen();
    const t = this.topic(topicName);
    let bytes = 0;
    for (const it of items) bytes += it.payload.length + (it.key?.length ?? 0) + 32;
    const overloaded = this.pendingSyncBytes + bytes > this.opts.pendingSyncBytesMax && this.pendingSyncBytes > 0;
    if (overloaded && !this.opts.bugs.has("store-on-429")) {
      throw new NaradError("overloaded", undefined, { retryAfterS: 1 });
    }
    const results = await this.appendTo(
      t,
      items.map((it) => ({ key: it.key === null ? null : Buffer.from(it.key, "utf8"), payload: it.payload })),
    );
    if (overloaded) throw new NaradError("overloaded", undefined, { retryAfterS: 1 }); // seeded bug path
    this.metrics.produced.inc({ topic: topicName }, items.length);
    return results;
  }

  /**
   * Appends to a topic's partitions and resolves once every record is durable (fsync before
   * 202: docs/architecture.md). Used by produce and by copies into child topics.
   */
  private async appendTo(t: Topic, items: { key: Buffer | null; payload: Buffer }[]): Promise<{ partition: number; offset: number }[]> {
    const n = t.partitions.length;
    // Unkeyed messages of one request go together to the next partition in turn (a "sticky"
    // partitioner, as Kafka's producer does): one append and one fdatasync per batch instead of
    // one per partition, while successive requests still go round the partitions.
    const unkeyedPartition = t.produceRr++ % n;
    if (t.produceRr > 0x3fffffff) t.produceRr %= n;
    const groups = groupByPartition(items.map((it) => it.key), n, unkeyedPartition);
    return this.appendGroups(t, items, groups);
  }

  /** Appends each group to its partition (which must be open) and waits for every fsync. */
  private async appendGroups(t: Topic, items: { key: Buffer | null; payload: Buffer }[], groups: Map<number, number[]>): Promise<{ partition: number; offset: number }[]> {
    let bytes = 0;
    for (const it of items) bytes += it.payload.length + (it.key?.length ?? 0) + 32;
    const now = this.opts.clock.nowMs();
    const started = this.opts.clock.monoMs();
    const results = new Array<{ partition: number; offset: number }>(items.length);
    const durables: Promise<void>[] = [];
    for (const [p, idxs] of groups) {
      const { baseOffset, durable } = t.partitions[p]!.log.append(
        idxs.map((i) => items[i]!),
        now,
      );
      idxs.forEach((i, j) => (results[i] = { partition: p, offset: baseOffset + j }));
      durables.push(durable);
    }
    this.pendingSyncBytes += bytes;
    try {
      if (this.opts.bugs.has("ack-before-fsync")) {
        // Seeded bug: answer before the fsync that makes the records durable.
        void Promise.all(durables).catch(() => undefined);
      } else {
        await Promise.all(durables);
      }
    } catch (e) {
      this.log.error({ err: (e as Error).message, topic: t.meta.name }, "append failed");
      throw new NaradError("storage_failed");
    } finally {
      this.pendingSyncBytes -= bytes;
    }
    this.metrics.commitLatency.observe((this.opts.clock.monoMs() - started) / 1000);
    this.wake(t);
    if (t.meta.children.length > 0) for (const p of groups.keys()) t.copiers[p]?.kick();
    return results;
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
    if (this.waiterCount >= this.opts.waitersMax) throw new NaradError("too_many_waiters", undefined, { retryAfterS: 1 });
    return new Promise<Delivery[]>((resolve) => {
      const w: Waiter = {
        max,
        resolve,
        done: false,
        timer: setTimeout(() => {
          const i = t.waiters.indexOf(w);
          if (i >= 0) t.waiters.splice(i, 1);
          this.finishWaiter(w, []);
        }, waitMs),
      };
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
    clearTimeout(w.timer);
    this.waiterCount--;
    this.metrics.waiters.set(this.waiterCount);
    w.resolve(d);
  }

  /** Serves waiting long polls in arrival order while messages are available. */
  private wake(t: Topic): void {
    if (t.waiters.length === 0) return;
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

  private async tryConsume(t: Topic, max: number): Promise<Delivery[]> {
    const now = this.opts.clock.monoMs();
    const vt = this.opts.bugs.has("early-lapse") ? Math.max(1, Math.floor(t.meta.visibility_timeout_ms / 4)) : t.meta.visibility_timeout_ms;
    const n = t.partitions.length;
    if (n === 0) return [];
    const takenBy: { p: Partition; taken: Taken[] }[] = [];
    let got = 0;
    const start = t.consumeRr++ % n;
    if (t.consumeRr > 0x3fffffff) t.consumeRr %= n;
    for (let i = 0; i < n && got < max; i++) {
      const p = t.partitions[(start + i) % n];
      if (p === undefined || !this.owns(t, p)) continue;
      p.expire(now);
      const taken = p.take(max - got, now, vt);
      if (taken.length > 0) {
        takenBy.push({ p, taken });
        got += taken.length;
      }
    }
    if (got === 0) return [];
    const out: Delivery[] = [];
    let budget = this.opts.consumeBytesMax;
    for (const { p, taken } of takenBy) {
      let records: Map<number, StoredRecord>;
      try {
        records = await p.readTaken(taken, budget);
      } catch (e) {
        this.log.error({ err: (e as Error).message, partition: p.index }, "read failed");
        for (const x of taken) p.release(x.offset, x.tag, false);
        continue;
      }
      const keep: Taken[] = [];
      for (const x of taken) {
        const r = records.get(x.offset);
        if (r === undefined) {
          p.release(x.offset, x.tag, x.offset >= p.log.earliestOffset);
        } else if (out.length + keep.length > 0 && budget - r.payload.length < 0) {
          p.release(x.offset, x.tag, false); // over this answer's byte budget: next time
        } else {
          budget -= r.payload.length;
          keep.push(x);
        }
      }
      const handles = this.codec.mint(
        t.meta.incarnation,
        keep.map((x) => ({ partition: p.index, offset: x.offset, tag: x.tag })),
      );
      keep.forEach((x, i) => {
        out.push({ partition: p.index, offset: x.offset, deliveryCount: x.deliveryCount, receiptHandle: handles[i]!, record: records.get(x.offset)! });
      });
    }
    const redeliveries = out.filter((d) => d.deliveryCount > 1).length;
    this.metrics.consumed.inc({ topic: t.meta.name }, out.length);
    if (redeliveries > 0) this.metrics.redelivered.inc({ topic: t.meta.name }, redeliveries);
    return out;
  }

  /** Settles receipt handles; one status per handle, in order. */
  settle(topicName: string, handles: string[], action: SettleAction): SettleStatus[] {
    this.assertOpen();
    const t = this.topic(topicName);
    const fields = this.codec.verify(t.meta.incarnation, handles);
    const now = this.opts.clock.monoMs();
    const bugs = this.opts.bugs;
    let woke = false;
    const out = fields.map((f): SettleStatus => {
      if (f === null || f.partition >= t.meta.partitions) return 400;
      const p = t.partitions[f.partition];
      if (p === undefined || !this.owns(t, p)) return 503; // cluster mode: not served here now
      if (f.bootSeq !== this.opts.bootSeq || f.nodeNum !== this.opts.nodeNum) return 410; // an earlier lease holder
      const tag = bugs.has("accept-replaced-handle") ? p.currentTag(f.offset) ?? f.tag : f.tag;
      let r: "ok" | "gone";
      switch (action) {
        case "ack":
          if (bugs.has("redeliver-acked") && f.offset % 5 === 0 && p.leaseDeliveryCount(f.offset, tag) === 1) {
            r = p.nack(f.offset, tag, now); // seeded bug: answers 204, yet the message comes back
            woke ||= r === "ok";
          } else {
            r = bugs.has("acks-not-persisted") ? p.ackInMemoryOnly(f.offset, tag, now) : p.ack(f.offset, tag, now);
          }
          break;
        case "extend":
          r = p.extend(f.offset, tag, now, t.meta.visibility_timeout_ms);
          break;
        case "nack":
          r = bugs.has("nack-drops") ? p.ack(f.offset, tag, now) : p.nack(f.offset, tag, now);
          woke ||= r === "ok";
          break;
      }
      return r === "ok" ? 204 : 410;
    });
    // Counted per outcome, not per handle: a labelled inc hashes its labels each time.
    let ok = 0;
    let gone = 0;
    let unavailable = 0;
    for (const s of out) {
      if (s === 204) ok++;
      else if (s === 410) gone++;
      else if (s === 503) unavailable++;
    }
    const invalid = out.length - ok - gone - unavailable;
    if (ok > 0) this.metrics.settled.inc({ topic: topicName, action, result: "ok" }, ok);
    if (gone > 0) this.metrics.settled.inc({ topic: topicName, action, result: "gone" }, gone);
    if (unavailable > 0) this.metrics.settled.inc({ topic: topicName, action, result: "unavailable" }, unavailable);
    if (invalid > 0) this.metrics.settled.inc({ topic: topicName, action, result: "invalid" }, invalid);
    if (woke) this.wake(t);
    return out;
  }

  /**
   * Cluster mode: undoes leases that never reached a client (a long poll on another partition
   * answered first), restoring their delivery counts.
   */
  releaseLeases(topicName: string, handles: string[]): void {
    const t = this.topic(topicName);
    const fields = this.codec.verify(t.meta.incarnation, handles);
    for (const f of fields) {
      if (f === null || f.bootSeq !== this.opts.bootSeq || f.nodeNum !== this.opts.nodeNum) continue;
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
    if (p === undefined) throw notOwner(topicName, partition);
    const earliest = p.log.earliestOffset;
    const end = p.log.syncedOffset;
    const from = Math.max(offset, earliest);
    let records = from < end ? await p.log.read(from, Math.min(limit, end - from), this.opts.consumeBytesMax) : [];
    if (this.opts.bugs.has("replay-skip") && records.length > 2) records = records.filter((_, i) => i !== 1);
    const nextOffset = records.length > 0 ? records[records.length - 1]!.offset + 1 : Math.min(from, Math.max(end, earliest));
    return { records, nextOffset, earliestOffset: earliest, endOffset: end };
  }

  // ---- housekeeping and shutdown ----------------------------------------------------------------

  private sweepLeases(): void {
    const now = this.opts.clock.monoMs();
    for (const t of this.topics.values()) {
      let lapsed = 0;
      for (const p of t.partitions) if (p !== undefined) lapsed += p.expire(now);
      if (lapsed > 0) this.wake(t);
    }
  }

  private async runHousekeeping(): Promise<void> {
    for (const t of [...this.topics.values()]) {
      if (t.deleted) continue;
      for (const p of t.open()) {
        if (t.partitions[p.index] !== p) continue; // closed meanwhile (cluster mode: moved, dropped)
        try {
          await p.log.maybeRoll();
          const before = p.log.earliestOffset;
          await p.log.enforceRetention(t.meta.retention_ms);
          if (p.log.earliestOffset !== before) {
            p.afterRetention();
            this.log.info({ topic: t.meta.name, partition: p.index, earliest: p.log.earliestOffset }, "retention removed segments");
          }
        } catch (e) {
          if (t.deleted) break;
          this.log.error({ err: (e as Error).message, topic: t.meta.name, partition: p.index }, "housekeeping failed");
        }
      }
    }
  }

  private topicGauges() {
    return [...this.topics.values()]
      .filter((t) => !t.deleted)
      .map((t) => ({
        topic: t.meta.name,
        backlog: t.open().reduce((s, p) => s + p.backlog, 0),
        inFlight: t.open().reduce((s, p) => s + p.inFlight, 0),
        partitions: t.open().length,
      }));
  }

  private childGauges() {
    const out = new Map<string, { parent: string; child: string; lagMessages: number; lagSeconds: number }>();
    for (const t of this.topics.values()) {
      if (t.deleted || t.meta.children.length === 0) continue;
      for (const c of t.copiers) {
        if (c === undefined) continue;
        for (const st of c.stats()) {
          const k = `${t.meta.name}\0${st.child}`;
          const g = out.get(k) ?? { parent: t.meta.name, child: st.child, lagMessages: 0, lagSeconds: 0 };
          g.lagMessages += st.lagMessages;
          g.lagSeconds = Math.max(g.lagSeconds, st.lagSeconds);
          out.set(k, g);
        }
      }
    }
    return [...out.values()];
  }

  private assertOpen(): void {
    if (this.closed) throw new NaradError("shutting_down");
  }

  /** Answers long polls now (empty), so a graceful stop does not wait out their wait_ms. */
  releaseWaiters(): void {
    for (const t of this.topics.values()) for (const w of t.waiters.splice(0)) this.finishWaiter(w, []);
  }

  /** Flushes and fsyncs every log and ack log, then closes them. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.housekeeping);
    clearInterval(this.sweeper);
    this.releaseWaiters();
    for (const t of this.topics.values()) {
      for (let i = 0; i < t.partitions.length; i++) await this.closePartitionAt(t, i);
    }
    for (const c of this.remotes.values()) await c.close();
  }
}

function notOwner(topic: string, partition: number): NaradError {
  return new NaradError("not_owner", `This node does not serve ${topic}/${partition} now (it is not its owner, its lease lapsed, or the partition is frozen for a move); retry shortly.`);
}

function parseMeta(j: unknown, name: string): TopicMeta {
  const m = j as Partial<TopicMeta>;
  const ok =
    typeof m === "object" &&
    m !== null &&
    m.name === name &&
    Number.isSafeInteger(m.incarnation) &&
    Number.isSafeInteger(m.partitions) &&
    m.partitions! >= 1 &&
    m.partitions! <= LIMITS.partitionsMax &&
    Number.isSafeInteger(m.visibility_timeout_ms) &&
    Number.isSafeInteger(m.retention_ms) &&
    Array.isArray(m.children);
  if (!ok) throw new Error("topic.json has missing or malformed fields");
  return {
    name,
    incarnation: m.incarnation!,
    partitions: m.partitions!,
    visibility_timeout_ms: m.visibility_timeout_ms!,
    retention_ms: m.retention_ms!,
    owner: typeof m.owner === "string" ? m.owner : null,
    children: m.children!,
    parent: m.parent && typeof m.parent === "object" && typeof m.parent.topic === "string" ? m.parent : null,
    created_at: Number.isSafeInteger(m.created_at) ? m.created_at! : 0,
  };
}

export { DEFAULTS };
