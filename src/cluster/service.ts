// A cluster node's answer to every client request: any node accepts any request and routes it
// to the owners of the partitions it concerns (docs/operations.md, "Cluster"; the invariants are
// in docs/architecture.md).
//
// - Produce: the partition is chosen here (the key's hash; unkeyed messages of one request all go
//   to this node's current run's partition, src/broker/partitioner.ts), then appended locally or forwarded to its owner's internal
//   route, which appends to exactly that partition and answers 202 only after its fsync and only
//   while it still owns the partition. When the owner is known down, suspect, or refuses without
//   having written anything (definite: not_owner, owner_unreachable, shutting_down), the messages
//   go to another partition whose owner is usable, local ones first: a documented cause of
//   reordering, and for a keyed message of a different partition than its key's. No usable
//   partition: 503 unavailable. A failure after the request may have reached the owner is
//   ambiguous (502 forward_failed); so is a batch whose groups went to several owners and did not
//   all succeed, whose answer then says per message what is known: stored where, certainly not
//   stored, or unknown (batchResults), so a client can send again only what was not stored.
// - Consume: local partitions first, then each other owner in turn with wait 0; if nothing came
//   and the client waits, a local waiter and one long poll per other owner run at once; the first
//   to lease something wins, the others are aborted, and leases that still come back are released
//   on their owner (their delivery counts restored). Every message names the owner that holds its
//   lease.
// - Ack, extend, nack: each receipt handle is authenticated here (all nodes share the cluster
//   secret) and sent to its partition's current owner; a batch is split per owner and its
//   statuses merged in request order. After a move the new owner answers 410 to the old owner's
//   handles.
// - Replay: forwarded to the owner.
// - Topics, children, users: written to the control plane; then every live node is asked to
//   re-read what changed before the answer goes out (a barrier bounded by syncTimeoutMs), so a
//   client that created a topic through one node finds it on the next.
//
// Forwards that overlap in time and go the same way (produces to one partition, consumes from one
// owner, settles to one owner, with the same credentials) are merged into one request
// (src/cluster/coalesce.ts, limits in COALESCE), so under load one hop carries many requests.
//
// Limits: at most PEER_LIMITS.longPollsMax long polls per peer (src/cluster/peers.ts); a
// forwarded request waits at most `cluster.forward_timeout_ms` for its answer (plus a long
// poll's wait).

import { randomBytes } from "node:crypto";
import { NaradError, isErrorCode, type BatchItemResult } from "../protocol/errors.js";
import { encodeBinaryBatch, encodeProducerBatch, decodeDeliveries, BATCH_BINARY_TYPE, DELIVERIES_TYPE, LIMITS, defaultAcks, type ChildJson, type PlacementJson, type TopicJson, type UpdateTopicRequest } from "../protocol/wire.js";
import type { Logger } from "pino";
import { messagesBytesEstimate, type Broker, type Delivery, type ProduceItem, type ReplayResult, type SettleAction } from "../broker/broker.js";
import { CopyPartlyStored, type ChildLink } from "../broker/children.js";
import { checkDeadLetterFields, nextDeadLetterFields, type DeadLetterItem } from "../broker/dead-letters.js";
import { HandleCodec } from "../broker/handles.js";
import type { BrokerMetrics } from "../broker/metrics.js";
import { groupByPartition, StickyPartitioner } from "../broker/partitioner.js";
import { idempotentGroups } from "../broker/producers.js";
import type { Produced, RequestContext, Service, SettleOutcome, TopicInfo, TopicOwner, TopicSettings } from "../broker/service.js";
import type { Clock } from "../platform/clock.js";
import type { StoredRecord } from "../storage/types.js";
import type { ClusterTopic, ControlPlane, PartitionPlacement } from "./control-plane.js";
import { ControlPlaneUnavailable, MoveRefused, NodeSuperseded } from "./errors.js";
import { Coalescer } from "./coalesce.js";
import type { Ownership } from "./ownership.js";
import { PeerError, type PeerResponse, type Peers } from "./peers.js";
import { INTERNAL_PREFIX } from "./wire.js";

export interface ClusterServiceOptions {
  cp: ControlPlane;
  broker: Broker;
  ownership: Ownership;
  peers: Peers;
  nodeId: string;
  bootId: string;
  bootSeq: number;
  clock: Clock;
  logger: Logger;
  defaultPartitions: number;
  defaultVisibilityTimeoutMs: number;
  defaultRetentionMs: number;
  /** How long a write waits for the other nodes to re-read it. */
  syncTimeoutMs: number;
}

export type LocalSettleAction = SettleAction | "release";

/** Codes an owner answers when it wrote nothing and another partition may take the messages. */
const ROUTABLE = new Set(["not_owner", "owner_unreachable", "shutting_down"]);

interface ProduceForward {
  node: string;
  topic: string;
  partition: number;
  items: ProduceItem[];
  ctx: RequestContext;
}

interface ConsumeForward {
  node: string;
  topic: string;
  max: number;
  ctx: RequestContext;
}

interface SettleForward {
  node: string;
  topic: string;
  handles: string[];
  action: LocalSettleAction;
  ctx: RequestContext;
}

/** Attempts at the failed part of a child copy batch, and the back-off between them (× the attempt). */
const COPY_GROUP_ATTEMPTS = 4;
const COPY_GROUP_RETRY_MS = 100;

/**
 * Merged forwards (src/cluster/coalesce.ts): per key, requests on the wire at once, and a merged
 * request's size. One on the wire per key: what arrives meanwhile leaves together next, so the
 * owner runs one append and one fdatasync for it. Measured on three local nodes (64 in flight, one
 * partition), against 4 on the wire: the owner's CPU per forwarded produce fell from ~77 to
 * ~40 µs (fewer, fuller group commits), the forwarder's from ~165 to ~98 µs, and throughput rose.
 */
export const COALESCE = {
  inFlightMax: 1,
  produceItemsMax: 1000,
  produceBytesMax: 4 * 1024 * 1024,
  settleHandlesMax: 1000,
  queuedMax: 10_000,
} as const;

