// The control plane of a cluster: what the nodes must agree on, kept in PostgreSQL. Message data
// never goes there; it stays in the owners' logs. docs/cluster-control-plane.md is the long form.
//
// What is kept: the nodes (membership with heartbeat leases), topics (the TopicMeta fields),
// partition placement (owner node and epoch per partition), users and grants, and a cluster
// secret that every node uses to authenticate receipt handles.
//
// This is the façade the rest of the server uses; each job is a module of ./control-plane/:
//   lease.ts        this node's registration, heartbeats and the local lease deadline rule
//   view.ts         the cached view every read is served from
//   refresh.ts      the serial refresh queue and the periodic full resync
//   listen.ts       the LISTEN connection and its reconnects
//   connections.ts  the pools and the transaction runner (failures → ControlPlaneUnavailable)
//   *-sql.ts        the SQL per subject: nodes, topics and placement, moves, users and grants
//   model.ts, rows.ts, options.ts: the entities, the rows they are read from, the settings
// The façade keeps the one discipline every write follows (write()): refuse when closed or
// superseded, run the subject's transaction with its NOTIFY, then re-read what it changed
// through the refresh queue before returning (read-your-writes on the node that wrote).
//
// While PostgreSQL is unreachable, writes fail with ControlPlaneUnavailable (503), reads keep
// serving the cached view, heartbeats fail, and the node's own lease deadline runs out; see the
// docs for the serving rule. Every timer is the scheduler's (options.scheduler, the system's by
// default), so a test can drive heartbeats and lease lapses with a ManualScheduler.

import type { Logger } from "pino";
import type { Grant } from "../auth/model.js";
import type { StoredUser, UserStoreApi, UserSummary } from "../auth/user-store-api.js";
import type { Clock } from "../platform/clock.js";
import { systemScheduler, type Scheduler } from "../platform/scheduler.js";
import { ControlPlaneUnavailable, NodeSuperseded, isUnavailableError } from "./errors.js";
import { migrate } from "./schema.js";
import { Connections, type InTransaction } from "./control-plane/connections.js";
import { NodeLease } from "./control-plane/lease.js";
import { Listener } from "./control-plane/listen.js";
import type { ChangeEvent, ClusterNode, ClusterTopic, ControlPlaneStatus, NewTopic, PartitionPlacement, TopicChange, TopicWithPlacement } from "./control-plane/model.js";
import * as replicasSql from "./control-plane/replicas-sql.js";
import * as movesSql from "./control-plane/moves-sql.js";
import * as nodesSql from "./control-plane/nodes-sql.js";
import { rateLimitedWarn, redact, settingsOf, type ControlPlaneOptions, type Settings, type Warn } from "./control-plane/options.js";
import { RefreshQueue, parseTargets } from "./control-plane/refresh.js";
import * as topicsSql from "./control-plane/topics-sql.js";
import * as producersSql from "./control-plane/producers-sql.js";
import * as usersSql from "./control-plane/users-sql.js";
import { CachedView } from "./control-plane/view.js";

export type {
  ChangeEvent,
  ClusterNode,
  ClusterTopic,
  ControlPlaneStatus,
  NewTopic,
  NodeState,
  PartitionPlacement,
  PartitionState,
  TopicChange,
  TopicWithPlacement,
} from "./control-plane/model.js";
export { CONTROL_PLANE_DEFAULTS, CONTROL_PLANE_LIMITS, type ControlPlaneOptions } from "./control-plane/options.js";
export { NOTIFY_CHANNEL } from "./control-plane/rows.js";

export class ControlPlane implements UserStoreApi {
  readonly nodeId: string;
  /** Assigned at the first registration of this node id, kept across restarts. */
  nodeNumber = 0;
  /** 32 random bytes created once per cluster; authenticates receipt handles on every node. */
  clusterSecret: Buffer = Buffer.alloc(0);

