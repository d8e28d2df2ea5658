// The SDK's idempotent producer (docs/client.md, "Idempotent producer"; SPEC "Idempotent
// producers"). It takes a producer id from the broker once, gives every message the next
// sequence, and when an answer is ambiguous (an indefinite error of the table, a network error, a
// timeout) sends the same message again with the same sequence: the broker stores a sequence
// once, and answers a re-send of a stored one with the original partition and offset, marked
// duplicate. Refusals the broker asks to retry (429, 503) are sent again too: with the same
// sequence that is safe. A definite refusal (404, 413, 400 unknown_producer, 409
// sequence_out_of_window) is thrown at once.
//
// Bound: re-sends stop after `retryDeadlineMs` (default 60 s, well inside the broker's dedupe
// window of 5 minutes), and the last error is thrown: still ambiguous.
//
// Sequences are taken in call order, so concurrent produce() calls each get their own; a batch
// takes one per message. A producer id and next sequence can be handed in to go on after a
// restart of the client (`producerId`, `nextSequence`): the caller must then not reuse a
// sequence for a different message.
//
// Batching: when the client batches (its `batching` option, the default over HTTP), produce()
// calls that overlap go through a Batcher of this producer's own (./batcher.ts), as plain
// produces do. A batch takes its sequences when it is sent, one per message in order (the
// broker numbers a batch's messages N, N+1, ...), so a batch's sequences are consecutive. A
// lone call (nothing else of this producer in flight) takes the next sequence in the same turn,
// before any I/O, so `nextSequence` read just before it names its sequence, as without batching. An ambiguous batch is sent again whole with the same sequences until the
// answer is definite (stored messages answer as duplicates), the same loop as a single produce.
// An unkeyed batch never crosses a run of 1024 sequences (docs/api.md, "Idempotent producers":
// each run has its partition), so the broker stores it in one partition.

import type { Narad } from "./narad.js";
import { Batcher, checkMessage, type BatchBudget, type BatchItem, type Outcome } from "./batcher.js";
import { NaradAmbiguousError, NaradConnectionError, NaradRequestError, type NaradClientError } from "./errors.js";
import type { ProduceMessage, ProduceResult, Produced } from "./types.js";

export interface IdempotentProducerOptions {
  idempotent: true;
  /** Re-send an ambiguous produce for at most this long (default 60 000 ms). */
  retryDeadlineMs?: number;
  /** Go on with an id taken before (default: a new one at the first produce). */
  producerId?: string;
  /** With producerId: the next sequence to use (default 0). */
  nextSequence?: number;
}

/** What an idempotent produce resolves with: where the message is, and whether it was a re-send. */
export interface IdempotentProduced extends Produced {
  sequence: number;
  /** True when the broker had stored this sequence before (an earlier send's answer was lost). */
  duplicate: boolean;
  /** Sends it took (1 when the first answer was definite). */
  attempts: number;
}

export interface IdempotentBatchResult extends ProduceResult {
  sequence: number;
  duplicate: boolean;
}

const RETRY_DEADLINE_MS_DEFAULT = 60_000;
const BACKOFF_MS_MIN = 50;
const BACKOFF_MS_MAX = 2_000;
/** 2^53: sequences stay below it. */
const SEQUENCE_LIMIT = Number.MAX_SAFE_INTEGER + 1;
/** Unkeyed idempotent messages of one run of this many sequences share a partition (docs/api.md). */
const SEQUENCE_RUN = 1024;

export class IdempotentProducer {
  #id: Promise<string> | undefined;
  #next: number;
  readonly #deadlineMs: number;
  readonly #batcher: Batcher<IdempotentProduced> | undefined;

  /** `budget`: the client's batching bounds when it batches (Narad.producer passes it). */
  constructor(
    private readonly narad: Narad,
    opts: IdempotentProducerOptions,
    budget?: BatchBudget,
  ) {
    if (opts.idempotent !== true) throw new TypeError("producer() takes { idempotent: true }");
    this.#deadlineMs = opts.retryDeadlineMs ?? RETRY_DEADLINE_MS_DEFAULT;
    this.#next = opts.nextSequence ?? 0;
    if (opts.producerId !== undefined) this.#id = Promise.resolve(opts.producerId);
    if (budget !== undefined) {
      this.#batcher = new Batcher<IdempotentProduced>(
        {
          send: (topic, items) => this.#sendBatch(topic, items),
          partitions: async (topic) => (await narad.getTopic(topic)).partitions,
          unkeyedRoom: () => SEQUENCE_RUN - (this.#next % SEQUENCE_RUN),
        },
        budget,
      );
    }
  }

