// The SDK calls of the next wave (issue 14), in one place: idempotent producers and dead letters.
//
// Design note. The workloads drive what users import (STYLE.md), but these SDK calls are built on
// other branches (idem, dlq) while this code is written, against the shapes those branches gave
// them (read from their commits, SPEC "Idempotent producers" and "Dead letters"):
//   - `narad.producer({ idempotent: true, retryDeadlineMs })` returns a producer whose `id()`
//     takes an id from `POST /v1/producers`, whose `nextSequence` is the sequence its next
//     message gets (call order from 0), and whose `produce(topic, payload, { key })` re-sends an
//     ambiguous answer with the same sequence until it is definite (or the deadline passes), and
//     resolves with partition, offset, owner, ownerBoot, `sequence` and `duplicate`;
//   - `narad.deadLetter(topic, handle)` (an ack with `dead_letter=true`);
//   - `createTopic({ …, maxDeliveries, deadLetterTopic })`, answered with those fields;
//   - a delivery on a dead-letter topic carries `origin: { topic, partition, offset, deliveries,
//     producedAt }` (null elsewhere).
// Each is read here through a structural type and checked at run time, so this file compiles
// against the SDK of today, and a server or SDK without the feature fails the workload at its
// start with one line (NextWaveUnsupported) instead of producing a history that lies. When the
// server branches land, the lead adjusts the names here, and nowhere else, if they differ.

import { Narad, NaradRequestError, type Message } from "../../client/index.js";

/** The workload needs a server (or SDK) feature this one lacks: the run stops with this one line. */
export class NextWaveUnsupported extends Error {
  constructor(message: string) {
    super(message);
    this.name = "NextWaveUnsupported";
  }
}

/** What an idempotent produce resolves with, as the workload reads it. */
export interface IdempotentResult {
  partition: number;
  offset: number;
  duplicate: boolean;
  /** The sequence the SDK gave it, when the result says (checked against the recorded one). */
  sequence: number | null;
  owner: string | null;
  ownerBoot: string | null;
}

/** An idempotent producer as the workload uses it. */
export interface IdempotentProducer {
  readonly producerId: string;
  /** The sequence the next produce will carry (the SDK numbers its messages in call order). */
  readonly nextSequence: number;
  produce(topic: string, payload: Uint8Array, key: string | null): Promise<IdempotentResult>;
}

interface SdkIdempotentProducer {
  /** The id, taken from the broker on first use (a method), or a field in another SDK shape. */
  id?: unknown;
  producerId?: unknown;
  nextSequence?: unknown;
  produce(topic: string, payload: Uint8Array, opts?: { key?: string }): Promise<Record<string, unknown>>;
}

/**
 * How long the SDK's producer re-sends one ambiguous produce: well within a run's stop deadline,
 * and longer than a node takes to come back after a kill or power loss here.
 */
export const IDEMPOTENT_RETRY_DEADLINE_MS = 15_000;

const UNSUPPORTED_PRODUCERS =
  "idempotent producers are not supported by this server or SDK (POST /v1/producers is not there, or narad.producer({ idempotent: true }) is missing): run the idempotent workload once the idem branch is merged";
const UNSUPPORTED_DEAD_LETTERS =
  "dead letters are not supported by this server or SDK (max_deliveries and dead_letter_topic were not accepted): run the dead-letters workload once the dlq branch is merged";

/**
 * An idempotent producer of `client`, its id minted by the broker. Throws NextWaveUnsupported
 * when the SDK has no `producer()` or the server answers 404 for /v1/producers.
 */
