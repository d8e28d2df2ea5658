// Key → partition: FNV-1a (32-bit) over the key's UTF-8 bytes, modulo the partition count.
// Stable across nodes, restarts and versions (docs/api.md states it), so a key keeps its
// partition while the count stays the same; adding partitions moves keys.

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

/**
 * Groups the items of one produce request by partition: keyed ones by their key's hash, unkeyed
 * ones all to `unkeyedPartition` (the "sticky" rule: one append and one fsync per request).
 * Returns partition → indexes of the items, in request order.
 */
export function groupByPartition(keys: readonly (string | Buffer | null)[], partitions: number, unkeyedPartition: number): Map<number, number[]> {
  const groups = new Map<number, number[]>();
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i]!;
    const p = key === null ? unkeyedPartition : keyPartition(key, partitions);
    const g = groups.get(p);
    if (g) g.push(i);
    else groups.set(p, [i]);
  }
  return groups;
}
