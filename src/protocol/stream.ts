// The streaming protocol's byte layout (docs/api.md, "Streaming protocol"): one long-lived
// connection upgraded from the HTTP port (`GET /v1/stream`, `Upgrade: narad-stream`), then
// length-prefixed binary frames both ways. Shared by the server (src/http/stream.ts) and the SDK
// (src/client/stream-transport.ts); it imports nothing, like the rest of src/protocol.
//
// Why a raw upgrade and not WebSocket: a client's WebSocket frames must be masked (an XOR over
// every payload byte, meant for browsers behind caching proxies), a WebSocket message is a
// second framing around ours, and Node 20 has no WebSocket client, so the SDK would need the
// `ws` package at run time. The raw upgrade keeps the SDK free of dependencies beyond undici and
// costs the server one length read per frame. Browsers are not a client of this protocol.
//
// Every frame, both ways (big-endian):
//
//   offset size field
//   0      4    length: bytes after this field (8 at least: version, type, flags, id)
//   4      1    version: STREAM_VERSION (1); a frame of another version is refused by id
//   5      1    type (FRAME below): client frames below 0x80, server frames from 0x80
//   6      2    flags: 0 (reserved; a receiver ignores bits it does not know)
//   8      4    id: the client's choice, echoed by the answer; 0 on connection-level frames
//   12     ...  the type's body
//
// Designed to carry more than produce later: consume (0x02), settle (0x03) and subscribe (0x04)
// from the client, deliveries (0x85) and settle answers (0x86) from the server are reserved type
// numbers; a server that does not know a type answers its id with ERROR bad_request (definite)
// and reads on, so a newer client can probe an older server frame by frame.

export const STREAM_VERSION = 1;
/** The Upgrade token and the path the upgrade is asked on. */
export const STREAM_PROTOCOL = "narad-stream";
export const STREAM_PATH = "/v1/stream";
/** Handshake answer headers (101): the connection's first credit and the largest frame. */
export const STREAM_HEADERS = {
  credit: "narad-stream-credit",
  frameBytesMax: "narad-stream-frame-bytes-max",
  framesInFlightMax: "narad-stream-frames-in-flight-max",
  version: "narad-stream-version",
} as const;

export const FRAME = {
  /** Client → server: one message to store. */
  produce: 0x01,
  /** Reserved for later: consume, settle (ack/extend/nack), subscribe (push deliveries). */
  consume: 0x02,
  settle: 0x03,
  subscribe: 0x04,
  /** Server → client: the message of frame `id` is durable at partition and offset. */
  produced: 0x81,
  /** Server → client: frame `id` failed: status, code and definite from the error table. */
  error: 0x82,
  /** Server → client: `bytes` more credit (answers written give back what their frames took). */
  credit: 0x83,
  /** Server → client: the server reads no more frames; every frame it read was answered before this. */
  goaway: 0x84,
  /** Reserved for later: a pushed or consumed delivery, a settle's answer. */
  delivery: 0x85,
  settled: 0x86,
} as const;

/** version, type, flags and id after the length field. */
export const FRAME_HEADER_BYTES = 12;
/** Topic names are at most 200 bytes (ERRORS.invalid_topic_name). */
export const STREAM_TOPIC_BYTES_MAX = 200;
/** The key length field's value for "no key" (a key of zero bytes is a key: ""). */
export const NO_KEY = 0xffff;
/** PRODUCE attrs bit 0: a 16-byte producer id and a u64 sequence follow (reserved for idempotent producers). */
export const ATTR_PRODUCER = 0x01;
export const PRODUCER_FIELD_BYTES = 24;
/** PRODUCED flags bit 0: the owner (node id, boot id) that stored it follows: another node (a forwarded produce). */
export const PRODUCED_OWNER = 0x0001;

/**
 * The largest produce frame: header, topic, key, attrs with a producer field, and a payload of
 * the HTTP API's message limit (`messageBytesMax`, `keyBytesMax`, passed in: protocol/wire.ts
 * holds them and this file imports nothing).
 */
export function produceFrameBytesMax(messageBytesMax: number, keyBytesMax: number): number {
  return 4 + FRAME_HEADER_BYTES + 1 + STREAM_TOPIC_BYTES_MAX + 2 + keyBytesMax + 1 + PRODUCER_FIELD_BYTES + messageBytesMax;
}

export interface ProduceFrame {
  id: number;
  topic: string;
  key: string | null;
  payload: Buffer;
  /** Reserved: present only when the frame carried ATTR_PRODUCER. */
  producer?: { id: Buffer; sequence: bigint };
}

