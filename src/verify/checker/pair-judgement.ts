// The judgement of one (message, path) pair, one pair after another: `judge(p)` runs the steps
// on pair p and adds what it found to the findings and to the totals this unit keeps across
// pairs (pairs by outcome, redeliveries by cause, lag per delivery, settle and available times
// per pair for the silence measure). Its fields hold the pair being judged, and its buffers are
// reused from pair to pair, so an ordinary pair (one copy, nothing found) allocates nothing.
//
// The steps of one pair (SPEC "Checker verdicts", docs/verification-checker.md "The model"):
//   1. a pair nothing owes: unexpected, misrouted, or a 204 for a delivery nobody saw;
//   2. its produce: the earliest of those that owe it (a repeated id: one that took effect);
//   3. direct tests: unexpected (delivered before any produce began), refused-delivered,
//      early-delivery on a delay child;
//   4. the order search (pair.ts) with the evidenced faults, then with every fault (legal only
//      thanks to an unevidenced fault is `unknown`). On a child path whose deliveries show several
//      copies (offsets), each copy is first searched on its own, every extra copy explained by a
//      fault that makes the copier copy again (recopy.ts); failing that, as one record;
//   5. of a legal order: each delivery's cause (first, lapse, nack, fault; explained duplicates
//      and re-copies listed) and its lag;
//   6. lost and stranded against the path's final drain.
//
// Next wave (SPEC "Idempotent producers", "Dead letters"; dead-letter.ts holds the rules):
//   - a message whose produces all carried one (producer, sequence) is one produce re-sent: its
//     produces count as one that took effect from the first invoke to the first 202, and two
//     places it was stored at are `duplicate-produce`;
//   - on a topic with a dead-letter topic D: a dead-letter op settles the pair like an ack (a
//     delivery after its 204 is `delivered-after-dead-letter` unless a fault forgets it); a
//     delivery beyond max_deliveries is `delivered-after-dead-letter` unless a fault forgets a
//     count or the move; a pair dead-lettered is not `stranded` but owed once on D, whose pair
//     (owed 2 in the index) is judged after it: `dead-lettered-early`, its order, `lost`.

import { F_ACK, F_CONSUME, F_DEAD_LETTER, F_EXTEND, F_NACK, O_FAIL, O_INFO, O_OK, type RunData } from "./collect.js";
import { DeadLetterState, deliveredOnDeadLetterPath, judgeDeadLetterPath, judgeDeadLetterSource, testDuplicateProduce } from "./dead-letter.js";
import { FaultIndex, type FaultInfo } from "./faults.js";
import { fmtMs, sortedUnique, type Findings } from "./findings.js";
import type { PairTimes } from "./measures.js";
import type { PairIndex } from "./pair-index.js";
import {
  C_FIRST,
  C_FORGET,
  C_LAPSE,
  C_NACK,
  C_RECOPY,
  classifyIllegal,
  K_ACK,
  K_DELIVER,
  K_EXTEND,
  K_NACK,
  K_PRODUCE,
  PairSearch,
  type PairEnv,
  type PairOp,
  type SearchStatus,
} from "./pair.js";
import { copiesAgain, planRecopies, RECOPY_COPIES_MAX, type CopyView, type RecopyFault } from "./recopy.js";
import type { Topology } from "./topology.js";
import type { AnomalyName, ExplainedDuplicate, ExplainedRecopy, UnknownReason } from "./types.js";

const MS = 1e6;

// Where a delivery's lag is counted from (lagSince, for measures.ts): 0 none.
const SINCE_PRODUCE = 1;
const SINCE_NACK = 2;
const SINCE_LAPSE = 3;
const SINCE_FAULT = 4;

export interface JudgementLimits {
  slackNs: number;
  stepsMax: number;
  listMax: number;
}

/** Redeliveries by cause over every pair, with the explained duplicates and re-copies (lists capped). */
export class RedeliveryTally {
  total = 0;
  readonly byCause = { lapse: 0, nack: 0, fault: 0 };
  /** Fault-caused redeliveries per fault (the FaultInfo order). */
  readonly perFault: Int32Array;
  readonly explainedDuplicates: ExplainedDuplicate[] = [];
  explainedDuplicatesTotal = 0;
  readonly explainedRecopies: ExplainedRecopy[] = [];
  explainedRecopiesTotal = 0;
  constructor(faults: number) {
    this.perFault = new Int32Array(faults);
  }
}