  /** The producer id (taken from the broker at the first call). */
  id(): Promise<string> {
    if (this.#id === undefined) {
      const p = this.#retrying(() => this.narad.createProducerId()).then((r) => r.value);
      this.#id = p;
      p.catch(() => {
        if (this.#id === p) this.#id = undefined; // the next call tries again
      });
    }
    return this.#id;
  }

  /** The sequence the next message gets. */
  get nextSequence(): number {
    return this.#next;
  }

  async produce(topic: string, payload: Uint8Array | string, opts: { key?: string } = {}): Promise<IdempotentProduced> {
    if (this.#batcher !== undefined) {
      checkMessage(payload, opts.key, "produce");
      return this.#batcher.produce(topic, typeof payload === "string" ? Buffer.from(payload, "utf8") : Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength), opts.key ?? null);
    }
    const sequence = this.#take(1);
    const producerId = await this.id();
    const { value, attempts } = await this.#retrying(() => this.narad.produce(topic, payload, { ...opts, producerId, sequence }));
    return { ...value, sequence, duplicate: value.duplicate === true, attempts };
  }

  async produceBatch(topic: string, messages: readonly ProduceMessage[], opts: { encoding?: "binary" | "json" } = {}): Promise<IdempotentBatchResult[]> {
    if (messages.length === 0) return [];
    const sequence = this.#take(messages.length);
    const producerId = await this.id();
    // A batch stored in part (a cluster's partial answer) is sent again whole: the stored
    // messages answer as duplicates, the rest are stored.
    const { value } = await this.#retrying(() => this.narad.produceBatch(topic, messages, { ...opts, producerId, sequence }));
    return value.map((r, i) => ({ partition: r.partition, offset: r.offset, sequence: sequence + i, duplicate: r.duplicate === true }));
  }

  /**
   * Sends one batch of the batcher: its sequences are taken now, before the first await, so
   * the batcher's unkeyedRoom() saw the sequence it starts at. Re-sent whole until definite.
   */
  #sendBatch(topic: string, items: readonly BatchItem[]): Promise<readonly Outcome<IdempotentProduced>[]> {
    const sequence = this.#take(items.length);
    return (async () => {
      const producerId = await this.id();
      if (items.length === 1) {
        const it = items[0]!;
        const { value, attempts } = await this.#retrying(() => this.narad.produce(topic, it.payload, it.key === null ? { producerId, sequence } : { key: it.key, producerId, sequence }));
        return [{ ok: true, value: { ...value, sequence, duplicate: value.duplicate === true, attempts } }];
      }
      const messages = items.map((it) => (it.key === null ? { payload: it.payload } : { payload: it.payload, key: it.key }));
      const { value, attempts } = await this.#retrying(() => this.narad.produceBatch(topic, messages, { producerId, sequence }));
      return value.map((r, i) => ({ ok: true as const, value: { partition: r.partition, offset: r.offset, owner: r.owner, ownerBoot: r.ownerBoot, sequence: sequence + i, duplicate: r.duplicate === true, attempts } }));
    })();
  }

  #take(n: number): number {
    const s = this.#next;
    if (s + n > SEQUENCE_LIMIT) throw new RangeError("this producer has used every sequence below 2^53; take a new producer");
    this.#next = s + n;
    return s;
  }

  async #retrying<T>(send: () => Promise<T>): Promise<{ value: T; attempts: number }> {
    const until = Date.now() + this.#deadlineMs;
    for (let attempt = 1; ; attempt++) {
      try {
        return { value: await send(), attempts: attempt };
      } catch (e) {
        if (!resendable(e) || Date.now() >= until) throw e;
        const wait = Math.min(backoff(attempt, e), Math.max(0, until - Date.now()));
        await new Promise((r) => setTimeout(r, wait));
      }
    }
  }
}

/** An answer that leaves the outcome open, or a refusal the broker asks to be sent again. */
function resendable(e: unknown): e is NaradClientError {
  if (e instanceof NaradConnectionError) return true;
  if (e instanceof NaradAmbiguousError) return e.code !== "aborted";
  if (e instanceof NaradRequestError) return !e.definite || e.retryable;
  return false;
}

function backoff(attempt: number, e: NaradClientError): number {
  if (e instanceof NaradRequestError && e.retryAfterS !== undefined) return Math.min(e.retryAfterS * 1000, BACKOFF_MS_MAX);
  return Math.min(BACKOFF_MS_MIN * 2 ** (attempt - 1), BACKOFF_MS_MAX);
}
