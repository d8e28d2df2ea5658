// What nodes of one cluster say to each other over HTTP, beside the public API: the internal
// routes' paths and headers, the token that proves a request comes from a node of this cluster,
// and the compact binary encoding of leased messages (a consume forwarded to an owner answers in
// it, so the forwarding node re-encodes nothing it does not have to).
//
// Internal routes live under /internal/v1/ and never forward further: a node that receives one
// serves it from its own partitions or refuses, so two nodes with different views of the
// placement cannot bounce a request between them. They need the cluster token (below) AND, for
// data routes, the client's own Authorization header, which the owner checks again: a forwarded
// request is authorized at the node it reached and at the owner.
//
// The token is an HMAC of a fixed label under the cluster secret (32 random bytes made once per
// cluster, kept in PostgreSQL and in the memory of each node). It never appears in logs. Anyone
// who can read the nodes' traffic can replay it, as with Basic credentials: run the cluster on a
// private network or behind TLS (docs/operations.md).

import { createHmac, timingSafeEqual } from "node:crypto";

export const INTERNAL_PREFIX = "/internal/v1";

export const INTERNAL_HEADERS = {
  /** The cluster token. */
  token: "narad-internal-token",
  /** The id of the node that forwarded the request (for logs and metrics). */
  from: "narad-forwarded-by",
} as const;

/** Content type of a batch of leased messages between nodes. */
export const DELIVERIES_TYPE = "application/vnd.narad.deliveries";

export function clusterToken(secret: Buffer): string {
  return createHmac("sha256", secret).update("narad-internal-token/1").digest("base64url");
}

export function tokenMatches(expected: string, got: string | string[] | undefined): boolean {
  if (typeof got !== "string" || got.length !== expected.length) return false;
  return timingSafeEqual(Buffer.from(got), Buffer.from(expected));
}

/** One leased message as it crosses between nodes. */
export interface WireDelivery {
  partition: number;
  offset: number;
  deliveryCount: number;
  producedAtMs: number;
  receiptHandle: string;
  key: Buffer | null;
  payload: Buffer;
}

/**
 * Byte layout, repeated until the end of the body (big-endian):
 *   u16  partition
 *   u48  offset
 *   u32  delivery count
 *   f64  produce time, ms since the epoch
 *   u8   receipt handle length H, then H bytes (ASCII)
 *   u32  key length + 1 (0 = no key), then the key bytes
 *   u32  payload length, then the payload
 * The owner and its boot id travel once, as the response's Narad-Owner and Narad-Owner-Boot.
 */
export function encodeDeliveries(ds: readonly WireDelivery[]): Buffer {
  let size = 0;
  for (const d of ds) size += 2 + 6 + 4 + 8 + 1 + d.receiptHandle.length + 4 + (d.key?.length ?? 0) + 4 + d.payload.length;
  const out = Buffer.allocUnsafe(size);
  let at = 0;
  for (const d of ds) {
    at = out.writeUInt16BE(d.partition, at);
    at = out.writeUIntBE(d.offset, at, 6);
    at = out.writeUInt32BE(d.deliveryCount >>> 0, at);
    at = out.writeDoubleBE(d.producedAtMs, at);
    at = out.writeUInt8(d.receiptHandle.length, at);
    at += out.write(d.receiptHandle, at, "latin1");
    at = out.writeUInt32BE(d.key === null ? 0 : d.key.length + 1, at);
    if (d.key !== null) at += d.key.copy(out, at);
    at = out.writeUInt32BE(d.payload.length, at);
    at += d.payload.copy(out, at);
  }
  return out;
}

/** Decodes what encodeDeliveries made; a string describing the fault for a malformed body. */
export function decodeDeliveries(b: Buffer): WireDelivery[] | string {
  const out: WireDelivery[] = [];
  let at = 0;
  const need = (n: number) => b.length - at >= n;
  while (at < b.length) {
    if (!need(21)) return `truncated delivery header at byte ${at}`;
    const partition = b.readUInt16BE(at);
    const offset = b.readUIntBE(at + 2, 6);
    const deliveryCount = b.readUInt32BE(at + 8);
    const producedAtMs = b.readDoubleBE(at + 12);
    const hl = b.readUInt8(at + 20);
    at += 21;
    if (!need(hl + 4)) return `truncated receipt handle at byte ${at}`;
    const receiptHandle = b.toString("latin1", at, at + hl);
    at += hl;
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
    out.push({ partition, offset, deliveryCount, producedAtMs, receiptHandle, key, payload: b.subarray(at, at + pl) });
    at += pl;
  }
  return out;
}
