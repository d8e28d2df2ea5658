// One topic as this node holds it: its metadata, its open partitions and their copiers, the long
// polls waiting on it, and the chain that serialises its metadata changes.
//
// A topic's metadata is the same record on a single node (topic.json, ./metadata.ts) and in a
// cluster (the control plane's row, applied by src/cluster/ownership.ts through ./cluster-topics.ts).
// Metadata changes of one topic (update, delete, attach, detach, a cluster partition opened or
// closed) run one after another through `serially`, so each starts from the state the previous
// one left, whatever order their requests arrived in.

import { LIMITS, type ChildJson, type TopicJson } from "../protocol/wire.js";
import type { Timer } from "../platform/scheduler.js";
import type { ChildLink, PartitionCopier } from "./children.js";
import type { Delivery, JoinedCommit } from "./broker.js";
import type { PathCounts } from "./metrics.js";
import type { Partition } from "./partition.js";
import { StickyPartitioner } from "./partitioner.js";

/** Who owns a topic: the user's id, which ownership is decided on, and its name, for showing. */
export interface TopicOwner {
  name: string;
  id: string;
}

/**
 * A topic as a node answers it to the HTTP layer: the wire's JSON and its owner's user id, which
 * authorization compares and the wire does not show (src/http/routes/topics.ts).
 */
export type TopicInfo = TopicJson & { owner_id: string | null };

/** A topic's metadata: topic.json on one node, the control plane's row in a cluster. */
/** A topic as the broker keeps it: its JSON, with the incarnation and the links' copy settings. */
export interface TopicMeta extends Omit<TopicJson, "children" | "parent"> {
  /**
   * The owner's user id (null: no owner); `owner` is that user's name. A topic.json written
   * before owner ids has none: ./metadata.ts maps its owner name once, at the first start.
   */
  owner_id: string | null;
  incarnation: number;
  children: ChildLink[];
  parent: NonNullable<TopicJson["parent"]> | null;
}

/** A long poll waiting for messages. */
export interface Waiter {
  max: number;
  resolve: (d: Delivery[]) => void;
  timer: Timer | undefined;
  done: boolean;
}

export class Topic {
  /** Sparse in cluster mode: only the partitions this node owns are open. */
  partitions: (Partition | undefined)[] = [];
  copiers: (PartitionCopier | undefined)[] = [];
  readonly waiters: Waiter[] = [];
  /** Where unkeyed produces go: runs of messages, one partition at a time (./partitioner.ts). */
  readonly unkeyed = new StickyPartitioner();
  /** narad_produced_messages_total's child for this topic, made at the first produce (no label hashing a request). */
  producedCounter: { inc(n?: number): void } | undefined;
  /** This topic's deliveries and settles not yet handed to their counters (./metrics.ts); taken at the first. */
  counts: PathCounts | undefined;
  /** Per partition, the commit single produces are joining now (Broker.produceOne). */
  readonly joining: (JoinedCommit | undefined)[] = [];
  consumeRr = 0;
  serving = false;
  serveAgain = false;
  deleted = false;
  /** The tail of this topic's metadata changes (see `serially`). */
  private metaChain: Promise<unknown> = Promise.resolve();

  constructor(
    public meta: TopicMeta,
    readonly dir: string,
  ) {}

  /**
   * Runs fn after every metadata change of this topic queued before it; its result (or error) is
   * the caller's, and a failure does not stop the changes queued after it.
   */
  serially<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.metaChain.then(fn);
    this.metaChain = run.catch(() => undefined);
    return run;
  }

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

  toJson(): TopicInfo {
    const m = this.meta;
    return {
      name: m.name,
      partitions: m.partitions,
      visibility_timeout_ms: m.visibility_timeout_ms,
      retention_ms: m.retention_ms,
      replication_factor: m.replication_factor,
      acks: m.acks,
      max_deliveries: m.max_deliveries,
      dead_letter_topic: m.dead_letter_topic,
      owner: m.owner,
      owner_id: m.owner_id,
      children: m.children.map(
        (c): ChildJson => (c.delay_ms === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delay_ms: c.delay_ms }),
      ),
      parent: m.parent,
      created_at: m.created_at,
    };
  }
}

/**
 * Reads a topic.json back; throws on missing or malformed fields. One written before owner ids
 * reads with owner_id null and its owner name kept (./metadata.ts maps it, see hasOwnerId).
 */
export function parseMeta(j: unknown, name: string): TopicMeta {
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
    // One copy on a single node: topic.json files of older builds have neither field.
    replication_factor: 1,
    acks: "leader",
    // Dead letters (SPEC "Dead letters"): topic.json files of older builds have neither field.
    max_deliveries: Number.isSafeInteger(m.max_deliveries) ? m.max_deliveries! : null,
    dead_letter_topic: typeof m.dead_letter_topic === "string" ? m.dead_letter_topic : null,
    owner: typeof m.owner === "string" ? m.owner : null,
    owner_id: typeof m.owner_id === "string" ? m.owner_id : null,
    children: m.children!,
    parent: m.parent && typeof m.parent === "object" && typeof m.parent.topic === "string" ? m.parent : null,
    created_at: Number.isSafeInteger(m.created_at) ? m.created_at! : 0,
  };
}

/** Whether a topic.json records its owner by id (false: written before owner ids existed). */
export function hasOwnerId(j: unknown): boolean {
  return typeof j === "object" && j !== null && "owner_id" in j;
}
