// Record framing for segment files.
//
// Every record is self-describing and checksummed so that recovery can tell a torn tail (the
// process or the machine died mid-write) from a flipped bit in the middle (skip it, keep the rest),
// and so that read() can re-verify what the page cache hands back. The length field sits outside the
// CRC on purpose: it is what lets a scanner find the next record; a damaged length is caught either
// by the plausibility bounds below or by the CRC of the frame it points to. All integers are
// little-endian, which lets the index file be read straight into a Uint32Array on common hardware.
//
// Byte layout of one record (HEADER_BYTES = 29, then key and payload):
//
//   offset  size  field
//   0       u32   frameBytes     bytes after the crc field: 21 + keyBytes + payloadBytes
//   4       u32   crc32c         CRC32C (Castagnoli) of bytes [8, 8 + frameBytes)
//   8       u8    version        RECORD_VERSION (1); anything else is corruption
//   9       u64   offset         as u32 low, u32 high (offsets stay below 2^53)
//   17      u64   producedAtMs   as u32 low, u32 high (ms since the epoch, >= 0)
//   25      i32   keyBytes       -1 = no key (null); 0 = empty key; -2 = a control record (below)
//   29      ...   key bytes, then payload bytes (payloadBytes = frameBytes - 21 - max(keyBytes, 0))
//
// Version 2 is the same with attributes (./attrs.ts: a producer id and sequence, a dead letter's
// origin, message headers, a not-before time), as opaque bytes between the key and the payload:
//
//   25      i32   keyBytes       -1 = no key; 0 = empty key (a control record is always version 1)
//   29      u32   attrBytes      1 .. ATTR_BYTES_MAX
//   33      ...   key bytes, then attribute bytes, then payload bytes
//                                (frameBytes = 25 + keyBytes + attrBytes + payloadBytes)
//
// A record without attributes is written as version 1, byte for byte as before, so plain
// produces pay nothing for them and every segment written before them reads unchanged.
//
// A control record (keyBytes -2, no key, empty payload) is not a message: it is the epoch marker
// a new leader of a replicated partition appends as its first record (src/cluster/replication),
// so that its whole log commits once a majority holds it. Delivery, replay and the copies to
// child topics skip it; it takes an offset like any record. Builds before replication read it
// as damage (a format they do not know).

import assert from "node:assert/strict";
import { crc32c } from "@node-rs/crc32";
import { LIMITS } from "../protocol/wire.js";

export const RECORD_VERSION = 1;
/** A record with attributes (the layout above). */
export const RECORD_VERSION_ATTRS = 2;
/** Whether b is the version byte of a record (a scan's cheap precheck). */
export function isRecordVersion(b: number | undefined): boolean {
  return b === RECORD_VERSION || b === RECORD_VERSION_ATTRS;
}
/** Bytes before the key of a version-2 record (the attribute length added). */
export const HEADER_BYTES_ATTRS = 33;
/** Largest attribute block of one record (./attrs.ts keeps each attribute's own bound below it). */
export const ATTR_BYTES_MAX = 64 * 1024;
/** keyBytes of a control record. */
export const CONTROL_KEY_BYTES = -2;
/** Bytes before the key: length, crc, version, offset, producedAtMs, key length. */
export const HEADER_BYTES = 29;
/** The part of the header covered by frameBytes (everything after the crc field, minus key/payload). */
const FRAME_FIXED_BYTES = HEADER_BYTES - 8;
/** Largest payload (SPEC "largest message"). */
export const PAYLOAD_BYTES_MAX = 1024 * 1024;
/**
 * Largest key an append takes: the wire's limit (LIMITS.keyBytesMax, 4 096), so a key over it is
 * refused by the same number wherever it comes from (the HTTP layer answers 400 before storage
 * sees it; here it is a guard against a caller that skipped that check).
 */
export const KEY_BYTES_MAX = LIMITS.keyBytesMax;
/**
 * Largest key a record of format version 1 may carry (64 KiB): what recovery and read() accept
 * as a record rather than damage. It stays above KEY_BYTES_MAX on purpose. Every writer of
 * records has kept keys within 4 096 bytes since the first version that had an HTTP API, so no
 * stored record should be larger; but if one is (a build that wrote through storage directly),
 * it is a whole record with a valid checksum that was legal when written, and tightening this
 * bound would turn it into "damage" that recovery skips, or truncates if it sits at the tail:
 * acknowledged data destroyed by a policy change. The bound also sizes the scan windows
 * (RECORD_BYTES_MAX), which must not shrink under old data. A new format version may lower it.
 */
