// A small simulated broker that keeps the delivery contract, and concurrent clients that record
// a v1 history of it: the source of the property tests' "always valid" histories and of the
// benchmark's million-line history. Not used by the checker itself.
//
// Discrete-event simulation over a virtual clock (ns). Every request has an invoke time, an effect
// time on the broker (invoke + network) and a response time (effect + network), so operations of
// different processes overlap as they do on a real network. The broker model:
//   - topic "t" with `partitions` partitions spread over `nodes` nodes, a fan-out child "t.fan"
//     (its own visibility timeout) and a delay child "t.delay", and an unrelated topic "u";
//   - a 202 only for a committed message, naming the partition's owner; refusals (429) store
//     nothing; children get their copy at commit, a delay child's becomes visible `delayMs` later;
//   - a kill of a parent partition's owner makes its copier copy again, when the node is back, the
//     copies it made within ack_flush_ms before the kill (a power loss: ack_sync_ms), as a copier
//     whose cursors had not reached the disk does: second copies the checker must explain;
//   - leases with the visibility timeout, lapsing exactly at expiry; ack / extend / nack answer 204
//     only for the live handle, else 410;
//   - acks reach the OS at the next ack_flush_ms tick and the disk at the next ack_sync_ms tick
//     after that; a kill forgets unflushed acks, a power loss unsynced ones, a terminate none;
//     every restart drops the node's leases and gets a new boot id;
//   - messages coming back (lapse, nack, restart, forgotten ack) are served before the backlog;
//   - responses get lost at a small rate (recorded as info), and every response in flight when its
//     node dies is lost; the final drain has no faults and no lost responses, waits out every
//     lease, and ends with one empty consume per topic once every message is acked.
//   - with `idempotent`, producers are idempotent (SPEC "Idempotent producers"): each produce
//     carries the producer's id and its next sequence, a lost answer is re-sent with the same
//     msg, producer and sequence (up to a few times), and the broker answers a stored
//     (producer, sequence) with its original partition and offset and `duplicate: true`; its
//     dedupe state is part of the log, so no restart forgets it.
//   - with `deadLetters`, topic "t" has max_deliveries and the dead-letter topic "t.dlq" (SPEC
//     "Dead letters"): a tenth of its messages are failed on purpose (nacked at every delivery),
//     a few are acked with dead_letter=true; a lease of "t" that ends (a lapse, a nack) with the
//     count at max_deliveries, or a dead-letter ack, moves the message: its copy (with its origin)
//     to "t.dlq", then the settle, an ack-log write a kill may forget (the message is moved
//     again: two copies). Counts are written when a lease ends, on the acks' schedule: a kill
//     forgets those of live leases and of lease ends not yet flushed (synced, for a power loss).
// A `bug` option breaks one rule on purpose (see SimBug). Limits: everything is in memory; the
// benchmark streams its history to a file through the HistoryWriter instead of keeping events.

import type { ConfigValue, EventType, OpName } from "../history/types.js";
import { HistoryWriter } from "../history/writer.js";
import { MinHeap } from "../../platform/heap.js";

/**
 * Bugs the simulated broker can be given, to show the checker catching each (the model-level
 * twin of `narad verify calibrate`):
 *   ack-not-persisted  a restart forgets every ack, flushed or not       → duplicate-after-ack
 *   early-lapse        leases lapse after a third of the timeout          → double-lease
 *   nack-drops         a nack settles the message instead of freeing it   → stranded
 *   stale-handle       a replaced handle is still accepted                → double-lease
 *   refused-stored     a 429 that stores the message anyway               → refused-delivered
 *   replay-skip        a replay leaves out one offset                     → skip
 *   redeliver-acked    an acked message comes back without any fault      → duplicate-after-ack
 *   lose-message       a committed message is never handed out            → lost
 *   recopy-on-terminate  a graceful stop makes the copier copy again too  → duplicate-after-ack
 *   dedupe-forgets     (with idempotent) a restart of the owner forgets the dedupe state of
 *                      its partitions, so a re-send after it is stored again → duplicate-produce
 *   dead-letter-early  (with deadLetters) a message moves when its (max - 1)-th lease ends
 *                                                                            → dead-lettered-early
 *   counts-forgotten   (with deadLetters) every restart sets the counts of the node's messages
 *                      to 0                                          → delivered-after-dead-letter
 */
export type SimBug =
  | "ack-not-persisted"
  | "early-lapse"
  | "nack-drops"
  | "stale-handle"
  | "refused-stored"
  | "replay-skip"
  | "redeliver-acked"
  | "lose-message"
  | "recopy-on-terminate"
  | "dedupe-forgets"
  | "dead-letter-early"
  | "counts-forgotten";

