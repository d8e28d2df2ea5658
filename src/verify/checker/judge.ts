// From collected columns to a verdict: pairs, the per-pair judgement, replays, and the measures.
//
// Steps, each linear in the history (the per-pair search is bounded by a step cap):
//   1. faults: evidence and windows (faults.ts);
//   2. pairs: every (message, path) a produce owes (its topic and the topic's children from the
//      config) plus every (message, topic) a delivery or an ack names; the operations of each pair
//      are gathered into one flat array (counting sort by pair, op order kept);
//   3. per pair: unexpected / misrouted / refused-delivered / early-delivery by direct tests, then
//      the exact search (pair.ts) with the evidenced faults, then with every fault (a pair legal only
//      thanks to an unevidenced fault is `unknown`), then lost and stranded against the final drain.
//      On a child path whose deliveries show several copies (offsets), each copy is first searched
//      on its own, every extra copy explained by a fault that makes the copier copy again
//      (recopy.ts); failing that, the pair is searched as one record;
//   4. replays: skip and nonmonotonic;
//   5. measures: redeliveries by cause, lag, silence after each fault, counts and time series.
//
// Pure: RunData in, Report out.

import {
  F_ACK,
  F_CONSUME,
  F_EXTEND,
  F_NACK,
  F_PRODUCE,
  O_FAIL,
  O_INFO,
  O_OK,
  O_OPEN,
  F_REPLAY,
  type ReplayRec,
  type RunData,
} from "./collect.js";
import { analyseFaults, FaultIndex, type FaultInfo } from "./faults.js";
import { copiesAgain, planRecopies, RECOPY_COPIES_MAX, type CopyView, type RecopyFault } from "./recopy.js";
import {
  C_FIRST,
  C_FORGET,
  C_RECOPY,
  C_LAPSE,
  C_NACK,
  classifyIllegal,
  K_ACK,
  K_DELIVER,
  K_EXTEND,
  K_NACK,
  K_PRODUCE,
  PairSearch,
  type PairEnv,
  type SearchStatus,
} from "./pair.js";
import { buildMeasures, type PairTimes } from "./measures.js";
import type {
  Anomaly,
  AnomalyName,
  CheckOptions,
  ExplainedDuplicate,
  ExplainedRecopy,
  FaultSummary,
  Report,
  Unknown,
  UnknownReason,
  Verdict,
} from "./types.js";

export const SLACK_MS_DEFAULT = 50;
export const SEARCH_STEPS_MAX_DEFAULT = 20_000;
export const LIST_MAX_DEFAULT = 1000;

const MS = 1e6;

/** Collects findings with exact counts and capped lists. */
class Findings {
  anomalies: Anomaly[] = [];
  anomalyCounts: Partial<Record<AnomalyName, number>> = {};
  anomaliesOmitted = 0;
  unknowns: Unknown[] = [];
  unknownCounts: Partial<Record<UnknownReason, number>> = {};
  unknownsOmitted = 0;
  constructor(private readonly listMax: number) {}

  anomaly(a: Anomaly): void {
    this.anomalyCounts[a.name] = (this.anomalyCounts[a.name] ?? 0) + 1;
    if (this.anomalies.length < this.listMax) this.anomalies.push(a);
    else this.anomaliesOmitted++;
  }
  unknown(u: Unknown): void {
    this.unknownCounts[u.reason] = (this.unknownCounts[u.reason] ?? 0) + 1;
    if (this.unknowns.length < this.listMax) this.unknowns.push(u);
    else this.unknownsOmitted++;
  }
}

function fmtMs(ns: number): string {
  const v = ns / MS;
  if (!Number.isFinite(v)) return "never";
  return v >= 100 ? `${Math.round(v)} ms` : `${Math.round(v * 10) / 10} ms`;
}

function sortedUnique(a: number[]): number[] {
  const s = Array.from(new Set(a)).sort((x, y) => x - y);
  return s;
}