export class ClusterService implements Service {
  private readonly log: Logger;
  private readonly codec: HandleCodec;
  private readonly produceRr = new Map<string, number>();
  /** Per topic, this node's runs of unkeyed messages (src/broker/partitioner.ts); nodes start apart, by number. */
  private readonly unkeyedRuns = new Map<string, StickyPartitioner>();
  private readonly consumeRr = new Map<string, number>();
  private readonly me: string;
  private readonly produces: Coalescer<ProduceForward, Produced[]>;
  private readonly consumes: Coalescer<ConsumeForward, Delivery[]>;
  private readonly settles: Coalescer<SettleForward, SettleOutcome[]>;
  /** Long polls waiting on other owners, ended at once by a graceful stop. */
  private readonly waiting = new Set<() => void>();

  constructor(private readonly o: ClusterServiceOptions) {
    this.log = o.logger.child({ module: "cluster" });
    this.codec = new HandleCodec(o.cp.clusterSecret, o.cp.nodeNumber, o.bootSeq, o.bootId);
    this.me = o.nodeId;
    const overflow = () => new NaradError("overloaded", "Too many requests wait to be forwarded to one owner; retry after the Retry-After seconds.", { retryAfterS: 1 });
    this.produces = new Coalescer(
      { inFlightMax: COALESCE.inFlightMax, itemsMax: COALESCE.produceItemsMax, bytesMax: COALESCE.produceBytesMax, queuedMax: COALESCE.queuedMax },
      async (_key, fs) => {
        const f = fs[0]!;
        const all = fs.length === 1 ? f.items : fs.flatMap((x) => x.items);
        const rs = await this.remoteProduce(f.node, f.topic, f.partition, all, f.ctx);
        let at = 0;
        return fs.map((x) => rs.slice(at, (at += x.items.length)));
      },
      (f) => messagesBytesEstimate(f.items),
      overflow,
    );
    this.consumes = new Coalescer(
      { inFlightMax: COALESCE.inFlightMax, itemsMax: LIMITS.consumeBatchMax, bytesMax: LIMITS.consumeBatchMax, queuedMax: COALESCE.queuedMax },
      async (_key, fs) => {
        const f = fs[0]!;
        const total = fs.reduce((n, x) => n + x.max, 0);
        const ds = await this.remoteConsume(f.node, f.topic, total, 0, f.ctx, undefined);
        let at = 0;
        return fs.map((x) => ds.slice(at, (at += x.max)));
      },
      (f) => f.max,
      overflow,
    );
    this.settles = new Coalescer(
      { inFlightMax: COALESCE.inFlightMax, itemsMax: COALESCE.settleHandlesMax, bytesMax: COALESCE.settleHandlesMax, queuedMax: COALESCE.queuedMax },
      async (_key, fs) => {
        const f = fs[0]!;
        const all = fs.length === 1 ? f.handles : fs.flatMap((x) => x.handles);
        const rs = await this.remoteSettle(f.node, f.topic, all, f.action, f.ctx);
        let at = 0;
        return fs.map((x) => rs.slice(at, (at += x.handles.length)));
      },
      (f) => f.handles.length,
      overflow,
    );
  }

  get metrics(): BrokerMetrics {
    return this.o.broker.metrics;
  }

  // ---- topics -----------------------------------------------------------------------------------