/**
 * Members without `private` are the pair being judged and the steps the next wave's rules
 * (dead-letter.ts) read and call; nothing outside the two files touches them.
 */
export class PairJudgement {
  // ---- totals over every pair judged ----
  readonly pairs = { legal: 0, invalid: 0, unknown: 0 };
  capHits = 0;
  stepsMostInOnePair = 0;
  readonly redeliveries: RedeliveryTally;
  /** Per delivery (op row): its lag in ms (NaN when not measured) and what it counts from (SINCE_*). */
  readonly lagMs: Float32Array;
  readonly lagSince: Uint8Array;
  /** Per pair, for the silence measure: when it became available and its last 204 ack. */
  readonly times: PairTimes;

  // ---- the run, read-only ----
  readonly run: RunData;
  readonly ops: RunData["ops"];
  readonly topology: Topology;
  readonly index: PairIndex;
  private readonly faults: readonly FaultInfo[];
  private readonly findings: Findings;
  readonly slackNs: number;
  readonly stepsMax: number;
  private readonly listMax: number;
  private readonly ackFlushNs: number;
  private readonly ackSyncNs: number;
  /** Per path, the search environment with the evidenced faults and with every fault. */
  readonly envEvidenced: PairEnv[] = [];
  readonly envAll: PairEnv[] = [];
  readonly anyUnevidenced: boolean;
  /** Faults that may make a copier copy again, as the re-copy rule sees them: evidenced, and all. */
  private readonly recopyEvidenced: RecopyFault[];
  private readonly recopyAll: RecopyFault[];

  // ---- the pair being judged ----
  msg = -1;
  topic = -1;
  pair = -1;
  /** Its operations are index.opRows[opsFrom .. opsTo). */
  opsFrom = 0;
  opsTo = 0;
  private invalid = false;
  private unknown = false;
  /** Its deliveries, and those that completed before any produce of it began. */
  readonly deliveries: number[] = [];
  private readonly early: number[] = [];
  /** The produce the search starts from, and what all the produces that owe the pair add up to. */
  produce = -1;
  repeated = false;
  produceOk = false;
  produceFailedAll = true;
  produceInvNs = Infinity;
  produceCompOkNs = Infinity;
  /** The produce as the search sees it: one point between these (an idempotent message's re-sends count as one). */
  produceSearchInvNs = Infinity;
  produceSearchCompNs = Infinity;
  produceSearchOk = false;
  /** The pair is on a dead-letter path (owed 2): its "produce" is the source pair's move. */
  dlqPath = false;
  /** Per pair: its dead-letter state (dead-letter.ts), filled when the source pair is judged. */
  readonly dead: DeadLetterState;
  /** Messages found stored twice (duplicate-produce): their pairs' search anomalies are not named again. */
  readonly duplicated: Uint8Array;
  delayNs = 0;
  visibilityTimeoutNs = 0;
  private readonly search = new PairSearch();

  // ---- its copies (child paths): per copy its partition, offset and first delivery; per pair operation its copy (-1: none) ----
  private readonly copyPartition: number[] = [];
  private readonly copyOffset: number[] = [];
  private readonly copyFirstOp: number[] = [];
  readonly copyViews: CopyView[] = [];
  private readonly copyOfOp: number[] = [];
  /** Causes found by judgeCopies, four numbers each (delivery op, cause, fault, since op). */
  readonly copyCauses: number[] = [];
  readonly copySearch = new PairSearch();
  private copyStepsMax = 0;

