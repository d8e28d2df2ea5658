// Replication's fault seam: the decisions a planted bug may change, for calibrating the checker
// on replicated topics (`narad verify calibrate`). A production node runs NO_REPLICATION_FAULTS;
// src/server.ts builds the faults from NARAD_TEST_BUGS (refused unless --dev or NARAD_TEST_MODE=1),
// whose replication names are listed in src/broker/seeded-bugs.ts with the others.

export interface ReplicationFaults {
  /** A follower answers an append with its new end before the fsync that makes it durable. */
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
