// Child copies made twice: which fault can explain a second copy of a message on a child path.
//
// A copy to a child is a record of its own on the child topic, with its own partition and offset,
// made by the copier that runs on the parent partition's owner. The copier hands a batch of
// records to the child (a local append; in a cluster a produce forwarded to the owners of the
// child's partitions, or for a replica to the one partition of the same number; for a remote child
// a push to the other cluster, which forwards it to its owners likewise), advances the child's copy
// cursor once the whole batch is durable there, and the cursor reaches the OS every ack_flush_ms
// and the disk every ack_sync_ms. So, and only so, a message can be copied again:
//   1. the parent partition's owner dies before the cursor that covers the copy is written: a kill
//      within ack_flush_ms after the copier learnt the copy was durable, a power loss within
//      ack_sync_ms + ack_flush_ms; on restart the copier resumes from the older cursor;
//   2. a node the batch went to dies after the copy was durable and before the copier got the
//      answer for the whole batch: the node that stored the copy, or the owner of another child
//      partition the same batch went to (its part fails, the batch fails, the copier copies it all
//      again), or a node of a remote child's cluster that the push passed through.
// A graceful stop explains none of these: the copier finishes the copy in flight and syncs its
// cursors before the process exits, and a stopping node answers every request it took.
//
// What the history shows of a copy: its deliveries (same path, partition and offset), the first
// of which completed after the copy existed. So for a fault F to explain copy X as a re-copy of
// copy Y (each window widened by the slack):
//   - F is a kill or power loss of the parent's owner (the node the produce's ok names; when the ok
//     does not say, e.g. its answer was lost, the nodes that delivered the message on the parent
//     path: the owners of its partition), of the node that delivered Y, or of one of `viaNodes`: for a
//     fan-out, delay or remote child the nodes that delivered on its path (the owners of its
//     partitions) and the remote child's listed nodes; none for a replica (one partition a batch);
//   - F did not end before the produce began (no copy can exist earlier);
//   - F began no later than Y's first delivery completed plus the window. The answer that tells the
//     copier a batch is durable comes once its slowest part is (another owner, another cluster),
//     so it can reach the copier long after a consumer got one of its copies: at most the copy
//     request's timeout later (a request not answered by then fails, and the batch is copied
//     again without any fault: the rule does not explain that). `answerNs` is that timeout (the
//     config's copy_timeout_ms; ack_flush_ms without it). Case 2's window is the answer time;
//     case 1's is the answer time plus the cursor's (ack_flush_ms, or ack_sync_ms + ack_flush_ms
//     for a power loss);
//   - F began before X's first delivery completed (X was made after it);
//   - one fault explains at most one extra copy of a message: a restart copies it once more;
//   - on one partition offsets grow with time: a re-copy has a higher offset than the copy it
//     repeats, and than the original.
// With k copies, one is the original and the k - 1 others need distinct faults, each re-copy made
// from a copy placed before it. The search below tries every order (k is 2 in practice; a cap
// bounds the rest: past it the pair is judged as one record, as before this rule existed).

import type { FaultKind } from "../history/types.js";

export interface CopyView {
  partition: number;
  offset: number;
  /** Earliest completion of a delivery of this copy. */
  firstDeliveryNs: number;
  /** The node that delivered it first (the owner of its partition). */
  node: number;
}

export interface RecopyFault {
  /** Index into the checker's fault list. */
  fault: number;
  kind: FaultKind;
  /** -1: the fault names no node, so it may concern any. */
  node: number;
  invNs: number;
  /** Infinity when its outcome is unknown. */
  compNs: number;
}

export interface RecopyEnv {
  slackNs: number;
  ackFlushNs: number;
  ackSyncNs: number;
  /** When the produce began. */
  produceInvNs: number;
  /**
   * The parent partition's owner: the node the produce's ok names; when the ok does not say (an
   * ambiguous produce, or an older history), the nodes that delivered the message on the parent
   * path (the owners of its partition). Empty when neither says.
   */
  parentOwners: readonly number[];
  /** Nodes other than the copy's own that a batch with the copy may have gone to or through. */
  viaNodes: readonly number[];
  /**
   * How long after a copy became readable the copier may learn that its whole batch is durable:
   * the batch's slowest part, bounded by the copy request's timeout (config copy_timeout_ms).
   */
  answerNs: number;
}

