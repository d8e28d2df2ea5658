// Replicated partitions on this node (docs/replication.md): the leader's wrapper of each owned
// replicated partition (./leader.ts), the follower replicas this node keeps for partitions other
// nodes lead (./follower.ts), the internal routes between them, and failover.
//
// Failover. A follower elects itself when its partition's leader is down by the control plane's
// view (its lease lapsed by the database clock: it stopped acknowledging before that, by the
// lease deadline rule of docs/cluster-control-plane.md) and it is the right replica to promote:
// - quorum: it asks every other live follower for its log's end and last epoch; with answers
//   from a majority of the replica set (itself counted, the old leader not asked) it must be the
//   most complete of them (history.ts, compareRank; ties go to the earlier replica in the set).
//   Every record the old leader acknowledged is on a majority, which meets the answering one,
//   and the old leader acknowledged nothing after its lease lapsed, which was before the asking.
// - leader: it must be in in_sync, which names only replicas holding every acknowledged record
//   (./leader.ts), and the first live one of them in the replica set. Otherwise the partition
//   stays unavailable until the old leader returns with its disk.
// Then one compare-and-set in PostgreSQL (control-plane/replicas-sql.ts) raises the epoch; the
// placement change opens the partition here as its owner at the new epoch (src/cluster/
// ownership.ts), which closes the follower replica first. A returning old leader finds itself a
// follower in the placement, and its first join cuts what it holds beyond the new leader's log.
//
// Elections are checked on every change of the view and every ELECTION_CHECK_MS while some
// replicated partition has a down leader.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Logger } from "pino";
import { Counter, Gauge, type Registry } from "prom-client";
import type { Broker, ReplicatedParts, ReplicateRequest } from "../../broker/broker.js";
import type { Clock } from "../../platform/clock.js";
import { systemScheduler, type Scheduler, type Timer } from "../../platform/scheduler.js";
import { realFs } from "../../storage/index.js";
import type { ControlPlane } from "../control-plane.js";
import type { PartitionPlacement } from "../control-plane/model.js";
import type { InternalHttp, InternalRoute } from "../internal-routes.js";
import type { Peers } from "../peers.js";
import { MoveRefused } from "../errors.js";
import type { Ownership } from "../ownership.js";
import { cpCall } from "../service.js";
import { NaradError } from "../../protocol/errors.js";
import { INTERNAL_PREFIX } from "../wire.js";
import { decodeRecords } from "./codec.js";
import { NO_REPLICATION_FAULTS, syncOnTimer, type ReplicationFaults } from "./faults.js";
import { FollowerReplica, ReplicaRefusal, type ReplicaStatus } from "./follower.js";
import { compareRank, type EpochEntry } from "./history.js";
import { REPLICATION_LIMITS, ReplicatedLog, type CursorUpdate, type LeaderContext } from "./leader.js";

export const ELECTION_CHECK_MS = 250;
/** How long an election waits for a follower's state. */
const STATE_TIMEOUT_MS = 1000;
const FOLLOWER_HOUSEKEEPING_MS = 30_000;

export interface ReplicationOptions {
  cp: ControlPlane;
  broker: Broker;
  peers: Peers;
  nodeId: string;
  clock: Clock;
  scheduler?: Scheduler;
  logger: Logger;
  /** replication.ack_timeout_ms */
  ackTimeoutMs: number;
  /** storage.ack_flush_interval_ms: how often acks ship to the followers. */
  ackShipIntervalMs: number;
  /** Seeded bugs for calibration (./faults.ts); default none. */
  faults?: ReplicationFaults;
}

interface FollowerEntry {
  incarnation: number;
  replica: Promise<FollowerReplica>;
}

export class Replication {
  private readonly followers = new Map<string, FollowerEntry>();
  private readonly leaders = new Map<string, ReplicatedLog>();
  private readonly log: Logger;
  private readonly scheduler: Scheduler;
  private electing = false;
  private electionTimer: Timer | undefined;
  private housekeepingTimer: Timer | undefined;
  private unsubscribe: (() => void) | undefined;
  private closed = false;
  readonly counts = { failovers: 0 };
  private readonly faults: ReplicationFaults;
  /** Set before start(): a leader's freeze when its own replica moves (src/cluster/ownership.ts). */
  ownership: Pick<Ownership, "freeze" | "schedule"> | undefined;

