// Natural batching of produce() calls (docs/client.md, "Batching").
//
// Design notes
// - Overlapping produce() calls to one topic go out together, as one batch request: calls are
//   sent at once (at the end of the current turn's microtasks, so calls made in one turn, such
//   as the callers one answer resumed, share a batch) when fewer than `batchesInFlightMax`
//   batches of the topic are out, else they wait in the client and go together when a batch
//   returns. No timer: a lone call goes at once, alone (as a single produce), and under load
//   batches grow by themselves to what arrived during a round trip, so a busy client sends few,
//   large requests and a quiet one adds no delay. (Sending the first call of a turn on its own,
//   at once, measured about twice the server CPU a message at 64 callers: half the requests
//   then carried one message.)
// - A batch holds messages of one partition, so no node ever stores part of it: in a cluster the
//   receiving node splits a batch by partition and forwards each part to its owner, and parts
//   can fail apart (docs/api.md, "Cluster": 502 forward_failed with a result per message), also
//   for two partitions of one owner (each is its own forward and its own ownership). Grouping by
//   owner would not be enough; by partition it is. Keyed messages are grouped by their key's
//   partition (src/protocol/partition.ts, the broker's own rule), which needs the topic's
//   partition count: looked up once per topic (GET /v1/topics/{t}), and again when an answer
//   shows a keyed message stored elsewhere than expected (the topic grew). While the lookup is
//   out keyed calls wait; when it fails they are sent one request each, as with batching off.
//   Unkeyed messages form one group: the broker stores the unkeyed messages of one request in
//   one partition (docs/api.md, "Partitioning"), so a batch of them is never split either.
// - Order: a keyed partition has at most one batch out at a time, so later calls of a partition
//   never overtake earlier ones (their offsets follow call order). Unkeyed batches may be several
//   out at once: the broker picks their partitions, and calls that overlap promise no order.
// - Outcomes per caller: a stored batch resolves each caller with its own result; an error of
//   the whole batch (ambiguous, or a definite refusal) is that error for each caller in it; a
//   cluster's partial answer (NaradPartialBatchError) is mapped per message. A message the
//   broker would refuse on its own (size, key) is refused before it joins a batch (checkMessage),
//   so it never fails its neighbours.
// - Bounds: messages and encoded bytes per batch, batches out per topic, and messages and bytes
//   waiting in the client across all topics (BatchBudget, one per client). At the waiting bound a
//   call is refused at once with a definite 429 `overloaded` (nothing was sent): the caller sees
//   back-pressure as from a node, rather than memory growing without limit.
// - The batcher knows nothing of HTTP: a Lane sends a batch (src/client/narad.ts for plain
//   produce, src/client/producer.ts for an idempotent producer, which numbers each batch's
//   messages when it sends it and re-sends an ambiguous batch whole).

import { ERRORS, isErrorCode } from "../protocol/errors.js";
import { keyPartition } from "../protocol/partition.js";
import { LIMITS } from "../protocol/wire.js";
import { NaradAmbiguousError, NaradConnectionError, NaradRequestError, refusedBeforeSending, type NaradPartialBatchError } from "./errors.js";
import type { BatchingOptions } from "./types.js";

export type BatchingLimits = Required<BatchingOptions>;

export const BATCHING_DEFAULTS: Readonly<BatchingLimits> = {
  batchMessagesMax: 1000,
  batchBytesMax: 1_048_576,
  batchesInFlightMax: 4,
  queuedMessagesMax: 100_000,
  queuedBytesMax: 64 * 1_048_576,
};

/** Most batches one topic may have out at once (a bound on the bound). */
const IN_FLIGHT_MAX_LIMIT = 256;
/** Partition counts remembered; past this many topics the cache starts over. */
const PARTITIONS_CACHE_MAX = 1024;
/** A UTF-16 surrogate without its pair. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
/** A waiting queue's consumed head is dropped once it is this long and half the array. */
const QUEUE_COMPACT_AT = 1024;

