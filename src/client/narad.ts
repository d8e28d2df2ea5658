// The Narad SDK: a thin, typed layer over HTTP API v1 (docs/api.md).
//
// Design notes
// - One undici Pool per client, keep-alive, pipelining 1: a request never waits behind another
//   request's response on the same socket, so a long poll cannot delay a produce that shares the
//   pool (as long as `connections` leaves room). Header objects and topic paths are built once
//   and reused; the hot paths (produce, consume, ack) allocate little beyond the request itself.
// - Every failure is a typed error that says whether the operation certainly did not happen
//   (`definite`) or may have (src/client/errors.ts). The SDK never retries a request on its own:
//   only the caller knows whether a duplicate produce is acceptable. The two loops that must keep
//   going (messages(), autoExtend()) retry only what is safe to retry: consumes and extends.
// - Timeouts ride on undici's headers/body timeouts (no timer per request of our own); a long
//   poll adds its wait to the request timeout so the client never gives up before the server does.
// - What a caller that records outcomes needs is on every result and error: the owner that stored
//   or leased a message (`owner`, `ownerBoot`), and `status`, `code` and `definite` of a failure.
//   The verification workloads drive the SDK for that reason (one client per node with
//   `connections: 1`: one request in flight, nothing retried, every answer seen).
// - Imports only src/protocol: the SDK judges the broker from outside, like the toolkit does.

import { Pool } from "undici";
import type { Dispatcher } from "undici";
import {
  API_PREFIX,
  BATCH_BINARY_TYPE,
  DELIVERIES_TYPE,
  DEFAULTS,
  HEADERS,
  LIMITS,
  decodeDeliveries,
  encodeBinaryBatch,
  type AckBatchResult,
  type BatchProduceRequest,
  type BatchProduceResponse,
  type ChildJson,
  type ConsumeBatchResponse,
  type ConsumedMessageJson,
  type CreateTopicRequest,
  type GrantJson,
  type GrantRequest,
  type GrantsResponse,
  type PartitionStatsJson,
  type PlacementJson,
  type ReplayResponse,
  type TopicJson,
  type TopicStatsJson,
  type TopicsResponse,
  type UpdateTopicRequest,
  type UpdateUserRequest,
  type UserJson,
  type UsersResponse,
  type OriginJson,
} from "../protocol/wire.js";
import {
  NaradAmbiguousError,
  NaradClientError,
  NaradConnectionError,
  NaradGoneError,
  NaradPartialBatchError,
  NaradRequestError,
  errorFromResponse,
  errorFromTransport,
  refusedBeforeSending,
} from "./errors.js";
import { isErrorCode } from "../protocol/errors.js";
import { StreamTransport } from "./stream-transport.js";
import { BatchBudget, Batcher, batchingLimits, checkMessage, destroyedBeforeSending, outcomesOfPartial, type BatchItem, type Outcome } from "./batcher.js";
import { INSTALL_CLIENT_FAULTS, NO_CLIENT_FAULTS, type ClientFaults } from "./faults.js";
import type {
  AckStatus,
  AttachChildOptions,
  ClusterNode,
  CreateTopicOptions,
  Grant,
  GrantAction,
  MessageOrigin,
  NaradOptions,
  RedriveOptions,
  RedriveResult,
  PartitionMove,
  MessageHeaders,
  ProduceMessage,
  ProduceOptions,
  Produced,
  ReplayPage,
  ReplayedMessage,
  Topic,
  TopicChild,
  UpdateTopicOptions,
  User,
} from "./types.js";

type HeaderMap = Record<string, string>;

/** GET /v1/nodes's entries on the wire (docs/api.md). */
interface NodeJson {
  id: string;
  node_number: number;
  advertise_url: string | null;
  boot: string;
  state: "live" | "down";
  partitions: { topic: string; partition: number; epoch: number; moving_to?: string }[];
}
type Method = "GET" | "POST" | "PATCH" | "DELETE";

import { IdempotentProducer, type IdempotentProducerOptions } from "./producer.js";
import { autoExtendLoop, messagesLoop, processLoops, type AutoExtendOptions, type LoopOwn, type MessagesOptions, type ProcessOptions } from "./loops.js";

export type { AutoExtendOptions, MessagesOptions, ProcessOptions } from "./loops.js";
const REQUEST_TIMEOUT_MS_DEFAULT = 30_000;
/** How long movePartition waits for the move's answer: a move copies the partition's files. */
const MOVE_TIMEOUT_MS = 15 * 60_000;
const CONNECTIONS_DEFAULT = 64;
/** Cached per-topic paths and visibility timeouts; past this many topics the caches start over. */
const TOPIC_CACHE_MAX = 1024;

/** A leased message. Settle it with ack(), extend() or nack() before the visibility timeout ends. */
export class Message {
  readonly #client: Narad;

  constructor(
    client: Narad,
    readonly topic: string,
    /** The message bytes, exactly as produced. */
    readonly payload: Buffer,
    readonly key: string | null,
    readonly partition: number,
    readonly offset: number,
    /** 1 on the first delivery; grows with every redelivery. */
    readonly deliveryCount: number,
    /** Milliseconds since the epoch, set by the owner when the message was stored. */
    readonly producedAt: number,
    /** Opaque lease token; each delivery gets a new one and older ones stop working. */
    readonly receiptHandle: string,
    /** Node id that owns the partition and holds the lease. */
    readonly owner: string | null,
    /** Boot id of that node: it changes at every process start. */
    readonly ownerBoot: string | null,
    /** A dead letter's source (a message of a dead-letter topic); null on other messages. */
    readonly origin: MessageOrigin | null = null,
    /** The message's headers, as produced ({} when none). */
    readonly headers: MessageHeaders = {},
  ) {
    this.#client = client;
  }

  /** The payload decoded as UTF-8. */
  text(): string {
    return this.payload.toString("utf8");
  }

  /** See Narad.ack. */
  ack(): Promise<void> {
    return this.#client.ack(this.topic, this.receiptHandle);
  }

  /** See Narad.extend. */
  extend(): Promise<void> {
    return this.#client.extend(this.topic, this.receiptHandle);
  }

  /** See Narad.nack. */
  nack(): Promise<void> {
    return this.#client.nack(this.topic, this.receiptHandle);
  }

  /** See Narad.deadLetter. */
  deadLetter(): Promise<void> {
    return this.#client.deadLetter(this.topic, this.receiptHandle);
  }
}

