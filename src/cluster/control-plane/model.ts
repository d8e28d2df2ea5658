// What the control plane holds, as the rest of the cluster sees it: nodes with their leases,
// topics (the broker's TopicMeta fields), the placement of every partition with its owner and
// epoch, users with their generation, and the change events computed as differences of the
// cached view. The rows PostgreSQL returns, and their conversion into these, are in ./rows.ts.

import { NaradError } from "../../protocol/errors.js";
import type { ChildJson, DeadLetterJson, ReplicationJson, TopicJson, TopicSettingsJson, UpdateTopicRequest } from "../../protocol/wire.js";
import type { StoredUser } from "../../auth/user-store-api.js";

export type NodeState = "live" | "down";

export interface ClusterNode {
  id: string;
  /** Small integer, kept across restarts; for receipt handles. */
  nodeNumber: number;
  advertiseUrl: string;
  bootId: string;
  /** live while its lease has not expired by the database clock (as of the last read). */
  state: NodeState;
  /** True after a graceful stop released the lease. */
  stopped: boolean;
  /** Database time (ms since the epoch) at which its lease expires. */
  leaseExpiresAtMs: number;
  version: number;
}

/** The broker's TopicMeta, as the cluster keeps it. */
/** A topic row: the topic's JSON (less its parent, derived from links), incarnation and version. */
export interface ClusterTopic extends Omit<TopicJson, "parent"> {
  /** The owner's user id (TopicMeta.owner_id); `owner` is its name as at creation. */
  owner_id: string | null;
  incarnation: number;
  version: number;
}

export type PartitionState = "serving" | "moving";

export interface PartitionPlacement {
  topic: string;
  partition: number;
  /** The owner (the leader of a replicated partition): it takes every produce, consume and ack. */
  node: string;
  /** Raised by every change of owner; a node writes only at the epoch it opened the partition with. */
  epoch: number;
  state: PartitionState;
  /** The node a move in progress copies to. */
  moveTo: string | null;
  /** Nodes holding a copy, the owner first (one entry for a topic with one copy). */
  replicas: string[];
  /** The replicas holding every record the owner acknowledged (the owner always). */
  inSync: string[];
  version: number;
}

export interface NewTopic extends TopicSettingsJson, Partial<ReplicationJson>, Partial<DeadLetterJson> {
  name: string;
  owner: string | null;
  /** The owner's user id; null exactly when owner is. */
  owner_id: string | null;
  /** Random in [1, 2^32) when absent. */
  incarnation?: number;
  /** ms since the epoch; the clock's now when absent. */
  created_at?: number;
  children?: ChildJson[];
  /**
   * The owner of each partition, chosen by the caller (a replica child kept off its parent's
   * nodes); absent: the least-loaded live nodes. Each must be a registered node.
   */
  nodes?: string[];
}

export interface TopicChange extends UpdateTopicRequest {
  children?: ChildJson[];
  /** Owners of the new partitions, as NewTopic.nodes. */
  nodes?: string[];
}

export interface TopicWithPlacement {
  topic: ClusterTopic;
  placement: PartitionPlacement[];
}

export type ChangeEvent =
  | { kind: "node"; id: string; before?: ClusterNode; after?: ClusterNode }
  | { kind: "topic"; name: string; before?: ClusterTopic; after?: ClusterTopic }
  | { kind: "partition"; topic: string; partition: number; before?: PartitionPlacement; after?: PartitionPlacement }
  | { kind: "user"; name: string; beforeGeneration?: number; afterGeneration?: number }
  /** This node's own lease became live or ran out (by the local deadline). */
  | { kind: "lease"; live: boolean }
  /** A newer process registered with this node id: this one must stop serving for good. */
  | { kind: "superseded" };

export interface ControlPlaneStatus {
  nodeId: string;
  nodeNumber: number;
  leaseLive: boolean;
  leaseValidUntilMono: number;
  superseded: boolean;
  /** The LISTEN connection is up. */
  listening: boolean;
  lastHeartbeatOkMono: number | undefined;
  lastResyncOkMono: number | undefined;
  heartbeatFailures: number;
}

export function userNotFound(name: string): NaradError {
  return new NaradError("user_not_found", `No user ${JSON.stringify(name)}.`);
}

export function topicNotFound(name: string): NaradError {
  return new NaradError("topic_not_found", `Topic ${JSON.stringify(name)} does not exist; create it first.`);
}

/** A user as the view caches it: the stored record and its row version (the generation). */
export interface UserEntry extends StoredUser {
  version: number;
}