  constructor(run: RunData, topology: Topology, index: PairIndex, faults: readonly FaultInfo[], findings: Findings, limits: JudgementLimits) {
    this.run = run;
    this.ops = run.ops;
    this.topology = topology;
    this.index = index;
    this.faults = faults;
    this.findings = findings;
    this.slackNs = limits.slackNs;
    this.stepsMax = limits.stepsMax;
    this.listMax = limits.listMax;
    this.ackFlushNs = run.config.ack_flush_ms * MS;
    this.ackSyncNs = run.config.ack_sync_ms * MS;
    this.redeliveries = new RedeliveryTally(faults.length);
    this.lagMs = new Float32Array(run.ops.length).fill(NaN);
    this.lagSince = new Uint8Array(run.ops.length);
    this.dead = new DeadLetterState(index.nPairs);
    this.duplicated = new Uint8Array(run.msgs.size);
    this.times = {
      nPairs: index.nPairs,
      pairTopic: index.topicOf,
      availableNs: new Float64Array(index.nPairs).fill(Infinity),
      settleNs: new Float64Array(index.nPairs).fill(Infinity),
    };

    const evidenced = (f: FaultInfo): boolean => !f.needsEvidence || f.evidence;
    const evidencedIndex = new FaultIndex(run, faults, evidenced);
    const allIndex = new FaultIndex(run, faults, () => true);
    this.anyUnevidenced = faults.some((f) => !evidenced(f));
    // A failover forgets the acks not yet shipped: one shipping interval plus the lag allowed.
    const replicationWindowNs = (run.config.ack_flush_ms + (typeof run.config.replication_lag_ms === "number" ? run.config.replication_lag_ms : run.config.ack_flush_ms)) * MS;
    // After an outage the leader joins the follower again before its queued acks reach it.
    const rejoinMs = run.config.replication_rejoin_ms;
    const rejoinNs = (typeof rejoinMs === "number" ? rejoinMs : replicationWindowNs / MS - run.config.ack_flush_ms) * MS;
    const nodes = run.ops.node;
    // One search environment per path and fault set, made once (not per pair).
    const envFor = (faultIndex: FaultIndex, t: number): PairEnv => ({
      slackNs: this.slackNs,
      visibilityTimeoutNs: topology.visibilityTimeoutNs[t]!,
      ackFlushNs: this.ackFlushNs,
      ackSyncNs: this.ackSyncNs,
      replicationWindowNs,
      rejoinNs,
      nodeOf: (d) => nodes[d]!,
      stepsMax: this.stepsMax,
      leaseEnders: (d) => faultIndex.leaseEnders(d),
      ackForgetters: (d) => faultIndex.ackForgetters(d),
    });
    for (let t = 0; t < run.topics.size; t++) {
      this.envEvidenced.push(envFor(evidencedIndex, t));
      this.envAll.push(envFor(allIndex, t));
    }
    const recopyFaultOf = (f: FaultInfo): RecopyFault => ({ fault: f.fault, kind: f.kind, node: f.node, invNs: f.time.invNs, compNs: f.time.compNs });
    const recopying = faults.filter((f) => f.mayHaveHappened && copiesAgain(f.kind));
    this.recopyEvidenced = recopying.filter(evidenced).map(recopyFaultOf);
    this.recopyAll = recopying.map(recopyFaultOf);
  }

  /** Judges pair `p`: its findings go to the findings, its outcome and measures to the totals. */
  judge(p: number): void {
    this.begin(p);
    if (!this.index.owed[p]) {
      this.judgeUnowed();
      if (this.invalid) this.pairs.invalid++;
      else this.pairs.legal++;
      return;
    }
    if (this.index.owed[p] === 2) {
      judgeDeadLetterPath(this);
      this.tallyPair();
      return;
    }
    this.chooseProduce();
    if (this.index.oneSequence[this.msg] && this.ops.topic[this.produce] === this.topic) testDuplicateProduce(this);
    if (this.findEarly()) {
      this.anomaly("unexpected", [...this.early, this.produce], `delivered before its produce began`);
    } else if (this.deliveries.length > 0 && this.produceFailedAll) {
      const status = this.ops.status[this.produce]!;
      this.anomaly("refused-delivered", [this.produce, ...this.deliveries], `its produce was refused${status ? ` (${status})` : ""} and it was delivered anyway`);
    } else {
      this.testDelay();
      if (this.opsTo > this.opsFrom) this.searchOrder();
    }
    // A pair that should not exist at all has no liveness to judge.
    if (this.invalid && (this.early.length > 0 || this.produceFailedAll)) {
      this.pairs.invalid++;
      return;
    }
    this.recordTimes();
    this.testLost();
    if (this.topology.deadLetterOf[this.topic]! >= 0) judgeDeadLetterSource(this);
    else this.testStranded();
    this.tallyPair();
  }

  private tallyPair(): void {
    if (this.invalid) this.pairs.invalid++;
    else if (this.unknown) this.pairs.unknown++;
    else this.pairs.legal++;
  }

