// The cached view: every node, topic, placement and user as of the last read, in memory. Every
// read of the control plane (topics(), placement(), nodes(), get(user), the epoch check before
// an owner write) is served from here and never touches the database on a request's path, so
// reads keep answering while PostgreSQL is away.
//
// The view changes only through apply*, called by the serial refresh queue (./refresh.ts) with
// rows it read; each apply reports what changed as events (a difference of versions), which is
// what onChange listeners get. The view itself never reads the database and keeps no timers.

import type { Grant } from "../../auth/model.js";
import type { StoredUser, UserSummary } from "../../auth/user-store-api.js";
import { userNotFound, type ChangeEvent, type ClusterNode, type ClusterTopic, type PartitionPlacement, type UserEntry } from "./model.js";

export class CachedView {
  private readonly nodeMap = new Map<string, ClusterNode>();
  private readonly topicMap = new Map<string, ClusterTopic>();
  private readonly placementMap = new Map<string, PartitionPlacement[]>();
  private readonly userMap = new Map<string, UserEntry>();

  // ---- reads ---------------------------------------------------------------------------------

  /** Every node as of the last read (each heartbeat reads them all), by id. */
  nodes(): ClusterNode[] {
    return [...this.nodeMap.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  node(id: string): ClusterNode | undefined {
    return this.nodeMap.get(id);
  }

  topics(): ClusterTopic[] {
    return [...this.topicMap.values()].sort((a, b) => a.name.localeCompare(b.name));
  }

  topic(name: string): ClusterTopic | undefined {
    return this.topicMap.get(name);
  }

  topicNames(): IterableIterator<string> {
    return this.topicMap.keys();
  }

  /** Every partition of the topic with its owner and epoch, in partition order. */
  placement(topic: string): PartitionPlacement[] | undefined {
    return this.placementMap.get(topic);
  }

  partitionPlacement(topic: string, partition: number): PartitionPlacement | undefined {
    return this.placementMap.get(topic)?.[partition];
  }

  /** Every partition a node owns, by topic and partition. */
  ownedBy(nodeId: string): PartitionPlacement[] {
    const out: PartitionPlacement[] = [];
    for (const ps of this.placementMap.values()) for (const p of ps) if (p.node === nodeId) out.push(p);
    return out.sort((a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition);
  }

  get userCount(): number {
    return this.userMap.size;
  }

  userNames(): IterableIterator<string> {
    return this.userMap.keys();
  }

  generation(name: string): number | undefined {
    return this.userMap.get(name)?.version;
  }

  user(name: string): StoredUser | undefined {
    const u = this.userMap.get(name);
    return u === undefined ? undefined : { id: u.id, password: u.password, created_at: u.created_at, grants: u.grants };
  }

  users(): UserSummary[] {
    return [...this.userMap.entries()].map(([name, u]) => ({ name, created_at: u.created_at })).sort((a, b) => a.name.localeCompare(b.name));
  }

  grants(name: string): Grant[] {
    const u = this.userMap.get(name);
    if (u === undefined) throw userNotFound(name);
    return u.grants;
  }

  // ---- changes (the refresh queue's only) ----------------------------------------------------

  /** authoritative: the nodes are every node (a full read); else heartbeat rows, applied only if not older. */
  applyNodes(nodes: ClusterNode[], authoritative: boolean, events: ChangeEvent[]): void {
    const seen = new Set<string>();
    for (const after of nodes) {
      seen.add(after.id);
      const before = this.nodeMap.get(after.id);
      if (!authoritative && before !== undefined && before.version > after.version) continue;
      this.nodeMap.set(after.id, after);
      if (before === undefined || before.version !== after.version || before.state !== after.state || before.stopped !== after.stopped) {
        events.push({ kind: "node", id: after.id, before, after });
      }
    }
    if (authoritative) {
      for (const [id, before] of this.nodeMap) {
        if (!seen.has(id)) {
          this.nodeMap.delete(id);
          events.push({ kind: "node", id, before });
        }
      }
    }
  }

  /** The topic as read (undefined: it is gone) with its partitions in partition order. */
  applyTopic(name: string, after: ClusterTopic | undefined, parts: PartitionPlacement[], events: ChangeEvent[]): void {
    const before = this.topicMap.get(name);
    if (after === undefined) this.topicMap.delete(name);
    else this.topicMap.set(name, after);
    if (before?.version !== after?.version) events.push({ kind: "topic", name, before, after });
    const old = this.placementMap.get(name) ?? [];
    if (after === undefined) this.placementMap.delete(name);
    else this.placementMap.set(name, parts);
    for (let i = 0; i < Math.max(old.length, parts.length); i++) {
      const pb = old[i];
      const pa = after === undefined ? undefined : parts[i];
      if (pb?.version !== pa?.version) events.push({ kind: "partition", topic: name, partition: i, before: pb, after: pa });
    }
  }

  applyUser(name: string, after: UserEntry | undefined, events: ChangeEvent[]): void {
    const before = this.userMap.get(name);
    if (after === undefined) this.userMap.delete(name);
    else this.userMap.set(name, after);
    if (before?.version !== after?.version) events.push({ kind: "user", name, beforeGeneration: before?.version, afterGeneration: after?.version });
  }
}
