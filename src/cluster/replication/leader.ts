// The leader's side of a replicated partition: a PartitionLog and an AckLog that wrap the owned
// partition's own, so the broker serves it as any partition while every append and ack also
// reaches the followers.
//
// Appends. `append` hands the records to the local log (its group commit and fdatasync) and, at
// the same moment, to one shipper per follower, which sends them over the pooled peer
// connections (one request in flight per follower, carrying everything appended since the last).
// The follower appends, fsyncs and answers its new end: its `match`. So a commit costs about one
// fsync plus one round trip, the local fsync running in parallel.
//
// What may be acknowledged and seen (`syncedOffset`, the broker's visibility and every 202):
// - quorum: the highest offset N that the leader has fsynced and that a majority of the replica
//   set holds (the leader counted), once N is past this epoch's marker. The marker is the control
//   record a new leader appends first (src/storage/record.ts); until a majority holds it nothing
//   of the log counts as committed, since records of earlier epochs held by a majority could
//   still be replaced by a leader elected from replicas that never saw this epoch (Raft's rule,
//   docs/replication.md). No majority within `ackTimeoutMs` → the produce answers `503
//   no_quorum` (indefinite: the record is on the leader and may commit later).
// - leader: what the leader has fsynced, provided every replica the control plane lists as in
//   sync holds it. A follower that does not (the usual case under load: the leader's fsync is
//   faster than a round trip) is first removed from `in_sync` by a compare-and-set in
//   PostgreSQL, and only then is the record acknowledged. So `in_sync` always names replicas
//   holding every acknowledged record, and a failover may promote only those. A follower that
//   caught up is added back, at most once per IN_SYNC_GROW_HOLD_MS.
//
// Acks and the copy cursors of child topics ship to the followers every `ackShipIntervalMs`
// (the ack log's flush interval), so a failover forgets about as many acks as a kill of the leader would, plus the shipping lag.
//
// Limits: records kept in memory for shipping are bounded by PENDING_BYTES_MAX (past it a
// follower behind reads the leader's log, which holds everything fsynced); acks queued for an
// unreachable follower by ACK_QUEUE_OFFSETS_MAX (past it the oldest are dropped, logged: a
// failover to that follower would redeliver them); a request carries at most SHIP_BYTES_MAX.

import type { Logger } from "pino";
import { NaradError } from "../../protocol/errors.js";
import type { AcksMode } from "../../protocol/wire.js";
import type { Clock } from "../../platform/clock.js";
import type { Scheduler, Timer } from "../../platform/scheduler.js";
import type { CopyCursors } from "../../broker/children.js";
import type { AckLog, AppendInput, PartitionLog, RecoveryReport, StoredRecord } from "../../storage/index.js";
import { ForwardingAckLog } from "../../storage/index.js";
import { withProducerSequence } from "../../storage/attrs.js";
import type { PeerRequest, PeerResponse } from "../peers.js";
import { encodeRecords, shippedBytes, type ShippedRecord } from "./codec.js";
import { cutHistory, readReplicaFile, withEpoch, writeReplicaFile, type EpochEntry } from "./history.js";

export const REPLICATION_LIMITS = {
  pendingBytesMax: 64 * 1024 * 1024,
  shipBytesMax: 4 * 1024 * 1024,
  shipRecordsMax: 10_000,
  ackQueueOffsetsMax: 1_000_000,
  /** Acked ranges above the floor sent to a follower when it joins (its whole ack state). */
  joinAckRangesMax: 100_000,
  ackShipOffsetsMax: 50_000,
  backoffMinMs: 50,
  backoffMaxMs: 2000,
  inSyncTickMs: 250,
  inSyncGrowHoldMs: 5000,
  /** Quorum mode: a follower stays in in_sync while it was caught up within this long (Kafka's replica.lag.time.max.ms). */
  inSyncLagMaxMs: 10_000,
} as const;

