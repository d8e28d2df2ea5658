// Faults: their evidence, their windows, and which of them may explain what.
//
// Evidence (SPEC "Checker verdicts"): a kill, power-loss, terminate or start of node N is believed
// only if, after the fault was invoked, N reports a boot id other than the last one it reported
// before (in a start's ok value or a delivery's `boot`). The collector keeps, per node, only the
// moments the reported boot changed, so "a different boot after the fault" is "a change at or after
// the fault's invoke".
//
// Who a fault can touch: a process fault of node N touches the leases held, and the acks recorded,
// by N (a delivery's `node` is the owner that leased it); a fault that names no node may touch any.
// A move touches the partition it names (any, when it names none).
//
// What it can explain:
//   - a lease ended early: kill, power-loss, terminate, move (leases live in the owner's memory);
//   - an ack forgotten: kill within ack_flush_ms after the ack, power-loss within
//     ack_sync_ms + ack_flush_ms, a move after the ack began (each window plus the slack).
//     A terminate flushes and syncs everything, so it forgets nothing.
//   - on a replicated topic (replication_factor above 1 in the config), a failover: a kill,
//     power loss, pause or cut of the lease's owner, when the redelivery was made by another
//     owner (pair.ts, `reachesRedelivery`). It ends the old owner's leases, and it explains a
//     forgotten ack within the replication window (ack_flush_ms + replication_lag_ms): acks ship
//     to the followers on the ack log's schedule, so the new leader may lack the last of them. A
//     pause or a cut lasts until its resume or heal: the old owner may take acks and hand out
//     leases until then that never reach the new leader; when the config gives node_lease_ms,
//     only until its lease deadline (the fault's completion plus the lease): a lease or an ack
//     begun after it was taken by a node that should have been fenced, and is not explained.
//   - on a replicated topic, a crash (kill, power loss) of a follower that later leads and
//     redelivers: acks reach a follower on the ack log's schedule and wait in its memory for its
//     own flush (and, for a power loss, fsync); a follower that crashed before then lost them for
//     good (nothing ships an ack twice), however long before the failover that made it lead.
//     Window: the ack's arrival (within the replication window after it, or, when an outage of
//     the follower or of the lease's owner overlapped, within replication_rejoin_ms after that
//     outage ended) plus ack_flush_ms, plus ack_sync_ms for a power loss (pair.ts `forgetsAck`).
//   A kill whose ok value says power_loss_mode (a node in the test-only power-loss mode) counts
//   as a power loss for the window: it lost the unsynced writes too.

import { O_FAIL, O_OK, type RunData } from "./collect.js";
import type { FaultTime } from "./pair.js";
import { lowerBound } from "./findings.js";
import { FAULT_KINDS_NEEDING_EVIDENCE, type FaultKind } from "../history/types.js";

const NEEDS_EVIDENCE: ReadonlySet<FaultKind> = new Set(FAULT_KINDS_NEEDING_EVIDENCE);
const ENDS_LEASES: ReadonlySet<FaultKind> = new Set(["kill", "power-loss", "terminate", "move"]);
const FORGETS_ACKS: ReadonlySet<FaultKind> = new Set(["kill", "power-loss", "move"]);
/** Faults of a replicated partition's leader that may hand the partition to another owner. */
const FAILS_OVER: ReadonlySet<FaultKind> = new Set(["kill", "power-loss", "pause", "cut"]);
/** Faults during which acks cannot reach a follower (it is down, frozen or cut off), until their end. */
const HOLDS_ACKS: ReadonlySet<FaultKind> = new Set(["kill", "power-loss", "terminate", "pause", "cut"]);

export interface FaultInfo {
  /** Index into RunData.faults. */
  fault: number;
  op: number;
  kind: FaultKind;
  node: number;
  /** Did not fail: it may have happened. */
  mayHaveHappened: boolean;
  needsEvidence: boolean;
  evidence: boolean;
  evidenceOp: number;
  /** The op that ended its effect (start, resume, heal), -1 if none; the fault's own for a move. */
  endOp: number;
  /** When its effect ended; Infinity when it never did within the history. */
  endNs: number;
  time: FaultTime;
}


