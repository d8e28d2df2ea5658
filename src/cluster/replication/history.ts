// A replica's epoch history: which leader epoch first appended each range of its log, as
// (epoch, startOffset) pairs in offset order. Kafka keeps the same thing as its leader-epoch
// checkpoint; Raft keeps a term in every entry. It answers the two questions replication asks:
//
// - Where do two logs diverge? Two replicas hold the same record at offset o exactly when the
//   epoch that appended o is the same in both histories (an epoch has one leader, which assigns
//   each offset once), and then they agree on every offset below o too (a follower only ever
//   appends what its leader sends, after cutting back to what they share). `commonPrefix` walks
//   both histories; a follower cuts its log there when it joins a leader.
// - Which replica is the most complete? Raft's rule: the one whose last record has the newest
//   epoch, then the longest log (`compareRank`). A new leader appends a control record of its own
//   epoch first (the epoch marker, src/storage/record.ts), and counts nothing as committed until a
//   majority holds that marker; so a replica whose last record is of the newest epoch holds every
//   record any earlier leader committed (docs/replication.md has the argument).
//
// The history is kept in the partition's directory as replica.json (written atomically): the
// history, and the newest epoch the replica has been told of (a message of an older epoch is a
// deposed leader's and is refused). Its size is bounded by HISTORY_ENTRIES_MAX: entries wholly
// below the log's earliest retained offset are dropped first.

import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../../platform/files.js";

export const REPLICA_FILE = "replica.json";
/** Most entries a history keeps (one per leader change that appended records). */
export const HISTORY_ENTRIES_MAX = 1000;

/** [epoch, startOffset]: records from startOffset up to the next entry's start came from epoch. */
export type EpochEntry = readonly [epoch: number, start: number];

export interface ReplicaFile {
  /** The newest epoch of this partition this replica has heard of. */
  epoch: number;
  history: EpochEntry[];
}

/** The epoch that appended the record at `offset`, or 0 when the history has none for it. */
export function epochAt(history: readonly EpochEntry[], offset: number): number {
  let e = 0;
  for (const [epoch, start] of history) {
    if (start > offset) break;
    e = epoch;
  }
  return e;
}

/** The epoch of the last record of a log ending at `end` (0 for an empty log). */
export function lastEpoch(history: readonly EpochEntry[], end: number): number {
  return end === 0 ? 0 : epochAt(history, end - 1);
}

/**
 * The longest prefix two logs share: the first offset below both ends where the epochs that
 * appended it differ, else the shorter end.
 */
export function commonPrefix(a: readonly EpochEntry[], aEnd: number, b: readonly EpochEntry[], bEnd: number): number {
  const end = Math.min(aEnd, bEnd);
  // The epoch is constant between consecutive starts of either history: check each such range.
  const starts = [...new Set([0, ...a.map((x) => x[1]), ...b.map((x) => x[1])])].sort((x, y) => x - y);
  for (const s of starts) {
    if (s >= end) break;
    if (epochAt(a, s) !== epochAt(b, s)) return s;
  }
  return end;
}

/** Most complete first: newest last epoch, then longest log. */
export function compareRank(x: { lastEpoch: number; end: number }, y: { lastEpoch: number; end: number }): number {
  return x.lastEpoch !== y.lastEpoch ? x.lastEpoch - y.lastEpoch : x.end - y.end;
}

/** The history cut to a log that now ends at `end` (entries starting at or past it go). */
export function cutHistory(history: readonly EpochEntry[], end: number): EpochEntry[] {
  return history.filter(([, start]) => start < end);
}

/** Adds `epoch` starting at `start` unless the history's last entry is that epoch already. */
export function withEpoch(history: readonly EpochEntry[], epoch: number, start: number): EpochEntry[] {
  const last = history[history.length - 1];
  if (last !== undefined && last[0] === epoch) return [...history];
  if (last !== undefined && (last[0] > epoch || last[1] > start)) {
    throw new Error(`epoch history: ${epoch}@${start} after ${last[0]}@${last[1]}`);
  }
  return [...history, [epoch, start]];
}

/** Drops entries wholly below `earliest` while the history is over its bound. */
export function boundHistory(history: readonly EpochEntry[], earliest: number): EpochEntry[] {
  let h = [...history];
  while (h.length > HISTORY_ENTRIES_MAX && h.length > 1 && h[1]![1] <= earliest) h = h.slice(1);
  return h;
}

export function parseReplicaFile(text: string): ReplicaFile {
  const j = JSON.parse(text) as Partial<ReplicaFile>;
  const okEntry = (x: unknown): x is EpochEntry =>
    Array.isArray(x) && x.length === 2 && Number.isSafeInteger(x[0]) && Number.isSafeInteger(x[1]) && (x[0] as number) >= 1 && (x[1] as number) >= 0;
  if (typeof j !== "object" || j === null || !Number.isSafeInteger(j.epoch) || !Array.isArray(j.history) || !j.history.every(okEntry)) {
    throw new Error("replica.json has missing or malformed fields");
  }
  for (let i = 1; i < j.history.length; i++) {
    const [pe, ps] = j.history[i - 1]!;
    const [e, s] = j.history[i]!;
    if (e <= pe || s < ps) throw new Error("replica.json's history is not in epoch and offset order");
  }
  return { epoch: j.epoch!, history: j.history };
}

/** The replica file of a partition directory; an empty history when there is none yet. */
export async function readReplicaFile(dir: string): Promise<ReplicaFile> {
  let text: string;
  try {
    text = await readFile(join(dir, REPLICA_FILE), "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return { epoch: 0, history: [] };
    throw e;
  }
  return parseReplicaFile(text);
}

export async function writeReplicaFile(dir: string, f: ReplicaFile): Promise<void> {
  await writeFileAtomic(join(dir, REPLICA_FILE), JSON.stringify({ epoch: f.epoch, history: f.history }));
}