export interface LeaderContext {
  topic: string;
  incarnation: number;
  partition: number;
  epoch: number;
  nodeId: string;
  /** The partition's replica set as the control plane lists it now (leader first). */
  replicas(): string[];
  /** Its in-sync replicas as the control plane lists them now. */
  inSync(): string[];
  acks(): AcksMode;
  /** Compare-and-set of in_sync at this epoch, this node the owner; resolves once re-read. */
  setInSync(nodes: string[]): Promise<void>;
  send(node: string, r: PeerRequest): Promise<PeerResponse>;
  path(kind: "join" | "append" | "acks"): string;
  clock: Clock;
  scheduler: Scheduler;
  logger: Logger;
  ackTimeoutMs: number;
  ackShipIntervalMs: number;
  onVisible(): void;
  /** Seeded bug acks-not-replicated (./faults.ts). */
  acksNotShipped?: boolean;
}

interface Waiter {
  end: number;
  resolve: () => void;
  reject: (e: Error) => void;
  timer: Timer;
  done: boolean;
}

interface AckBatch {
  floor: number;
  acked: number[];
  /** A follower's whole ack state, sent when it joins: ranges above the floor. */
  ranges?: [number, number][];
  /** Copy cursors of child topics changed since the last batch: null `next` removes one. */
  cursors: CursorUpdate[];
  /** Delivery counts recorded since the last batch: [offset, count, 1 if a dead-letter move was asked]. */
  deliveries?: [number, number, number][];
}

export interface CursorUpdate {
  child: string;
  next: number | null;
  stored: number[];
}

class Link {
  /** When (monotonic ms) an append was sent that brought the follower to the leader's end then. */
  caughtUpMono = Number.NEGATIVE_INFINITY;
  match = 0;
  next = 0;
  joined = false;
  stale = false;
  backoffMs = 0;
  wake: (() => void) | null = null;
  ackQueue: AckBatch[] = [];
  ackQueued = 0;
  ackSending = false;
  constructor(
    readonly node: string,
    /** A new follower counts as last caught up when its shipper starts (for the lag metric). */
    nowMono: number,
  ) {
    this.caughtUpMono = nowMono;
  }
}

export class ReplicatedLog implements PartitionLog {
  private pending: ShippedRecord[] = [];
  private pendingBase: number;
  private pendingBytes = 0;
  private readonly links = new Map<string, Link>();
  private readonly waiters: Waiter[] = [];
  private committed = 0;
  private visible = 0;
  private closed = false;
  private shrinking = false;
  private readonly growing = new Set<string>();
  private lastShrinkMono = Number.NEGATIVE_INFINITY;
  private tick: Timer | undefined;
  private ackTimer: Timer | undefined;
  private ackBuf: number[] = [];
  /** Delivery counts taken here since the last ack batch (see AckBatch.deliveries). */
  private deliveryBuf: [number, number, number][] = [];
  private readonly cursorsDirty = new Map<string, CursorUpdate>();
  private ackFloor = 0;
  private ackFloorShipped = 0;
  readonly acks: AckLog;

  private constructor(
    private readonly inner: PartitionLog,
    innerAcks: AckLog,
    private readonly history: EpochEntry[],
    /** The offset of this epoch's marker: nothing commits until a majority holds it. */
    private readonly epochStart: number,
    private readonly c: LeaderContext,
    private readonly log: Logger,
  ) {
    this.pendingBase = inner.endOffset;
    this.acks = new ShippingAcks(innerAcks, this);
    this.ackFloor = innerAcks.floor;
    this.ackFloorShipped = innerAcks.floor;
  }

  /**
   * Takes over an owned partition at `c.epoch`: writes the epoch into its history, appends the
   * epoch marker (acked at once: no one consumes it) and starts shipping to the followers.
   */
  static async open(dir: string, inner: PartitionLog, innerAcks: AckLog, c: LeaderContext): Promise<ReplicatedLog> {
    const logger = c.logger.child({ topic: c.topic, partition: c.partition, epoch: c.epoch, replica: "leader" });
    const file = await readReplicaFile(dir);
    if (file.epoch > c.epoch) throw new NaradError("not_owner", `${c.topic}/${c.partition}: a newer epoch (${file.epoch}) than ${c.epoch} has been seen here.`);
    const end = inner.endOffset;
    const history = withEpoch(cutHistory(file.history, end), c.epoch, end);
    await writeReplicaFile(dir, { epoch: c.epoch, history });
    const r = new ReplicatedLog(inner, innerAcks, history, end, c, logger);
    for (const n of c.replicas()) if (n !== c.nodeId) r.links.set(n, new Link(n, c.clock.monoMs()));
    // The marker: a control record of this epoch, the first one it appends.
    const { baseOffset } = r.append([{ key: null, payload: Buffer.alloc(0), control: true }], c.clock.nowMs(), false);
    r.acks.ack(baseOffset);
    for (const l of r.links.values()) void r.pump(l);
    r.tick = c.scheduler.every(REPLICATION_LIMITS.inSyncTickMs, () => r.maintainInSync());
    r.ackTimer = c.scheduler.every(c.ackShipIntervalMs, () => r.shipAcks());
    logger.info({ end, followers: [...r.links.keys()], acks: c.acks() }, "leading a replicated partition");
    return r;
  }

