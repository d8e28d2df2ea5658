// One lane: a logical client with its own connections, whose every operation is recorded.
//
// Design note.
// - The lane drives the SDK (src/client), so a run judges what users import: every produce,
//   consume (single, `?ack=`), ack, extend, nack and replay goes through a `Narad` client. One
//   client per node, each with one connection (`connections: 1`) and the lane's own request
//   timeout, and one request in flight per lane, like one client thread. The SDK never retries a
//   call on its own, so the history sees every answer, ambiguous ones included.
// - Outcomes in history v1 terms (docs/verification-workloads.md, SPEC's history format):
//     produce  202 → ok {partition, offset, status, node, boot} (the owner that stored it);
//     consume  a message → ok with it and the owner that leased it; none → ok {msg: null};
//     ack/extend/nack  204 → ok; 410 → info {status: 410} (a lapse and a lost answer look alike);
//     replay   ok {msgs: [[offset, msg], ...], ...};
//   and a failure is `fail` only when the node answered with a code the error table
//   (src/protocol/errors.ts) calls definite: it certainly did not happen. Everything else is
//   `info`: an indefinite answer (503 ownership_lost, 503 no_quorum, 502 forward_failed, 500,
//   504), an answer without a code of the table, and every transport error, even a refused
//   connection (the SDK calls that definite, but through the fault proxy a connect that
//   succeeded or failed says nothing about the node behind it, and ambiguous is never wrong).
// - Each request has a deadline (the SDK's request timeout, plus a long poll's wait), so a paused
//   node or a cut line turns into an `info` instead of a hung lane.
// - A lane may be given several URLs (the nodes of a cluster): it sends each request to the next
//   one in turn, so a delivery taken from one node is usually settled through another, and the
//   receipt handle must route the ack to the owner. Credentials go with every request.
// - The recorder decides when a request may leave (see protocol.ts): `invoke` resolves once the
//   invoke line is written, and `complete` is called after the whole answer has been read.

import { Narad, NaradClientError, NaradGoneError, type Message } from "../../client/index.js";
import { ERRORS, isErrorCode } from "../../protocol/errors.js";
import { ackProcess, type CompletionType, type Credentials, type OpF } from "./protocol.js";
import { deadLetterAck, idempotentProducer, originOf, type IdempotentProducer } from "./next-wave.js";

export interface OpRecorder {
  /** Records the invoke; resolves when the request may be sent. */
  invoke(p: string, f: OpF, value: Record<string, unknown>): Promise<void>;
  /** Records the completion of the process's pending operation. */
  complete(p: string, type: CompletionType, value: Record<string, unknown>): void;
}

export interface Outcome {
  type: CompletionType;
  value: Record<string, unknown>;
  /** The HTTP status, when an answer came. */
  status: number | null;
}

export interface Delivery {
  msg: string;
  partition: number;
  offset: number;
  handle: string;
  deliveryCount: number;
}

export type SettleAction = "ack" | "extend" | "nack" | "dead-letter";

/** Longest message id read back from a payload; ids are far shorter. */
const MSG_ID_CHARS_MAX = 120;

/** The payload of message `msg`: its id, a newline, then filler up to `bytes` (never shorter than the id). */
export function encodePayload(msg: string, bytes: number): Buffer {
  const head = Buffer.from(`${msg}\n`, "utf8");
  if (bytes <= head.length) return head;
  const buf = Buffer.allocUnsafe(bytes);
  head.copy(buf, 0);
  buf.fill(0x2e, head.length); // '.'
  return buf;
}

/** The message id a payload carries, or a marker naming the bytes when it carries none. */
export function decodePayload(body: Buffer): string {
  const nl = body.indexOf(0x0a);
  if (nl > 0 && nl <= MSG_ID_CHARS_MAX) {
    const id = body.subarray(0, nl).toString("utf8");
    if (/^[A-Za-z0-9._-]+$/.test(id)) return id;
  }
  // Not written by a workload: give it a name the checker will report as unexpected.
  return `?${body.subarray(0, 24).toString("hex") || "empty"}`;
}

