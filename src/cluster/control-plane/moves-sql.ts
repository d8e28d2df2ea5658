// The SQL of a partition move's three compare-and-set steps (docs/cluster-control-plane.md,
// "Placement, epochs and moves"; the driver that copies the log between them is ../moves.ts).
// begin marks the partition `moving` to a node; complete switches the owner and raises the epoch
// in one UPDATE guarded by the epoch, the state, the target and the target's liveness by the
// database clock, so the switch is atomic and happens once; abort ends a move without a switch
// under the same kind of guard. When a guarded UPDATE changes no row, the partition is read
// FOR UPDATE to say why (MoveRefused). Never to or from a down node: its log is only on its disk.
//
// Fencing the old owner is the move driver's part, not this module's: the old owner must have
// stopped writing the partition before complete is called.

import type pg from "pg";
import { NaradError } from "../../protocol/errors.js";
import { MoveRefused } from "../errors.js";
import type { Write } from "./connections.js";
import { topicNotFound } from "./model.js";
import { PARTITION_COLUMNS, type PartitionRow } from "./rows.js";

/**
 * Marks the partition 'moving' to toNode and returns its owner and epoch. Both nodes must be
 * live. Repeating a begin to the same node returns the move in progress.
 */
export async function beginMove(write: Write, topic: string, partition: number, toNode: string): Promise<{ owner: string; epoch: number; toNode: string }> {
  return write([`topic:${topic}`], async (c) => {
    const p = await lockPartition(c, topic, partition);
    if (p.state === "moving") {
      if (p.move_to === toNode) return { owner: p.node_id, epoch: Number(p.epoch), toNode };
      throw new MoveRefused("move_in_progress", `${topic}/${partition} is being moved to ${p.move_to} already; complete or abort that move first.`);
    }
    if (p.node_id === toNode) throw new MoveRefused("same_node", `${topic}/${partition} is on ${toNode} already.`);
    if (p.replicas.length > 1) {
      throw new MoveRefused("replicated", `${topic}/${partition} is replicated on ${p.replicas.join(", ")}; moving one replica is not supported yet (its copies survive the loss of a minority of them).`);
    }
    const n = await c.query<{ id: string; live: boolean }>("SELECT id, lease_expires_at > clock_timestamp() AS live FROM narad.nodes WHERE id = ANY($1)", [[p.node_id, toNode]]);
    const target = n.rows.find((x) => x.id === toNode);
    if (target === undefined) throw new MoveRefused("node_unknown", `No node ${JSON.stringify(toNode)} is registered.`);
    if (!target.live) throw new MoveRefused("node_down", `Node ${toNode} is down; start it before moving partitions to it.`);
    if (!n.rows.find((x) => x.id === p.node_id)?.live) {
      throw new MoveRefused("node_down", `Node ${p.node_id}, the owner of ${topic}/${partition}, is down: its log is only there; start it again, then move.`);
    }
    await c.query("UPDATE narad.partitions SET state = 'moving', move_to = $3, version = nextval('narad.change_seq') WHERE topic = $1 AND partition = $2", [topic, partition, toNode]);
    return { owner: p.node_id, epoch: Number(p.epoch), toNode };
  });
}

/**
 * Switches the owner to toNode and raises the epoch, only if the partition is still moving to
 * toNode at expectedEpoch and toNode is live. MoveRefused stale_epoch when another change won.
 */
