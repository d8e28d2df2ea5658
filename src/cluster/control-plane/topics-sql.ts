// The SQL of topics and their placement: create, change (settings, and partitions that only
// grow), delete. Each runs through the façade's write, so it NOTIFYs `topic:NAME` and this node
// has re-read the topic before the call returns.
//
// New partitions are placed inside the transaction, under an advisory lock that serialises
// placement: each goes to the live node owning the fewest partitions at that moment, ties to the
// smallest node id, counting those placed earlier in the same decision (../placement.ts); a
// node's liveness is read by clock_timestamp(), the database's clock. New partitions start at
// epoch 1. A duplicate create is decided by the primary key (topic_exists), not by a read before
// the insert.

import { randomInt } from "node:crypto";
import type pg from "pg";
import { NaradError } from "../../protocol/errors.js";
import { defaultAcks } from "../../protocol/wire.js";
import { isUniqueViolation } from "../errors.js";
import { placePartitions, placeReplicaSets, type NodeLoad } from "../placement.js";
import { PLACEMENT_LOCK_KEY } from "../schema.js";
import type { Write } from "./connections.js";
import { topicNotFound, type NewTopic, type TopicChange } from "./model.js";

/**
 * Creates the topic and places its partitions (t.nodes, or the least-loaded live nodes), epoch 1.
 * NaradError topic_exists if the name is taken; NaradError unavailable if no node is live.
 */