  /** The topic from the view, re-read once when the view does not have it (created a moment ago). */
  private async topic(name: string): Promise<ClusterTopic> {
    let t = this.o.cp.topic(name);
    if (t === undefined) {
      await this.o.cp.refresh([`topic:${name}`]).catch(() => undefined);
      t = this.o.cp.topic(name);
    }
    if (t === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(name)} does not exist; create it first.`);
    return t;
  }

  private placement(name: string, partition: number): PartitionPlacement {
    const p = this.o.cp.partitionPlacement(name, partition);
    if (p === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(name)} does not exist (any more).`);
    return p;
  }

  topicJson(t: ClusterTopic): TopicInfo & { placement: PlacementJson[] } {
    let parent: TopicJson["parent"] = null;
    for (const x of this.o.cp.topics()) {
      const c = (x.children as ChildLink[]).find((l) => l.topic === t.name && l.kind !== "remote");
      if (c !== undefined) parent = { topic: x.name, kind: c.kind };
    }
    return {
      name: t.name,
      partitions: t.partitions,
      visibility_timeout_ms: t.visibility_timeout_ms,
      retention_ms: t.retention_ms,
      replication_factor: t.replication_factor,
      acks: t.acks,
      max_deliveries: t.max_deliveries,
      dead_letter_topic: t.dead_letter_topic,
      owner: t.owner,
      owner_id: t.owner_id,
      children: publicChildren(t.children as ChildLink[]),
      parent,
      created_at: t.created_at,
      placement: (this.o.cp.placement(t.name) ?? []).map((p) => ({ partition: p.partition, node: p.node, epoch: p.epoch, replicas: p.replicas, in_sync: p.inSync })),
    };
  }

  listTopics(): TopicInfo[] {
    return this.o.cp.topics().map((t) => this.topicJson(t));
  }

  async getTopic(name: string): Promise<TopicInfo> {
    return this.topicJson(await this.topic(name));
  }

  async checkTopic(name: string): Promise<void> {
    await this.topic(name);
  }

  private async exists(name: string): Promise<boolean> {
    return this.topic(name).then(
      () => true,
      () => false,
    );
  }

  async createTopic(req: TopicSettings, owner: TopicOwner | null): Promise<TopicInfo> {
    await checkDeadLetterFields(req.name, nextDeadLetterFields({ max_deliveries: null, dead_letter_topic: null }, req), (x) => this.exists(x));
    await cpCall(() =>
      this.o.cp.createTopic({
        name: req.name,
        partitions: req.partitions ?? this.o.defaultPartitions,
        visibility_timeout_ms: req.visibility_timeout_ms ?? this.o.defaultVisibilityTimeoutMs,
        retention_ms: req.retention_ms ?? this.o.defaultRetentionMs,
        replication_factor: req.replication_factor ?? 1,
        acks: req.acks ?? defaultAcks(req.replication_factor ?? 1),
        max_deliveries: req.max_deliveries ?? null,
        dead_letter_topic: req.dead_letter_topic ?? null,
        owner: owner?.name ?? null,
        owner_id: owner?.id ?? null,
      }),
    );
    await this.barrier([`topic:${req.name}`]);
    return this.getTopic(req.name);
  }

  async updateTopic(name: string, req: UpdateTopicRequest): Promise<TopicInfo> {
    if (req.max_deliveries !== undefined || req.dead_letter_topic !== undefined) {
      // Checked against the view: a PATCH racing another one on the same topic may pass a rule the
      // other breaks; the broker then moves nothing without a dead-letter topic (docs/operations.md).
      await checkDeadLetterFields(name, nextDeadLetterFields(await this.topic(name), req), (x) => this.exists(x));
    }
    await cpCall(() =>
      this.o.cp.updateTopic(name, {
        partitions: req.partitions,
        visibility_timeout_ms: req.visibility_timeout_ms,
        retention_ms: req.retention_ms,
        acks: req.acks,
        ...(req.max_deliveries !== undefined ? { max_deliveries: req.max_deliveries } : {}),
        ...(req.dead_letter_topic !== undefined ? { dead_letter_topic: req.dead_letter_topic } : {}),
      }),
    );
    const targets = [`topic:${name}`];
    // A replica grows with its parent, its new partitions kept off the parent's nodes.
    const t = this.o.cp.topic(name);
    if (t !== undefined && req.partitions !== undefined) {
      for (const l of t.children as ChildLink[]) {
        const r = l.kind === "replica" ? this.o.cp.topic(l.topic) : undefined;
        if (r === undefined || r.partitions >= t.partitions) continue;
        const owners = (this.o.cp.placement(name) ?? []).slice(r.partitions).map((p) => p.node);
        const nodes = this.replicaNodes(owners);
        await cpCall(() => this.o.cp.updateTopic(l.topic, { partitions: t.partitions, ...(nodes === undefined ? {} : { nodes }) }));
        targets.push(`topic:${l.topic}`);
      }
    }
    await this.barrier(targets);
    return this.getTopic(name);
  }

  async deleteTopic(name: string): Promise<void> {
    await this.topic(name);
    // A deleted child leaves its parent first, so no copier keeps pushing into a topic that is gone.
    for (const x of this.o.cp.topics()) {
      const links = x.children as ChildLink[];
      if (links.some((l) => l.topic === name && l.kind !== "remote")) {
        await cpCall(() => this.o.cp.updateTopic(x.name, { children: links.filter((l) => !(l.topic === name && l.kind !== "remote")) }));
      }
    }
    await cpCall(() => this.o.cp.deleteTopic(name));
    await this.barrier([`topic:${name}`]);
  }

  /**
   * Read-your-writes across nodes: this node and every other live one re-read the targets (and
   * finish opening or closing partitions) before the write is answered. A node that does not
   * answer within syncTimeoutMs catches up by notification or resync.
   */
  async barrier(targets: string[]): Promise<void> {
    await this.sync(targets).catch(() => undefined);
    const body = JSON.stringify({ targets });
    await Promise.all(
      this.o.cp
        .nodes()
        .filter((n) => n.id !== this.me && n.state === "live")
        .map((n) =>
          withTimeout(
            this.o.peers.request(n.id, { method: "POST", path: `${INTERNAL_PREFIX}/sync`, headers: { "content-type": "application/json" }, body }),
            this.o.syncTimeoutMs,
          ).catch(() => undefined),
        ),
    );
  }

  /** The other side of the barrier. */
  async sync(targets: string[]): Promise<void> {
    await this.o.cp.refresh(targets);
    for (const t of targets) if (t.startsWith("topic:")) await this.o.ownership.settled(t.slice(6));
  }

  // ---- child topics ---------------------------------------------------------------------------

  async listChildren(parent: string): Promise<ChildJson[]> {
    return publicChildren((await this.topic(parent)).children as ChildLink[]);
  }

  /**
   * Attaching: every owner of a parent partition sets the child's copy cursor at its end (made
   * durable), and only then is the link written to the control plane, so no message produced
   * before the attach is copied, and none after it is missed. Every owner must be reachable.
   */
  async attachChild(parentName: string, link: ChildLink, ctx: RequestContext): Promise<ChildJson> {
    const parent = await this.topic(parentName);
    const links = parent.children as ChildLink[];
    const bad = (m: string) => new NaradError("invalid_child", m);
    const parentOf = (name: string) => this.o.cp.topics().find((x) => (x.children as ChildLink[]).some((l) => l.topic === name && l.kind !== "remote"));
    const pp = parentOf(parentName);
    if (pp !== undefined) throw bad(`${parentName} is a child of ${pp.name}; a child cannot have children.`);
    if (links.some((c) => c.topic === link.topic && (c.kind === "remote") === (link.kind === "remote"))) {
      throw new NaradError("child_exists", `${link.topic} is attached to ${parentName} already.`);
    }
    if (link.kind === "replica") return this.attachReplica(parent, link, ctx);
    if (link.kind !== "remote") {
      if (link.topic === parentName) throw bad("A topic cannot be its own child.");
      const child = await this.topic(link.topic);
      const cp = parentOf(link.topic);
      if (cp !== undefined) throw bad(`${link.topic} is a child of ${cp.name} already; a child has one parent.`);
      if ((child.children as ChildLink[]).length > 0) throw bad(`${link.topic} has children of its own; a child cannot have children.`);
    }
    await this.setCursors(parent, link.topic, true, ctx);
    await cpCall(() => this.o.cp.updateTopic(parentName, { children: [...links, link] }));
    await this.barrier([`topic:${parentName}`, `topic:${link.topic}`]);
    return publicChildren([link])[0]!;
  }

  /**
   * A replica child: a new topic with the parent's partitions, settings and owner, each partition
   * on a live node other than the one owning the parent's partition of the same number, and fed
   * partition for partition (parent partition p → replica partition p) from the attach onward.
   */
  private async attachReplica(parent: ClusterTopic, link: ChildLink, ctx: RequestContext): Promise<ChildJson> {
    const bad = (m: string) => new NaradError("invalid_child", m);
    if (this.o.cp.topic(link.topic) !== undefined) throw new NaradError("topic_exists", `Topic ${JSON.stringify(link.topic)} exists already; a replica child is created by the attach.`);
    const placement = this.o.cp.placement(parent.name) ?? [];
    const nodes = this.replicaNodes(placement.map((p) => p.node));
    if (nodes === undefined) throw bad("A replica keeps its copy on other nodes than its parent's, and no other node is live; start another node first.");
    await cpCall(() =>
      this.o.cp.createTopic({
        name: link.topic,
        partitions: parent.partitions,
        visibility_timeout_ms: parent.visibility_timeout_ms,
        retention_ms: parent.retention_ms,
        ...(ctx.user ? { owner: ctx.user.name, owner_id: ctx.user.id } : { owner: parent.owner, owner_id: parent.owner_id }),
        nodes,
      }),
    );
    try {
      await this.barrier([`topic:${link.topic}`]);
      await this.setCursors(parent, link.topic, true, ctx);
      await cpCall(() => this.o.cp.updateTopic(parent.name, { children: [...(parent.children as ChildLink[]), { topic: link.topic, kind: "replica" }] }));
    } catch (e) {
      await this.o.cp.deleteTopic(link.topic).catch(() => undefined);
      await this.barrier([`topic:${link.topic}`]);
      throw e;
    }
    await this.barrier([`topic:${parent.name}`, `topic:${link.topic}`]);
    return { topic: link.topic, kind: "replica" };
  }

  /** For each partition owned by `owners[i]`, the least-loaded live node other than it. */
  private replicaNodes(owners: string[]): string[] | undefined {
    const live = this.o.cp.nodes().filter((n) => n.state === "live");
    const load = new Map(live.map((n) => [n.id, this.o.cp.ownedBy(n.id).length]));
    const out: string[] = [];
    for (const owner of owners) {
      let best: string | undefined;
      for (const n of live) {
        if (n.id === owner) continue;
        if (best === undefined || load.get(n.id)! < load.get(best)!) best = n.id;
      }
      if (best === undefined) return undefined;
      out.push(best);
      load.set(best, load.get(best)! + 1);
    }
    return out;
  }

  async detachChild(parentName: string, childName: string, ctx: RequestContext): Promise<void> {
    const parent = await this.topic(parentName);
    const links = parent.children as ChildLink[];
    if (!links.some((c) => c.topic === childName)) throw new NaradError("child_not_found", `${childName} is not a child of ${parentName}.`);
    await cpCall(() => this.o.cp.updateTopic(parentName, { children: links.filter((c) => c.topic !== childName) }));
    await this.barrier([`topic:${parentName}`, `topic:${childName}`]);
    await this.setCursors(parent, childName, false, ctx).catch((e: Error) => this.log.warn({ err: e.message }, "clearing a detached child's copy cursors failed; they are ignored"));
  }

  private async setCursors(parent: ClusterTopic, child: string, set: boolean, ctx: RequestContext): Promise<void> {
    const byNode = new Map<string, number[]>();
    for (const p of this.o.cp.placement(parent.name) ?? []) {
      const list = byNode.get(p.node) ?? [];
      list.push(p.partition);
      byNode.set(p.node, list);
    }
    await Promise.all(
      [...byNode].map(async ([node, partitions]) => {
        if (node === this.me) return this.setCursorsLocal(parent.name, child, partitions, set);
        if (set && !this.o.peers.live(node)) throw new NaradError("node_down", `Node ${node}, which owns partitions ${partitions.join(",")} of ${parent.name}, is down; attach the child once it is back.`);
        const res = await this.forward(node, {
          method: "POST",
          path: `${INTERNAL_PREFIX}/topics/${encodeURIComponent(parent.name)}/cursors`,
          headers: jsonHeaders(ctx),
          body: JSON.stringify({ child, partitions, set }),
        });
        if (res.status !== 204) throw errorFromPeer(res);
      }),
    );
  }

  async setCursorsLocal(topic: string, child: string, partitions: number[], set: boolean): Promise<void> {
    await this.ensureKnown(topic);
    for (const p of partitions) {
      await this.o.ownership.ensureOpen(topic, p);
      await this.o.broker.placement.setChildCursor(topic, p, child, set);
    }
  }

  /**
   * Copies of a parent's messages into a child topic: produced like any client's, or for a
   * replica into exactly the partition of the same number (no routing around: the copier retries
   * until that partition's owner takes them).
   */
  async copyToChild(child: string, records: StoredRecord[], partition?: number): Promise<void> {
    const items = records.map((r) => ({ key: r.key === null ? null : r.key.toString("utf8"), payload: r.payload }));
    const ctx: RequestContext = { authorization: undefined };
    if (partition === undefined) {
      await this.copyGroups(child, records, items, ctx);
      return;
    }
    const t = await this.topic(child);
    if (partition >= t.partitions) throw new NaradError("partition_not_found", `Replica ${child} has no partition ${partition}; raise its partitions.`);
    const pl = this.placement(child, partition);
    if (pl.node === this.me) await this.produceLocal(child, partition, items);
    else await this.produces.submit(`${pl.node}\0${child}\0${partition}\0`, { node: pl.node, topic: child, partition, items, ctx });
  }

  /**
   * Dead letters of a partition owned here, into their dead-letter topic wherever its partitions
   * live (src/broker/dead-letters.ts): split and retried as a child copy is (copyGroups), each item
   * with its attributes (the origin), which a forward carries (remoteProduce).
   */
  async appendDeadLetters(topic: string, items: DeadLetterItem[], sources: StoredRecord[]): Promise<void> {
    const produce = items.map((it): ProduceItem => ({ key: it.key === null ? null : it.key.toString("utf8"), payload: it.payload, attrs: it.attrs }));
    await this.copyGroups(topic, sources, produce, { authorization: undefined });
  }

  /**
   * A fan-out, delay or remote-side copy batch, split by partition as a produce is. A group that
   * fails is sent again (a little later, routed around an owner that is down) and the groups
   * already stored are not: one owner's failure must not make the others store their part twice,
   * which is what retrying the whole batch did when another owner was merely stopping. Only when
   * a group still fails after COPY_GROUP_ATTEMPTS does the copier see the error: CopyPartlyStored
   * naming the records stored, which the copier then leaves out when it copies the rest again.
   * `records` are the parent's, `items` their copies, index for index.
   */
  private async copyGroups(child: string, records: readonly StoredRecord[], items: ProduceItem[], ctx: RequestContext): Promise<void> {
    const t = await this.topic(child);
    let pending = [...this.groupsFor(t, items)];
    for (let attempt = 1; ; attempt++) {
      const outcomes = await Promise.allSettled(pending.map(([p, idxs]) => this.produceGroup(t, p, idxs.map((i) => items[i]!), ctx)));
      const failed = pending.filter((_, i) => outcomes[i]!.status === "rejected");
      if (failed.length === 0) return;
      const err = (outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult).reason as unknown;
      if (attempt >= COPY_GROUP_ATTEMPTS) {
        const notStored = new Set(failed.flatMap(([, idxs]) => idxs));
        const stored = records.filter((_, i) => !notStored.has(i)).map((r) => r.offset);
        throw stored.length > 0 ? new CopyPartlyStored(stored, err) : err;
      }
      this.log.debug({ child, groups: failed.length, attempt, err: errText(err) }, "part of a child copy failed; sending that part again");
      pending = failed;
      await new Promise((r) => setTimeout(r, COPY_GROUP_RETRY_MS * attempt));
    }
  }

  // ---- produce ----------------------------------------------------------------------------------

  async produce(topic: string, items: ProduceItem[], ctx: RequestContext): Promise<Produced[]> {
    // Forwards carry key and payload only: a delay or headers would be lost on the way to the owner.
    if (items.some((it) => it.headers !== undefined || it.delayMs !== undefined)) {
      throw new NaradError("not_implemented", "Per-message delay and headers are not built for a cluster yet; nothing was stored.");
    }
    const t = await this.topic(topic);
    const groups = this.groupsFor(t, items);
    if (groups.size === 1) {
      const [p] = groups.keys();
      return this.produceGroup(t, p!, items, ctx);
    }
    const parts = [...groups.values()];
    const outcomes = await Promise.allSettled([...groups].map(([p, idxs]) => this.produceGroup(t, p, idxs.map((i) => items[i]!), ctx)));
    const failed = outcomes.filter((x): x is PromiseRejectedResult => x.status === "rejected").map((x) => x.reason as unknown);
    if (failed.length === 0) {
      const results = new Array<Produced>(items.length);
      outcomes.forEach((o, g) => parts[g]!.forEach((i, j) => (results[i] = (o as PromiseFulfilledResult<Produced[]>).value[j]!)));
      return results;
    }
    if (failed.length === outcomes.length && failed.every((e) => e instanceof NaradError && e.definite)) throw failed[0];
    throw new NaradError(
      "forward_failed",
      `The batch went to several partitions' owners and not all of them stored their part (${errText(failed[0])}); error.results says, per message, whether it was stored: send again only those that were not.`,
      { results: batchResults(items.length, parts, outcomes) },
    );
  }

  /**
   * Item indexes per partition: a key's partition, or for unkeyed items the current run's (an
   * idempotent produce's: its producer's, src/broker/producers.ts, the same on every node).
   */
  private groupsFor(t: ClusterTopic, items: readonly ProduceItem[]): Map<number, number[]> {
    if (items[0]?.producer !== undefined) return idempotentGroups(items, t.partitions);
    let sticky = this.unkeyedRuns.get(t.name);
    if (sticky === undefined) {
      if (this.unkeyedRuns.size > 100_000) this.unkeyedRuns.clear(); // a bound; runs start afresh
      sticky = new StickyPartitioner(Math.max(0, this.o.cp.nodeNumber - 1) % t.partitions);
      this.unkeyedRuns.set(t.name, sticky);
    }
    return groupByPartition(items.map((it) => it.key), t.partitions, sticky.forItems(t.partitions, items));
  }

  /** Starting points differ per node (by its number), so nodes taking turns cover the partitions together. */
  private nextPartition(counters: Map<string, number>, topic: string, n: number): number {
    let c = counters.get(topic);
    if (c === undefined) {
      if (counters.size > 100_000) counters.clear(); // a bound; the next turn starts afresh
      c = Math.max(0, this.o.cp.nodeNumber - 1);
    }
    counters.set(topic, (c + 1) % 0x3fffffff);
    return c % n;
  }

  /** Appends one group to partition p, routing around an owner that cannot take it. */
  private async produceGroup(t: ClusterTopic, p: number, items: ProduceItem[], ctx: RequestContext): Promise<Produced[]> {
    const tried = new Set<number>();
    let part = p;
    for (;;) {
      const pl = this.placement(t.name, part);
      let err: NaradError;
      try {
        if (pl.node === this.me) {
          if (this.o.ownership.isFrozen(t.name, part)) throw new NaradError("not_owner", `${t.name}/${part} is frozen for a move.`);
          await this.ensureKnown(t.name);
          await this.o.ownership.ensureOpen(t.name, part);
          return await this.o.broker.produceTo(t.name, part, items);
        }
        if (!this.o.peers.usable(pl.node)) throw new NaradError("owner_unreachable", `Node ${pl.node}, the owner of ${t.name}/${part}, is down or not answering.`);
        const idem = items[0]?.producer !== undefined ? "\0idempotent" : "";
        return await this.produces.submit(`${pl.node}\0${t.name}\0${part}\0${ctx.authorization ?? ""}${idem}`, { node: pl.node, topic: t.name, partition: part, items, ctx });
      } catch (e) {
        // An idempotent produce goes only to its partition's owner: another partition's window
        // would not know its sequence (SPEC "Idempotent producers"). The refusal is definite.
        if (!(e instanceof NaradError) || !ROUTABLE.has(e.code) || items[0]?.producer !== undefined) throw e;
        err = e;
      }
      tried.add(part);
      const alt = this.alternative(t, tried);
      if (alt === undefined) throw new NaradError("unavailable", `No partition of topic ${t.name} can take the message now (${err.message}); retry shortly.`);
      part = alt;
    }
  }

  /** Another partition whose owner is usable, one of this node's own first. */
  private alternative(t: ClusterTopic, tried: Set<number>): number | undefined {
    const local: number[] = [];
    const remote: number[] = [];
    for (const p of this.o.cp.placement(t.name) ?? []) {
      if (tried.has(p.partition)) continue;
      if (p.node === this.me) {
        if (!this.o.ownership.isFrozen(t.name, p.partition) && this.o.cp.ownsPartition(t.name, p.partition, p.epoch)) local.push(p.partition);
      } else if (this.o.peers.usable(p.node)) remote.push(p.partition);
    }
    const pool = local.length > 0 ? local : remote;
    if (pool.length === 0) return undefined;
    return pool[this.nextPartition(this.produceRr, `${t.name}\0alt`, pool.length)];
  }

  /** Appends at the owner `node`; each result names the owner and its boot (from its answer's Narad-Node, Narad-Boot). */
  private async remoteProduce(node: string, topic: string, p: number, items: ProduceItem[], ctx: RequestContext): Promise<Produced[]> {
    const base = `${INTERNAL_PREFIX}/topics/${encodeURIComponent(topic)}/partitions/${p}/messages`;
    const headers: Record<string, string> = {};
    if (ctx.authorization !== undefined) headers.authorization = ctx.authorization;
    let res: PeerResponse;
    if (items[0]?.producer !== undefined) {
      headers["content-type"] = BATCH_BINARY_TYPE;
      res = await this.forward(node, { method: "POST", path: `${base}/idempotent`, headers, body: encodeProducerBatch(items) });
      if (res.status !== 202) throw errorFromPeer(res);
      return (JSON.parse(res.body.toString("utf8")) as { results: Produced[] }).results.map((r) => ownedBy(res, r));
    }
    if (items.some((it) => it.attrs !== undefined)) {
      // Items with attributes (dead letters): the internal JSON route, which carries them.
      headers["content-type"] = "application/json";
      const messages = items.map((it) => ({ key: it.key, payload_base64: it.payload.toString("base64"), ...(it.attrs !== undefined ? { attrs_base64: it.attrs.toString("base64") } : {}) }));
      res = await this.forward(node, { method: "POST", path: `${base}/with-attrs`, headers, body: JSON.stringify({ messages }) });
      if (res.status !== 202) throw errorFromPeer(res);
      return (JSON.parse(res.body.toString("utf8")) as { results: Produced[] }).results.map((r) => ownedBy(res, r));
    }
    if (items.length === 1) {
      const it = items[0]!;
      headers["content-type"] = "application/octet-stream";
      res = await this.forward(node, { method: "POST", path: it.key === null ? base : `${base}?key=${encodeURIComponent(it.key)}`, headers, body: it.payload });
      if (res.status !== 202) throw errorFromPeer(res);
      return [ownedBy(res, JSON.parse(res.body.toString("utf8")) as Produced)];
    }
    headers["content-type"] = BATCH_BINARY_TYPE;
    res = await this.forward(node, { method: "POST", path: `${base}/batch`, headers, body: encodeBinaryBatch(items) });
    if (res.status !== 202) throw errorFromPeer(res);
    return (JSON.parse(res.body.toString("utf8")) as { results: Produced[] }).results.map((r) => ownedBy(res, r));
  }

  /** Internal route: append to exactly this partition, which this node must own. */
  async produceLocal(topic: string, partition: number, items: ProduceItem[]): Promise<{ partition: number; offset: number; duplicate?: true }[]> {
    await this.ensureKnown(topic);
    if (this.o.ownership.isFrozen(topic, partition)) throw new NaradError("not_owner", `${topic}/${partition} is frozen for a move.`);
    await this.o.ownership.ensureOpen(topic, partition);
    return this.o.broker.produceTo(topic, partition, items);
  }

  // ---- consume ----------------------------------------------------------------------------------

  async consume(topic: string, max: number, waitMs: number, signal: AbortSignal, ctx: RequestContext): Promise<Delivery[]> {
    await this.topic(topic);
    const owners = this.otherOwners(topic);
    const local = this.localOwned(topic);
    let out: Delivery[] = [];
    if (local) out = await this.consumeLocal(topic, max, 0, signal);
    for (const node of owners) {
      if (out.length >= max || signal.aborted) break;
      if (!this.o.peers.usable(node)) continue;
      try {
        out = out.concat(await this.consumes.submit(`${node}\0${topic}\0${ctx.authorization ?? ""}`, { node, topic, max: max - out.length, ctx }));
      } catch (e) {
        if (e instanceof NaradError && e.definite && e.status < 500) throw e; // 401, 403, 404: the owner's answer stands
        this.log.debug({ peer: node, err: errText(e) }, "consume from an owner failed; skipping it");
      }
    }
    if (out.length > 0 || waitMs <= 0 || signal.aborted) return out;
    return this.longPoll(topic, max, waitMs, signal, ctx, local, owners);
  }

  /** Every node but this one that owns a partition of the topic, in a turn that moves per call. */
  private otherOwners(topic: string): string[] {
    const nodes = [...new Set((this.o.cp.placement(topic) ?? []).map((p) => p.node).filter((n) => n !== this.me))];
    if (nodes.length < 2) return nodes;
    const start = this.nextPartition(this.consumeRr, topic, nodes.length);
    return nodes.slice(start).concat(nodes.slice(0, start));
  }

  private localOwned(topic: string): boolean {
    return (this.o.cp.placement(topic) ?? []).some((p) => p.node === this.me);
  }

  /**
   * Waits on every owner at once. The remote polls are not aborted when another answers first:
   * each is cancelled by its id (the owner ends it at once), and whatever it leased meanwhile
   * comes back in its answer and is released, so no lease is left held by nobody.
   */
  private longPoll(topic: string, max: number, waitMs: number, signal: AbortSignal, ctx: RequestContext, local: boolean, owners: string[]): Promise<Delivery[]> {
    const ac = new AbortController();
    const polls: { node: string; id: string }[] = [];
    const cancel = () => {
      ac.abort();
      for (const p of polls) void this.o.peers.request(p.node, { method: "POST", path: `${INTERNAL_PREFIX}/polls/${p.id}/cancel` }).catch(() => undefined);
    };
    signal.addEventListener("abort", cancel, { once: true });
    this.waiting.add(cancel);
    const tasks: Promise<{ node: string; d: Delivery[] }>[] = [];
    if (local) tasks.push(this.consumeLocal(topic, max, waitMs, ac.signal).then((d) => ({ node: this.me, d }), () => ({ node: this.me, d: [] })));
    for (const node of owners) {
      if (!this.o.peers.usable(node)) continue;
      const id = randomBytes(9).toString("base64url");
      polls.push({ node, id });
      tasks.push(this.remoteConsume(node, topic, max, waitMs, ctx, undefined, id).then((d) => ({ node, d }), () => ({ node, d: [] })));
    }
    if (tasks.length === 0) {
      signal.removeEventListener("abort", cancel);
      return sleep(waitMs, ac.signal).then(() => {
        this.waiting.delete(cancel);
        return [];
      });
    }
    return new Promise((resolve) => {
      let pending = tasks.length;
      let won = false;
      for (const task of tasks) {
        void task.then(({ node, d }) => {
          pending--;
          if (d.length > 0) {
            if (!won && !signal.aborted) {
              won = true;
              resolve(d);
              cancel();
            } else {
              // Came back leased after another owner answered (or the client left): let them go.
              void this.release(node, topic, d, ctx);
            }
          }
          if (pending === 0) {
            signal.removeEventListener("abort", cancel);
            this.waiting.delete(cancel);
            if (!won) resolve([]);
          }
        });
      }
    });
  }

  private async release(node: string, topic: string, d: Delivery[], ctx: RequestContext): Promise<void> {
    const handles = d.map((x) => x.receiptHandle);
    try {
      if (node === this.me) this.o.broker.releaseLeases(topic, handles);
      else await this.remoteSettle(node, topic, handles, "release", ctx);
    } catch (e) {
      this.log.warn({ peer: node, err: errText(e), leases: handles.length }, "releasing unneeded leases failed; they lapse after the visibility timeout");
    }
  }

  private async remoteConsume(node: string, topic: string, max: number, waitMs: number, ctx: RequestContext, signal: AbortSignal | undefined, pollId?: string): Promise<Delivery[]> {
    const headers: Record<string, string> = { accept: DELIVERIES_TYPE };
    if (ctx.authorization !== undefined) headers.authorization = ctx.authorization;
    const res = await this.forward(node, {
      method: "POST",
      path: `${INTERNAL_PREFIX}/topics/${encodeURIComponent(topic)}/consume?max_messages=${max}&wait_ms=${waitMs}${pollId === undefined ? "" : `&poll=${pollId}`}`,
      headers,
      signal,
      waitMs,
    });
    if (res.status !== 200) throw errorFromPeer(res);
    const ds = decodeDeliveries(res.body);
    if (typeof ds === "string") throw new NaradError("forward_failed", `Node ${node} answered a malformed batch of messages: ${ds}.`);
    return ds.map((x) => ({
      partition: x.partition,
      offset: x.offset,
      deliveryCount: x.deliveryCount,
      receiptHandle: x.receiptHandle,
      record: { offset: x.offset, producedAtMs: x.producedAtMs, key: x.key, payload: x.payload },
      owner: x.owner,
      ownerBoot: x.ownerBoot,
      ...(x.origin !== undefined ? { origin: x.origin } : {}),
    }));
  }

  /** Internal route and this node's own share: leases from the partitions open here. */
  async consumeLocal(topic: string, max: number, waitMs: number, signal: AbortSignal): Promise<Delivery[]> {
    await this.ensureKnown(topic);
    for (const p of this.o.cp.placement(topic) ?? []) {
      if (p.node === this.me && this.o.broker.placement.openEpoch(topic, p.partition) === undefined && !this.o.ownership.isFrozen(topic, p.partition)) {
        await this.o.ownership.ensureOpen(topic, p.partition);
      }
    }
    return this.o.broker.consume(topic, max, waitMs, signal);
  }

  /** The broker learns of a topic by its reconcile; a request may come first. */
  private async ensureKnown(topic: string): Promise<void> {
    const ct = await this.topic(topic);
    if (this.o.broker.placement.knownIncarnation(topic) !== ct.incarnation) await this.o.ownership.schedule(topic);
  }

  // ---- ack, extend, nack ------------------------------------------------------------------------

  async settle(topic: string, handles: string[], action: SettleAction, ctx: RequestContext): Promise<SettleOutcome[]> {
    const t = await this.topic(topic);
    const fields = this.codec.verify(t.incarnation, handles);
    const out = new Array<SettleOutcome>(handles.length);
    const byNode = new Map<string, number[]>();
    fields.forEach((f, i) => {
      if (f === null || f.partition >= t.partitions) {
        out[i] = 400;
        return;
      }
      const node = this.placement(topic, f.partition).node;
      const list = byNode.get(node) ?? [];
      list.push(i);
      byNode.set(node, list);
    });
    await Promise.all(
      [...byNode].map(async ([node, idxs]) => {
        const hs = idxs.map((i) => handles[i]!);
        let r: SettleOutcome[];
        try {
          if (node === this.me) r = await this.settleLocal(topic, hs, action);
          else if (!this.o.peers.usable(node)) r = hs.map(() => new NaradError("owner_unreachable", `Node ${node}, the owner of this handle's partition, is down or not answering; nothing was settled.`));
          else r = await this.settles.submit(`${node}\0${topic}\0${action}\0${ctx.authorization ?? ""}`, { node, topic, handles: hs, action, ctx });
        } catch (e) {
          const err = e instanceof NaradError ? e : new NaradError("forward_failed");
          r = hs.map(() => err);
        }
        idxs.forEach((i, j) => (out[i] = r[j]!));
      }),
    );
    return out;
  }

  private async remoteSettle(node: string, topic: string, handles: string[], action: LocalSettleAction, ctx: RequestContext): Promise<SettleOutcome[]> {
    const res = await this.forward(node, {
      method: "POST",
      path: `${INTERNAL_PREFIX}/topics/${encodeURIComponent(topic)}/settle`,
      headers: jsonHeaders(ctx),
      body: JSON.stringify({ receipt_handles: handles, action }),
    });
    if (res.status !== 200) throw errorFromPeer(res);
    const statuses = (JSON.parse(res.body.toString("utf8")) as { statuses: number[] }).statuses;
    return statuses.map((s) => (s === 204 || s === 400 || s === 410 ? s : new NaradError("not_owner")));
  }

  /** Internal route: settles (or releases) handles of partitions open here. */
  async settleLocal(topic: string, handles: string[], action: LocalSettleAction): Promise<SettleOutcome[]> {
    await this.ensureKnown(topic);
    if (action === "release") {
      this.o.broker.releaseLeases(topic, handles);
      return handles.map(() => 204);
    }
    return (await this.o.broker.settleDurable(topic, handles, action)).map((s) => (s === 503 ? new NaradError("not_owner") : s));
  }

  // ---- replay -----------------------------------------------------------------------------------

  async replay(topic: string, partition: number, offset: number, limit: number, ctx: RequestContext): Promise<ReplayResult | { json: Buffer }> {
    const t = await this.topic(topic);
    if (partition >= t.partitions) throw new NaradError("partition_not_found", `Topic ${topic} has partitions 0..${t.partitions - 1}.`);
    const node = this.placement(topic, partition).node;
    if (node === this.me) return this.replayLocal(topic, partition, offset, limit);
    const headers: Record<string, string> = {};
    if (ctx.authorization !== undefined) headers.authorization = ctx.authorization;
    const res = await this.forward(node, {
      method: "GET",
      path: `${INTERNAL_PREFIX}/topics/${encodeURIComponent(topic)}/partitions/${partition}/messages?offset=${offset}&limit=${limit}`,
      headers,
    });
    if (res.status !== 200) throw errorFromPeer(res);
    return { json: res.body };
  }

  async replayLocal(topic: string, partition: number, offset: number, limit: number): Promise<ReplayResult> {
    await this.ensureKnown(topic);
    await this.o.ownership.ensureOpen(topic, partition);
    return this.o.broker.replay(topic, partition, offset, limit);
  }

  releaseWaiters(): void {
    this.o.broker.releaseWaiters();
    for (const cancel of [...this.waiting]) cancel();
  }

  /** Internal route, old owner of a move: see Ownership.freeze. */
  async freeze(topic: string, partition: number, epoch: number, to: string): Promise<void> {
    await cpCall(() => this.o.ownership.freeze(topic, partition, epoch, to));
  }

  // ---- plumbing ---------------------------------------------------------------------------------

  /** A request to a peer; transport failures become owner_unreachable (definite) or forward_failed. */
  async forward(node: string, r: Parameters<Peers["request"]>[1]): Promise<PeerResponse> {
    try {
      const res = await this.o.peers.request(node, r);
      this.metrics.forwarded.inc({ peer: node, result: "ok" });
      return res;
    } catch (e) {
      if (e instanceof PeerError) {
        this.metrics.forwarded.inc({ peer: node, result: e.definite ? "unreachable" : "failed" });
        if (e.definite) throw new NaradError("owner_unreachable", `Node ${node} could not be reached; nothing was sent to it (${e.message}).`);
        throw new NaradError("forward_failed", `Node ${node} got the request but no answer came back (${e.message}); it may or may not have happened.`);
      }
      throw e;
    }
  }
}

