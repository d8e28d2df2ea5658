// Key → partition (src/protocol/partition.ts, re-exported for the broker), and the grouping of
// one request's items by partition.

import { keyPartition } from "../protocol/partition.js";

export { fnv1a32, keyPartition } from "../protocol/partition.js";

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
