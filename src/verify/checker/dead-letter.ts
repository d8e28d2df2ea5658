// The next wave's rules (SPEC "Checker verdicts": duplicate-produce and dead letters), as pure
// functions over the run's columns; pair-judgement.ts calls them for the pair it judges.
//
// Idempotent produces. A message whose produces all carried one (producer, sequence) is one
// message re-sent: the broker must store it once, so every place the history shows it stored on
// its own topic (a produce's 202, a delivery, a replay line) names one (partition, offset). Two
// places are `duplicate-produce`, whatever the faults: the dedupe window is rebuilt from the log,
// so no restart, power loss, move or failover excuses a second record (re-sends outside the
// window answer 409, never a second 202).
//
// Dead letters, on a topic T with max_deliveries M and dead-letter topic D:
//   - the pair is dead-lettered when a dead-letter op (an ack with dead_letter=true) answered 204,
//     or, with no ack of any kind on its handles, it was delivered at least M times and its last
//     lease surely ended (a nack's 204, or a visibility timeout after the last delivery or
//     extend): it then owes one delivery on D, due from that moment (`lost` there as anywhere);
//   - `dead-lettered-early`: a delivery on D with no dead-letter op of the pair (204 or
//     ambiguous) invoked before it completed, and either its origin says fewer than M deliveries,
//     or fewer than M deliveries on T began before it completed even counting every ambiguous
//     consume on T as a hidden one;
//   - `delivered-after-dead-letter`: a delivery on T after the pair was settled by a move. After
//     a dead-letter op's 204 the order search treats that op as an ack, so the ack rules apply. By
//     count: a delivery begun after M deliveries of the pair had completed, unless a fault may
//     have forgotten a count or the move. Counts and moves are kept with the acks, on the ack
//     log's schedule, so a fault forgets them as it forgets an ack: a kill of the lease's owner
//     within ack_flush_ms after one of those deliveries, a power loss within ack_sync_ms +
//     ack_flush_ms, a partition move, a failover within the replication window (pair.ts
//     `forgetsAck`); or the move itself, which happens after the last of them began and before
//     the excess delivery completed.
// Observed counts are lower bounds (a consume whose answer was lost may have delivered the
// message unseen), which is why "more than M" needs M completed deliveries before it, and "fewer
// than M" allows for every ambiguous consume.

import type { OpTable } from "./collect.js";
import { lowerBound } from "./findings.js";
import { forgetsAck, reachesRedelivery, K_ACK, type PairEnv, type PairOp } from "./pair.js";

/** Per pair on a topic with a dead-letter topic: whether and when it was dead-lettered. */
export class DeadLetterState {
  /** When the move was surely due (the dead-letter 204, the last lease's end); Infinity when not sure. */
  readonly dueNs: Float64Array;
  /** The earliest the move may have happened; Infinity when it cannot have. */
  readonly fromNs: Float64Array;
  /** The op that shows the move (the dead-letter op, or the last delivery); -1 when none. */
  readonly op: Int32Array;
  constructor(nPairs: number) {
    this.dueNs = new Float64Array(nPairs).fill(Infinity);
    this.fromNs = new Float64Array(nPairs).fill(Infinity);
    this.op = new Int32Array(nPairs).fill(-1);
  }
}

/**
 * Two places an idempotent message was stored at: the indexes (into `at`, triples of partition,
 * offset, op) of the first and of one that differs, or null when every place is one.
 */
export function duplicateStorage(at: readonly number[]): [number, number] | null {
  for (let i = 3; i < at.length; i += 3) {
    if (at[i] !== at[0] || at[i + 1] !== at[1]) return [0, i];
  }
  return null;
}

/**
 * Whether a delivery on the dead-letter path that completed at `compNs` came too early: no
 * dead-letter op of the source pair (invoke times `deadLetterInvNs`, ambiguous ones included)
 * before it, and fewer than `max` deliveries could have happened on the source topic: the
 * origin's own count (null when the line had none) below max, or the source's deliveries
 * (invoke times `sourceDeliveryInvNs`) begun before it plus the ambiguous consumes of the
 * source topic (`ambiguousConsumeNs`, sorted) begun before it below max.
 */
export function deadLetterEarly(
  compNs: number,
  max: number,
  originDeliveries: number | null,
  deadLetterInvNs: readonly number[],
  sourceDeliveryInvNs: readonly number[],
  ambiguousConsumeNs: Float64Array,
): boolean {
  for (const t of deadLetterInvNs) if (t < compNs) return false;
  if (originDeliveries !== null && originDeliveries < max) return true;
  let seen = 0;
  for (const t of sourceDeliveryInvNs) if (t < compNs) seen++;
  return seen + lowerBound(ambiguousConsumeNs, compNs) < max;
}

/** Deliveries past max_deliveries that excessDelivery looks at, per pair. */
export const EXCESS_DELIVERIES_CHECKED_MAX = 64;

/** A point of time as the ack rules see one (forgetsAck reads invNs and compNs only). */
function window(invNs: number, compNs: number, op: number): PairOp {
  return { op, kind: K_ACK, mandatory: true, invNs, compNs, handle: -1 };
}

/** When a delivery's lease may have ended: no earlier than `earliestNs`, surely by `latestNs`. */
export interface LeaseEnd {
  earliestNs: number;
  latestNs: number;
}

/**
 * The first delivery of `deliveries` (op rows of one pair, in invoke order) begun after `max`
 * others had completed, that no fault of `env` explains; returned with the deliveries before it,
 * or null when every such delivery is explained (or there is none). A delivery's count is written
 * when its lease ends (on the ack log's schedule), so a fault may forget it if it may forget an
 * ack taken over [the delivery, its lease's latest end]; each count forgotten allows one delivery
 * more. A fault that may forget an ack taken after the last counted lease could end and before
 * the excess delivery completed may have forgotten the move itself, which explains it too.
 */
export function excessDelivery(ops: OpTable, deliveries: readonly number[], max: number, env: PairEnv, leaseEnd: (d: number) => LeaseEnd): number[] | null {
  // A broker that delivers a message without end would make this quadratic: the first excess
  // deliveries decide (one unexplained is enough to name the anomaly).
  const last = Math.min(deliveries.length, max + EXCESS_DELIVERIES_CHECKED_MAX);
  for (let j = max; j < last; j++) {
    const dj = deliveries[j]!;
    const before: number[] = [];
    for (const d of deliveries) if (d !== dj && ops.compNs[d]! < ops.invNs[dj]!) before.push(d);
    if (before.length < max) continue;
    const forgets = (s: number, w: PairOp): boolean => {
      for (const f of env.ackForgetters(s)) if (f.invNs <= ops.compNs[dj]! && reachesRedelivery(f, s, dj, env) && forgetsAck(f, w, env)) return true;
      return false;
    };
    let forgotten = 0;
    let lastCounted = before[0]!;
    for (const s of before) {
      if (forgets(s, window(ops.invNs[s]!, leaseEnd(s).latestNs, s))) forgotten++;
      if (ops.invNs[s]! > ops.invNs[lastCounted]!) lastCounted = s;
    }
    if (before.length - forgotten < max) continue;
    if (forgets(lastCounted, window(leaseEnd(lastCounted).earliestNs, ops.compNs[dj]!, dj))) continue;
    return [...before, dj];
  }
  return null;
}