/** The limits of `batching` (NaradOptions), or null when batching is off. Throws RangeError for a bad bound. */
export function batchingLimits(o: boolean | BatchingOptions | undefined): BatchingLimits | null {
  if (o === false) return null;
  const given = o === true || o === undefined ? {} : o;
  const lim: BatchingLimits = { ...BATCHING_DEFAULTS };
  const ranges: Record<keyof BatchingLimits, [number, number]> = {
    batchMessagesMax: [1, LIMITS.batchMessagesMax],
    batchBytesMax: [1, LIMITS.batchBodyBytesMax],
    batchesInFlightMax: [1, IN_FLIGHT_MAX_LIMIT],
    queuedMessagesMax: [1, Number.MAX_SAFE_INTEGER],
    queuedBytesMax: [1, Number.MAX_SAFE_INTEGER],
  };
  for (const k of Object.keys(ranges) as (keyof BatchingLimits)[]) {
    const v = given[k];
    if (v === undefined) continue;
    const [lo, hi] = ranges[k];
    if (!Number.isInteger(v) || v < lo || v > hi) throw new RangeError(`Narad: batching.${k} must be an integer from ${lo} to ${hi}, got ${String(v)}`);
    lim[k] = v;
  }
  return lim;
}

/**
 * Refuses, before sending, a message the server would refuse for its size or its key: the same
 * code, status and `definite` as the server's answer (src/protocol/errors.ts), "nothing was
 * sent" in the message. A key that is not a well-formed string cannot be sent at all (UTF-8 has
 * no lone surrogates), so it is refused as a bad argument too.
 */
export function checkMessage(payload: Uint8Array | string, key: string | null | undefined, what: string): void {
  const size = typeof payload === "string" ? Buffer.byteLength(payload) : payload.byteLength;
  if (size > LIMITS.messageBytesMax) {
    throw refusedBeforeSending("payload_too_large", `${what}: the message is ${size} bytes, over the ${LIMITS.messageBytesMax}-byte (1 MiB) limit`);
  }
  if (key == null) return;
  if (typeof key !== "string") throw refusedBeforeSending("invalid_argument", `${what}: the key must be a string, got ${typeof key}`);
  if (key.length * 3 > LIMITS.keyBytesMax && Buffer.byteLength(key) > LIMITS.keyBytesMax) {
    throw refusedBeforeSending("invalid_argument", `${what}: the key is over ${LIMITS.keyBytesMax} bytes`);
  }
  if (LONE_SURROGATE.test(key)) throw refusedBeforeSending("invalid_argument", `${what}: the key has a lone UTF-16 surrogate, which UTF-8 cannot carry`);
}

/** One message of a batch. */
export interface BatchItem {
  readonly payload: Buffer;
  readonly key: string | null;
  /** Its size in the binary batch encoding: two u32 lengths, the key, the payload. */
  readonly bytes: number;
}

/** What one message of a sent batch came to. */
export type Outcome<R> = { ok: true; value: R } | { ok: false; error: unknown };

/** How batches are sent: one item is a single produce; more, one batch request. */
export interface Lane<R> {
  /** Resolves with one outcome per item, in order, or rejects with the error of the whole batch. */
  send(topic: string, items: readonly BatchItem[]): Promise<readonly Outcome<R>[]>;
  /** The topic's partition count. */
  partitions(topic: string): Promise<number>;
  /** Most messages the next unkeyed batch may hold (an idempotent producer's run); unset: the bounds alone. */
  unkeyedRoom?(): number;
}

/**
 * One client's waiting bound, shared by its batchers (its own and its idempotent producers'),
 * and what close() and destroy() reach: every message accepted and not yet settled.
 */
export class BatchBudget {
  queuedMessages = 0;
  queuedBytes = 0;
  #outstanding = 0;
  #idle: (() => void)[] = [];
  readonly #busy = new Set<Batcher<{ partition: number }>>();

