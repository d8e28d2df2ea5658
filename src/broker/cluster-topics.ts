// Cluster mode: the topics and partitions the control plane places on this node, as
// src/cluster/ownership.ts applies them (and src/cluster/moves.ts and service.ts ask about them).
// The metadata are the control plane's rows (./metadata.ts, ControlPlaneRows): applying one writes
// no file here. A topic's `partitions` array is sparse: only the partitions this node owns are
// open, each at the epoch its placement names (docs/architecture.md, "epoch check before any owner
// write"), under DATA/cluster/NAME/INCARNATION/partitions/P.
//
// Opening and closing a partition are metadata changes of its topic, serialised with the others
// (Topic.serially).

import assert from "node:assert/strict";
import { stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Scheduler } from "../platform/scheduler.js";
import type { AckLog, PartitionLog } from "../storage/index.js";
import type { CursorFile } from "../storage/cursor-file.js";
import type { ChildLinks } from "./child-links.js";
import type { MetadataStore } from "./metadata.js";
import type { Partition } from "./partition.js";
import type { PartitionOpener } from "./partition-opener.js";
import { Topic, type TopicMeta } from "./topic.js";

/** A topic's metadata as the control plane keeps it. */
export type ClusterTopicMeta = TopicMeta;

export interface ClusterTopicsOptions {
  topics: Map<string, Topic>;
  store: MetadataStore;
  partitions: PartitionOpener;
  links: ChildLinks;
  logger: Logger;
  /** Whether the broker runs in cluster mode at all. */
  clusterMode: boolean;
  /** A topic by name; NaradError topic_not_found unless it exists. */
  topic: (name: string) => Topic;
  /** The epoch check before an owner write (Broker.owns). */
  owns: (t: Topic, p: Partition) => boolean;
  /** NaradError not_owner for a partition not served here. */
  notOwner: (topic: string, partition: number) => Error;
  /** Answers the topic's long polls now (empty): it is going. */
  endWaiters: (t: Topic) => void;
  /** Serves the topic's long polls: a partition opened. */
  wake: (t: Topic) => void;
  assertOpen: () => void;
}

export class ClusterTopics {
  constructor(private readonly o: ClusterTopicsOptions) {}

  /** The epoch an owned partition is open at here, or undefined when it is not open. */
  openEpoch(name: string, partition: number): number | undefined {
    return this.o.topics.get(name)?.partitions[partition]?.epoch;
  }

  /** The incarnation of the topic as this broker knows it. */
  knownIncarnation(name: string): number | undefined {
    const t = this.o.topics.get(name);
    return t === undefined || t.deleted ? undefined : t.meta.incarnation;
  }

  /** Adds or updates a topic's metadata (no files are written). */
  applyTopic(m: ClusterTopicMeta): void {
    assert.ok(this.o.clusterMode, "applyTopic is for cluster mode");
    const t = this.o.topics.get(m.name);
    const meta: TopicMeta = { ...m, children: m.children.map((c) => ({ ...c })) };
    if (t === undefined || t.deleted) {
      const fresh = new Topic(meta, this.o.store.dirOf(m.name, m.incarnation));
      this.o.topics.set(m.name, fresh);
      this.o.links.syncRemotes(fresh);
      return;
    }
    assert.equal(t.meta.incarnation, m.incarnation, "a recreated topic must be dropped first");
    const before = new Set(t.meta.children.map((c) => c.topic));
    t.meta = meta;
    this.o.links.syncRemotes(t);
    for (const c of t.copiers) {
      if (c === undefined) continue;
      for (const l of meta.children) {
        // An attach reaches every owner before the link is written (src/cluster/service.ts); a
        // link that arrives without a cursor here missed that step: start at the end, so no
        // message from before the attach is copied.
        if (!before.has(l.topic) && c.cursors.get(l.topic) === undefined) {
          this.o.logger.warn({ topic: m.name, partition: c.partition.index, child: l.topic }, "a child link arrived without its copy cursor; copying starts at the end");
          c.cursors.advance(l.topic, c.partition.log.endOffset);
        }
      }
      if (meta.children.length > 0) c.kick();
    }
  }

  /** Removes a topic (deleted, or created again as a new incarnation) and its files here. */
  async dropTopic(name: string): Promise<void> {
    const t = this.o.topics.get(name);
    if (t === undefined) return;
    t.deleted = true;
    this.o.endWaiters(t);
    this.o.links.syncRemotes(t);
    return t.serially(async () => {
      await this.o.partitions.closeAll(t);
      this.o.partitions.forget(t);
      if (this.o.topics.get(name) === t) this.o.topics.delete(name);
      await this.o.store.discard(t.dir);
      this.o.logger.info({ topic: name, incarnation: t.meta.incarnation }, "topic dropped from this node");
    });
  }

  /** Opens a partition this node owns at `epoch` (a reopen when it is open at another epoch). */
  async openPartition(name: string, partition: number, epoch: number): Promise<void> {
    this.o.assertOpen();
    const t = this.o.topic(name);
    return t.serially(async () => {
      if (t.deleted) return;
      const open = t.partitions[partition];
      if (open !== undefined && open.epoch === epoch) return;
      if (open !== undefined) await this.o.partitions.close(t, partition);
      await this.o.partitions.open(t, partition, epoch);
      this.o.logger.info({ topic: name, partition, epoch }, "partition opened");
      this.o.wake(t);
    });
  }

  /**
   * Closes a partition here (flushing and syncing its log, ack log and copy cursors). With
   * `remove`, its files go too: the partition moved to another node, which has the copy.
   */
  async closePartition(name: string, partition: number, remove: boolean): Promise<void> {
    const t = this.o.topics.get(name);
    if (t === undefined) return;
    return t.serially(async () => {
      const wasOpen = t.partitions[partition] !== undefined;
      await this.o.partitions.close(t, partition);
      if (remove) await this.o.store.discard(join(t.dir, "partitions", String(partition)));
      if (wasOpen || remove) this.o.logger.info({ topic: name, partition, removed: remove }, "partition closed");
    });
  }

  /**
   * Attaching or detaching a child: sets the child's copy cursor of one owned partition to its
   * current end (durably, before the link is written anywhere), or removes it.
   */
  async setChildCursor(name: string, partition: number, child: string, set: boolean): Promise<void> {
    const t = this.o.topic(name);
    const c = t.copiers[partition];
    const p = t.partitions[partition];
    if (c === undefined || p === undefined || !this.o.owns(t, p)) throw this.o.notOwner(name, partition);
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

  /**
   * Opens a partition's log and ack log in its directory without serving it: a follower replica
   * of a replicated partition (src/cluster/replication), which only the leader writes to.
   */
  openReplicaFiles(name: string, incarnation: number, partition: number, logScheduler?: Scheduler): Promise<{ log: PartitionLog; acks: AckLog; cursors: CursorFile }> {
    const dir = this.partitionDir(name, incarnation, partition);
    const logger = this.o.logger.child({ topic: name, partition, replica: "follower" });
    return this.o.partitions.openFiles(dir, logger, logScheduler).then(async (f) => {
      try {
        return { ...f, cursors: await this.o.partitions.openCursorFile(dir, logger) };
      } catch (e) {
        await f.log.close().catch(() => undefined);
        await f.acks.close().catch(() => undefined);
        throw e;
      }
    });
  }

  /** A partition's directory on this node. */
  partitionDir(name: string, incarnation: number, partition: number): string {
    return join(this.o.store.dirOf(name, incarnation), "partitions", String(partition));
  }
}