export interface ConsumeOptions {
  /** Long poll: wait up to this long for a message (0..20 000). Default 0 (answer at once). */
  waitMs?: number;
  /** Aborting ends the wait with a NaradAmbiguousError (`aborted`). */
  signal?: AbortSignal;
  /**
   * A receipt handle of this topic to ack in the same request, before leasing the next message:
   * one round trip a message instead of two. consume() only.
   */
  ack?: string;
}

export interface ConsumeBatchOptions extends ConsumeOptions {
  /** 1..100, default 10. */
  maxMessages?: number;
  /** The answer's encoding: the compact binary one (default) or JSON with base64 payloads. */
  encoding?: "binary" | "json";
}

export interface ReplayOptions {
  /** First offset wanted; below the earliest retained, the page starts at the earliest. Default 0. */
  offset?: number;
  /** Page size; default 100, above 1000 is read as 1000. */
  limit?: number;
  signal?: AbortSignal;
}

/**
 * A client of one Narad node (or cluster: any node forwards to the owner).
 *
 * Errors: every method rejects with a subclass of {@link NaradClientError}:
 * - {@link NaradRequestError}: the server refused (`definite` from the error table: 400, 401, 403,
 *   404, 409, 413, 429, 503 are definite; retry 429/503 after `retryAfterS`).
 * - {@link NaradGoneError} (a NaradRequestError, 410): only ack/extend/nack.
 * - {@link NaradAmbiguousError}: no usable answer; it may have happened.
 * - {@link NaradConnectionError}: could not connect; nothing was sent.
 * Reads (list, get, replay) may be retried on any error.
 */
export class Narad {
  readonly url: string;
  readonly #pool: Pool;
  readonly #base: string;
  /** The URL's path prefix, for the paths outside the API (GET /metrics). */
  readonly #root: string;
  readonly #requestTimeoutMs: number;
  readonly #hNone: HeaderMap;
  readonly #hJson: HeaderMap;
  readonly #hOctet: HeaderMap;
  readonly #hProduce: HeaderMap;
  readonly #hBatch: HeaderMap;
  readonly #hDeliveries: HeaderMap;
  readonly #topicPaths = new Map<string, string>();
  readonly #visibilityMs = new Map<string, number>();
  /** produce() over the streaming protocol (`transport: "stream"`), else undefined. */
  readonly #stream: StreamTransport | undefined;
  /** produce() batching (./batcher.ts), shared with this client's idempotent producers; undefined when off. */
  readonly #budget: BatchBudget | undefined;
  readonly #batcher: Batcher<Produced> | undefined;
  /** Set by close() and destroy(): later produces go one request each, to fail as any request then does. */
  #closing = false;
  /** The consumer loops' fault seam (./faults.ts): NO_CLIENT_FAULTS unless the toolkit planted a bug. */
  #faults: ClientFaults = NO_CLIENT_FAULTS;
  /** What the consume loops (./loops.ts) need of this client beyond its calls. */
  readonly #own: LoopOwn = { faults: () => this.#faults, visibilityTimeoutMs: (topic) => this.#visibilityTimeoutMs(topic) };

