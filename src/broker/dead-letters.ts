// Dead letters (SPEC "Dead letters"; docs/contract.md, "Dead letters"): the move of a message
// whose deliveries ran out, or that a consumer asked to dead-letter, from its topic to the topic's
// dead-letter topic; and the checks of the two topic fields.
//
// The move keeps the order the contract promises: the copy is appended to the dead-letter topic
// and made durable there (fsynced on its owner, wherever its partition lives), and only then is
// the message settled (acked) on its topic. A crash in between leaves it in both, never in
// neither. Until then it sits in its partition's `exhausted` state (./partition.ts), never
// delivered again from its topic; a move that fails is given back and tried again after a
// back-off (DEAD_LETTER_RETRY_MS_MIN doubling to DEAD_LETTER_RETRY_MS_MAX), never dropped. A
// restart loses the in-memory state but not the counts (the ack log keeps them), so the message
// is found exhausted again and moved then.
//
// The copy carries the same key and payload, the source's headers, and an origin attribute
// (src/storage/attrs.ts tag 2: topic, partition, offset, deliveries, produce time) that a consume
// of the dead-letter topic shows. The mover runs from the lease sweep: each topic's partitions
// with exhausted messages are drained one move batch (DEAD_LETTER_BATCH_MAX) at a time, one
// drain per topic at once.

import type { Logger } from "pino";
import type { Scheduler } from "../platform/scheduler.js";
import { NaradError } from "../protocol/errors.js";
import { LIMITS, type DeadLetterJson, type OriginJson } from "../protocol/wire.js";
import type { Clock } from "../platform/clock.js";
import { decodeAttrs, encodeAttrs, type RecordAttrs } from "../storage/attrs.js";
import type { StoredRecord } from "../storage/types.js";
import { CopyPartlyStored } from "./children.js";
import type { BrokerFaults } from "./faults.js";
import type { BrokerMetrics } from "./metrics.js";
import type { Partition } from "./partition.js";
import type { Topic } from "./topic.js";

/** Messages one move appends together (one append, one fsync on the dead-letter topic's side). */
export const DEAD_LETTER_BATCH_MAX = 100;
/** Payload bytes past which a move batch stops taking more (the rest wait for the next batch). */
export const DEAD_LETTER_BATCH_BYTES_MAX = 4 * 1024 * 1024;
/** A failed move is tried again after this long, doubling up to the max. */
export const DEAD_LETTER_RETRY_MS_MIN = 200;
export const DEAD_LETTER_RETRY_MS_MAX = 10_000;

/** dead-letter-settle-before-copy: how long the seeded bug leaves a settled message in neither topic. */
const DEAD_LETTER_SEEDED_DELAY_MS = 500;

/** One dead letter to append: the source's key and payload, and the attributes with its origin. */
export interface DeadLetterItem {
  key: Buffer | null;
  payload: Buffer;
  attrs: Buffer;
}

export interface DeadLetterDeps {
  clock: Clock;
  /** Only the seeded bug dead-letter-settle-before-copy waits on it. */
  scheduler: Scheduler;
  logger: Logger;
  metrics: BrokerMetrics;
  faults: BrokerFaults;
  /** The epoch check before an owner write (cluster mode); always true on one node. */
  owns(t: Topic, p: Partition): boolean;
  /**
   * Appends to the dead-letter topic wherever its partitions live and resolves once every copy is
   * durable there; CopyPartlyStored names the `sources` offsets stored when only some were.
   */
  append(deadLetterTopic: string, items: DeadLetterItem[], sources: StoredRecord[]): Promise<void>;
}

/** The rule of a topic's fields, on create and PATCH alike (`exists` asks whether a topic is there). */
export async function checkDeadLetterFields(name: string, f: DeadLetterJson, exists: (topic: string) => Promise<boolean>): Promise<void> {
  if (f.max_deliveries !== null && f.dead_letter_topic === null) {
    throw new NaradError("invalid_dead_letter_topic", `max_deliveries needs a dead_letter_topic: name the topic that takes ${name}'s messages once their ${f.max_deliveries} deliveries ran out.`);
  }
  if (f.dead_letter_topic === null) return;
  if (f.dead_letter_topic === name) throw new NaradError("invalid_dead_letter_topic", `Topic ${name} cannot be its own dead_letter_topic; name another topic.`);
  if (!(await exists(f.dead_letter_topic))) {
    throw new NaradError("invalid_dead_letter_topic", `dead_letter_topic ${JSON.stringify(f.dead_letter_topic)} does not exist; create it first.`);
  }
}