  constructor(private readonly o: ReplicationOptions) {
    this.log = o.logger.child({ module: "replication" });
    this.scheduler = o.scheduler ?? systemScheduler;
    this.faults = o.faults ?? NO_REPLICATION_FAULTS;
  }

  start(): void {
    this.unsubscribe = this.o.cp.onChange((e) => {
      if (e.kind === "node" || e.kind === "partition" || e.kind === "lease") void this.checkElections();
    });
    this.electionTimer = this.scheduler.every(ELECTION_CHECK_MS, () => void this.checkElections());
    this.housekeepingTimer = this.scheduler.every(FOLLOWER_HOUSEKEEPING_MS, () => void this.housekeepFollowers());
  }

  // ---- the leader's wrapper (the broker's replicate hook) --------------------------------------

  /** The broker hook: prepare closes a follower's copy, wrap makes the owned partition a leader. */
  readonly hook = {
    prepare: (topic: string, partition: number): Promise<void> => this.closeFollower(topic, partition),
    wrap: (r: ReplicateRequest): Promise<ReplicatedParts> => this.wrap(r),
  };

  private async wrap(r: ReplicateRequest): Promise<ReplicatedParts> {
    const { cp } = this.o;
    const name = r.meta.name;
    const partition = r.partition;
    const placement = (): PartitionPlacement | undefined => cp.partitionPlacement(name, partition);
    const path = (kind: string): string => `${INTERNAL_PREFIX}/replicas/${encodeURIComponent(name)}/${partition}/${kind}`;
    const ctx: LeaderContext = {
      topic: name,
      incarnation: r.meta.incarnation,
      partition,
      epoch: r.epoch,
      nodeId: this.o.nodeId,
      replicas: () => placement()?.replicas ?? [this.o.nodeId],
      inSync: () => placement()?.inSync ?? [this.o.nodeId],
      acks: () => cp.topic(name)?.acks ?? r.meta.acks,
      setInSync: async (nodes) => {
        if (!(await cp.setInSync(name, partition, r.epoch, nodes))) {
          const now = placement();
          if (now !== undefined && now.epoch === r.epoch && now.node === this.o.nodeId && sameSet(now.inSync, nodes)) return;
          throw new Error(`in_sync of ${name}/${partition} could not be set at epoch ${r.epoch}: this node no longer leads it`);
        }
      },
      send: (node, req) => this.o.peers.request(node, req),
      path,
      clock: this.o.clock,
      scheduler: this.scheduler,
      logger: this.log,
      ackTimeoutMs: this.o.ackTimeoutMs,
      ackShipIntervalMs: this.o.ackShipIntervalMs,
      onVisible: r.onVisible,
      acksNotShipped: this.faults.acksNotShipped,
    };
    const leader = await ReplicatedLog.open(r.dir, r.log, r.acks, ctx);
    const key = `${name}/${partition}`;
    this.leaders.set(key, leader);
    const close = leader.close.bind(leader);
    leader.close = async () => {
      if (this.leaders.get(key) === leader) this.leaders.delete(key);
      await close();
    };
    return { log: leader, acks: leader.acks, cursors: (c) => leader.wrapCursors(c) };
  }

  // ---- follower replicas ------------------------------------------------------------------------

  /** Opens this node's follower replica of a partition (idempotent). */
  ensureFollower(topic: string, incarnation: number, partition: number): Promise<FollowerReplica> {
    const key = `${topic}/${partition}`;
    const have = this.followers.get(key);
    if (have !== undefined && have.incarnation === incarnation) return have.replica;
    const placement = this.o.broker.placement;
    const logger = this.log.child({ topic, partition, replica: "follower" });
    const replica = (async () => {
      if (have !== undefined) await this.closeFollower(topic, partition);
      const dir = placement.partitionDir(topic, incarnation, partition);
      const logScheduler = this.faults.followerAnswersBeforeFsync ? syncOnTimer(this.scheduler) : undefined;
      return FollowerReplica.open(dir, { open: () => placement.openReplicaFiles(topic, incarnation, partition, logScheduler), fs: realFs }, logger, this.faults);
    })();
    this.followers.set(key, { incarnation, replica });
    replica.then(
      () => logger.info("follower replica open"),
      (e: unknown) => {
        if (this.followers.get(key)?.replica === replica) this.followers.delete(key);
        logger.error({ err: (e as Error).message }, "could not open the follower replica");
      },
    );
    return replica;
  }