  constructor(readonly limits: BatchingLimits) {}

  /** Takes a message into the queue, or returns why it cannot wait. */
  admit(b: Batcher<{ partition: number }>, bytes: number): string | null {
    const l = this.limits;
    if (this.queuedMessages + 1 > l.queuedMessagesMax) return `${this.queuedMessages} messages wait to be sent (batching.queuedMessagesMax)`;
    if (this.queuedMessages > 0 && this.queuedBytes + bytes > l.queuedBytesMax) return `${this.queuedBytes} bytes wait to be sent (batching.queuedBytesMax ${l.queuedBytesMax})`;
    this.queuedMessages++;
    this.queuedBytes += bytes;
    this.#outstanding++;
    this.#busy.add(b);
    return null;
  }

  /** Messages left the queue for a request. */
  sent(messages: number, bytes: number): void {
    this.queuedMessages -= messages;
    this.queuedBytes -= bytes;
  }

  /** Messages are settled (resolved or rejected); `b` has none left when `idle`. */
  settled(b: Batcher<{ partition: number }>, messages: number, idle: boolean): void {
    this.#outstanding -= messages;
    if (idle) this.#busy.delete(b);
    if (this.#outstanding === 0) for (const f of this.#idle.splice(0)) f();
  }

  /** Resolves once every accepted message is settled. */
  idle(): Promise<void> {
    return this.#outstanding === 0 ? Promise.resolve() : new Promise((r) => this.#idle.push(r));
  }

  /** Rejects every message still waiting in any batcher with `error` (they were not sent). */
  failQueued(error: unknown): void {
    for (const b of [...this.#busy]) b.failQueued(error);
  }
}

interface Waiting<R> extends BatchItem {
  resolve(r: R): void;
  reject(e: unknown): void;
}

/** A FIFO of waiting messages bound for one batch at a time. */
class Group<R> {
  items: Waiting<R>[] = [];
  head = 0;
  /** A keyed partition's batch is out (it may have one at a time). */
  busy = false;

  constructor(
    /** The partition of a keyed group; null: the unkeyed group. */
    readonly partition: number | null,
  ) {}

  get size(): number {
    return this.items.length - this.head;
  }

  take(n: number): Waiting<R>[] {
    const out = this.items.slice(this.head, this.head + n);
    this.head += n;
    if (this.head === this.items.length) {
      this.items = [];
      this.head = 0;
    } else if (this.head >= QUEUE_COMPACT_AT && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return out;
  }
}

class TopicState<R> {
  inFlight = 0;
  readonly unkeyed = new Group<R>(null);
  readonly keyed = new Map<number, Group<R>>();
  /** Groups with messages waiting, in the order they got them (sending moves a group to the end). */
  readonly ready = new Set<Group<R>>();
  /** Keyed messages waiting for the partition count. */
  awaiting: Waiting<R>[] = [];
  lookingUp = false;
  /** A pump is queued as a microtask. */
  flushing = false;
  /** Messages waiting, out, or awaiting the count: the state is dropped when none are left. */
  pending = 0;
}

export class Batcher<R extends { partition: number }> {
  readonly #topics = new Map<string, TopicState<R>>();
  readonly #partitions = new Map<string, number>();
  #pending = 0;

  constructor(
    private readonly lane: Lane<R>,
    private readonly budget: BatchBudget,
  ) {}

  /** Queues one message (checked already with checkMessage); resolves or rejects with its own outcome. */
  produce(topic: string, payload: Buffer, key: string | null): Promise<R> {
    const bytes = 8 + (key === null ? 0 : Buffer.byteLength(key)) + payload.length;
    const full = this.budget.admit(this as Batcher<{ partition: number }>, bytes);
    if (full !== null) return Promise.reject(refusedBeforeSending("overloaded", `produce: the client's batching queue is full (${full}); retry once earlier produces have returned`));
    return new Promise<R>((resolve, reject) => {
      const w: Waiting<R> = { payload, key, bytes, resolve, reject };
      let t = this.#topics.get(topic);
      if (t === undefined) {
        t = new TopicState<R>();
        this.#topics.set(topic, t);
      }
      t.pending++;
      this.#pending++;
      if (key === null) return this.#enqueue(topic, t, t.unkeyed, w);
      const n = this.#partitions.get(topic);
      if (n !== undefined) return this.#enqueue(topic, t, this.#keyedGroup(t, keyPartition(key, n)), w);
      t.awaiting.push(w);
      this.#lookup(topic, t);
    });
  }

  /** Rejects every message still waiting (not sent) with `error`. */
  failQueued(error: unknown): void {
    for (const [topic, t] of this.#topics) {
      const waiting: Waiting<R>[] = t.awaiting.splice(0);
      for (const g of t.ready) waiting.push(...g.take(g.size));
      t.ready.clear();
      this.budget.sent(waiting.length, waiting.reduce((s, w) => s + w.bytes, 0));
      for (const w of waiting) w.reject(error);
      this.#done(topic, t, waiting.length);
    }
  }

  #keyedGroup(t: TopicState<R>, p: number): Group<R> {
    let g = t.keyed.get(p);
    if (g === undefined) {
      g = new Group<R>(p);
      t.keyed.set(p, g);
    }
    return g;
  }

  #enqueue(topic: string, t: TopicState<R>, g: Group<R>, w: Waiting<R>): void {
    g.items.push(w);
    t.ready.add(g);
    // Sent at the end of this turn's microtasks, not here: the calls made together (a loop, or
    // the callers a batch's answer just resumed) go together. No timer, no I/O waited for.
    if (t.flushing) return;
    t.flushing = true;
    queueMicrotask(() => {
      t.flushing = false;
      this.#pump(topic, t);
    });
  }

  /** Sends batches while the topic has room and a group that may send. */
  #pump(topic: string, t: TopicState<R>): void {
    const max = this.budget.limits.batchesInFlightMax;
    while (t.inFlight < max) {
      let g: Group<R> | undefined;
      for (const x of t.ready) {
        if (!x.busy) {
          g = x;
          break;
        }
      }
      if (g === undefined) return;
      this.#sendFrom(topic, t, g);
    }
  }

  #sendFrom(topic: string, t: TopicState<R>, g: Group<R>): void {
    const l = this.budget.limits;
    let most = l.batchMessagesMax;
    if (g.partition === null && this.lane.unkeyedRoom !== undefined) most = Math.max(1, Math.min(most, this.lane.unkeyedRoom()));
    let n = 0;
    let bytes = 0;
    for (let i = g.head; i < g.items.length && n < most; i++) {
      const b = g.items[i]!.bytes;
      if (n > 0 && bytes + b > l.batchBytesMax) break;
      bytes += b;
      n++;
    }
    const batch = g.take(n);
    this.budget.sent(n, bytes);
    t.ready.delete(g);
    if (g.size > 0) t.ready.add(g); // to the end: the other groups go first
    t.inFlight++;
    if (g.partition !== null) g.busy = true;
    let p: Promise<readonly Outcome<R>[]>;
    try {
      p = this.lane.send(topic, batch);
    } catch (e) {
      p = Promise.reject(e);
    }
    p.then(
      (outs) => this.#settle(topic, t, g, batch, outs, undefined),
      (e: unknown) => this.#settle(topic, t, g, batch, undefined, e),
    );
  }

