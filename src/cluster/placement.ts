// Placement of new partitions: each goes to the live node that owns the fewest partitions at that
// moment, ties broken by node id, counting the ones placed earlier in the same decision. Pure; the
// control plane calls it inside a transaction that holds the placement lock, so two concurrent
// creates see each other's partitions.
//
// A replicated topic's partition gets a replica set: `factor` distinct live nodes, the least
// loaded first (a node's load counts every replica it holds, leader or follower), the first of
// them the leader.
//
// Only live nodes are candidates. Partitions of a down node stay where they are: their log is on
// that node's disk and nowhere else, and promoting an empty copy elsewhere would silently drop
// every message they hold.

export interface NodeLoad {
  nodeId: string;
  /** Partition replicas this node holds now (every topic, leader or follower). */
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

/**
 * Returns a replica set (node ids, leader first, all distinct) for each of `count` new partitions.
 * Throws when fewer than `factor` nodes are live (the caller answers not_enough_nodes).
 */
export function placeReplicaSets(live: readonly NodeLoad[], count: number, factor: number): string[][] {
  if (count === 0) return [];
  if (factor < 1 || live.length < factor) throw new Error(`placeReplicaSets: ${live.length} live nodes for ${factor} replicas`);
  const load = live.map((n) => ({ nodeId: n.nodeId, owned: n.owned })).sort((a, b) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0));
  const leads = new Map<string, number>();
  const out: string[][] = [];
  for (let i = 0; i < count; i++) {
    // A stable sort by load keeps ties in node-id order; the first `factor` are the set, and the
    // one of them leading the fewest of these new partitions leads (leaders spread too).
    const chosen = [...load].sort((a, b) => a.owned - b.owned).slice(0, factor);
    for (const n of chosen) n.owned++;
    let leader = chosen[0]!;
    for (const n of chosen) if ((leads.get(n.nodeId) ?? 0) < (leads.get(leader.nodeId) ?? 0)) leader = n;
    leads.set(leader.nodeId, (leads.get(leader.nodeId) ?? 0) + 1);
    out.push([leader.nodeId, ...chosen.filter((n) => n !== leader).map((n) => n.nodeId)]);
  }
  return out;
}
