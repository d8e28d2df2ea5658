// The broker's fault seam: the few decisions a planted bug can change, as one typed hooks object
// the broker is handed (BrokerOptions.faults). A production broker runs NO_FAULTS, whose hooks
// hand back what they are given; the seeded bugs that calibrate the checker
// (`narad verify calibrate`) are implementations of it in ./seeded-bugs.ts, which only
// src/server.ts wires in, and only for a node started with --dev or NARAD_TEST_MODE=1.
//
// A bug that is a storage lie (acks never persisted, 202 before fsync, cursors not persisted) is
// not a hook in the data path but a wrapper of the storage interface itself: the `opened*` hooks
// hand the broker each partition's log, ack log and cursor file as it is opened, and a seeded
// bug wraps them there. (TigerBeetle keeps its simulator's faults in the storage it injects.)
//
// The hooks sit where a decision is made once per request or per handle, never per record read;
// with NO_FAULTS each is a monomorphic call that returns its argument.

import type { AckLog, PartitionLog, StoredRecord } from "../storage/types.js";
import type { SettleAction } from "./broker.js";
import type { CopyCursors } from "./children.js";
import type { Partition } from "./partition.js";

export interface BrokerFaults {
  /** A partition's log as the broker will use it. */
  openedLog(log: PartitionLog): PartitionLog;
  /** A partition's ack log as the broker will use it. */
  openedAcks(acks: AckLog): AckLog;
  /** A partition's copy cursors as its copier will use them. */
  openedCursors(cursors: CopyCursors): CopyCursors;
  /** A produce refused for the bytes waiting on fsync (429): true stores it anyway first. */
  storesWhenOverloaded(): boolean;
  /** How long a lease lasts, given the topic's visibility timeout. */
  leaseMs(visibilityTimeoutMs: number): number;
  /** The delivery tag a settle is checked against, given the handle's. */
  settleTag(p: Partition, offset: number, handleTag: number): number;
  /** What a settle does, given what was asked (with the tag it is checked against). */
  settleAction(action: SettleAction, p: Partition, offset: number, tag: number): SettleAction;
  /** A replay page as answered, given the records read. */
  replayPage(records: StoredRecord[]): StoredRecord[];
  /** After a copy to a child failed: "retry" it (after the back-off), or "skip" its records. */
  copyFailed(): "retry" | "skip";
  /** What stands for a pre-boot record's commit time: its produce time plus this margin. */
  preBootCommitMarginMs(marginMs: number): number;
}

/** The production broker's faults: none. */
export const NO_FAULTS: BrokerFaults = {
  openedLog: (log) => log,
  openedAcks: (acks) => acks,
  openedCursors: (cursors) => cursors,
  storesWhenOverloaded: () => false,
  leaseMs: (visibilityTimeoutMs) => visibilityTimeoutMs,
  settleTag: (_p, _offset, handleTag) => handleTag,
  settleAction: (action) => action,
  replayPage: (records) => records,
  copyFailed: () => "retry",
  preBootCommitMarginMs: (marginMs) => marginMs,
};
