// A single node's topic changes: create, update (grow, settings, dead letters) and delete, with
// limits.partitions counted over them. Each change is undone whole when storage refuses it midway
// (a full disk, no descriptor): no half-made directory is left, and the answer is 503
// storage_unavailable naming the errno (docs/operations.md, "A full disk, no descriptors").
// Metadata last: the topic.json of a create or a grow is written after its partitions exist
// (docs/architecture.md). A cluster's topics change in the control plane (./cluster-topics.ts).

import { randomInt } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import type { CreateTopicRequest, UpdateTopicRequest } from "../protocol/wire.js";
import type { Clock } from "../platform/clock.js";
import type { ChildLinks } from "./child-links.js";
import { checkDeadLetterFields, nextDeadLetterFields } from "./dead-letters.js";
import type { MetadataStore } from "./metadata.js";
import type { PartitionOpener } from "./partition-opener.js";
import { Topic, type TopicInfo, type TopicMeta, type TopicOwner } from "./topic.js";

export interface NodeTopicsOptions {
  topics: Map<string, Topic>;
  store: MetadataStore;
  partitions: PartitionOpener;
  links: ChildLinks;
  logger: Logger;
  clock: Clock;
  /** What a create leaves out takes these (the node's topics.* settings). */
  defaults: { partitions: number; visibilityTimeoutMs: number; retentionMs: number };
  /** limits.partitions of this node. */
  partitionsMax: number;
  /** A topic by name; NaradError topic_not_found unless it exists. */
  topic: (name: string) => Topic;
  assertOpen: () => void;
  /** Answers the topic's long polls now (empty): it is going. */
  endWaiters: (t: Topic) => void;
  /** A topic was deleted: the broker forgets what it kept for its partitions. */
  deleted: (name: string) => void;
}

export class NodeTopics {
  private readonly creating = new Set<string>();
  /** Partitions of this node's topics, and of creates and grows in flight (limits.partitions). */
  private held = 0;

  constructor(private readonly o: NodeTopicsOptions) {}

  get partitionsHeld(): number {
    return this.held;
  }

  /** Counts the partitions of a topic a start found: a start never refuses the topics it has. */
  adopt(partitions: number): void {
    this.held += partitions;
  }

  /** Takes `n` more partitions against limits.partitions, or refuses (409, nothing made). */
  private reserve(n: number, what: string): void {
    if (this.held + n > this.o.partitionsMax) {
      throw new NaradError(
        "partitions_limit",
        `${what} needs ${n} more partitions, and this node holds ${this.held} of the ${this.o.partitionsMax} that limits.partitions allows; delete topics, or raise limits.partitions (and the process's descriptor limit).`,
      );
    }
    this.held += n;
  }

