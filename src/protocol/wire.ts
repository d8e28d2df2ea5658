// Wire types and limits of HTTP API version 1, shared by the server, the SDK and the toolkit.
// Names on the wire are snake_case; the same words in camelCase inside the code.

export const API_PREFIX = "/v1";

export const TOPIC_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/;

export const LIMITS = {
  /** Largest message payload. Exactly this many bytes is accepted; one more is 413. */
  messageBytesMax: 1_048_576,
  /** Largest batch produce request body (binary or JSON). Over it: 413 batch_too_large. */
  batchBodyBytesMax: 16 * 1_048_576,
  /** Most messages in one batch produce. */
  batchMessagesMax: 10_000,
  /** Most messages per consume batch. */
  consumeBatchMax: 100,
  /** Longest long poll. */
  waitMsMax: 20_000,
  /** Replay: default and largest page. */
  replayLimitDefault: 100,
  replayLimitMax: 1000,
  /** Most receipt handles in one ack batch. */
  ackBatchMax: 1000,
  /** Largest JSON body of the small control requests (topics, acks, users). */
  controlBodyBytesMax: 1_048_576,
  /** Partitions a topic may have. */
  partitionsMax: 1024,
  /** Bounds of a topic's visibility timeout and retention. */
  visibilityTimeoutMsMin: 1,
  visibilityTimeoutMsMax: 12 * 3600 * 1000,
  retentionMsMin: 1000,
  retentionMsMax: 10 * 365 * 24 * 3600 * 1000,
  keyBytesMax: 4096,
  /** Copies of each partition a topic may keep (SPEC "Replicated partitions"). */
  replicationFactorMax: 5,
  /** Bounds of a topic's max_deliveries (SPEC "Dead letters"; null: unlimited). */
  maxDeliveriesMin: 1,
  maxDeliveriesMax: 1000,
  /** Redrive: messages one request moves when it names no max_messages, and the most it may name. */
  redriveMessagesDefault: 1000,
  redriveMessagesMax: 10_000,
  /** A message's headers (issue 16 item 13): at most this many, names and values bounded. */
  headersMax: 16,
  /** Header names match HEADER_NAME_RE, at most this many bytes. */
  headerNameBytesMax: 64,
  headerValueBytesMax: 1024,
  /** Names and values of one message's headers together. */
  headersBytesMax: 4096,
  /** A per-message delay (?delay_ms=, "delay_ms"): 0 to 7 days. */
  delayMsMax: 7 * 24 * 3600 * 1000,
} as const;

export const DEFAULTS = {
  listen: "127.0.0.1:7070",
  partitions: 3,
  visibilityTimeoutMs: 30_000,
  retentionMs: 7 * 24 * 3600 * 1000,
  ackFlushIntervalMs: 100,
  ackSyncIntervalMs: 1000,
} as const;

/** Names of a message's headers. */
export const HEADER_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

export const HEADERS = {
  node: "narad-node",
  boot: "narad-boot",
  receiptHandle: "narad-receipt-handle",
  partition: "narad-partition",
  offset: "narad-offset",
  key: "narad-key",
  deliveryCount: "narad-delivery-count",
  producedAt: "narad-produced-at",
  owner: "narad-owner",
  ownerBoot: "narad-owner-boot",
  /** A message's own headers, as a JSON object of strings (ASCII: other characters \u-escaped). */
  messageHeaders: "narad-headers",
  /** Idempotent produce (docs/api.md): the producer's id, its sequence, and the duplicate answer. */
  producerId: "narad-producer-id",
  sequence: "narad-sequence",
  duplicate: "narad-duplicate",
  originTopic: "narad-origin-topic",
  originPartition: "narad-origin-partition",
  originOffset: "narad-origin-offset",
  originDeliveries: "narad-origin-deliveries",
  originProducedAt: "narad-origin-produced-at",
} as const;

/** Content type of the compact binary batch produce encoding (see docs/api.md). */
export const BATCH_BINARY_TYPE = "application/vnd.narad.batch";

export interface ChildJson {
  topic: string;
  kind: "fanout" | "delay" | "replica" | "remote";
  delay_ms?: number;
}

/**
 * What a topic is created and changed with (docs/api.md). Declared once: the wire's JSON, the
 * broker's metadata, the control plane's rows and every request type are built from it.
 */
export interface TopicSettingsJson {
  partitions: number;
  visibility_timeout_ms: number;
  retention_ms: number;
}

/** What a 202 waits for on a replicated topic: the leader's fsync, or a majority's. */
export type AcksMode = "leader" | "quorum";
export const ACKS_MODES: readonly AcksMode[] = ["leader", "quorum"];