export interface RecopyPlan {
  /** Per copy: -1 for the original, else the `fault` of the RecopyFault that explains it. */
  faultOf: number[];
  /** Per copy: -1 for the original, else the copy it repeats. */
  sourceOf: number[];
}

/** Copies one pair may have before the search gives up (then the pair is judged as one record). */
export const RECOPY_COPIES_MAX = 6;
const RECOPY_STEPS_MAX = 10_000;

/** Faults that can make a copier copy again at all. */
export function copiesAgain(kind: FaultKind): boolean {
  return kind === "kill" || kind === "power-loss";
}

/** Whether `f` can explain `x` as a copy made again after `y` was made. */
export function explainsRecopy(f: RecopyFault, y: CopyView, x: CopyView, env: RecopyEnv): boolean {
  if (!copiesAgain(f.kind)) return false;
  if (f.compNs + env.slackNs < env.produceInvNs) return false;
  if (f.invNs > x.firstDeliveryNs) return false;
  // The widest window among the roles the faulted node plays for this copy.
  const any = f.node < 0;
  let windowNs = -Infinity;
  if (env.parentOwners.length > 0 && (any || env.parentOwners.includes(f.node))) {
    const cursorNs = f.kind === "power-loss" ? env.ackSyncNs + env.ackFlushNs : env.ackFlushNs;
    windowNs = cursorNs + env.answerNs;
  }
  if (any || f.node === y.node || env.viaNodes.includes(f.node)) windowNs = Math.max(windowNs, env.answerNs);
  return f.invNs <= y.firstDeliveryNs + windowNs + env.slackNs;
}

/**
 * An assignment of distinct faults that explains every copy but one, or null. `faults` are the
 * candidates (the caller filters them by evidence).
 */
export function planRecopies(copies: readonly CopyView[], faults: readonly RecopyFault[], env: RecopyEnv): RecopyPlan | null {
  const k = copies.length;
  if (k < 2 || k > RECOPY_COPIES_MAX || faults.length === 0) return null;
  const candidates = faults.filter((f) => copiesAgain(f.kind) && f.compNs + env.slackNs >= env.produceInvNs);
  if (candidates.length < k - 1) return null;
  // Made later, so further along its partition.
  const after = (x: CopyView, y: CopyView): boolean => x.partition !== y.partition || x.offset > y.offset;
  const faultOf = new Array<number>(k).fill(-1);
  const sourceOf = new Array<number>(k).fill(-1);
  const placed = new Array<boolean>(k).fill(false);
  const used = new Array<boolean>(candidates.length).fill(false);
  const order: number[] = [];
  let steps = 0;
  const dfs = (): boolean => {
    if (order.length === k) return true;
    if (++steps > RECOPY_STEPS_MAX) return false;
    for (let x = 0; x < k; x++) {
      if (placed[x] || !after(copies[x]!, copies[order[0]!]!)) continue;
      for (const y of order) {
        if (!after(copies[x]!, copies[y]!)) continue;
        for (let j = 0; j < candidates.length; j++) {
          if (used[j]) continue;
          const f = candidates[j]!;
          // A re-copy as source must have been made before this fault ended.
          if (faultOf[y]! >= 0 && candidates[faultOf[y]!]!.invNs > f.compNs + env.slackNs) continue;
          if (!explainsRecopy(f, copies[y]!, copies[x]!, env)) continue;
          placed[x] = true;
          used[j] = true;
          faultOf[x] = j;
          sourceOf[x] = y;
          order.push(x);
          if (dfs()) return true;
          order.pop();
          placed[x] = false;
          used[j] = false;
          faultOf[x] = -1;
          sourceOf[x] = -1;
        }
      }
    }
    return false;
  };
  for (let o = 0; o < k; o++) {
    placed[o] = true;
    order.push(o);
    if (dfs()) return { faultOf: faultOf.map((j) => (j < 0 ? -1 : candidates[j]!.fault)), sourceOf };
    order.pop();
    placed[o] = false;
  }
  return null;
}