  private begin(p: number): void {
    const index = this.index;
    const ops = this.ops;
    // Scratch lists, emptied by hand: most pairs have one or two entries.
    while (this.deliveries.length > 0) this.deliveries.pop();
    while (this.early.length > 0) this.early.pop();
    this.msg = index.msgOf[p]!;
    this.topic = index.topicOf[p]!;
    this.pair = p;
    this.opsFrom = index.opsStart[p]!;
    this.opsTo = index.opsStart[p + 1]!;
    this.invalid = false;
    this.unknown = false;
    this.dlqPath = false;
    this.copyStepsMax = 0;
    for (let k = this.opsFrom; k < this.opsTo; k++) if (ops.f[index.opRows[k]!] === F_CONSUME) this.deliveries.push(index.opRows[k]!);
  }

  // ---- findings of this pair ----

  anomaly(name: AnomalyName, opRows: number[], explanation: string): void {
    this.invalid = true;
    this.findings.anomaly({ name, msg: this.run.msgs.name(this.msg), path: this.run.topics.name(this.topic), ops: this.opsList(opRows), explanation });
  }

  unknownPair(reason: UnknownReason, opRows: number[], explanation: string): void {
    this.unknown = true;
    this.findings.unknown({ reason, msg: this.run.msgs.name(this.msg), path: this.run.topics.name(this.topic), ops: this.opsList(opRows), explanation });
  }

  private opsList(opRows: number[]): number[] {
    const invIdx = this.ops.invIdx;
    return sortedUnique(opRows.map((op) => invIdx[op]!));
  }

  // ---- steps 1 to 3 ----

  /** A pair no produce owes: delivered on a path it was never owed on, or acked though nothing delivered it. */
  private judgeUnowed(): void {
    const run = this.run;
    const ops = this.ops;
    const t = this.topic;
    if (this.deliveries.length > 0) {
      const produce = this.index.produceOf[this.msg]!;
      if (produce < 0) {
        this.anomaly("unexpected", this.deliveries, `delivered on ${run.topics.name(t)} but never produced`);
      } else {
        this.anomaly(
          "misrouted",
          [produce, ...this.deliveries],
          `produced to ${run.topics.name(ops.topic[produce]!)}, delivered on ${run.topics.name(t)}, which it was not owed on`,
        );
      }
      return;
    }
    // Acks naming a pair nothing delivered: only a 204 is impossible.
    const bad: number[] = [];
    for (let k = this.opsFrom; k < this.opsTo; k++) if (ops.outcome[this.index.opRows[k]!] === O_OK) bad.push(this.index.opRows[k]!);
    if (bad.length > 0) this.anomaly("no-legal-order", bad, `answered 204 for a delivery of ${run.msgs.name(this.msg)} on ${run.topics.name(t)} that no consume returned`);
  }

  /** The produce(s) this path is owed by; a repeated message id has several. */
  private chooseProduce(): void {
    const ops = this.ops;
    const m = this.msg;
    const t = this.topic;
    const repeatedList = this.index.repeatedProduces.get(m);
    let produce = this.index.produceOf[m]!;
    // An idempotent message's re-sends (one producer and sequence) are one produce: not "repeated".
    const resent = this.index.oneSequence[m] === 1 && this.index.produceCount[m]! > 1;
    this.repeated = this.index.produceCount[m]! > 1 && !resent;
    this.produceOk = false;
    this.produceFailedAll = true;
    this.produceInvNs = Infinity;
    this.produceCompOkNs = Infinity;
    const several = this.repeated || resent;
    const count = several ? repeatedList!.length : 1;
    for (let i = 0; i < count; i++) {
      const pr = several ? repeatedList![i]! : produce;
      if (several && !this.topology.owes(ops.topic[pr]!, t)) continue;
      const o = ops.outcome[pr]!;
      if (o !== O_FAIL) this.produceFailedAll = false;
      if (o === O_OK) {
        this.produceOk = true;
        if (ops.compNs[pr]! < this.produceCompOkNs) this.produceCompOkNs = ops.compNs[pr]!;
      }
      if (ops.invNs[pr]! < this.produceInvNs) {
        this.produceInvNs = ops.invNs[pr]!;
        produce = pr;
      }
    }
    if (several && this.produceOk) {
      // Search with one that took effect.
      for (const pr of repeatedList!) {
        if (this.topology.owes(ops.topic[pr]!, t) && ops.outcome[pr] === O_OK) {
          produce = pr;
          break;
        }
      }
    }
    this.produce = produce;
    if (resent) {
      // Stored once, somewhere between the first send and the first 202.
      this.produceSearchInvNs = this.produceInvNs;
      this.produceSearchOk = this.produceOk;
      this.produceSearchCompNs = this.produceOk ? this.produceCompOkNs : Infinity;
    } else {
      this.produceSearchInvNs = ops.invNs[produce]!;
      this.produceSearchOk = ops.outcome[produce] === O_OK;
      this.produceSearchCompNs = this.produceSearchOk ? ops.compNs[produce]! : Infinity;
    }
    this.delayNs = this.topology.delayNs[t]!;
    this.visibilityTimeoutNs = this.topology.visibilityTimeoutNs[t]!;
  }

