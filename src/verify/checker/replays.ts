// The replay judgement: skip and nonmonotonic.
//
// skip: a replay that jumps over an offset known to exist. The log of a partition has no holes,
// so an offset exists once it, or any higher offset of the partition, has been seen; a gap between
// two offsets of one answer is therefore always a skip, and a first offset above the one asked
// for is a skip when a higher-or-equal offset was seen before the replay began.
// nonmonotonic: an answer whose offsets do not strictly increase, or start below the one asked for.
//
// A replicated topic's log has holes: each leader epoch begins with a marker, a control record
// that replay and delivery skip (docs/replication.md). There an offset is known to exist only
// when a produce's 202 or a delivery named it, and a replay skips when it jumps over such an
// offset (anywhere in the history: what a replica shows is a committed prefix, so a record
// committed at k is in every answer that shows an offset above k).

import { MinHeap } from "../../platform/heap.js";
import { F_CONSUME, F_PRODUCE, F_REPLAY, O_OK, type ReplayRec, type RunData } from "./collect.js";
import { lowerBound, sortedUnique, type Findings } from "./findings.js";
import type { AnomalyName } from "./types.js";

/** A partition's key in the maps below: topic and partition in one number. */
const keyOf = (topic: number, partition: number): number => topic * 1_048_576 + partition;

export function judgeReplays(run: RunData, findings: Findings): void {
  if (run.replays.length === 0) return;
  const ops = run.ops;
  const knownBefore = highestSeenBefore(run);
  const named = namedOffsets(run);
  for (const r of run.replays) {
    const op = r.op;
    const topic = run.topics.name(ops.topic[op]!);
    const partition = ops.partition[op]!;
    const from = ops.offset[op]!;
    const offs = r.offsets;
    const where = `${topic}/${partition}`;
    const report = (name: AnomalyName, shown: number[], explanation: string): void => {
      findings.anomaly({ name, msg: null, path: topic, ops: sortedUnique(shown.map((o) => ops.invIdx[o]!)), explanation: `replay of ${where}: ${explanation}` });
    };
    const holes = named.get(keyOf(ops.topic[op]!, partition));
    if (holes !== undefined) {
      const known = knownBefore.get(op)!;
      if (offs.length === 0 && known.offset >= from) report("skip", [op, known.op], `asked from offset ${from}, answered nothing, though offset ${known.offset} existed before the replay began`);
      else judgeWithHoles(holes, from, offs, report, op);
      continue;
    }
    let done = false;
    for (let i = 0; i < offs.length && !done; i++) {
      if (i === 0 && offs[0]! < from) {
        report("nonmonotonic", [op], `asked from offset ${from}, answered offset ${offs[0]} first`);
        done = true;
      } else if (i > 0 && offs[i]! <= offs[i - 1]!) {
        report("nonmonotonic", [op], `offset ${offs[i]} follows offset ${offs[i - 1]}`);
        done = true;
      } else if (i > 0 && offs[i]! > offs[i - 1]! + 1) {
        const missing = offs[i]! - offs[i - 1]! - 1;
        report("skip", [op], `jumped from offset ${offs[i - 1]} to ${offs[i]}, over ${missing} offset${missing === 1 ? "" : "s"} that exist`);
        done = true;
      }
    }
    if (done) continue;
    const first = offs.length > 0 ? offs[0]! : Infinity;
    if (first > from) {
      const known = knownBefore.get(op)!;
      if (known.offset >= from) {
        report(
          "skip",
          [op, known.op],
          offs.length > 0
            ? `asked from offset ${from}, answered from ${first}, though offset ${known.offset} existed before the replay began`
            : `asked from offset ${from}, answered nothing, though offset ${known.offset} existed before the replay began`,
        );
      }
    }
  }
}

/** Sorted offsets with the op that named each, per partition of a replicated topic. */
interface Named {
  offsets: number[];
  ops: number[];
}

/** Per partition of each replicated topic: the offsets produce oks and deliveries named. */
function namedOffsets(run: RunData): Map<number, Named> {
  const out = new Map<number, Named>();
  const replicated = new Set<number>();
  for (const [name, t] of Object.entries(run.config.topics)) if ((t.replication_factor ?? 1) > 1) replicated.add(run.topics.find(name));
  if (replicated.size === 0) return out;
  const ops = run.ops;
  const pairs = new Map<number, Array<[number, number]>>();
  for (let op = 0; op < ops.length; op++) {
    const f = ops.f[op]!;
    if (ops.outcome[op] !== O_OK || !replicated.has(ops.topic[op]!) || ops.partition[op]! < 0) continue;
    if (!(f === F_PRODUCE || (f === F_CONSUME && ops.msg[op]! >= 0))) continue;
    const k = keyOf(ops.topic[op]!, ops.partition[op]!);
    let list = pairs.get(k);
    if (list === undefined) pairs.set(k, (list = []));
    list.push([ops.offset[op]!, op]);
  }
  for (const t of replicated) for (let p = 0; p < (run.config.topics[run.topics.name(t)]?.partitions ?? 0); p++) if (!pairs.has(keyOf(t, p))) pairs.set(keyOf(t, p), []);
  for (const [k, list] of pairs) {
    list.sort((a, b) => a[0] - b[0]);
    out.set(k, { offsets: list.map((x) => x[0]), ops: list.map((x) => x[1]) });
  }
  return out;
}