function writeHeader(b: Buffer, at: number, length: number, type: number, flags: number, id: number): number {
  b.writeUInt32BE(length, at);
  b[at + 4] = STREAM_VERSION;
  b[at + 5] = type;
  b.writeUInt16BE(flags, at + 6);
  b.writeUInt32BE(id >>> 0, at + 8);
  return at + 4 + FRAME_HEADER_BYTES - 4;
}

/** Encodes a PRODUCE frame: header, u8 topic length + topic, u16 key length (NO_KEY) + key, u8 attrs [+ producer], payload. */
export function encodeProduce(id: number, topic: string, key: string | null, payload: Uint8Array, producer?: { id: Buffer; sequence: bigint }): Buffer {
  const topicBytes = Buffer.byteLength(topic);
  const keyBytes = key === null ? 0 : Buffer.byteLength(key);
  const b = Buffer.allocUnsafe(produceFrameBytes(topicBytes, keyBytes, payload.length, producer !== undefined));
  writeProduce(b, 0, id, topic, topicBytes, key, keyBytes, payload, producer);
  return b;
}

/** A PRODUCE frame's size, length field included, from its parts' byte lengths. */
export function produceFrameBytes(topicBytes: number, keyBytes: number, payloadBytes: number, withProducer: boolean): number {
  return 4 + FRAME_HEADER_BYTES - 4 + 1 + topicBytes + 2 + keyBytes + 1 + (withProducer ? PRODUCER_FIELD_BYTES : 0) + payloadBytes;
}

/**
 * Writes a PRODUCE frame at `at` of `b`, which must have room (produceFrameBytes); `topicBytes`
 * and `keyBytes` are the UTF-8 lengths of `topic` and `key` (0 for no key). Returns the end. A
 * sender that writes many frames at once writes them into one buffer this way, with no buffer
 * of its own per frame.
 */
export function writeProduce(b: Buffer, at: number, id: number, topic: string, topicBytes: number, key: string | null, keyBytes: number, payload: Uint8Array, producer?: { id: Buffer; sequence: bigint }): number {
  const total = produceFrameBytes(topicBytes, keyBytes, payload.length, producer !== undefined);
  at = writeHeader(b, at, total - 4, FRAME.produce, 0, id);
  b[at++] = topicBytes;
  at += b.write(topic, at, "utf8");
  b.writeUInt16BE(key === null ? NO_KEY : keyBytes, at);
  at += 2;
  if (key !== null) at += b.write(key, at, "utf8");
  b[at++] = producer === undefined ? 0 : ATTR_PRODUCER;
  if (producer !== undefined) {
    producer.id.copy(b, at, 0, 16);
    b.writeBigUInt64BE(producer.sequence, at + 16);
    at += PRODUCER_FIELD_BYTES;
  }
  b.set(payload, at);
  return at + payload.length;
}

/** Why a frame's body could not be read: answered by its id with ERROR bad_request. */
export class FrameError extends Error {}

/**
 * Decodes a PRODUCE frame's body (`frame` is the whole frame, length field included). Throws
 * FrameError naming what is wrong; the key length is checked against `keyBytesMax`.
 */
export function decodeProduce(frame: Buffer, keyBytesMax: number): ProduceFrame {
  const id = frame.readUInt32BE(8);
  let at = 4 + FRAME_HEADER_BYTES - 4;
  const end = frame.length;
  if (at + 1 > end) throw new FrameError("the produce frame ends before its topic length");
  const topicLen = frame[at++]!;
  if (topicLen === 0) throw new FrameError("the produce frame names no topic");
  if (at + topicLen + 2 > end) throw new FrameError("the produce frame ends inside its topic or before its key length");
  const topic = frame.toString("utf8", at, at + topicLen);
  at += topicLen;
  const keyLen = frame.readUInt16BE(at);
  at += 2;
  let key: string | null = null;
  if (keyLen !== NO_KEY) {
    if (keyLen > keyBytesMax) throw new FrameError(`the key is over ${keyBytesMax} bytes`);
    if (at + keyLen > end) throw new FrameError("the produce frame ends inside its key");
    key = frame.toString("utf8", at, at + keyLen);
    at += keyLen;
  }
  if (at + 1 > end) throw new FrameError("the produce frame ends before its attrs byte");
  const attrs = frame[at++]!;
  let producer: ProduceFrame["producer"];
  if ((attrs & ATTR_PRODUCER) !== 0) {
    if (at + PRODUCER_FIELD_BYTES > end) throw new FrameError("the produce frame ends inside its producer field");
    producer = { id: frame.subarray(at, at + 16), sequence: frame.readBigUInt64BE(at + 16) };
    at += PRODUCER_FIELD_BYTES;
  }
  if ((attrs & ~ATTR_PRODUCER) !== 0) throw new FrameError(`unknown attrs bits 0x${attrs.toString(16)}`);
  const out: ProduceFrame = { id, topic, key, payload: frame.subarray(at) };
  if (producer !== undefined) out.producer = producer;
  return out;
}

