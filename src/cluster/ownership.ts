// Keeps the local broker in step with the control plane's placement: which topics exist, and
// which of their partitions this node owns, at which epoch.
//
// Every change event of a topic or partition schedules a reconcile of that topic, and reconciles
// of one topic run one after another (a per-topic chain), so the broker's state converges on the
// view whatever order the events came in:
// - a topic that is gone, or came back as a new incarnation, is dropped with its files;
// - a partition placed on this node is opened at the placement's epoch (a reopen if the epoch
//   changed);
// - a partition placed on another node is closed here and its files removed: it got there by a
//   completed move, which copied them first (docs/cluster-control-plane.md: a down node's
//   partitions are never placed elsewhere, so no other change moves an owner).
//
// Moves add two local states (src/cluster/moves.ts):
// - frozen (this node is the old owner): the partition is closed, its files stable for the copy,
//   and it stays closed while the placement says "moving" at the epoch it was frozen at. A
//   placement back to "serving" at that epoch means the move was aborted: it opens again. A
//   placement on another node means the move completed: its files go. A partition frozen longer
//   than moveFreezeTimeoutMs whose move is still in progress (a driver that died) is aborted by
//   this node itself, with the control plane's compare-and-set on the epoch.
// - incoming (this node is the new owner): the copied files are being installed; a reconcile
//   must not remove them although the placement still names the old owner.
//
// A request can reach an owner before the change event did (a topic created on another node a
// moment ago): ensureOpen() re-reads the topic and opens the partition on the spot.

import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { Broker, ClusterTopicMeta } from "../broker/broker.js";
import type { ChildLink } from "../broker/children.js";
import type { Clock } from "../platform/clock.js";
import { systemScheduler, type Scheduler, type Timer } from "../platform/scheduler.js";
import type { ClusterTopic, ControlPlane } from "./control-plane.js";
import { ControlPlaneUnavailable, MoveRefused } from "./errors.js";
import { writeFileAtomic } from "../platform/files.js";

/** What reconcile asks of replication: this node's follower replicas. */
export interface FollowerReplicas {
  ensureFollower(topic: string, incarnation: number, partition: number): Promise<unknown>;
  closeFollower(topic: string, partition: number): Promise<void>;
  closeTopic(topic: string): Promise<void>;
}

/** Written in a partition's directory by a freeze (src/cluster/moves.ts); never copied. */
export const FROZEN_MARKER = "moving.frozen";

interface Frozen {
  epoch: number;
  sinceMono: number;
  timer: Timer | undefined;
}

export class Ownership {
  private readonly chains = new Map<string, Promise<unknown>>();
  private readonly frozen = new Map<string, Frozen>();
  private readonly incoming = new Set<string>();
  private readonly log: Logger;
  private unsubscribe: (() => void) | undefined;
  private closed = false;
  /** Follower replicas of replicated partitions (src/cluster/replication), set before start(). */
  replicas: FollowerReplicas | undefined;

  constructor(
    private readonly o: {
      cp: ControlPlane;
      broker: Broker;
      nodeId: string;
      dataDir: string;
      clock: Clock;
      logger: Logger;
      moveFreezeTimeoutMs: number;
      /** Every timer (the freeze's expiry); default the system's. */
      scheduler?: Scheduler;
    },
  ) {
    this.log = o.logger.child({ module: "ownership" });
  }

  /** Opens what this node owns, removes what it no longer does, and follows changes from now on. */
  async start(): Promise<void> {
    this.unsubscribe = this.o.cp.onChange((e) => {
      if (e.kind === "topic") this.schedule(e.name);
      else if (e.kind === "partition") this.schedule(e.topic);
    });
    const names = new Set(this.o.cp.topics().map((t) => t.name));
    // Directories of topics that were deleted (or created again) while this node was away.
    try {
      for (const name of await readdir(join(this.o.dataDir, "cluster"))) {
        const t = this.o.cp.topic(name);
        for (const inc of await readdir(join(this.o.dataDir, "cluster", name))) {
          if (t === undefined || String(t.incarnation) !== inc) {
            this.log.info({ topic: name, incarnation: inc }, "removing the files of a topic that no longer exists");
            await this.o.broker.placement.dropTopic(name).catch(() => undefined);
            await removeDir(join(this.o.dataDir, "cluster", name, inc), this.o.dataDir);
          }
        }
      }
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    await Promise.all([...names].map((n) => this.schedule(n)));
  }

  /** Runs after every reconcile of the topic scheduled so far. */
  settled(topic: string): Promise<void> {
    return (this.chains.get(topic) ?? Promise.resolve()).then(() => undefined);
  }

  /** Runs fn in the topic's chain (after every reconcile scheduled before it). */
  inChain<T>(topic: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.chains.get(topic) ?? Promise.resolve()).then(fn);
    const tail = run.catch(() => undefined);
    this.chains.set(topic, tail);
    void tail.then(() => {
      if (this.chains.get(topic) === tail) this.chains.delete(topic);
    });
    return run;
  }