  async create(req: CreateTopicRequest, owner: TopicOwner | null): Promise<TopicInfo> {
    this.o.assertOpen();
    const name = req.name;
    if (this.o.topics.has(name) || this.creating.has(name)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(name)} exists already.`);
    if ((req.replication_factor ?? 1) > 1) {
      throw new NaradError("invalid_argument", "replication_factor above 1 needs a cluster (--control-plane): a single node keeps one copy of each partition.");
    }
    await checkDeadLetterFields(name, nextDeadLetterFields({ max_deliveries: null, dead_letter_topic: null }, req), async (x) => this.hasTopic(x));
    // Again after that await: a create of the same name may have begun meanwhile.
    if (this.o.topics.has(name) || this.creating.has(name)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(name)} exists already.`);
    const meta: TopicMeta = {
      name,
      incarnation: randomInt(1, 0xffffffff),
      partitions: req.partitions ?? this.o.defaults.partitions,
      visibility_timeout_ms: req.visibility_timeout_ms ?? this.o.defaults.visibilityTimeoutMs,
      retention_ms: req.retention_ms ?? this.o.defaults.retentionMs,
      replication_factor: 1,
      acks: "leader",
      max_deliveries: req.max_deliveries ?? null,
      dead_letter_topic: req.dead_letter_topic ?? null,
      owner: owner?.name ?? null,
      owner_id: owner?.id ?? null,
      children: [],
      parent: null,
      created_at: this.o.clock.nowMs(),
    };
    this.reserve(meta.partitions, `Topic ${JSON.stringify(name)}`);
    this.creating.add(name);
    const t = new Topic(meta, this.o.store.dirOf(name, meta.incarnation));
    try {
      await this.o.store.create(meta);
      for (let i = 0; i < meta.partitions; i++) await this.o.partitions.open(t, i, 0);
      await this.o.store.save(meta); // metadata last (docs/architecture.md)
      this.o.topics.set(name, t);
      this.o.logger.info({ topic: name, partitions: meta.partitions }, "topic created");
      return t.toJson();
    } catch (e) {
      this.held -= meta.partitions;
      // topic_exists: an offline topic's files are there, and are not ours to remove.
      if (e instanceof NaradError) throw e;
      // Undo it whole (no half-made directory is left), then say which storage error stopped it.
      await this.o.partitions.closeAll(t);
      this.o.partitions.forget(t);
      await this.removeDir(t.dir);
      throw storageRefusal(e, `Topic ${JSON.stringify(name)} was not created`, this.o.logger);
    } finally {
      this.creating.delete(name);
    }
  }

  /** Removes what a failed create or grow made; a failure here is logged (the next start removes it). */
  private async removeDir(dir: string): Promise<void> {
    await this.o.store.discard(dir).catch((e: unknown) => this.o.logger.error({ dir, err: (e as Error).message }, "could not remove what a failed create made; the next start removes it"));
  }

  async update(name: string, req: UpdateTopicRequest): Promise<TopicInfo> {
    this.o.assertOpen();
    const t = this.o.topic(name);
    return t.serially(async () => {
      if (t.deleted) throw new NaradError("topic_not_found");
      if (req.partitions !== undefined && req.partitions < t.meta.partitions) {
        throw new NaradError("partitions_decrease", `Topic ${name} has ${t.meta.partitions} partitions; partitions can only grow.`);
      }
      if (req.acks === "quorum") throw new NaradError("invalid_argument", 'acks "quorum" needs replication_factor 2 or more; this topic keeps one copy.');
      const deadLetters = nextDeadLetterFields(t.meta, req);
      await checkDeadLetterFields(name, deadLetters, async (x) => this.hasTopic(x));
      const next: TopicMeta = {
        ...t.meta,
        ...deadLetters,
        partitions: req.partitions ?? t.meta.partitions,
        visibility_timeout_ms: req.visibility_timeout_ms ?? t.meta.visibility_timeout_ms,
        retention_ms: req.retention_ms ?? t.meta.retention_ms,
      };
      // New partitions first, metadata last: a crash in between leaves empty partition
      // directories that the next start ignores until the metadata names them.
      const before = t.partitions.length;
      const added = next.partitions - before;
      if (added > 0) this.reserve(added, `Growing topic ${JSON.stringify(name)} to ${next.partitions} partitions`);
      try {
        for (let i = before; i < next.partitions; i++) await this.o.partitions.open(t, i, 0);
        await this.o.store.save(next);
      } catch (e) {
        this.held -= Math.max(0, added);
        // Undo the new partitions, files and all: the topic stays as it was.
        for (let i = before; i < t.partitions.length; i++) {
          await this.o.partitions.close(t, i);
          await this.removeDir(join(t.dir, "partitions", String(i)));
        }
        t.partitions.length = before;
        t.copiers.length = before;
        if (e instanceof NaradError) throw e;
        throw storageRefusal(e, `Topic ${JSON.stringify(name)} was not grown to ${next.partitions} partitions`, this.o.logger);
      }
      t.meta = next;
      return t.toJson();
    });
  }

  async delete(name: string): Promise<void> {
    this.o.assertOpen();
    const t = this.o.topic(name);
    t.deleted = true;
    return t.serially(async () => {
      this.o.endWaiters(t);
      await this.o.links.detachAll(t);
      this.o.links.syncRemotes(t);
      await this.o.partitions.closeAll(t);
      this.o.partitions.forget(t);
      await this.o.store.discard(t.dir);
      this.o.topics.delete(name);
      this.held -= t.partitions.length;
      this.o.deleted(name);
      this.o.logger.info({ topic: name }, "topic deleted");
    });
  }

  private hasTopic(name: string): boolean {
    const t = this.o.topics.get(name);
    return t !== undefined && !t.deleted;
  }
}

/** Errnos of storage that cannot take a change now: a create or grow is undone and answers 503 storage_unavailable. */
const STORAGE_ERRNOS: ReadonlySet<string> = new Set(["ENOSPC", "EDQUOT", "EMFILE", "ENFILE", "EIO", "EROFS", "ENOMEM"]);

/** The errno of a storage error (or of its cause), or a short name for one that has none. */
export function errnoOf(e: unknown): string {
  for (let x = e, depth = 0; x instanceof Error && depth < 4; x = x.cause, depth++) {
    const code = (x as NodeJS.ErrnoException).code;
    if (typeof code === "string" && /^E[A-Z0-9]+$/.test(code)) return code;
  }
  return "storage error";
}

/**
 * A create or grow that failed midway and was undone: 503 storage_unavailable naming the errno
 * when storage refused it (full disk, no descriptor); anything else is a bug, rethrown as is.
 */
function storageRefusal(e: unknown, what: string, log: Logger): unknown {
  const code = errnoOf(e);
  log.error({ err: (e as Error).message }, `${what}: storage refused it; undone`);
  if (!STORAGE_ERRNOS.has(code)) return e;
  const why = code === "ENOSPC" || code === "EDQUOT" ? "the disk is full" : code === "EMFILE" || code === "ENFILE" ? "no file descriptor is free" : "the disk refused a write";
  return new NaradError("storage_unavailable", `${what}: ${why} (${code}); nothing of it was kept. Free space or descriptors and retry.`);
}