/** Bytes of a PRODUCED frame without the owner field. */
export const PRODUCED_FRAME_BYTES = 4 + FRAME_HEADER_BYTES - 4 + 4 + 8;

/**
 * Writes a PRODUCED frame at `at` of `b` (which must have room: producedBytes()): u32 partition,
 * u64 offset (as two u32: offsets stay below 2^53), then, with PRODUCED_OWNER, u8 length + owner
 * node id and u8 length + its boot id. Returns the end.
 */
export function writeProduced(b: Buffer, at: number, id: number, partition: number, offset: number, owner?: { node: string; boot: string }): number {
  const ownerBytes = owner === undefined ? 0 : 2 + Buffer.byteLength(owner.node) + Buffer.byteLength(owner.boot);
  at = writeHeader(b, at, PRODUCED_FRAME_BYTES - 4 + ownerBytes, FRAME.produced, owner === undefined ? 0 : PRODUCED_OWNER, id);
  b.writeUInt32BE(partition, at);
  b.writeUInt32BE(Math.floor(offset / 0x1_0000_0000), at + 4);
  b.writeUInt32BE(offset >>> 0, at + 8);
  at += 12;
  if (owner !== undefined) {
    for (const s of [owner.node, owner.boot]) {
      const n = b.write(s, at + 1, "utf8");
      b[at] = n;
      at += 1 + n;
    }
  }
  return at;
}

export function producedBytes(owner?: { node: string; boot: string }): number {
  return PRODUCED_FRAME_BYTES + (owner === undefined ? 0 : 2 + Buffer.byteLength(owner.node) + Buffer.byteLength(owner.boot));
}

export interface StreamErrorFields {
  status: number;
  code: string;
  definite: boolean;
  message: string;
  /** Seconds to wait before retrying (429, 503), when the server said. */
  retryAfterS?: number;
}

/** Longest message an ERROR or GOAWAY frame carries (longer ones are cut). */
const ERROR_MESSAGE_BYTES_MAX = 1024;

/**
 * An ERROR (per frame) or GOAWAY (id 0) frame: u16 status, u8 definite (1) or indefinite (0),
 * u8 0, u32 retry-after seconds (0xffffffff: none), u8 code length + code, u16 message length +
 * message (UTF-8).
 */
export function encodeError(type: typeof FRAME.error | typeof FRAME.goaway, id: number, e: StreamErrorFields): Buffer {
  const code = Buffer.from(e.code, "utf8").subarray(0, 255);
  let message = Buffer.from(e.message, "utf8");
  if (message.length > ERROR_MESSAGE_BYTES_MAX) message = message.subarray(0, ERROR_MESSAGE_BYTES_MAX);
  const total = 4 + FRAME_HEADER_BYTES - 4 + 8 + 1 + code.length + 2 + message.length;
  const b = Buffer.allocUnsafe(total);
  let at = writeHeader(b, 0, total - 4, type, 0, id);
  b.writeUInt16BE(e.status, at);
  b[at + 2] = e.definite ? 1 : 0;
  b[at + 3] = 0;
  b.writeUInt32BE(e.retryAfterS === undefined ? 0xffffffff : e.retryAfterS, at + 4);
  at += 8;
  b[at++] = code.length;
  code.copy(b, at);
  at += code.length;
  b.writeUInt16BE(message.length, at);
  message.copy(b, at + 2);
  return b;
}

export function decodeError(frame: Buffer): StreamErrorFields {
  let at = 4 + FRAME_HEADER_BYTES - 4;
  if (frame.length < at + 9) throw new FrameError("the error frame is too short");
  const status = frame.readUInt16BE(at);
  const definite = frame[at + 2] === 1;
  const ra = frame.readUInt32BE(at + 4);
  at += 8;
  const codeLen = frame[at++]!;
  if (frame.length < at + codeLen + 2) throw new FrameError("the error frame ends inside its code");
  const code = frame.toString("utf8", at, at + codeLen);
  at += codeLen;
  const msgLen = frame.readUInt16BE(at);
  const message = frame.toString("utf8", at + 2, Math.min(frame.length, at + 2 + msgLen));
  const out: StreamErrorFields = { status, code, definite, message };
  if (ra !== 0xffffffff) out.retryAfterS = ra;
  return out;
}

