// The SQL of membership: the cluster secret, a node's registration, its heartbeat and the
// release of its lease at a graceful stop. What the lease means and when these run is
// ./lease.ts's; here is only what each statement does in narad.nodes.
//
// Node numbers (16 bits, for receipt handles) are chosen under an advisory lock and kept across
// restarts: a restart takes over its own row with its new boot id. Every heartbeat is guarded by
// the boot id, so a process whose row was taken over renews nothing and learns it is superseded.
// A release sets lease_expires_at = now() and state 'stopped', so the others see the node down at
// once instead of a lease later.

import { randomBytes } from "node:crypto";
import type pg from "pg";
import type { Logger } from "pino";
import { NODE_NUMBER_LOCK_KEY } from "../schema.js";
import { NaradError } from "../../protocol/errors.js";
import type { Connections, Write } from "./connections.js";
import { CONTROL_PLANE_LIMITS, type Settings } from "./options.js";
import { NODE_COLUMNS, NOTIFY_CHANNEL, type NodeRow } from "./rows.js";

const HEARTBEAT_SQL = `
WITH hb AS (
  UPDATE narad.nodes SET lease_expires_at = now() + $3::float8 * interval '1 millisecond', state = 'up'
  WHERE id = $1 AND boot_id = $2
  RETURNING id
)
SELECT ${NODE_COLUMNS}, (SELECT count(*) FROM hb)::int AS renewed FROM narad.nodes`;

type Node = Pick<Settings, "nodeId" | "bootId" | "advertiseUrl" | "nodeLeaseMs">;

/** The 32 random bytes made once per cluster (the first node to connect makes them). */
export async function loadClusterSecret(db: Connections): Promise<Buffer> {
  return db.tx(async (c) => {
    await c.query("INSERT INTO narad.cluster (id, secret) VALUES (true, $1) ON CONFLICT (id) DO NOTHING", [randomBytes(32)]);
    const r = await c.query<{ secret: Buffer }>("SELECT secret FROM narad.cluster");
    return r.rows[0]!.secret;
  });
}

/** Inserts this node's row, or takes over its own row after a restart; returns its node number. */
export async function registerNode(db: Connections, o: Node, log: Logger): Promise<number> {
  const r = await db.tx(
    async (c) => {
      await c.query("SELECT pg_advisory_xact_lock($1)", [NODE_NUMBER_LOCK_KEY.toString()]);
      const prev = await c.query<{ boot_id: string; live: boolean }>("SELECT boot_id, lease_expires_at > now() AS live FROM narad.nodes WHERE id = $1 FOR UPDATE", [o.nodeId]);
      if (prev.rows.length > 0) {
        const u = await c.query<{ node_number: number }>(
          `UPDATE narad.nodes SET boot_id = $2, advertise_url = $3, booted_at = now(),
             lease_expires_at = now() + $4::float8 * interval '1 millisecond', state = 'up', version = nextval('narad.change_seq')
           WHERE id = $1 RETURNING node_number`,
          [o.nodeId, o.bootId, o.advertiseUrl, o.nodeLeaseMs],
        );
        return { nodeNumber: u.rows[0]!.node_number, previous: prev.rows[0]! };
      }
      const n = await c.query<{ n: number }>("SELECT coalesce(max(node_number), 0) + 1 AS n FROM narad.nodes");
      const nodeNumber = n.rows[0]!.n;
      if (nodeNumber > CONTROL_PLANE_LIMITS.nodeNumberMax) throw new Error(`control plane: no node number left (at most ${CONTROL_PLANE_LIMITS.nodeNumberMax} nodes)`);
      await c.query(
        `INSERT INTO narad.nodes (id, node_number, advertise_url, boot_id, lease_expires_at, state, version)
         VALUES ($1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond', 'up', nextval('narad.change_seq'))`,
        [o.nodeId, nodeNumber, o.advertiseUrl, o.bootId, o.nodeLeaseMs],
      );
      return { nodeNumber, previous: undefined };
    },
    ["nodes"],
  );
  if (r.previous !== undefined && r.previous.boot_id !== o.bootId && r.previous.live) {
    // The previous process of this node id still had a live lease: it was killed (or is paused).
    // Its heartbeats now fail (boot id mismatch), so a paused one fences itself at its deadline.
    log.warn({ previousBoot: r.previous.boot_id }, "took over this node's registration from a previous boot whose lease was still live");
  }
  return r.nodeNumber;
}

/**
 * Extends this boot's lease by nodeLeaseMs of database time and reads back every node row in the
 * same statement; undefined when no row was renewed (another boot registered this node id).
 */
export async function heartbeat(hbPool: pg.Pool, o: Node): Promise<NodeRow[] | undefined> {
  const r = await hbPool.query<NodeRow & { renewed: number }>(HEARTBEAT_SQL, [o.nodeId, o.bootId, o.nodeLeaseMs]);
  const renewed = r.rows.length > 0 && r.rows[0]!.renewed === 1;
  if (!renewed) return undefined;
  // Our own row was read before the update in the same statement: it is live now.
  return r.rows.map((x) => (x.id === o.nodeId ? { ...x, live: true } : x));
}

/** A graceful stop: the lease ends now, and the other nodes are told. */
export async function releaseLease(hbPool: pg.Pool, o: Node): Promise<void> {
  await hbPool.query(
    `WITH u AS (UPDATE narad.nodes SET lease_expires_at = now(), state = 'stopped', version = nextval('narad.change_seq') WHERE id = $1 AND boot_id = $2 RETURNING id)
     SELECT pg_notify($3, 'nodes') FROM u`,
    [o.nodeId, o.bootId, NOTIFY_CHANNEL],
  );
}

/**
 * Retires a node for good (`narad node remove`, DELETE /v1/nodes/{id}): its row goes, so it is
 * no longer listed, nor counted down. Refused (node_in_use) while its lease is live, or while any
 * partition names it (owner, replica or move target): what it holds would be lost. Under the row
 * lock, so a start of that node meanwhile either comes first (refused: live) or registers afresh.
 */
export async function removeNode(write: Write, id: string): Promise<void> {
  await write(["nodes"], async (c) => {
    const n = await c.query<{ live: boolean }>("SELECT lease_expires_at > clock_timestamp() AS live FROM narad.nodes WHERE id = $1 FOR UPDATE", [id]);
    if (n.rows.length === 0) throw new NaradError("node_not_found", `No node ${JSON.stringify(id)} in the cluster.`);
    if (n.rows[0]!.live) throw new NaradError("node_in_use", `Node ${id} is live; stop it (and wait for its lease to end) before removing it.`);
    const held = await c.query<{ topic: string; partition: number }>(
      "SELECT topic, partition FROM narad.partitions WHERE node_id = $1 OR move_to = $1 OR $1 = ANY(replicas) ORDER BY topic, partition LIMIT 11",
      [id],
    );
    if (held.rows.length > 0) {
      const list = held.rows.slice(0, 10).map((r) => `${r.topic}/${r.partition}`).join(", ");
      throw new NaradError("node_in_use", `Node ${id} still holds ${list}${held.rows.length > 10 ? ", …" : ""}; move them to other nodes first (narad partition move).`);
    }
    await c.query("DELETE FROM narad.nodes WHERE id = $1", [id]);
  });
}
