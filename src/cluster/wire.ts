// What nodes of one cluster say to each other over HTTP, beside the public API: the internal
// routes' paths and headers, the token that proves a request comes from a node of this cluster.
// A consume forwarded to an owner answers in the public binary encoding of leased messages
// (DELIVERIES_TYPE, src/protocol/wire.ts), so the forwarding node re-encodes nothing it does
// not have to.
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

export function clusterToken(secret: Buffer): string {
  return createHmac("sha256", secret).update("narad-internal-token/1").digest("base64url");
}

export function tokenMatches(expected: string, got: string | string[] | undefined): boolean {
  if (typeof got !== "string") return false;
  // Compare bytes, not string lengths: a header with a non-ASCII character has as many UTF-16
  // units as the token but more bytes, and timingSafeEqual throws on buffers of unequal length.
  const a = Buffer.from(got, "utf8");
  const b = Buffer.from(expected, "utf8");
  return a.length === b.length && timingSafeEqual(a, b);
}

