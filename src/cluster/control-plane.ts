// The control plane of a cluster: what the nodes must agree on, kept in PostgreSQL. Message data
// never goes there; it stays in the owners' logs. docs/cluster-control-plane.md is the long form.
//
// What is kept: the nodes (membership with heartbeat leases), topics (the TopicMeta fields),
// partition placement (owner node and epoch per partition), users and grants, and a cluster
// secret that every node uses to authenticate receipt handles.
//
// Leases are timed by the database clock: a heartbeat sets lease_expires_at = now() + nodeLeaseMs
// and other nodes call a node live while lease_expires_at > now(). The node itself cannot read
// that clock, so it keeps a conservative local deadline: the monotonic time at which it SENT the
// heartbeat that succeeded, plus nodeLeaseMs, minus a safety margin. The database's now() for that
// heartbeat is later than the send, so the local deadline always passes first: by the time anyone
// sees the node down, the node has already stopped acknowledging (isLeaseLive() false).
//
// Reads are served from a cached view, never from the database on a request's path. The view is
// kept fresh three ways: every write NOTIFYs narad_changes with what changed and every node
// LISTENs on a dedicated connection and re-reads that entity; every heartbeat reads back the
// membership table; and a full resync every resyncIntervalMs repairs whatever a dropped LISTEN
// connection missed. All cache updates go through one serial queue, and each read-and-apply
// starts after the previous one finished, so the view only moves forward in time; a write
// re-reads what it changed through the same queue before it returns (read-your-writes on the
// node that wrote). Listeners get change events computed as diffs of the view.
//
// While PostgreSQL is unreachable, writes fail with ControlPlaneUnavailable (503), reads keep
// serving the cached view, heartbeats fail, and the node's own lease deadline runs out; see the
// docs for the serving rule.
//
// Limits: pool of poolMax connections plus one for heartbeats and one for LISTEN; every statement
// bounded by statementTimeoutMs (server side) and a client-side query timeout; connections by
// connectTimeoutMs; LISTEN reconnects back off up to listenReconnectMaxMs; the queue of pending
// targeted refreshes is bounded (refreshTargetsMax) and collapses into one full resync past it.

import { randomBytes, randomInt } from "node:crypto";
import pg from "pg";
import type { Logger } from "pino";
import { USER_NAME_RE, type Grant } from "../auth/model.js";
import { checkPassword, hashPassword } from "../auth/store.js";
import { NaradError } from "../protocol/errors.js";
import type { ChildJson } from "../protocol/wire.js";
import type { Clock } from "../platform/clock.js";
import { ControlPlaneUnavailable, MoveRefused, NodeSuperseded, isRetryableConflict, isUnavailableError, isUniqueViolation } from "./errors.js";
import { placePartitions, type NodeLoad } from "./placement.js";
import { NODE_NUMBER_LOCK_KEY, PLACEMENT_LOCK_KEY, migrate } from "./schema.js";
import type { PasswordHash, StoredUser, UserStoreApi, UserSummary } from "../auth/user-store-api.js";

export const CONTROL_PLANE_DEFAULTS = {
  heartbeatIntervalMs: 1000,
  nodeLeaseMs: 5000,
  leaseSafetyMarginMs: 500,
  resyncIntervalMs: 5000,
  poolMax: 4,
  statementTimeoutMs: 3000,
  connectTimeoutMs: 2000,
  listenReconnectMinMs: 100,
  listenReconnectMaxMs: 5000,
  startupTimeoutMs: 15_000,
} as const;

export const CONTROL_PLANE_LIMITS = {
  /** Topic or user names waiting for a targeted refresh; past it, one full resync instead. */
  refreshTargetsMax: 1024,
  /** Attempts of a transaction that hit a serialization failure or deadlock. */
  txAttemptsMax: 3,
  /** Node numbers fit in 16 bits (receipt handles). */
  nodeNumberMax: 65535,
  /** At most one warning per kind of failure in this interval. */
  warnIntervalMs: 5000,
} as const;

export const NOTIFY_CHANNEL = "narad_changes";

export interface ControlPlaneOptions {
  /** postgres://user:password@host:port/database */
  url: string;
  nodeId: string;
  /** The URL other nodes use to reach this one. */
  advertiseUrl: string;
  /** Changes at every process start. */
  bootId: string;
  clock: Clock;
  logger: Logger;
  heartbeatIntervalMs?: number;
  nodeLeaseMs?: number;
  /** The local lease deadline is this much earlier than the database's. */
  leaseSafetyMarginMs?: number;
  resyncIntervalMs?: number;
  poolMax?: number;
  statementTimeoutMs?: number;
  connectTimeoutMs?: number;
  listenReconnectMinMs?: number;
  listenReconnectMaxMs?: number;
  /** connect() retries an unreachable database this long before giving up. */
  startupTimeoutMs?: number;
}

export type NodeState = "live" | "down";

export interface ClusterNode {
  id: string;
  /** Small integer, kept across restarts; for receipt handles. */
  nodeNumber: number;
  advertiseUrl: string;
  bootId: string;
  /** live while its lease has not expired by the database clock (as of the last read). */
  state: NodeState;
  /** True after a graceful stop released the lease. */
  stopped: boolean;
  /** Database time (ms since the epoch) at which its lease expires. */
  leaseExpiresAtMs: number;
  version: number;
}

/** The broker's TopicMeta, as the cluster keeps it. */
export interface ClusterTopic {
  name: string;
  incarnation: number;
  partitions: number;
  visibility_timeout_ms: number;
  retention_ms: number;
  owner: string | null;
  children: ChildJson[];
  created_at: number;
  version: number;
}

export type PartitionState = "serving" | "moving";

export interface PartitionPlacement {
  topic: string;
  partition: number;
  /** The owner: the only node whose log holds this partition. */
  node: string;
  /** Raised by every change of owner; a node writes only at the epoch it opened the partition with. */
  epoch: number;
  state: PartitionState;
  /** The node a move in progress copies to. */
  moveTo: string | null;
  version: number;
}

export interface NewTopic {
  name: string;
  partitions: number;
  visibility_timeout_ms: number;
  retention_ms: number;
  owner: string | null;
  /** Random in [1, 2^32) when absent. */
  incarnation?: number;
  /** ms since the epoch; the clock's now when absent. */
  created_at?: number;
  children?: ChildJson[];
  /**
   * The owner of each partition, chosen by the caller (a replica child kept off its parent's
   * nodes); absent: the least-loaded live nodes. Each must be a registered node.
   */
  nodes?: string[];
}

