// Public value types of the SDK: the wire's snake_case JSON in camelCase, units in the names.
// The conversion happens once, at the edge (src/client/narad.ts), so callers never see the wire.

import type { ErrorCode } from "../protocol/errors.js";
import type { AcksMode, GrantAction } from "../protocol/wire.js";

export type { AcksMode };

export type { GrantAction };

export interface NaradOptions {
  /** Base URL of any node, e.g. `http://127.0.0.1:7070`. A path prefix is kept (for reverse proxies); `user:password@` in the URL is used for Basic auth unless `user` is given. */
  url: string;
  /** HTTP Basic auth user; needed when the node runs with security on. */
  user?: string;
  password?: string;
  /**
   * How long to wait for an answer before giving up with a NaradAmbiguousError (`request_timeout`).
   * A long poll gets its `waitMs` on top. Rounded up to undici's timer resolution (about a second).
   * Default 30 000.
   */
  requestTimeoutMs?: number;
  /** Most keep-alive connections to the node. Each waiting long poll holds one. Default 64. */
  connections?: number;
  /**
   * How long opening a connection may take before the request fails with a NaradConnectionError
   * (nothing was sent). Default 10 000 (undici's).
   */
  connectTimeoutMs?: number;
  /**
   * How produce() reaches the node: `"http"` (default), one request per message, or `"stream"`,
   * the streaming protocol (docs/api.md, "Streaming protocol"): one long-lived connection,
   * messages pipelined as binary frames, each answered on its own. A node that does not offer the
   * stream is used over HTTP. Everything but produce() goes over HTTP either way.
   */
  transport?: "http" | "stream";
  /**
   * Batching of produce() calls that overlap (docs/client.md, "Batching"): on by default over
   * HTTP. `false` sends every produce() as its own request; an object sets the bounds. Not used
   * with `transport: "stream"`, which pipelines each message as a frame of its own.
   */
  batching?: boolean | BatchingOptions;
}

/** Bounds of produce() batching (docs/client.md, "Batching"); each has a default. */
export interface BatchingOptions {
  /** Most messages in one batch request. Default 1 000 (at most 10 000, the node's limit). */
  batchMessagesMax?: number;
  /** Most bytes of one batch request's body (a message over it goes alone). Default 1 MiB (at most 16 MiB, the node's limit). */
  batchBytesMax?: number;
  /** Most batches of one topic out at once (keyed partitions: one each). Default 4. */
  batchesInFlightMax?: number;
  /** Most messages waiting in the client, over all topics; past it produce() fails at once with a definite 429 `overloaded`. Default 100 000. */
  queuedMessagesMax?: number;
  /** Most bytes waiting in the client, over all topics; past it as queuedMessagesMax. Default 64 MiB. */
  queuedBytesMax?: number;
}

export interface TopicChild {
  topic: string;
  kind: "fanout" | "delay" | "replica" | "remote";
  delayMs?: number;
}

/** What attachChild() takes: a child topic of `kind`; a remote one names the other cluster. */
export interface AttachChildOptions {
  topic: string;
  kind: TopicChild["kind"];
  /** delay only: how long after the parent committed a message its copy is made, ms. */
  delayMs?: number;
  /** remote only: a node of the other cluster. */
  url?: string;
  /** remote only: the user the copies are pushed as there. */
  credentials?: { user: string; password: string };
}

export interface PartitionPlacement {
  partition: number;
  /** The owner (the leader of a replicated partition). */
  node: string;
  epoch: number;
  /** Nodes holding a copy, the leader first. */
  replicas: string[];
  /** The replicas holding every record the leader acknowledged. */
  inSync: string[];
}

export interface Topic {
  name: string;
  partitions: number;
  visibilityTimeoutMs: number;
  retentionMs: number;
  /** Copies of each partition (1 unless created with more, in a cluster). */
  replicationFactor: number;
  /** What a 202 waits for: the leader's fsync, or a majority of the replicas'. */
  acks: AcksMode;
  /** Deliveries a message gets before it is moved to `deadLetterTopic`; null: unlimited. */
  maxDeliveries: number | null;
  /** Where messages go once their deliveries ran out (or a consumer dead-letters them); null: none. */
  deadLetterTopic: string | null;
  /** The user who created the topic; null when security is off. */
  owner: string | null;
  children: TopicChild[];
  /** The topic this one is a child of (attachChild), or null. */
  parent: { topic: string; kind: TopicChild["kind"] } | null;
  /** Milliseconds since the epoch, when the server reports it. */
  createdAt: number | undefined;
  /** Cluster mode only: which node owns each partition, with its ownership epoch. */
  placement: PartitionPlacement[] | undefined;
  /** getTopic() on a single node: backlog, in-flight leases and oldest unacked age, in all and per partition. */
  stats: TopicStats | undefined;
}

export interface PartitionStats {
  partition: number;
  /** Unacked durable messages: available, leased or returned. */
  backlog: number;
  /** Live leases. */
  inFlight: number;
  /** Age of the oldest unacked message (0 when none is unacked). */
  oldestUnackedAgeMs: number;
}

/** The partitions' stats and their sums (oldestUnackedAgeMs: the largest). */
export interface TopicStats {
  backlog: number;
  inFlight: number;
  oldestUnackedAgeMs: number;
  partitions: PartitionStats[];
}

