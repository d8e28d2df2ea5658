// Placement of new partitions: each goes to the live node that owns the fewest partitions at that
// moment, ties broken by node id, counting the ones placed earlier in the same decision. Pure; the
// control plane calls it inside a transaction that holds the placement lock, so two concurrent
// creates see each other's partitions.
//
// Only live nodes are candidates. Partitions of a down node stay where they are: their log is on
// that node's disk and nowhere else, and promoting an empty copy elsewhere would silently drop
// every message they hold.

export interface NodeLoad {
  nodeId: string;
  /** Partitions this node owns now (every topic). */
  owned: number;
}

/** Returns the node id for each of `count` new partitions, in partition order. */
export function placePartitions(live: readonly NodeLoad[], count: number): string[] {
  if (count === 0) return [];
  if (live.length === 0) throw new Error("placePartitions: no live node");
  const load = live.map((n) => ({ nodeId: n.nodeId, owned: n.owned })).sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  const out: string[] = [];
  for (let i = 0; i < count; i++) {
    let best = load[0]!;
    for (const n of load) if (n.owned < best.owned) best = n; // first minimum: ties go to the smallest id
    out.push(best.nodeId);
    best.owned++;
  }
  return out;
}