  // ---- PartitionLog ----------------------------------------------------------------------------

  get endOffset(): number {
    return this.inner.endOffset;
  }
  get earliestOffset(): number {
    return this.inner.earliestOffset;
  }
  /** What may be acknowledged and seen (see the top of this file). */
  get syncedOffset(): number {
    return this.visible;
  }
  get pendingSyncBytes(): number {
    return this.inner.pendingSyncBytes;
  }
  /** Whether this epoch's marker is visible: before it, what is committed is not known here yet. */
  get ready(): boolean {
    return this.visible > this.epochStart;
  }
  get recovery(): RecoveryReport {
    return this.inner.recovery;
  }

  append(records: AppendInput[], producedAtMs: number, wait = true): { baseOffset: number; durable: Promise<void> } {
    if (this.closed) throw new NaradError("not_owner", `${this.c.topic}/${this.c.partition} is closing here.`);
    const { baseOffset, durable } = this.inner.append(records, producedAtMs);
    const end = baseOffset + records.length;
    if (this.pending.length === 0) this.pendingBase = baseOffset;
    for (const r of records) {
      const s: ShippedRecord = r.control === true ? { producedAtMs, key: null, payload: r.payload, control: true } : r.attrs !== undefined ? { producedAtMs, key: r.key, payload: r.payload, attrs: r.producerSequence === undefined ? r.attrs : withProducerSequence(r.attrs, r.producerSequence) } : { producedAtMs, key: r.key, payload: r.payload };
      this.pending.push(s);
      this.pendingBytes += shippedBytes(s);
    }
    this.trimPending();
    // Quorum: the records go to the followers now, in parallel with the local fsync (the 202
    // waits for a majority). Leader mode: after the local fsync, so the followers' work is not on
    // the 202's path (on shared cores a woken follower takes the leader's CPU).
    const quorum = this.c.acks() === "quorum";
    if (quorum) for (const l of this.links.values()) l.wake?.();
    durable.then(
      () => {
        if (!quorum) for (const l of this.links.values()) l.wake?.();
        this.recompute();
      },
      () => undefined,
    );
    if (!wait) {
      durable.catch(() => undefined);
      return { baseOffset, durable: Promise.resolve() };
    }
    const committed = new Promise<void>((resolve, reject) => {
      const w: Waiter = {
        end,
        resolve,
        reject,
        done: false,
        timer: this.c.scheduler.after(this.c.ackTimeoutMs, () => {
          if (w.done) return;
          w.done = true;
          reject(this.timeoutError());
        }),
      };
      this.waiters.push(w);
    });
    // The local fsync failing fails the produce, whatever the followers did (storage_failed).
    return { baseOffset, durable: Promise.all([durable, committed]).then(() => undefined) };
  }

  async read(fromOffset: number, maxRecords: number, maxBytes: number): Promise<StoredRecord[]> {
    const limit = this.visible;
    if (fromOffset >= limit) return [];
    return this.inner.read(fromOffset, Math.min(maxRecords, limit - Math.max(fromOffset, this.inner.earliestOffset)), maxBytes);
  }

  get failed(): Error | null {
    return this.inner.failed;
  }

