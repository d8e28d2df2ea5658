// The SQL of replicated partitions (docs/replication.md): the leader's compare-and-set of its
// in-sync replicas, and a failover's election of a new leader. Both are guarded by the epoch, so
// a deposed leader's write changes nothing; an election also by the old leader's lease having
// lapsed by the database clock and the new one's being live, and, in leader mode, by the new
// leader being in sync (the only replicas known to hold every acknowledged record).

import type { Write } from "./connections.js";

/**
 * Sets in_sync of a partition this node leads at `epoch`. False when the guard failed (another
 * epoch, another owner, a node outside the replica set): the caller was deposed.
 */
export async function setInSync(write: Write, topic: string, partition: number, epoch: number, leader: string, inSync: string[]): Promise<boolean> {
  return write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions SET in_sync = $5::text[], version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND node_id = $4
          AND $5::text[] <@ replicas AND $4 = ANY($5::text[]) AND in_sync IS DISTINCT FROM $5::text[]`,
      [topic, partition, epoch, leader, inSync],
    );
    return r.rowCount === 1;
  });
}

/**
 * Makes `candidate` the leader at epoch `expectedEpoch + 1`, if the partition is still led by
 * `oldLeader` at `expectedEpoch`, is not being moved, the old leader's lease has lapsed, the
 * candidate is a live replica, and (leader mode) it is in sync. The candidate goes first in
 * replicas; in_sync becomes the candidate alone until it re-adds the followers that caught up.
 * True when this election won.
 */
export async function electLeader(
  write: Write,
  topic: string,
  partition: number,
  expectedEpoch: number,
  oldLeader: string,
  candidate: string,
  requireInSync: boolean,
): Promise<boolean> {
  return write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions
          SET node_id = $5, epoch = epoch + 1,
              replicas = array_prepend($5::text, array_remove(replicas, $5::text)),
              in_sync = ARRAY[$5::text], version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND node_id = $4 AND state = 'serving'
          AND $5 = ANY(replicas) AND (NOT $6 OR $5 = ANY(in_sync))
          AND NOT EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $4 AND n.lease_expires_at > clock_timestamp())
          AND EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $5 AND n.lease_expires_at > clock_timestamp())`,
      [topic, partition, expectedEpoch, oldLeader, candidate, requireInSync],
    );
    return r.rowCount === 1;
  });
}

/**
 * Moving one replica, step 1 (the leader drives it): `to` joins the replica set as a follower and
 * the partition is marked moving to it, at the same epoch. False when the guard failed.
 */
export async function beginReplicaMove(write: Write, topic: string, partition: number, epoch: number, leader: string, from: string, to: string): Promise<boolean> {
  return write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions SET replicas = array_append(replicas, $6::text), state = 'moving', move_to = $6, version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND node_id = $4 AND state = 'serving'
          AND $5 = ANY(replicas) AND NOT ($6 = ANY(replicas))
          AND EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $6 AND n.lease_expires_at > clock_timestamp())`,
      [topic, partition, epoch, leader, from, to],
    );
    return r.rowCount === 1;
  });
}

/** Step 2, a follower moved: once `to` is in sync, `from` leaves the replica set. */
export async function finishReplicaMove(write: Write, topic: string, partition: number, epoch: number, leader: string, from: string, to: string): Promise<boolean> {
  return write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions SET replicas = array_remove(replicas, $5::text), in_sync = array_remove(in_sync, $5::text), state = 'serving', move_to = NULL,
              version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND node_id = $4 AND state = 'moving' AND move_to = $6
          AND $6 = ANY(in_sync) AND $5 <> $4`,
      [topic, partition, epoch, leader, from, to],
    );
    return r.rowCount === 1;
  });
}

/**
 * Step 2, the leader moved: the old leader, which stopped serving the partition, hands it to
 * `next` at epoch + 1 and leaves the replica set.
 */
export async function handOffLeader(write: Write, topic: string, partition: number, epoch: number, leader: string, next: string, to: string): Promise<boolean> {
  return write([`topic:${topic}`], async (c) => {
    const r = await c.query(
      `UPDATE narad.partitions
          SET node_id = $5, epoch = epoch + 1,
              replicas = array_prepend($5::text, array_remove(array_remove(replicas, $4::text), $5::text)),
              in_sync = ARRAY[$5::text], state = 'serving', move_to = NULL, version = nextval('narad.change_seq')
        WHERE topic = $1 AND partition = $2 AND epoch = $3 AND node_id = $4 AND state = 'moving' AND move_to = $6
          AND $5 = ANY(replicas) AND $5 <> $4
          AND EXISTS (SELECT 1 FROM narad.nodes n WHERE n.id = $5 AND n.lease_expires_at > clock_timestamp())`,
      [topic, partition, epoch, leader, next, to],
    );
    return r.rowCount === 1;
  });
}
