// Record attributes: what a record carries besides its key and payload, stored in a version-2
// record (./record.ts) as one opaque block that this module encodes and decodes.
//
// The block is a run of entries, each `u8 tag, u16 length, value` (little-endian), tags in
// increasing order, each at most once:
//
//   tag  name        value
//   1    producer    16 bytes of producer id, u64 sequence (below 2^53): an idempotent produce
//                    (SPEC "Idempotent producers"); the dedupe window is rebuilt from these
//   2    origin      u32 partition, u64 offset, u32 deliveries, u64 producedAtMs, then the origin
//                    topic's name in UTF-8 (the rest): a dead letter's source (SPEC "Dead letters")
//   3    headers     u16 count, then per header u16 name bytes, name, u16 value bytes, value
//                    (UTF-8): a message's own string attributes
//   4    notBefore   u64 ms since the epoch: not delivered before then (a per-message delay)
//
// A tag this build does not know is skipped when reading (a newer build may add one), so the
// block stays readable forward. A block that does not parse is damage of a record whose
// checksum held: the reader reports it and treats the record as having no attributes, rather
// than failing a whole read.

export const ATTR_TAG = { producer: 1, origin: 2, headers: 3, notBefore: 4 } as const;

/** Bytes of a producer id as stored (the wire spells it as 32 hex digits). */
export const PRODUCER_ID_BYTES = 16;

export interface RecordOrigin {
  topic: string;
  partition: number;
  offset: number;
  deliveries: number;
  producedAtMs: number;
}

export interface RecordAttrs {
  producer?: { id: Buffer; sequence: number };
  origin?: RecordOrigin;
  /** Name/value pairs in the order given. */
  headers?: readonly (readonly [string, string])[];
  notBeforeMs?: number;
}

const TWO_POW_32 = 4294967296;

function writeU64(buf: Buffer, v: number, at: number): void {
  buf.writeUInt32LE(v >>> 0, at);
  buf.writeUInt32LE(Math.floor(v / TWO_POW_32), at + 4);
}

function readU64(buf: Buffer, at: number): number {
  return buf.readUInt32LE(at + 4) * TWO_POW_32 + buf.readUInt32LE(at);
}

function isU53(v: number): boolean {
  return Number.isSafeInteger(v) && v >= 0;
}

/** Where a block that starts with the producer attribute keeps its sequence (tag, u16 length, id). */
const PRODUCER_SEQUENCE_AT = 3 + PRODUCER_ID_BYTES;

/**
 * Writes `sequence` into `block`, a block whose first entry is the producer attribute (as
 * encodeAttrs writes it): a run of one producer's records shares one block, renumbered for each
 * record as the log writes it (AppendInput.producerSequence in ./types.ts).
 */
export function setProducerSequence(block: Buffer, sequence: number): void {
  if (block[0] !== ATTR_TAG.producer || !isU53(sequence)) throw new RangeError("a producer block and a sequence in [0, 2^53)");
  writeU64(block, sequence, PRODUCER_SEQUENCE_AT);
}

/** A copy of a producer block carrying `sequence` (setProducerSequence on a copy). */
export function withProducerSequence(block: Buffer, sequence: number): Buffer {
  const copy = Buffer.from(block);
  setProducerSequence(copy, sequence);
  return copy;
}