  /**
   * A leader's log that failed is not reopened in place: reopening cuts it back to what was
   * fsynced here, but the followers may hold records past that point under this same epoch, and
   * two replicas with one epoch at an offset must hold one record. The partition stays stopped
   * (its produces refused) until it is opened again at a new epoch (a restart, or a failover).
   */
  reopen(): Promise<void> {
    if (this.inner.failed === null) return Promise.resolve();
    return Promise.reject(new Error("the leader of a replicated partition does not reopen its failed log in place; restart the node (a follower takes over meanwhile if its lease lapses)"));
  }

  closeIdleFiles(idleMs: number): number {
    return this.inner.closeIdleFiles(idleMs);
  }

  maybeRoll(): Promise<void> {
    return this.inner.maybeRoll();
  }

  enforceRetention(retentionMs: number): Promise<number> {
    return this.inner.enforceRetention(retentionMs);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.tick?.cancel();
    this.ackTimer?.cancel();
    this.shipAcks();
    for (const l of this.links.values()) l.wake?.();
    for (const w of this.waiters.splice(0)) {
      if (w.done) continue;
      w.done = true;
      w.timer.cancel();
      w.reject(new NaradError("ownership_lost", `${this.c.topic}/${this.c.partition} closed here before a majority of its replicas confirmed the write.`));
    }
    await this.inner.close();
  }

  // ---- what may be acknowledged ----------------------------------------------------------------

  private timeoutError(): NaradError {
    const mode = this.c.acks();
    const behind = [...this.links.values()].map((l) => `${l.node} at ${l.match}`).join(", ");
    return mode === "quorum"
      ? new NaradError("no_quorum", `${this.c.topic}/${this.c.partition}: a majority of its replicas did not confirm the write within ${this.c.ackTimeoutMs} ms (followers: ${behind}); it may be stored on the leader.`)
      : new NaradError("no_quorum", `${this.c.topic}/${this.c.partition}: the leader could not record in the control plane that followers (${behind}) are behind, so it cannot acknowledge the write; it is stored on the leader.`);
  }

  /** Recomputes what may be acknowledged; answers the waiting produces it covers. */
  private recompute(): void {
    if (this.closed) return;
    const synced = this.inner.syncedOffset;
    let v: number;
    if (this.c.acks() === "quorum") {
      const replicas = this.c.replicas();
      const majority = Math.floor(replicas.length / 2) + 1;
      const matches = [synced];
      for (const n of replicas) if (n !== this.c.nodeId) matches.push(Math.min(this.links.get(n)?.match ?? 0, synced));
      matches.sort((a, b) => b - a);
      const n = matches[majority - 1] ?? 0;
      if (n > this.epochStart && n > this.committed) this.committed = n;
      v = Math.min(this.committed, synced);
    } else {
      let covered = synced;
      const lagging: string[] = [];
      for (const n of this.gatingSet()) {
        const m = this.links.get(n)?.match ?? 0;
        if (m < synced) lagging.push(n);
        covered = Math.min(covered, m);
      }
      if (lagging.length > 0) this.shrink(lagging);
      v = Math.max(this.visible, covered);
    }
    if (v <= this.visible) return;
    this.visible = v;
    while (this.waiters.length > 0 && (this.waiters[0]!.done || this.waiters[0]!.end <= v)) {
      const w = this.waiters.shift()!;
      if (w.done) continue;
      w.done = true;
      w.timer.cancel();
      w.resolve();
    }
    this.c.onVisible();
  }

  /** Leader mode: the followers a record must reach (or be removed from in_sync) before its 202. */
  private gatingSet(): Set<string> {
    const s = new Set(this.c.inSync().filter((n) => n !== this.c.nodeId));
    for (const n of this.growing) s.add(n);
    return s;
  }

  private shrink(lagging: string[]): void {
    if (this.shrinking || this.closed) return;
    this.shrinking = true;
    const keep = this.c.inSync().filter((n) => !lagging.includes(n));
    if (!keep.includes(this.c.nodeId)) keep.unshift(this.c.nodeId);
    this.lastShrinkMono = this.c.clock.monoMs();
    this.c.setInSync(keep).then(
      () => {
        this.shrinking = false;
        this.log.info({ inSync: keep, behind: lagging }, "followers behind the leader left in_sync before a write was acknowledged");
        this.recompute();
      },
      (e: unknown) => {
        this.log.warn({ err: (e as Error).message }, "could not shrink in_sync; writes wait");
        this.c.scheduler.after(REPLICATION_LIMITS.backoffMaxMs / 4, () => {
          this.shrinking = false;
          this.recompute();
        });
      },
    );
  }