  private readonly o: Settings;
  private readonly clock: Clock;
  private readonly scheduler: Scheduler;
  private readonly log: Logger;
  private readonly warn: Warn;
  private readonly db: Connections;
  private readonly view = new CachedView();
  private readonly refreshes: RefreshQueue;
  private readonly listener: Listener;
  private readonly lease: NodeLease;
  private readonly listeners = new Set<(e: ChangeEvent) => void>();
  private closed = false;
  /**
   * False from the moment this node's lease ran out until a full re-read of the view that began
   * after the lease came back has completed. While the lease was out (a cut from PostgreSQL, a
   * long pause) the others may have failed its replicated partitions over; its cached view says
   * nothing of that, so owning from it would serve a partition another node now leads.
   */
  private viewCurrent = true;
  /** Counts lapses, so a re-read that began before the latest lapse does not count as current. */
  private lapses = 0;
  /** The subject modules' way to write (see write()). */
  private readonly writer = <T>(targets: string[], fn: InTransaction<T>): Promise<T> => this.write(targets, fn);

  private constructor(opts: ControlPlaneOptions) {
    const o = settingsOf(opts);
    this.o = o;
    this.nodeId = o.nodeId;
    this.clock = opts.clock;
    this.scheduler = opts.scheduler ?? systemScheduler;
    this.log = opts.logger.child({ module: "control-plane" });
    this.warn = rateLimitedWarn(this.log, this.clock);
    this.db = new Connections(o, this.warn);
    const emit = (events: ChangeEvent[]): void => this.emit(events);
    const common = { clock: this.clock, scheduler: this.scheduler, log: this.log, warn: this.warn };
    this.refreshes = new RefreshQueue({ ...common, db: this.db, view: this.view, emit });
    this.listener = new Listener(o, { ...common, refresh: this.refreshes });
    this.lease = new NodeLease(o, {
      ...common,
      // A lease back after a lapse is told only once the view is re-read (leaseChanged): the
      // owners act on it, and until then this node owns nothing.
      emit: (events) => {
        const out = events.filter((e) => {
          if (e.kind !== "lease") return true;
          this.leaseChanged(e.live);
          return !e.live || this.viewCurrent;
        });
        if (out.length > 0) emit(out);
      },
      sql: {
        register: () => nodesSql.registerNode(this.db, o, this.log),
        heartbeat: () => nodesSql.heartbeat(this.db.hbPool, o),
      },
      membershipRead: (rows) => void this.refreshes.request({ nodeRows: rows }).catch(() => undefined),
    });
  }

  /**
   * Connects, applies migrations, registers this node (taking over its own row after a restart),
   * starts listening and heartbeating, and loads the view. Retries an unreachable database for
   * startupTimeoutMs, then throws ControlPlaneUnavailable.
   */
  static async connect(opts: ControlPlaneOptions): Promise<ControlPlane> {
    const cp = new ControlPlane(opts);
    try {
      await cp.startupRetry("migrate", () => migrate(cp.db.pool).then((v) => v.length > 0 && cp.log.info({ versions: v }, "control-plane schema migrated")));
      await cp.startupRetry("cluster secret", async () => {
        cp.clusterSecret = await nodesSql.loadClusterSecret(cp.db);
      });
      await cp.startupRetry("register", async () => {
        cp.nodeNumber = await cp.lease.register();
        cp.log.info({ nodeNumber: cp.nodeNumber, advertise: cp.o.advertiseUrl }, "registered with the control plane");
      });
      await cp.listener.connect().catch((e: Error) => {
        cp.warn("listen", { err: e.message }, "could not LISTEN yet; retrying in the background");
        cp.listener.scheduleReconnect();
      });
      await cp.startupRetry("load", () => cp.refreshes.request({ full: true }));
    } catch (e) {
      await cp.close().catch(() => undefined);
      throw e;
    }
    cp.lease.start();
    cp.refreshes.startPeriodicResync(cp.o.resyncIntervalMs);
    return cp;
  }

  private async startupRetry<T>(what: string, fn: () => Promise<T>): Promise<T> {
    const deadline = this.clock.monoMs() + this.o.startupTimeoutMs;
    let delay = 100;
    for (;;) {
      try {
        return await fn();
      } catch (e) {
        if (!isUnavailableError(e) || this.closed) throw e;
        if (this.clock.monoMs() + delay > deadline) {
          throw new ControlPlaneUnavailable(false, new Error(`${what}: ${redact(this.o.url)} did not answer within ${this.o.startupTimeoutMs} ms (${(e as Error).message})`));
        }
        this.warn("startup", { step: what, err: (e as Error).message }, "control plane unreachable at start; retrying");
        await this.scheduler.sleep(delay);
        delay = Math.min(delay * 2, 2000);
      }
    }
  }