export const CREDIT_FRAME_BYTES = 4 + FRAME_HEADER_BYTES - 4 + 4;

/** A CREDIT frame (id 0): u32 bytes of credit given back. */
export function writeCredit(b: Buffer, at: number, bytes: number): number {
  at = writeHeader(b, at, CREDIT_FRAME_BYTES - 4, FRAME.credit, 0, 0);
  b.writeUInt32BE(bytes, at);
  return at + 4;
}

export interface ProducedFields {
  id: number;
  partition: number;
  offset: number;
  owner?: string;
  ownerBoot?: string;
}

export function decodeProduced(frame: Buffer): ProducedFields {
  if (frame.length < PRODUCED_FRAME_BYTES) throw new FrameError("the produced frame is too short");
  const out: ProducedFields = {
    id: frame.readUInt32BE(8),
    partition: frame.readUInt32BE(12),
    offset: frame.readUInt32BE(16) * 0x1_0000_0000 + frame.readUInt32BE(20),
  };
  if ((frame.readUInt16BE(6) & PRODUCED_OWNER) !== 0) {
    let at = PRODUCED_FRAME_BYTES;
    const n = frame[at]!;
    out.owner = frame.toString("utf8", at + 1, at + 1 + n);
    at += 1 + n;
    const m = frame[at]!;
    out.ownerBoot = frame.toString("utf8", at + 1, at + 1 + m);
  }
  return out;
}

/**
 * Cuts a byte stream into frames. `push` a chunk, then `next()` until it answers null. A frame's
 * length is checked before its bytes are kept: over `frameBytesMax` (length field included) or
 * under the header, `next()` throws OversizeFrame / FrameError with what it knows (the id, when
 * its 12 bytes arrived), so no more than one frame's bytes are ever held.
 */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);
  private at = 0;

  constructor(private readonly frameBytesMax: number) {}

  push(chunk: Buffer): void {
    if (this.at >= this.buf.length) {
      this.buf = chunk;
      this.at = 0;
    } else {
      this.buf = Buffer.concat([this.buf.subarray(this.at), chunk]);
      this.at = 0;
    }
  }

  /** Bytes held that are not a whole frame yet. */
  get buffered(): number {
    return this.buf.length - this.at;
  }

  /** The next whole frame (a view into the received bytes, length field included), or null. */
  next(): Buffer | null {
    const at = this.nextAt();
    return at < 0 ? null : this.buf.subarray(at, this.at);
  }

  /**
   * Where the next whole frame starts in `bytes` (its length field at that offset; it ends
   * where the following one starts), or -1 when none is whole yet. For a reader that takes its
   * fields in place, with no view per frame; `bytes` is valid until the next push.
   */
  nextAt(): number {
    const at = this.at;
    const avail = this.buf.length - at;
    if (avail < 4) return -1;
    const len = this.buf.readUInt32BE(at);
    if (len < FRAME_HEADER_BYTES - 4) throw new FrameError(`a frame's length field says ${len}; a frame has at least ${FRAME_HEADER_BYTES - 4} bytes after it`);
    if (len + 4 > this.frameBytesMax) {
      if (avail < FRAME_HEADER_BYTES) return -1; // wait for the id, to answer it
      throw new OversizeFrame(this.buf.readUInt32BE(at + 8), len + 4);
    }
    if (avail < len + 4) return -1;
    this.at = at + 4 + len;
    return at;
  }

  /** The bytes nextAt's offsets point into. */
  get bytes(): Buffer {
    return this.buf;
  }
}

/** A frame whose length field is over the limit: answered by id, then the connection ends. */
export class OversizeFrame extends Error {
  constructor(
    readonly id: number,
    readonly bytes: number,
  ) {
    super(`frame ${id} is ${bytes} bytes`);
  }
}

/** The frame's type, version and id (the frame is whole: FrameReader.next()). */
export function frameType(f: Buffer): number {
  return f[5]!;
}
export function frameVersion(f: Buffer): number {
  return f[4]!;
}
export function frameId(f: Buffer): number {
  return f.readUInt32BE(8);
}