  /** A replica added to the set (a replica move) gets a shipper; one that left loses its own. */
  private syncLinks(): void {
    const replicas = this.c.replicas();
    for (const n of replicas) {
      if (n === this.c.nodeId || this.links.has(n)) continue;
      const l = new Link(n, this.c.clock.monoMs());
      this.links.set(n, l);
      this.log.info({ follower: n }, "a replica joined the set");
      void this.pump(l);
    }
    for (const [n, l] of this.links) {
      if (replicas.includes(n)) continue;
      l.stale = true;
      l.wake?.();
      this.links.delete(n);
    }
  }

  /** Adds caught-up followers back to in_sync (and, in quorum mode, drops those behind the commit). */
  private maintainInSync(): void {
    if (this.closed) return;
    this.syncLinks();
    this.recompute(); // the replica set or in_sync may have changed in the view
    if (this.shrinking || this.growing.size > 0) return;
    const current = this.c.inSync();
    const end = this.inner.endOffset;
    const caughtUp = [...this.links.values()].filter((l) => l.joined && !l.stale && l.match >= end).map((l) => l.node);
    if (this.c.acks() === "quorum") {
      // Informational in quorum mode (acks and elections count a majority, not in_sync): the
      // followers caught up with the leader within inSyncLagMaxMs, so it does not flap with
      // every round trip under load. A change to leader mode resets it to the leader alone.
      const now = this.c.clock.monoMs();
      const want = [this.c.nodeId, ...[...this.links.values()].filter((l) => l.joined && !l.stale && now - l.caughtUpMono <= REPLICATION_LIMITS.inSyncLagMaxMs).map((l) => l.node)];
      if (sameSet(want, current)) return;
      if (want.length > current.length && this.c.clock.monoMs() - this.lastShrinkMono < REPLICATION_LIMITS.inSyncGrowHoldMs) return;
      if (want.length < current.length) this.lastShrinkMono = this.c.clock.monoMs();
      this.writeInSync(want, []);
      return;
    }
    const add = caughtUp.filter((n) => !current.includes(n));
    if (add.length === 0 || this.c.clock.monoMs() - this.lastShrinkMono < REPLICATION_LIMITS.inSyncGrowHoldMs) return;
    this.writeInSync([...current.includes(this.c.nodeId) ? current : [this.c.nodeId, ...current], ...add], add);
  }

  private writeInSync(nodes: string[], adding: string[]): void {
    for (const n of adding) this.growing.add(n); // gate on them from now: the write may land any moment
    this.c.setInSync(nodes).then(
      () => {
        for (const n of adding) this.growing.delete(n);
        this.log.info({ inSync: nodes }, "in_sync changed");
      },
      (e: unknown) => {
        for (const n of adding) this.growing.delete(n);
        this.log.warn({ err: (e as Error).message }, "could not change in_sync");
      },
    );
  }

  // ---- shipping --------------------------------------------------------------------------------

  private trimPending(): void {
    // Keep what some follower may still need from memory; a follower further behind, or the
    // pending bytes over their bound, read from the log (everything fsynced is there).
    // A follower that has not joined reads from the log when it does (its end may be anywhere).
    let need = this.inner.endOffset;
    for (const l of this.links.values()) if (!l.stale && l.joined) need = Math.min(need, l.next);
    const synced = this.inner.syncedOffset;
    while (this.pending.length > 0 && this.pendingBase < synced && (this.pendingBase < need || this.pendingBytes > REPLICATION_LIMITS.pendingBytesMax)) {
      this.pendingBytes -= shippedBytes(this.pending.shift()!);
      this.pendingBase++;
    }
  }