export interface TopicChange {
  /** Only grows; NaradError partitions_decrease otherwise. */
  partitions?: number;
  visibility_timeout_ms?: number;
  retention_ms?: number;
  children?: ChildJson[];
  /** Owners of the new partitions, as NewTopic.nodes. */
  nodes?: string[];
}

export interface TopicWithPlacement {
  topic: ClusterTopic;
  placement: PartitionPlacement[];
}

export type ChangeEvent =
  | { kind: "node"; id: string; before?: ClusterNode; after?: ClusterNode }
  | { kind: "topic"; name: string; before?: ClusterTopic; after?: ClusterTopic }
  | { kind: "partition"; topic: string; partition: number; before?: PartitionPlacement; after?: PartitionPlacement }
  | { kind: "user"; name: string; beforeGeneration?: number; afterGeneration?: number }
  /** This node's own lease became live or ran out (by the local deadline). */
  | { kind: "lease"; live: boolean }
  /** A newer process registered with this node id: this one must stop serving for good. */
  | { kind: "superseded" };

export interface ControlPlaneStatus {
  nodeId: string;
  nodeNumber: number;
  leaseLive: boolean;
  leaseValidUntilMono: number;
  superseded: boolean;
  /** The LISTEN connection is up. */
  listening: boolean;
  lastHeartbeatOkMono: number | undefined;
  lastResyncOkMono: number | undefined;
  heartbeatFailures: number;
}

interface UserEntry extends StoredUser {
  version: number;
}

interface RefreshBatch {
  full: boolean;
  nodes: boolean;
  topics: Set<string>;
  users: Set<string>;
  /** Membership rows read by a heartbeat, applied when nothing fresher is being read. */
  nodeRows: NodeRow[] | undefined;
  waiters: { resolve: () => void; reject: (e: unknown) => void }[];
}

interface NodeRow {
  id: string;
  node_number: number;
  advertise_url: string;
  boot_id: string;
  state: string;
  live: boolean;
  lease_ms: number;
  version: string;
}

interface TopicRow {
  name: string;
  incarnation: string;
  partitions: number;
  visibility_timeout_ms: string;
  retention_ms: string;
  owner: string | null;
  children: ChildJson[];
  created_at: string;
  version: string;
}

interface PartitionRow {
  topic: string;
  partition: number;
  node_id: string;
  epoch: string;
  state: PartitionState;
  move_to: string | null;
  version: string;
}

interface UserRow {
  name: string;
  password: PasswordHash;
  grants: Grant[];
  created_at: string;
  version: string;
}

const NODE_COLUMNS = `id, node_number, advertise_url, boot_id, state, lease_expires_at > now() AS live,
  (extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_ms, version`;
const TOPIC_COLUMNS = "name, incarnation, partitions, visibility_timeout_ms, retention_ms, owner, children, created_at, version";
const PARTITION_COLUMNS = "topic, partition, node_id, epoch, state, move_to, version";
const USER_COLUMNS = "name, password, grants, created_at, version";

const HEARTBEAT_SQL = `
WITH hb AS (
  UPDATE narad.nodes SET lease_expires_at = now() + $3::float8 * interval '1 millisecond', state = 'up'
  WHERE id = $1 AND boot_id = $2
  RETURNING id
)
SELECT ${NODE_COLUMNS}, (SELECT count(*) FROM hb)::int AS renewed FROM narad.nodes`;

function toNode(r: NodeRow): ClusterNode {
  return {
    id: r.id,
    nodeNumber: r.node_number,
    advertiseUrl: r.advertise_url,
    bootId: r.boot_id,
    state: r.live ? "live" : "down",
    stopped: r.state === "stopped",
    leaseExpiresAtMs: r.lease_ms,
    version: Number(r.version),
  };
}

function toTopic(r: TopicRow): ClusterTopic {
  return {
    name: r.name,
    incarnation: Number(r.incarnation),
    partitions: r.partitions,
    visibility_timeout_ms: Number(r.visibility_timeout_ms),
    retention_ms: Number(r.retention_ms),
    owner: r.owner,
    children: r.children,
    created_at: Number(r.created_at),
    version: Number(r.version),
  };
}

function toPlacement(r: PartitionRow): PartitionPlacement {
  return {
    topic: r.topic,
    partition: r.partition,
    node: r.node_id,
    epoch: Number(r.epoch),
    state: r.state,
    moveTo: r.move_to,
    version: Number(r.version),
  };
}

function toUser(r: UserRow): UserEntry {
  return { password: r.password, grants: r.grants, created_at: Number(r.created_at), version: Number(r.version) };
}

function emptyBatch(): RefreshBatch {
  return { full: false, nodes: false, topics: new Set(), users: new Set(), nodeRows: undefined, waiters: [] };
}