export const FRAME_KEY_BYTES_MAX = 64 * 1024;
/** Smallest possible record on disk (no key, empty payload). */
export const RECORD_BYTES_MIN = HEADER_BYTES;
/** Largest possible frameBytes; anything above it is corruption, not a record. */
export const FRAME_BYTES_MAX = FRAME_FIXED_BYTES + 4 + FRAME_KEY_BYTES_MAX + ATTR_BYTES_MAX + PAYLOAD_BYTES_MAX;
/** Largest possible record on disk. */
export const RECORD_BYTES_MAX = 8 + FRAME_BYTES_MAX;

const TWO_POW_32 = 4294967296;

/** Bytes a record takes on disk. */
export function recordBytes(key: Buffer | null, payload: Buffer, attrs: Buffer | null = null): number {
  return (attrs === null ? HEADER_BYTES : HEADER_BYTES_ATTRS + attrs.length) + (key === null ? 0 : key.length) + payload.length;
}

/**
 * Encodes one record at buf[pos] and returns the position after it. The caller has checked the
 * sizes and made room (recordBytes). Layout: see the table at the top of this file.
 */
export function encodeRecord(
  buf: Buffer,
  pos: number,
  offset: number,
  producedAtMs: number,
  key: Buffer | null,
  payload: Buffer,
  control = false,
  attrs: Buffer | null = null,
): number {
  assert.ok(!control || (key === null && payload.length === 0 && attrs === null), "a control record has no key, attributes or payload");
  assert.ok(attrs === null || (attrs.length > 0 && attrs.length <= ATTR_BYTES_MAX), "attributes: 1 .. ATTR_BYTES_MAX bytes");
  const keyBytes = key === null ? 0 : key.length;
  const attrBytes = attrs === null ? 0 : 4 + attrs.length;
  const frameBytes = FRAME_FIXED_BYTES + attrBytes + keyBytes + payload.length;
  buf.writeUInt32LE(frameBytes, pos);
  buf[pos + 8] = attrs === null ? RECORD_VERSION : RECORD_VERSION_ATTRS;
  buf.writeUInt32LE(offset >>> 0, pos + 9);
  buf.writeUInt32LE(Math.floor(offset / TWO_POW_32), pos + 13);
  buf.writeUInt32LE(producedAtMs >>> 0, pos + 17);
  buf.writeUInt32LE(Math.floor(producedAtMs / TWO_POW_32), pos + 21);
  buf.writeInt32LE(control ? CONTROL_KEY_BYTES : key === null ? -1 : keyBytes, pos + 25);
  let p = pos + HEADER_BYTES;
  if (attrs !== null) {
    buf.writeUInt32LE(attrs.length, p);
    p += 4;
  }
  // set() rather than Buffer#copy: no argument juggling on the per-record path.
  if (key !== null) {
    buf.set(key, p);
    p += keyBytes;
  }
  if (attrs !== null) {
    buf.set(attrs, p);
    p += attrs.length;
  }
  buf.set(payload, p);
  p += payload.length;
  const end = pos + 8 + frameBytes;
  assert.equal(p, end);
  buf.writeUInt32LE(crc32c(buf.subarray(pos + 8, end)), pos + 4);
  return end;
}

// Results of checkFrame below zero say why a frame is not a record.
export const FRAME_INCOMPLETE = -1; // fewer bytes available than the frame needs
export const FRAME_BAD_LENGTH = -2; // frameBytes outside [21, FRAME_BYTES_MAX]
export const FRAME_BAD_VERSION = -3;
export const FRAME_BAD_KEY_LENGTH = -4;
export const FRAME_BAD_CRC = -5;
export const FRAME_BAD_ATTR_LENGTH = -6;

export function frameErrorReason(code: number): string {
  switch (code) {
    case FRAME_INCOMPLETE:
      return "incomplete record (torn write)";
    case FRAME_BAD_LENGTH:
      return "implausible record length";
    case FRAME_BAD_VERSION:
      return "unknown record version";
    case FRAME_BAD_KEY_LENGTH:
      return "implausible key length";
    case FRAME_BAD_CRC:
      return "checksum mismatch";
    case FRAME_BAD_ATTR_LENGTH:
      return "implausible attribute length";
    default:
      return `unknown frame error ${code}`;
  }
}

/**
 * Checks the frame that starts at buf[pos] (the buffer holds valid data up to `end`): bounds, version,
 * key length and CRC. Returns the record's size on disk (> 0) or a negative FRAME_* code. Allocates
 * nothing but the subarray the CRC needs, so a recovery scan can call it at every byte position.
 */