  private async recordsFrom(next: number): Promise<ShippedRecord[]> {
    const out: ShippedRecord[] = [];
    let bytes = 0;
    if (next < this.pendingBase) {
      const recs = await this.inner.read(next, Math.min(REPLICATION_LIMITS.shipRecordsMax, this.pendingBase - next), REPLICATION_LIMITS.shipBytesMax);
      for (const r of recs) {
        if (r.offset !== next + out.length) break; // a record the leader cannot read: stop before it
        out.push(
          r.control === true
            ? { producedAtMs: r.producedAtMs, key: null, payload: r.payload, control: true }
            : r.attrs !== undefined
              ? { producedAtMs: r.producedAtMs, key: r.key, payload: r.payload, attrs: r.attrs }
              : { producedAtMs: r.producedAtMs, key: r.key, payload: r.payload },
        );
      }
      if (out.length === 0 && recs.length === 0 && next < this.inner.syncedOffset) {
        throw new Error(`record ${next} cannot be read from the leader's log`);
      }
      return out;
    }
    for (let i = next - this.pendingBase; i < this.pending.length && out.length < REPLICATION_LIMITS.shipRecordsMax; i++) {
      const r = this.pending[i]!;
      if (out.length > 0 && bytes + shippedBytes(r) > REPLICATION_LIMITS.shipBytesMax) break;
      out.push(r);
      bytes += shippedBytes(r);
    }
    return out;
  }

