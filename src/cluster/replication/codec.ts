// The body of a replication append: the leader's records, consecutive offsets from the `first`
// the request names, in one binary run. Per record (little-endian):
//
//   offset  size  field
//   0       u8    flags          1 = control record (no key, no payload), 2 = has a key,
//                                4 = has attributes (src/storage/attrs.ts)
//   1       f64   producedAtMs   the leader's produce time, kept by every replica
//   9       u32   keyBytes       0 without a key
//   13      u32   payloadBytes
//   17      u32   attrBytes      only with flag 4 (1 .. ATTR_BYTES_MAX)
//   17/21   ...   key, then attributes, then payload
//
// The decoder checks every length against what is left and the per-record limits of storage, so
// a damaged or hostile body is refused whole (a follower appends nothing from it).

import { ATTR_BYTES_MAX, KEY_BYTES_MAX, PAYLOAD_BYTES_MAX } from "../../storage/index.js";

const HEAD_BYTES = 17;
const FLAG_CONTROL = 1;
const FLAG_KEY = 2;
const FLAG_ATTRS = 4;

export interface ShippedRecord {
  producedAtMs: number;
  key: Buffer | null;
  payload: Buffer;
  control?: true;
  attrs?: Buffer;
}

export function shippedBytes(r: ShippedRecord): number {
  return HEAD_BYTES + (r.key?.length ?? 0) + r.payload.length + (r.attrs === undefined ? 0 : 4 + r.attrs.length);
}

export function encodeRecords(records: readonly ShippedRecord[]): Buffer {
  let size = 0;
  for (const r of records) size += shippedBytes(r);
  const buf = Buffer.allocUnsafe(size);
  let p = 0;
  for (const r of records) {
    buf[p] = (r.control === true ? FLAG_CONTROL : 0) | (r.key !== null ? FLAG_KEY : 0) | (r.attrs !== undefined ? FLAG_ATTRS : 0);
    buf.writeDoubleLE(r.producedAtMs, p + 1);
    buf.writeUInt32LE(r.key?.length ?? 0, p + 9);
    buf.writeUInt32LE(r.payload.length, p + 13);
    p += HEAD_BYTES;
    if (r.attrs !== undefined) {
      buf.writeUInt32LE(r.attrs.length, p);
      p += 4;
    }
    if (r.key !== null) {
      buf.set(r.key, p);
      p += r.key.length;
    }
    if (r.attrs !== undefined) {
      buf.set(r.attrs, p);
      p += r.attrs.length;
    }
    buf.set(r.payload, p);
    p += r.payload.length;
  }
  return buf;
}

/** The records of a body, or a reason it is not one. Keys and payloads are views into buf. */
export function decodeRecords(buf: Buffer, countMax: number): ShippedRecord[] | string {
  const out: ShippedRecord[] = [];
  let p = 0;
  while (p < buf.length) {
    if (out.length >= countMax) return `more than ${countMax} records`;
    if (buf.length - p < HEAD_BYTES) return `a record header is cut short at byte ${p}`;
    const flags = buf[p]!;
    const producedAtMs = buf.readDoubleLE(p + 1);
    const keyBytes = buf.readUInt32LE(p + 9);
    const payloadBytes = buf.readUInt32LE(p + 13);
    if ((flags & ~(FLAG_CONTROL | FLAG_KEY | FLAG_ATTRS)) !== 0) return `unknown flags ${flags} at byte ${p}`;
    if (!Number.isSafeInteger(producedAtMs) || producedAtMs < 0) return `a bad produce time at byte ${p}`;
    if (keyBytes > KEY_BYTES_MAX || payloadBytes > PAYLOAD_BYTES_MAX) return `a record over the size limits at byte ${p}`;
    if ((flags & FLAG_KEY) === 0 && keyBytes !== 0) return `a key length without a key at byte ${p}`;
    if ((flags & FLAG_CONTROL) !== 0 && (keyBytes !== 0 || payloadBytes !== 0 || (flags & (FLAG_KEY | FLAG_ATTRS)) !== 0)) return `a control record with a key, attributes or payload at byte ${p}`;
    let start = p + HEAD_BYTES;
    let attrBytes = 0;
    if ((flags & FLAG_ATTRS) !== 0) {
      if (buf.length - start < 4) return `a record header is cut short at byte ${p}`;
      attrBytes = buf.readUInt32LE(start);
      if (attrBytes < 1 || attrBytes > ATTR_BYTES_MAX) return `an attribute block of ${attrBytes} bytes at byte ${p}`;
      start += 4;
    }
    const end = start + keyBytes + attrBytes + payloadBytes;
    if (end > buf.length) return `a record is cut short at byte ${p}`;
    const key = (flags & FLAG_KEY) !== 0 ? buf.subarray(start, start + keyBytes) : null;
    const payload = buf.subarray(start + keyBytes + attrBytes, end);
    if ((flags & FLAG_CONTROL) !== 0) out.push({ producedAtMs, key: null, payload, control: true });
    else if (attrBytes > 0) out.push({ producedAtMs, key, payload, attrs: buf.subarray(start + keyBytes, start + keyBytes + attrBytes) });
    else out.push({ producedAtMs, key, payload });
    p = end;
  }
  return out;
}
