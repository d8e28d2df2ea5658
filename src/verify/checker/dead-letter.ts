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

import { F_ACK, F_CONSUME, F_DEAD_LETTER, F_EXTEND, F_NACK, O_FAIL, O_OK, type OpTable } from "./collect.js";
import { lowerBound } from "./findings.js";
import { classifyIllegal, forgetsAck, reachesRedelivery, K_ACK, type PairEnv, type PairOp } from "./pair.js";
import type { PairJudgement } from "./pair-judgement.js";

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

// ---- the rules, on the pair PairJudgement is judging (its fields: the pair, its produce, its findings) ----

/** duplicate-produce: an idempotent message stored at two places on its topic. */
export function testDuplicateProduce(j: PairJudgement): void {
  const at = j.index.storedAt(j.msg);
  const two = duplicateStorage(at);
  if (two === null) return;
  const [a, b] = two;
  const produces = j.index.repeatedProduces.get(j.msg) ?? [j.produce];
  const ops = j.ops;
  const p = j.produce;
  j.duplicated[j.msg] = 1;
  j.anomaly(
    "duplicate-produce",
    [...produces, at[a + 2]!, at[b + 2]!],
    `every produce carried producer ${j.run.producers.name(ops.producer[p]!)} sequence ${ops.sequence[p]}, ` +
      `yet it was stored at ${at[a]}/${at[a + 1]} and at ${at[b]}/${at[b + 1]}`,
  );
}

/**
 * A pair on a topic with a dead-letter topic, after its search and lost: deliveries beyond
 * max_deliveries, its dead-letter state for the pair on the dead-letter path, and stranded
 * unless it may have been moved.
 */
export function judgeDeadLetterSource(j: PairJudgement): void {
  const ops = j.ops;
  const rows = j.index.opRows;
  const max = j.topology.maxDeliveries[j.topic]!;
  const count = j.deliveries.length;
  if (count > max) testExcessDeliveries(j, max);
  let acked = false;
  let deadOp = -1;
  let deadOkOp = -1;
  for (let k = j.opsFrom; k < j.opsTo; k++) {
    const op = rows[k]!;
    const o = ops.outcome[op]!;
    if (o === O_FAIL) continue;
    if (ops.f[op] === F_ACK) acked = true;
    if (ops.f[op] !== F_DEAD_LETTER) continue;
    if (deadOp < 0) deadOp = op;
    if (o === O_OK && (deadOkOp < 0 || ops.compNs[op]! < ops.compNs[deadOkOp]!)) deadOkOp = op;
  }
  const p = j.pair;
  const dead = j.dead;
  if (deadOkOp >= 0) {
    dead.dueNs[p] = ops.compNs[deadOkOp]!;
    dead.fromNs[p] = ops.invNs[deadOp]!;
    dead.op[p] = deadOkOp;
  } else if (count >= max) {
    // The M-th delivery began the last allowed lease; the move follows a lease's end.
    dead.fromNs[p] = ops.invNs[j.deliveries[max - 1]!]!;
    if (deadOp >= 0) dead.fromNs[p] = Math.min(dead.fromNs[p]!, ops.invNs[deadOp]!);
    dead.op[p] = deadOp >= 0 ? deadOp : j.deliveries[count - 1]!;
    if (!acked && deadOp < 0) dead.dueNs[p] = j.lastLeaseEnd().endsNs;
  } else if (deadOp >= 0) {
    dead.fromNs[p] = ops.invNs[deadOp]!;
    dead.op[p] = deadOp;
  }
  // Settled by the move, for the silence measure, as an ack would have.
  if (dead.dueNs[p]! < j.times.settleNs[p]!) j.times.settleNs[p] = dead.dueNs[p]!;
  if (dead.fromNs[p]! < Infinity) return; // moved, or may have been: owed on the dead-letter path instead
  if (deliveredOnDeadLetterPath(j)) return; // judged there (dead-lettered-early)
  j.testStranded();
}