  /** unexpected: the deliveries that completed before any produce of the message began. */
  private findEarly(): boolean {
    const compNs = this.ops.compNs;
    for (const d of this.deliveries) if (compNs[d]! <= this.produceInvNs) this.early.push(d);
    return this.early.length > 0;
  }

  /** early-delivery: a delay child's copy delivered before its delay (less the slack) had passed. */
  private testDelay(): void {
    const delay = this.delayNs;
    if (delay <= 0) return;
    const compNs = this.ops.compNs;
    for (const d of this.deliveries) {
      if (compNs[d]! < this.produceInvNs + delay - this.slackNs) {
        this.anomaly(
          "early-delivery",
          [this.produce, d],
          `delay child copy delivered ${fmtMs(compNs[d]! - this.produceInvNs)} after its produce began; the delay is ${fmtMs(delay)}`,
        );
        return;
      }
    }
  }

  // ---- step 4: the order search ----

  searchOrder(): void {
    const ops = this.ops;
    const t = this.topic;
    const search = this.search;
    this.fillSearch(search, -1);
    // Several copies on a child path (deliveries of other offsets): each copy is a record of its
    // own, and every copy but one needs a fault that makes the copier copy again (recopy.ts).
    // Tried first; otherwise the pair is judged as one record, as always.
    const split = this.topology.parentOf[t] === ops.topic[this.produce] && !this.repeated && this.deliveries.length >= 2 && this.groupCopies();
    let status: SearchStatus = "illegal";
    let steps = 0;
    let usedUnevidenced = false;
    let viaCopies = false;
    // Faults explain the copies but one copy has no legal order of its own: its anomaly.
    let illegalCopy: PairOp[] | null = null;
    const copies = split ? this.judgeCopies(this.recopyEvidenced, this.envEvidenced[t]!) : "no-plan";
    if (copies === "legal") {
      status = "legal";
      viaCopies = true;
    } else if (copies === "illegal-copy") {
      illegalCopy = this.copySearch.snapshot();
    } else {
      status = search.search(this.envEvidenced[t]!);
      steps = search.steps;
      if (status === "illegal" && this.anyUnevidenced) {
        if (split && this.judgeCopies(this.recopyAll, this.envAll[t]!) === "legal") {
          status = "legal";
          viaCopies = true;
          usedUnevidenced = true;
        } else {
          const second = search.search(this.envAll[t]!);
          steps = Math.max(steps, search.steps);
          if (second !== "illegal") {
            status = second;
            usedUnevidenced = second === "legal";
          }
        }
      }
    }
    steps = Math.max(steps, this.copyStepsMax);
    if (steps > this.stepsMostInOnePair) this.stepsMostInOnePair = steps;
    if (status === "cap") {
      this.capHits++;
      this.unknownPair("search-cap", this.searchRows(), `the search for a legal order passed ${this.stepsMax} steps`);
    } else if (status === "illegal") {
      if (this.repeated) {
        this.unknownPair("repeated-produce", this.searchRows(), `produced ${this.index.produceCount[this.msg]} times; the copies cannot be told apart`);
      } else if (this.duplicated[this.msg]) {
        // Stored twice (duplicate-produce, named once on its topic): the copies explain the rest.
        this.invalid = true;
      } else {
        const local = illegalCopy ?? search.snapshot();
        this.namedIllegal(local, classifyIllegal(local, this.envAll[t]!));
      }
    } else {
      if (usedUnevidenced) {
        this.unknownPair("explained-by-unevidenced-fault", this.searchRows(), "legal only if a fault that left no boot evidence happened");
      }
      this.recordCauses(viaCopies);
    }
  }

  /** The anomaly of an illegal order; a duplicate after a dead-letter op's 204 is named for what it is. */
  namedIllegal(local: PairOp[], c: ReturnType<typeof classifyIllegal>): void {
    const rows = c.local.map((i) => local[i]!.op);
    if (c.name === "duplicate-after-ack" && this.ops.f[rows[1]!] === F_DEAD_LETTER) {
      this.anomaly(
        "delivered-after-dead-letter",
        rows,
        "delivered on its topic again after a dead-letter ack answered 204, and no fault that may forget it (as an ack) explains it",
      );
      return;
    }
    this.anomaly(c.name, rows, c.explanation);
  }