export interface CreateTopicOptions {
  name: string;
  /** Default 3. */
  partitions?: number;
  /** Lease length of a consumed message. Default 30 000. */
  visibilityTimeoutMs?: number;
  /** How long messages are kept, acked or not. Default 7 days. */
  retentionMs?: number;
  /** Copies of each partition, 1..5 (above 1 needs a cluster). Default 1. */
  replicationFactor?: number;
  /** Default "quorum" when replicationFactor is above 1. */
  acks?: AcksMode;
  /** 1..1000 deliveries, then the message moves to deadLetterTopic (which it needs). Default unlimited. */
  maxDeliveries?: number | null;
  /** An existing topic other than this one. */
  deadLetterTopic?: string | null;
}

export interface UpdateTopicOptions {
  /** May only grow. */
  partitions?: number;
  visibilityTimeoutMs?: number;
  retentionMs?: number;
  /** A replicated topic's acks mode (the factor is fixed at create). */
  acks?: AcksMode;
  /** null clears it. */
  maxDeliveries?: number | null;
  /** null clears it (max_deliveries must be cleared too). */
  deadLetterTopic?: string | null;
}

/** Where a dead letter came from (a message of a dead-letter topic). */
export interface MessageOrigin {
  topic: string;
  partition: number;
  offset: number;
  /** Deliveries it had on its topic when it was moved. */
  deliveries: number;
  /** When the original was produced, ms since the epoch. */
  producedAt: number;
}

export interface RedriveOptions {
  /** Produce them here instead of to each message's origin topic. */
  to?: string;
  /** At most this many (1..10 000; default 1 000). */
  maxMessages?: number;
}

export interface RedriveResult {
  moved: number;
  /** Messages without an origin when no `to` was given: left in the dead-letter topic. */
  skipped: number;
}

/** Where a message of a batch produce was stored. */
export interface ProduceResult {
  partition: number;
  offset: number;
  /** An idempotent produce whose (producer, sequence) was stored before: this is the original, nothing was stored again. */
  duplicate?: boolean;
}

/** What produce() resolves with: where the message was stored, and the node that stored it. */
export interface Produced extends ProduceResult {
  /** Node id of the partition's owner, which made it durable (`Narad-Owner`; on one node, the node). */
  owner: string | null;
  /** Boot id of that node: it changes at every process start (`Narad-Owner-Boot`). */
  ownerBoot: string | null;
}

/** A message's own string attributes, stored with it and returned on consume and replay (docs/api.md, "Headers"). */
export type MessageHeaders = Record<string, string>;

export interface ProduceMessage {
  payload: Uint8Array | string;
  key?: string;
  /** Stored with the message; a batch with any goes as JSON (the binary encoding has none). */
  headers?: MessageHeaders;
  /** Not delivered before this many ms after it is stored (0..7 days). */
  delayMs?: number;
}

export interface ProduceOptions {
  key?: string;
  headers?: MessageHeaders;
  /** Not delivered before this many ms after it is stored (0..7 days). */
  delayMs?: number;
}

export interface ReplayedMessage {
  partition: number;
  offset: number;
  key: string | null;
  producedAt: number;
  payload: Buffer;
  /** A dead letter's source; null on other messages. */
  origin: MessageOrigin | null;
  /** Its headers ({} when none). */
  headers: MessageHeaders;
  /** A delayed message: when it may first be delivered (ms since the epoch). */
  notBefore?: number;
}

export interface ReplayPage {
  messages: ReplayedMessage[];
  /** Offset to ask for next. */
  nextOffset: number;
  /** Lowest offset still retained. */
  earliestOffset: number;
  /** One past the highest offset written. */
  endOffset: number;
}

/**
 * What each handle of an ack batch got: the status a single ack would have answered (204, 400,
 * 410; in a cluster also 503 while the handle's owner is unreachable and 502 when a forward's
 * answer was lost), and for any but 204 the error code of that answer (src/protocol/errors.ts:
 * whether it is definite is the table's to say: `ERRORS[error].definite`).
 */
export interface AckStatus {
  receiptHandle: string;
  status: number;
  error?: ErrorCode;
}

export interface User {
  name: string;
  /** Milliseconds since the epoch, when the server reports it. */
  createdAt: number | undefined;
}

export interface Grant {
  action: GrantAction;
  /** Exact topic name or prefix wildcard (`orders-*`); null for `admin`. */
  pattern: string | null;
}

/** A node of the cluster as GET /v1/nodes shows it (a single node shows itself, owning everything). */
export interface ClusterNode {
  id: string;
  nodeNumber: number;
  /** null on a single node. */
  advertiseUrl: string | null;
  boot: string;
  state: "live" | "down";
  /** The partitions it owns, of the topics the caller may see; `movingTo` while a move copies one away. */
  partitions: { topic: string; partition: number; epoch: number; movingTo?: string }[];
}

/** A completed partition move (POST /v1/topics/{t}/partitions/{p}/move). */
export interface PartitionMove {
  topic: string;
  partition: number;
  from: string;
  to: string;
  /** The ownership epoch the new owner serves at. */
  epoch: number;
}