  async closeFollower(topic: string, partition: number): Promise<void> {
    const key = `${topic}/${partition}`;
    const have = this.followers.get(key);
    if (have === undefined) return;
    this.followers.delete(key);
    const r = await have.replica.catch(() => undefined);
    await r?.close();
  }

  /** Closes every follower replica of a topic (it is being dropped from this node). */
  async closeTopic(topic: string): Promise<void> {
    for (const key of [...this.followers.keys()]) {
      if (key.startsWith(`${topic}/`)) await this.closeFollower(topic, Number(key.slice(topic.length + 1)));
    }
  }

  private async housekeepFollowers(): Promise<void> {
    for (const [key, f] of this.followers) {
      const topic = key.slice(0, key.lastIndexOf("/"));
      const t = this.o.cp.topic(topic);
      if (t === undefined) continue;
      const r = await f.replica.catch(() => undefined);
      await r?.housekeep(t.retention_ms);
    }
  }

  /** The follower a leader's request is for, opened now if the view says this node is one. */
  private async followerFor(topic: string, partition: number, incarnation: number): Promise<FollowerReplica | undefined> {
    const key = `${topic}/${partition}`;
    const have = this.followers.get(key);
    if (have !== undefined && have.incarnation === incarnation) return have.replica;
    await this.o.cp.refresh([`topic:${topic}`]).catch(() => undefined);
    const t = this.o.cp.topic(topic);
    const p = this.o.cp.partitionPlacement(topic, partition);
    if (t === undefined || t.incarnation !== incarnation || p === undefined) return undefined;
    if (p.node === this.o.nodeId || !p.replicas.includes(this.o.nodeId)) return undefined;
    if (this.o.broker.placement.openEpoch(topic, partition) !== undefined) return undefined; // still open as a deposed leader
    if (this.o.broker.placement.knownIncarnation(topic) !== incarnation) return undefined; // the topic is not applied here yet
    return this.ensureFollower(topic, incarnation, partition);
  }

  // ---- internal routes --------------------------------------------------------------------------