  // ---- events --------------------------------------------------------------------------------

  /** Calls cb for every change of the view; returns a function that stops it. cb must not throw. */
  onChange(cb: (e: ChangeEvent) => void): () => void {
    this.listeners.add(cb);
    return () => this.listeners.delete(cb);
  }

  private emit(events: ChangeEvent[]): void {
    for (const e of events) {
      for (const cb of this.listeners) {
        try {
          cb(e);
        } catch (err) {
          this.log.error({ err: (err as Error).message, event: e.kind }, "a control-plane change listener threw");
        }
      }
    }
  }

  // ---- lease ---------------------------------------------------------------------------------

  /** A lapse makes the view suspect; the lease back, a full re-read makes it current again. */
  private leaseChanged(live: boolean): void {
    if (!live) {
      this.lapses++;
      this.viewCurrent = false;
      return;
    }
    if (this.viewCurrent) return;
    const lapse = this.lapses;
    void this.refreshes.request({ full: true }).then(
      () => {
        if (this.lapses === lapse && this.lease.isLive()) {
          this.viewCurrent = true;
          this.log.info("the lease is back and the view re-read: owning partitions again");
          // The owners listen to changes; this one says the view may differ from what it was.
          this.emit([{ kind: "lease", live: true }]);
        }
      },
      (e: Error) => {
        this.warn("refresh", { err: e.message }, "re-reading the view after the lease came back failed; retrying");
        if (this.lapses === lapse) this.scheduler.after(100, () => this.leaseChanged(true));
      },
    );
  }

  /** Monotonic ms (the clock's monoMs) until which this node may act as owner; -Infinity before the first heartbeat. */
  leaseValidUntilMono(): number {
    return this.lease.validUntilMono();
  }

  /** False from the moment the local lease deadline passes: stop acknowledging. */
  isLeaseLive(): boolean {
    return this.lease.isLive();
  }

  // ---- reads: the cached view ----------------------------------------------------------------

  /** Every node as of the last read (each heartbeat reads them all). */
  nodes(): ClusterNode[] {
    return this.view.nodes();
  }

  node(id: string): ClusterNode | undefined {
    return this.view.node(id);
  }

  topics(): ClusterTopic[] {
    return this.view.topics();
  }

  topic(name: string): ClusterTopic | undefined {
    return this.view.topic(name);
  }

  /** Every partition of the topic with its owner and epoch, in partition order. */
  placement(topic: string): PartitionPlacement[] | undefined {
    return this.view.placement(topic);
  }

  partitionPlacement(topic: string, partition: number): PartitionPlacement | undefined {
    return this.view.partitionPlacement(topic, partition);
  }

  /** Every partition a node owns, by topic and partition. */
  ownedBy(nodeId: string): PartitionPlacement[] {
    return this.view.ownedBy(nodeId);
  }

  /**
   * The check before every owner write (docs/architecture.md, "epoch check before any owner
   * write"): this node's lease is live, and the cached view says this node owns the partition at
   * exactly this epoch. From memory; no database round trip.
   */
  ownsPartition(topic: string, partition: number, epoch: number): boolean {
    if ((!this.lease.isLive() || !this.viewCurrent) && !this.o.ownsWithoutLease) return false;
    const p = this.view.partitionPlacement(topic, partition);
    return p !== undefined && p.node === this.nodeId && p.epoch === epoch;
  }

  // ---- topics and placement ------------------------------------------------------------------

  /**
   * Creates the topic and places its partitions on the least-loaded live nodes, epoch 1.
   * NaradError topic_exists if the name is taken (a unique constraint decides, not a prior read);
   * NaradError unavailable if no node is live.
   */
  async createTopic(t: NewTopic): Promise<TopicWithPlacement> {
    await topicsSql.createTopic(this.writer, t, this.clock.nowMs());
    return this.topicWithPlacement(t.name);
  }

  /** Changes settings and grows partitions (new ones placed like a create's). */
  async updateTopic(name: string, change: TopicChange): Promise<TopicWithPlacement> {
    await topicsSql.updateTopic(this.writer, name, change);
    return this.topicWithPlacement(name);
  }

  /** Removes the topic and its placement. NaradError topic_not_found. */
  /** Retires a node that is down and holds no partition (./control-plane/nodes-sql.ts). */
  async removeNode(id: string): Promise<void> {
    await nodesSql.removeNode(this.writer, id);
  }