  schedule(topic: string): Promise<void> {
    return this.inChain(topic, () => this.reconcile(topic)).catch((e: Error) => {
      this.log.error({ topic, err: e.message }, "reconciling a topic with the control plane failed; the next change or resync retries");
    });
  }

  /**
   * For a request that reached this node for a partition it should own: opens it now if the
   * placement (re-read when it does not say so yet) puts it here. Resolves whether or not it is.
   */
  async ensureOpen(topic: string, partition: number): Promise<void> {
    if (this.o.broker.placement.openEpoch(topic, partition) !== undefined) return;
    let p = this.o.cp.partitionPlacement(topic, partition);
    if (p === undefined || p.node !== this.o.nodeId) {
      await this.o.cp.refresh([`topic:${topic}`]).catch(() => undefined);
      p = this.o.cp.partitionPlacement(topic, partition);
    }
    if (p !== undefined && p.node === this.o.nodeId) await this.schedule(topic);
  }

  isFrozen(topic: string, partition: number): boolean {
    return this.frozen.has(`${topic}/${partition}`);
  }

  /**
   * Old owner, step 2 of a move: stops serving the partition and closes it (log, acks and copy
   * cursors flushed and synced), so its files can be copied. Only while the placement says this
   * node owns it at `epoch` and it is moving to `to`.
   */
  async freeze(topic: string, partition: number, epoch: number, to: string): Promise<void> {
    await this.o.cp.refresh([`topic:${topic}`]);
    await this.inChain(topic, async () => {
      const p = this.o.cp.partitionPlacement(topic, partition);
      if (p === undefined || p.node !== this.o.nodeId || p.epoch !== epoch || p.state !== "moving" || p.moveTo !== to) {
        throw new MoveRefused("not_moving", `${topic}/${partition} is not moving from ${this.o.nodeId} to ${to} at epoch ${epoch} (placement: ${JSON.stringify(p ?? null)}).`);
      }
      const key = `${topic}/${partition}`;
      if (!this.frozen.has(key)) {
        const f: Frozen = { epoch, sinceMono: this.o.clock.monoMs(), timer: undefined };
        this.frozen.set(key, f);
        this.armFreezeTimer(topic, partition, f);
      }
      await this.o.broker.placement.closePartition(topic, partition, false);
      // Durable before the freeze is answered: a restart must not serve the partition again
      // while the copy may still be taken (reconcile reads it back).
      const dir = this.partitionDir(topic, partition);
      if (dir !== undefined) await writeFileAtomic(join(dir, FROZEN_MARKER), String(epoch));
      this.log.info({ topic, partition, epoch, to }, "partition frozen for a move");
    });
  }

  private armFreezeTimer(topic: string, partition: number, f: Frozen): void {
    f.timer?.cancel();
    f.timer = (this.o.scheduler ?? systemScheduler).after(this.o.moveFreezeTimeoutMs, () => void this.freezeExpired(topic, partition, f));
  }

  private async freezeExpired(topic: string, partition: number, f: Frozen): Promise<void> {
    if (this.closed || this.frozen.get(`${topic}/${partition}`) !== f) return;
    this.log.warn({ topic, partition, epoch: f.epoch, frozenMs: Math.round(this.o.clock.monoMs() - f.sinceMono) }, "a move left this partition frozen too long; aborting it");
    try {
      await this.o.cp.abortMove(topic, partition, f.epoch);
    } catch (e) {
      if (e instanceof ControlPlaneUnavailable) {
        this.armFreezeTimer(topic, partition, f); // cannot tell what happened: stay frozen, ask again later
        return;
      }
      if (!(e instanceof MoveRefused)) this.log.error({ err: (e as Error).message }, "aborting a stale move failed");
    }
    await this.o.cp.refresh([`topic:${topic}`]).catch(() => undefined);
    await this.schedule(topic);
  }

  /** New owner: protects the files being installed from reconcile until the switch is done. */
  beginIncoming(topic: string, partition: number): void {
    this.incoming.add(`${topic}/${partition}`);
  }

  endIncoming(topic: string, partition: number): void {
    this.incoming.delete(`${topic}/${partition}`);
  }