/** Replication settings: every topic shows them; a factor above 1 needs a cluster. */
export interface ReplicationJson {
  /** Copies of each partition, leader included (1..LIMITS.replicationFactorMax). */
  replication_factor: number;
  /** "quorum" by default when the factor is above 1; "leader" with one copy. */
  acks: AcksMode;
}

/**
 * Dead letters (SPEC "Dead letters"): a message is delivered at most max_deliveries times, then
 * moved to dead_letter_topic. Both null by default; max_deliveries needs a dead_letter_topic.
 */
export interface DeadLetterJson {
  /** 1..LIMITS.maxDeliveriesMax, or null: unlimited. */
  max_deliveries: number | null;
  /** An existing topic other than this one, or null. */
  dead_letter_topic: string | null;
}

/** Where a dead letter came from, as the JSON answers show it. */
export interface OriginJson {
  topic: string;
  partition: number;
  offset: number;
  /** Deliveries it had on its topic when it was moved. */
  deliveries: number;
  /** The produce time of the original message, ms since the epoch. */
  produced_at: number;
}

export interface TopicJson extends TopicSettingsJson, ReplicationJson, DeadLetterJson {
  name: string;
  owner: string | null;
  children: ChildJson[];
  /** The topic this one is a child of, if any. */
  parent?: { topic: string; kind: ChildJson["kind"] } | null;
  created_at: number;
}

/** A partition's delivery state in GET /v1/topics/{t}'s `stats` (docs/api.md). */
export interface PartitionStatsJson {
  partition: number;
  /** Unacked durable messages: available, leased or returned. */
  backlog: number;
  /** Live leases. */
  in_flight: number;
  /** Age of the oldest unacked message, ms; 0 when none is unacked. */
  oldest_unacked_age_ms: number;
}

/** GET /v1/topics/{t}'s `stats`: the partitions' and their sums (the oldest age: their largest). */
export interface TopicStatsJson {
  backlog: number;
  in_flight: number;
  oldest_unacked_age_ms: number;
  partitions: PartitionStatsJson[];
}

/** One partition's entry of a cluster topic's `placement`. */
export interface PlacementJson {
  partition: number;
  /** The owner: the leader of a replicated partition. */
  node: string;
  epoch: number;
  /** Node ids holding a copy, the leader first. */
  replicas: string[];
  /** The replicas holding every record the leader acknowledged. */
  in_sync: string[];
}

export interface CreateTopicRequest extends Partial<TopicSettingsJson>, Partial<ReplicationJson>, Partial<DeadLetterJson> {
  name: string;
}

/** PATCH: settings, more partitions, the acks mode (the factor is fixed at create), dead letters (null clears). */
export type UpdateTopicRequest = Partial<TopicSettingsJson> & { acks?: AcksMode } & Partial<DeadLetterJson>;

/** The acks a topic gets when the create names none. */
export function defaultAcks(replicationFactor: number): AcksMode {
  return replicationFactor > 1 ? "quorum" : "leader";
}

export interface ProduceResult {
  partition: number;
  offset: number;
}

export interface BatchProduceRequest {
  messages: { key?: string; payload_base64: string }[];
}

export interface ConsumedMessageJson {
  receipt_handle: string;
  partition: number;
  offset: number;
  key: string | null;
  delivery_count: number;
  produced_at: number;
  payload_base64: string;
  /** The partition's owner that holds the lease, and its boot id. */
  owner: string;
  owner_boot: string;
  /** A dead letter's source; absent on other messages. */
  origin?: OriginJson;
  /** The message's headers, when it has any. */
  headers?: Record<string, string>;
}

export interface AckBatchRequest {
  receipt_handles: string[];
  extend?: boolean | number;
  /** Move every leased message named to the topic's dead-letter topic. */
  dead_letter?: boolean;
}

/** POST /v1/topics/{dlq}/redrive. */
export interface RedriveRequest {
  max_messages?: number;
  /** Where to produce them (default: each message's origin topic). */
  to?: string;
}

export interface RedriveResponse {
  moved: number;
  /** Messages with no origin and no `to`: left in the dead-letter topic. */
  skipped: number;
}

export interface AckBatchResult {
  /** `error`: the code the single request would have answered, on any status but 204. */
  results: { receipt_handle: string; status: number; error?: string }[];
}

export interface ReplayMessageJson {
  offset: number;
  key: string | null;
  produced_at: number;
  payload_base64: string;
  /** A dead letter's source; absent on other messages. */
  origin?: OriginJson;
}