export function judge(run: RunData, options: CheckOptions = {}): Report {
  const slackMs = options.slackMs ?? SLACK_MS_DEFAULT;
  const slackNs = slackMs * MS;
  const stepsMax = options.searchStepsMax ?? SEARCH_STEPS_MAX_DEFAULT;
  const listMax = options.listMax ?? LIST_MAX_DEFAULT;
  const cfg = run.config;
  const ops = run.ops;
  const nOps = ops.length;
  const findings = new Findings(listMax);
  const idx = (op: number): number => ops.invIdx[op]!;
  const opsList = (local: number[]): number[] => sortedUnique(local.map(idx));

  // ---- config: per-topic visibility timeout, children, delays (the collector interned its topics) ----
  const children = cfg.children ?? {};
  const nTopics = run.topics.size;
  const vtNs = new Float64Array(nTopics).fill(cfg.visibility_timeout_ms * MS);
  for (const [name, t] of Object.entries(cfg.topics)) {
    if (t.visibility_timeout_ms !== undefined) vtNs[run.topics.find(name)] = t.visibility_timeout_ms * MS;
  }
  const delayNs = new Float64Array(nTopics);
  const childrenOf: number[][] = Array.from({ length: nTopics }, () => []);
  /** Per child topic: its parent (-1 for a topic that is no child), and the remote cluster's nodes it lists. */
  const parentOf = new Int32Array(nTopics).fill(-1);
  const viaNodesOf: number[][] = Array.from({ length: nTopics }, () => []);
  /** Per child path: how long its copier may wait for a copy's answer (the path's copy_timeout_ms, else the config's, else ack_flush_ms). */
  const answerNsOf = new Float64Array(nTopics).fill((cfg.copy_timeout_ms ?? cfg.ack_flush_ms) * MS);
  const splitBatches = new Uint8Array(nTopics);
  for (const [parent, list] of Object.entries(children)) {
    const p = run.topics.find(parent);
    for (const c of list) {
      const t = run.topics.find(c.topic);
      childrenOf[p]!.push(t);
      parentOf[t] = p;
      if (c.kind === "delay") delayNs[t] = (c.delay_ms ?? 0) * MS;
      for (const n of c.nodes ?? []) viaNodesOf[t]!.push(run.nodes.find(n));
      if (c.copy_timeout_ms !== undefined) answerNsOf[t] = c.copy_timeout_ms * MS;
      // A copy batch may go to several owners of the child's partitions, except for a replica.
      if (c.kind !== "replica") splitBatches[t] = 1;
    }
  }
  // For those children, every node that delivered on the path owns (owned) a partition of it.
  for (let op = 0; op < ops.length; op++) {
    if (ops.f[op] !== F_CONSUME || ops.outcome[op] !== O_OK || ops.msg[op]! < 0) continue;
    const t = ops.topic[op]!;
    if (parentOf[t] >= 0 && splitBatches[t] && !viaNodesOf[t]!.includes(ops.node[op]!)) viaNodesOf[t]!.push(ops.node[op]!);
  }

  // ---- faults ----
  const faults = analyseFaults(run);
  const evidencedIndex = new FaultIndex(run, faults, (f) => !f.needsEvidence || f.evidence);
  const allIndex = new FaultIndex(run, faults, () => true);
  const unevidenced = faults.filter((f) => f.needsEvidence && !f.evidence);
  for (const f of unevidenced) {
    const node = f.node >= 0 ? run.nodes.name(f.node) : "its node";
    findings.unknown({
      reason: "unevidenced-fault",
      msg: null,
      path: null,
      ops: [idx(f.op)],
      explanation: `${f.kind} of ${node}: no later boot id other than the one before it was reported, so the fault may not have happened`,
    });
  }
  const faultRedeliveries = new Int32Array(faults.length);
  // Faults that may make a copier copy again, as the re-copy rule sees them (recopy.ts).
  const recopyFaultOf = (f: FaultInfo): RecopyFault => ({ fault: f.fault, kind: f.kind, node: f.node, invNs: f.time.invNs, compNs: f.time.compNs });
  const recopyEvidenced = faults.filter((f) => f.mayHaveHappened && copiesAgain(f.kind) && (!f.needsEvidence || f.evidence)).map(recopyFaultOf);
  const recopyAll = faults.filter((f) => f.mayHaveHappened && copiesAgain(f.kind)).map(recopyFaultOf);

  // ---- messages: their produces and earliest delivery anywhere ----
  const nMsgs = run.msgs.size;
  const msgProduce = new Int32Array(nMsgs).fill(-1);
  const msgProduceCount = new Int32Array(nMsgs);
  const msgFirstDeliveryNs = new Float64Array(nMsgs).fill(Infinity);
  let deliveriesTotal = 0;
  const multiProduces = new Map<number, number[]>();
  for (let op = 0; op < nOps; op++) {
    const f = ops.f[op]!;
    if (f === F_PRODUCE) {
      const m = ops.msg[op]!;
      if (msgProduce[m] === -1) msgProduce[m] = op;
      else {
        let l = multiProduces.get(m);
        if (l === undefined) multiProduces.set(m, (l = [msgProduce[m]!]));
        l.push(op);
      }
      msgProduceCount[m]!++;
    } else if (f === F_CONSUME && ops.outcome[op] === O_OK && ops.msg[op]! >= 0) {
      deliveriesTotal++;
      const m = ops.msg[op]!;
      if (ops.compNs[op]! < msgFirstDeliveryNs[m]!) msgFirstDeliveryNs[m] = ops.compNs[op]!;
    }
  }

  // ---- pairs: a linked list of pairs per message (a message has few paths) ----
  let pairCap = Math.max(1024, nMsgs * 2);
  let pairMsg = new Int32Array(pairCap);
  let pairTopic = new Int32Array(pairCap);
  let pairNext = new Int32Array(pairCap);
  let pairOwed = new Uint8Array(pairCap);
  let nPairs = 0;
  const msgFirstPair = new Int32Array(nMsgs).fill(-1);
  const pairOf = (m: number, t: number): number => {
    for (let p = msgFirstPair[m]!; p >= 0; p = pairNext[p]!) if (pairTopic[p] === t) return p;
    if (nPairs === pairCap) {
      pairCap *= 2;
      const g = <T extends Int32Array | Uint8Array>(a: T, ctor: new (n: number) => T): T => {
        const b = new ctor(pairCap);
        b.set(a);
        return b;
      };
      pairMsg = g(pairMsg, Int32Array);
      pairTopic = g(pairTopic, Int32Array);
      pairNext = g(pairNext, Int32Array);
      pairOwed = g(pairOwed, Uint8Array);
    }
    const p = nPairs++;
    pairMsg[p] = m;
    pairTopic[p] = t;
    pairNext[p] = msgFirstPair[m]!;
    pairOwed[p] = 0;
    msgFirstPair[m] = p;
    return p;
  };
  for (let op = 0; op < nOps; op++) {
    if (ops.f[op] !== F_PRODUCE) continue;
    const m = ops.msg[op]!;
    const t = ops.topic[op]!;
    // pairOf may grow the arrays: take the index before naming the array.
    const own = pairOf(m, t);
    pairOwed[own] = 1;
    for (const c of childrenOf[t]!) {
      const child = pairOf(m, c);
      pairOwed[child] = 1;
    }
  }
  // Operations per pair, as a flat array ordered by pair then op (counting sort).
  const opPair = new Int32Array(nOps).fill(-1);
  for (let op = 0; op < nOps; op++) {
    const f = ops.f[op]!;
    if (f === F_CONSUME) {
      if (ops.outcome[op] === O_OK && ops.msg[op]! >= 0) opPair[op] = pairOf(ops.msg[op]!, ops.topic[op]!);
    } else if (f === F_ACK || f === F_EXTEND || f === F_NACK) {
      opPair[op] = pairOf(ops.msg[op]!, ops.topic[op]!);
    }
  }
  const pairStart = new Int32Array(nPairs + 1);
  for (let op = 0; op < nOps; op++) if (opPair[op]! >= 0) pairStart[opPair[op]! + 1]!++;
  for (let p = 0; p < nPairs; p++) pairStart[p + 1]! += pairStart[p]!;
  const pairOps = new Int32Array(pairStart[nPairs]!);
  {
    const fill = pairStart.slice(0, nPairs);
    for (let op = 0; op < nOps; op++) {
      const p = opPair[op]!;
      if (p >= 0) pairOps[fill[p]!++] = op;
    }
  }

  // ---- paths: final drain and ambiguous consumes near it ----
  const drainOp = new Int32Array(nTopics).fill(-1);
  for (let op = 0; op < nOps; op++) {
    if (ops.f[op] !== F_CONSUME || ops.outcome[op] !== O_OK || ops.msg[op] !== -1) continue;
    const t = ops.topic[op]!;
    const d = drainOp[t]!;
    if (d < 0 || ops.invNs[op]! >= ops.invNs[d]!) drainOp[t] = op;
  }
  // The latest possible lease start of an ambiguous consume whose lease may outlive the drain's start.
  const ambiguousLeaseNs = new Float64Array(nTopics).fill(-Infinity);
  const ambiguousLeaseOp = new Int32Array(nTopics).fill(-1);
  for (let op = 0; op < nOps; op++) {
    if (ops.f[op] !== F_CONSUME) continue;
    const o = ops.outcome[op]!;
    if (o !== O_INFO && o !== O_OPEN) continue;
    const t = ops.topic[op]!;
    const d = drainOp[t]!;
    if (d < 0 || ops.invNs[op]! >= ops.compNs[d]!) continue;
    const latestLease = Math.min(ops.compNs[op]!, ops.compNs[d]!);
    if (latestLease + vtNs[t]! + slackNs > ops.invNs[d]! && latestLease > ambiguousLeaseNs[t]!) {
      ambiguousLeaseNs[t] = latestLease;
      ambiguousLeaseOp[t] = op;
    }
  }

  // ---- per-pair judgement ----
  const lagMs = new Float32Array(nOps).fill(NaN);
  const lagSince = new Uint8Array(nOps);
  let redeliveryTotal = 0;
  const byCause = { lapse: 0, nack: 0, fault: 0 };
  const explained: ExplainedDuplicate[] = [];
  let explainedTotal = 0;
  const recopies: ExplainedRecopy[] = [];
  let recopiesTotal = 0;
  let pairsLegal = 0;
  let pairsInvalid = 0;
  let pairsUnknown = 0;
  let capHits = 0;
  let stepsMostInOnePair = 0;
  const settleNs = new Float64Array(nPairs).fill(Infinity);
  const availableNs = new Float64Array(nPairs).fill(Infinity);

  // One search environment per path and fault set, made once (not per pair).
  const envFor = (index: FaultIndex, t: number): PairEnv => ({
    slackNs,
    visibilityTimeoutNs: vtNs[t]!,
    ackFlushNs: cfg.ack_flush_ms * MS,
    ackSyncNs: cfg.ack_sync_ms * MS,
    stepsMax,
    leaseEnders: (d) => index.leaseEnders(d),
    ackForgetters: (d) => index.ackForgetters(d),
  });
  const envEvidenced: PairEnv[] = [];
  const envAll: PairEnv[] = [];
  for (let t = 0; t < nTopics; t++) {
    envEvidenced.push(envFor(evidencedIndex, t));
    envAll.push(envFor(allIndex, t));
  }

  // The pair being judged, shared by the helpers below so the loop allocates nothing per pair.
  let curMsg = -1;
  let curTopic = -1;
  let curPair = -1;
  let curInvalid = false;
  let curUnknown = false;
  const anomaly = (name: AnomalyName, opRows: number[], explanation: string): void => {
    curInvalid = true;
    findings.anomaly({ name, msg: run.msgs.name(curMsg), path: run.topics.name(curTopic), ops: opsList(opRows), explanation });
  };
  const unknownPair = (reason: UnknownReason, opRows: number[], explanation: string): void => {
    curUnknown = true;
    findings.unknown({ reason, msg: run.msgs.name(curMsg), path: run.topics.name(curTopic), ops: opsList(opRows), explanation });
  };
  const owes = (produceOp: number, t: number): boolean => {
    const pt = ops.topic[produceOp]!;
    return pt === t || childrenOf[pt]!.includes(t);
  };

  const search = new PairSearch();
  /**
   * The parent partition's owner for the re-copy rule: the node the produce's ok names, else the
   * nodes that delivered the message on the produce's topic (the owners of its partition).
   */
  const parentOwnersOf = (produce: number): number[] => {
    if (ops.outcome[produce] === O_OK && ops.node[produce]! >= 0) return [ops.node[produce]!];
    const m = ops.msg[produce]!;
    const t = ops.topic[produce]!;
    const owners: number[] = [];
    for (let p = msgFirstPair[m]!; p >= 0; p = pairNext[p]!) {
      if (pairTopic[p] !== t) continue;
      for (let i = pairStart[p]!; i < pairStart[p + 1]!; i++) {
        const op = pairOps[i]!;
        if (ops.f[op] === F_CONSUME && ops.node[op]! >= 0 && !owners.includes(ops.node[op]!)) owners.push(ops.node[op]!);
      }
    }
    return owners;
  };
  const searchRows = (): number[] => search.snapshot().map((o) => o.op);
  // The produce, delay and timeout of the pair being searched (for recordCause and the copies).
  let curProduce = -1;
  let curDelay = 0;
  let curVt = 0;

  /**
   * Fills `s` with the pair's search operations: the produce, then the pair's operations in invoke
   * order; with `copy` >= 0 only those of that copy (copyOfOp, from groupCopies).
   */
  const fillSearch = (s: PairSearch, a0: number, a1: number, copy: number): void => {
    s.reset();
    const produce = curProduce;
    const po = ops.outcome[produce]!;
    s.add(produce, K_PRODUCE, po === O_OK, ops.invNs[produce]!, po === O_OK ? ops.compNs[produce]! : Infinity, -1);
    for (let k = a0; k < a1; k++) {
      if (copy >= 0 && copyOfOp[k - a0] !== copy) continue;
      const op = pairOps[k]!;
      const f = ops.f[op]!;
      const o = ops.outcome[op]!;
      if (o === O_FAIL) continue;
      if (f === F_CONSUME) {
        s.add(op, K_DELIVER, true, ops.invNs[op]!, ops.compNs[op]!, s.n);
        continue;
      }
      let handle = -1;
      const dId = ops.delivery[op]!;
      for (let j = 1; j < s.n; j++) {
        const x = s.ops[j]!;
        if (x.kind === K_DELIVER && ops.delivery[x.op] === dId) {
          handle = j;
          break;
        }
      }
      // Unknown handles: a 204 cannot be explained; an ambiguous answer changes nothing.
      if (handle < 0 && o !== O_OK) continue;
      const bounded = o === O_OK || (o === O_INFO && ops.status[op] === 410);
      s.add(op, f === F_ACK ? K_ACK : f === F_EXTEND ? K_EXTEND : K_NACK, o === O_OK, ops.invNs[op]!, bounded ? ops.compNs[op]! : Infinity, handle);
    }
  };

  /** Counts one delivery's cause (redeliveries, explained duplicates and re-copies) and its lag. */
  const recordCause = (d: number, cause: number, fault: number, sinceOp: number): void => {
    let sinceNs = NaN;
    let since = 0;
    if (cause === C_FIRST) {
      if (ops.outcome[curProduce] === O_OK) sinceNs = ops.compNs[curProduce]! + curDelay;
      since = 1;
    } else {
      redeliveryTotal++;
      if (cause === C_LAPSE) {
        byCause.lapse++;
        sinceNs = ops.compNs[sinceOp]! + curVt;
        since = 3;
      } else if (cause === C_NACK) {
        byCause.nack++;
        sinceNs = ops.compNs[sinceOp]!;
        since = 2;
      } else {
        byCause.fault++;
        faultRedeliveries[fault]!++;
        const fi = faults[fault]!;
        sinceNs = Number.isFinite(fi.endNs) ? fi.endNs : fi.time.compNs;
        since = 4;
        if (cause === C_FORGET) {
          explainedTotal++;
          if (explained.length < listMax) {
            explained.push({ msg: run.msgs.name(curMsg), path: run.topics.name(curTopic), deliveryOp: idx(d), ackOp: idx(sinceOp), faultOp: idx(fi.op) });
          }
        } else if (cause === C_RECOPY) {
          recopiesTotal++;
          if (recopies.length < listMax) {
            recopies.push({ msg: run.msgs.name(curMsg), path: run.topics.name(curTopic), deliveryOp: idx(d), sourceOp: idx(sinceOp), faultOp: idx(fi.op) });
          }
        }
      }
    }
    if (Number.isFinite(sinceNs)) {
      lagMs[d] = Math.max(0, ops.compNs[d]! - sinceNs) / MS;
      lagSince[d] = since;
    }
  };

  // The copies of the pair being judged (child paths): per copy its partition, offset, first
  // delivery (op, completion, node); per pair operation its copy (-1: none).
  const copyPartition: number[] = [];
  const copyOffset: number[] = [];
  const copyFirstOp: number[] = [];
  const copyViews: CopyView[] = [];
  const copyOfOp: number[] = [];
  /** Causes found by judgeCopies, four numbers each (delivery op, cause, fault, since op). */
  const copyCauses: number[] = [];
  const copySearch = new PairSearch();
  let copyStepsMax = 0;

  /** Groups the pair's deliveries by (partition, offset): true when there are several copies to judge one by one. */
  const groupCopies = (a0: number, a1: number): boolean => {
    copyPartition.length = 0;
    copyOffset.length = 0;
    copyFirstOp.length = 0;
    copyViews.length = 0;
    copyOfOp.length = 0;
    for (let k = a0; k < a1; k++) {
      const op = pairOps[k]!;
      copyOfOp.push(-1);
      if (ops.f[op] !== F_CONSUME) continue;
      let c = 0;
      while (c < copyPartition.length && !(copyPartition[c] === ops.partition[op] && copyOffset[c] === ops.offset[op])) c++;
      if (c === copyPartition.length) {
        copyPartition.push(ops.partition[op]!);
        copyOffset.push(ops.offset[op]!);
        copyFirstOp.push(op);
        copyViews.push({ partition: ops.partition[op]!, offset: ops.offset[op]!, firstDeliveryNs: ops.compNs[op]!, node: ops.node[op]! });
      } else if (ops.compNs[op]! < copyViews[c]!.firstDeliveryNs) {
        copyFirstOp[c] = op;
        copyViews[c] = { partition: ops.partition[op]!, offset: ops.offset[op]!, firstDeliveryNs: ops.compNs[op]!, node: ops.node[op]! };
      }
      copyOfOp[k - a0] = c;
    }
    if (copyPartition.length < 2 || copyPartition.length > RECOPY_COPIES_MAX) return false;
    // Acks, extends and nacks go with the copy whose delivery they name.
    for (let k = a0; k < a1; k++) {
      const op = pairOps[k]!;
      if (ops.f[op] === F_CONSUME || ops.outcome[op] === O_FAIL) continue;
      for (let j = a0; j < a1; j++) {
        if (ops.f[pairOps[j]!] === F_CONSUME && ops.delivery[pairOps[j]!] === ops.delivery[op]) {
          copyOfOp[k - a0] = copyOfOp[j - a0]!;
          break;
        }
      }
      // A 204 for a delivery nobody saw fits no copy: leave the pair to the one-record search.
      if (copyOfOp[k - a0] === -1 && ops.outcome[op] === O_OK) return false;
    }
    return true;
  };

  /**
   * Whether every copy but one is explained as a re-copy by a distinct fault of `candidates`
   * ("no-plan" when not), and then whether every copy has a legal order on its own: "legal"
   * (the causes are left in copyCauses), or "illegal-copy" (copySearch holds the copy that has
   * none, so the anomaly is named from that copy's own operations).
   */
  const judgeCopies = (candidates: readonly RecopyFault[], env: PairEnv): "legal" | "no-plan" | "illegal-copy" => {
    copyCauses.length = 0;
    const plan = planRecopies(copyViews, candidates, {
      slackNs,
      ackFlushNs: cfg.ack_flush_ms * MS,
      ackSyncNs: cfg.ack_sync_ms * MS,
      produceInvNs: ops.invNs[curProduce]!,
      parentOwners: parentOwnersOf(curProduce),
      viaNodes: viaNodesOf[curTopic]!,
      answerNs: answerNsOf[curTopic]!,
    });
    if (plan === null) return "no-plan";
    const a0 = pairStart[curPair]!;
    const a1 = pairStart[curPair + 1]!;
    for (let c = 0; c < copyViews.length; c++) {
      fillSearch(copySearch, a0, a1, c);
      const st = copySearch.search(env);
      copyStepsMax = Math.max(copyStepsMax, copySearch.steps);
      if (st === "illegal") return "illegal-copy";
      if (st !== "legal") return "no-plan";
      for (let i = 1; i < copySearch.n; i++) {
        let cause = copySearch.causeKind[i]!;
        if (cause < 0) continue;
        let fault = copySearch.causeFault[i]!;
        let since = copySearch.causeSince[i]! >= 0 ? copySearch.ops[copySearch.causeSince[i]!]!.op : -1;
        if (cause === C_FIRST && plan.faultOf[c]! >= 0) {
          cause = C_RECOPY;
          fault = plan.faultOf[c]!;
          since = copyFirstOp[plan.sourceOf[c]!]!;
        }
        copyCauses.push(copySearch.ops[i]!.op, cause, fault, since);
      }
    }
    return "legal";
  };
  const deliveries: number[] = [];
  const early: number[] = [];
  for (let p = 0; p < nPairs; p++) {
    // Scratch lists, emptied by hand: most pairs have one or two entries.
    while (deliveries.length > 0) deliveries.pop();
    while (early.length > 0) early.pop();
    const m = pairMsg[p]!;
    const t = pairTopic[p]!;
    const a0 = pairStart[p]!;
    const a1 = pairStart[p + 1]!;
    curMsg = m;
    curTopic = t;
    curPair = p;
    curInvalid = false;
    curUnknown = false;
    copyStepsMax = 0;

    for (let k = a0; k < a1; k++) if (ops.f[pairOps[k]!] === F_CONSUME) deliveries.push(pairOps[k]!);

    if (!pairOwed[p]) {
      if (deliveries.length > 0) {
        const produce = msgProduce[m]!;
        if (produce < 0) {
          anomaly("unexpected", deliveries, `delivered on ${run.topics.name(t)} but never produced`);
        } else {
          anomaly(
            "misrouted",
            [produce, ...deliveries],
            `produced to ${run.topics.name(ops.topic[produce]!)}, delivered on ${run.topics.name(t)}, which it was not owed on`,
          );
        }
      } else {
        // Acks naming a pair nothing delivered: only a 204 is impossible.
        const bad: number[] = [];
        for (let k = a0; k < a1; k++) if (ops.outcome[pairOps[k]!] === O_OK) bad.push(pairOps[k]!);
        if (bad.length > 0) anomaly("no-legal-order", bad, `answered 204 for a delivery of ${run.msgs.name(m)} on ${run.topics.name(t)} that no consume returned`);
      }
      if (curInvalid) pairsInvalid++;
      else pairsLegal++;
      continue;
    }

    // The produce(s) this path is owed by; a repeated message id has several.
    let produce = msgProduce[m]!;
    const repeated = msgProduceCount[m]! > 1;
    let produceOk = false;
    let produceFailedAll = true;
    let produceInvNs = Infinity;
    let produceCompOkNs = Infinity;
    const produceCount = repeated ? multiProduces.get(m)!.length : 1;
    for (let i = 0; i < produceCount; i++) {
      const pr = repeated ? multiProduces.get(m)![i]! : produce;
      if (repeated && !owes(pr, t)) continue;
      const o = ops.outcome[pr]!;
      if (o !== O_FAIL) produceFailedAll = false;
      if (o === O_OK) {
        produceOk = true;
        if (ops.compNs[pr]! < produceCompOkNs) produceCompOkNs = ops.compNs[pr]!;
      }
      if (ops.invNs[pr]! < produceInvNs) {
        produceInvNs = ops.invNs[pr]!;
        produce = pr;
      }
    }
    if (repeated && produceOk) {
      // Search with one that took effect.
      for (const pr of multiProduces.get(m)!) {
        if (owes(pr, t) && ops.outcome[pr] === O_OK) {
          produce = pr;
          break;
        }
      }
    }
    const delay = delayNs[t]!;
    const vt = vtNs[t]!;

    // unexpected: delivered before any produce of it began.
    for (const d of deliveries) if (ops.compNs[d]! <= produceInvNs) early.push(d);
    if (early.length > 0) {
      anomaly("unexpected", [...early, produce], `delivered before its produce began`);
    } else if (deliveries.length > 0 && produceFailedAll) {
      const status = ops.status[produce]!;
      anomaly("refused-delivered", [produce, ...deliveries], `its produce was refused${status ? ` (${status})` : ""} and it was delivered anyway`);
    } else {
      if (delay > 0) {
        for (const d of deliveries) {
          if (ops.compNs[d]! < produceInvNs + delay - slackNs) {
            anomaly(
              "early-delivery",
              [produce, d],
              `delay child copy delivered ${fmtMs(ops.compNs[d]! - produceInvNs)} after its produce began; the delay is ${fmtMs(delay)}`,
            );
            break;
          }
        }
      }
      if (a1 > a0) {
        curProduce = produce;
        curDelay = delay;
        curVt = vt;
        fillSearch(search, a0, a1, -1);
        // Several copies on a child path (deliveries of other offsets): each copy is a record of
        // its own, and every copy but one needs a fault that makes the copier copy again
        // (recopy.ts). Tried first; otherwise the pair is judged as one record, as always.
        const split = parentOf[t] === ops.topic[produce] && !repeated && deliveries.length >= 2 && groupCopies(a0, a1);
        let status: SearchStatus = "illegal";
        let steps = 0;
        let usedUnevidenced = false;
        let viaCopies = false;
        // Faults explain the copies but one copy has no legal order of its own: its anomaly.
        let illegalCopy: ReturnType<typeof copySearch.snapshot> | null = null;
        const copies = split ? judgeCopies(recopyEvidenced, envEvidenced[t]!) : "no-plan";
        if (copies === "legal") {
          status = "legal";
          viaCopies = true;
        } else if (copies === "illegal-copy") {
          illegalCopy = copySearch.snapshot();
        } else {
          status = search.search(envEvidenced[t]!);
          steps = search.steps;
          if (status === "illegal" && unevidenced.length > 0) {
            if (split && judgeCopies(recopyAll, envAll[t]!) === "legal") {
              status = "legal";
              viaCopies = true;
              usedUnevidenced = true;
            } else {
              const second = search.search(envAll[t]!);
              steps = Math.max(steps, search.steps);
              if (second !== "illegal") {
                status = second;
                usedUnevidenced = second === "legal";
              }
            }
          }
        }
        steps = Math.max(steps, copyStepsMax);
        if (steps > stepsMostInOnePair) stepsMostInOnePair = steps;
        if (status === "cap") {
          capHits++;
          unknownPair("search-cap", searchRows(), `the search for a legal order passed ${stepsMax} steps`);
        } else if (status === "illegal") {
          if (repeated) {
            unknownPair("repeated-produce", searchRows(), `produced ${msgProduceCount[m]} times; the copies cannot be told apart`);
          } else {
            const local = illegalCopy ?? search.snapshot();
            const c = classifyIllegal(local, envAll[t]!);
            anomaly(c.name, c.local.map((i) => local[i]!.op), c.explanation);
          }
        } else {
          if (usedUnevidenced) {
            unknownPair("explained-by-unevidenced-fault", searchRows(), "legal only if a fault that left no boot evidence happened");
          }
          // Redeliveries by cause, explained duplicates and re-copies, and lag.
          if (viaCopies) {
            for (let i = 0; i < copyCauses.length; i += 4) recordCause(copyCauses[i]!, copyCauses[i + 1]!, copyCauses[i + 2]!, copyCauses[i + 3]!);
          } else {
            for (let i = 1; i < search.n; i++) {
              const cause = search.causeKind[i]!;
              if (cause < 0) continue;
              recordCause(search.ops[i]!.op, cause, search.causeFault[i]!, search.causeSince[i]! >= 0 ? search.ops[search.causeSince[i]!]!.op : -1);
            }
          }
        }
      }
    }

    // A pair that should not exist at all has no liveness to judge.
    if (curInvalid && (early.length > 0 || produceFailedAll)) {
      pairsInvalid++;
      continue;
    }

    // Settlement and availability, for the silence measure.
    for (let k = a0; k < a1; k++) {
      const op = pairOps[k]!;
      // The last 204: an ack a fault made the broker forget did not settle the message for good.
      if (ops.f[op] === F_ACK && ops.outcome[op] === O_OK && (settleNs[p] === Infinity || ops.compNs[op]! > settleNs[p]!)) {
        settleNs[p] = ops.compNs[op]!;
      }
    }
    if (produceOk) availableNs[p] = produceCompOkNs + delay;

    // lost: owed, took effect, never delivered here after its produce began.
    const tookEffect = produceOk || (!produceFailedAll && msgFirstDeliveryNs[m]! < Infinity);
    let deliveredHere = false;
    for (const d of deliveries) if (ops.compNs[d]! > produceInvNs) deliveredHere = true;
    const drain = drainOp[t]!;
    if (tookEffect && !deliveredHere) {
      const effectiveNs = produceOk ? produceCompOkNs : msgFirstDeliveryNs[m]!;
      const dueNs = effectiveNs + delay + slackNs;
      if (drain >= 0 && ops.invNs[drain]! > dueNs) {
        if (ambiguousLeaseNs[t]! > produceInvNs) {
          unknownPair(
            "lease-may-be-live-at-drain",
            [produce, ambiguousLeaseOp[t]!, drain],
            `not delivered, but an ambiguous consume may have leased it within a visibility timeout of the final drain`,
          );
        } else {
          anomaly(
            "lost",
            [produce, drain],
            `produced${produceOk ? " (202)" : " (ambiguous, delivered elsewhere)"} and never delivered on ${run.topics.name(t)}; the final drain began ${fmtMs(ops.invNs[drain]! - effectiveNs)} after the produce completed`,
          );
        }
      } else {
        unknownPair("no-final-drain", drain >= 0 ? [produce, drain] : [produce], `due on ${run.topics.name(t)} but no empty consume of the path began after it was due`);
      }
    }

    // stranded: delivered, never acked (204 or ambiguous) on any handle, and not delivered again.
    if (deliveries.length > 0) {
      let acked = false;
      for (let k = a0; k < a1; k++) {
        const op = pairOps[k]!;
        if (ops.f[op] === F_ACK && ops.outcome[op] !== O_FAIL) acked = true;
      }
      if (!acked) {
        const last = deliveries[deliveries.length - 1]!;
        const lastHandle = ops.delivery[last]!;
        let endsNs = ops.compNs[last]! + vt;
        let nackNs = Infinity;
        const shown = [last];
        for (let k = a0; k < a1; k++) {
          const op = pairOps[k]!;
          if (ops.delivery[op] !== lastHandle || op === last) continue;
          const o = ops.outcome[op]!;
          if (o === O_FAIL) continue;
          if (ops.f[op] === F_EXTEND) {
            endsNs = Math.max(endsNs, ops.compNs[op]! + vt);
            shown.push(op);
          } else if (ops.f[op] === F_NACK && o === O_OK) {
            nackNs = Math.min(nackNs, ops.compNs[op]!);
            shown.push(op);
          }
        }
        if (nackNs < Infinity) endsNs = nackNs;
        if (drain >= 0 && ops.invNs[drain]! > endsNs + slackNs) {
          if (ambiguousLeaseNs[t]! > ops.invNs[last]!) {
            unknownPair(
              "lease-may-be-live-at-drain",
              [...shown, ambiguousLeaseOp[t]!, drain],
              `never acked and not delivered again, but an ambiguous consume may have leased it within a visibility timeout of the final drain`,
            );
          } else {
            anomaly(
              "stranded",
              [...shown, drain],
              `delivered, never acked, and not delivered again although the final drain began ${fmtMs(ops.invNs[drain]! - endsNs)} after its lease surely ended`,
            );
          }
        } else if (!curInvalid) {
          unknownPair(
            "no-final-drain",
            drain >= 0 ? [...shown, drain] : shown,
            `delivered and never acked, but no empty consume of ${run.topics.name(t)} began after its lease surely ended`,
          );
        }
      }
    }

    if (curInvalid) pairsInvalid++;
    else if (curUnknown) pairsUnknown++;
    else pairsLegal++;
  }

  judgeReplays(run, findings, idx);

  // ---- fault summaries, silence and the rest of the measures ----
  const pairTimes: PairTimes = { nPairs, pairTopic, availableNs, settleNs };
  const measures = buildMeasures(run, options, faults, pairTimes, lagMs, lagSince, findings.anomalies);
  const faultSummaries: FaultSummary[] = faults.map((f, i) => {
    const fr = run.faults[f.fault]!;
    const o = ops.outcome[f.op]!;
    return {
      op: idx(f.op),
      kind: f.kind,
      node: f.node >= 0 ? run.nodes.name(f.node) : null,
      partition: fr.partition >= 0 ? `${fr.topic >= 0 ? run.topics.name(fr.topic) : "*"}/${fr.partition}` : null,
      invokeNs: ops.invNs[f.op]!,
      completeNs: o === O_OPEN ? null : ops.compNs[f.op]!,
      outcome: o === O_OK ? "ok" : o === O_FAIL ? "fail" : o === O_INFO ? "info" : "open",
      needsEvidence: f.needsEvidence,
      evidence: f.needsEvidence ? f.evidence : null,
      evidenceOp: f.evidenceOp >= 0 ? idx(f.evidenceOp) : null,
      endOp: f.endOp >= 0 ? idx(f.endOp) : null,
      endNs: Number.isFinite(f.endNs) ? f.endNs : null,
      silenceMs: measures.silenceMs[i] ?? null,
      redeliveries: faultRedeliveries[i]!,
    };
  });
  const byFault = faults
    .map((f, i) => ({ op: idx(f.op), kind: f.kind, count: faultRedeliveries[i]! }))
    .filter((x) => x.count > 0);

  const anomalyTotal = Object.values(findings.anomalyCounts).reduce((s, n) => s + (n ?? 0), 0);
  const unknownTotal = Object.values(findings.unknownCounts).reduce((s, n) => s + (n ?? 0), 0);
  let verdict: Verdict;
  let reason: string;
  const list = (counts: Partial<Record<string, number>>): string =>
    Object.entries(counts)
      .map(([k, n]) => `${n} ${k}`)
      .join(", ");
  if (anomalyTotal > 0) {
    verdict = "invalid";
    reason = `${anomalyTotal} ${anomalyTotal === 1 ? "anomaly" : "anomalies"}: ${list(findings.anomalyCounts)}`;
  } else if (unknownTotal > 0) {
    verdict = "unknown";
    reason = `cannot judge all of the run: ${list(findings.unknownCounts)}`;
  } else {
    verdict = "valid";
    reason = `every pair has a legal order and every due pair was drained (${nPairs} pairs, ${faults.length} faults)`;
  }

  const childrenReport: Report["config"]["children"] = {};
  for (const [parent, list2] of Object.entries(children)) {
    childrenReport[parent] = list2.map((c) => ({ topic: c.topic, kind: c.kind, delayMs: c.delay_ms ?? null }));
  }
  const topicsReport: Report["config"]["topics"] = {};
  for (const [name, tc] of Object.entries(cfg.topics)) {
    topicsReport[name] = { partitions: tc.partitions, visibilityTimeoutMs: tc.visibility_timeout_ms ?? cfg.visibility_timeout_ms };
  }

  return {
    format: "narad-check/1",
    verdict,
    reason,
    history: { events: run.events, operations: nOps, durationNs: run.lastTimeNs },
    config: {
      ackFlushMs: cfg.ack_flush_ms,
      ackSyncMs: cfg.ack_sync_ms,
      visibilityTimeoutMs: cfg.visibility_timeout_ms,
      slackMs,
      topics: topicsReport,
      children: childrenReport,
    },
    counts: {
      operations: measures.operationCounts,
      consumeEmpty: measures.consumeEmpty,
      gone410: measures.gone410,
      messages: nMsgs,
      deliveries: deliveriesTotal,
      pairs: { total: nPairs, legal: pairsLegal, invalid: pairsInvalid, unknown: pairsUnknown },
    },
    anomalies: findings.anomalies,
    anomalyCounts: findings.anomalyCounts,
    anomaliesOmitted: findings.anomaliesOmitted,
    unknowns: findings.unknowns,
    unknownCounts: findings.unknownCounts,
    unknownsOmitted: findings.unknownsOmitted,
    faults: faultSummaries,
    redeliveries: {
      total: redeliveryTotal,
      byCause,
      byFault,
      explainedDuplicates: explained,
      explainedDuplicatesTotal: explainedTotal,
      explainedRecopies: recopies,
      explainedRecopiesTotal: recopiesTotal,
    },
    lag: measures.lag,
    series: measures.series,
    timeline: measures.timeline,
    search: { stepsMax, capHits, stepsMostInOnePair },
  };
}