/** A replay of a replicated partition: nonmonotonic as anywhere; a skip only over an offset named elsewhere. */
function judgeWithHoles(named: Named, from: number, offs: number[], report: (name: AnomalyName, shown: number[], explanation: string) => void, op: number): void {
  // An offset k with lo ≤ k < hi that a 202 or a delivery named, or -1.
  const namedIn = (lo: number, hi: number): number => {
    const i = lowerBound(named.offsets, lo);
    return i < named.offsets.length && named.offsets[i]! < hi ? i : -1;
  };
  for (let i = 0; i < offs.length; i++) {
    if (i === 0 && offs[0]! < from) return report("nonmonotonic", [op], `asked from offset ${from}, answered offset ${offs[0]} first`);
    if (i > 0 && offs[i]! <= offs[i - 1]!) return report("nonmonotonic", [op], `offset ${offs[i]} follows offset ${offs[i - 1]}`);
    const lo = i === 0 ? from : offs[i - 1]! + 1;
    const k = namedIn(lo, offs[i]!);
    if (k >= 0) {
      return report(
        "skip",
        [op, named.ops[k]!],
        i === 0 ? `asked from offset ${from}, answered from ${offs[0]}, over offset ${named.offsets[k]} that a 202 or a delivery named` : `jumped from offset ${offs[i - 1]} to ${offs[i]}, over offset ${named.offsets[k]} that a 202 or a delivery named`,
      );
    }
  }
}

/**
 * Per replay op: the highest offset of its partition seen before the replay began, and the op
 * that showed it (-1, -1 for none). Operations come in invoke order and a sighting counts from its
 * completion, so pending sightings wait in a min-heap by completion time (value: the op, aux: the
 * offset); before each operation, those completed before its invoke are folded into a running
 * maximum per partition, read at each replay. Memory: the operations open at once.
 */
function highestSeenBefore(run: RunData): Map<number, { offset: number; op: number }> {
  const ops = run.ops;
  const replayOf = new Map<number, ReplayRec>();
  for (const r of run.replays) replayOf.set(r.op, r);
  const sightings = new MinHeap<number>();
  // The running maximum per partition: its slot (by keyOf), then the offset and the op that showed it.
  const slotOf = new Map<number, number>();
  const maxOffset: number[] = [];
  const maxOp: number[] = [];
  const knownBefore = new Map<number, { offset: number; op: number }>();
  for (let op = 0; op < ops.length; op++) {
    const f = ops.f[op]!;
    // Invokes come in time order, so a sighting completed before this one's invoke counts for
    // every replay from here on: fold it now, which keeps the heap to the operations open at once.
    const t = ops.invNs[op]!;
    while (sightings.size > 0 && sightings.peekKey() < t) {
      const sk = sightings.peekValue()!;
      const offset = sightings.peekAux();
      sightings.pop();
      const k = keyOf(ops.topic[sk]!, ops.partition[sk]!);
      const slot = slotOf.get(k);
      if (slot === undefined) {
        slotOf.set(k, maxOffset.length);
        maxOffset.push(offset);
        maxOp.push(sk);
      } else if (offset > maxOffset[slot]!) {
        maxOffset[slot] = offset;
        maxOp[slot] = sk;
      }
    }
    if (f === F_REPLAY) {
      const slot = slotOf.get(keyOf(ops.topic[op]!, ops.partition[op]!));
      knownBefore.set(op, slot === undefined ? { offset: -1, op: -1 } : { offset: maxOffset[slot]!, op: maxOp[slot]! });
    }
    if (ops.outcome[op] !== O_OK) continue;
    if ((f === F_PRODUCE || (f === F_CONSUME && ops.msg[op]! >= 0)) && ops.partition[op]! >= 0) {
      sightings.push(ops.compNs[op]!, op, ops.offset[op]!);
    } else if (f === F_REPLAY) {
      const r = replayOf.get(op);
      if (r !== undefined && r.offsets.length > 0) sightings.push(ops.compNs[op]!, op, Math.max(...r.offsets));
    }
  }
  return knownBefore;
}
