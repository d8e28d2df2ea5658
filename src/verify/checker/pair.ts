// The exact judgement of one (message, path) pair: is there an order of its operations,
// consistent with real time, that walks the pair through legal transitions?
//
//   absent --produce--> pending --deliver--> leased(h) --ack h--> acked
//   leased(h) --extend h--> leased(h), lease restarted     leased(h) --nack h--> pending
//   leased(h) --deliver--> leased(h')   only if h's lease could have lapsed (the visibility timeout
//                                        passed since the delivery or its last extend) or a fault
//                                        on the lease's owner could have ended it
//   acked --deliver--> leased(h')        only if a fault could have made the broker forget the ack
//
// On a replicated topic a failover is such a fault too (SPEC "Checker verdicts"): the old owner
// killed, cut off or frozen, and the delivery made by ANOTHER owner (the new leader). It ends the
// old owner's leases and explains a forgotten ack within the replication window (ack_flush_ms,
// the shipping interval, plus the replication lag the config allows): see `forgetsAck`.
//
// Each operation takes effect at one point inside [invoke, completion]; an ambiguous one (info, or
// never completed) may take effect at any point after its invoke or not at all, except a 410,
// whose answer proves any effect came before it. The search is a depth-first walk over "which
// operation takes effect next", placing each point as early as the constraints allow. Every
// constraint is a lower bound that grows with earlier points (real time, a lapse after the lease
// start, a redelivery after the fault) or a fixed upper bound (an operation's completion), so the
// earliest placement is optimal for a given order and the walk only branches on orders. A pair has
// a handful of operations, so this is cheap; a cap on steps turns a pathological pair into an
// "unknown" instead of a hang.
//
// When no order exists, `classifyIllegal` names the anomaly by the patterns of the spec
// (duplicate-after-ack, double-lease) or falls back to no-legal-order.

import type { FaultKind } from "../history/types.js";

export const K_PRODUCE = 0;
export const K_DELIVER = 1;
export const K_ACK = 2;
export const K_EXTEND = 3;
export const K_NACK = 4;

const S_ABSENT = 0;
const S_PENDING = 1;
const S_LEASED = 2;
const S_ACKED = 3;

/** Why a delivery happened, in the order the search found. */
export const C_FIRST = 0;
export const C_LAPSE = 1;
export const C_NACK = 2;
/** A fault ended the previous lease. */
export const C_FAULT = 3;
/** A fault made the broker forget an ack: an explained duplicate-after-ack. */
export const C_FORGET = 4;
/** Not a search result: a copy made again by the copier (recopy.ts), judged by the checker. */
export const C_RECOPY = 5;

export interface PairOp {
  /** Row in the OpTable. */
  op: number;
  kind: number;
  /** True when the operation surely took effect (ok); false for info and never-completed ones. */
  mandatory: boolean;
  invNs: number;
  /** Latest point of its effect: the completion, or Infinity for an error or an open operation. */
  compNs: number;
  /** Local index of the delivery it names (a delivery names itself); -1 for none known. */
  handle: number;
  /** Deliveries: OpTable rows of the delivery, for fault lookups. */
}

/** A fault as the search sees it: when it may have struck. */
export interface FaultTime {
  fault: number;
  kind: FaultKind;
  invNs: number;
  /**
   * Infinity when the fault's outcome is unknown. For a failover entry of a pause or a cut, the
   * end of its effect (the resume or heal): the frozen or cut-off owner may take acks and hand
   * out leases until then, none of which reach the new leader.
   */
  compNs: number;
  /**
   * A failover of a replicated partition: applies only to a delivery made by another owner than
   * the one that held the lease (and took the ack), with the replication window.
   */
  failover?: boolean;
  /** A kill that lost what a power loss would (the node ran in the test-only power-loss mode). */
  lossy?: boolean;
  /**
   * A failover entry of a pause or a cut, with the nodes' lease known: the old owner's lease
   * deadline at the latest. It explains only leases and acks begun before it (plus the slack).
   */
  fencedByNs?: number;
  /**
   * A crash (kill, power loss) of a follower of a replicated partition: applies only to a
   * redelivery made by that node after it came to lead, of an ack taken by another owner. Acks
   * reach a follower on the ack log's schedule and sit in its memory until its own flush (and
   * fsync); a follower down, paused or cut off when the ack was taken gets it only after it is
   * back (and joined again), so `outages` lists [start, end] of the faults of it or of the
   * lease's owner that began before the crash.
   */
  follower?: { node: number; outages: readonly number[] };
}