/** The block for `a`, or null when it holds nothing (the record is written as version 1). */
export function encodeAttrs(a: RecordAttrs): Buffer | null {
  const parts: Buffer[] = [];
  const entry = (tag: number, value: Buffer): void => {
    if (value.length > 0xffff) throw new RangeError(`record attribute ${tag} is ${value.length} bytes, over 65 535`);
    const head = Buffer.allocUnsafe(3);
    head[0] = tag;
    head.writeUInt16LE(value.length, 1);
    parts.push(head, value);
  };
  if (a.producer !== undefined) {
    const { id, sequence } = a.producer;
    if (id.length !== PRODUCER_ID_BYTES || !isU53(sequence)) throw new RangeError("a producer attribute takes a 16-byte id and a sequence in [0, 2^53)");
    const v = Buffer.allocUnsafe(PRODUCER_ID_BYTES + 8);
    v.set(id, 0);
    writeU64(v, sequence, PRODUCER_ID_BYTES);
    entry(ATTR_TAG.producer, v);
  }
  if (a.origin !== undefined) {
    const o = a.origin;
    if (!isU53(o.offset) || !isU53(o.producedAtMs) || !Number.isInteger(o.partition) || o.partition < 0 || o.partition > 0xffffffff || !Number.isInteger(o.deliveries) || o.deliveries < 0 || o.deliveries > 0xffffffff) {
      throw new RangeError("an origin attribute takes non-negative integers");
    }
    const name = Buffer.from(o.topic, "utf8");
    const v = Buffer.allocUnsafe(24 + name.length);
    v.writeUInt32LE(o.partition, 0);
    writeU64(v, o.offset, 4);
    v.writeUInt32LE(o.deliveries, 12);
    writeU64(v, o.producedAtMs, 16);
    v.set(name, 24);
    entry(ATTR_TAG.origin, v);
  }
  if (a.headers !== undefined && a.headers.length > 0) {
    const bufs: Buffer[] = [];
    const count = Buffer.allocUnsafe(2);
    count.writeUInt16LE(a.headers.length, 0);
    bufs.push(count);
    for (const [name, value] of a.headers) {
      for (const s of [name, value]) {
        const b = Buffer.from(s, "utf8");
        const len = Buffer.allocUnsafe(2);
        len.writeUInt16LE(b.length, 0);
        bufs.push(len, b);
      }
    }
    entry(ATTR_TAG.headers, Buffer.concat(bufs));
  }
  if (a.notBeforeMs !== undefined) {
    if (!isU53(a.notBeforeMs)) throw new RangeError("notBeforeMs is ms since the epoch");
    const v = Buffer.allocUnsafe(8);
    writeU64(v, a.notBeforeMs, 0);
    entry(ATTR_TAG.notBefore, v);
  }
  return parts.length === 0 ? null : Buffer.concat(parts);
}

/** The attributes in a block, or why it is not one. */
export function decodeAttrs(block: Buffer): RecordAttrs | string {
  const out: { -readonly [K in keyof RecordAttrs]: RecordAttrs[K] } = {};
  let p = 0;
  let lastTag = 0;
  while (p < block.length) {
    if (block.length - p < 3) return `an attribute entry is cut short at byte ${p}`;
    const tag = block[p]!;
    const len = block.readUInt16LE(p + 1);
    const start = p + 3;
    const end = start + len;
    if (end > block.length) return `attribute ${tag} runs past the block at byte ${p}`;
    if (tag <= lastTag) return `attribute ${tag} is out of order or repeated at byte ${p}`;
    lastTag = tag;
    const v = block.subarray(start, end);
    switch (tag) {
      case ATTR_TAG.producer: {
        if (len !== PRODUCER_ID_BYTES + 8) return `a producer attribute of ${len} bytes`;
        const sequence = readU64(v, PRODUCER_ID_BYTES);
        if (!isU53(sequence)) return "a producer sequence past 2^53";
        out.producer = { id: v.subarray(0, PRODUCER_ID_BYTES), sequence };
        break;
      }
      case ATTR_TAG.origin: {
        if (len < 24) return `an origin attribute of ${len} bytes`;
        const offset = readU64(v, 4);
        const producedAtMs = readU64(v, 16);
        if (!isU53(offset) || !isU53(producedAtMs)) return "an origin offset or time past 2^53";
        out.origin = { partition: v.readUInt32LE(0), offset, deliveries: v.readUInt32LE(12), producedAtMs, topic: v.toString("utf8", 24) };
        break;
      }
      case ATTR_TAG.headers: {
        if (len < 2) return "a headers attribute without its count";
        const count = v.readUInt16LE(0);
        const headers: [string, string][] = [];
        let q = 2;
        for (let i = 0; i < count; i++) {
          const pair: string[] = [];
          for (let k = 0; k < 2; k++) {
            if (v.length - q < 2) return `header ${i} is cut short`;
            const n = v.readUInt16LE(q);
            if (v.length - q - 2 < n) return `header ${i} is cut short`;
            pair.push(v.toString("utf8", q + 2, q + 2 + n));
            q += 2 + n;
          }
          headers.push([pair[0]!, pair[1]!]);
        }
        if (q !== v.length) return "bytes after the last header";
        out.headers = headers;
        break;
      }
      case ATTR_TAG.notBefore: {
        if (len !== 8) return `a notBefore attribute of ${len} bytes`;
        const t = readU64(v, 0);
        if (!isU53(t)) return "a notBefore time past 2^53";
        out.notBeforeMs = t;
        break;
      }
      default:
        break; // a newer build's attribute: skipped
    }
    p = end;
  }
  return out;
}