/** The topic's fields after a change (undefined: unchanged; null: cleared). */
export function nextDeadLetterFields(now: DeadLetterJson, change: Partial<DeadLetterJson>): DeadLetterJson {
  return {
    max_deliveries: change.max_deliveries === undefined ? now.max_deliveries : change.max_deliveries,
    dead_letter_topic: change.dead_letter_topic === undefined ? now.dead_letter_topic : change.dead_letter_topic,
  };
}

/** The origin a record's attributes name, as the wire shows it; undefined when none. */
export function originOf(r: StoredRecord): OriginJson | undefined {
  if (r.attrs === undefined) return undefined;
  const a = decodeAttrs(r.attrs);
  if (typeof a === "string" || a.origin === undefined) return undefined;
  const o = a.origin;
  return { topic: o.topic, partition: o.partition, offset: o.offset, deliveries: o.deliveries, produced_at: o.producedAtMs };
}

/** The attributes of a dead letter: the source's headers, and its origin (replacing any it had). */
export function deadLetterAttrs(source: StoredRecord, topic: string, partition: number, deliveries: number): Buffer {
  let headers: RecordAttrs["headers"];
  if (source.attrs !== undefined) {
    const a = decodeAttrs(source.attrs);
    if (typeof a !== "string") headers = a.headers;
  }
  return encodeAttrs({
    origin: { topic, partition, offset: source.offset, deliveries, producedAtMs: source.producedAtMs },
    ...(headers !== undefined ? { headers } : {}),
  })!;
}

interface TopicMoves {
  running: boolean;
  retryAtMs: number;
  backoffMs: number;
}