export interface PairEnv {
  slackNs: number;
  visibilityTimeoutNs: number;
  ackFlushNs: number;
  ackSyncNs: number;
  /** A replicated topic's window for a failover to forget an ack: ack_flush_ms + replication_lag_ms. */
  replicationWindowNs: number;
  /**
   * How long after an outage ends (a start, resume or heal of a follower or its leader) the acks
   * queued for the follower may take to reach it: the leader joins it again first.
   */
  rejoinNs: number;
  /** The owner node of a delivery (OpTable row), for the failover rule's "another owner". */
  nodeOf(deliveryOp: number): number;
  stepsMax: number;
  /** Faults that may end a lease taken by this delivery (OpTable row). */
  leaseEnders(deliveryOp: number): readonly FaultTime[];
  /** Faults that may make the owner of this delivery's lease forget an ack of it. */
  ackForgetters(deliveryOp: number): readonly FaultTime[];
}

export type SearchStatus = "legal" | "illegal" | "cap";

/**
 * Whether fault `f` may act on a redelivery `redelivery` of the lease taken by `leased` (both
 * OpTable rows): any fault of the lease's owner may, a failover only when another owner made
 * the redelivery.
 */
export function reachesRedelivery(f: FaultTime, leased: number, redelivery: number, env: PairEnv): boolean {
  if (f.follower !== undefined) return env.nodeOf(redelivery) === f.follower.node && env.nodeOf(leased) !== f.follower.node;
  return f.failover !== true || env.nodeOf(leased) !== env.nodeOf(redelivery);
}

/** Whether a frozen or cut-off owner was fenced (its lease deadline passed) before `beganNs`. */
export function fencedBefore(f: FaultTime, beganNs: number, slackNs: number): boolean {
  return f.fencedByNs !== undefined && beganNs > f.fencedByNs + slackNs;
}

/** Whether a fault striking at some point of its interval can have made the owner forget `ack`. */
export function forgetsAck(f: FaultTime, ack: PairOp, env: PairEnv): boolean {
  // The fault must come after the ack began...
  if (f.compNs + env.slackNs < ack.invNs) return false;
  // ...and an owner frozen or cut off must not have been fenced yet when it began...
  if (fencedBefore(f, ack.invNs, env.slackNs)) return false;
  // ...a failover no later than the replication window after it (the acks had not shipped)...
  if (f.failover === true) return f.invNs <= ack.compNs + env.replicationWindowNs + env.slackNs;
  const lossy = f.kind === "power-loss" || f.lossy === true;
  // ...a follower's crash before the ack, once it reached the follower, was in its OS (kill) or
  // on its disk (power loss): it reaches it within the replication window, or after an outage
  // of the follower or the leader that overlapped, once the follower is joined again...
  if (f.follower !== undefined) {
    let arrivalNs = ack.compNs + env.replicationWindowNs;
    const o = f.follower.outages;
    for (let i = 0; i + 1 < o.length; i += 2) {
      if (o[i]! <= f.invNs && o[i + 1]! + env.slackNs >= ack.invNs) arrivalNs = Math.max(arrivalNs, o[i + 1]! + env.rejoinNs);
    }
    return f.invNs <= arrivalNs + env.ackFlushNs + (lossy ? env.ackSyncNs : 0) + env.slackNs;
  }
  // ...and, for a crash, before the ack reached the OS (kill) or the disk (power loss).
  if (f.kind === "kill" && !lossy) return f.invNs <= ack.compNs + env.ackFlushNs + env.slackNs;
  if (lossy) return f.invNs <= ack.compNs + env.ackSyncNs + env.ackFlushNs + env.slackNs;
  return f.kind === "move";
}

class CapReached extends Error {}

/**
 * The search, with buffers reused from pair to pair (a run has hundreds of thousands of pairs).
 * Fill it with `reset` and `add` (the produce, if any, first; then the rest in invoke order), call
 * `search`, and read each delivery's cause from `causeKind`, `causeFault` and `causeSince`.
 */