  constructor(opts: NaradOptions) {
    const u = parseUrl(opts.url);
    this.url = opts.url;
    // A URL copied from docs/api.md's paths ends in the API's prefix: it is the base, not a proxy's
    // path (it made /v1/v1/topics).
    this.#root = u.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
    this.#base = this.#root + API_PREFIX;
    this.#requestTimeoutMs = opts.requestTimeoutMs ?? REQUEST_TIMEOUT_MS_DEFAULT;
    const user = opts.user ?? (u.username ? decodeURIComponent(u.username) : undefined);
    const password = opts.user !== undefined ? (opts.password ?? "") : u.password ? decodeURIComponent(u.password) : "";
    const auth: HeaderMap = user !== undefined ? { authorization: `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}` } : {};
    this.#hNone = auth;
    this.#hJson = { ...auth, "content-type": "application/json" };
    this.#hOctet = { ...auth, "content-type": "application/octet-stream" };
    // RFC 7240: a node that knows it may answer a single produce with a body-less 202 and the
    // result in headers (less to write and parse); one that does not sends the JSON body.
    this.#hProduce = { ...this.#hOctet, prefer: "return=minimal" };
    this.#hBatch = { ...auth, "content-type": BATCH_BINARY_TYPE };
    this.#hDeliveries = { ...auth, accept: DELIVERIES_TYPE };
    this.#stream = opts.transport === "stream" ? new StreamTransport({ url: u, authorization: auth.authorization, requestTimeoutMs: this.#requestTimeoutMs, connectTimeoutMs: opts.connectTimeoutMs ?? 10_000 }) : undefined;
    const limits = opts.transport === "stream" ? null : batchingLimits(opts.batching);
    this.#budget = limits === null ? undefined : new BatchBudget(limits);
    this.#batcher = this.#budget === undefined ? undefined : new Batcher<Produced>(this.#batchLane(), this.#budget);
    this.#pool = new Pool(u.origin, {
      connections: opts.connections ?? CONNECTIONS_DEFAULT,
      pipelining: 1,
      headersTimeout: this.#requestTimeoutMs,
      bodyTimeout: this.#requestTimeoutMs,
      ...(opts.connectTimeoutMs !== undefined ? { connectTimeout: opts.connectTimeoutMs } : {}),
    });
  }

  /**
   * Closes the connections after in-flight requests finish (a waiting long poll delays it);
   * produces waiting in the client to be batched are sent first.
   */
  async close(): Promise<void> {
    this.#closing = true;
    await this.#budget?.idle();
    if (this.#stream !== undefined) await this.#stream.close();
    return this.#pool.close();
  }

  /**
   * Closes the connections at once; in-flight requests fail with NaradAmbiguousError, and
   * produces still waiting in the client to be batched with a NaradConnectionError (not sent).
   */
  destroy(): Promise<void> {
    this.#closing = true;
    this.#budget?.failQueued(destroyedBeforeSending());
    this.#stream?.destroy();
    return this.#pool.destroy();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  /** Test-only (./faults.ts): the verification toolkit plants a seeded SDK bug here. */
  [INSTALL_CLIENT_FAULTS](faults: ClientFaults): void {
    this.#faults = faults;
  }

  // ---------------------------------------------------------------- topics

  /**
   * Creates a topic. Throws NaradRequestError `topic_exists` (409), `invalid_topic_name` or
   * `invalid_argument` (400). On NaradAmbiguousError retry: a 409 then means the first try worked.
   */
  async createTopic(opts: CreateTopicOptions): Promise<Topic> {
    const body: CreateTopicRequest = { name: opts.name };
    if (opts.partitions !== undefined) body.partitions = opts.partitions;
    if (opts.visibilityTimeoutMs !== undefined) body.visibility_timeout_ms = opts.visibilityTimeoutMs;
    if (opts.retentionMs !== undefined) body.retention_ms = opts.retentionMs;
    if (opts.replicationFactor !== undefined) body.replication_factor = opts.replicationFactor;
    if (opts.acks !== undefined) body.acks = opts.acks;
    if (opts.maxDeliveries !== undefined) body.max_deliveries = opts.maxDeliveries;
    if (opts.deadLetterTopic !== undefined) body.dead_letter_topic = opts.deadLetterTopic;
    const res = await this.#call("POST", `${this.#base}/topics`, this.#hJson, JSON.stringify(body), "create topic");
    return toTopic((await res.body.json()) as TopicJson);
  }

  /** Lists every topic. A read: safe to retry on any error. */
  async listTopics(): Promise<Topic[]> {
    const res = await this.#call("GET", `${this.#base}/topics`, this.#hNone, undefined, "list topics");
    return ((await res.body.json()) as TopicsResponse).topics.map(toTopic);
  }

  /** One topic; NaradRequestError `topic_not_found` (404) if none. A read: safe to retry. */
  async getTopic(name: string): Promise<Topic> {
    const res = await this.#call("GET", this.#topicPath(name), this.#hNone, undefined, "get topic");
    const t = toTopic((await res.body.json()) as TopicJson);
    this.#rememberVisibility(t.name, t.visibilityTimeoutMs);
    return t;
  }

  /**
   * Raises partitions (never lowers: `partitions_decrease`, 400) and changes the visibility timeout
   * and retention. Setting absolute values, it is safe to retry after a NaradAmbiguousError.
   */
  async updateTopic(name: string, opts: UpdateTopicOptions): Promise<Topic> {
    const body: UpdateTopicRequest = {};
    if (opts.partitions !== undefined) body.partitions = opts.partitions;
    if (opts.visibilityTimeoutMs !== undefined) body.visibility_timeout_ms = opts.visibilityTimeoutMs;
    if (opts.retentionMs !== undefined) body.retention_ms = opts.retentionMs;
    if (opts.acks !== undefined) body.acks = opts.acks;
    if (opts.maxDeliveries !== undefined) body.max_deliveries = opts.maxDeliveries;
    if (opts.deadLetterTopic !== undefined) body.dead_letter_topic = opts.deadLetterTopic;
    this.#visibilityMs.delete(name);
    const res = await this.#call("PATCH", this.#topicPath(name), this.#hJson, JSON.stringify(body), "update topic");
    const t = toTopic((await res.body.json()) as TopicJson);
    this.#rememberVisibility(t.name, t.visibilityTimeoutMs);
    return t;
  }

  /**
   * Settles every message of the topic now, leased or not (SQS's PurgeQueue; admin or the
   * topic's owner): resolves with how many were unacked, once that is durable. Leases held end:
   * their acks answer 410. Messages produced meanwhile may stay. Safe to retry.
   */
  async purgeTopic(name: string): Promise<number> {
    const res = await this.#call("POST", `${this.#topicPath(name)}/purge`, this.#hNone, undefined, "purge topic");
    return ((await res.body.json()) as { purged: number }).purged;
  }

  /** Deletes a topic and its messages. After a NaradAmbiguousError, a retry's 404 means it worked. */
  async deleteTopic(name: string): Promise<void> {
    this.#visibilityMs.delete(name);
    const res = await this.#call("DELETE", this.#topicPath(name), this.#hNone, undefined, "delete topic");
    await res.body.dump();
  }

  /**
   * Attaches a child topic to `parent` (docs/api.md, "Child topics"): it gets a copy of every
   * message committed to the parent from now on. Throws NaradRequestError `invalid_child` (400),
   * `topic_not_found` (404), `child_exists` (409), `node_down` (503: an owner of the parent is down).
   * After a NaradAmbiguousError retry: a `child_exists` then means the first try worked.
   */
  async attachChild(parent: string, child: AttachChildOptions): Promise<TopicChild> {
    const body: Record<string, unknown> = { topic: child.topic, kind: child.kind };
    if (child.delayMs !== undefined) body.delay_ms = child.delayMs;
    if (child.url !== undefined) body.url = child.url;
    if (child.credentials !== undefined) body.credentials = child.credentials;
    const res = await this.#call("POST", `${this.#topicPath(parent)}/children`, this.#hJson, JSON.stringify(body), "attach child");
    return toChild((await res.body.json()) as ChildJson);
  }

  /** The children of `parent`. A read: safe to retry. */
  async listChildren(parent: string): Promise<TopicChild[]> {
    const res = await this.#call("GET", `${this.#topicPath(parent)}/children`, this.#hNone, undefined, "list children");
    return ((await res.body.json()) as { children: ChildJson[] }).children.map(toChild);
  }

  /** Detaches a child: copying stops. NaradRequestError `child_not_found` (404) if it is not attached. */
  async detachChild(parent: string, child: string): Promise<void> {
    const res = await this.#call("DELETE", `${this.#topicPath(parent)}/children/${encodeURIComponent(child)}`, this.#hNone, undefined, "detach child");
    await res.body.dump();
  }

  // ---------------------------------------------------------------- produce

  /**
   * Produces one message; resolves once it is durable (fsynced on the owner).
   *
   * Throws NaradRequestError for a refusal, which never gets delivered later: `topic_not_found`
   * (404), `payload_too_large` (413), `overloaded` (429: retry after `retryAfterS`), `unavailable`
   * (503: retry shortly). Throws NaradAmbiguousError when the answer was lost: the message may be
   * stored, and producing it again may store it twice. NaradConnectionError: nothing was sent.
   * Resolves with the partition and offset, and the owner (node and boot id) that stored it.
   *
   * Calls that overlap are sent together as batches (docs/client.md, "Batching"; `batching:
   * false` turns it off): each still resolves or rejects with its own outcome, and an ambiguous
   * failure of a batch is ambiguous for each call in it.
   */
  produce(topic: string, payload: Uint8Array | string, opts: ProduceOptions & IdempotentSend = {}): Promise<Produced> {
    try {
      checkMessage(payload, opts.key, "produce");
    } catch (e) {
      return Promise.reject(e);
    }
    // Headers and a delay have no room in the binary batch, and an idempotent send carries its
    // own sequence: those go one request each.
    if (this.#batcher !== undefined && !this.#closing && opts.producerId === undefined && opts.headers === undefined && opts.delayMs === undefined) {
      return this.#batcher.produce(topic, toBuffer(payload), opts.key ?? null);
    }
    // The stream carries no producer id yet (a reserved field), nor headers or a delay: those go by HTTP.
    if (this.#stream !== undefined && opts.producerId === undefined && opts.headers === undefined && opts.delayMs === undefined) {
      return this.#stream.produce(topic, payload, opts.key ?? null, () => this.#produceHttp(topic, payload, opts));
    }
    return this.#produceHttp(topic, payload, opts);
  }

  async #produceHttp(topic: string, payload: Uint8Array | string, opts: ProduceOptions & IdempotentSend): Promise<Produced> {
    const tp = this.#topicPath(topic);
    let path = opts.key == null ? `${tp}/messages` : `${tp}/messages?key=${encodeURIComponent(opts.key)}`;
    if (opts.delayMs !== undefined) path += `${opts.key == null ? "?" : "&"}delay_ms=${opts.delayMs}`;
    // Headers ride in one request header as JSON, every character past ASCII \u-escaped (header
    // values are Latin-1 on the wire).
    const base = withProducer(this.#hProduce, opts);
    const h = opts.headers === undefined ? base : { ...base, [HEADERS.messageHeaders]: asciiJson(opts.headers) };
    const res = await this.#call("POST", path, h, payload, "produce");
    // The parsed body is the result: the owner's two fields go on it, no second object. A
    // body-less 202 (Prefer: return=minimal) has the result in headers instead.
    const text = await res.body.text();
    const r = text.length > 0 ? (JSON.parse(text) as Produced) : minimalAnswer(res.headers);
    r.owner = header(res.headers, HEADERS.owner) ?? header(res.headers, HEADERS.node) ?? null;
    r.ownerBoot = header(res.headers, HEADERS.ownerBoot) ?? header(res.headers, HEADERS.boot) ?? null;
    return r;
  }

  /**
   * Produces many messages in one request: one fsync and one 202 for all, results in request
   * order. The compact binary encoding is used unless `encoding: "json"`. Any message over 1 MiB,
   * or a batch over the batch limit (LIMITS.batchBodyBytesMax, LIMITS.batchMessagesMax), refuses
   * the whole batch (413). Errors as for produce(); an ambiguous batch may be stored entirely or
   * not at all, except a NaradPartialBatchError (a cluster stored only part of a batch that went
   * to several owners), whose `results` say per message whether it was stored. Each result names
   * the owner that stored it when one owner stored the whole batch (`Narad-Owner` of the
   * answer), else null.
   */
  async produceBatch(
    topic: string,
    messages: readonly ProduceMessage[],
    opts: { encoding?: "binary" | "json" } & IdempotentSend = {},
  ): Promise<Produced[]> {
    if (messages.length === 0) return [];
    if (messages.length > LIMITS.batchMessagesMax) {
      throw refusedBeforeSending("batch_too_large", `produce batch: ${messages.length} messages, over the ${LIMITS.batchMessagesMax} a batch holds`);
    }
    messages.forEach((m, i) => checkMessage(m.payload, m.key, `produce batch: messages[${i}]`));
    const path = `${this.#topicPath(topic)}/messages/batch`;
    let res: Dispatcher.ResponseData;
    try {
      // The binary encoding carries key and payload only: headers or a delay go as JSON.
      if (opts.encoding === "json" || messages.some((m) => m.headers !== undefined || m.delayMs !== undefined)) {
        const body: BatchProduceRequest = {
          messages: messages.map((m) => {
            const payload_base64 = toBuffer(m.payload).toString("base64");
            const j: BatchProduceRequest["messages"][number] & { headers?: MessageHeaders; delay_ms?: number } = m.key == null ? { payload_base64 } : { key: m.key, payload_base64 };
            if (m.headers !== undefined) j.headers = m.headers;
            if (m.delayMs !== undefined) j.delay_ms = m.delayMs;
            return j;
          }),
        };
        const text = JSON.stringify(body);
        checkBatchBody(Buffer.byteLength(text));
        res = await this.#call("POST", path, withProducer(this.#hJson, opts), text, "produce batch");
      } else {
        const body = encodeBinaryBatch(messages.map((m) => ({ key: m.key ?? null, payload: toBuffer(m.payload) })));
        checkBatchBody(body.length);
        res = await this.#call("POST", path, withProducer(this.#hBatch, opts), body, "produce batch");
      }
    } catch (e) {
      // Results that do not cover the batch message for message cannot say which were stored.
      if (e instanceof NaradPartialBatchError && e.results.length !== messages.length) throw new NaradAmbiguousError(e.code, e.message, e.status);
      throw e;
    }
    const results = ((await res.body.json()) as BatchProduceResponse).results as Produced[];
    const owner = header(res.headers, HEADERS.owner) ?? null;
    const ownerBoot = owner === null ? null : (header(res.headers, HEADERS.ownerBoot) ?? null);
    for (const r of results) {
      r.owner = owner;
      r.ownerBoot = ownerBoot;
    }
    return results;
  }

  /** How the batcher sends: one message as a single produce, more as one binary batch. */
  #batchLane() {
    const lane = {
      send: async (topic: string, items: readonly BatchItem[]): Promise<readonly Outcome<Produced>[]> => {
        if (items.length === 1) {
          const it = items[0]!;
          return [{ ok: true, value: await this.#produceHttp(topic, it.payload, it.key === null ? {} : { key: it.key }) }];
        }
        try {
          const rs = await this.produceBatch(topic, items.map((it) => (it.key === null ? { payload: it.payload } : { payload: it.payload, key: it.key })));
          return rs.map((value) => ({ ok: true, value }));
        } catch (e) {
          if (e instanceof NaradPartialBatchError) return outcomesOfPartial(e, (r) => ({ partition: r.partition, offset: r.offset, owner: null, ownerBoot: null }));
          throw e;
        }
      },
      partitions: async (topic: string) => (await this.getTopic(topic)).partitions,
    };
    return lane;
  }

  /**
   * A new producer id (POST /v1/producers): 32 hex digits, kept by the broker until unused for
   * its `producers.idle_expiry_ms`. Most callers want `producer({ idempotent: true })`, which
   * takes one and numbers its messages.
   */
  async createProducerId(): Promise<string> {
    const res = await this.#call("POST", `${this.#base}/producers`, this.#hJson, "{}", "create producer");
    return ((await res.body.json()) as { producer_id: string }).producer_id;
  }

  /**
   * An idempotent producer (./producer.ts): its produce() and produceBatch() re-send an
   * ambiguous answer with the same sequence until the answer is definite, so a message is stored
   * once. Its id is taken at its first produce.
   */
  producer(opts: IdempotentProducerOptions): IdempotentProducer {
    return new IdempotentProducer(this, opts, this.#closing ? undefined : this.#budget);
  }

  // ---------------------------------------------------------------- consume

  /**
   * Leases one message for the topic's visibility timeout, or resolves null when none arrived
   * within `waitMs`. Throws NaradRequestError `topic_not_found` (404), `too_many_waiters` (429).
   * A NaradAmbiguousError may have leased a message nobody will see: it comes back after the
   * visibility timeout. Retrying is always safe.
   *
   * With `ack`, that handle is acked first: when the ack is refused (NaradGoneError 410, or
   * NaradRequestError `invalid_receipt_handle` 400) nothing was leased; after a NaradAmbiguousError
   * the ack may have happened too (send it again: a 410 then may mean the first one worked).
   */
  async consume(topic: string, opts: ConsumeOptions = {}): Promise<Message | null> {
    const waitMs = opts.waitMs ?? 0;
    let path = `${this.#topicPath(topic)}/consume`;
    if (waitMs > 0) path += `?wait_ms=${waitMs}`;
    if (opts.ack !== undefined) path += `${waitMs > 0 ? "&" : "?"}ack=${encodeURIComponent(opts.ack)}`;
    const res = await this.#call("POST", path, this.#hNone, undefined, "consume", waitMs, opts.signal);
    if (res.statusCode === 204) {
      await res.body.dump();
      return null;
    }
    const payload = Buffer.from(await res.body.arrayBuffer());
    const h = res.headers;
    const rawKey = header(h, HEADERS.key);
    return new Message(
      this,
      topic,
      payload,
      rawKey === undefined ? null : decodeKey(rawKey),
      Number(header(h, HEADERS.partition)),
      Number(header(h, HEADERS.offset)),
      Number(header(h, HEADERS.deliveryCount)),
      Number(header(h, HEADERS.producedAt)),
      header(h, HEADERS.receiptHandle) ?? "",
      header(h, HEADERS.owner) ?? header(h, HEADERS.node) ?? null,
      header(h, HEADERS.ownerBoot) ?? header(h, HEADERS.boot) ?? null,
      originFromHeaders(h),
      parseHeaders(header(h, HEADERS.messageHeaders)),
    );
  }

  /**
   * Leases up to `maxMessages` (1..100) messages; an empty list when none arrived within `waitMs`.
   * Errors as for consume().
   */
  async consumeBatch(topic: string, opts: ConsumeBatchOptions = {}): Promise<Message[]> {
    const waitMs = opts.waitMs ?? 0;
    const max = opts.maxMessages ?? 10;
    const path = `${this.#topicPath(topic)}/consume/batch?max_messages=${max}&wait_ms=${waitMs}`;
    const binary = opts.encoding !== "json";
    const res = await this.#call("POST", path, binary ? this.#hDeliveries : this.#hNone, undefined, "consume batch", waitMs, opts.signal);
    if (binary && header(res.headers, "content-type") === DELIVERIES_TYPE) {
      const ds = decodeDeliveries(Buffer.from(await res.body.arrayBuffer()));
      if (typeof ds === "string") throw new NaradAmbiguousError("malformed_response", `consume batch: the node answered a malformed batch of messages (${ds}); what it leased comes back after the visibility timeout`, 200);
      return ds.map((d) => new Message(this, topic, d.payload, d.key === null ? null : d.key.toString("utf8"), d.partition, d.offset, d.deliveryCount, d.producedAtMs, d.receiptHandle, d.owner, d.ownerBoot, toOrigin(d.origin)));
    }
    const body = (await res.body.json()) as ConsumeBatchResponse & { owner?: string; owner_boot?: string };
    // The owner may be named per message (a cluster node can gather from several owners), for
    // the whole batch, or only by the headers of the node that answered; take the most precise.
    const owner = body.owner ?? header(res.headers, HEADERS.owner) ?? header(res.headers, HEADERS.node) ?? null;
    const ownerBoot = body.owner_boot ?? header(res.headers, HEADERS.ownerBoot) ?? header(res.headers, HEADERS.boot) ?? null;
    return body.messages.map((m) => {
      const x = m as ConsumedMessageJson & { owner?: string; owner_boot?: string };
      return new Message(
        this,
        topic,
        Buffer.from(m.payload_base64, "base64"),
        m.key ?? null,
        m.partition,
        m.offset,
        m.delivery_count,
        m.produced_at,
        m.receipt_handle,
        x.owner ?? owner,
        x.owner_boot ?? ownerBoot,
        toOrigin(m.origin),
        m.headers ?? {},
      );
    });
  }

  /**
   * Settles a message: it is never handed out again. Throws NaradGoneError (410) when the handle
   * is not the live lease (lapsed, settled already, or replaced by a later delivery): the message
   * may come back. NaradRequestError `invalid_receipt_handle` (400) for a forged or foreign handle.
   * After a NaradAmbiguousError, retrying is safe; a 410 on the retry may mean the first worked.
   */
  async ack(topic: string, receiptHandle: string): Promise<void> {
    const path = `${this.#topicPath(topic)}/ack?receipt_handle=${encodeURIComponent(receiptHandle)}`;
    const res = await this.#call("POST", path, this.#hNone, undefined, "ack");
    await res.body.dump();
  }

  /** Restarts the lease with a full visibility timeout from now. Errors as for ack(). */
  async extend(topic: string, receiptHandle: string): Promise<void> {
    const path = `${this.#topicPath(topic)}/ack?receipt_handle=${encodeURIComponent(receiptHandle)}&extend=true`;
    const res = await this.#call("POST", path, this.#hNone, undefined, "extend");
    await res.body.dump();
  }

  /** Ends the lease now: the message is available again at once. Errors as for ack(). */
  async nack(topic: string, receiptHandle: string): Promise<void> {
    const path = `${this.#topicPath(topic)}/ack?receipt_handle=${encodeURIComponent(receiptHandle)}&extend=0`;
    const res = await this.#call("POST", path, this.#hNone, undefined, "nack");
    await res.body.dump();
  }

  /**
   * Moves the leased message to the topic's dead-letter topic now (a handler that knows it can
   * never succeed). NaradRequestError `no_dead_letter_topic` (409) when the topic has none; else
   * errors as for ack().
   */
  async deadLetter(topic: string, receiptHandle: string): Promise<void> {
    const path = `${this.#topicPath(topic)}/ack?receipt_handle=${encodeURIComponent(receiptHandle)}&dead_letter=true`;
    const res = await this.#call("POST", path, this.#hNone, undefined, "dead letter");
    await res.body.dump();
  }

  /**
   * Produces messages of a dead-letter topic again to their origin topic (or `to`), durably, then
   * acks them in the dead-letter topic: at least once, never lost. One call moves at most
   * `maxMessages` (default 1 000); call again while `moved` is that many. After a
   * NaradAmbiguousError calling again is safe (a message may then be produced twice).
   */
  async redrive(deadLetterTopic: string, opts: RedriveOptions = {}): Promise<RedriveResult> {
    const body: { to?: string; max_messages?: number } = {};
    if (opts.to !== undefined) body.to = opts.to;
    if (opts.maxMessages !== undefined) body.max_messages = opts.maxMessages;
    const res = await this.#call("POST", `${this.#topicPath(deadLetterTopic)}/redrive`, this.#hJson, JSON.stringify(body), "redrive");
    const r = (await res.body.json()) as { moved: number; skipped?: number };
    return { moved: r.moved, skipped: r.skipped ?? 0 };
  }

  /**
   * Acks (default), extends (`extend: true`) or nacks (`extend: 0`) many handles in one request.
   * Resolves with one status per handle, in request order: 204, 410 or 400, what the single call
   * would have answered; per-handle failures do not throw. The request as a whole throws as ack().
   */
  async ackBatch(topic: string, receiptHandles: readonly string[], opts: { extend?: boolean | 0; deadLetter?: boolean } = {}): Promise<AckStatus[]> {
    if (receiptHandles.length === 0) return [];
    const body =
      opts.deadLetter === true
        ? { receipt_handles: receiptHandles, dead_letter: true }
        : opts.extend === true || opts.extend === 0
          ? { receipt_handles: receiptHandles, extend: opts.extend }
          : { receipt_handles: receiptHandles };
    const res = await this.#call("POST", `${this.#topicPath(topic)}/ack/batch`, this.#hJson, JSON.stringify(body), "ack batch");
    return ((await res.body.json()) as AckBatchResult).results.map((r) => (r.error !== undefined && isErrorCode(r.error) ? { receiptHandle: r.receipt_handle, status: r.status, error: r.error } : { receiptHandle: r.receipt_handle, status: r.status }));
  }

  /**
   * Long-polls the topic and yields leased messages until `signal` aborts (then it returns quietly)
   * or a definite error (404, 401, 403, 400) throws. Retryable failures (429, 503, network
   * errors, timeouts) are retried with backoff, up to `maxConsecutiveErrors` in a row. The caller
   * settles each message. Leaving the loop early (break, abort) nacks the messages of the current
   * batch that were not yielded yet. (./loops.ts)
   */
  messages(topic: string, opts: MessagesOptions = {}): AsyncGenerator<Message, void, undefined> {
    return messagesLoop(this, this.#own, topic, opts);
  }

  /**
   * Runs `handler` on each message of the topic, `concurrency` at a time (default 1), until
   * `signal` aborts. A message whose handler resolves is acked by the next consume (`ack` of
   * consume(): one request a message); one whose handler throws is nacked, so it is available
   * again at once. Handlers should finish within the topic's visibility timeout (slower ones:
   * messages() and autoExtend()). Retryable failures are retried with backoff as in messages();
   * a definite error (404, 401, 403, 400) rejects. See `onError` for handler failures and refused
   * acks. Resolves once aborted, after acking the last handled message. (./loops.ts)
   */
  process(topic: string, handler: (message: Message, signal: AbortSignal) => Promise<void> | void, opts: ProcessOptions = {}): Promise<void> {
    return processLoops(this, this.#own, topic, handler, opts);
  }

  /**
   * Runs `handler` while keeping the message's lease alive, then settles it: ack when the handler
   * resolves, nack when it throws (the handler's error is rethrown; a failed nack is ignored, the
   * lease then lapses on its own). The lease is extended every `intervalMs` (default a third of
   * the topic's visibility timeout, fetched once per topic) and no more once the handler ends.
   *
   * If the lease is lost (an extend answered 410, or no extend succeeded for a whole visibility
   * timeout) the `signal` given to the handler aborts with the reason: another consumer may get
   * the message, so the handler should stop. The final ack then throws NaradGoneError as well.
   * Resolves with the handler's result. (./loops.ts)
   */
  autoExtend<T>(message: Message, handler: (message: Message, signal: AbortSignal) => Promise<T> | T, opts: AutoExtendOptions = {}): Promise<T> {
    return autoExtendLoop(this, this.#own, message, handler, opts);
  }

  // ---------------------------------------------------------------- replay

  /**
   * Reads a page of a partition in offset order, acked or not, without taking leases. Throws
   * NaradRequestError `topic_not_found` or `partition_not_found` (404). A read: safe to retry.
   */
  async replay(topic: string, partition: number, opts: ReplayOptions = {}): Promise<ReplayPage> {
    const offset = opts.offset ?? 0;
    const limit = opts.limit ?? LIMITS.replayLimitDefault;
    const path = `${this.#topicPath(topic)}/partitions/${partition}/messages?offset=${offset}&limit=${limit}`;
    const res = await this.#call("GET", path, this.#hNone, undefined, "replay", 0, opts.signal);
    const body = (await res.body.json()) as ReplayResponse;
    return {
      messages: body.messages.map(
        (m): ReplayedMessage => ({
          partition,
          offset: m.offset,
          key: m.key ?? null,
          producedAt: m.produced_at,
          payload: Buffer.from(m.payload_base64, "base64"),
          origin: toOrigin(m.origin),
          headers: (m as { headers?: MessageHeaders }).headers ?? {},
          ...((m as { not_before?: number }).not_before !== undefined ? { notBefore: (m as { not_before?: number }).not_before } : {}),
        }),
      ),
      nextOffset: body.next_offset,
      earliestOffset: body.earliest_offset,
      endOffset: body.end_offset,
    };
  }

  /**
   * Yields every message of a partition from `fromOffset` up to the end offset seen by the last
   * page, page by page (`pageSize`, default 1000). Errors as for replay().
   */
  async *replayAll(
    topic: string,
    partition: number,
    fromOffset = 0,
    opts: { pageSize?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<ReplayedMessage, void, undefined> {
    let offset = fromOffset;
    const limit = opts.pageSize ?? LIMITS.replayLimitMax;
    for (;;) {
      const page = await this.replay(topic, partition, { offset, limit, signal: opts.signal });
      for (const m of page.messages) yield m;
      // An empty page also stops us: a page cannot be empty below the end offset, and trusting
      // that blindly would spin forever on a server that got it wrong.
      if (page.messages.length === 0 || page.nextOffset >= page.endOffset) return;
      offset = page.nextOffset;
    }
  }

  // ---------------------------------------------------------------- operations

  /** The node's metrics in the Prometheus text format (GET /metrics; docs/operations.md lists them). */
  async metrics(): Promise<string> {
    const res = await this.#call("GET", `${this.#root}/metrics`, this.#hNone, undefined, "metrics");
    return res.body.text();
  }

  // ---------------------------------------------------------------- cluster

  /** The nodes (GET /v1/nodes), each with its state and the partitions it owns that the caller may see. */
  async nodes(): Promise<ClusterNode[]> {
    const res = await this.#call("GET", `${this.#base}/nodes`, this.#hNone, undefined, "list nodes");
    const body = (await res.body.json()) as { nodes: NodeJson[] };
    return body.nodes.map((n) => ({
      id: n.id,
      nodeNumber: n.node_number,
      advertiseUrl: n.advertise_url,
      boot: n.boot,
      state: n.state,
      partitions: n.partitions.map((p) => (p.moving_to !== undefined ? { topic: p.topic, partition: p.partition, epoch: p.epoch, movingTo: p.moving_to } : { topic: p.topic, partition: p.partition, epoch: p.epoch })),
    }));
  }

  /**
   * Retires a node of a cluster for good (admin): it must be down and hold no partition, else
   * NaradRequestError `node_in_use` (409); `node_not_found` (404). Safe to retry (a 404 then may
   * mean the first try worked).
   */
  async removeNode(id: string): Promise<void> {
    const res = await this.#call("DELETE", `${this.#base}/nodes/${encodeURIComponent(id)}`, this.#hNone, undefined, "remove node");
    await res.body.dump();
  }

  /**
   * Moves a partition to another node (admin) and resolves once it is copied and switched. A move
   * copies the partition's files, so it may take minutes: the answer is awaited up to
   * `timeoutMs` (default 15 minutes). 400 for an unknown node or on a single node, 409
   * `move_conflict` while another move of it runs, 503 `node_down` if either node is down.
   */
  /**
   * Moves a partition to node `to` (admin). A replicated partition moves one replica: name the
   * node whose replica moves with `opts.from`.
   */
  async movePartition(topic: string, partition: number, to: string, opts: { timeoutMs?: number; from?: string; acceptLoss?: boolean } = {}): Promise<PartitionMove> {
    const path = `${this.#topicPath(topic)}/partitions/${partition}/move`;
    // acceptLoss: the owner is down for good; place the partition on `to` with nothing copied.
    const body: Record<string, unknown> = opts.from === undefined ? { to } : { to, from: opts.from };
    if (opts.acceptLoss === true) body.accept_loss = true;
    const res = await this.#call("POST", path, this.#hJson, JSON.stringify(body), "move partition", opts.timeoutMs ?? MOVE_TIMEOUT_MS);
    return (await res.body.json()) as PartitionMove;
  }

  // ---------------------------------------------------------------- users and grants (admin only)

  /** Creates a user. NaradRequestError 403 unless admin; 409 `user_exists`; 400 for a bad name or a password under 8 bytes. */
  async createUser(opts: { name: string; password: string }): Promise<User> {
    const res = await this.#call("POST", `${this.#base}/users`, this.#hJson, JSON.stringify(opts), "create user");
    const body = (await readJsonOrNull(res)) as UserJson | null;
    return { name: body?.name ?? opts.name, createdAt: body?.created_at };
  }

  async listUsers(): Promise<User[]> {
    const res = await this.#call("GET", `${this.#base}/users`, this.#hNone, undefined, "list users");
    return ((await res.body.json()) as UsersResponse).users.map((u) => ({ name: u.name, createdAt: u.created_at }));
  }

  /** Changes a password: a user may change their own, an admin anyone's. */
  async setUserPassword(name: string, password: string): Promise<void> {
    const body: UpdateUserRequest = { password };
    const res = await this.#call("PATCH", `${this.#base}/users/${encodeURIComponent(name)}`, this.#hJson, JSON.stringify(body), "set password");
    await res.body.dump();
  }

  async deleteUser(name: string): Promise<void> {
    const res = await this.#call("DELETE", `${this.#base}/users/${encodeURIComponent(name)}`, this.#hNone, undefined, "delete user");
    await res.body.dump();
  }

  /** Grants `action` on topics matching `pattern` (exact name or `prefix-*`; none for `admin`). */
  async addGrant(user: string, grant: { action: GrantAction; pattern?: string }): Promise<Grant> {
    const body: GrantRequest = grant.pattern === undefined ? { action: grant.action } : { action: grant.action, pattern: grant.pattern };
    const res = await this.#call("POST", `${this.#base}/users/${encodeURIComponent(user)}/grants`, this.#hJson, JSON.stringify(body), "add grant");
    const got = (await readJsonOrNull(res)) as GrantJson | null;
    return { action: got?.action ?? grant.action, pattern: got?.pattern ?? grant.pattern ?? null };
  }

  async listGrants(user: string): Promise<Grant[]> {
    const res = await this.#call("GET", `${this.#base}/users/${encodeURIComponent(user)}/grants`, this.#hNone, undefined, "list grants");
    return ((await res.body.json()) as GrantsResponse).grants.map((g) => ({ action: g.action, pattern: g.pattern ?? null }));
  }

  async revokeGrant(user: string, grant: { action: GrantAction; pattern?: string }): Promise<void> {
    let q = `action=${encodeURIComponent(grant.action)}`;
    if (grant.pattern !== undefined) q += `&pattern=${encodeURIComponent(grant.pattern)}`;
    const res = await this.#call("DELETE", `${this.#base}/users/${encodeURIComponent(user)}/grants?${q}`, this.#hNone, undefined, "revoke grant");
    await res.body.dump();
  }

  // ---------------------------------------------------------------- internals

  /** Sends one request; resolves with a 2xx response whose body the caller must consume. */
  async #call(
    method: Method,
    path: string,
    headers: HeaderMap,
    body: string | Uint8Array | undefined,
    what: string,
    waitMs = 0,
    signal?: AbortSignal,
  ): Promise<Dispatcher.ResponseData> {
    let res: Dispatcher.ResponseData;
    try {
      res = await this.#pool.request({
        method,
        path,
        headers,
        body,
        signal,
        // Only a long poll needs more than the pool's default; leave the rest unset.
        headersTimeout: waitMs > 0 ? this.#requestTimeoutMs + waitMs : undefined,
      });
    } catch (err) {
      throw errorFromTransport(err, what, signal?.aborted === true);
    }
    if (res.statusCode >= 200 && res.statusCode < 300) return res;
    let text = "";
    try {
      text = await res.body.text();
    } catch {
      // The error answer itself broke off; the status is all we know.
    }
    throw errorFromResponse(res.statusCode, text, res.headers["retry-after"]);
  }

  #topicPath(topic: string): string {
    let p = this.#topicPaths.get(topic);
    if (p === undefined) {
      if (this.#topicPaths.size >= TOPIC_CACHE_MAX) this.#topicPaths.clear();
      p = `${this.#base}/topics/${encodeURIComponent(topic)}`;
      this.#topicPaths.set(topic, p);
    }
    return p;
  }

  #rememberVisibility(topic: string, ms: number): void {
    if (this.#visibilityMs.size >= TOPIC_CACHE_MAX) this.#visibilityMs.clear();
    this.#visibilityMs.set(topic, ms);
  }

  async #visibilityTimeoutMs(topic: string): Promise<number> {
    const known = this.#visibilityMs.get(topic);
    if (known !== undefined) return known;
    return (await this.getTopic(topic)).visibilityTimeoutMs;
  }
}

/** The client's URL, or a TypeError that says what a good one looks like. */
function parseUrl(url: string): URL {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  if (u === undefined || (u.protocol !== "http:" && u.protocol !== "https:") || u.host === "") {
    const hint = /^[\w.-]+:\d+(\/|$)/.test(url) || /^[\w.-]+(\/|$)/.test(url) ? `; did you mean http://${url}?` : "";
    throw new TypeError(`Narad: url must be an absolute http:// or https:// URL such as http://127.0.0.1:7070, got ${JSON.stringify(url)}${hint}`);
  }
  return u;
}

function toTopic(t: TopicJson): Topic {
  const x = t as TopicJson & { placement?: PlacementJson[]; stats?: TopicStatsJson };
  const partitionStats = (p: PartitionStatsJson) => ({ partition: p.partition, backlog: p.backlog, inFlight: p.in_flight, oldestUnackedAgeMs: p.oldest_unacked_age_ms });
  return {
    name: t.name,
    partitions: t.partitions,
    visibilityTimeoutMs: t.visibility_timeout_ms ?? DEFAULTS.visibilityTimeoutMs,
    retentionMs: t.retention_ms ?? DEFAULTS.retentionMs,
    replicationFactor: t.replication_factor ?? 1,
    acks: t.acks ?? "leader",
    maxDeliveries: t.max_deliveries ?? null,
    deadLetterTopic: t.dead_letter_topic ?? null,
    owner: t.owner ?? null,
    children: (t.children ?? []).map(toChild),
    parent: t.parent == null ? null : { topic: t.parent.topic, kind: t.parent.kind },
    createdAt: t.created_at,
    placement: x.placement?.map((p) => ({ partition: p.partition, node: p.node, epoch: p.epoch, replicas: p.replicas ?? [p.node], inSync: p.in_sync ?? [p.node] })),
    stats: x.stats === undefined ? undefined : { backlog: x.stats.backlog, inFlight: x.stats.in_flight, oldestUnackedAgeMs: x.stats.oldest_unacked_age_ms, partitions: x.stats.partitions.map(partitionStats) },
  };
}

function toOrigin(o: OriginJson | undefined): MessageOrigin | null {
  return o === undefined ? null : { topic: o.topic, partition: o.partition, offset: o.offset, deliveries: o.deliveries, producedAt: o.produced_at };
}

function originFromHeaders(h: Record<string, string | string[] | undefined>): MessageOrigin | null {
  const topic = header(h, HEADERS.originTopic);
  if (topic === undefined) return null;
  return {
    topic,
    partition: Number(header(h, HEADERS.originPartition)),
    offset: Number(header(h, HEADERS.originOffset)),
    deliveries: Number(header(h, HEADERS.originDeliveries)),
    producedAt: Number(header(h, HEADERS.originProducedAt)),
  };
}

function toChild(c: ChildJson): TopicChild {
  return c.delay_ms === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delayMs: c.delay_ms };
}

function checkBatchBody(bytes: number): void {
  if (bytes > LIMITS.batchBodyBytesMax) {
    throw refusedBeforeSending("batch_too_large", `produce batch: the request body would be ${bytes} bytes, over the ${LIMITS.batchBodyBytesMax}-byte limit`);
  }
}

/** Headers as one ASCII header value: JSON, every character past ASCII \u-escaped. */
function asciiJson(h: MessageHeaders): string {
  return JSON.stringify(h).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/** A consume's Narad-Headers ({} when absent or not an object of strings). */
function parseHeaders(raw: string | undefined): MessageHeaders {
  if (raw === undefined) return {};
  try {
    const v = JSON.parse(raw) as unknown;
    return typeof v === "object" && v !== null && !Array.isArray(v) ? (v as MessageHeaders) : {};
  } catch {
    return {};
  }
}

/** Options of produce() and produceBatch() that make them idempotent; IdempotentProducer sets them. */
export interface IdempotentSend {
  /** From createProducerId(). */
  producerId?: string;
  /** The message's sequence (a batch's first; its messages take N, N+1, …). */
  sequence?: number;
}

function withProducer(h: HeaderMap, o: IdempotentSend): HeaderMap {
  if (o.producerId === undefined) return h;
  return { ...h, [HEADERS.producerId]: o.producerId, [HEADERS.sequence]: String(o.sequence ?? 0) };
}

/** A body-less 202 (Prefer: return=minimal): the result is in Narad-Partition, Narad-Offset and Narad-Duplicate. */
function minimalAnswer(h: Record<string, string | string[] | undefined>): Produced {
  const partition = Number(header(h, HEADERS.partition) ?? NaN);
  const offset = Number(header(h, HEADERS.offset) ?? NaN);
  if (!Number.isSafeInteger(partition) || !Number.isSafeInteger(offset) || partition < 0 || offset < 0) {
    throw new NaradAmbiguousError("invalid_answer", "produce: a 202 without a body and without Narad-Partition and Narad-Offset; the message is stored, where is not known");
  }
  const r: Produced = { partition, offset, owner: null, ownerBoot: null };
  if (header(h, HEADERS.duplicate) === "true") r.duplicate = true;
  return r;
}

function header(h: Record<string, string | string[] | undefined>, name: string): string | undefined {
  const v = h[name];
  return Array.isArray(v) ? v[0] : v;
}

function decodeKey(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw; // not valid percent-encoding: hand over what the server sent
  }
}

function toBuffer(p: Uint8Array | string): Buffer {
  if (typeof p === "string") return Buffer.from(p, "utf8");
  return Buffer.isBuffer(p) ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength);
}

async function readJsonOrNull(res: Dispatcher.ResponseData): Promise<unknown> {
  const text = await res.body.text();
  if (text.length === 0) return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return null;
  }
}