  private searchRows(): number[] {
    return this.search.snapshot().map((o) => o.op);
  }

  /**
   * Fills `s` with the pair's search operations: the produce, then the pair's operations in invoke
   * order; with `copy` >= 0 only those of that copy (copyOfOp, from groupCopies).
   */
  fillSearch(s: PairSearch, copy: number): void {
    const ops = this.ops;
    const rows = this.index.opRows;
    s.reset();
    const produce = this.produce;
    s.add(produce, K_PRODUCE, this.produceSearchOk, this.produceSearchInvNs, this.produceSearchCompNs, -1);
    for (let k = this.opsFrom; k < this.opsTo; k++) {
      if (copy >= 0 && this.copyOfOp[k - this.opsFrom] !== copy) continue;
      const op = rows[k]!;
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
      // A dead-letter op settles the pair as an ack does (the move to the dead-letter topic).
      const kind = f === F_ACK || f === F_DEAD_LETTER ? K_ACK : f === F_EXTEND ? K_EXTEND : K_NACK;
      s.add(op, kind, o === O_OK, ops.invNs[op]!, bounded ? ops.compNs[op]! : Infinity, handle);
    }
  }

  /** Groups the pair's deliveries by (partition, offset): true when there are several copies to judge one by one. */
  groupCopies(): boolean {
    const ops = this.ops;
    const rows = this.index.opRows;
    const a0 = this.opsFrom;
    const a1 = this.opsTo;
    const copyPartition = this.copyPartition;
    const copyOffset = this.copyOffset;
    const copyFirstOp = this.copyFirstOp;
    const copyViews = this.copyViews;
    const copyOfOp = this.copyOfOp;
    copyPartition.length = 0;
    copyOffset.length = 0;
    copyFirstOp.length = 0;
    copyViews.length = 0;
    copyOfOp.length = 0;
    for (let k = a0; k < a1; k++) {
      const op = rows[k]!;
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
      const op = rows[k]!;
      if (ops.f[op] === F_CONSUME || ops.outcome[op] === O_FAIL) continue;
      for (let j = a0; j < a1; j++) {
        if (ops.f[rows[j]!] === F_CONSUME && ops.delivery[rows[j]!] === ops.delivery[op]) {
          copyOfOp[k - a0] = copyOfOp[j - a0]!;
          break;
        }
      }
      // A 204 for a delivery nobody saw fits no copy: leave the pair to the one-record search.
      if (copyOfOp[k - a0] === -1 && ops.outcome[op] === O_OK) return false;
    }
    return true;
  }