  private sleep(l: Link, ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = this.c.scheduler.after(ms, () => {
        l.wake = null;
        resolve();
      });
      l.wake = () => {
        t.cancel();
        l.wake = null;
        resolve();
      };
    });
  }

  private waitForWork(l: Link): Promise<void> {
    return new Promise((resolve) => {
      l.wake = () => {
        l.wake = null;
        resolve();
      };
    });
  }

  private async backoff(l: Link): Promise<void> {
    l.backoffMs = Math.min(Math.max(REPLICATION_LIMITS.backoffMinMs, l.backoffMs * 2), REPLICATION_LIMITS.backoffMaxMs);
    await this.sleep(l, l.backoffMs);
  }

  /** One follower's shipping loop: join, then send whatever it lacks, one request at a time. */
  private async pump(l: Link): Promise<void> {
    while (!this.closed && !l.stale) {
      try {
        if (!l.joined) {
          await this.join(l);
          continue;
        }
        if (l.next >= this.inner.endOffset) {
          await this.waitForWork(l);
          continue;
        }
        // What the leader holds as the batch is put together: a follower that answers with at
        // least this much was caught up then (Kafka's rule: up to the leader's end at the time
        // of the fetch), whatever was appended while the batch was read and sent.
        const endAtRead = this.inner.endOffset;
        const readMono = this.c.clock.monoMs();
        const records = await this.recordsFrom(l.next);
        if (records.length === 0) {
          await this.sleep(l, REPLICATION_LIMITS.backoffMinMs);
          continue;
        }
        await this.sendAppend(l, records, endAtRead, readMono);
      } catch (e) {
        if (this.closed) return;
        if (l.backoffMs >= REPLICATION_LIMITS.backoffMaxMs / 2 || l.backoffMs === 0) {
          this.log.warn({ follower: l.node, err: (e as Error).message }, "shipping to a follower failed; retrying");
        }
        l.joined = false;
        await this.backoff(l);
      }
    }
  }

  private async join(l: Link): Promise<void> {
    const body = JSON.stringify({ epoch: this.c.epoch, incarnation: this.c.incarnation, history: this.history, end: this.inner.endOffset, earliest: this.inner.earliestOffset });
    const res = await this.c.send(l.node, { method: "POST", path: this.c.path("join"), headers: { "content-type": "application/json" }, body });
    const j = this.answer(l, res);
    if (j === undefined) return;
    l.match = Math.min(j.end, this.inner.endOffset);
    l.next = l.match;
    l.joined = true;
    if (l.match >= this.inner.endOffset) l.caughtUpMono = this.c.clock.monoMs();
    this.sendAckState(l);
    l.backoffMs = 0;
    this.log.info({ follower: l.node, end: l.match }, "follower joined");
    this.recompute();
  }

  private async sendAppend(l: Link, records: ShippedRecord[], endAtRead: number, readMono: number): Promise<void> {
    const first = l.next;
    const q = `?epoch=${this.c.epoch}&incarnation=${this.c.incarnation}&first=${first}`;
    const res = await this.c.send(l.node, { method: "POST", path: this.c.path("append") + q, headers: { "content-type": "application/octet-stream" }, body: encodeRecords(records) });
    const j = this.answer(l, res);
    if (j === undefined) return;
    if (j.end !== first + records.length) {
      l.joined = false; // it ended elsewhere than asked: join again
      return;
    }
    l.match = j.end;
    l.next = j.end;
    l.backoffMs = 0;
    if (j.end >= endAtRead) l.caughtUpMono = readMono;
    this.trimPending();
    this.recompute();
  }

  /** A follower's answer: {end} on 200; a refusal says join again, or that this leader is deposed. */
  private answer(l: Link, res: PeerResponse): { end: number } | undefined {
    let j: { end?: unknown; refused?: unknown; epoch?: unknown; error?: { message?: string } };
    try {
      j = JSON.parse(res.body.toString("utf8")) as typeof j;
    } catch {
      throw new Error(`follower ${l.node} answered ${res.status} without JSON`);
    }
    if (res.status === 200 && Number.isSafeInteger(j.end)) return { end: j.end as number };
    if (res.status === 409 && j.refused === "stale") {
      l.stale = true;
      this.log.warn({ follower: l.node, epoch: j.epoch }, "a follower has heard of a newer epoch: this leader was deposed; it stops shipping to it");
      return undefined;
    }
    if (res.status === 409 && j.refused === "rejoin") {
      l.joined = false;
      return undefined;
    }
    throw new Error(`follower ${l.node} answered ${res.status}: ${j.error?.message ?? res.body.toString("utf8").slice(0, 200)}`);
  }

  /** Each follower's lag behind this leader, for metrics. */
  lag(): { follower: string; records: number; ms: number; inSync: boolean; acksPending: number }[] {
    const end = this.inner.endOffset;
    const now = this.c.clock.monoMs();
    const inSync = this.c.inSync();
    return [...this.links.values()].map((l) => ({
      follower: l.node,
      records: Math.max(0, end - l.match),
      // How long since it was last caught up with the leader (0 while it holds everything).
      ms: l.match >= end ? 0 : now - l.caughtUpMono,
      inSync: inSync.includes(l.node),
      // Acks taken here that have not reached the follower yet (buffered, queued or in flight).
      acksPending: this.ackBuf.length + this.deliveryBuf.length + l.ackQueued,
    }));
  }

  // ---- acks ------------------------------------------------------------------------------------

  noteAck(offset: number): void {
    this.ackBuf.push(offset);
  }

  noteDeliveries(offset: number, count: number, deadLetter: boolean): void {
    this.deliveryBuf.push([offset, count, deadLetter ? 1 : 0]);
  }

  noteFloor(floor: number): void {
    if (floor > this.ackFloor) this.ackFloor = floor;
  }

  /**
   * A follower that joins gets the leader's whole ack state (floor and acked ranges), so acks it
   * lost in a crash before its ack log synced them come back, rather than only those acked later.
   */
  private sendAckState(l: Link): void {
    if (this.c.acksNotShipped === true || l.stale) return;
    const { floor, ranges } = this.acks.settledRanges(REPLICATION_LIMITS.joinAckRangesMax);
    l.ackQueue.unshift({ floor, acked: [], ranges, cursors: [] });
    l.ackQueued += ranges.length;
    void this.sendAcks(l);
  }

  noteCursor(u: CursorUpdate): void {
    this.cursorsDirty.set(u.child, u);
  }

  /** The copy cursors wrapped so that their changes ship with the acks. */
  wrapCursors(c: CopyCursors): CopyCursors {
    return new ShippingCursors(c, this);
  }

  private shipAcks(): void {
    if (this.ackBuf.length === 0 && this.deliveryBuf.length === 0 && this.ackFloor === this.ackFloorShipped && this.cursorsDirty.size === 0) return;
    if (this.c.acksNotShipped === true) {
      this.ackBuf = []; // seeded bug: acks stay on the leader
      this.deliveryBuf = [];
      this.cursorsDirty.clear();
      return;
    }
    const batch: AckBatch = { floor: this.ackFloor, acked: this.ackBuf, cursors: [...this.cursorsDirty.values()], deliveries: this.deliveryBuf };
    this.ackBuf = [];
    this.deliveryBuf = [];
    this.cursorsDirty.clear();
    this.ackFloorShipped = this.ackFloor;
    for (const l of this.links.values()) {
      if (l.stale) continue;
      l.ackQueue.push(batch);
      l.ackQueued += batch.acked.length + batch.deliveries!.length;
      while (l.ackQueued > REPLICATION_LIMITS.ackQueueOffsetsMax && l.ackQueue.length > 1) {
        const dropped = l.ackQueue.shift()!;
        l.ackQueued -= dropped.acked.length + (dropped.ranges?.length ?? 0) + (dropped.deliveries?.length ?? 0);
        this.log.warn({ follower: l.node, dropped: dropped.acked.length }, "acks for an unreachable follower over their bound were dropped; a failover to it would redeliver those messages");
      }
      void this.sendAcks(l);
    }
  }

  private async sendAcks(l: Link): Promise<void> {
    if (l.ackSending) return;
    l.ackSending = true;
    try {
      while (l.ackQueue.length > 0 && !l.stale) {
        const take: AckBatch[] = [];
        let n = 0;
        const size = (b: AckBatch): number => b.acked.length + (b.ranges?.length ?? 0) + (b.deliveries?.length ?? 0);
        while (l.ackQueue.length > 0 && (take.length === 0 || n + size(l.ackQueue[0]!) <= REPLICATION_LIMITS.ackShipOffsetsMax)) {
          const b = l.ackQueue.shift()!;
          take.push(b);
          n += size(b);
        }
        // Later cursor updates of a child replace earlier ones.
        const cursors = new Map<string, CursorUpdate>();
        for (const b of take) for (const u of b.cursors) cursors.set(u.child, u);
        const floor = Math.max(...take.map((b) => b.floor));
        const body = JSON.stringify({ floor, acked: take.flatMap((b) => b.acked), ranges: take.flatMap((b) => b.ranges ?? []), cursors: [...cursors.values()], deliveries: take.flatMap((b) => b.deliveries ?? []) });
        try {
          const res = await this.c.send(l.node, { method: "POST", path: this.c.path("acks") + `?epoch=${this.c.epoch}`, headers: { "content-type": "application/json" }, body });
          if (res.status !== 200 && res.status !== 204) throw new Error(`answered ${res.status}`);
          l.ackQueued -= n;
        } catch {
          l.ackQueue.unshift(...take); // again on the next interval
          return;
        }
      }
    } finally {
      l.ackSending = false;
    }
  }
}