export async function idempotentProducer(client: Narad): Promise<IdempotentProducer> {
  const make = (client as unknown as { producer?: (o: { idempotent: true; retryDeadlineMs: number }) => unknown }).producer;
  if (typeof make !== "function") throw new NextWaveUnsupported(UNSUPPORTED_PRODUCERS);
  let sdk: SdkIdempotentProducer;
  let id: string | null;
  try {
    sdk = (await make.call(client, { idempotent: true, retryDeadlineMs: IDEMPOTENT_RETRY_DEADLINE_MS })) as SdkIdempotentProducer;
    // The id now, so the first produce's invoke can name it (and a server without producers says so here).
    const got = typeof sdk.id === "function" ? await (sdk.id as () => Promise<unknown>).call(sdk) : (sdk.producerId ?? sdk.id);
    id = typeof got === "string" && got.length > 0 ? got : null;
  } catch (e) {
    if (e instanceof NaradRequestError && e.status === 404) throw new NextWaveUnsupported(UNSUPPORTED_PRODUCERS);
    throw e;
  }
  // Numbers in call order from 0, unless the SDK says where it is.
  let counter = 0;
  const next = (): number => (typeof sdk.nextSequence === "number" ? sdk.nextSequence : counter);
  return {
    get producerId(): string {
      if (id === null) throw new NextWaveUnsupported(`${UNSUPPORTED_PRODUCERS} (the producer names no id)`);
      return id;
    },
    get nextSequence(): number {
      return next();
    },
    async produce(topic, payload, key) {
      counter++;
      const r = await sdk.produce(topic, payload, key !== null ? { key } : {});
      return {
        partition: r["partition"] as number,
        offset: r["offset"] as number,
        duplicate: r["duplicate"] === true,
        sequence: typeof r["sequence"] === "number" ? r["sequence"] : null,
        owner: typeof r["owner"] === "string" ? r["owner"] : null,
        ownerBoot: typeof r["ownerBoot"] === "string" ? r["ownerBoot"] : null,
      };
    },
  };
}

/** Acks a delivery with dead_letter=true: the broker moves it to the topic's dead-letter topic. */
export function deadLetterAck(client: Narad, topic: string, handle: string): Promise<void> {
  const deadLetter = (client as unknown as { deadLetter?: (topic: string, handle: string) => Promise<void> }).deadLetter;
  if (typeof deadLetter !== "function") return Promise.reject(new NextWaveUnsupported(UNSUPPORTED_DEAD_LETTERS));
  return deadLetter.call(client, topic, handle);
}

/** A delivery's origin on a dead-letter topic, in history terms, or null when it names none. */
export function originOf(m: Message): { topic: string; partition: number; offset: number; deliveries: number } | null {
  const o = (m as unknown as { origin?: Record<string, unknown> | null }).origin;
  if (o === undefined || o === null) return null;
  const { topic, partition, offset, deliveries } = o;
  if (typeof topic !== "string" || topic.length === 0) return null;
  if (![partition, offset, deliveries].every((n) => typeof n === "number" && Number.isSafeInteger(n) && n >= 0)) return null;
  return { topic, partition: partition as number, offset: offset as number, deliveries: deliveries as number };
}

/** The dead-letter fields of a topic to create, in the SDK's camelCase. */
export interface DeadLetterTopicOptions {
  maxDeliveries: number | null;
  deadLetterTopic: string;
}

/**
 * Checks that a created topic took its dead-letter fields (an SDK that does not know them drops
 * them, a server that does not know them answers 400 or leaves them out): NextWaveUnsupported
 * otherwise.
 */
export function checkDeadLetterTopic(created: unknown, want: DeadLetterTopicOptions): void {
  const t = created as { maxDeliveries?: unknown; deadLetterTopic?: unknown };
  if (t.deadLetterTopic !== want.deadLetterTopic || (t.maxDeliveries ?? null) !== want.maxDeliveries) throw new NextWaveUnsupported(UNSUPPORTED_DEAD_LETTERS);
}

/** NextWaveUnsupported for a 400 to a create with dead-letter fields; the error itself otherwise. */
export function deadLetterCreateError(e: unknown): unknown {
  return e instanceof NaradRequestError && e.status === 400 ? new NextWaveUnsupported(`${UNSUPPORTED_DEAD_LETTERS} (${e.code}: ${e.message})`) : e;
}

