// How the cached view (./view.ts) is brought up to date: one serial queue of refreshes. A
// refresh is requested by a notification (./listen.ts), by a heartbeat that read the membership
// (./lease.ts), by this node's own write before it returns (read-your-writes on the node that
// wrote), by the periodic full resync (every resyncIntervalMs, which repairs whatever a dropped
// LISTEN connection missed) and by a node that must see another node's write (refresh(targets)).
//
// Requests that arrive while a read runs are merged into the next batch, and each batch's read
// starts after the previous one was applied, so the view never goes back in time. A batch is read
// in one repeatable-read snapshot. Past refreshTargetsMax named entities a batch collapses into
// one full resync. Heartbeat rows are applied only when no fresher read of the nodes is in the
// same batch, and never over a newer version.

import type { Clock } from "../../platform/clock.js";
import type { Scheduler, Timer } from "../../platform/scheduler.js";
import { ControlPlaneUnavailable } from "../errors.js";
import type { Connections } from "./connections.js";
import type { ChangeEvent, PartitionPlacement } from "./model.js";
import { CONTROL_PLANE_LIMITS, type Warn } from "./options.js";
import { NODE_COLUMNS, PARTITION_COLUMNS, TOPIC_COLUMNS, USER_COLUMNS, toNode, toPlacement, toTopic, toUser, type NodeRow, type PartitionRow, type TopicRow, type UserRow } from "./rows.js";
import type { CachedView } from "./view.js";

export interface RefreshRequest {
  full?: boolean;
  nodes?: boolean;
  topics?: Iterable<string>;
  users?: Iterable<string>;
  /** Membership rows read by a heartbeat, applied when nothing fresher is being read. */
  nodeRows?: NodeRow[];
}

interface RefreshBatch {
  full: boolean;
  nodes: boolean;
  topics: Set<string>;
  users: Set<string>;
  nodeRows: NodeRow[] | undefined;
  waiters: { resolve: () => void; reject: (e: unknown) => void }[];
}

function emptyBatch(): RefreshBatch {
  return { full: false, nodes: false, topics: new Set(), users: new Set(), nodeRows: undefined, waiters: [] };
}

/** Notification payloads: `topic:NAME`, `user:NAME`, `nodes`; anything else asks for a full resync. */
export function parseTargets(payloads: string[]): RefreshRequest {
  const req = { full: false, nodes: false, topics: new Set<string>(), users: new Set<string>() };
  for (const p of payloads) {
    if (p.startsWith("topic:")) req.topics.add(p.slice(6));
    else if (p.startsWith("user:")) req.users.add(p.slice(5));
    else if (p === "nodes") req.nodes = true;
    else req.full = true;
  }
  return req;
}

export interface RefreshDeps {
  db: Connections;
  view: CachedView;
  clock: Clock;
  scheduler: Scheduler;
  warn: Warn;
  /** Reports the view's changes to the onChange listeners. */
  emit(events: ChangeEvent[]): void;
}

export class RefreshQueue {
  /** Monotonic time of the last full resync that was applied. */
  lastResyncOkMono: number | undefined;

  private pending: RefreshBatch = emptyBatch();
  private refreshing = false;
  private stopped = false;
  private resyncTimer: Timer | undefined;

  constructor(private readonly d: RefreshDeps) {}

  /** Resolves once what was asked for has been read and applied (in a batch that started after the call). */
  request(req: RefreshRequest): Promise<void> {
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
      if (!this.refreshing) void this.run();
    });
  }

  /** A full resync every resyncIntervalMs from now on; a failed one leaves the view as it was. */
  startPeriodicResync(intervalMs: number): void {
    this.resyncTimer = this.d.scheduler.every(intervalMs, () => {
      this.request({ full: true }).catch((e: Error) => this.d.warn("resync", { err: e.message }, "control-plane resync failed; serving the cached view"));
    });
  }

  /** Stops the periodic resync; every refresh from now on fails with ControlPlaneUnavailable. */
  stop(): void {
    this.stopped = true;
    this.resyncTimer?.cancel();
  }

  private async run(): Promise<void> {
    this.refreshing = true;
    try {
      while (this.pending.waiters.length > 0) {
        const batch = this.pending;
        this.pending = emptyBatch();
        try {
          if (this.stopped) throw new ControlPlaneUnavailable(false, new Error("the control plane client is closed"));
          this.d.emit(await this.readAndApply(batch));
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
    const { view } = this.d;
    const events: ChangeEvent[] = [];
    const readNodes = b.full || b.nodes;
    const topics = b.full ? undefined : [...b.topics];
    const users = b.full ? undefined : [...b.users];
    if (!readNodes && topics?.length === 0 && users?.length === 0) {
      if (b.nodeRows !== undefined) view.applyNodes(b.nodeRows.map(toNode), false, events);
      return events;
    }
    const snap = await this.d.db.tx(
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
    if (snap.nodes !== undefined) view.applyNodes(snap.nodes.map(toNode), true, events);
    else if (b.nodeRows !== undefined) view.applyNodes(b.nodeRows.map(toNode), false, events);

    const partsByTopic = new Map<string, PartitionPlacement[]>();
    for (const r of snap.prows) {
      let a = partsByTopic.get(r.topic);
      if (a === undefined) partsByTopic.set(r.topic, (a = []));
      a.push(toPlacement(r));
    }
    const topicRows = new Map(snap.trows.map((r) => [r.name, toTopic(r)]));
    const topicNames = topics ?? [...new Set([...view.topicNames(), ...topicRows.keys()])];
    for (const name of topicNames) view.applyTopic(name, topicRows.get(name), partsByTopic.get(name) ?? [], events);

    const userRows = new Map(snap.urows.map((r) => [r.name, toUser(r)]));
    const userNames = users ?? [...new Set([...view.userNames(), ...userRows.keys()])];
    for (const name of userNames) view.applyUser(name, userRows.get(name), events);
    if (b.full) this.lastResyncOkMono = this.d.clock.monoMs();
    return events;
  }
}