export class PairSearch {
  readonly ops: PairOp[] = [];
  n = 0;
  steps = 0;
  /** Per local index, for deliveries of a legal pair: C_*, the fault index, and the local index of
   *  the operation that made the message available (produce, nack, lease start, ack). */
  causeKind = new Int8Array(16);
  causeFault = new Int32Array(16);
  causeSince = new Int32Array(16);
  private placed = new Uint8Array(16);
  private env!: PairEnv;
  private memo: Map<string, number[]> | null = null;

  reset(): void {
    this.n = 0;
  }

  add(op: number, kind: number, mandatory: boolean, invNs: number, compNs: number, handle: number): void {
    const i = this.n++;
    let o = this.ops[i];
    if (o === undefined) {
      o = { op, kind, mandatory, invNs, compNs, handle };
      this.ops.push(o);
    } else {
      o.op = op;
      o.kind = kind;
      o.mandatory = mandatory;
      o.invNs = invNs;
      o.compNs = compNs;
      o.handle = handle;
    }
  }

  /** The current operations as a fresh array (for the rare illegal pair). */
  snapshot(): PairOp[] {
    return this.ops.slice(0, this.n).map((o) => ({ ...o }));
  }

  search(env: PairEnv): SearchStatus {
    const n = this.n;
    if (this.placed.length < n) {
      const cap = Math.max(n, this.placed.length * 2);
      this.placed = new Uint8Array(cap);
      this.causeKind = new Int8Array(cap);
      this.causeFault = new Int32Array(cap);
      this.causeSince = new Int32Array(cap);
    }
    this.placed.fill(0, 0, n);
    this.causeKind.fill(-1, 0, n);
    this.env = env;
    this.memo = null;
    this.steps = 0;
    let mandatoryLeft = 0;
    for (let i = 0; i < n; i++) if (this.ops[i]!.mandatory) mandatoryLeft++;
    try {
      return this.dfs(mandatoryLeft, -Infinity, S_ABSENT, -1, 0, -1, -1, C_FIRST, -1, -1) ? "legal" : "illegal";
    } catch (err) {
      if (err instanceof CapReached) return "cap";
      throw err;
    }
  }

