// The replay judgement: skip and nonmonotonic.
//
// skip: a replay that jumps over an offset known to exist. The log of a partition has no holes,
// so an offset exists once it, or any higher offset of the partition, has been seen; a gap between
// two offsets of one answer is therefore always a skip, and a first offset above the one asked
// for is a skip when a higher-or-equal offset was seen before the replay began.
// nonmonotonic: an answer whose offsets do not strictly increase, or start below the one asked for.

import { MinHeap } from "../../platform/heap.js";
import { F_CONSUME, F_PRODUCE, F_REPLAY, O_OK, type ReplayRec, type RunData } from "./collect.js";
import { sortedUnique, type Findings } from "./findings.js";
import type { AnomalyName } from "./types.js";

/** A partition's key in the maps below: topic and partition in one number. */
const keyOf = (topic: number, partition: number): number => topic * 1_048_576 + partition;

export function judgeReplays(run: RunData, findings: Findings): void {
  if (run.replays.length === 0) return;
  const ops = run.ops;
  const knownBefore = highestSeenBefore(run);
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

/**
 * Per replay op: the highest offset of its partition seen before the replay began, and the op
 * that showed it (-1, -1 for none). Operations come in invoke order and a sighting counts from its
 * completion, so pending sightings wait in a min-heap by completion time (value: the op, aux: the
 * offset); before each replay, those completed earlier are folded into a running maximum per
 * partition. Memory: the operations open at once.
 */
function highestSeenBefore(run: RunData): Map<number, { offset: number; op: number }> {
  const ops = run.ops;
  const replayOf = new Map<number, ReplayRec>();
  for (const r of run.replays) replayOf.set(r.op, r);
  const sightings = new MinHeap<number>();
  const maxSeen = new Map<number, { offset: number; op: number }>();
  const knownBefore = new Map<number, { offset: number; op: number }>();
  for (let op = 0; op < ops.length; op++) {
    const f = ops.f[op]!;
    if (f === F_REPLAY) {
      const key = keyOf(ops.topic[op]!, ops.partition[op]!);
      const t = ops.invNs[op]!;
      while (sightings.size > 0 && sightings.peekKey() < t) {
        const sk = sightings.peekValue()!;
        const offset = sightings.peekAux();
        sightings.pop();
        const k = keyOf(ops.topic[sk]!, ops.partition[sk]!);
        const cur = maxSeen.get(k);
        if (cur === undefined || offset > cur.offset) maxSeen.set(k, { offset, op: sk });
      }
      knownBefore.set(op, maxSeen.get(key) ?? { offset: -1, op: -1 });
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