/** First boot change of `node` (any node when -1) at or after `timeNs`: the reporting op, or -1. */
function bootChangeAfter(run: RunData, node: number, timeNs: number): number {
  let best = -1;
  let bestNs = Infinity;
  const look = (track: { timesNs: number[]; ops: number[] }): void => {
    const i = lowerBound(track.timesNs, timeNs);
    if (i < track.timesNs.length && track.timesNs[i]! < bestNs) {
      bestNs = track.timesNs[i]!;
      best = track.ops[i]!;
    }
  };
  if (node >= 0) {
    const track = run.bootTracks.get(node);
    if (track) look(track);
  } else {
    for (const track of run.bootTracks.values()) look(track);
  }
  return best;
}

/** The kinds that end a fault's effect, for the silence measure and the report's shading. */
function endsEffectOf(kind: FaultKind): FaultKind | null {
  switch (kind) {
    case "kill":
    case "terminate":
    case "power-loss":
      return "start";
    case "pause":
      return "resume";
    case "cut":
    case "latency":
      return "heal";
    default:
      return null;
  }
}

export function analyseFaults(run: RunData): FaultInfo[] {
  const ops = run.ops;
  const out: FaultInfo[] = [];
  for (let fi = 0; fi < run.faults.length; fi++) {
    const fr = run.faults[fi]!;
    const op = fr.op;
    const outcome = ops.outcome[op]!;
    const invNs = ops.invNs[op]!;
    const compNs = outcome === O_OK ? ops.compNs[op]! : Infinity;
    const needsEvidence = NEEDS_EVIDENCE.has(fr.kind) && outcome !== O_FAIL;
    const evidenceOp = NEEDS_EVIDENCE.has(fr.kind) ? bootChangeAfter(run, fr.node, invNs) : -1;
    out.push({
      fault: fi,
      op,
      kind: fr.kind,
      node: fr.node,
      mayHaveHappened: outcome !== O_FAIL,
      needsEvidence,
      evidence: evidenceOp >= 0,
      evidenceOp,
      endOp: -1,
      endNs: Infinity,
      time: { fault: fi, kind: fr.kind, invNs, compNs, ...(fr.lossy && fr.kind === "kill" ? { lossy: true } : {}) },
    });
  }
  // Windows: each disrupting fault lasts until the next op of the matching kind on the same node.
  for (const f of out) {
    if (f.kind === "move") {
      f.endOp = f.op;
      f.endNs = ops.outcome[f.op] === O_OK ? ops.compNs[f.op]! : Infinity;
      continue;
    }
    const ender = endsEffectOf(f.kind);
    if (ender === null) continue;
    for (const g of out) {
      if (g.op <= f.op || g.kind !== ender || !g.mayHaveHappened) continue;
      if (g.node !== f.node && g.node >= 0 && f.node >= 0) continue;
      f.endOp = g.op;
      f.endNs = ops.outcome[g.op] === O_OK ? ops.compNs[g.op]! : Infinity;
      break;
    }
  }
  return out;
}

/**
 * The fault lookups of the per-pair search. `usable` says which faults may be used: the
 * evidenced ones (first pass) or every one that did not fail (second pass).
 */
export class FaultIndex {
  private readonly enders: FaultInfo[];
  private readonly forgetters: FaultInfo[];
  /** Failover entries (pair.ts FaultTime.failover), for deliveries on replicated topics. */
  private readonly failovers: { info: FaultInfo; time: FaultTime }[];
  /** Crashes of nodes, for the follower rule on replicated topics. */
  private readonly crashes: FaultInfo[];
  /** Outages (HOLDS_ACKS) that may have happened, for the follower rule's late arrivals. */
  private readonly outages: FaultInfo[];
  private readonly replicated: Uint8Array;
  private readonly run: RunData;
  private readonly cacheEnders = new Map<string, FaultTime[]>();
  private readonly cacheForgetters = new Map<string, FaultTime[]>();