  async deleteTopic(name: string): Promise<void> {
    await topicsSql.deleteTopic(this.writer, name);
  }

  private topicWithPlacement(name: string): TopicWithPlacement {
    const topic = this.view.topic(name);
    const placement = this.view.placement(name);
    // The write's own re-read failed (the database went away right after COMMIT): the change
    // is made; the view catches up at the next resync.
    if (topic === undefined || placement === undefined) throw new ControlPlaneUnavailable(true);
    return { topic, placement };
  }

  // ---- moves ---------------------------------------------------------------------------------

  /**
   * Starts moving a partition to another node: marks it 'moving' and returns its owner and epoch.
   * The owner keeps serving while the log is copied. Both nodes must be live (a down owner's log
   * cannot be copied, and an empty copy is never promoted). Repeating a begin to the same node
   * returns the move in progress.
   */
  /** A partition of a down owner placed elsewhere, its data given up (./control-plane/moves-sql.ts). */
  reassignLost(topic: string, partition: number, toNode: string): Promise<{ from: string; epoch: number }> {
    return movesSql.reassignLost(this.writer, topic, partition, toNode);
  }

  beginMove(topic: string, partition: number, toNode: string): Promise<{ owner: string; epoch: number; toNode: string }> {
    return movesSql.beginMove(this.writer, topic, partition, toNode);
  }

  /**
   * Switches the owner to toNode and raises the epoch, atomically, only if the partition is still
   * moving to toNode at expectedEpoch (compare-and-set) and toNode is live. MoveRefused
   * stale_epoch when another change won; the caller must then not let toNode serve.
   *
   * Fencing the old owner is the move driver's part: the old owner must have stopped writing the
   * partition (frozen it, copied the tail) before this is called, or be the caller itself; it
   * learns the new epoch at once from its own write, or through NOTIFY otherwise.
   */
  async completeMove(topic: string, partition: number, toNode: string, expectedEpoch: number): Promise<PartitionPlacement> {
    await movesSql.completeMove(this.writer, topic, partition, toNode, expectedEpoch);
    const p = this.view.partitionPlacement(topic, partition);
    if (p === undefined) throw new ControlPlaneUnavailable(true);
    return p;
  }

  /** Ends a move without switching owner, if the partition is still moving at expectedEpoch. */
  abortMove(topic: string, partition: number, expectedEpoch: number): Promise<void> {
    return movesSql.abortMove(this.writer, topic, partition, expectedEpoch);
  }

  // ---- replicated partitions (docs/replication.md) -------------------------------------------

  /**
   * The leader's compare-and-set of a partition's in-sync replicas at its epoch; resolves once this
   * node's view shows the change. False when the guard failed (this node no longer leads it).
   */
  setInSync(topic: string, partition: number, epoch: number, inSync: string[]): Promise<boolean> {
    return replicasSql.setInSync(this.writer, topic, partition, epoch, this.nodeId, inSync);
  }

  /**
   * A failover: this node becomes the partition's leader at expectedEpoch + 1 if the old leader
   * still holds it at expectedEpoch and its lease has lapsed by the database clock (and, with
   * requireInSync, this node is in sync). True when it won.
   */
  electLeader(topic: string, partition: number, expectedEpoch: number, oldLeader: string, requireInSync: boolean): Promise<boolean> {
    return replicasSql.electLeader(this.writer, topic, partition, expectedEpoch, oldLeader, this.nodeId, requireInSync);
  }

  /** Moving one replica, step 1: `to` joins the replica set, the partition moving to it. */
  beginReplicaMove(topic: string, partition: number, epoch: number, from: string, to: string): Promise<boolean> {
    return replicasSql.beginReplicaMove(this.writer, topic, partition, epoch, this.nodeId, from, to);
  }

  /** Moving a follower, step 2: `from` leaves once `to` is in sync. */
  finishReplicaMove(topic: string, partition: number, epoch: number, from: string, to: string): Promise<boolean> {
    return replicasSql.finishReplicaMove(this.writer, topic, partition, epoch, this.nodeId, from, to);
  }

