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
import { isUniqueViolation } from "../errors.js";
import { placePartitions, type NodeLoad } from "../placement.js";
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
  await write([`topic:${t.name}`], async (c) => {
    const owners = t.nodes ?? (await placeNew(c, t.partitions));
    try {
      await c.query(
        `INSERT INTO narad.topics (name, incarnation, partitions, visibility_timeout_ms, retention_ms, owner, children, created_at, version)
         VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, nextval('narad.change_seq'))`,
        [t.name, incarnation, t.partitions, t.visibility_timeout_ms, t.retention_ms, t.owner, JSON.stringify(t.children ?? []), createdAt],
      );
    } catch (e) {
      if (isUniqueViolation(e)) throw new NaradError("topic_exists", `Topic ${JSON.stringify(t.name)} exists already.`);
      throw e;
    }
    await insertPartitions(c, t.name, 0, owners);
  });
}

/** Changes settings and grows partitions (new ones placed like a create's). */
export async function updateTopic(write: Write, name: string, change: TopicChange): Promise<void> {
  await write([`topic:${name}`], async (c) => {
    const r = await c.query<{ partitions: number }>("SELECT partitions FROM narad.topics WHERE name = $1 FOR UPDATE", [name]);
    if (r.rows.length === 0) throw topicNotFound(name);
    const current = r.rows[0]!.partitions;
    const next = change.partitions ?? current;
    if (!Number.isSafeInteger(next)) throw new NaradError("invalid_argument", "partitions must be a positive integer.");
    if (next < current) {
      throw new NaradError("partitions_decrease", `Topic ${name} has ${current} partitions; partitions can only grow.`);
    }
    if (change.nodes !== undefined && change.nodes.length !== next - current) throw new NaradError("invalid_argument", "nodes must name one node per new partition.");
    if (next > current) await insertPartitions(c, name, current, change.nodes ?? (await placeNew(c, next - current)));
    await c.query(
      `UPDATE narad.topics SET partitions = $2,
         visibility_timeout_ms = coalesce($3, visibility_timeout_ms),
         retention_ms = coalesce($4, retention_ms),
         children = coalesce($5::jsonb, children),
         version = nextval('narad.change_seq')
       WHERE name = $1`,
      [name, next, change.visibility_timeout_ms ?? null, change.retention_ms ?? null, change.children === undefined ? null : JSON.stringify(change.children)],
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

/** Under the placement lock: live nodes and their load, then the greedy choice. */
async function placeNew(c: pg.PoolClient, count: number): Promise<string[]> {
  await c.query("SELECT pg_advisory_xact_lock($1)", [PLACEMENT_LOCK_KEY.toString()]);
  const r = await c.query<{ id: string; owned: number }>(
    `SELECT n.id, count(p.partition)::int AS owned
       FROM narad.nodes n LEFT JOIN narad.partitions p ON p.node_id = n.id
      WHERE n.lease_expires_at > clock_timestamp()
      GROUP BY n.id`,
  );
  if (r.rows.length === 0) throw new NaradError("unavailable", "No node of the cluster is live to own new partitions; start a node and retry.");
  return placePartitions(
    r.rows.map((x): NodeLoad => ({ nodeId: x.id, owned: x.owned })),
    count,
  );
}

async function insertPartitions(c: pg.PoolClient, topic: string, first: number, owners: string[]): Promise<void> {
  if (owners.length === 0) return;
  await c.query(
    `INSERT INTO narad.partitions (topic, partition, node_id, epoch, state, version)
     SELECT $1, $2 + i - 1, node, 1, 'serving', nextval('narad.change_seq')
       FROM unnest($3::text[]) WITH ORDINALITY AS u(node, i)`,
    [topic, first, owners],
  );
}