export async function completeMove(write: Write, topic: string, partition: number, toNode: string, expectedEpoch: number): Promise<void> {
  await write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions SET node_id = move_to, replicas = ARRAY[move_to], in_sync = ARRAY[move_to], epoch = epoch + 1, state = 'serving', move_to = NULL, version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND state = 'moving' AND move_to = $4
          AND EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $4 AND n.lease_expires_at > clock_timestamp())`,
      [topic, partition, expectedEpoch, toNode],
    );
    if (r.rowCount === 1) return;
    const p = await lockPartition(c, topic, partition);
    if (Number(p.epoch) !== expectedEpoch) throw new MoveRefused("stale_epoch", `${topic}/${partition} is at epoch ${p.epoch}, not ${expectedEpoch}: another change won.`);
    if (p.state === "moving" && p.move_to === toNode) throw new MoveRefused("node_down", `Node ${toNode} is down; the move cannot complete (abort it, or retry once the node is back).`);
    throw new MoveRefused("not_moving", `${topic}/${partition} is not being moved to ${toNode}.`);
  });
}

/**
 * Places a partition whose owner is down on toNode at the next epoch, with nothing copied: what
 * only the down owner held is given up (the operator says so: `accept_loss`). For a node that will
 * not come back, so its partitions (empty or lost) can be served again and the node removed. The
 * new owner opens it empty; the old node, if it ever returns, removes its stale copy (ownership
 * follows the placement). Refused for a live owner (move it), a move in progress, a replicated
 * partition (failover serves it) and a down target.
 */
export async function reassignLost(write: Write, topic: string, partition: number, toNode: string): Promise<{ from: string; epoch: number }> {
  return write([`topic:${topic}`], async (c) => {
    const p = await lockPartition(c, topic, partition);
    if (p.state === "moving") throw new MoveRefused("move_in_progress", `${topic}/${partition} is being moved to ${p.move_to}; complete or abort that move first.`);
    if (p.node_id === toNode) throw new MoveRefused("same_node", `${topic}/${partition} is on ${toNode} already.`);
    if (p.replicas.length > 1) throw new MoveRefused("replicated", `${topic}/${partition} is replicated on ${p.replicas.join(", ")}: a live replica takes over by failover; nothing needs to be given up.`);
    const n = await c.query<{ id: string; live: boolean }>("SELECT id, lease_expires_at > clock_timestamp() AS live FROM narad.nodes WHERE id = ANY($1)", [[p.node_id, toNode]]);
    const target = n.rows.find((x) => x.id === toNode);
    if (target === undefined) throw new MoveRefused("node_unknown", `No node ${JSON.stringify(toNode)} is registered.`);
    if (!target.live) throw new MoveRefused("node_down", `Node ${toNode} is down; start it before placing partitions on it.`);
    if (n.rows.find((x) => x.id === p.node_id)?.live === true) {
      throw new NaradError("invalid_argument", `${topic}/${partition}'s owner ${p.node_id} is live: move it without accept_loss, which copies its log.`);
    }
    await c.query(
      `UPDATE narad.partitions SET node_id = $3, replicas = ARRAY[$3], in_sync = ARRAY[$3], epoch = epoch + 1, version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2`,
      [topic, partition, toNode],
    );
    return { from: p.node_id, epoch: Number(p.epoch) + 1 };
  });
}

/** Ends a move without switching owner, if the partition is still moving at expectedEpoch. */
export async function abortMove(write: Write, topic: string, partition: number, expectedEpoch: number): Promise<void> {
  await write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      // A replica move added its target to the replica set: it leaves again (a no-op for a
      // partition with one copy, whose target was never in it).
      `UPDATE narad.partitions SET state = 'serving', replicas = array_remove(replicas, move_to), in_sync = array_remove(in_sync, move_to),
              move_to = NULL, version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND state = 'moving'`,
      [topic, partition, expectedEpoch],
    );
    if (r.rowCount === 1) return;
    const p = await lockPartition(c, topic, partition);
    if (Number(p.epoch) !== expectedEpoch) throw new MoveRefused("stale_epoch", `${topic}/${partition} is at epoch ${p.epoch}, not ${expectedEpoch}.`);
    throw new MoveRefused("not_moving", `${topic}/${partition} is not being moved.`);
  });
}

async function lockPartition(c: pg.PoolClient, topic: string, partition: number): Promise<PartitionRow> {
  const r = await c.query<PartitionRow>(`SELECT ${PARTITION_COLUMNS} FROM narad.partitions WHERE topic = $1 AND partition = $2 FOR UPDATE`, [topic, partition]);
  if (r.rows.length > 0) return r.rows[0]!;
  const t = await c.query("SELECT 1 FROM narad.topics WHERE name = $1", [topic]);
  if (t.rows.length === 0) throw topicNotFound(topic);
  throw new NaradError("partition_not_found", `Topic ${topic} has no partition ${partition}.`);
}