  /**
   * Whether every copy but one is explained as a re-copy by a distinct fault of `candidates`
   * ("no-plan" when not), and then whether every copy has a legal order on its own: "legal"
   * (the causes are left in copyCauses), or "illegal-copy" (copySearch holds the copy that has
   * none, so the anomaly is named from that copy's own operations).
   */
  private judgeCopies(candidates: readonly RecopyFault[], env: PairEnv): "legal" | "no-plan" | "illegal-copy" {
    const copySearch = this.copySearch;
    const causes = this.copyCauses;
    causes.length = 0;
    const plan = planRecopies(this.copyViews, candidates, {
      slackNs: this.slackNs,
      ackFlushNs: this.ackFlushNs,
      ackSyncNs: this.ackSyncNs,
      produceInvNs: this.produceSearchInvNs,
      parentOwners: this.parentOwners(),
      viaNodes: this.topology.viaNodesOf[this.topic]!,
      answerNs: this.topology.answerNsOf[this.topic]!,
    });
    if (plan === null) return "no-plan";
    for (let c = 0; c < this.copyViews.length; c++) {
      this.fillSearch(copySearch, c);
      const st = copySearch.search(env);
      this.copyStepsMax = Math.max(this.copyStepsMax, copySearch.steps);
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
          since = this.copyFirstOp[plan.sourceOf[c]!]!;
        }
        causes.push(copySearch.ops[i]!.op, cause, fault, since);
      }
    }
    return "legal";
  }

  /**
   * The parent partition's owner for the re-copy rule: the node the produce's ok names, else the
   * nodes that delivered the message on the produce's topic (the owners of its partition).
   */
  private parentOwners(): number[] {
    const ops = this.ops;
    const produce = this.produce;
    if (ops.outcome[produce] === O_OK && ops.node[produce]! >= 0) return [ops.node[produce]!];
    return this.index.deliverersOf(ops.msg[produce]!, ops.topic[produce]!);
  }

  // ---- step 5: causes, explained duplicates and re-copies, lag ----

  /** Counts the cause and lag of each delivery of the legal order just found. */
  recordCauses(viaCopies: boolean): void {
    if (viaCopies) {
      const causes = this.copyCauses;
      for (let i = 0; i < causes.length; i += 4) this.recordCause(causes[i]!, causes[i + 1]!, causes[i + 2]!, causes[i + 3]!);
      return;
    }
    const search = this.search;
    for (let i = 1; i < search.n; i++) {
      const cause = search.causeKind[i]!;
      if (cause < 0) continue;
      this.recordCause(search.ops[i]!.op, cause, search.causeFault[i]!, search.causeSince[i]! >= 0 ? search.ops[search.causeSince[i]!]!.op : -1);
    }
  }

  /** Counts one delivery's cause (redeliveries, explained duplicates and re-copies) and its lag. */
  private recordCause(d: number, cause: number, fault: number, sinceOp: number): void {
    const ops = this.ops;
    const tally = this.redeliveries;
    let sinceNs = NaN;
    let since = 0;
    if (cause === C_FIRST) {
      if (this.produceSearchOk) sinceNs = this.produceSearchCompNs + this.delayNs;
      since = SINCE_PRODUCE;
    } else {
      tally.total++;
      if (cause === C_LAPSE) {
        tally.byCause.lapse++;
        sinceNs = ops.compNs[sinceOp]! + this.visibilityTimeoutNs;
        since = SINCE_LAPSE;
      } else if (cause === C_NACK) {
        tally.byCause.nack++;
        sinceNs = ops.compNs[sinceOp]!;
        since = SINCE_NACK;
      } else {
        tally.byCause.fault++;
        tally.perFault[fault]!++;
        const fi = this.faults[fault]!;
        sinceNs = Number.isFinite(fi.endNs) ? fi.endNs : fi.time.compNs;
        since = SINCE_FAULT;
        if (cause === C_FORGET) {
          tally.explainedDuplicatesTotal++;
          if (tally.explainedDuplicates.length < this.listMax) {
            tally.explainedDuplicates.push({ msg: this.run.msgs.name(this.msg), path: this.run.topics.name(this.topic), deliveryOp: ops.invIdx[d]!, ackOp: ops.invIdx[sinceOp]!, faultOp: ops.invIdx[fi.op]! });
          }
        } else if (cause === C_RECOPY) {
          tally.explainedRecopiesTotal++;
          if (tally.explainedRecopies.length < this.listMax) {
            tally.explainedRecopies.push({ msg: this.run.msgs.name(this.msg), path: this.run.topics.name(this.topic), deliveryOp: ops.invIdx[d]!, sourceOp: ops.invIdx[sinceOp]!, faultOp: ops.invIdx[fi.op]! });
          }
        }
      }
    }
    if (Number.isFinite(sinceNs)) {
      this.lagMs[d] = Math.max(0, ops.compNs[d]! - sinceNs) / MS;
      this.lagSince[d] = since;
    }
  }

  // ---- step 6: liveness against the final drain ----

  /** Settlement (the last 204: an ack a fault made the broker forget did not settle for good) and availability. */
  recordTimes(): void {
    const ops = this.ops;
    const rows = this.index.opRows;
    const settleNs = this.times.settleNs;
    const p = this.pair;
    for (let k = this.opsFrom; k < this.opsTo; k++) {
      const op = rows[k]!;
      if ((ops.f[op] === F_ACK || ops.f[op] === F_DEAD_LETTER) && ops.outcome[op] === O_OK && (settleNs[p] === Infinity || ops.compNs[op]! > settleNs[p]!)) {
        settleNs[p] = ops.compNs[op]!;
      }
    }
    if (this.produceOk) this.times.availableNs[p] = this.produceCompOkNs + this.delayNs;
  }

  /** lost: owed, took effect, never delivered here after its produce began. */
  testLost(): void {
    const ops = this.ops;
    const t = this.topic;
    const firstDeliveryNs = this.index.firstDeliveryNs[this.msg]!;
    // On a dead-letter path only a move that surely happened owes a delivery.
    const tookEffect = this.produceOk || (!this.dlqPath && !this.produceFailedAll && firstDeliveryNs < Infinity);
    let deliveredHere = false;
    for (const d of this.deliveries) if (ops.compNs[d]! > this.produceInvNs) deliveredHere = true;
    // Delivered on its dead-letter topic: it was on this one (its deliveries here may all have
    // gone to consumes whose answers were lost), and moved.
    if (!deliveredHere && !this.dlqPath && this.topology.deadLetterOf[t]! >= 0) deliveredHere = deliveredOnDeadLetterPath(this);
    if (!tookEffect || deliveredHere) return;
    const produce = this.produce;
    const drain = this.index.drainOp[t]!;
    const effectiveNs = this.produceOk ? this.produceCompOkNs : firstDeliveryNs;
    const dueNs = effectiveNs + this.delayNs + this.slackNs;
    if (drain >= 0 && ops.invNs[drain]! > dueNs) {
      if (this.index.ambiguousLeaseNs[t]! > this.produceInvNs) {
        this.unknownPair(
          "lease-may-be-live-at-drain",
          [produce, this.index.ambiguousLeaseOp[t]!, drain],
          `not delivered, but an ambiguous consume may have leased it within a visibility timeout of the final drain`,
        );
      } else {
        const how = this.dlqPath ? " (dead-lettered)" : this.produceOk ? " (202)" : " (ambiguous, delivered elsewhere)";
        this.anomaly(
          "lost",
          [produce, drain],
          `produced${how} and never delivered on ${this.run.topics.name(t)}; the final drain began ${fmtMs(ops.invNs[drain]! - effectiveNs)} after ${this.dlqPath ? "the move was due" : "the produce completed"}`,
        );
      }
    } else {
      this.unknownPair("no-final-drain", drain >= 0 ? [produce, drain] : [produce], `due on ${this.run.topics.name(t)} but no empty consume of the path began after it was due`);
    }
  }

  /** stranded: delivered, never acked (204 or ambiguous) on any handle, and not delivered again. */
  testStranded(): void {
    const ops = this.ops;
    const rows = this.index.opRows;
    const t = this.topic;
    if (this.deliveries.length === 0) return;
    for (let k = this.opsFrom; k < this.opsTo; k++) {
      const op = rows[k]!;
      if ((ops.f[op] === F_ACK || ops.f[op] === F_DEAD_LETTER) && ops.outcome[op] !== O_FAIL) return;
    }
    const { endsNs, shown } = this.lastLeaseEnd();
    const last = this.deliveries[this.deliveries.length - 1]!;
    const drain = this.index.drainOp[t]!;
    if (drain >= 0 && ops.invNs[drain]! > endsNs + this.slackNs) {
      if (this.index.ambiguousLeaseNs[t]! > ops.invNs[last]!) {
        this.unknownPair(
          "lease-may-be-live-at-drain",
          [...shown, this.index.ambiguousLeaseOp[t]!, drain],
          `never acked and not delivered again, but an ambiguous consume may have leased it within a visibility timeout of the final drain`,
        );
      } else {
        this.anomaly(
          "stranded",
          [...shown, drain],
          `delivered, never acked, and not delivered again although the final drain began ${fmtMs(ops.invNs[drain]! - endsNs)} after its lease surely ended`,
        );
      }
    } else if (!this.invalid) {
      this.unknownPair(
        "no-final-drain",
        drain >= 0 ? [...shown, drain] : shown,
        `delivered and never acked, but no empty consume of ${this.run.topics.name(t)} began after its lease surely ended`,
      );
    }
  }

  /**
   * When the last delivery's lease surely ended: its completion (or that of its last extend, even
   * ambiguous) plus the visibility timeout, or the completion of a nack of it that answered 204;
   * with the operations that show it.
   */
  lastLeaseEnd(): { endsNs: number; shown: number[] } {
    const ops = this.ops;
    const rows = this.index.opRows;
    const vt = this.visibilityTimeoutNs;
    const last = this.deliveries[this.deliveries.length - 1]!;
    const lastHandle = ops.delivery[last]!;
    let endsNs = ops.compNs[last]! + vt;
    let nackNs = Infinity;
    const shown = [last];
    for (let k = this.opsFrom; k < this.opsTo; k++) {
      const op = rows[k]!;
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
    return { endsNs, shown };
  }
}
