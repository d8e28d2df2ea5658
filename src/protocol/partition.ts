// Key → partition, as docs/api.md ("Partitioning") states it: FNV-1a (32-bit) over the key's
// UTF-8 bytes, modulo the partition count. It lives in src/protocol because it is part of the
// wire contract: the broker routes by it, and the SDK groups keyed messages into batches of one
// partition by it (src/client/batcher.ts). Stable across nodes, restarts and versions, so a key
// keeps its partition while the count stays the same; adding partitions moves keys.

export function fnv1a32(s: string | Buffer): number {
  const bytes = typeof s === "string" ? Buffer.from(s, "utf8") : s;
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) {
    h ^= bytes[i]!;
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function keyPartition(key: string | Buffer, partitions: number): number {
  return fnv1a32(key) % partitions;
}