/** A failure's text for an `info {error}`: the SDK's code and message, and the socket's code. */
function errorText(e: unknown): string {
  if (e instanceof NaradClientError) {
    const cause = (e.cause as NodeJS.ErrnoException | undefined)?.code;
    return `${e.code}${typeof cause === "string" ? ` (${cause})` : ""}: ${e.message}`;
  }
  if (e instanceof Error) {
    const code = (e as NodeJS.ErrnoException).code;
    return code !== undefined ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}

/**
 * A failed operation in history terms. `fail` only for an answer of the error table that is
 * definite (the SDK's `definite`, which comes from the table): it certainly did not happen. Any
 * other answer is `info {status, error?}` (410: `info {status: 410}`), and an error without an
 * answer, `info {error}`.
 */
export function failureOutcome(e: unknown): Outcome {
  if (e instanceof NaradClientError && e.status !== undefined) {
    if (e instanceof NaradGoneError) return answerOutcome(410, e.code);
    // The SDK names a codeless answer `http_<status>`: the node said nothing the table knows.
    return answerOutcome(e.status, e.code !== `http_${e.status}` ? e.code : undefined);
  }
  return { type: "info", value: { error: errorText(e) }, status: null };
}

/**
 * A refusal the node answered with `status` and error `code` (none when it gave no code), in
 * history terms: `fail` when the error table calls the code definite, else `info`; a 410 is
 * `info {status: 410}` whatever its code. Also each handle of an ack batch, from its own status
 * and code (src/client/recording.ts of the client workload).
 */
export function answerOutcome(status: number, code: string | undefined): Outcome {
  if (status === 410) return { type: "info", value: { status: 410 }, status: 410 };
  if (code === undefined) return { type: "info", value: { status }, status };
  return { type: isErrorCode(code) && ERRORS[code].definite ? "fail" : "info", value: { status, error: code }, status };
}

export interface LaneOptions {
  /** Deadline of one request beyond its long-poll wait, ms. */
  requestTimeoutMs: number;
  /** HTTP Basic credentials sent with every request. */
  auth?: Credentials;
  /** Which of the URLs the first request goes to (then each next one in turn). */
  firstUrl?: number;
  /** The SDK's transport for produce (default "http"; "stream": the streaming protocol). */
  transport?: "http" | "stream";
}

/** A consume's answer in history terms; `delivery` is set when a message was leased. */
type ConsumeOutcome = Outcome & { delivery: Delivery | null };

export class Lane {
  readonly process: string;
  /** One SDK client per URL; requests go to them in turn. */
  private readonly clients: Narad[];
  private nextClient: number;
  private readonly recorder: OpRecorder;
  /** The lane's idempotent producer (next wave), made by `openIdempotent`. */
  private idempotentProducer: IdempotentProducer | null = null;

  constructor(process: string, urls: string | readonly string[], recorder: OpRecorder, opts: LaneOptions) {
    this.process = process;
    this.recorder = recorder;
    const list = typeof urls === "string" ? [urls] : urls;
    if (list.length === 0) throw new RangeError("a lane needs at least one URL");
    // One connection per node: a lane has one request in flight, like one client thread.
    this.clients = list.map(
      (url) =>
        new Narad({
          url,
          connections: 1,
          requestTimeoutMs: opts.requestTimeoutMs,
          connectTimeoutMs: opts.requestTimeoutMs,
          ...(opts.auth !== undefined ? { user: opts.auth.user, password: opts.auth.password } : {}),
          ...(opts.transport !== undefined ? { transport: opts.transport } : {}),
        }),
    );
    this.nextClient = (opts.firstUrl ?? 0) % this.clients.length;
  }

  close(): Promise<void> {
    return Promise.all(this.clients.map((c) => c.destroy().catch(() => undefined))).then(() => undefined);
  }

  /** The client of the next request: in turn over the nodes (consume on one, ack on the next, as a client of a cluster may). */
  private client(): Narad {
    const c = this.clients[this.nextClient]!;
    this.nextClient = (this.nextClient + 1) % this.clients.length;
    return c;
  }

  /** Records an operation around `exec`; a thrown error is mapped by failureOutcome. */
  private async op(f: OpF, invoke: Record<string, unknown>, exec: () => Promise<Outcome>): Promise<Outcome> {
    await this.recorder.invoke(this.process, f, invoke);
    let out: Outcome;
    try {
      out = await exec();
    } catch (e) {
      out = failureOutcome(e);
    }
    this.recorder.complete(this.process, out.type, out.value);
    return out;
  }

  async produce(topic: string, msg: string, payload: Buffer, key: string | null): Promise<Outcome> {
    return this.op("produce", key !== null ? { topic, msg, key } : { topic, msg }, async () => {
      const r = await this.client().produce(topic, payload, key !== null ? { key } : {});
      if (typeof r.partition !== "number" || typeof r.offset !== "number") {
        return { type: "info", value: { status: 202, error: "202 without partition and offset" }, status: 202 };
      }
      // The owner that stored it (its copier makes the child copies); on one node, the node itself.
      const owner = r.owner !== null && r.ownerBoot !== null ? { node: r.owner, boot: r.ownerBoot } : {};
      return { type: "ok", value: { partition: r.partition, offset: r.offset, status: 202, ...owner }, status: 202 };
    });
  }

  /**
   * Makes the lane's idempotent producer on its first node's client (the broker mints its id).
   * Throws NextWaveUnsupported when the server or SDK has none.
   */
  async openIdempotent(): Promise<void> {
    this.idempotentProducer = await idempotentProducer(this.clients[0]!);
  }

  /**
   * A produce through the lane's idempotent producer: the invoke names its producer id and
   * sequence; the SDK re-sends an ambiguous answer with the same sequence until it is definite,
   * so one operation covers every attempt. Its ok adds `duplicate: true` when the broker said so.
   */
  async produceIdempotent(topic: string, msg: string, payload: Buffer, key: string | null): Promise<Outcome> {
    const producer = this.idempotentProducer;
    if (producer === null) throw new Error("produceIdempotent before openIdempotent");
    const sequence = producer.nextSequence;
    const invoke: Record<string, unknown> = { topic, msg, ...(key !== null ? { key } : {}), producer: producer.producerId, sequence };
    return this.op("produce", invoke, async () => {
      const r = await producer.produce(topic, payload, key);
      if (!isNatural(r.partition) || !isNatural(r.offset)) return { type: "info", value: { status: 202, error: "202 without partition and offset" }, status: 202 };
      // The invoke said which sequence it carried: an SDK that numbered it otherwise makes it unknown.
      if (r.sequence !== null && r.sequence !== sequence) return { type: "info", value: { status: 202, error: `the SDK sent sequence ${r.sequence}, not ${sequence}` }, status: 202 };
      const owner = r.owner !== null && r.ownerBoot !== null ? { node: r.owner, boot: r.ownerBoot } : {};
      return { type: "ok", value: { partition: r.partition, offset: r.offset, status: 202, ...(r.duplicate ? { duplicate: true } : {}), ...owner }, status: 202 };
    });
  }

  /** One consume; `delivery` is set when a message was leased. */
  async consume(topic: string, waitMs: number): Promise<ConsumeOutcome> {
    let delivery: Delivery | null = null;
    const out = await this.op("consume", { topic }, async () => {
      const c = Lane.consumeAnswer(topic, await this.client().consume(topic, { waitMs }));
      delivery = c.delivery;
      return c;
    });
    return { ...out, delivery };
  }

  /**
   * `consume?ack=H`: the ack of `d` rides on this consume (docs/api.md). Recorded as two
   * operations, the ack on the lane's ack process (ackProcess) and the consume on the lane's own,
   * both invoked before the request leaves and completed by its one answer, so each recorded
   * interval contains the real one (protocol.ts). A 410 or a definite refusal leased nothing: the
   * consume fails; so does an ack refused for certain.
   */
  async consumeAcking(topic: string, waitMs: number, d: Delivery): Promise<{ ack: Outcome; consume: Outcome; delivery: Delivery | null }> {
    const ackP = ackProcess(this.process);
    await this.recorder.invoke(ackP, "ack", { topic, msg: d.msg, delivery: d.handle });
    await this.recorder.invoke(this.process, "consume", { topic });
    let ack: Outcome;
    let consume: ConsumeOutcome;
    try {
      const m = await this.client().consume(topic, { waitMs, ack: d.handle });
      ack = { type: "ok", value: { status: 204 }, status: m === null ? 204 : 200 };
      consume = Lane.consumeAnswer(topic, m);
    } catch (e) {
      ack = failureOutcome(e);
      // A 410 leased nothing, for certain; otherwise the consume shares the ack's fate.
      consume = e instanceof NaradGoneError ? { type: "fail", value: { status: 410 }, status: 410, delivery: null } : { ...ack, delivery: null };
    }
    this.recorder.complete(ackP, ack.type, ack.value);
    this.recorder.complete(this.process, consume.type, consume.value);
    return { ack, consume, delivery: consume.delivery };
  }

  /** A consume's answer in history terms; `delivery` is set when a message was leased. */
  static consumeAnswer(topic: string, m: Message | null): ConsumeOutcome {
    if (m === null) return { type: "ok", value: { topic, msg: null }, status: 204, delivery: null };
    // The lease holder: the partition's owner. On one node it is the node that answered.
    const { partition, offset, receiptHandle: handle, owner: node, ownerBoot: boot } = m;
    if (handle === "" || !isNatural(partition) || !isNatural(offset) || node === null || boot === null) {
      // A lease may exist, but the answer cannot name it: ambiguous.
      return { type: "info", value: { status: 200, error: "200 without the delivery headers" }, status: 200, delivery: null };
    }
    const msg = decodePayload(m.payload);
    const value: Record<string, unknown> = { topic, msg, partition, offset, delivery: handle, node, boot };
    const counted = isNatural(m.deliveryCount);
    if (counted) value["delivery_count"] = m.deliveryCount;
    // On a dead-letter topic: where it came from (next wave).
    const origin = originOf(m);
    if (origin !== null) value["origin"] = origin;
    return { type: "ok", value, status: 200, delivery: { msg, partition, offset, handle, deliveryCount: counted ? m.deliveryCount : 0 } };
  }

  async settle(topic: string, d: Delivery, action: SettleAction): Promise<Outcome> {
    return this.op(action, { topic, msg: d.msg, delivery: d.handle }, async () => {
      const c = this.client();
      if (action === "ack") await c.ack(topic, d.handle);
      else if (action === "extend") await c.extend(topic, d.handle);
      else if (action === "dead-letter") await deadLetterAck(c, topic, d.handle);
      else await c.nack(topic, d.handle);
      return { type: "ok", value: { status: 204 }, status: 204 };
    });
  }

  /** One replay page; `page` is set when it was read. */
  async replay(
    topic: string,
    partition: number,
    offset: number,
    limit: number,
  ): Promise<Outcome & { page: { count: number; nextOffset: number; endOffset: number } | null }> {
    let page: { count: number; nextOffset: number; endOffset: number } | null = null;
    const out = await this.op("replay", { topic, partition, offset, limit }, async () => {
      const r = await this.client().replay(topic, partition, { offset, limit });
      const msgs: Array<[number, string]> = r.messages.map((m) => [m.offset, decodePayload(m.payload)]);
      page = { count: msgs.length, nextOffset: r.nextOffset, endOffset: r.endOffset };
      return {
        type: "ok",
        value: { msgs, next_offset: r.nextOffset, end_offset: r.endOffset, earliest_offset: r.earliestOffset },
        status: 200,
      };
    });
    return { ...out, page };
  }
}

/** A partition, offset or count read from a header: a nonnegative safe integer (NaN when it was missing). */
function isNatural(n: number): boolean {
  return Number.isSafeInteger(n) && n >= 0;
}