  constructor(run: RunData, faults: readonly FaultInfo[], usable: (f: FaultInfo) => boolean) {
    this.run = run;
    this.enders = faults.filter((f) => f.mayHaveHappened && usable(f) && ENDS_LEASES.has(f.kind));
    this.forgetters = faults.filter((f) => f.mayHaveHappened && usable(f) && FORGETS_ACKS.has(f.kind));
    this.replicated = new Uint8Array(run.topics.size);
    for (const [name, t] of Object.entries(run.config.topics)) if ((t.replication_factor ?? 1) > 1) this.replicated[run.topics.find(name)] = 1;
    // A pause or cut acts until it ends (resume, heal): its failover entry's compNs is that end.
    // With the nodes' lease in the config, the frozen or cut-off owner stopped acknowledging by
    // its lease deadline, no later than the lease after the fault took hold: only leases and
    // acks begun before then are its to forget (fencedByNs).
    const leaseMs = run.config.node_lease_ms;
    const fencedBy = (f: FaultInfo): { fencedByNs?: number } =>
      typeof leaseMs === "number" && (f.kind === "pause" || f.kind === "cut") && Number.isFinite(f.time.compNs) ? { fencedByNs: f.time.compNs + leaseMs * 1e6 } : {};
    this.failovers = this.replicated.includes(1)
      ? faults
          .filter((f) => f.mayHaveHappened && usable(f) && FAILS_OVER.has(f.kind))
          .map((f) => ({ info: f, time: { ...f.time, compNs: f.kind === "pause" || f.kind === "cut" ? f.endNs : f.time.compNs, failover: true, ...fencedBy(f) } }))
      : [];
    const anyReplicated = this.replicated.includes(1);
    this.crashes = anyReplicated ? faults.filter((f) => f.mayHaveHappened && usable(f) && f.node >= 0 && (f.kind === "kill" || f.kind === "power-loss")) : [];
    this.outages = anyReplicated ? faults.filter((f) => f.mayHaveHappened && HOLDS_ACKS.has(f.kind)) : [];
  }

  get empty(): boolean {
    return this.enders.length === 0 && this.forgetters.length === 0 && this.failovers.length === 0;
  }

  leaseEnders(deliveryOp: number): readonly FaultTime[] {
    return this.lookup(this.enders, this.cacheEnders, deliveryOp, true);
  }

  ackForgetters(deliveryOp: number): readonly FaultTime[] {
    return this.lookup(this.forgetters, this.cacheForgetters, deliveryOp, false);
  }

  private lookup(list: FaultInfo[], cache: Map<string, FaultTime[]>, deliveryOp: number, ending: boolean): readonly FaultTime[] {
    const ops = this.run.ops;
    const failovers = this.replicated[ops.topic[deliveryOp]!] === 1 ? this.failovers : [];
    if (list.length === 0 && failovers.length === 0) return NONE;
    const node = ops.node[deliveryOp]!;
    const topic = ops.topic[deliveryOp]!;
    const partition = ops.partition[deliveryOp]!;
    const key = `${node}|${topic}|${partition}`;
    let hit = cache.get(key);
    if (hit !== undefined) return hit;
    hit = [];
    for (const f of list) {
      if (f.kind === "move") {
        const fr = this.run.faults[f.fault]!;
        if (fr.topic >= 0 && fr.topic !== topic) continue;
        if (fr.partition >= 0 && fr.partition !== partition) continue;
      } else if (f.node >= 0 && f.node !== node) continue;
      hit.push(f.time);
    }
    for (const { info, time } of failovers) {
      // A kill or power loss already ends every lease of its node; its failover entry adds the
      // replication window for a forgotten ack.
      if (ending && (info.kind === "kill" || info.kind === "power-loss")) continue;
      if (info.node >= 0 && info.node !== node) continue;
      hit.push(time);
    }
    // A follower's crash: an ack taken by this delivery's owner `node` may be lost by another
    // node, which redelivers once it leads (reachesRedelivery checks who redelivered).
    if (!ending && failovers.length > 0) {
      for (const c of this.crashes) {
        if (c.node === node) continue;
        const outages: number[] = [];
        for (const o of this.outages) {
          if (o.node >= 0 && o.node !== c.node && o.node !== node) continue;
          // Only an outage over before the crash delays an ack that the crash then loses: during
          // one still under way the ack had not reached the follower at all.
          if (o === c || o.time.invNs > c.time.invNs || o.endNs > c.time.invNs) continue;
          outages.push(o.time.invNs, o.endNs);
        }
        hit.push({ ...c.time, follower: { node: c.node, outages } });
      }
    }
    cache.set(key, hit);
    return hit;
  }
}

const NONE: readonly FaultTime[] = [];