  /** Moving the leader, step 2: this node, which stopped serving the partition, hands it to `next`. */
  handOffLeader(topic: string, partition: number, epoch: number, next: string, to: string): Promise<boolean> {
    return replicasSql.handOffLeader(this.writer, topic, partition, epoch, this.nodeId, next, to);
  }

  // ---- users and grants (UserStoreApi) -------------------------------------------------------

  get userCount(): number {
    return this.view.userCount;
  }

  generation(name: string): number | undefined {
    return this.view.generation(name);
  }

  get(name: string): StoredUser | undefined {
    return this.view.user(name);
  }

  list(): UserSummary[] {
    return this.view.users();
  }

  grants(name: string): Grant[] {
    return this.view.grants(name);
  }

  addUser(name: unknown, password: unknown, nowMs: number, grants: Grant[] = []): Promise<UserSummary> {
    return usersSql.addUser(this.writer, name, password, nowMs, grants);
  }

  setPassword(name: string, password: unknown): Promise<void> {
    return usersSql.setPassword(this.writer, name, password);
  }

  deleteUser(name: string): Promise<void> {
    return usersSql.deleteUser(this.writer, name);
  }

  addGrant(name: string, g: Grant): Promise<Grant> {
    return usersSql.addGrant(this.writer, name, g);
  }

  revokeGrant(name: string, g: Grant): Promise<void> {
    return usersSql.revokeGrant(this.writer, name, g);
  }

  // ---- producer ids (src/cluster/producers.ts) -----------------------------------------------

  insertProducer(id: string, idleExpiryMs: number, idsMax: number): Promise<void> {
    return producersSql.insertProducer(this.db, id, idleExpiryMs, idsMax);
  }

  touchProducer(id: string, idleExpiryMs: number): Promise<boolean> {
    return producersSql.touchProducer(this.db, id, idleExpiryMs);
  }

  // ---- writes --------------------------------------------------------------------------------

  /**
   * Runs fn in a transaction that also NOTIFYs what it changed, then re-reads those entities into
   * the view before returning (read-your-writes on this node). A failed re-read is logged, not
   * thrown: the change is made, and the next resync brings the view up to date.
   */
  private async write<T>(targets: string[], fn: InTransaction<T>): Promise<T> {
    if (this.closed) throw new ControlPlaneUnavailable(false, new Error("the control plane client is closed"));
    if (this.lease.superseded) throw new NodeSuperseded(this.nodeId);
    const r = await this.db.tx(fn, targets);
    await this.refreshes.request(parseTargets(targets)).catch((e: Error) => this.warn("refresh", { err: e.message }, "re-reading a change failed; the next resync will"));
    return r;
  }

  // ---- refreshes -----------------------------------------------------------------------------

  /** Re-reads the view from the database now (all of it). */
  async resync(): Promise<void> {
    await this.refreshes.request({ full: true });
  }

  /**
   * Re-reads what the targets name, now: `topic:NAME`, `user:NAME`, `nodes` (the notification
   * payloads). For a node that must see another node's write before it answers (read-your-writes
   * across nodes, src/cluster/service.ts).
   */
  async refresh(targets: string[]): Promise<void> {
    await this.refreshes.request(parseTargets(targets));
  }

  // ---- status and shutdown -------------------------------------------------------------------

  status(): ControlPlaneStatus {
    return {
      nodeId: this.nodeId,
      nodeNumber: this.nodeNumber,
      leaseLive: this.lease.isLive(),
      leaseValidUntilMono: this.lease.validUntilMono(),
      superseded: this.lease.superseded,
      listening: this.listener.listening,
      lastHeartbeatOkMono: this.lease.lastHeartbeatOkMono,
      lastResyncOkMono: this.refreshes.lastResyncOkMono,
      heartbeatFailures: this.lease.heartbeatFailures,
    };
  }

  /**
   * Stops heartbeats and listening, releases this node's lease (so others see it down at once:
   * a graceful stop), and closes every connection. Call after the broker stopped serving.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    const wasRegistered = this.nodeNumber > 0 && !this.lease.superseded;
    this.closed = true;
    this.lease.stop();
    this.refreshes.stop();
    await this.listener.stop();
    if (wasRegistered) {
      await nodesSql
        .releaseLease(this.db.hbPool, this.o)
        .catch((e: Error) => this.log.warn({ err: e.message }, "could not release the lease at stop; others see this node down when it expires"));
    }
    await this.db.end();
  }
}