export interface SimOptions {
  seed: number;
  /** A seeded bug (none by default: the broker keeps the contract). */
  bug?: SimBug;
  producers?: number;
  consumers?: number;
  /** Length of the main phase (before the drain), in ms of virtual time. */
  durationMs?: number;
  /** End the main phase once this many lines were recorded (the benchmark sizes a run by it). */
  mainPhaseEventsMax?: number;
  visibilityTimeoutMs?: number;
  ackFlushMs?: number;
  ackSyncMs?: number;
  nodes?: number;
  partitions?: number;
  delayMs?: number;
  /** Kill / power-loss / terminate a node every so often, then start it again. */
  faults?: boolean;
  faultEveryMs?: number;
  replays?: boolean;
  lostResponseRate?: number;
  refuseRate?: number;
  lapseRate?: number;
  nackRate?: number;
  extendRate?: number;
  /** Share of deliveries acked after half the visibility timeout (legal, and slow). */
  slowAckRate?: number;
  /** Idempotent producers: produces carry producer and sequence, lost answers are re-sent. */
  idempotent?: boolean;
  /** Dead letters on topic "t" (max_deliveries 3, dead-letter topic "t.dlq"). */
  deadLetters?: boolean;
}

export interface SimSink {
  config(value: ConfigValue): void;
  event(process: string, type: EventType, f: OpName, value: object, timeNs: number): void;
}

export interface SimEvent {
  process: string;
  type: EventType;
  f: OpName;
  value: Record<string, unknown>;
  timeNs: number;
}

/** A seeded PRNG (mulberry32): the same seed replays the same run. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MS = 1_000_000;

const AVAILABLE = 0;
const LEASED = 1;
const ACKED = 2;

interface Entry {
  topic: number;
  partition: number;
  offset: number;
  msg: string;
  visibleAtNs: number;
  state: number;
  handle: string | null;
  expiryNs: number;
  ackedAtNs: number;
  /** Every handle it was given (the stale-handle bug honours them all). */
  handles?: Set<string>;
  /** Dead letters: the broker's count of its deliveries, the count last written, failed on purpose, its origin (a copy on "t.dlq"). */
  deliveries?: number;
  written?: number;
  poison?: boolean;
  origin?: { topic: string; partition: number; offset: number; deliveries: number };
}

interface Part {
  topic: number;
  index: number;
  node: number;
  log: Entry[];
  /** Entries that may be available, oldest first; stale ones are skipped when popped. */
  queue: Entry[];
  queueHead: number;
  /** Entries available again after a lease ended; served before the queue. */
  retry: Entry[];
  /** Lease expiries by expiryNs (an entry whose expiry moved since is skipped when popped). */
  leases: MinHeap<Entry>;
  leased: Set<Entry>;
  /** Delay-child copies not yet visible, by visibleAtNs. */
  hidden: MinHeap<Entry>;
}

interface Node {
  name: string;
  up: boolean;
  bootSeq: number;
  boot: string;
  /** Acks not yet known to be synced: [ackNs, entry]. */
  recentAcks: Array<[number, Entry]>;
  /** Child copies its copier made lately (of parent partitions it owns): [copyNs, msg]. */
  recentCopies: Array<[number, string]>;
  /** Dead letters: delivery counts written lately, [writeNs, entry, value before]. */
  recentCounts?: Array<[number, Entry, number]>;
}

/**
 * Event queue of the simulation: callbacks ordered by (time, scheduling order), so a seed always
 * plays the same run. The heap holds each distinct due time once, with the callbacks due then in
 * the order they were scheduled (the heap alone breaks ties in no particular order).
 */
class Agenda {
  private readonly times = new MinHeap<DueAt>();
  private readonly dueAt = new Map<number, DueAt>();
  nowNs = 0;
  at(timeNs: number, fn: () => void): void {
    let due = this.dueAt.get(timeNs);
    if (due === undefined) {
      due = { fns: [], next: 0 };
      this.dueAt.set(timeNs, due);
      this.times.push(timeNs, due);
    }
    due.fns.push(fn);
  }
  /** Runs up to `steps` callbacks; false once nothing is left to run. */
  runSlice(steps: number): boolean {
    const times = this.times;
    for (let n = 0; n < steps && times.size > 0; n++) {
      const timeNs = times.peekKey();
      const due = times.peekValue()!;
      const fn = due.fns[due.next++]!;
      // Retire the time before running: a callback may schedule more at this very time (they
      // run next, after this one) or earlier (they come out of the heap first).
      if (due.next === due.fns.length) {
        times.pop();
        this.dueAt.delete(timeNs);
      }
      this.nowNs = timeNs;
      fn();
    }
    return times.size > 0;
  }
}

interface DueAt {
  fns: Array<() => void>;
  /** The next of `fns` to run. */
  next: number;
}

/** A simulation in progress: run it in slices to let a file writer drain between them. */
export interface Simulation {
  runSlice(steps: number): boolean;
  /** How many times the seeded bug did something a correct broker would not have. */
  readonly bugTriggered: number;
}

/** Runs a whole simulation; without a sink, returns its events. */
export function simulate(options: SimOptions, sink?: SimSink): SimEvent[] {
  const out: SimEvent[] = [];
  const sim = startSimulation(
    options,
    sink ?? {
      config: () => {},
      event: (process, type, f, value, timeNs) => out.push({ process, type, f, value: value as Record<string, unknown>, timeNs }),
    },
  );
  while (sim.runSlice(1 << 20));
  return out;
}