  routes(http: InternalHttp): InternalRoute[] {
    const refuse = (res: ServerResponse, e: unknown): void => {
      if (e instanceof ReplicaRefusal) {
        http.sendJson(res, 409, { refused: e.kind, end: e.end, epoch: e.epoch, error: { code: "replica_refused", message: e.message } });
        return;
      }
      throw e;
    };
    const notReplica = (res: ServerResponse, topic: string, partition: number): void =>
      http.sendJson(res, 409, { refused: "not_replica", error: { code: "replica_refused", message: `this node keeps no follower replica of ${topic}/${partition}` } });
    const epochOf = (q: URLSearchParams): number => http.queryInt(q, "epoch", 0, 1, Number.MAX_SAFE_INTEGER);
    return [
      {
        method: "POST",
        path: "/replicas/:topic/:partition/join",
        perm: "none",
        handler: async (req: IncomingMessage, res: ServerResponse, p) => {
          const topic = http.topicParam(p);
          const partition = http.partitionParam(p);
          const j = http.asObject(await http.readJson(req, 4 * 1024 * 1024));
          const epoch = j.epoch;
          const incarnation = j.incarnation;
          const end = j.end;
          const earliest = j.earliest;
          const history = parseHistory(j.history);
          if (!isCount(epoch) || !isCount(incarnation) || !isCount(end) || !isCount(earliest) || history === undefined) {
            http.sendJson(res, 400, { error: { code: "bad_request", message: "join needs epoch, incarnation, end, earliest and history" } });
            return;
          }
          const f = await this.followerFor(topic, partition, incarnation);
          if (f === undefined) return notReplica(res, topic, partition);
          try {
            http.sendJson(res, 200, { end: await f.join(epoch, history, end, earliest) });
          } catch (e) {
            refuse(res, e);
          }
        },
      },
      {
        method: "POST",
        path: "/replicas/:topic/:partition/append",
        perm: "none",
        handler: async (req, res, p, q) => {
          const topic = http.topicParam(p);
          const partition = http.partitionParam(p);
          const epoch = epochOf(q);
          const incarnation = http.queryInt(q, "incarnation", 0, 1, 0xffffffff);
          const first = http.queryInt(q, "first", -1, 0, Number.MAX_SAFE_INTEGER);
          const body = await http.readBody(req, REPLICATION_LIMITS.shipBytesMax + 2 * 1024 * 1024);
          const records = decodeRecords(body, REPLICATION_LIMITS.shipRecordsMax);
          if (typeof records === "string" || first < 0) {
            http.sendJson(res, 400, { error: { code: "bad_request", message: typeof records === "string" ? `a bad replication body: ${records}` : "append needs first" } });
            return;
          }
          const f = await this.followerFor(topic, partition, incarnation);
          if (f === undefined) return notReplica(res, topic, partition);
          try {
            http.sendJson(res, 200, { end: await f.append(epoch, first, records) });
          } catch (e) {
            refuse(res, e);
          }
        },
      },
      {
        method: "POST",
        path: "/replicas/:topic/:partition/acks",
        perm: "none",
        handler: async (req, res, p, q) => {
          const topic = http.topicParam(p);
          const partition = http.partitionParam(p);
          const epoch = epochOf(q);
          const j = http.asObject(await http.readJson(req, 16 * 1024 * 1024));
          const acked = j.acked;
          const cursors = parseCursors(j.cursors ?? []);
          const ranges = parseRanges(j.ranges ?? []);
          if (!isCount(j.floor) || !Array.isArray(acked) || !acked.every(isCount) || cursors === undefined || ranges === undefined) {
            http.sendJson(res, 400, { error: { code: "bad_request", message: "acks needs floor, acked and cursors" } });
            return;
          }
          const have = this.followers.get(`${topic}/${partition}`);
          const f = have === undefined ? undefined : await have.replica.catch(() => undefined);
          if (f === undefined) return notReplica(res, topic, partition);
          try {
            await f.applyAcks(epoch, j.floor, acked, cursors, ranges);
          } catch (e) {
            return refuse(res, e);
          }
          http.sendEmpty(res, 204);
        },
      },
      {
        method: "POST",
        path: "/replica-moves",
        perm: "none",
        handler: async (req, res) => {
          const b = http.asObject(await http.readJson(req, 64 * 1024));
          if (typeof b.topic !== "string" || !isCount(b.partition) || typeof b.from !== "string" || typeof b.to !== "string" || !isCount(b.timeout_ms)) {
            http.sendJson(res, 400, { error: { code: "bad_request", message: "a replica move needs topic, partition, from, to and timeout_ms" } });
            return;
          }
          http.sendJson(res, 200, await this.moveReplica(b.topic, b.partition, b.from, b.to, b.timeout_ms));
        },
      },
      {
        method: "GET",
        path: "/replicas/:topic/:partition/state",
        perm: "none",
        handler: async (_req, res, p) => {
          const have = this.followers.get(`${http.topicParam(p)}/${http.partitionParam(p)}`);
          const f = have === undefined ? undefined : await have.replica.catch(() => undefined);
          if (f === undefined) return notReplica(res, http.topicParam(p), http.partitionParam(p));
          const s = f.status();
          http.sendJson(res, 200, { end: s.end, last_epoch: s.lastEpoch, epoch: s.epoch });
        },
      },
    ];
  }

  // ---- moving one replica -----------------------------------------------------------------------