  private dfs(
    left: number,
    cur: number,
    st: number,
    h: number,
    leaseStart: number,
    leaseOp: number,
    ackIdx: number,
    pCause: number,
    pFault: number,
    pSince: number,
  ): boolean {
    if (left === 0) return true;
    const env = this.env;
    if (++this.steps > env.stepsMax) throw new CapReached();
    const n = this.n;
    const ops = this.ops;
    const placed = this.placed;
    if (this.steps > 64) {
      // Dominance memo, used only once a pair proves hard: the same placed set and discrete state
      // reached again with a later clock and a later lease start cannot succeed where the first failed.
      this.memo ??= new Map();
      let key = "";
      for (let i = 0; i < n; i++) key += placed[i] ? "1" : "0";
      key += `|${st}|${h}|${leaseOp}|${ackIdx}|${pCause}|${pFault}`;
      const seen = this.memo.get(key);
      if (seen !== undefined) {
        for (let j = 0; j < seen.length; j += 2) if (seen[j]! <= cur && seen[j + 1]! <= leaseStart) return false;
        seen.push(cur, leaseStart);
      } else this.memo.set(key, [cur, leaseStart]);
    }
    const vt = env.visibilityTimeoutNs;
    const slack = env.slackNs;
    let minComp = Infinity;
    for (let i = 0; i < n; i++) if (!placed[i] && ops[i]!.mandatory && ops[i]!.compNs < minComp) minComp = ops[i]!.compNs;
    for (let i = 0; i < n; i++) {
      if (placed[i]) continue;
      const o = ops[i]!;
      if (o.invNs > minComp) continue;
      let pt = cur > o.invNs ? cur : o.invNs;
      const dec = o.mandatory ? 1 : 0;
      switch (o.kind) {
        case K_PRODUCE: {
          if (st !== S_ABSENT || pt > o.compNs) continue;
          placed[i] = 1;
          if (this.dfs(left - dec, pt, S_PENDING, -1, 0, -1, -1, C_FIRST, -1, i)) return true;
          placed[i] = 0;
          break;
        }
        case K_DELIVER: {
          if (st === S_ABSENT) continue;
          let cause = pCause;
          let fault = pFault;
          let since = pSince;
          if (st === S_LEASED) {
            // The earliest moment the old lease can be gone: its lapse, or a fault on its owner.
            let bound = leaseStart + vt - slack;
            cause = C_LAPSE;
            fault = -1;
            since = leaseOp;
            const enders = env.leaseEnders(ops[h]!.op);
            for (let k = 0; k < enders.length; k++) {
              const f = enders[k]!;
              if (f.compNs + slack >= leaseStart && f.invNs < bound && !fencedBefore(f, leaseStart, slack) && reachesRedelivery(f, ops[h]!.op, o.op, env)) {
                bound = f.invNs;
                cause = C_FAULT;
                fault = f.fault;
              }
            }
            if (bound > pt) pt = bound;
          } else if (st === S_ACKED) {
            let bound = Infinity;
            const ack = ops[ackIdx]!;
            const forgetters = env.ackForgetters(ops[h]!.op);
            for (let k = 0; k < forgetters.length; k++) {
              const f = forgetters[k]!;
              if (f.invNs < bound && forgetsAck(f, ack, env) && reachesRedelivery(f, ops[h]!.op, o.op, env)) {
                bound = f.invNs;
                fault = f.fault;
              }
            }
            if (bound === Infinity) continue;
            if (bound > pt) pt = bound;
            cause = C_FORGET;
            since = ackIdx;
          }
          if (pt > o.compNs || pt > minComp) continue;
          placed[i] = 1;
          this.causeKind[i] = cause;
          this.causeFault[i] = fault;
          this.causeSince[i] = since;
          if (this.dfs(left - 1, pt, S_LEASED, i, pt, i, -1, C_FIRST, -1, -1)) return true;
          this.causeKind[i] = -1;
          placed[i] = 0;
          break;
        }
        case K_ACK:
        case K_EXTEND:
        case K_NACK: {
          if (st !== S_LEASED || o.handle !== h || pt > o.compNs) continue;
          placed[i] = 1;
          let ok: boolean;
          if (o.kind === K_ACK) ok = this.dfs(left - dec, pt, S_ACKED, h, leaseStart, leaseOp, i, C_FIRST, -1, -1);
          else if (o.kind === K_EXTEND) ok = this.dfs(left - dec, pt, S_LEASED, h, pt, i, -1, C_FIRST, -1, -1);
          else ok = this.dfs(left - dec, pt, S_PENDING, -1, 0, -1, -1, C_NACK, -1, i);
          if (ok) return true;
          placed[i] = 0;
          break;
        }
      }
    }
    return false;
  }
}

export interface Classified {
  name: "duplicate-after-ack" | "double-lease" | "no-legal-order";
  /** Local indexes of the operations that show it. */
  local: number[];
  explanation: string;
}

function ms(ns: number): string {
  const v = ns / 1e6;
  return v >= 100 ? `${Math.round(v)} ms` : `${Math.round(v * 10) / 10} ms`;
}

/**
 * Names the anomaly of a pair the search found illegal. `env` must offer every fault that could
 * possibly have happened (evidenced or not): an anomaly is only named when no fault explains it.
 */