export function startSimulation(options: SimOptions, sink: SimSink): Simulation {
  const rnd = prng(options.seed);
  const producers = options.producers ?? 2;
  const consumers = options.consumers ?? 3;
  const durationNs = (options.durationMs ?? 2000) * MS;
  const eventsMax = options.mainPhaseEventsMax ?? Infinity;
  const vtMs = options.visibilityTimeoutMs ?? 200;
  const flushMs = options.ackFlushMs ?? 100;
  const syncMs = options.ackSyncMs ?? 1000;
  const nNodes = options.nodes ?? 1;
  const nParts = options.partitions ?? 2;
  const delayMs = options.delayMs ?? 150;
  const faultsOn = options.faults ?? true;
  const faultEveryNs = (options.faultEveryMs ?? 700) * MS;
  const replaysOn = options.replays ?? true;
  const lostRate = options.lostResponseRate ?? 0.03;
  const refuseRate = options.refuseRate ?? 0.03;
  const lapseRate = options.lapseRate ?? 0.04;
  const nackRate = options.nackRate ?? 0.05;
  const extendRate = options.extendRate ?? 0.05;
  const slowRate = options.slowAckRate ?? 0.03;
  const idempotent = options.idempotent ?? false;
  /** Re-sends of one unanswered idempotent produce before the producer gives up on it. */
  const resendsMax = 8;
  /** The dedupe state: "producer/sequence" to where it was stored, per owner node (the bug clears one node's). */
  const dedupe: Array<Map<string, { part: number; offset: number }>> = [];
  const bug = options.bug;
  let bugTriggered = 0;

  const deadLettersOn = options.deadLetters ?? false;
  const maxDeliveries = 3;
  const topicNames = deadLettersOn ? ["t", "t.fan", "t.delay", "u", "t.dlq"] : ["t", "t.fan", "t.delay", "u"];
  const DLQ = 4;
  const T = 0;
  const FAN = 1;
  const DELAY = 2;
  const fanVtMs = vtMs * 2;
  const vtNsOf = (topic: number): number => (topic === FAN ? fanVtMs : vtMs) * MS;
  const config: ConfigValue = {
    ack_flush_ms: flushMs,
    ack_sync_ms: syncMs,
    visibility_timeout_ms: vtMs,
    topics: {
      t: { partitions: nParts, ...(deadLettersOn ? { max_deliveries: maxDeliveries, dead_letter_topic: "t.dlq" } : {}) },
      "t.fan": { partitions: 1, visibility_timeout_ms: fanVtMs },
      "t.delay": { partitions: 1 },
      u: { partitions: 1 },
      ...(deadLettersOn ? { "t.dlq": { partitions: 1 } } : {}),
    },
    children: {
      t: [
        { topic: "t.fan", kind: "fanout" },
        { topic: "t.delay", kind: "delay", delay_ms: delayMs },
      ],
    },
  };

  let events = 1;
  const emit = (process: string, type: EventType, f: OpName, value: Record<string, unknown>): void => {
    events++;
    sink.event(process, type, f, value, agenda.nowNs);
  };
  sink.config(config);

  const agenda = new Agenda();
  const nodes: Node[] = [];
  for (let i = 0; i < nNodes; i++) nodes.push({ name: `n${i + 1}`, up: true, bootSeq: 0, boot: `n${i + 1}-b0`, recentAcks: [], recentCopies: [] });
  const parts: Part[][] = topicNames.map((_, topic) => {
    const n = topic === T ? nParts : 1;
    return Array.from({ length: n }, (_, index) => ({
      topic,
      index,
      // Children and "u" live on the first node; the parent's partitions spread over all of them.
      node: topic === T ? index % nNodes : 0,
      log: [],
      queue: [],
      queueHead: 0,
      retry: [],
      leases: new MinHeap<Entry>(),
      leased: new Set<Entry>(),
      hidden: new MinHeap<Entry>(),
    }));
  });
  const unacked = new Array<number>(topicNames.length).fill(0);
  let unackedTotal = 0;
  let draining = false;
  let producersBusy = 0;
  let handleSeq = 0;
  let msgSeq = 0;
  let rrPartition = 0;

  const lat = (): number => Math.round((0.3 + rnd() * 3) * MS);
  const think = (maxMs: number): number => Math.round(rnd() * maxMs * MS);
  const lost = (): boolean => !draining && rnd() < lostRate;
  const mainOver = (): boolean => agenda.nowNs >= durationNs || events >= eventsMax;
  let drainStartNs = -1;

  const makeAvailable = (p: Part, e: Entry): void => {
    e.state = AVAILABLE;
    e.handle = null;
    p.leased.delete(e);
    // Out of deliveries: moved to the dead-letter topic instead of coming back.
    if (deadLettersOn && e.topic === T) {
      const count = e.deliveries ?? 0;
      if (count >= maxDeliveries) return moveToDeadLetters(p, e);
      if (bug === "dead-letter-early" && count === maxDeliveries - 1) {
        bugTriggered++;
        return moveToDeadLetters(p, e);
      }
    }
    // Messages coming back (lapse, nack, restart) go ahead of the backlog, as many brokers do.
    p.retry.push(e);
  };

  /** A lease of "t" ended (a lapse, a nack, a dead-letter ack): its count is written, on the acks' schedule. */
  const writeCount = (p: Part, e: Entry): void => {
    if (!deadLettersOn || e.topic !== T) return;
    const node = nodes[p.node]!;
    (node.recentCounts ??= []).push([agenda.nowNs, e, e.written ?? 0]);
    e.written = e.deliveries ?? 0;
  };

  /** The copy (durable) on "t.dlq" with its origin, then the settle on "t": an ack a kill may forget. */
  const moveToDeadLetters = (p: Part, e: Entry): void => {
    const copy = commit(DLQ, 0, e.msg, agenda.nowNs);
    copy.origin = { topic: "t", partition: e.partition, offset: e.offset, deliveries: e.deliveries ?? 0 };
    e.state = ACKED;
    e.handle = null;
    e.ackedAtNs = agenda.nowNs;
    p.leased.delete(e);
    nodes[p.node]!.recentAcks.push([agenda.nowNs, e]);
    unacked[e.topic]!--;
    unackedTotal--;
  };

  /** Finds and leases an available, visible entry of a partition at time now. */
  const take = (p: Part, now: number): Entry | null => {
    while (p.hidden.peekKey() <= now) {
      const e = p.hidden.peekValue()!;
      p.hidden.pop();
      if (e.state === AVAILABLE) p.queue.push(e);
    }
    while (p.leases.peekKey() <= now) {
      const exp = p.leases.peekKey();
      const e = p.leases.peekValue()!;
      p.leases.pop();
      if (e.state === LEASED && e.expiryNs === exp) {
        if (bug === "early-lapse") bugTriggered++;
        writeCount(p, e);
        makeAvailable(p, e);
      }
    }
    while (p.retry.length > 0) {
      const e = p.retry.shift()!;
      if (e.state === AVAILABLE && e.visibleAtNs <= now) return e;
    }
    while (p.queueHead < p.queue.length) {
      const e = p.queue[p.queueHead++]!;
      if (e.state !== AVAILABLE || e.visibleAtNs > now) continue;
      if (p.queueHead > 4096 && p.queueHead * 2 > p.queue.length) {
        p.queue = p.queue.slice(p.queueHead);
        p.queueHead = 0;
      }
      return e;
    }
    return null;
  };

  /** Appends to a partition; a delay child's copy becomes visible `delayMs` after `committedNs` (default now). */
  const commit = (topic: number, partition: number, msg: string, now: number, committedNs = now): Entry => {
    const p = parts[topic]![partition]!;
    const e: Entry = {
      topic,
      partition,
      offset: p.log.length,
      msg,
      visibleAtNs: topic === DELAY ? Math.max(now, committedNs + delayMs * MS) : now,
      state: AVAILABLE,
      handle: null,
      expiryNs: 0,
      ackedAtNs: 0,
    };
    p.log.push(e);
    if (deadLettersOn && topic === T) {
      e.deliveries = 0;
      e.written = 0;
      e.poison = rnd() < 0.1;
    }
    if (bug === "lose-message" && topic === T && rnd() < 0.02) {
      // Stored, never handed out, and not counted as owed: the drain ends without it.
      bugTriggered++;
      e.state = ACKED;
      return e;
    }
    if (topic === DELAY) p.hidden.push(e.visibleAtNs, e);
    else p.queue.push(e);
    unacked[topic]!++;
    unackedTotal++;
    return e;
  };

  // ---- producers ----
  const producer = (name: string): void => {
    const producerId = `${name}-producer`;
    let sequence = 0;
    const step = (): void => {
      if (mainOver()) return;
      send(`m${msgSeq++}`, sequence++, 0);
    };
    const send = (msg: string, seq: number, resends: number): void => {
      emit(name, "invoke", "produce", idempotent ? { topic: "t", msg, producer: producerId, sequence: seq } : { topic: "t", msg });
      producersBusy++;
      const effectAt = agenda.nowNs + lat();
      agenda.at(effectAt, () => {
        // Keyless produces go round-robin over the partitions whose owner is up.
        let chosen: Part | null = null;
        for (let k = 0; k < nParts; k++) {
          const p = parts[T]![(rrPartition + k) % nParts]!;
          if (nodes[p.node]!.up) {
            chosen = p;
            rrPartition = (rrPartition + k + 1) % nParts;
            break;
          }
        }
        const respond = (type: EventType, value: Record<string, unknown>, node: Node | null, bootSeq: number): void => {
          agenda.at(agenda.nowNs + lat(), () => {
            producersBusy--;
            const unanswered = node !== null && (node.bootSeq !== bootSeq || !node.up || lost());
            if (unanswered) emit(name, "info", "produce", { error: "timeout" });
            else emit(name, type, "produce", value);
            // An idempotent producer re-sends an ambiguous produce with the same sequence, and one
            // its owner could not take yet (a 503 while it restarts), until it is answered.
            if (idempotent && (unanswered || (type === "fail" && value["status"] === 503)) && resends < resendsMax) {
              return agenda.at(agenda.nowNs + think(30), () => send(msg, seq, resends + 1));
            }
            agenda.at(agenda.nowNs + think(5), step);
          });
        };
        const key = `${producerId}/${seq}`;
        if (idempotent) {
          // The partition comes from (producer, sequence): a re-send reaches the same one, and
          // is never routed around its owner.
          const p = parts[T]![seq % nParts]!;
          chosen = nodes[p.node]!.up ? p : null;
          const stored = chosen !== null ? dedupe[chosen.node]?.get(key) : undefined;
          if (stored !== undefined) {
            const node = nodes[chosen!.node]!;
            return respond("ok", { partition: stored.part, offset: stored.offset, status: 202, duplicate: true, node: node.name, boot: node.boot }, node, node.bootSeq);
          }
        }
        if (chosen === null) return respond("fail", { status: 503 }, null, 0);
        const node = nodes[chosen.node]!;
        if (rnd() < refuseRate) {
          if (bug === "refused-stored") {
            bugTriggered++;
            commit(T, chosen.index, msg, agenda.nowNs);
            commit(FAN, 0, msg, agenda.nowNs);
            commit(DELAY, 0, msg, agenda.nowNs);
          }
          return respond("fail", { status: 429 }, node, node.bootSeq);
        }
        const e = commit(T, chosen.index, msg, agenda.nowNs);
        commit(FAN, 0, msg, agenda.nowNs);
        commit(DELAY, 0, msg, agenda.nowNs);
        node.recentCopies.push([agenda.nowNs, msg]);
        if (idempotent) (dedupe[chosen.node] ??= new Map()).set(key, { part: chosen.index, offset: e.offset });
        respond("ok", { partition: chosen.index, offset: e.offset, status: 202, node: node.name, boot: node.boot }, node, node.bootSeq);
      });
    };
    agenda.at(think(3), step);
  };

  // ---- consumers ----
  const consumer = (name: string, index: number): void => {
    let finalTopic = -1;
    const next = (delayNs: number): void => agenda.at(agenda.nowNs + delayNs, step);

    const handleOp = (f: "ack" | "extend" | "nack" | "dead-letter", e: Entry, handle: string, then: () => void): void => {
      const topic = topicNames[e.topic]!;
      emit(name, "invoke", f, { topic, msg: e.msg, delivery: handle });
      agenda.at(agenda.nowNs + lat(), () => {
        const p = parts[e.topic]![e.partition]!;
        const node = nodes[p.node]!;
        const bootSeq = node.bootSeq;
        let value: Record<string, unknown>;
        let type: EventType;
        if (!node.up) {
          type = "info";
          value = { error: "ECONNREFUSED" };
        } else if (
          bug === "stale-handle" &&
          f === "ack" &&
          (e.state === LEASED || e.state === ACKED) &&
          e.handle !== handle &&
          e.handles?.has(handle) === true
        ) {
          // The bug: an ack with a replaced handle is accepted (and settles the message if its new
          // holder has not yet).
          bugTriggered++;
          type = "ok";
          value = { status: 204 };
          if (e.state === LEASED) {
            e.state = ACKED;
            e.handle = null;
            e.ackedAtNs = agenda.nowNs;
            p.leased.delete(e);
            node.recentAcks.push([agenda.nowNs, e]);
            unacked[e.topic]!--;
            unackedTotal--;
          }
        } else if (e.state === LEASED && e.handle === handle && agenda.nowNs < e.expiryNs) {
          type = "ok";
          value = { status: 204 };
          if (f === "ack" || (f === "nack" && bug === "nack-drops")) {
            if (f === "nack") bugTriggered++;
            e.state = ACKED;
            e.handle = null;
            e.ackedAtNs = agenda.nowNs;
            p.leased.delete(e);
            node.recentAcks.push([agenda.nowNs, e]);
            unacked[e.topic]!--;
            unackedTotal--;
            if (bug === "redeliver-acked" && f === "ack" && rnd() < 0.02) {
              // The bug: the message comes back shortly after its ack, with no fault at all.
              bugTriggered++;
              agenda.at(agenda.nowNs + 5 * MS, () => {
                if (e.state !== ACKED || !node.up) return;
                makeAvailable(p, e);
                unacked[e.topic]!++;
                unackedTotal++;
              });
            }
          } else if (f === "extend") {
            e.expiryNs = agenda.nowNs + vtNsOf(e.topic);
            p.leases.push(e.expiryNs, e);
          } else if (f === "dead-letter") {
            writeCount(p, e);
            moveToDeadLetters(p, e);
          } else {
            writeCount(p, e);
            makeAvailable(p, e);
          }
        } else {
          type = "info";
          value = { status: 410 };
        }
        agenda.at(agenda.nowNs + lat(), () => {
          if (type === "ok" || value["status"] === 410) {
            if (node.bootSeq !== bootSeq || !node.up || lost()) {
              type = "info";
              value = { error: "timeout" };
            }
          }
          emit(name, type, f, value);
          then();
        });
      });
    };

    const afterDelivery = (e: Entry, handle: string): void => {
      const r = rnd();
      const vt = vtNsOf(e.topic);
      if (draining) {
        agenda.at(agenda.nowNs + think(2), () => handleOp("ack", e, handle, () => next(think(2))));
      } else if (e.poison === true) {
        // Failed on purpose at every delivery, until the broker moves it: held a quarter of the
        // lease first, as the dead-letters workload does, so faults meet such messages between
        // deliveries with their counts written.
        agenda.at(agenda.nowNs + Math.round(vt * 0.25), () => handleOp("nack", e, handle, () => next(think(3))));
      } else if (deadLettersOn && e.topic === T && r > 0.97) {
        agenda.at(agenda.nowNs + think(3), () => handleOp("dead-letter", e, handle, () => next(think(3))));
      } else if (r < nackRate) {
        agenda.at(agenda.nowNs + think(3), () => handleOp("nack", e, handle, () => next(think(3))));
      } else if (r < nackRate + extendRate) {
        agenda.at(agenda.nowNs + Math.round(vt * 0.6), () =>
          handleOp("extend", e, handle, () => agenda.at(agenda.nowNs + Math.round(vt * 0.6), () => handleOp("ack", e, handle, () => next(think(3))))),
        );
      } else if (r < nackRate + extendRate + lapseRate) {
        // A slow handler: the lease lapses before the ack, which then (usually) answers 410.
        agenda.at(agenda.nowNs + Math.round(vt * (1.1 + rnd() * 0.5)), () => handleOp("ack", e, handle, () => next(think(3))));
      } else if (r < nackRate + extendRate + lapseRate + 0.01) {
        next(think(3)); // abandoned: it lapses and comes back to someone
      } else if (r < nackRate + extendRate + lapseRate + 0.01 + slowRate) {
        // A slow handler that still acks well within the lease.
        agenda.at(agenda.nowNs + Math.round(vt * 0.5), () => handleOp("ack", e, handle, () => next(think(3))));
      } else {
        agenda.at(agenda.nowNs + think(3), () => handleOp("ack", e, handle, () => next(think(3))));
      }
    };

    const consume = (topic: number): void => {
      const tname = topicNames[topic]!;
      emit(name, "invoke", "consume", { topic: tname });
      agenda.at(agenda.nowNs + lat(), () => {
        const ps = parts[topic]!;
        const start = Math.floor(rnd() * ps.length);
        let anyUp = false;
        let got: Entry | null = null;
        for (let k = 0; k < ps.length && got === null; k++) {
          const p = ps[(start + k) % ps.length]!;
          if (!nodes[p.node]!.up) continue;
          anyUp = true;
          got = take(p, agenda.nowNs);
        }
        if (!anyUp) {
          agenda.at(agenda.nowNs + lat(), () => {
            emit(name, "info", "consume", { error: "ECONNREFUSED" });
            next(think(10));
          });
          return;
        }
        if (got === null) {
          agenda.at(agenda.nowNs + lat(), () => {
            emit(name, "ok", "consume", { topic: tname, msg: null });
            next(draining ? 20 * MS : think(10));
          });
          return;
        }
        const e = got;
        const p = parts[topic]![e.partition]!;
        const node = nodes[p.node]!;
        const handle = `h${handleSeq++}`;
        e.state = LEASED;
        e.handle = handle;
        if (e.deliveries !== undefined) e.deliveries++;
        const count = e.deliveries ?? 1;
        e.expiryNs = agenda.nowNs + (bug === "early-lapse" ? Math.round(vtNsOf(topic) / 3) : vtNsOf(topic));
        if (bug === "stale-handle") (e.handles ??= new Set()).add(handle);
        p.leased.add(e);
        p.leases.push(e.expiryNs, e);
        const bootSeq = node.bootSeq;
        const boot = node.boot;
        agenda.at(agenda.nowNs + lat(), () => {
          if (node.bootSeq !== bootSeq || !node.up || lost()) {
            emit(name, "info", "consume", { error: "timeout" });
            next(think(5));
            return;
          }
          emit(name, "ok", "consume", {
            topic: tname,
            msg: e.msg,
            partition: e.partition,
            offset: e.offset,
            delivery: handle,
            delivery_count: count,
            node: node.name,
            boot,
            ...(e.origin !== undefined ? { origin: e.origin } : {}),
          });
          afterDelivery(e, handle);
        });
      });
    };

    const replay = (): void => {
      const p = parts[T]![Math.floor(rnd() * nParts)]!;
      const from = Math.floor(rnd() * (p.log.length + 1));
      emit(name, "invoke", "replay", { topic: "t", partition: p.index, offset: from });
      agenda.at(agenda.nowNs + lat(), () => {
        const node = nodes[p.node]!;
        const up = node.up;
        const msgs = up ? p.log.slice(from, from + 20).map((e) => [e.offset, e.msg]) : [];
        if (bug === "replay-skip" && msgs.length >= 3) {
          bugTriggered++;
          msgs.splice(1, 1);
        }
        const bootSeq = node.bootSeq;
        agenda.at(agenda.nowNs + lat(), () => {
          if (!up || node.bootSeq !== bootSeq || !node.up || lost()) emit(name, "info", "replay", { error: "timeout" });
          else emit(name, "ok", "replay", { msgs });
          next(think(5));
        });
      });
    };

    const step = (): void => {
      if (mainOver() && !draining) {
        draining = true;
        drainStartNs = agenda.nowNs;
      }
      if (!draining) {
        if (replaysOn && rnd() < 0.03) return replay();
        const r = rnd();
        // Every message owes one delivery on each of the three paths: poll them alike.
        if (deadLettersOn && r > 0.9) return consume(DLQ);
        return consume(r < 1 / 3 ? T : r < 2 / 3 ? FAN : DELAY);
      }
      // The drain: take whatever is left; once nothing is, one final empty consume per topic.
      // Wait out every lease first, so an ambiguous consume of the main phase cannot still hold one.
      const settled =
        unackedTotal === 0 && producersBusy === 0 && nodes.every((n) => n.up) && agenda.nowNs >= drainStartNs + (fanVtMs + 100) * MS;
      if (!settled) {
        const live = (deadLettersOn ? [T, FAN, DELAY, DLQ] : [T, FAN, DELAY]).filter((t) => unacked[t]! > 0);
        if (live.length === 0) return next(20 * MS);
        return consume(live[Math.floor(rnd() * live.length)]!);
      }
      // Consumer 0 does the final empties, one topic after another.
      if (index !== 0) return;
      finalTopic++;
      const finals = deadLettersOn ? [T, FAN, DELAY, DLQ] : [T, FAN, DELAY];
      if (finalTopic < finals.length) consume(finals[finalTopic]!);
    };
    agenda.at(think(3), step);
  };

  // ---- nemesis ----
  const nemesis = (): void => {
    const kinds = ["kill", "power-loss", "terminate"] as const;
    const step = (): void => {
      if (mainOver()) return;
      const node = nodes[Math.floor(rnd() * nNodes)]!;
      const kind = kinds[Math.floor(rnd() * kinds.length)]!;
      emit("nemesis", "invoke", "fault", { kind, node: node.name });
      agenda.at(agenda.nowNs + lat(), () => {
        const now = agenda.nowNs;
        node.up = false;
        // Counts not yet written (kill) or synced (power loss) go, and those of live leases (a
        // count is written when its lease ends); a terminate writes and syncs them all.
        if (deadLettersOn && kind !== "terminate") {
          const writes = node.recentCounts ?? [];
          for (let i = writes.length - 1; i >= 0; i--) {
            const [writeNs, e, before] = writes[i]!;
            const flushedNs = (Math.floor(writeNs / (flushMs * MS)) + 1) * flushMs * MS;
            const syncedNs = (Math.floor(flushedNs / (syncMs * MS)) + 1) * syncMs * MS;
            if (kind === "kill" ? flushedNs > now : syncedNs > now) e.written = before;
          }
          for (const p of parts[T]!) if (nodes[p.node] === node) for (const e of p.log) e.deliveries = e.written;
        } else if (deadLettersOn) {
          for (const p of parts[T]!) if (nodes[p.node] === node) for (const e of p.leased) writeCount(p, e);
        }
        node.recentCounts = [];
        if (bug === "counts-forgotten") {
          for (const p of parts[T]!) {
            if (nodes[p.node] !== node) continue;
            for (const e of p.log) {
              if (e.state !== ACKED && (e.deliveries ?? 0) > 0) bugTriggered++;
              e.deliveries = 0;
              e.written = 0;
            }
          }
        }
        // The process dies: leases go, and acks not yet written (kill) or synced (power loss) too.
        for (const ps of parts) {
          for (const p of ps) {
            if (nodes[p.node] !== node) continue;
            for (const e of Array.from(p.leased)) makeAvailable(p, e);
          }
        }
        if (bug === "ack-not-persisted") {
          for (const ps of parts) {
            for (const p of ps) {
              if (nodes[p.node] !== node) continue;
              for (const e of p.log) {
                if (e.state !== ACKED) continue;
                bugTriggered++;
                makeAvailable(p, e);
                unacked[e.topic]!++;
                unackedTotal++;
              }
            }
          }
        } else if (kind !== "terminate") {
          for (const [ackNs, e] of node.recentAcks) {
            const flushedNs = (Math.floor(ackNs / (flushMs * MS)) + 1) * flushMs * MS;
            const syncedNs = (Math.floor(flushedNs / (syncMs * MS)) + 1) * syncMs * MS;
            const forgotten = kind === "kill" ? flushedNs > now : syncedNs > now;
            if (forgotten && e.state === ACKED && e.ackedAtNs === ackNs) {
              makeAvailable(parts[e.topic]![e.partition]!, e);
              unacked[e.topic]!++;
              unackedTotal++;
            }
          }
        }
        node.recentAcks = [];
        // Its copier's cursors lag its copies by up to a flush (a power loss: a sync): those
        // copies are made again when it is back. A terminate syncs the cursors first.
        const recopyWindowNs = (kind === "kill" ? flushMs : syncMs) * MS;
        const recopy = kind !== "terminate" || bug === "recopy-on-terminate" ? node.recentCopies.filter(([c]) => c > now - recopyWindowNs) : [];
        if (kind === "terminate" && recopy.length > 0) bugTriggered++;
        node.recentCopies = [];
        agenda.at(now + lat(), () => {
          emit("nemesis", "ok", "fault", { kind, node: node.name, ...(kind === "terminate" ? { exit_code: 0 } : { signal: "SIGKILL" }) });
          agenda.at(agenda.nowNs + Math.round((30 + rnd() * 200) * MS), () => {
            emit("nemesis", "invoke", "fault", { kind: "start", node: node.name });
            agenda.at(agenda.nowNs + Math.round((5 + rnd() * 30) * MS), () => {
              node.bootSeq++;
              node.boot = `${node.name}-b${node.bootSeq}`;
              node.up = true;
              if (bug === "dedupe-forgets" && (dedupe[nodes.indexOf(node)]?.size ?? 0) > 0) {
                bugTriggered++;
                dedupe[nodes.indexOf(node)]!.clear();
              }
              for (const [copiedNs, msg] of recopy) {
                commit(FAN, 0, msg, agenda.nowNs);
                commit(DELAY, 0, msg, agenda.nowNs, copiedNs);
              }
              agenda.at(agenda.nowNs + lat(), () => {
                emit("nemesis", "ok", "fault", { kind: "start", node: node.name, boot: node.boot, pid: 1000 + node.bootSeq });
                agenda.at(agenda.nowNs + Math.round(faultEveryNs * (0.5 + rnd())), step);
              });
            });
          });
        });
      });
    };
    agenda.at(Math.round(faultEveryNs * (0.5 + rnd())), step);
  };

  // Acks older than a flush plus a sync interval are on disk: forget them to bound memory.
  const pruneAcks = (): void => {
    const horizon = agenda.nowNs - (flushMs + syncMs) * 2 * MS;
    for (const n of nodes) {
      if (n.recentAcks.length > 0 && n.recentAcks[0]![0] < horizon) n.recentAcks = n.recentAcks.filter(([t]) => t >= horizon);
      if (n.recentCounts !== undefined && n.recentCounts.length > 0 && n.recentCounts[0]![0] < horizon) n.recentCounts = n.recentCounts.filter(([t]) => t >= horizon);
      if (n.recentCopies.length > 0 && n.recentCopies[0]![0] < horizon) n.recentCopies = n.recentCopies.filter(([t]) => t >= horizon);
    }
    // A drain that never settles is a bug of this model, not a slow run.
    if (draining && agenda.nowNs - drainStartNs > 600_000 * MS) throw new Error(`simulation ${options.seed}: the drain did not settle`);
    if (!(draining && unackedTotal === 0)) agenda.at(agenda.nowNs + syncMs * MS, pruneAcks);
  };
  agenda.at(syncMs * MS, pruneAcks);

  for (let i = 0; i < producers; i++) producer(`p${i + 1}`);
  for (let i = 0; i < consumers; i++) consumer(`c${i + 1}`, i);
  if (faultsOn) nemesis();
  return {
    runSlice: (steps: number) => agenda.runSlice(steps),
    get bugTriggered() {
      return bugTriggered;
    },
  };
}