  #settle(topic: string, t: TopicState<R>, g: Group<R>, batch: Waiting<R>[], outs: readonly Outcome<R>[] | undefined, error: unknown): void {
    t.inFlight--;
    g.busy = false;
    let stale = false;
    for (let i = 0; i < batch.length; i++) {
      const o = outs?.[i];
      if (outs === undefined) batch[i]!.reject(error);
      else if (o === undefined) batch[i]!.reject(new NaradAmbiguousError("invalid_answer", "produce: the answer had no result for this message; it may or may not be stored"));
      else if (o.ok) {
        if (g.partition !== null && o.value.partition !== g.partition) stale = true;
        batch[i]!.resolve(o.value);
      } else batch[i]!.reject(o.error);
    }
    // A keyed message stored in another partition than its key's under the count we know: the
    // topic grew. Look the count up again before grouping more of its keyed messages.
    if (stale) this.#partitions.delete(topic);
    if (g.partition !== null && g.size === 0) t.keyed.delete(g.partition);
    this.#done(topic, t, batch.length);
    this.#pump(topic, t);
  }

  #lookup(topic: string, t: TopicState<R>): void {
    if (t.lookingUp) return;
    t.lookingUp = true;
    this.lane.partitions(topic).then(
      (n) => {
        t.lookingUp = false;
        if (this.#partitions.size >= PARTITIONS_CACHE_MAX) this.#partitions.clear();
        this.#partitions.set(topic, n);
        for (const w of t.awaiting.splice(0)) {
          const g = this.#keyedGroup(t, keyPartition(w.key!, n));
          g.items.push(w);
          t.ready.add(g);
        }
        this.#pump(topic, t);
      },
      () => {
        // The count is unknown (the topic may not exist; the node may be unreachable): these go
        // one request each, as with batching off, and answer what those requests answer. The
        // next keyed message tries the lookup again.
        t.lookingUp = false;
        for (const w of t.awaiting.splice(0)) {
          this.budget.sent(1, w.bytes);
          let p: Promise<readonly Outcome<R>[]>;
          try {
            p = this.lane.send(topic, [w]);
          } catch (e) {
            p = Promise.reject(e);
          }
          p.then(
            (outs) => {
              const o = outs[0];
              if (o?.ok === true) w.resolve(o.value);
              else w.reject(o === undefined ? new NaradAmbiguousError("invalid_answer", "produce: the answer had no result; it may or may not be stored") : o.error);
              this.#done(topic, t, 1);
            },
            (e: unknown) => {
              w.reject(e);
              this.#done(topic, t, 1);
            },
          );
        }
      },
    );
  }

  /** `n` messages of `topic` are settled. */
  #done(topic: string, t: TopicState<R>, n: number): void {
    t.pending -= n;
    this.#pending -= n;
    if (t.pending === 0 && this.#topics.get(topic) === t) this.#topics.delete(topic);
    this.budget.settled(this as Batcher<{ partition: number }>, n, this.#pending === 0);
  }
}

/**
 * A cluster's partial answer to a batch (NaradPartialBatchError, its `results` one per message)
 * as one outcome per message: stored (`stored(r)` makes the caller's result), certainly not
 * stored (a definite NaradRequestError of that code), or unknown (a NaradAmbiguousError).
 */
export function outcomesOfPartial<R>(e: NaradPartialBatchError, stored: (r: { partition: number; offset: number }) => R): Outcome<R>[] {
  return e.results.map((r): Outcome<R> => {
    if (r.status === "stored") return { ok: true, value: stored(r) };
    if (r.status === "not_stored") {
      const status = isErrorCode(r.code) ? ERRORS[r.code].status : (e.status ?? 502);
      return { ok: false, error: new NaradRequestError(status, r.code, `produce: this message's part of the batch was refused (${r.code}); it was not stored`, true) };
    }
    return { ok: false, error: new NaradAmbiguousError(r.code, `produce: this message's part of the batch failed (${r.code}); it may or may not be stored`, e.status) };
  });
}

/** What a message still waiting gets when its client is destroyed: it was never sent. */
export function destroyedBeforeSending(): NaradConnectionError {
  return new NaradConnectionError("produce: the client was destroyed before this message was sent; nothing was sent");
}