/** Whether the pair's message was delivered on the dead-letter topic of its path. */
export function deliveredOnDeadLetterPath(j: PairJudgement): boolean {
  const ops = j.ops;
  const dlq = j.index.findPair(j.msg, j.topology.deadLetterOf[j.topic]!);
  if (dlq < 0) return false;
  for (let k = j.index.opsStart[dlq]!; k < j.index.opsStart[dlq + 1]!; k++) if (ops.f[j.index.opRows[k]!] === F_CONSUME) return true;
  return false;
}

/**
 * When delivery `d`'s lease may have ended: no earlier than a settle of it (any answer but a
 * failure) began or its visibility timeout (less the slack) passed; surely by a nack's 204, or
 * the timeout after it or its last extend.
 */
export function leaseEndOf(j: PairJudgement, d: number): LeaseEnd {
  const ops = j.ops;
  const rows = j.index.opRows;
  const handle = ops.delivery[d]!;
  const vt = j.visibilityTimeoutNs;
  let earliestNs = ops.invNs[d]! + vt - j.slackNs;
  let latestNs = ops.compNs[d]! + vt;
  let nackNs = Infinity;
  for (let k = j.opsFrom; k < j.opsTo; k++) {
    const op = rows[k]!;
    if (op === d || ops.delivery[op] !== handle || ops.outcome[op] === O_FAIL) continue;
    const f = ops.f[op]!;
    if (f === F_EXTEND) latestNs = Math.max(latestNs, ops.compNs[op]! + vt);
    else if (f !== F_CONSUME) earliestNs = Math.min(earliestNs, ops.invNs[op]!);
    if (f === F_NACK && ops.outcome[op] === O_OK) nackNs = Math.min(nackNs, ops.compNs[op]!);
  }
  return { earliestNs, latestNs: Math.min(latestNs, nackNs) };
}

/** delivered-after-dead-letter by count: a delivery beyond max_deliveries that no fault explains. */
export function testExcessDeliveries(j: PairJudgement, max: number): void {
  const t = j.topic;
  const leaseEnd = (d: number): LeaseEnd => leaseEndOf(j, d);
  const shown = excessDelivery(j.ops, j.deliveries, max, j.envEvidenced[t]!, leaseEnd);
  if (shown === null) return;
  if (j.anyUnevidenced && excessDelivery(j.ops, j.deliveries, max, j.envAll[t]!, leaseEnd) === null) {
    j.unknownPair("explained-by-unevidenced-fault", shown, "delivered more than max_deliveries times; legal only if a fault that left no boot evidence happened");
    return;
  }
  j.anomaly(
    "delivered-after-dead-letter",
    shown,
    `delivered again after ${shown.length - 1} deliveries had completed (max_deliveries ${max}), and no fault that may forget a delivery count or the move explains it`,
  );
}