  /**
   * The leader: moves the replica on `from` to `to` (docs/replication.md, "Moving a replica").
   * `to` joins as a follower and is caught up from this leader's log; once it is in sync, `from`
   * leaves the set. When `from` is this leader, it first stops serving the partition (a freeze:
   * everything it acknowledged is then on a majority, or in sync in leader mode), then hands the
   * partition at epoch + 1 to the most complete remaining replica (leader mode: `to`, in sync).
   * Any failure before the switch aborts the move: `to` leaves the set again, the leader serves.
   */
  async moveReplica(topic: string, partition: number, from: string, to: string, timeoutMs: number): Promise<{ topic: string; partition: number; from: string; to: string; epoch: number }> {
    const { cp, nodeId } = this.o;
    const ownership = this.ownership;
    if (ownership === undefined) throw new Error("moveReplica: no ownership attached");
    const p = cp.partitionPlacement(topic, partition);
    const t = cp.topic(topic);
    if (p === undefined || t === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist.`);
    if (p.node !== nodeId) throw new NaradError("not_owner", `${topic}/${partition} is led by ${p.node}, not this node; retry.`);
    if (!p.replicas.includes(from)) throw new MoveRefused("node_unknown", `${from} holds no replica of ${topic}/${partition} (replicas: ${p.replicas.join(", ")}).`);
    if (p.replicas.includes(to)) throw new MoveRefused("same_node", `${to} holds a replica of ${topic}/${partition} already.`);
    if (p.state === "moving") throw new MoveRefused("move_in_progress", `${topic}/${partition} is being moved to ${p.moveTo} already.`);
    if (cp.node(to)?.state !== "live") throw new MoveRefused("node_down", `Node ${to} is down; start it before moving a replica to it.`);
    const epoch = p.epoch;
    if (!(await cpCall(() => cp.beginReplicaMove(topic, partition, epoch, from, to)))) {
      throw new MoveRefused("stale_epoch", `${topic}/${partition} changed meanwhile (placement: ${JSON.stringify(cp.partitionPlacement(topic, partition) ?? null)}); retry.`);
    }
    this.log.info({ topic, partition, from, to, epoch }, "replica move started");
    const deadline = this.o.clock.monoMs() + timeoutMs;
    let frozen = false;
    try {
      // The new replica is caught up by ordinary shipping (from this leader's log); wait for it.
      for (;;) {
        const now = cp.partitionPlacement(topic, partition);
        if (now === undefined || now.epoch !== epoch || now.state !== "moving") throw new NaradError("move_conflict", `${topic}/${partition} changed during the move.`);
        if (now.inSync.includes(to)) break;
        if (this.o.clock.monoMs() > deadline) throw new NaradError("timeout", `${to} did not catch up with ${topic}/${partition} within ${timeoutMs} ms; the move was aborted.`);
        await sleepOn(this.scheduler, 100);
      }
      if (from !== nodeId) {
        if (!(await cpCall(() => cp.finishReplicaMove(topic, partition, epoch, from, to)))) throw new NaradError("move_conflict", `${topic}/${partition} changed during the move.`);
        this.log.info({ topic, partition, from, to, epoch }, "replica moved");
        return { topic, partition, from, to, epoch };
      }
      // This leader moves: it stops serving, then hands over to the most complete replica left.
      await ownership.freeze(topic, partition, epoch, to);
      frozen = true;
      const now = cp.partitionPlacement(topic, partition)!;
      const rest = now.replicas.filter((n) => n !== nodeId);
      let next: string | undefined;
      if (t.acks === "leader") {
        next = now.inSync.includes(to) ? to : rest.find((n) => now.inSync.includes(n) && cp.node(n)?.state === "live");
      } else {
        const states = new Map<string, { end: number; lastEpoch: number }>();
        await Promise.all(
          rest.map(async (n) => {
            const s = await this.stateOf(n, topic, partition);
            if (s !== undefined) states.set(n, s);
          }),
        );
        if (states.size >= Math.floor(rest.length / 2) + 1) {
          // The most complete; `to` first among equals.
          for (const n of [to, ...rest.filter((x) => x !== to)]) {
            const s = states.get(n);
            if (s !== undefined && (next === undefined || compareRank(s, states.get(next)!) > 0)) next = n;
          }
        }
      }
      if (next === undefined) throw new NaradError("node_down", `No remaining replica of ${topic}/${partition} can take over (too few answered); the move was aborted.`);
      if (!(await cpCall(() => cp.handOffLeader(topic, partition, epoch, next!, to)))) throw new NaradError("move_conflict", `${topic}/${partition} changed during the move.`);
      this.log.info({ topic, partition, from, to, next, epoch: epoch + 1 }, "replica moved: this leader handed the partition over");
      return { topic, partition, from, to, epoch: epoch + 1 };
    } catch (e) {
      await cp.abortMove(topic, partition, epoch).catch((err: unknown) => this.log.warn({ err: (err as Error).message }, "aborting a replica move failed; the freeze timeout gives it back"));
      if (frozen) await ownership.schedule(topic);
      this.log.warn({ topic, partition, from, to, err: (e as Error).message }, "replica move aborted");
      throw e;
    }
  }

  // ---- failover ---------------------------------------------------------------------------------

  private async checkElections(): Promise<void> {
    if (this.electing || this.closed) return;
    const { cp, nodeId } = this.o;
    if (!cp.isLeaseLive()) return;
    this.electing = true;
    try {
      for (const t of cp.topics()) {
        if (t.replication_factor <= 1) continue;
        for (const p of cp.placement(t.name) ?? []) {
          if (p.node === nodeId || !p.replicas.includes(nodeId) || p.state !== "serving") continue;
          if (cp.node(p.node)?.state !== "down") continue;
          await this.tryElect(t.name, t.acks, p).catch((e: unknown) => this.log.warn({ topic: t.name, partition: p.partition, err: (e as Error).message }, "election failed"));
        }
      }
    } finally {
      this.electing = false;
    }
  }

  private async tryElect(topic: string, acks: "leader" | "quorum", p: PartitionPlacement): Promise<void> {
    const { cp, nodeId } = this.o;
    const me = this.followers.get(`${topic}/${p.partition}`);
    const mine = me === undefined ? undefined : await me.replica.catch(() => undefined);
    if (mine === undefined) return;
    const others = p.replicas.filter((n) => n !== p.node);
    if (this.faults.electsIncompleteFollower) {
      // Seeded bug: the first live follower stands, complete or not.
      if (others.find((n) => cp.node(n)?.state === "live") !== nodeId) return;
    } else if (acks === "leader") {
      if (!p.inSync.includes(nodeId)) return;
      const first = others.find((n) => p.inSync.includes(n) && cp.node(n)?.state === "live");
      if (first !== nodeId) return;
    } else {
      const majority = Math.floor(p.replicas.length / 2) + 1;
      const states = new Map<string, ReplicaStatus | { end: number; lastEpoch: number }>();
      states.set(nodeId, mine.status());
      await Promise.all(
        others
          .filter((n) => n !== nodeId && cp.node(n)?.state === "live")
          .map(async (n) => {
            const s = await this.stateOf(n, topic, p.partition);
            if (s !== undefined) states.set(n, s);
          }),
      );
      if (states.size < majority) return;
      let best: string | undefined;
      for (const n of others) {
        const s = states.get(n);
        if (s === undefined) continue;
        if (best === undefined || compareRank(s, states.get(best)!) > 0) best = n;
      }
      if (best !== nodeId) return;
    }
    const won = await cp.electLeader(topic, p.partition, p.epoch, p.node, acks === "leader" && !this.faults.electsIncompleteFollower);
    if (!won) return;
    this.counts.failovers++;
    this.log.warn({ topic, partition: p.partition, from: p.node, epoch: p.epoch + 1, acks }, "failover: this node leads the partition now (its leader's lease lapsed)");
  }

  private async stateOf(node: string, topic: string, partition: number): Promise<{ end: number; lastEpoch: number } | undefined> {
    const ac = new AbortController();
    const t = this.scheduler.after(STATE_TIMEOUT_MS, () => ac.abort());
    try {
      const res = await this.o.peers.request(node, { method: "GET", path: `${INTERNAL_PREFIX}/replicas/${encodeURIComponent(topic)}/${partition}/state`, signal: ac.signal });
      if (res.status !== 200) return undefined;
      const j = JSON.parse(res.body.toString("utf8")) as { end?: unknown; last_epoch?: unknown };
      return isCount(j.end) && isCount(j.last_epoch) ? { end: j.end, lastEpoch: j.last_epoch } : undefined;
    } catch {
      return undefined;
    } finally {
      t.cancel();
    }
  }

  /** Registers the replication metrics on the node's registry (docs/operations.md, "Metrics"). */
  registerMetrics(registry: Registry): void {
    const leaders = this.leaders;
    const counts = this.counts;
    const cp = this.o.cp;
    type Lag = ReturnType<ReplicatedLog["lag"]>[number];
    // One gauge per figure of each follower of each partition led here.
    const perFollower = (name: string, help: string, value: (x: Lag) => number): void => {
      new Gauge({
        name,
        help,
        labelNames: ["topic", "partition", "follower"],
        registers: [registry],
        collect() {
          this.reset();
          for (const [key, l] of leaders) {
            const i = key.lastIndexOf("/");
            for (const x of l.lag()) this.set({ topic: key.slice(0, i), partition: key.slice(i + 1), follower: x.follower }, value(x));
          }
        },
      });
    };
    perFollower("narad_replication_lag_records", "Records a follower lacks of what its leader (this node) holds, per partition led here", (x) => x.records);
    perFollower("narad_replication_lag_seconds", "How long since a follower was last caught up with its leader (this node): 0 when it holds everything", (x) => x.ms / 1000);
    perFollower("narad_replication_acks_pending", "Acks taken by the leader (this node) that have not reached a follower yet", (x) => x.acksPending);
    new Gauge({
      name: "narad_under_replicated_partitions",
      help: "Partitions led here whose in_sync replicas are fewer than their replica set",
      labelNames: ["topic"],
      registers: [registry],
      collect() {
        this.reset();
        const per = new Map<string, number>();
        for (const key of leaders.keys()) {
          const i = key.lastIndexOf("/");
          const topic = key.slice(0, i);
          const p = cp.partitionPlacement(topic, Number(key.slice(i + 1)));
          if (p !== undefined && p.inSync.length < p.replicas.length) per.set(topic, (per.get(topic) ?? 0) + 1);
          else if (!per.has(topic)) per.set(topic, 0);
        }
        for (const [topic, n] of per) this.set({ topic }, n);
      },
    });
    new Counter({
      name: "narad_failovers_total",
      help: "Failovers this node won: it became the leader of a replicated partition whose leader's lease lapsed",
      registers: [registry],
      collect() {
        this.reset();
        this.inc(counts.failovers);
      },
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.unsubscribe?.();
    this.electionTimer?.cancel();
    this.housekeepingTimer?.cancel();
    for (const key of [...this.followers.keys()]) {
      const i = key.lastIndexOf("/");
      await this.closeFollower(key.slice(0, i), Number(key.slice(i + 1)));
    }
  }
}

function sleepOn(scheduler: Scheduler, ms: number): Promise<void> {
  return new Promise((resolve) => scheduler.after(ms, resolve));
}

function isCount(v: unknown): v is number {
  return typeof v === "number" && Number.isSafeInteger(v) && v >= 0;
}

function parseRanges(v: unknown): [number, number][] | undefined {
  if (!Array.isArray(v) || v.length > REPLICATION_LIMITS.joinAckRangesMax) return undefined;
  const out: [number, number][] = [];
  for (const x of v) {
    if (!Array.isArray(x) || x.length !== 2 || !isCount(x[0]) || !isCount(x[1]) || x[1] < x[0]) return undefined;
    out.push([x[0], x[1]]);
  }
  return out;
}

function parseCursors(v: unknown): CursorUpdate[] | undefined {
  if (!Array.isArray(v) || v.length > 10_000) return undefined;
  const out: CursorUpdate[] = [];
  for (const x of v) {
    if (typeof x !== "object" || x === null) return undefined;
    const u = x as { child?: unknown; next?: unknown; stored?: unknown };
    if (typeof u.child !== "string" || u.child.length > 256 || (u.next !== null && !isCount(u.next))) return undefined;
    if (!Array.isArray(u.stored) || u.stored.length > 100_000 || !u.stored.every(isCount)) return undefined;
    out.push({ child: u.child, next: u.next as number | null, stored: u.stored as number[] });
  }
  return out;
}

function parseHistory(v: unknown): EpochEntry[] | undefined {
  if (!Array.isArray(v) || v.length > 100_000) return undefined;
  const out: EpochEntry[] = [];
  for (const x of v) {
    if (!Array.isArray(x) || x.length !== 2 || !isCount(x[0]) || !isCount(x[1])) return undefined;
    const prev = out[out.length - 1];
    if (prev !== undefined && (x[0] <= prev[0] || x[1] < prev[1])) return undefined;
    out.push([x[0], x[1]]);
  }
  return out;
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}