/** A peer's error answer as the same error here. */
export function errorFromPeer(res: PeerResponse): NaradError {
  let code: string | undefined;
  let message: string | undefined;
  try {
    const j = JSON.parse(res.body.toString("utf8")) as { error?: { code?: string; message?: string } };
    code = j.error?.code;
    message = j.error?.message;
  } catch {
    // not our JSON
  }
  const ra = header(res.headers, "retry-after");
  if (code !== undefined && isErrorCode(code)) return new NaradError(code, message, ra === undefined ? {} : { retryAfterS: Number(ra) });
  return new NaradError(res.status < 500 ? "bad_request" : "forward_failed", `The owner answered ${res.status}${message ? `: ${message}` : ""}.`);
}

/**
 * What is known of each message of a batch split into groups (item indexes per group, and each
 * group's outcome): a group that was stored gives its messages their partition and offset; one
 * that failed definitely stored none of them (produceGroup tries another partition only after a
 * definite refusal, so its last error is definite only if every try was); any other failure may
 * have stored them.
 */
export function batchResults(n: number, groups: readonly (readonly number[])[], outcomes: readonly PromiseSettledResult<readonly Produced[]>[]): BatchItemResult[] {
  const out = new Array<BatchItemResult>(n);
  groups.forEach((idxs, g) => {
    const o = outcomes[g]!;
    if (o.status === "fulfilled") {
      idxs.forEach((i, j) => (out[i] = { status: "stored", partition: o.value[j]!.partition, offset: o.value[j]!.offset }));
      return;
    }
    const e: unknown = o.reason;
    const code = e instanceof NaradError ? e.code : "internal";
    const r: BatchItemResult = e instanceof NaradError && e.definite ? { status: "not_stored", code } : { status: "unknown", code };
    for (const i of idxs) out[i] = r;
  });
  return out;
}