/** A pair on a dead-letter path: owed once its source pair was dead-lettered. */
export function judgeDeadLetterPath(j: PairJudgement): void {
  const index = j.index;
  const ops = j.ops;
  const run = j.run;
  j.dlqPath = true;
  const src = index.sourceOf[j.pair]!;
  const srcTopic = index.topicOf[src]!;
  const max = j.topology.maxDeliveries[srcTopic]!;
  const dead = j.dead;
  const sure = dead.dueNs[src]! < Infinity;
  const firstProduce = index.produceOf[j.msg]!;
  // The move plays the produce: from its earliest possible moment to when it was surely due.
  j.produce = dead.op[src]! >= 0 ? dead.op[src]! : firstProduce;
  j.repeated = false;
  j.produceOk = sure;
  j.produceFailedAll = false;
  // A delivery there no earlier than that passed dead-lettered-early only thanks to consumes
  // that may have delivered the message unseen: the move may have come that early too.
  let fromNs = dead.fromNs[src]! < Infinity ? dead.fromNs[src]! : ops.invNs[firstProduce]!;
  for (const d of j.deliveries) fromNs = Math.min(fromNs, ops.invNs[d]!);
  j.produceInvNs = fromNs;
  j.produceCompOkNs = dead.dueNs[src]!;
  j.produceSearchInvNs = j.produceInvNs;
  j.produceSearchOk = sure;
  j.produceSearchCompNs = sure ? dead.dueNs[src]! : Infinity;
  j.delayNs = 0;
  j.visibilityTimeoutNs = j.topology.visibilityTimeoutNs[j.topic]!;

  const deadLetterInvNs: number[] = [];
  const sourceDeliveries: number[] = [];
  for (let k = index.opsStart[src]!; k < index.opsStart[src + 1]!; k++) {
    const op = index.opRows[k]!;
    if (ops.f[op] === F_CONSUME) sourceDeliveries.push(op);
    else if (ops.f[op] === F_DEAD_LETTER && ops.outcome[op] !== O_FAIL) deadLetterInvNs.push(ops.invNs[op]!);
  }
  const sourceInvNs = sourceDeliveries.map((d) => ops.invNs[d]!);
  for (const d of j.deliveries) {
    const origin = run.origins.get(d);
    if (deadLetterEarly(ops.compNs[d]!, max, origin?.deliveries ?? null, deadLetterInvNs, sourceInvNs, index.ambiguousConsumeNs[srcTopic]!)) {
      const said = origin !== undefined ? `; its origin says ${origin.deliveries}` : "";
      j.anomaly(
        "dead-lettered-early",
        [firstProduce, ...sourceDeliveries, d],
        `on the dead-letter topic after ${sourceInvNs.filter((x) => x < ops.compNs[d]!).length} deliveries on ${run.topics.name(srcTopic)}` +
          ` (max_deliveries ${max}${said}), with no dead-letter ack`,
      );
      return;
    }
  }
  if (j.opsTo > j.opsFrom) {
    if (j.deliveries.length >= 2 && j.groupCopies()) searchCopiesOnOwn(j);
    else j.searchOrder();
  }
  j.recordTimes();
  j.testLost();
  j.testStranded();
}

/**
 * Several copies on a dead-letter path (a crash between the copy and the settle of its source
 * may leave one per move): each copy judged on its own, as a pair of its own.
 */
export function searchCopiesOnOwn(j: PairJudgement): void {
  const t = j.topic;
  const copySearch = j.copySearch;
  const causes = j.copyCauses;
  causes.length = 0;
  let usedUnevidenced = false;
  for (let c = 0; c < j.copyViews.length; c++) {
    j.fillSearch(copySearch, c);
    let st = copySearch.search(j.envEvidenced[t]!);
    if (st === "illegal" && j.anyUnevidenced) {
      const second = copySearch.search(j.envAll[t]!);
      if (second === "legal") usedUnevidenced = true;
      if (second !== "illegal") st = second;
    }
    j.stepsMostInOnePair = Math.max(j.stepsMostInOnePair, copySearch.steps);
    if (st === "cap") {
      j.capHits++;
      j.unknownPair("search-cap", copySearch.snapshot().map((o) => o.op), `the search for a legal order passed ${j.stepsMax} steps`);
      return;
    }
    if (st === "illegal") {
      const local = copySearch.snapshot();
      j.namedIllegal(local, classifyIllegal(local, j.envAll[t]!));
      return;
    }
    for (let i = 1; i < copySearch.n; i++) {
      const cause = copySearch.causeKind[i]!;
      if (cause < 0) continue;
      causes.push(copySearch.ops[i]!.op, cause, copySearch.causeFault[i]!, copySearch.causeSince[i]! >= 0 ? copySearch.ops[copySearch.causeSince[i]!]!.op : -1);
    }
  }
  if (usedUnevidenced) j.unknownPair("explained-by-unevidenced-fault", j.deliveries, "legal only if a fault that left no boot evidence happened");
  j.recordCauses(true);
}