  private async reconcile(name: string): Promise<void> {
    if (this.closed) return;
    const { cp, nodeId } = this.o;
    const broker = this.o.broker.placement;
    const ct = cp.topic(name);
    const known = broker.knownIncarnation(name);
    if (ct === undefined) {
      await this.replicas?.closeTopic(name);
      if (known !== undefined) await broker.dropTopic(name);
      for (const key of [...this.frozen.keys()]) if (key.startsWith(`${name}/`)) this.unfreeze(key);
      return;
    }
    if (known !== undefined && known !== ct.incarnation) {
      await this.replicas?.closeTopic(name);
      await broker.dropTopic(name);
    }
    broker.applyTopic(toMeta(ct));
    for (const p of cp.placement(name) ?? []) {
      const key = `${name}/${p.partition}`;
      const open = broker.openEpoch(name, p.partition);
      if (p.node === nodeId) {
        if (open === undefined && !this.frozen.has(key)) {
          // Frozen before a restart? The marker says so (see freeze()).
          const marker = await readMarker(broker.partitionDir(name, ct.incarnation, p.partition));
          if (marker !== undefined && marker === p.epoch && p.state === "moving") {
            const f: Frozen = { epoch: marker, sinceMono: this.o.clock.monoMs(), timer: undefined };
            this.frozen.set(key, f);
            this.armFreezeTimer(name, p.partition, f);
            this.log.warn({ topic: name, partition: p.partition, epoch: marker }, "this partition was frozen for a move before a restart; it stays frozen until the move ends");
          }
        }
        const f = this.frozen.get(key);
        if (f !== undefined) {
          if (p.epoch === f.epoch && p.state === "moving") continue; // the copy may be running: stay closed
          this.unfreeze(key); // aborted (serving again at the same epoch), or back here at a newer one
        }
        if (open === undefined) await rm(join(broker.partitionDir(name, ct.incarnation, p.partition), FROZEN_MARKER), { force: true });
        if (open !== p.epoch) await broker.openPartition(name, p.partition, p.epoch);
      } else if (ct.replication_factor > 1 && p.replicas.includes(nodeId)) {
        // A follower here: a deposed leader's open partition closes first (its files stay: they
        // are this replica's, cut to the new leader's log at its first join).
        if (open !== undefined) await broker.closePartition(name, p.partition, false);
        await this.replicas?.ensureFollower(name, ct.incarnation, p.partition).catch(() => undefined);
      } else {
        if (this.incoming.has(key)) continue;
        await this.replicas?.closeFollower(name, p.partition);
        if (this.frozen.has(key)) this.unfreeze(key); // the move completed: the new owner has the copy
        // Moved away (or a stale copy left behind): the files go. closePartition also
        // removes a directory of a partition that is not open here.
        if (open !== undefined || (await broker.hasPartitionFiles(name, ct.incarnation, p.partition))) {
          await broker.closePartition(name, p.partition, true);
        }
      }
    }
  }

  private partitionDir(topic: string, partition: number): string | undefined {
    const t = this.o.cp.topic(topic);
    return t === undefined ? undefined : this.o.broker.placement.partitionDir(topic, t.incarnation, partition);
  }

  private unfreeze(key: string): void {
    const f = this.frozen.get(key);
    if (f === undefined) return;
    f.timer?.cancel();
    this.frozen.delete(key);
  }

  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    for (const key of [...this.frozen.keys()]) this.unfreeze(key);
  }
}

/** The broker's view of a cluster topic. */
export function toMeta(t: ClusterTopic): ClusterTopicMeta {
  return {
    name: t.name,
    incarnation: t.incarnation,
    partitions: t.partitions,
    visibility_timeout_ms: t.visibility_timeout_ms,
    retention_ms: t.retention_ms,
    replication_factor: t.replication_factor,
    acks: t.acks,
    max_deliveries: t.max_deliveries,
    dead_letter_topic: t.dead_letter_topic,
    owner: t.owner,
    owner_id: t.owner_id,
    children: t.children as ChildLink[],
    parent: null,
    created_at: t.created_at,
  };
}

async function readMarker(dir: string): Promise<number | undefined> {
  try {
    const n = Number((await readFile(join(dir, FROZEN_MARKER), "utf8")).trim());
    return Number.isSafeInteger(n) ? n : undefined;
  } catch {
    return undefined;
  }
}

async function removeDir(dir: string, dataDir: string): Promise<void> {
  const trash = join(dataDir, "trash");
  await mkdir(trash, { recursive: true });
  const dest = join(trash, randomBytes(6).toString("hex"));
  try {
    await rename(dir, dest);
  } catch {
    return;
  }
  await rm(dest, { recursive: true, force: true });
}