// ---- replays ----

/**
 * skip: a replay that jumps over an offset known to exist. The log of a partition has no holes,
 * so an offset exists once it, or any higher offset of the partition, has been seen; a gap between
 * two offsets of one answer is therefore always a skip, and a first offset above the one asked
 * for is a skip when a higher-or-equal offset was seen before the replay began.
 * nonmonotonic: an answer whose offsets do not strictly increase, or start below the one asked for.
 */
function judgeReplays(run: RunData, findings: Findings, idx: (op: number) => number): void {
  if (run.replays.length === 0) return;
  const ops = run.ops;
  const keyOf = (topic: number, partition: number): number => topic * 1_048_576 + partition;
  // "The highest offset of this partition seen before time T", for each replay's invoke time T.
  // Operations come in invoke order and a sighting counts from its completion, so pending
  // sightings wait in a min-heap by completion time; before each replay, those completed earlier
  // are folded into a running maximum per partition. Memory: the operations open at once.
  const replayOf = new Map<number, ReplayRec>();
  for (const r of run.replays) replayOf.set(r.op, r);
  const heapNs: number[] = [];
  const heapOp: number[] = [];
  const heapOffset: number[] = [];
  const swap = (i: number, j: number): void => {
    const n = heapNs[i]!;
    heapNs[i] = heapNs[j]!;
    heapNs[j] = n;
    const o = heapOp[i]!;
    heapOp[i] = heapOp[j]!;
    heapOp[j] = o;
    const f = heapOffset[i]!;
    heapOffset[i] = heapOffset[j]!;
    heapOffset[j] = f;
  };
  const push = (ns: number, op: number, offset: number): void => {
    let i = heapNs.length;
    heapNs.push(ns);
    heapOp.push(op);
    heapOffset.push(offset);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heapNs[parent]! <= heapNs[i]!) break;
      swap(parent, i);
      i = parent;
    }
  };
  const pop = (): void => {
    const last = heapNs.length - 1;
    swap(0, last);
    heapNs.pop();
    heapOp.pop();
    heapOffset.pop();
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < heapNs.length && heapNs[l]! < heapNs[m]!) m = l;
      if (r < heapNs.length && heapNs[r]! < heapNs[m]!) m = r;
      if (m === i) break;
      swap(m, i);
      i = m;
    }
  };
  const maxSeen = new Map<number, { offset: number; op: number }>();
  const knownBefore = new Map<number, { offset: number; op: number }>();
  for (let op = 0; op < ops.length; op++) {
    const f = ops.f[op]!;
    if (f === F_REPLAY) {
      const key = keyOf(ops.topic[op]!, ops.partition[op]!);
      const t = ops.invNs[op]!;
      while (heapNs.length > 0 && heapNs[0]! < t) {
        const sk = heapOp[0]!;
        const offset = heapOffset[0]!;
        pop();
        const k = keyOf(ops.topic[sk]!, ops.partition[sk]!);
        const cur = maxSeen.get(k);
        if (cur === undefined || offset > cur.offset) maxSeen.set(k, { offset, op: sk });
      }
      knownBefore.set(op, maxSeen.get(key) ?? { offset: -1, op: -1 });
    }
    if (ops.outcome[op] !== O_OK) continue;
    if ((f === F_PRODUCE || (f === F_CONSUME && ops.msg[op]! >= 0)) && ops.partition[op]! >= 0) {
      push(ops.compNs[op]!, op, ops.offset[op]!);
    } else if (f === F_REPLAY) {
      const r = replayOf.get(op);
      if (r !== undefined && r.offsets.length > 0) push(ops.compNs[op]!, op, Math.max(...r.offsets));
    }
  }

  for (const r of run.replays) {
    const op = r.op;
    const topic = run.topics.name(ops.topic[op]!);
    const partition = ops.partition[op]!;
    const from = ops.offset[op]!;
    const offs = r.offsets;
    const where = `${topic}/${partition}`;
    const report = (name: AnomalyName, shown: number[], explanation: string): void => {
      findings.anomaly({ name, msg: null, path: topic, ops: sortedUnique(shown.map(idx)), explanation: `replay of ${where}: ${explanation}` });
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