export interface ReplayResponse {
  messages: ReplayMessageJson[];
  next_offset: number;
  earliest_offset: number;
  end_offset: number;
}

/**
 * The binary batch produce body (Content-Type application/vnd.narad.batch):
 *
 *   repeated until the end of the body:
 *     u32 BE  key length + 1   (0 = no key)
 *     bytes   key (UTF-8)
 *     u32 BE  payload length
 *     bytes   payload
 *
 * It carries exactly what the JSON form does, without base64's third more bytes and its parse.
 */
export function encodeBinaryBatch(messages: { key?: string | null; payload: Uint8Array }[]): Buffer {
  let size = 0;
  const keys: (Buffer | null)[] = [];
  for (const m of messages) {
    const k = m.key == null ? null : Buffer.from(m.key, "utf8");
    keys.push(k);
    size += 8 + (k?.length ?? 0) + m.payload.length;
  }
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (let i = 0; i < messages.length; i++) {
    const k = keys[i]!;
    const p = messages[i]!.payload;
    out.writeUInt32BE(k === null ? 0 : k.length + 1, at);
    at += 4;
    if (k !== null) at += k.copy(out, at);
    out.writeUInt32BE(p.length, at);
    at += 4;
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * Reads a body kept as the chunks it arrived in, without joining them: a field that lies in one
 * chunk comes back as a view of it, one that straddles two as a copy (a few in a large batch).
 */
class ChunkReader {
  private i = 0;
  private at = 0;
  /** Bytes read so far. */
  position = 0;
  readonly total: number;

  constructor(private readonly chunks: readonly Buffer[]) {
    let n = 0;
    for (const c of chunks) n += c.length;
    this.total = n;
  }

  get remaining(): number {
    return this.total - this.position;
  }

  /** The next n bytes (the caller checked `remaining`). */
  take(n: number): Buffer {
    while (this.i < this.chunks.length && this.at === this.chunks[this.i]!.length) {
      this.i++;
      this.at = 0;
    }
    this.position += n;
    const c = this.chunks[this.i];
    if (c === undefined || n === 0) return EMPTY;
    if (c.length - this.at >= n) {
      this.at += n;
      return c.subarray(this.at - n, this.at);
    }
    const out = Buffer.allocUnsafe(n);
    for (let filled = 0; filled < n; ) {
      const d = this.chunks[this.i]!;
      const k = Math.min(n - filled, d.length - this.at);
      d.copy(out, filled, this.at, this.at + k);
      filled += k;
      this.at += k;
      if (this.at === d.length) {
        this.i++;
        this.at = 0;
      }
    }
    return out;
  }

  u32(): number {
    const c = this.chunks[this.i];
    if (c !== undefined && c.length - this.at >= 4) {
      this.at += 4;
      this.position += 4;
      return c.readUInt32BE(this.at - 4);
    }
    return this.take(4).readUInt32BE(0);
  }
}

const EMPTY = Buffer.alloc(0);

/**
 * Decodes a binary batch, given whole or as the chunks it arrived in (no join: payloads are views
 * of the chunks where they lie in one); returns a string describing the fault for malformed input.
 */
export function decodeBinaryBatch(body: Buffer | readonly Buffer[]): { key: string | null; payload: Buffer }[] | string {
  const r = new ChunkReader(Buffer.isBuffer(body) ? [body] : body);
  const out: { key: string | null; payload: Buffer }[] = [];
  while (r.remaining > 0) {
    if (r.remaining < 4) return `truncated key length at byte ${r.position}`;
    const kl = r.u32();
    let key: string | null = null;
    if (kl > 0) {
      if (kl - 1 > LIMITS.keyBytesMax) return `key at byte ${r.position} is over ${LIMITS.keyBytesMax} bytes`;
      if (r.remaining < kl - 1) return `truncated key at byte ${r.position}`;
      key = r.take(kl - 1).toString("utf8");
    }
    if (r.remaining < 4) return `truncated payload length at byte ${r.position}`;
    const pl = r.u32();
    if (r.remaining < pl) return `truncated payload at byte ${r.position}`;
    out.push({ key, payload: r.take(pl) });
  }
  return out;
}


/**
 * Between cluster nodes only: an idempotent produce forwarded to a partition's owner, as the
 * binary batch above with each message's producer before its payload inside the payload field:
 * 16 bytes of producer id, u64 BE sequence, then the message's payload. One forward may merge
 * several clients' requests, so each message carries its own producer.
 */
export const PRODUCER_PREFIX_BYTES = 24;

export function encodeProducerBatch(messages: readonly { key: string | null; payload: Uint8Array; producer?: { id: string; sequence: number } }[]): Buffer {
  return encodeBinaryBatch(
    messages.map((m) => {
      const b = Buffer.allocUnsafe(PRODUCER_PREFIX_BYTES + m.payload.length);
      b.write(m.producer!.id, 0, 16, "hex");
      b.writeBigUInt64BE(BigInt(m.producer!.sequence), 16);
      b.set(m.payload, PRODUCER_PREFIX_BYTES);
      return { key: m.key, payload: b };
    }),
  );
}

export function decodeProducerBatch(body: Buffer | readonly Buffer[]): { key: string | null; payload: Buffer; producer: { id: string; sequence: number } }[] | string {
  const d = decodeBinaryBatch(body);
  if (typeof d === "string") return d;
  const out: { key: string | null; payload: Buffer; producer: { id: string; sequence: number } }[] = [];
  for (const m of d) {
    if (m.payload.length < PRODUCER_PREFIX_BYTES) return "a message without its producer";
    const sequence = m.payload.readBigUInt64BE(16);
    if (sequence > BigInt(Number.MAX_SAFE_INTEGER)) return "a sequence past 2^53";
    out.push({ key: m.key, payload: m.payload.subarray(PRODUCER_PREFIX_BYTES), producer: { id: m.payload.toString("hex", 0, 16), sequence: Number(sequence) } });
  }
  return out;
}

/** Content type of a batch of leased messages in binary (consume/batch with this Accept, and between nodes). */
export const DELIVERIES_TYPE = "application/vnd.narad.deliveries";

/** One leased message in the binary consume/batch answer. */
export interface WireDelivery {
  partition: number;
  offset: number;
  deliveryCount: number;
  producedAtMs: number;
  receiptHandle: string;
  /** The node holding the lease and its boot id. */
  owner: string;
  ownerBoot: string;
  key: Buffer | null;
  payload: Buffer;
  /** A dead letter's source. */
  origin?: OriginJson;
}

const DELIVERY_FIXED_BYTES = 2 + 6 + 4 + 8 + 3 + 4 + 4;
/** Set in the delivery count's top bit when an origin follows the payload (a count never reaches it). */
const ORIGIN_FLAG = 0x80000000;
/** u32 partition, u48 offset, u32 deliveries, f64 produced at, u8 topic length. */
const ORIGIN_FIXED_BYTES = 4 + 6 + 4 + 8 + 1;

/**
 * The binary answer to consume/batch (Accept: application/vnd.narad.deliveries), repeated until
 * the end of the body, big-endian:
 *
 *   u16  partition            u48  offset            u32  delivery count
 *   f64  produce time, ms since the epoch
 *   u8   receipt handle length H, u8 owner length O, u8 owner boot length B
 *   H + O + B bytes: the receipt handle, the owner's node id, its boot id (ASCII)
 *   u32  key length + 1 (0 = no key), then the key bytes
 *   u32  payload length, then the payload
 *   only when the delivery count's top bit is set (a dead letter; the count is the other 31 bits):
 *   u32 origin partition, u48 origin offset, u32 deliveries, f64 origin produce time,
 *   u8 topic length T, T bytes of the origin topic (ASCII: topic names are)
 *
 * It carries what the JSON answer does, per message, without base64 and a JSON parse at either
 * end. Node ids and boot ids are at most 64 ASCII characters, handles 42.
 */
export function encodeDeliveries(ds: readonly WireDelivery[]): Buffer {
  let size = 0;
  for (const d of ds) size += DELIVERY_FIXED_BYTES + d.receiptHandle.length + d.owner.length + d.ownerBoot.length + (d.key?.length ?? 0) + d.payload.length + (d.origin === undefined ? 0 : ORIGIN_FIXED_BYTES + d.origin.topic.length);
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const d of ds) {
    at = out.writeUInt16BE(d.partition, at);
    at = out.writeUIntBE(d.offset, at, 6);
    at = out.writeUInt32BE(((d.deliveryCount & 0x7fffffff) | (d.origin === undefined ? 0 : ORIGIN_FLAG)) >>> 0, at);
    at = out.writeDoubleBE(d.producedAtMs, at);
    out[at++] = d.receiptHandle.length;
    out[at++] = d.owner.length;
    out[at++] = d.ownerBoot.length;
    at += out.write(d.receiptHandle, at, "latin1");
    at += out.write(d.owner, at, "latin1");
    at += out.write(d.ownerBoot, at, "latin1");
    at = out.writeUInt32BE(d.key === null ? 0 : d.key.length + 1, at);
    if (d.key !== null) at += d.key.copy(out, at);
    at = out.writeUInt32BE(d.payload.length, at);
    at += d.payload.copy(out, at);
    if (d.origin !== undefined) {
      const o = d.origin;
      at = out.writeUInt32BE(o.partition >>> 0, at);
      at = out.writeUIntBE(o.offset, at, 6);
      at = out.writeUInt32BE(o.deliveries >>> 0, at);
      at = out.writeDoubleBE(o.produced_at, at);
      out[at++] = o.topic.length;
      at += out.write(o.topic, at, "latin1");
    }
  }
  return out;
}

/** Decodes what encodeDeliveries made (payloads and keys are views of `b`); a string describing the fault for a malformed body. */
export function decodeDeliveries(b: Buffer): WireDelivery[] | string {
  const out: WireDelivery[] = [];
  let at = 0;
  const need = (n: number) => b.length - at >= n;
  while (at < b.length) {
    if (!need(23)) return `truncated delivery header at byte ${at}`;
    const partition = b.readUInt16BE(at);
    const offset = b.readUIntBE(at + 2, 6);
    const countField = b.readUInt32BE(at + 8);
    const deliveryCount = countField & 0x7fffffff;
    const producedAtMs = b.readDoubleBE(at + 12);
    const hl = b[at + 20]!;
    const ol = b[at + 21]!;
    const bl = b[at + 22]!;
    at += 23;
    if (!need(hl + ol + bl + 4)) return `truncated receipt handle or owner at byte ${at}`;
    const receiptHandle = b.toString("latin1", at, at + hl);
    const owner = b.toString("latin1", at + hl, at + hl + ol);
    const ownerBoot = b.toString("latin1", at + hl + ol, at + hl + ol + bl);
    at += hl + ol + bl;
    const kl = b.readUInt32BE(at);
    at += 4;
    let key: Buffer | null = null;
    if (kl > 0) {
      if (!need(kl - 1)) return `truncated key at byte ${at}`;
      key = b.subarray(at, at + kl - 1);
      at += kl - 1;
    }
    if (!need(4)) return `truncated payload length at byte ${at}`;
    const pl = b.readUInt32BE(at);
    at += 4;
    if (!need(pl)) return `truncated payload at byte ${at}`;
    const payload = b.subarray(at, at + pl);
    at += pl;
    if ((countField & ORIGIN_FLAG) !== 0) {
      if (!need(ORIGIN_FIXED_BYTES)) return `truncated origin at byte ${at}`;
      const tl = b[at + ORIGIN_FIXED_BYTES - 1]!;
      if (!need(ORIGIN_FIXED_BYTES + tl)) return `truncated origin topic at byte ${at}`;
      const origin: OriginJson = {
        partition: b.readUInt32BE(at),
        offset: b.readUIntBE(at + 4, 6),
        deliveries: b.readUInt32BE(at + 10),
        produced_at: b.readDoubleBE(at + 14),
        topic: b.toString("latin1", at + ORIGIN_FIXED_BYTES, at + ORIGIN_FIXED_BYTES + tl),
      };
      at += ORIGIN_FIXED_BYTES + tl;
      out.push({ partition, offset, deliveryCount, producedAtMs, receiptHandle, owner, ownerBoot, key, payload, origin });
      continue;
    }
    out.push({ partition, offset, deliveryCount, producedAtMs, receiptHandle, owner, ownerBoot, key, payload });
  }
  return out;
}

// --- Added for the SDK (src/client): response envelopes and users/grants bodies. ---

export interface TopicsResponse {
  topics: TopicJson[];
}

export interface BatchProduceResponse {
  results: ProduceResult[];
}

export interface ConsumeBatchResponse {
  messages: ConsumedMessageJson[];
  /** The node that answered and its boot id (on one node, the owner of every partition). */
  owner: string;
  owner_boot: string;
}

/** What a grant allows; `admin` takes no pattern. */
export type GrantAction = "produce" | "consume" | "create" | "admin";

export interface CreateUserRequest {
  name: string;
  password: string;
}

export interface UserJson {
  name: string;
  created_at?: number;
}

export interface UpdateUserRequest {
  password: string;
}

export interface UsersResponse {
  users: UserJson[];
}

export interface GrantRequest {
  action: GrantAction;
  /** An exact topic name or a prefix wildcard (`orders-*`); absent for `admin`. */
  pattern?: string;
}

export interface GrantJson {
  action: GrantAction;
  pattern: string | null;
}

export interface GrantsResponse {
  grants: GrantJson[];
}
