// The broker's types, as its callers (src/http, src/cluster, src/server.ts) and its rooms use
// them: its options, what it needs from a cluster, a delivery, a produce's items, a settle's
// answers and a replay's. broker.ts re-exports them.

import type { Logger } from "pino";
import type { OriginJson } from "../protocol/wire.js";
import type { Clock } from "../platform/clock.js";
import type { Scheduler } from "../platform/scheduler.js";
import type { AckLog, PartitionLog, StoredRecord } from "../storage/types.js";
import { decodeAttrs } from "../storage/attrs.js";
import type { StorageFs } from "../storage/index.js";
import type { RemoteSink } from "./children.js";
import type { DeadLetterItem } from "./dead-letters.js";
import type { BrokerFaults } from "./faults.js";
import type { ReplicatedParts } from "./partition-opener.js";
import type { ProducerRef, WindowLimits } from "./producers.js";
import type { TopicMeta } from "./topic.js";

export interface BrokerOptions {
  dataDir: string;
  clock: Clock;
  /** Every timer of the broker; default the system's. */
  scheduler?: Scheduler;
  logger: Logger;
  nodeId: string;
  bootId: string;
  bootSeq: number;
  /** The node's number in receipt handles: 0 on a single node, assigned by the control plane in a cluster. */
  nodeNum: number;
  secret: Buffer;
  segmentBytesMax: number;
  segmentAgeMaxMs: number;
  /** storage.ack_flush_interval_ms */
  ackFlushIntervalMs: number;
  /** storage.consumer_offset_commit_interval_ms: how often acks and copy cursors are fsynced. */
  consumerOffsetCommitIntervalMs: number;
  powerLoss: boolean;
  pendingSyncBytesMax: number;
  /** limits.long_polls: most long polls waiting at once. */
  longPollsMax: number;
  consumeBytesMax: number;
  housekeepingIntervalMs: number;
  defaultPartitions: number;
  defaultVisibilityTimeoutMs: number;
  defaultRetentionMs: number;
  /** The fault seam (./faults.ts); default none. Only src/server.ts hands in seeded bugs. */
  faults?: BrokerFaults;
  /** Where copies to remote children go (src/remote-children.ts); default: pushes fail. */
  remote?: RemoteSink;
  /**
   * A single node: the id of the user of this name now, for a topic.json written before owner
   * ids (./metadata.ts); default none, and such a topic.json is left as it is.
   */
  userIdOf?: (name: string) => string | undefined;
  /** Set in cluster mode. */
  cluster?: BrokerCluster;
  /** The filesystem of every partition's files (default node:fs; tests inject faults). */
  storageFs?: StorageFs;
  /** limits.partitions: most partitions this node holds (single node; the server derives it from the descriptor limit). Default: no bound. */
  partitionsMax?: number;
  /** storage.idle_close_ms: a partition idle this long lets its descriptors go (default IDLE_CLOSE_MS_DEFAULT). */
  idleCloseMs?: number;
  /** storage.inline_fdatasync (default true): src/storage/partition-log.ts, "Inline fdatasync". */
  inlineFdatasync?: boolean;
  /** producers.*: the dedupe windows' bounds (./producers.ts; defaults there). */
  dedupe?: WindowLimits;
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
  /**
   * Appends dead letters to a topic wherever its partitions live (./dead-letters.ts); resolves
   * once every copy is durable there, or throws CopyPartlyStored naming the `sources` stored.
   */
  appendDeadLetters(topic: string, items: DeadLetterItem[], sources: StoredRecord[]): Promise<void>;
  /**
   * Wraps an owned partition of a replicated topic as it opens (src/cluster/replication): its
   * appends ship to the followers, its `syncedOffset` is what the acks mode lets be acknowledged
   * and seen, and its acks reach the followers. `onVisible` is called when more becomes visible
   * without a produce of this node waiting for it.
   */
  replicate?: {
    /** Before an owned replicated partition's files open here: a follower's copy of them closes. */
    prepare(topic: string, partition: number): Promise<void>;
    wrap(o: ReplicateRequest): Promise<ReplicatedParts>;
  };
}

export interface ReplicateRequest {
  meta: TopicMeta;
  partition: number;
  epoch: number;
  dir: string;
  log: PartitionLog;
  acks: AckLog;
  onVisible: () => void;
}

/**
 * Bytes a message counts for against the limits on bytes in flight (limits.pending_sync_bytes
 * here, the forward coalescer's batch bound in src/cluster/service.ts): its key and payload plus
 * MESSAGE_OVERHEAD_BYTES, a round figure above the log record's 29-byte header
 * (src/storage/record.ts), the largest fixed cost a message adds (a forward's binary framing adds 8).
 * So a flood of tiny messages still fills the bound. Key lengths may be in UTF-16 units: an estimate.
 */
export const MESSAGE_OVERHEAD_BYTES = 32;

export function messagesBytesEstimate(items: readonly { key: { length: number } | null; payload: { length: number } }[]): number {
  let bytes = 0;
  for (const it of items) bytes += it.payload.length + (it.key?.length ?? 0) + MESSAGE_OVERHEAD_BYTES;
  return bytes;
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
  /** A dead letter's source (its record's origin attribute). */
  origin?: OriginJson;
  /** The message's headers, when it has any. */
  headers?: readonly (readonly [string, string])[];
}

/** The commit of one partition that single produces (produceOne) joined, with what they added to it. */
export interface JoinedCommit {
  durable: Promise<void>;
  messages: number;
  /** Their bytes in the pending-sync count (messagesBytesEstimate's). */
  bytes: number;
  /** When the first of them was appended (monotonic ms): the commit time observed. */
  startedMono: number;
}

/**
 * Hears how a produceOne ended: the stored place once durable, or the error (a NaradError of the
 * error table). It must not throw: it runs in the commit's promise reaction.
 */
export type ProduceOneDone = (err: unknown, r?: { partition: number; offset: number; duplicate?: true }) => void;

export interface ProduceItem {
  key: string | null;
  payload: Buffer;
  /** An idempotent produce's producer and sequence (./producers.ts); every item of a request has one or none does. */
  producer?: ProducerRef;
  /** Record attributes (src/storage/attrs.ts): only the broker's own appends (a dead letter's origin) set them. */
  attrs?: Buffer;
  /** The message's headers (src/storage/attrs.ts tag 3), stored with the record. */
  headers?: readonly (readonly [string, string])[];
  /** Not delivered before this long after it is stored (tag 4, notBefore: the owner's clock). */
  delayMs?: number;
}

/** A record's headers and not-before time, from its attribute block (none when it has no block, or a damaged one). */
export function recordAttrs(r: StoredRecord): { headers?: readonly (readonly [string, string])[]; notBeforeMs?: number } {
  if (r.attrs === undefined) return {};
  const a = decodeAttrs(r.attrs);
  return typeof a === "string" ? {} : a;
}

/** dead_letter: ack ?dead_letter=true, the leased message is moved to the dead-letter topic now. */
export type SettleAction = "ack" | "extend" | "nack" | "dead_letter";
/** 503: the partition is not served here now (cluster mode: not owned, lease lapsed, frozen). */
export type SettleStatus = 204 | 400 | 410 | 503;

export interface ReplayResult {
  records: StoredRecord[];
  nextOffset: number;
  earliestOffset: number;
  endOffset: number;
}
