// The rows as PostgreSQL returns them (BIGINT columns arrive as strings), the column lists every
// read uses, and their conversion into the entities of ./model.ts. The schema itself is
// ../schema.ts. Also the notification channel: every write NOTIFYs it inside its transaction,
// so the other nodes hear of a change exactly when it commits.

import type { Grant } from "../../auth/model.js";
import type { PasswordHash } from "../../auth/user-store-api.js";
import type { AcksMode, ChildJson } from "../../protocol/wire.js";
import type { ClusterNode, ClusterTopic, PartitionPlacement, PartitionState, UserEntry } from "./model.js";

export const NOTIFY_CHANNEL = "narad_changes";

export interface NodeRow {
  id: string;
  node_number: number;
  advertise_url: string;
  boot_id: string;
  state: string;
  live: boolean;
  lease_ms: number;
  version: string;
}

export interface TopicRow {
  name: string;
  incarnation: string;
  partitions: number;
  visibility_timeout_ms: string;
  retention_ms: string;
  replication_factor: number;
  acks: AcksMode;
  max_deliveries: number | null;
  dead_letter_topic: string | null;
  owner: string | null;
  owner_id: string | null;
  children: ChildJson[];
  created_at: string;
  version: string;
}

export interface PartitionRow {
  topic: string;
  partition: number;
  node_id: string;
  epoch: string;
  state: PartitionState;
  move_to: string | null;
  replicas: string[];
  in_sync: string[];
  version: string;
}

export interface UserRow {
  name: string;
  id: string;
  password: PasswordHash;
  grants: Grant[];
  created_at: string;
  version: string;
}

export const NODE_COLUMNS = `id, node_number, advertise_url, boot_id, state, lease_expires_at > now() AS live,
  (extract(epoch FROM lease_expires_at) * 1000)::float8 AS lease_ms, version`;
export const TOPIC_COLUMNS = "name, incarnation, partitions, visibility_timeout_ms, retention_ms, replication_factor, acks, max_deliveries, dead_letter_topic, owner, owner_id, children, created_at, version";
export const PARTITION_COLUMNS = "topic, partition, node_id, epoch, state, move_to, replicas, in_sync, version";
export const USER_COLUMNS = "name, id, password, grants, created_at, version";

export function toNode(r: NodeRow): ClusterNode {
  return {
    id: r.id,
    nodeNumber: r.node_number,
    advertiseUrl: r.advertise_url,
    bootId: r.boot_id,
    state: r.live ? "live" : "down",
    stopped: r.state === "stopped",
    leaseExpiresAtMs: r.lease_ms,
    version: Number(r.version),
  };
}

export function toTopic(r: TopicRow): ClusterTopic {
  return {
    name: r.name,
    incarnation: Number(r.incarnation),
    partitions: r.partitions,
    visibility_timeout_ms: Number(r.visibility_timeout_ms),
    retention_ms: Number(r.retention_ms),
    replication_factor: r.replication_factor,
    acks: r.acks,
    max_deliveries: r.max_deliveries ?? null,
    dead_letter_topic: r.dead_letter_topic ?? null,
    owner: r.owner,
    owner_id: r.owner_id,
    children: r.children,
    created_at: Number(r.created_at),
    version: Number(r.version),
  };
}

export function toPlacement(r: PartitionRow): PartitionPlacement {
  return {
    topic: r.topic,
    partition: r.partition,
    node: r.node_id,
    epoch: Number(r.epoch),
    state: r.state,
    moveTo: r.move_to,
    replicas: r.replicas,
    inSync: r.in_sync,
    version: Number(r.version),
  };
}

export function toUser(r: UserRow): UserEntry {
  return { id: r.id, password: r.password, grants: r.grants, created_at: Number(r.created_at), version: Number(r.version) };
}