/** The leader's ack log: the partition's own, whose every ack is also queued for the followers. */
class ShippingAcks extends ForwardingAckLog {
  constructor(
    inner: AckLog,
    private readonly leader: ReplicatedLog,
  ) {
    super(inner);
  }
  override ack(offset: number): void {
    if (this.inner.isAcked(offset)) return;
    this.inner.ack(offset);
    this.leader.noteAck(offset);
  }
  override raiseFloor(offset: number): void {
    this.inner.raiseFloor(offset);
    this.leader.noteFloor(offset);
  }
  /** Delivery counts ship with the acks (SPEC "Replicated partitions": consumer state follows the log). */
  override recordDeliveries(offset: number, count: number, deadLetter = false): void {
    this.inner.recordDeliveries(offset, count, deadLetter);
    this.leader.noteDeliveries(offset, count, deadLetter);
  }
}

/** The leader's copy cursors: the partition's own, whose every change also ships to the followers. */
class ShippingCursors implements CopyCursors {
  constructor(
    private readonly inner: CopyCursors,
    private readonly leader: ReplicatedLog,
  ) {}
  private note(child: string): void {
    const next = this.inner.get(child);
    this.leader.noteCursor({ child, next: next ?? null, stored: [...this.inner.stored(child)] });
  }
  get(child: string): number | undefined {
    return this.inner.get(child);
  }
  advance(child: string, next: number): void {
    this.inner.advance(child, next);
    this.note(child);
  }
  stored(child: string): readonly number[] {
    return this.inner.stored(child);
  }
  setStored(child: string, offsets: readonly number[]): void {
    this.inner.setStored(child, offsets);
    this.note(child);
  }
  async setNow(child: string, next: number | undefined): Promise<void> {
    await this.inner.setNow(child, next);
    this.note(child);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x) => b.includes(x));
}