export class DeadLetterMover {
  private readonly log: Logger;
  private readonly state = new WeakMap<Topic, TopicMoves>();
  /** Drains under way, awaited by close() so a stop does not cut a move between its two steps. */
  private readonly running = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly d: DeadLetterDeps) {
    this.log = d.logger.child({ component: "dead-letters" });
  }

  /** The topic's rule, handed to a partition before it is served (consume, settle, sweep). */
  prepare(t: Topic, p: Partition): void {
    p.setDeadLetterRule(this.d.faults.maxDeliveries(t.meta.max_deliveries ?? Number.POSITIVE_INFINITY), t.meta.dead_letter_topic !== null);
  }

  /** From the lease sweep and after a nack: starts a drain of the topic when one is due. */
  kick(t: Topic): void {
    if (this.closed || t.deleted || t.meta.dead_letter_topic === null) return;
    let s = this.state.get(t);
    if (s === undefined) this.state.set(t, (s = { running: false, retryAtMs: 0, backoffMs: DEAD_LETTER_RETRY_MS_MIN }));
    if (s.running || this.d.clock.monoMs() < s.retryAtMs) return;
    if (!t.open().some((p) => p.exhaustedWaiting > 0)) return;
    s.running = true;
    const run = this.drain(t, s)
      .catch((e: unknown) => this.log.error({ topic: t.meta.name, err: e instanceof Error ? e.message : String(e) }, "a dead-letter drain failed"))
      .finally(() => {
        s.running = false;
        this.running.delete(run);
      });
    this.running.add(run);
  }

  /** No new moves; resolves once the batches under way are settled or given back (before the partitions close). */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.running]);
  }

  private async drain(t: Topic, s: TopicMoves): Promise<void> {
    for (const p of t.open()) {
      while (!this.closed && !t.deleted && t.partitions[p.index] === p && p.exhaustedWaiting > 0 && this.d.owns(t, p)) {
        const dlq = t.meta.dead_letter_topic;
        if (dlq === null) return;
        const ok = await this.moveBatch(t, p, dlq, p.takeExhausted(DEAD_LETTER_BATCH_MAX));
        if (!ok) {
          s.retryAtMs = this.d.clock.monoMs() + s.backoffMs;
          s.backoffMs = Math.min(2 * s.backoffMs, DEAD_LETTER_RETRY_MS_MAX);
          return;
        }
        s.backoffMs = DEAD_LETTER_RETRY_MS_MIN;
      }
    }
  }

  /** One batch: read, append durably to the dead-letter topic, then settle here. False: try again later. */
  private async moveBatch(t: Topic, p: Partition, dlq: string, batch: { offset: number; deliveries: number }[]): Promise<boolean> {
    const sources: StoredRecord[] = [];
    const items: DeadLetterItem[] = [];
    let bytes = 0;
    try {
      for (let i = 0; i < batch.length; i++) {
        const b = batch[i]!;
        if (bytes > DEAD_LETTER_BATCH_BYTES_MAX) {
          for (const rest of batch.slice(i)) p.finishMove(rest.offset, false); // the next batch's
          break;
        }
        const [r] = await p.log.read(b.offset, 1, 2 * LIMITS.messageBytesMax);
        if (r === undefined || r.offset !== b.offset) {
          // Removed by retention meanwhile, or a record whose checksum fails (never served): there
          // is nothing to move.
          if (b.offset >= p.log.earliestOffset) this.log.error({ topic: t.meta.name, partition: p.index, offset: b.offset }, "an exhausted message cannot be read; it is not moved to the dead-letter topic");
          p.dropExhausted(b.offset);
          continue;
        }
        sources.push(r);
        bytes += r.payload.length;
        items.push({ key: r.key, payload: r.payload, attrs: deadLetterAttrs(r, t.meta.name, p.index, b.deliveries) });
      }
    } catch (e) {
      for (const b of batch) p.finishMove(b.offset, false); // a no-op for those done already
      this.failed(t, p, dlq, e);
      return false;
    }
    if (items.length === 0) return true;
    let stored: ReadonlySet<number> | undefined;
    let err: unknown;
    // Seeded bug dead-letter-settle-before-copy (./seeded-bugs.ts): settled first, the copy
    // written half a second later and its failure ignored: a kill in between loses the message.
    if (this.d.faults.deadLetterSettlesFirst()) {
      for (const r of sources) p.finishMove(r.offset, true);
      this.d.metrics.deadLettered.inc({ topic: t.meta.name }, sources.length);
      await this.d.scheduler.sleep(DEAD_LETTER_SEEDED_DELAY_MS);
      await this.d.append(dlq, items, sources).catch(() => undefined);
      return true;
    }
    try {
      await this.d.append(dlq, items, sources); // durable there before settled here
    } catch (e) {
      err = e;
      stored = new Set(e instanceof CopyPartlyStored ? e.storedOffsets : []);
    }
    let settled = 0;
    for (const r of sources) {
      const moved = stored === undefined || stored.has(r.offset);
      try {
        p.finishMove(r.offset, moved);
        if (moved) settled++;
      } catch (e) {
        // The partition closed meanwhile (a move, a stop): the copy stays, and the next owner finds
        // the message exhausted again and moves it once more (in both, never in neither).
        this.log.warn({ topic: t.meta.name, partition: p.index, offset: r.offset, err: (e as Error).message }, "a dead letter was stored but could not be settled on its topic; it is moved again later");
      }
    }
    if (settled > 0) this.d.metrics.deadLettered.inc({ topic: t.meta.name }, settled);
    if (err !== undefined) {
      this.failed(t, p, dlq, err);
      return false;
    }
    return true;
  }

  private failed(t: Topic, p: Partition, dlq: string, e: unknown): void {
    this.d.metrics.deadLetterFailures.inc({ topic: t.meta.name });
    this.log.warn({ topic: t.meta.name, partition: p.index, deadLetterTopic: dlq, err: e instanceof Error ? e.message : String(e) }, "moving messages to the dead-letter topic failed; they stay out of delivery and the move is tried again");
  }
}