/** Turns simulated events into numbered history lines (config first). */
export function simEventsToHistory(config: ConfigValue, events: readonly SimEvent[]): Array<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = [{ index: 0, time_ns: 0, process: "driver", type: "ok", f: "config", value: config }];
  for (const e of events) lines.push({ index: lines.length, time_ns: e.timeNs, process: e.process, type: e.type, f: e.f, value: e.value });
  return lines;
}

/** Runs a simulation and returns its history lines. */
export function simulateHistory(options: SimOptions): Array<Record<string, unknown>> {
  return simulateWithStats(options).lines;
}

/** Runs a simulation: its history lines, and how often its seeded bug struck. */
export function simulateWithStats(options: SimOptions): { lines: Array<Record<string, unknown>>; bugTriggered: number } {
  let config: ConfigValue | null = null;
  const events: SimEvent[] = [];
  const sim = startSimulation(options, {
    config: (c) => (config = c),
    event: (process, type, f, value, timeNs) => events.push({ process, type, f, value: value as Record<string, unknown>, timeNs }),
  });
  while (sim.runSlice(1 << 20));
  return { lines: simEventsToHistory(config!, events), bugTriggered: sim.bugTriggered };
}

/**
 * Runs a simulation straight into a history file through the HistoryWriter, whose clock is the
 * simulation's: the benchmark's way to make a large history with bounded memory.
 */
export async function simulateToFile(options: SimOptions, path: string): Promise<number> {
  let writer: HistoryWriter | null = null;
  let nowNs = 0;
  const clock = { nowNs: (): number => nowNs };
  const sim = startSimulation(options, {
    config: (c) => {
      writer = HistoryWriter.open(path, c, { clock });
    },
    event: (process, type, f, value, timeNs) => {
      nowNs = timeNs;
      if (type === "invoke") writer!.invoke(process, f as Exclude<OpName, "config">, value);
      else writer!.complete(process, type, value);
    },
  });
  const w = (): HistoryWriter => writer!;
  while (sim.runSlice(20_000)) {
    if (w().needsDrain) await w().drained();
  }
  await w().close();
  return w().events;
}
