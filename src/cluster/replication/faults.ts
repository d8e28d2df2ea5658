// Replication's fault seam: the decisions a planted bug may change, for calibrating the checker
// on replicated topics (`narad verify calibrate`). A production node runs NO_REPLICATION_FAULTS;
// src/server.ts builds the faults from NARAD_TEST_BUGS (refused unless --dev or NARAD_TEST_MODE=1),
// whose replication names are listed in src/broker/seeded-bugs.ts with the others.

import type { Scheduler } from "../../platform/scheduler.js";

/**
 * follower-ack-before-fsync: how long a follower's log holds its writes before it flushes and
 * fsyncs them. The bug is modelled on JetStream's default, where a replica answers at once and
 * syncs on a timer (`sync_interval`, two minutes), the shape Jepsen's NATS 2.12.1 analysis found
 * losing acknowledged writes. Five seconds here (JetStream's is 120) keeps the window wider than
 * the calibration row's quiet spells: at one second, a slow CI machine whose produces paused for
 * half a second before the power loss had its last acknowledged writes synced by the timer just
 * in time, and the bug went unseen (the row judged valid). The gap between a workload's last
 * acknowledged write and its power loss is well under five seconds at any load that produces.
 */
export const FOLLOWER_SYNC_INTERVAL_MS = 5_000;

export interface ReplicationFaults {
  /** A follower answers an append with its new end before the fsync that makes it durable (and syncs on a timer). */
  followerAnswersBeforeFsync: boolean;
  /** A failover promotes the first live follower, whether or not it holds every acknowledged record. */
  electsIncompleteFollower: boolean;
  /** Acks stay on the leader: none ship to the followers. */
  acksNotShipped: boolean;
}

export const NO_REPLICATION_FAULTS: ReplicationFaults = {
  followerAnswersBeforeFsync: false,
  electsIncompleteFollower: false,
  acksNotShipped: false,
};

/** The faults named in a seeded-bug list (names of src/broker/seeded-bugs.ts). */
export function replicationFaults(bugs: readonly string[]): ReplicationFaults {
  return {
    followerAnswersBeforeFsync: bugs.includes("follower-ack-before-fsync"),
    electsIncompleteFollower: bugs.includes("elect-incomplete-follower"),
    acksNotShipped: bugs.includes("acks-not-replicated"),
  };
}

/** The scheduler of a follower's log under follower-ack-before-fsync: its group commit waits for the timer. */
export function syncOnTimer(inner: Scheduler, intervalMs: number = FOLLOWER_SYNC_INTERVAL_MS): Scheduler {
  return {
    after: (ms, fn) => inner.after(ms, fn),
    every: (ms, fn) => inner.every(ms, fn),
    sleep: (ms) => inner.sleep(ms),
    soon: (fn) => void inner.after(intervalMs, fn),
  };
}