/** The URL without its password, for logs and messages. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    return u.toString();
  } catch {
    return "(unparseable control-plane URL)";
  }
}

function userNotFound(name: string): NaradError {
  return new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
}

function topicNotFound(name: string): NaradError {
  return new NaradError("topic_not_found", `Topic ${JSON.stringify(name)} does not exist; create it first.`);
}

export class ControlPlane implements UserStoreApi {
  readonly nodeId: string;
  /** Assigned at the first registration of this node id, kept across restarts. */
  nodeNumber = 0;
  /** 32 random bytes created once per cluster; authenticates receipt handles on every node. */
  clusterSecret: Buffer = Buffer.alloc(0);

  private readonly o: Required<Omit<ControlPlaneOptions, "clock" | "logger">>;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly pool: pg.Pool;
  /** Heartbeats get their own connection so slow writes never delay them. */
  private readonly hbPool: pg.Pool;

  // The cached view.
  private readonly nodeMap = new Map<string, ClusterNode>();
  private readonly topicMap = new Map<string, ClusterTopic>();
  private readonly placementMap = new Map<string, PartitionPlacement[]>();
  private readonly userMap = new Map<string, UserEntry>();

  private readonly listeners = new Set<(e: ChangeEvent) => void>();
  private pending: RefreshBatch = emptyBatch();
  private refreshing = false;

  private leaseDeadlineMono = -Infinity;
  private leaseReported = false;
  private superseded = false;
  private closed = false;
  private lastHeartbeatOkMono: number | undefined;
  private lastResyncOkMono: number | undefined;
  private heartbeatFailures = 0;

  private hbTimer: NodeJS.Timeout | undefined;
  private leaseTimer: NodeJS.Timeout | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private listenTimer: NodeJS.Timeout | undefined;
  private listenClient: pg.Client | undefined;
  private listenAttempts = 0;
  private readonly lastWarnMono = new Map<string, number>();

  private constructor(opts: ControlPlaneOptions) {
    const o = { ...CONTROL_PLANE_DEFAULTS, ...stripUndefined(opts) } as Required<ControlPlaneOptions>;
    if (!(o.nodeLeaseMs > o.heartbeatIntervalMs + o.leaseSafetyMarginMs)) {
      throw new Error(`control plane: nodeLeaseMs (${o.nodeLeaseMs}) must exceed heartbeatIntervalMs + leaseSafetyMarginMs (${o.heartbeatIntervalMs + o.leaseSafetyMarginMs})`);
    }
    this.o = o;
    this.nodeId = o.nodeId;
    this.clock = opts.clock;
    this.log = opts.logger.child({ module: "control-plane" });
    const common: pg.PoolConfig = {
      connectionString: o.url,
      connectionTimeoutMillis: o.connectTimeoutMs,
      keepAlive: true,
      idle_in_transaction_session_timeout: o.statementTimeoutMs * 2,
      lock_timeout: o.statementTimeoutMs,
    };
    this.pool = new pg.Pool({
      ...common,
      max: o.poolMax,
      idleTimeoutMillis: 30_000,
      statement_timeout: o.statementTimeoutMs,
      query_timeout: o.statementTimeoutMs + 1000,
      application_name: `narad ${o.nodeId}`,
    });
    // The heartbeat is useless once it takes longer than the lease it extends.
    const hbTimeoutMs = Math.max(250, o.nodeLeaseMs - o.leaseSafetyMarginMs);
    this.hbPool = new pg.Pool({
      ...common,
      max: 1,
      connectionTimeoutMillis: Math.min(o.connectTimeoutMs, hbTimeoutMs),
      statement_timeout: hbTimeoutMs,
      query_timeout: hbTimeoutMs,
      application_name: `narad-heartbeat ${o.nodeId}`,
    });
    // Idle connections that die (a database restart) emit here; without a handler they would
    // crash the process. The next query opens a new connection.
    this.pool.on("error", (e) => this.warn("pool", { err: e.message }, "an idle control-plane connection failed"));
    this.hbPool.on("error", (e) => this.warn("pool", { err: e.message }, "an idle heartbeat connection failed"));
  }

  /**
   * Connects, applies migrations, registers this node (taking over its own row after a restart),
   * starts listening and heartbeating, and loads the view. Retries an unreachable database for
   * startupTimeoutMs, then throws ControlPlaneUnavailable.
   */
  static async connect(opts: ControlPlaneOptions): Promise<ControlPlane> {
    const cp = new ControlPlane(opts);
    try {
      await cp.startupRetry("migrate", () => migrate(cp.pool).then((v) => v.length > 0 && cp.log.info({ versions: v }, "control-plane schema migrated")));
      await cp.startupRetry("cluster secret", () => cp.loadSecret());
      await cp.startupRetry("register", () => cp.register());
      await cp.connectListener().catch((e: Error) => {
        cp.warn("listen", { err: e.message }, "could not LISTEN yet; retrying in the background");
        cp.scheduleListenReconnect();
      });
      await cp.startupRetry("load", () => cp.requestRefresh({ full: true }));
    } catch (e) {
      await cp.close().catch(() => undefined);
      throw e;
    }
    cp.scheduleHeartbeat(cp.clock.monoMs());
    cp.resyncTimer = setInterval(() => {
      cp.requestRefresh({ full: true }).catch((e: Error) => cp.warn("resync", { err: e.message }, "control-plane resync failed; serving the cached view"));
    }, cp.o.resyncIntervalMs);
    cp.resyncTimer.unref();
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
        await new Promise((r) => setTimeout(r, delay));
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

  /** Monotonic ms (the clock's monoMs) until which this node may act as owner; -Infinity before the first heartbeat. */
  leaseValidUntilMono(): number {
    return this.superseded || this.closed ? -Infinity : this.leaseDeadlineMono;
  }

  /** False from the moment the local lease deadline passes: stop acknowledging. */
  isLeaseLive(): boolean {
    return this.clock.monoMs() < this.leaseValidUntilMono();
  }

  private leaseRenewed(sentAtMono: number): void {
    const deadline = sentAtMono + this.o.nodeLeaseMs - this.o.leaseSafetyMarginMs;
    if (deadline > this.leaseDeadlineMono) this.leaseDeadlineMono = deadline;
    if (this.isLeaseLive() && !this.leaseReported) {
      this.leaseReported = true;
      this.emit([{ kind: "lease", live: true }]);
    }
    this.armLeaseTimer();
  }

  private armLeaseTimer(): void {
    clearTimeout(this.leaseTimer);
    if (this.closed) return;
    const wait = this.leaseValidUntilMono() - this.clock.monoMs();
    if (wait > 0 && Number.isFinite(wait)) {
      this.leaseTimer = setTimeout(() => this.checkLease(), wait + 1);
      this.leaseTimer.unref();
    } else {
      this.checkLease();
    }
  }

  private checkLease(): void {
    if (!this.isLeaseLive() && this.leaseReported) {
      this.leaseReported = false;
      this.log.warn({ leaseValidUntilMono: this.leaseValidUntilMono() }, "this node's control-plane lease ran out: it must stop acknowledging until a heartbeat succeeds");
      this.emit([{ kind: "lease", live: false }]);
    } else if (this.isLeaseLive()) {
      this.armLeaseTimer();
    }
  }

  // ---- membership ----------------------------------------------------------------------------

  private async loadSecret(): Promise<void> {
    const secret = await this.tx(async (c) => {
      await c.query("INSERT INTO narad.cluster (id, secret) VALUES (true, $1) ON CONFLICT (id) DO NOTHING", [randomBytes(32)]);
      const r = await c.query<{ secret: Buffer }>("SELECT secret FROM narad.cluster");
      return r.rows[0]!.secret;
    });
    this.clusterSecret = secret;
  }

  private async register(): Promise<void> {
    const sentAt = this.clock.monoMs();
    const o = this.o;
    const r = await this.tx(
      async (c) => {
        await c.query("SELECT pg_advisory_xact_lock($1)", [NODE_NUMBER_LOCK_KEY.toString()]);
        const prev = await c.query<{ boot_id: string; live: boolean }>("SELECT boot_id, lease_expires_at > now() AS live FROM narad.nodes WHERE id = $1 FOR UPDATE", [o.nodeId]);
        if (prev.rows.length > 0) {
          const u = await c.query<{ node_number: number }>(
            `UPDATE narad.nodes SET boot_id = $2, advertise_url = $3, booted_at = now(),
               lease_expires_at = now() + $4::float8 * interval '1 millisecond', state = 'up', version = nextval('narad.change_seq')
             WHERE id = $1 RETURNING node_number`,
            [o.nodeId, o.bootId, o.advertiseUrl, o.nodeLeaseMs],
          );
          return { nodeNumber: u.rows[0]!.node_number, previous: prev.rows[0]! };
        }
        const n = await c.query<{ n: number }>("SELECT coalesce(max(node_number), 0) + 1 AS n FROM narad.nodes");
        const nodeNumber = n.rows[0]!.n;
        if (nodeNumber > CONTROL_PLANE_LIMITS.nodeNumberMax) throw new Error(`control plane: no node number left (at most ${CONTROL_PLANE_LIMITS.nodeNumberMax} nodes)`);
        await c.query(
          `INSERT INTO narad.nodes (id, node_number, advertise_url, boot_id, lease_expires_at, state, version)
           VALUES ($1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond', 'up', nextval('narad.change_seq'))`,
          [o.nodeId, nodeNumber, o.advertiseUrl, o.bootId, o.nodeLeaseMs],
        );
        return { nodeNumber, previous: undefined };
      },
      ["nodes"],
    );
    this.nodeNumber = r.nodeNumber;
    if (r.previous !== undefined && r.previous.boot_id !== o.bootId && r.previous.live) {
      // The previous process of this node id still had a live lease: it was killed (or is paused).
      // Its heartbeats now fail (boot id mismatch), so a paused one fences itself at its deadline.
      this.log.warn({ previousBoot: r.previous.boot_id }, "took over this node's registration from a previous boot whose lease was still live");
    }
    this.leaseRenewed(sentAt);
    this.log.info({ nodeNumber: r.nodeNumber, advertise: o.advertiseUrl }, "registered with the control plane");
  }

  private scheduleHeartbeat(startedAtMono: number): void {
    if (this.closed || this.superseded) return;
    const delay = Math.max(0, startedAtMono + this.o.heartbeatIntervalMs - this.clock.monoMs());
    this.hbTimer = setTimeout(() => void this.heartbeat(), delay);
    this.hbTimer.unref();
  }

  private async heartbeat(): Promise<void> {
    if (this.closed || this.superseded) return;
    // Measured before the connection is even taken: the earliest moment the database's now()
    // for this heartbeat could be, so sentAt + lease is never later than the database's expiry.
    const sentAt = this.clock.monoMs();
    try {
      const r = await this.hbPool.query<NodeRow & { renewed: number }>(HEARTBEAT_SQL, [this.nodeId, this.o.bootId, this.o.nodeLeaseMs]);
      if (this.closed) return;
      const renewed = r.rows.length > 0 && r.rows[0]!.renewed === 1;
      if (!renewed) {
        this.becomeSuperseded();
        return;
      }
      this.heartbeatFailures = 0;
      this.lastHeartbeatOkMono = this.clock.monoMs();
      this.leaseRenewed(sentAt);
      // Our own row was read before the update in the same statement: it is live now.
      const rows = r.rows.map((x) => (x.id === this.nodeId ? { ...x, live: true } : x));
      this.requestRefresh({ nodeRows: rows }).catch(() => undefined);
    } catch (e) {
      this.heartbeatFailures++;
      this.warn("heartbeat", { err: (e as Error).message, failures: this.heartbeatFailures, leaseLeftMs: Math.round(this.leaseValidUntilMono() - this.clock.monoMs()) }, "heartbeat failed");
      this.checkLease();
    } finally {
      this.scheduleHeartbeat(sentAt);
    }
  }

  private becomeSuperseded(): void {
    if (this.superseded) return;
    this.superseded = true;
    clearTimeout(this.hbTimer);
    this.log.error({ node: this.nodeId }, "another process registered this node id with a newer boot; this process stops serving");
    this.leaseReported = false;
    this.emit([{ kind: "lease", live: false }, { kind: "superseded" }]);
  }

  /** Every node as of the last read (each heartbeat reads them all). */
  nodes(): ClusterNode[] {
    return [...this.nodeMap.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  node(id: string): ClusterNode | undefined {
    return this.nodeMap.get(id);
  }

  // ---- topics and placement ------------------------------------------------------------------

  topics(): ClusterTopic[] {
    return [...this.topicMap.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  topic(name: string): ClusterTopic | undefined {
    return this.topicMap.get(name);
  }

  /** Every partition of the topic with its owner and epoch, in partition order. */
  placement(topic: string): PartitionPlacement[] | undefined {
    return this.placementMap.get(topic);
  }

  partitionPlacement(topic: string, partition: number): PartitionPlacement | undefined {
    return this.placementMap.get(topic)?.[partition];
  }

  /** Every partition a node owns, by topic and partition. */
  ownedBy(nodeId: string): PartitionPlacement[] {
    const out: PartitionPlacement[] = [];
    for (const ps of this.placementMap.values()) for (const p of ps) if (p.node === nodeId) out.push(p);
    return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  }

  /**
   * The check before every owner write (docs/architecture.md, "epoch check before any owner
   * write"): this node's lease is live, and the cached view says this node owns the partition at
   * exactly this epoch. From memory; no database round trip.
   */
  ownsPartition(topic: string, partition: number, epoch: number): boolean {
    if (!this.isLeaseLive()) return false;
    const p = this.placementMap.get(topic)?.[partition];
    return p !== undefined && p.node === this.nodeId && p.epoch === epoch;
  }

  /**
   * Creates the topic and places its partitions on the least-loaded live nodes, epoch 1.
   * NaradError topic_exists if the name is taken (a unique constraint decides, not a prior read);
   * NaradError unavailable if no node is live.
   */
  async createTopic(t: NewTopic): Promise<TopicWithPlacement> {
    if (!Number.isSafeInteger(t.partitions) || t.partitions < 1) throw new NaradError("invalid_argument", "partitions must be a positive integer.");
    const incarnation = t.incarnation ?? randomInt(1, 0xffffffff);
    const createdAt = t.created_at ?? this.clock.nowMs();
    if (t.nodes !== undefined && t.nodes.length !== t.partitions) throw new NaradError("invalid_argument", "nodes must name one node per partition.");
    await this.write([`topic:${t.name}`], async (c) => {
      const owners = t.nodes ?? (await this.placeNew(c, t.partitions));
      try {
        await c.query(
          `INSERT INTO narad.topics (name, incarnation, partitions, visibility_timeout_ms, retention_ms, owner, children, created_at, version)
           VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, nextval('narad.change_seq'))`,
          [t.name, incarnation, t.partitions, t.visibility_timeout_ms, t.retention_ms, t.owner, JSON.stringify(t.children ?? []), createdAt],
        );
      } catch (e) {
        if (isUniqueViolation(e)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(t.name)} exists already.`);
        throw e;
      }
      await this.insertPartitions(c, t.name, 0, owners);
    });
    return this.topicWithPlacement(t.name);
  }

  /** Changes settings and grows partitions (new ones placed like a create's). */
  async updateTopic(name: string, change: TopicChange): Promise<TopicWithPlacement> {
    await this.write([`topic:${name}`], async (c) => {
      const r = await c.query<{ partitions: number }>("SELECT partitions FROM narad.topics WHERE name = $1 FOR UPDATE", [name]);
      if (r.rows.length === 0) throw topicNotFound(name);
      const current = r.rows[0]!.partitions;
      const next = change.partitions ?? current;
      if (!Number.isSafeInteger(next)) throw new NaradError("invalid_argument", "partitions must be a positive integer.");
      if (next < current) {
        throw new NaradError("partitions_decrease", `Topic ${name} has ${current} partitions; partitions can only grow.`);
      }
      if (change.nodes !== undefined && change.nodes.length !== next - current) throw new NaradError("invalid_argument", "nodes must name one node per new partition.");
      if (next > current) await this.insertPartitions(c, name, current, change.nodes ?? (await this.placeNew(c, next - current)));
      await c.query(
        `UPDATE narad.topics SET partitions = $2,
           visibility_timeout_ms = coalesce($3, visibility_timeout_ms),
           retention_ms = coalesce($4, retention_ms),
           children = coalesce($5::jsonb, children),
           version = nextval('narad.change_seq')
         WHERE name = $1`,
        [name, next, change.visibility_timeout_ms ?? null, change.retention_ms ?? null, change.children === undefined ? null : JSON.stringify(change.children)],
      );
    });
    return this.topicWithPlacement(name);
  }

  /** Removes the topic and its placement. NaradError topic_not_found. */
  async deleteTopic(name: string): Promise<void> {
    await this.write([`topic:${name}`], async (c) => {
      const r = await c.query("DELETE FROM narad.topics WHERE name = $1", [name]);
      if (r.rowCount === 0) throw topicNotFound(name);
    });
  }

  private topicWithPlacement(name: string): TopicWithPlacement {
    const topic = this.topicMap.get(name);
    const placement = this.placementMap.get(name);
    // The write's own re-read failed (the database went away right after COMMIT): the change
    // is made; the view catches up at the next resync.
    if (topic === undefined || placement === undefined) throw new ControlPlaneUnavailable(true);
    return { topic, placement };
  }

  /** Under the placement lock: live nodes and their load, then the greedy choice. */
  private async placeNew(c: pg.PoolClient, count: number): Promise<string[]> {
    await c.query("SELECT pg_advisory_xact_lock($1)", [PLACEMENT_LOCK_KEY.toString()]);
    const r = await c.query<{ id: string; owned: number }>(
      `SELECT n.id, count(p.partition)::int AS owned
         FROM narad.nodes n LEFT JOIN narad.partitions p ON p.node_id = n.id
        WHERE n.lease_expires_at > clock_timestamp()
        GROUP BY n.id`,
    );
    if (r.rows.length === 0) throw new NaradError("unavailable", "No node of the cluster is live to own new partitions; start a node and retry.");
    return placePartitions(
      r.rows.map((x): NodeLoad => ({ nodeId: x.id, owned: x.owned })),
      count,
    );
  }

  private async insertPartitions(c: pg.PoolClient, topic: string, first: number, owners: string[]): Promise<void> {
    if (owners.length === 0) return;
    await c.query(
      `INSERT INTO narad.partitions (topic, partition, node_id, epoch, state, version)
       SELECT $1, $2 + i - 1, node, 1, 'serving', nextval('narad.change_seq')
         FROM unnest($3::text[]) WITH ORDINALITY AS u(node, i)`,
      [topic, first, owners],
    );
  }

  // ---- moves ---------------------------------------------------------------------------------

  /**
   * Starts moving a partition to another node: marks it 'moving' and returns its owner and epoch.
   * The owner keeps serving while the log is copied. Both nodes must be live (a down owner's log
   * cannot be copied, and an empty copy is never promoted). Repeating a begin to the same node
   * returns the move in progress.
   */
  async beginMove(topic: string, partition: number, toNode: string): Promise<{ owner: string; epoch: number; toNode: string }> {
    return this.write([`topic:${topic}`], async (c) => {
      const p = await this.lockPartition(c, topic, partition);
      if (p.state === "moving") {
        if (p.move_to === toNode) return { owner: p.node_id, epoch: Number(p.epoch), toNode };
        throw new MoveRefused("move_in_progress", `${topic}/${partition} is being moved to ${p.move_to} already; complete or abort that move first.`);
      }
      if (p.node_id === toNode) throw new MoveRefused("same_node", `${topic}/${partition} is on ${toNode} already.`);
      const n = await c.query<{ id: string; live: boolean }>("SELECT id, lease_expires_at > clock_timestamp() AS live FROM narad.nodes WHERE id = ANY($1)", [[p.node_id, toNode]]);
      const target = n.rows.find((x) => x.id === toNode);
      if (target === undefined) throw new MoveRefused("node_unknown", `No node ${JSON.stringify(toNode)} is registered.`);
      if (!target.live) throw new MoveRefused("node_down", `Node ${toNode} is down; start it before moving partitions to it.`);
      if (!n.rows.find((x) => x.id === p.node_id)?.live) {
        throw new MoveRefused("node_down", `Node ${p.node_id}, the owner of ${topic}/${partition}, is down: its log is only there; start it again, then move.`);
      }
      await c.query("UPDATE narad.partitions SET state = 'moving', move_to = $3, version = nextval('narad.change_seq') WHERE topic = $1 AND partition = $2", [topic, partition, toNode]);
      return { owner: p.node_id, epoch: Number(p.epoch), toNode };
    });
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
    await this.write([`topic:${topic}`], async (c) => {
      const r = await c.query(
        `UPDATE narad.partitions SET node_id = move_to, epoch = epoch + 1, state = 'serving', move_to = NULL, version = nextval('narad.change_seq')
          WHERE topic = $1 AND partition = $2 AND epoch = $3 AND state = 'moving' AND move_to = $4
            AND EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $4 AND n.lease_expires_at > clock_timestamp())`,
        [topic, partition, expectedEpoch, toNode],
      );
      if (r.rowCount === 1) return;
      const p = await this.lockPartition(c, topic, partition);
      if (Number(p.epoch) !== expectedEpoch) throw new MoveRefused("stale_epoch", `${topic}/${partition} is at epoch ${p.epoch}, not ${expectedEpoch}: another change won.`);
      if (p.state === "moving" && p.move_to === toNode) throw new MoveRefused("node_down", `Node ${toNode} is down; the move cannot complete (abort it, or retry once the node is back).`);
      throw new MoveRefused("not_moving", `${topic}/${partition} is not being moved to ${toNode}.`);
    });
    const p = this.partitionPlacement(topic, partition);
    if (p === undefined) throw new ControlPlaneUnavailable(true);
    return p;
  }

  /** Ends a move without switching owner, if the partition is still moving at expectedEpoch. */
  async abortMove(topic: string, partition: number, expectedEpoch: number): Promise<void> {
    await this.write([`topic:${topic}`], async (c) => {
      const r = await c.query(
        `UPDATE narad.partitions SET state = 'serving', move_to = NULL, version = nextval('narad.change_seq')
          WHERE topic = $1 AND partition = $2 AND epoch = $3 AND state = 'moving'`,
        [topic, partition, expectedEpoch],
      );
      if (r.rowCount === 1) return;
      const p = await this.lockPartition(c, topic, partition);
      if (Number(p.epoch) !== expectedEpoch) throw new MoveRefused("stale_epoch", `${topic}/${partition} is at epoch ${p.epoch}, not ${expectedEpoch}.`);
      throw new MoveRefused("not_moving", `${topic}/${partition} is not being moved.`);
    });
  }

  private async lockPartition(c: pg.PoolClient, topic: string, partition: number): Promise<PartitionRow> {
    const r = await c.query<PartitionRow>(`SELECT ${PARTITION_COLUMNS} FROM narad.partitions WHERE topic = $1 AND partition = $2 FOR UPDATE`, [topic, partition]);
    if (r.rows.length > 0) return r.rows[0]!;
    const t = await c.query("SELECT 1 FROM narad.topics WHERE name = $1", [topic]);
    if (t.rows.length === 0) throw topicNotFound(topic);
    throw new NaradError("partition_not_found", `Topic ${topic} has no partition ${partition}.`);
  }

  // ---- users and grants (UserStoreApi) -------------------------------------------------------

  get userCount(): number {
    return this.userMap.size;
  }

  generation(name: string): number | undefined {
    return this.userMap.get(name)?.version;
  }

  get(name: string): StoredUser | undefined {
    const u = this.userMap.get(name);
    return u === undefined ? undefined : { password: u.password, created_at: u.created_at, grants: u.grants };
  }

  list(): UserSummary[] {
    return [...this.userMap.entries()].map(([name, u]) => ({ name, created_at: u.created_at })).sort((a, b) => a.name.localeCompare(b.name));
  }

  grants(name: string): Grant[] {
    const u = this.userMap.get(name);
    if (u === undefined) throw userNotFound(name);
    return u.grants;
  }

  async addUser(name: unknown, password: unknown, nowMs: number, grants: Grant[] = []): Promise<UserSummary> {
    if (typeof name !== "string" || !USER_NAME_RE.test(name)) throw new NaradError("invalid_argument", `User names match ${USER_NAME_RE.source}.`);
    const hash = await hashPassword(checkPassword(password));
    await this.write([`user:${name}`], async (c) => {
      try {
        await c.query(`INSERT INTO narad.users (name, password, grants, created_at, version) VALUES ($1, $2::jsonb, $3::jsonb, $4, nextval('narad.change_seq'))`, [
          name,
          JSON.stringify(hash),
          JSON.stringify(grants),
          nowMs,
        ]);
      } catch (e) {
        if (isUniqueViolation(e)) throw new NaradError("user_exists", `User ${JSON.stringify(name)} exists already.`);
        throw e;
      }
    });
    return { name, created_at: nowMs };
  }

  async setPassword(name: string, password: unknown): Promise<void> {
    const hash = await hashPassword(checkPassword(password));
    await this.write([`user:${name}`], async (c) => {
      const r = await c.query("UPDATE narad.users SET password = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(hash)]);
      if (r.rowCount === 0) throw userNotFound(name);
    });
  }

  async deleteUser(name: string): Promise<void> {
    await this.write([`user:${name}`], async (c) => {
      const r = await c.query("DELETE FROM narad.users WHERE name = $1", [name]);
      if (r.rowCount === 0) throw userNotFound(name);
    });
  }

  async addGrant(name: string, g: Grant): Promise<Grant> {
    const grant: Grant = { action: g.action, pattern: g.pattern };
    await this.write([`user:${name}`], async (c) => {
      const grants = await this.lockGrants(c, name);
      if (!grants.some((x) => x.action === grant.action && x.pattern === grant.pattern)) grants.push(grant);
      await c.query("UPDATE narad.users SET grants = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(grants)]);
    });
    return grant;
  }

  async revokeGrant(name: string, g: Grant): Promise<void> {
    await this.write([`user:${name}`], async (c) => {
      const grants = await this.lockGrants(c, name);
      const i = grants.findIndex((x) => x.action === g.action && x.pattern === g.pattern);
      if (i < 0) throw new NaradError("grant_not_found", `User ${name} has no grant ${g.action}${g.pattern ? ` on ${g.pattern}` : ""}.`);
      grants.splice(i, 1);
      await c.query("UPDATE narad.users SET grants = $2::jsonb, version = nextval('narad.change_seq') WHERE name = $1", [name, JSON.stringify(grants)]);
    });
  }

  private async lockGrants(c: pg.PoolClient, name: string): Promise<Grant[]> {
    const r = await c.query<{ grants: Grant[] }>("SELECT grants FROM narad.users WHERE name = $1 FOR UPDATE", [name]);
    if (r.rows.length === 0) throw userNotFound(name);
    return r.rows[0]!.grants;
  }

  // ---- writes --------------------------------------------------------------------------------

  /**
   * Runs fn in a transaction that also NOTIFYs what it changed, then re-reads those entities into
   * the view before returning (read-your-writes on this node). A failed re-read is logged, not
   * thrown: the change is made, and the next resync brings the view up to date.
   */
  private async write<T>(targets: string[], fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    if (this.closed) throw new ControlPlaneUnavailable(false, new Error("the control plane client is closed"));
    if (this.superseded) throw new NodeSuperseded(this.nodeId);
    const r = await this.tx(fn, targets);
    await this.requestRefresh(parseTargets(targets)).catch((e: Error) => this.warn("refresh", { err: e.message }, "re-reading a change failed; the next resync will"));
    return r;
  }

  /**
   * One transaction on a pooled connection, retried on serialization failures and deadlocks.
   * Connection-level failures become ControlPlaneUnavailable, definite unless COMMIT was sent.
   */
  private async tx<T>(fn: (c: pg.PoolClient) => Promise<T>, notify: string[] = [], mode = "BEGIN"): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      let c: pg.PoolClient;
      try {
        c = await this.pool.connect();
      } catch (e) {
        throw isUnavailableError(e) ? new ControlPlaneUnavailable(false, e) : e;
      }
      // A checked-out client that loses its connection emits 'error'; the pool listens only to
      // idle ones, and an unheard 'error' would crash the process. The failing query rejects too,
      // which is where the error is handled.
      let lostConnection: Error | undefined;
      const onError = (e: Error): void => {
        lostConnection = e;
      };
      c.on("error", onError);
      const release = (err?: Error): void => {
        c.removeListener("error", onError);
        c.release(err ?? lostConnection);
      };
      let commitSent = false;
      try {
        await c.query(mode);
        const r = await fn(c);
        for (const n of notify) await c.query("SELECT pg_notify($1, $2)", [NOTIFY_CHANNEL, n]);
        commitSent = true;
        await c.query("COMMIT");
        release();
        return r;
      } catch (e) {
        if (isUnavailableError(e) || lostConnection !== undefined) {
          release(e as Error); // destroys the connection
          throw new ControlPlaneUnavailable(commitSent, e);
        }
        try {
          await c.query("ROLLBACK");
          release();
        } catch (e2) {
          release(e2 as Error);
        }
        if (isRetryableConflict(e) && attempt < CONTROL_PLANE_LIMITS.txAttemptsMax) continue;
        throw e;
      }
    }
  }

  // ---- the view: refresh queue ---------------------------------------------------------------

  /** Re-reads the view from the database now (all of it). */
  async resync(): Promise<void> {
    await this.requestRefresh({ full: true });
  }

  /**
   * Re-reads what the targets name, now: `topic:NAME`, `user:NAME`, `nodes` (the notification
   * payloads). For a node that must see another node's write before it answers (read-your-writes
   * across nodes, src/cluster/service.ts).
   */
  async refresh(targets: string[]): Promise<void> {
    await this.requestRefresh(parseTargets(targets));
  }

  private requestRefresh(req: Partial<Omit<RefreshBatch, "waiters">>): Promise<void> {
    return new Promise((resolve, reject) => {
      const b = this.pending;
      if (req.full) b.full = true;
      if (req.nodes) b.nodes = true;
      for (const t of req.topics ?? []) b.topics.add(t);
      for (const u of req.users ?? []) b.users.add(u);
      if (req.nodeRows !== undefined) b.nodeRows = req.nodeRows;
      if (b.topics.size + b.users.size > CONTROL_PLANE_LIMITS.refreshTargetsMax) {
        b.full = true;
        b.topics.clear();
        b.users.clear();
      }
      b.waiters.push({ resolve, reject });
      if (!this.refreshing) void this.runRefreshes();
    });
  }

  private async runRefreshes(): Promise<void> {
    this.refreshing = true;
    try {
      while (this.pending.waiters.length > 0) {
        const batch = this.pending;
        this.pending = emptyBatch();
        try {
          if (this.closed) throw new ControlPlaneUnavailable(false, new Error("the control plane client is closed"));
          this.emit(await this.readAndApply(batch));
          for (const w of batch.waiters) w.resolve();
        } catch (e) {
          for (const w of batch.waiters) w.reject(e);
        }
      }
    } finally {
      this.refreshing = false;
    }
  }

  private async readAndApply(b: RefreshBatch): Promise<ChangeEvent[]> {
    const events: ChangeEvent[] = [];
    const readNodes = b.full || b.nodes;
    const topics = b.full ? undefined : [...b.topics];
    const users = b.full ? undefined : [...b.users];
    if (!readNodes && topics?.length === 0 && users?.length === 0) {
      if (b.nodeRows !== undefined) this.applyNodes(b.nodeRows, false, events);
      return events;
    }
    const snap = await this.tx(
      async (c) => {
        const nodes = readNodes ? (await c.query<NodeRow>(`SELECT ${NODE_COLUMNS} FROM narad.nodes`)).rows : undefined;
        const where = topics === undefined ? "" : " WHERE name = ANY($1)";
        const tArgs = topics === undefined ? [] : [topics];
        const trows = topics?.length === 0 ? [] : (await c.query<TopicRow>(`SELECT ${TOPIC_COLUMNS} FROM narad.topics${where}`, tArgs)).rows;
        const prows =
          topics?.length === 0
            ? []
            : (await c.query<PartitionRow>(`SELECT ${PARTITION_COLUMNS} FROM narad.partitions${topics === undefined ? "" : " WHERE topic = ANY($1)"} ORDER BY topic, partition`, tArgs)).rows;
        const urows = users?.length === 0 ? [] : (await c.query<UserRow>(`SELECT ${USER_COLUMNS} FROM narad.users${users === undefined ? "" : " WHERE name = ANY($1)"}`, users === undefined ? [] : [users])).rows;
        return { nodes, trows, prows, urows };
      },
      [],
      "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
    );
    if (snap.nodes !== undefined) this.applyNodes(snap.nodes, true, events);
    else if (b.nodeRows !== undefined) this.applyNodes(b.nodeRows, false, events);

    const partsByTopic = new Map<string, PartitionPlacement[]>();
    for (const r of snap.prows) {
      let a = partsByTopic.get(r.topic);
      if (a === undefined) partsByTopic.set(r.topic, (a = []));
      a.push(toPlacement(r));
    }
    const topicRows = new Map(snap.trows.map((r) => [r.name, toTopic(r)]));
    const topicNames = topics ?? [...new Set([...this.topicMap.keys(), ...topicRows.keys()])];
    for (const name of topicNames) this.applyTopic(name, topicRows.get(name), partsByTopic.get(name) ?? [], events);

    const userRows = new Map(snap.urows.map((r) => [r.name, toUser(r)]));
    const userNames = users ?? [...new Set([...this.userMap.keys(), ...userRows.keys()])];
    for (const name of userNames) this.applyUser(name, userRows.get(name), events);
    if (b.full) this.lastResyncOkMono = this.clock.monoMs();
    return events;
  }

  /** authoritative: the rows are every node (a full read); else heartbeat rows, applied only if not older. */
  private applyNodes(rows: NodeRow[], authoritative: boolean, events: ChangeEvent[]): void {
    const seen = new Set<string>();
    for (const r of rows) {
      const after = toNode(r);
      seen.add(after.id);
      const before = this.nodeMap.get(after.id);
      if (!authoritative && before !== undefined && before.version > after.version) continue;
      this.nodeMap.set(after.id, after);
      if (before === undefined || before.version !== after.version || before.state !== after.state || before.stopped !== after.stopped) {
        events.push({ kind: "node", id: after.id, before, after });
      }
    }
    if (authoritative) {
      for (const [id, before] of this.nodeMap) {
        if (!seen.has(id)) {
          this.nodeMap.delete(id);
          events.push({ kind: "node", id, before });
        }
      }
    }
  }

  private applyTopic(name: string, after: ClusterTopic | undefined, parts: PartitionPlacement[], events: ChangeEvent[]): void {
    const before = this.topicMap.get(name);
    if (after === undefined) this.topicMap.delete(name);
    else this.topicMap.set(name, after);
    if (before?.version !== after?.version) events.push({ kind: "topic", name, before, after });
    const old = this.placementMap.get(name) ?? [];
    if (after === undefined) this.placementMap.delete(name);
    else this.placementMap.set(name, parts);
    for (let i = 0; i < Math.max(old.length, parts.length); i++) {
      const pb = old[i];
      const pa = after === undefined ? undefined : parts[i];
      if (pb?.version !== pa?.version) events.push({ kind: "partition", topic: name, partition: i, before: pb, after: pa });
    }
  }

  private applyUser(name: string, after: UserEntry | undefined, events: ChangeEvent[]): void {
    const before = this.userMap.get(name);
    if (after === undefined) this.userMap.delete(name);
    else this.userMap.set(name, after);
    if (before?.version !== after?.version) events.push({ kind: "user", name, beforeGeneration: before?.version, afterGeneration: after?.version });
  }

  // ---- LISTEN --------------------------------------------------------------------------------

  private async connectListener(): Promise<void> {
    const c = new pg.Client({
      connectionString: this.o.url,
      connectionTimeoutMillis: this.o.connectTimeoutMs,
      keepAlive: true,
      statement_timeout: this.o.statementTimeoutMs,
      query_timeout: this.o.statementTimeoutMs + 1000,
      application_name: `narad-listen ${this.nodeId}`,
    });
    const lost = (e?: Error): void => this.listenerLost(c, e);
    c.on("error", lost);
    c.on("end", () => lost());
    c.on("notification", (n) => this.onNotification(n.payload));
    try {
      await c.connect();
      await c.query(`LISTEN ${NOTIFY_CHANNEL}`);
    } catch (e) {
      c.removeAllListeners("end");
      c.on("error", () => undefined);
      await c.end().catch(() => undefined);
      throw e;
    }
    if (this.closed) {
      await c.end().catch(() => undefined);
      return;
    }
    const again = this.listenAttempts > 0;
    this.listenClient = c;
    this.listenAttempts = 0;
    if (again) {
      this.log.info("LISTEN connection back; resyncing what it missed");
      this.requestRefresh({ full: true }).catch((e: Error) => this.warn("resync", { err: e.message }, "resync after LISTEN reconnect failed"));
    }
  }

  private listenerLost(c: pg.Client, e?: Error): void {
    if (this.listenClient !== c) return;
    this.listenClient = undefined;
    c.removeAllListeners("end");
    c.on("error", () => undefined);
    c.end().catch(() => undefined);
    if (this.closed) return;
    this.warn("listen", { err: e?.message }, "LISTEN connection lost; reconnecting (the periodic resync covers the gap)");
    this.scheduleListenReconnect();
  }

  private scheduleListenReconnect(): void {
    if (this.closed || this.listenTimer !== undefined) return;
    const base = Math.min(this.o.listenReconnectMaxMs, this.o.listenReconnectMinMs * 2 ** Math.min(this.listenAttempts, 20));
    const delay = Math.round(base * (0.8 + 0.4 * Math.random()));
    this.listenAttempts++;
    this.listenTimer = setTimeout(() => {
      this.listenTimer = undefined;
      this.connectListener().catch((e: Error) => {
        this.warn("listen", { err: e.message }, "LISTEN reconnect failed");
        this.scheduleListenReconnect();
      });
    }, delay);
    this.listenTimer.unref();
  }

  private onNotification(payload: string | undefined): void {
    if (this.closed) return;
    const req = parseTargets([payload ?? ""]);
    this.requestRefresh(req).catch((e: Error) => this.warn("refresh", { err: e.message }, "refresh after a notification failed; the next resync will"));
  }

  // ---- status and shutdown -------------------------------------------------------------------

  status(): ControlPlaneStatus {
    return {
      nodeId: this.nodeId,
      nodeNumber: this.nodeNumber,
      leaseLive: this.isLeaseLive(),
      leaseValidUntilMono: this.leaseValidUntilMono(),
      superseded: this.superseded,
      listening: this.listenClient !== undefined,
      lastHeartbeatOkMono: this.lastHeartbeatOkMono,
      lastResyncOkMono: this.lastResyncOkMono,
      heartbeatFailures: this.heartbeatFailures,
    };
  }

  /**
   * Stops heartbeats and listening, releases this node's lease (so others see it down at once:
   * a graceful stop), and closes every connection. Call after the broker stopped serving.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    const wasRegistered = this.nodeNumber > 0 && !this.superseded;
    this.closed = true;
    this.leaseReported = false;
    for (const t of [this.hbTimer, this.leaseTimer, this.listenTimer]) clearTimeout(t);
    clearInterval(this.resyncTimer);
    const lc = this.listenClient;
    this.listenClient = undefined;
    if (lc !== undefined) {
      lc.removeAllListeners("end");
      lc.on("error", () => undefined);
      await lc.end().catch(() => undefined);
    }
    if (wasRegistered) {
      await this.hbPool
        .query(
          `WITH u AS (UPDATE narad.nodes SET lease_expires_at = now(), state = 'stopped', version = nextval('narad.change_seq') WHERE id = $1 AND boot_id = $2 RETURNING id)
           SELECT pg_notify($3, 'nodes') FROM u`,
          [this.nodeId, this.o.bootId, NOTIFY_CHANNEL],
        )
        .catch((e: Error) => this.log.warn({ err: e.message }, "could not release the lease at stop; others see this node down when it expires"));
    }
    await Promise.all([this.pool.end().catch(() => undefined), this.hbPool.end().catch(() => undefined)]);
  }

  private warn(kind: string, fields: Record<string, unknown>, msg: string): void {
    const now = this.clock.monoMs();
    const last = this.lastWarnMono.get(kind);
    if (last !== undefined && now - last < CONTROL_PLANE_LIMITS.warnIntervalMs) return;
    this.lastWarnMono.set(kind, now);
    this.log.warn(fields, msg);
  }
}

/** Notification payloads: `topic:NAME`, `user:NAME`, `nodes`; anything else asks for a full resync. */
function parseTargets(payloads: string[]): Partial<Omit<RefreshBatch, "waiters">> {
  const req = { full: false, nodes: false, topics: new Set<string>(), users: new Set<string>() };
  for (const p of payloads) {
    if (p.startsWith("topic:")) req.topics.add(p.slice(6));
    else if (p.startsWith("user:")) req.users.add(p.slice(5));
    else if (p === "nodes") req.nodes = true;
    else req.full = true;
  }
  return req;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