/** Control-plane failures as the HTTP errors of the table. */
export async function cpCall<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (e) {
    throw cpError(e);
  }
}

export function cpError(e: unknown): unknown {
  if (e instanceof ControlPlaneUnavailable) {
    return e.mayHaveHappened
      ? new NaradError("timeout", `The control plane (PostgreSQL) went away while the change was committed; it may or may not have been made: check, then retry.`)
      : new NaradError("control_plane_unavailable");
  }
  if (e instanceof MoveRefused) {
    if (e.reason === "node_down") return new NaradError("node_down", e.message);
    if (e.status === 400) return new NaradError("invalid_argument", e.message);
    return new NaradError("move_conflict", e.message);
  }
  if (e instanceof NodeSuperseded) return new NaradError("shutting_down", e.message);
  return e;
}

function publicChildren(links: readonly ChildLink[]): ChildJson[] {
  return links.map((c): ChildJson => (c.delay_ms === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delay_ms: c.delay_ms }));
}

function jsonHeaders(ctx: RequestContext): Record<string, string> {
  const h: Record<string, string> = { "content-type": "application/json" };
  if (ctx.authorization !== undefined) h.authorization = ctx.authorization;
  return h;
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

/** A result of a produce the owner answered: the owner is the peer that answered (every answer names its node and boot). */
function ownedBy(res: PeerResponse, r: Produced): Produced {
  const owner = header(res.headers, "narad-node");
  const ownerBoot = header(res.headers, "narad-boot");
  return { partition: r.partition, offset: r.offset, ...(owner !== undefined && ownerBoot !== undefined ? { owner, ownerBoot } : {}), ...(r.duplicate === true ? { duplicate: true as const } : {}) };
}

function errText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T | undefined> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => resolve(undefined), ms);
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}