export function classifyIllegal(ops: readonly PairOp[], env: PairEnv): Classified {
  const slack = env.slackNs;
  const deliveries: number[] = [];
  for (let i = 0; i < ops.length; i++) if (ops[i]!.kind === K_DELIVER) deliveries.push(i);

  // duplicate-after-ack: delivered again after an ack that answered 204 had completed.
  for (let a = 0; a < ops.length; a++) {
    const ack = ops[a]!;
    if (ack.kind !== K_ACK || !ack.mandatory || ack.handle < 0) continue;
    for (const d of deliveries) {
      if (d === ack.handle) continue;
      const del = ops[d]!;
      if (del.invNs <= ack.compNs) continue;
      let explained = false;
      for (const f of env.ackForgetters(ops[ack.handle]!.op)) {
        if (f.invNs <= del.compNs && forgetsAck(f, ack, env) && reachesRedelivery(f, ops[ack.handle]!.op, del.op, env)) {
          explained = true;
          break;
        }
      }
      if (!explained) {
        return {
          name: "duplicate-after-ack",
          local: [ack.handle, a, d],
          explanation:
            `delivered again ${ms(del.invNs - ack.compNs)} after an ack of an earlier delivery answered 204; ` +
            `no kill within ack_flush_ms, power loss within ack_sync_ms + ack_flush_ms, partition move, failover within the replication window ` +
            `or crash of the redelivering replica while a follower, before the ack reached its disk, explains it`,
        };
      }
    }
  }

  // double-lease: two deliveries whose leases were live at once.
  const leaseCouldEnd = (first: number, second: number): boolean => {
    const d1 = ops[first]!;
    const d2 = ops[second]!;
    if (d1.invNs > d2.compNs) return false; // d1 cannot come first
    let start = d1.invNs;
    for (let i = 0; i < ops.length; i++) {
      const o = ops[i]!;
      if (o.handle !== first || o.kind === K_DELIVER) continue;
      if ((o.kind === K_ACK || o.kind === K_NACK) && o.invNs < d2.compNs) return true;
      if (o.kind === K_EXTEND && o.mandatory && o.compNs < d2.invNs && o.invNs > start) start = o.invNs;
    }
    if (d2.compNs + slack >= start + env.visibilityTimeoutNs) return true;
    for (const f of env.leaseEnders(d1.op)) {
      if (f.compNs + slack >= d1.invNs && f.invNs <= d2.compNs && !fencedBefore(f, d1.invNs, slack) && reachesRedelivery(f, d1.op, d2.op, env)) return true;
    }
    return false;
  };
  for (let x = 0; x < deliveries.length; x++) {
    for (let y = x + 1; y < deliveries.length; y++) {
      const i = deliveries[x]!;
      const j = deliveries[y]!;
      const di = ops[i]!;
      const dj = ops[j]!;
      // A later 204 on the first handle proves it was still live after the second delivery.
      for (const [first, second] of [
        [i, j],
        [j, i],
      ] as const) {
        const d2 = ops[second]!;
        if (ops[first]!.compNs >= d2.invNs) continue;
        for (let k = 0; k < ops.length; k++) {
          const o = ops[k]!;
          if (o.handle === first && o.kind !== K_DELIVER && o.mandatory && o.invNs > d2.compNs) {
            const verb = o.kind === K_ACK ? "ack" : o.kind === K_EXTEND ? "extend" : "nack";
            return {
              name: "double-lease",
              local: [first, second, k],
              explanation: `an ${verb} of the first delivery answered 204 after a second delivery had completed: two live leases at once`,
            };
          }
        }
      }
      if (!leaseCouldEnd(i, j) && !leaseCouldEnd(j, i)) {
        return {
          name: "double-lease",
          local: [i, j],
          explanation:
            `delivered again ${ms(Math.max(0, dj.invNs - di.compNs))} after an earlier delivery, before its lease could lapse ` +
            `(visibility timeout ${ms(env.visibilityTimeoutNs)}), with no ack, nack or fault between`,
        };
      }
    }
  }

  const all: number[] = [];
  for (let i = 0; i < ops.length; i++) all.push(i);
  // A common shape worth naming in the explanation: a redelivery that overlaps a 204 ack of the
  // lease it replaces. Before the ack it needs the lease gone; after it, a forgotten ack.
  for (let a = 0; a < ops.length; a++) {
    const ack = ops[a]!;
    if (ack.kind !== K_ACK || !ack.mandatory || ack.handle < 0) continue;
    for (const d of deliveries) {
      const del = ops[d]!;
      if (d === ack.handle || del.invNs > ack.compNs || del.compNs < ack.invNs) continue;
      const first = ops[ack.handle]!;
      if (del.compNs + slack >= first.invNs + env.visibilityTimeoutNs) continue; // a lapse was possible
      if (env.leaseEnders(first.op).some((f) => f.invNs <= del.compNs && f.compNs + slack >= first.invNs && !fencedBefore(f, first.invNs, slack) && reachesRedelivery(f, first.op, del.op, env))) continue;
      if (env.ackForgetters(first.op).some((f) => f.invNs <= del.compNs && forgetsAck(f, ack, env) && reachesRedelivery(f, first.op, del.op, env))) continue;
      return {
        name: "no-legal-order",
        local: all,
        explanation:
          "delivered again while a 204 ack of the earlier delivery was in flight: before the ack the earlier lease was still live, " +
          "after it the message was settled, and no lapse or fault explains either order",
      };
    }
  }
  return { name: "no-legal-order", local: all, explanation: "no order of these operations consistent with real time is legal" };
}