export async function createTopic(write: Write, t: NewTopic, nowMs: number): Promise<void> {
  if (!Number.isSafeInteger(t.partitions) || t.partitions < 1) throw new NaradError("invalid_argument", "partitions must be a positive integer.");
  const incarnation = t.incarnation ?? randomInt(1, 0xffffffff);
  const createdAt = t.created_at ?? nowMs;
  if (t.nodes !== undefined && t.nodes.length !== t.partitions) throw new NaradError("invalid_argument", "nodes must name one node per partition.");
  const factor = t.replication_factor ?? 1;
  if (t.nodes !== undefined && factor > 1) throw new NaradError("invalid_argument", "nodes places topics with one copy only.");
  await write([`topic:${t.name}`], async (c) => {
    const sets = t.nodes?.map((n) => [n]) ?? (await placeNew(c, t.partitions, factor));
    try {
      await c.query(
        `INSERT INTO narad.topics (name, incarnation, partitions, visibility_timeout_ms, retention_ms, replication_factor, acks, owner, owner_id, children, created_at, max_deliveries, dead_letter_topic, version)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13, nextval('narad.change_seq'))`,
        [t.name, incarnation, t.partitions, t.visibility_timeout_ms, t.retention_ms, factor, t.acks ?? defaultAcks(factor), t.owner, t.owner_id, JSON.stringify(t.children ?? []), createdAt, t.max_deliveries ?? null, t.dead_letter_topic ?? null],
      );
    } catch (e) {
      if (isUniqueViolation(e)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(t.name)} exists already.`);
      throw e;
    }
    await insertPartitions(c, t.name, 0, sets);
  });
}

/** Changes settings and grows partitions (new ones placed like a create's). */
export async function updateTopic(write: Write, name: string, change: TopicChange): Promise<void> {
  await write([`topic:${name}`], async (c) => {
    const r = await c.query<{ partitions: number; replication_factor: number }>("SELECT partitions, replication_factor FROM narad.topics WHERE name = $1 FOR UPDATE", [name]);
    if (r.rows.length === 0) throw topicNotFound(name);
    const current = r.rows[0]!.partitions;
    const factor = r.rows[0]!.replication_factor;
    if (change.acks === "quorum" && factor === 1) throw new NaradError("invalid_argument", 'acks "quorum" needs replication_factor 2 or more; this topic keeps one copy.');
    const next = change.partitions ?? current;
    if (!Number.isSafeInteger(next)) throw new NaradError("invalid_argument", "partitions must be a positive integer.");
    if (next < current) {
      throw new NaradError("partitions_decrease", `Topic ${name} has ${current} partitions; partitions can only grow.`);
    }
    if (change.nodes !== undefined && change.nodes.length !== next - current) throw new NaradError("invalid_argument", "nodes must name one node per new partition.");
    if (change.nodes !== undefined && factor > 1) throw new NaradError("invalid_argument", "nodes places topics with one copy only.");
    if (next > current) await insertPartitions(c, name, current, change.nodes?.map((n) => [n]) ?? (await placeNew(c, next - current, factor)));
    // To leader mode: a 202 will no longer wait for the followers, and a failover may promote only
    // a replica known to hold every acknowledged record. Only the leader is known to: the others
    // are added back by the leader once they are caught up (src/cluster/replication).
    if (change.acks === "leader") {
      await c.query(
        "UPDATE narad.partitions SET in_sync = ARRAY[node_id], version = nextval('narad.change_seq') WHERE topic = $1 AND in_sync <> ARRAY[node_id]",
        [name],
      );
    }
    await c.query(
      `UPDATE narad.topics SET partitions = $2,
         visibility_timeout_ms = coalesce($3, visibility_timeout_ms),
         retention_ms = coalesce($4, retention_ms),
         children = coalesce($5::jsonb, children),
         acks = coalesce($6, acks),
         max_deliveries = CASE WHEN $7 THEN $8::integer ELSE max_deliveries END,
         dead_letter_topic = CASE WHEN $9 THEN $10::text ELSE dead_letter_topic END,
         version = nextval('narad.change_seq')
       WHERE name = $1`,
      [
        name,
        next,
        change.visibility_timeout_ms ?? null,
        change.retention_ms ?? null,
        change.children === undefined ? null : JSON.stringify(change.children),
        change.acks ?? null,
        // Dead letters: null clears them, so "not given" is told apart from null.
        change.max_deliveries !== undefined,
        change.max_deliveries ?? null,
        change.dead_letter_topic !== undefined,
        change.dead_letter_topic ?? null,
      ],
    );
  });
}

/** Removes the topic and (by ON DELETE CASCADE) its placement. NaradError topic_not_found. */
export async function deleteTopic(write: Write, name: string): Promise<void> {
  await write([`topic:${name}`], async (c) => {
    const r = await c.query("DELETE FROM narad.topics WHERE name = $1", [name]);
    if (r.rowCount === 0) throw topicNotFound(name);
  });
}

/** Under the placement lock: live nodes and their load, then the greedy choice of replica sets. */
async function placeNew(c: pg.PoolClient, count: number, factor: number): Promise<string[][]> {
  await c.query("SELECT pg_advisory_xact_lock($1)", [PLACEMENT_LOCK_KEY.toString()]);
  const r = await c.query<{ id: string; owned: number }>(
    `SELECT n.id, count(p.partition)::int AS owned
       FROM narad.nodes n LEFT JOIN narad.partitions p ON n.id = ANY(p.replicas)
      WHERE n.lease_expires_at > clock_timestamp()
      GROUP BY n.id`,
  );
  if (r.rows.length === 0) throw new NaradError("unavailable", "No node of the cluster is live to own new partitions; start a node and retry.");
  if (r.rows.length < factor) {
    throw new NaradError("not_enough_nodes", `replication_factor ${factor} needs ${factor} live nodes; ${r.rows.length} ${r.rows.length === 1 ? "is" : "are"} live. Start more nodes, or ask for fewer copies.`);
  }
  const loads = r.rows.map((x): NodeLoad => ({ nodeId: x.id, owned: x.owned }));
  return factor === 1 ? placePartitions(loads, count).map((n) => [n]) : placeReplicaSets(loads, count, factor);
}

/** New partitions at epoch 1, each with its replica set (leader first), all of it in sync. */
async function insertPartitions(c: pg.PoolClient, topic: string, first: number, sets: string[][]): Promise<void> {
  if (sets.length === 0) return;
  await c.query(
    `INSERT INTO narad.partitions (topic, partition, node_id, replicas, in_sync, epoch, state, version)
     SELECT $1, $2 + i - 1, (s::text[])[1], s::text[], s::text[], 1, 'serving', nextval('narad.change_seq')
       FROM unnest($3::text[]) WITH ORDINALITY AS u(s, i)`,
    [topic, first, sets.map((s) => `{${s.map((n) => JSON.stringify(n)).join(",")}}`)],
  );
}