export function checkFrame(buf: Buffer, pos: number, end: number): number {
  if (end - pos < HEADER_BYTES) {
    // A short tail may still be a damaged length; say which, so callers can report it well.
    if (end - pos >= 4) {
      const frameBytes = buf.readUInt32LE(pos);
      if (frameBytes < FRAME_FIXED_BYTES || frameBytes > FRAME_BYTES_MAX) return FRAME_BAD_LENGTH;
    }
    return FRAME_INCOMPLETE;
  }
  const frameBytes = buf.readUInt32LE(pos);
  if (frameBytes < FRAME_FIXED_BYTES || frameBytes > FRAME_BYTES_MAX) return FRAME_BAD_LENGTH;
  const version = buf[pos + 8];
  const keyBytes = buf.readInt32LE(pos + 25);
  let fixed = FRAME_FIXED_BYTES;
  if (version === RECORD_VERSION_ATTRS) {
    if (end - pos < HEADER_BYTES_ATTRS) return FRAME_INCOMPLETE;
    const attrBytes = buf.readUInt32LE(pos + HEADER_BYTES);
    if (attrBytes < 1 || attrBytes > ATTR_BYTES_MAX) return FRAME_BAD_ATTR_LENGTH;
    fixed += 4 + attrBytes;
    if (fixed > frameBytes) return FRAME_BAD_ATTR_LENGTH;
    if (keyBytes < -1 || keyBytes > FRAME_KEY_BYTES_MAX) return FRAME_BAD_KEY_LENGTH;
  } else if (version !== RECORD_VERSION) {
    return FRAME_BAD_VERSION;
  }
  if (keyBytes === CONTROL_KEY_BYTES && version === RECORD_VERSION) {
    if (frameBytes !== FRAME_FIXED_BYTES) return FRAME_BAD_KEY_LENGTH;
  } else if (keyBytes < -1 || keyBytes > FRAME_KEY_BYTES_MAX || fixed + Math.max(keyBytes, 0) > frameBytes) {
    return FRAME_BAD_KEY_LENGTH;
  }
  if (frameBytes - fixed - Math.max(keyBytes, 0) > PAYLOAD_BYTES_MAX) return FRAME_BAD_LENGTH;
  const recEnd = pos + 8 + frameBytes;
  if (recEnd > end) return FRAME_INCOMPLETE;
  if (crc32c(buf.subarray(pos + 8, recEnd)) !== buf.readUInt32LE(pos + 4)) return FRAME_BAD_CRC;
  return 8 + frameBytes;
}

/** The offset field of a frame (valid only after checkFrame said the frame is whole). */
export function frameOffset(buf: Buffer, pos: number): number {
  return buf.readUInt32LE(pos + 13) * TWO_POW_32 + buf.readUInt32LE(pos + 9);
}

export function frameProducedAtMs(buf: Buffer, pos: number): number {
  return buf.readUInt32LE(pos + 21) * TWO_POW_32 + buf.readUInt32LE(pos + 17);
}

/**
 * Decodes a frame that checkFrame accepted. Key and payload are views into buf (no copy): a read
 * allocates one buffer for a run of records and hands out slices of it.
 */
export function decodeFrame(
  buf: Buffer,
  pos: number,
  recordSize: number,
): { offset: number; producedAtMs: number; key: Buffer | null; payload: Buffer; control?: true; attrs?: Buffer } {
  const keyBytes = buf.readInt32LE(pos + 25);
  if (buf[pos + 8] === RECORD_VERSION_ATTRS) {
    const attrBytes = buf.readUInt32LE(pos + HEADER_BYTES);
    const keyStart = pos + HEADER_BYTES_ATTRS;
    const attrStart = keyStart + Math.max(keyBytes, 0);
    const payloadStart = attrStart + attrBytes;
    return {
      offset: frameOffset(buf, pos),
      producedAtMs: frameProducedAtMs(buf, pos),
      key: keyBytes < 0 ? null : buf.subarray(keyStart, attrStart),
      payload: buf.subarray(payloadStart, pos + recordSize),
      attrs: buf.subarray(attrStart, payloadStart),
    };
  }
  const keyStart = pos + HEADER_BYTES;
  const payloadStart = keyStart + Math.max(keyBytes, 0);
  if (keyBytes === CONTROL_KEY_BYTES) {
    return { offset: frameOffset(buf, pos), producedAtMs: frameProducedAtMs(buf, pos), key: null, payload: buf.subarray(payloadStart, payloadStart), control: true };
  }
  return {
    offset: frameOffset(buf, pos),
    producedAtMs: frameProducedAtMs(buf, pos),
    key: keyBytes < 0 ? null : buf.subarray(keyStart, payloadStart),
    payload: buf.subarray(payloadStart, pos + recordSize),
  };
}
