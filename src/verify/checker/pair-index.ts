// The run indexed for the pair judgement, built once in a few linear passes:
//   - per message: its first produce, how many produces it had (a repeated id has several, listed
//     in `repeatedProduces`), and its earliest delivery on any path;
//   - per (message, path) pair: the message, the path, whether a produce owes it (its topic and
//     the topic's children in the config) and its operations (deliveries, acks, extends, nacks) in
//     op order, as slices of one flat array (a counting sort by pair); a pair nothing owes exists
//     when a delivery or an ack names it;
//   - per path: its final drain (the last empty consume to begin) and the latest lease start of an
//     ambiguous consume whose lease may outlive the drain's start.
// A message's pairs are a linked list (a message has few paths).
//
// Next wave (SPEC "Idempotent producers", "Dead letters"):
//   - per message, whether every produce of it carried one (producer, sequence): its re-sends are
//     then one produce, and where it was stored (produce oks, deliveries and replays on its
//     topic) is gathered for the duplicate-produce rule;
//   - per pair on a topic with a dead-letter topic D, a pair (message, D) owed only if the first
//     one is dead-lettered (`owed` 2), linked to it by `sourceOf`; dead-letter ops (acks with
//     dead_letter=true) join their pair's operations like acks.

import { F_ACK, F_CONSUME, F_DEAD_LETTER, F_EXTEND, F_NACK, F_PRODUCE, O_INFO, O_OK, O_OPEN, type RunData } from "./collect.js";
import type { Topology } from "./topology.js";

export class PairIndex {
  // ---- messages ----
  readonly produceOf: Int32Array;
  readonly produceCount: Int32Array;
  /** Every produce of a message produced more than once, in op order. */
  readonly repeatedProduces = new Map<number, number[]>();
  readonly firstDeliveryNs: Float64Array;
  /** Deliveries (consume oks with a message) in the whole run. */
  readonly deliveries: number;
  /** 1 when every produce of the message carried one (producer, sequence): an idempotent message. */
  readonly oneSequence: Uint8Array;
  /** Consumes on each path that may have leased a message unseen (info or never completed), by invoke time. */
  readonly ambiguousConsumeNs: Float64Array[];

  // ---- pairs ----
  nPairs = 0;
  msgOf: Int32Array;
  topicOf: Int32Array;
  /** 1 when a produce owes the pair (its topic or a child of it); 2 on a dead-letter path, owed only once the source pair is dead-lettered. */
  owed: Uint8Array;
  /** For a dead-letter path pair, the pair it is the dead letter of; -1 otherwise. */
  sourceOf: Int32Array;
  private nextOfMsg: Int32Array;
  private readonly firstOfMsg: Int32Array;
  /** The pair's operations are opRows[opsStart[p] .. opsStart[p + 1]). */
  readonly opsStart: Int32Array;
  readonly opRows: Int32Array;

  // ---- paths ----
  readonly drainOp: Int32Array;
  readonly ambiguousLeaseNs: Float64Array;
  readonly ambiguousLeaseOp: Int32Array;

  private readonly run: RunData;

  constructor(run: RunData, topology: Topology, slackNs: number) {
    this.run = run;
    const ops = run.ops;
    const nOps = ops.length;
    const nMsgs = run.msgs.size;
    this.produceOf = new Int32Array(nMsgs).fill(-1);
    this.produceCount = new Int32Array(nMsgs);
    this.firstDeliveryNs = new Float64Array(nMsgs).fill(Infinity);
    this.oneSequence = new Uint8Array(nMsgs);
    let deliveries = 0;
    for (let op = 0; op < nOps; op++) {
      const f = ops.f[op]!;
      if (f === F_PRODUCE) {
        const m = ops.msg[op]!;
        if (this.produceOf[m] === -1) {
          this.produceOf[m] = op;
          this.oneSequence[m] = ops.producer[op]! >= 0 ? 1 : 0;
        } else {
          const first = this.produceOf[m]!;
          if (ops.producer[op] !== ops.producer[first] || ops.sequence[op] !== ops.sequence[first]) this.oneSequence[m] = 0;
          let l = this.repeatedProduces.get(m);
          if (l === undefined) this.repeatedProduces.set(m, (l = [this.produceOf[m]!]));
          l.push(op);
        }
        this.produceCount[m]!++;
      } else if (f === F_CONSUME && ops.outcome[op] === O_OK && ops.msg[op]! >= 0) {
        deliveries++;
        const m = ops.msg[op]!;
        if (ops.compNs[op]! < this.firstDeliveryNs[m]!) this.firstDeliveryNs[m] = ops.compNs[op]!;
      }
    }
    this.deliveries = deliveries;

    const cap = Math.max(1024, nMsgs * 2);
    this.msgOf = new Int32Array(cap);
    this.topicOf = new Int32Array(cap);
    this.nextOfMsg = new Int32Array(cap);
    this.owed = new Uint8Array(cap);
    this.sourceOf = new Int32Array(cap).fill(-1);
    this.firstOfMsg = new Int32Array(nMsgs).fill(-1);
    for (let op = 0; op < nOps; op++) {
      if (ops.f[op] !== F_PRODUCE) continue;
      const m = ops.msg[op]!;
      const t = ops.topic[op]!;
      // pairOf may grow the arrays: take the index before naming the array.
      const own = this.pairOf(m, t);
      this.owed[own] = 1;
      this.deadLetterPair(m, t, own, topology);
      for (const c of topology.childrenOf[t]!) {
        const child = this.pairOf(m, c);
        this.owed[child] = 1;
        this.deadLetterPair(m, c, child, topology);
      }
    }
    // Operations per pair, as a flat array ordered by pair then op (counting sort).
    const opPair = new Int32Array(nOps).fill(-1);
    for (let op = 0; op < nOps; op++) {
      const f = ops.f[op]!;
      if (f === F_CONSUME) {
        if (ops.outcome[op] === O_OK && ops.msg[op]! >= 0) opPair[op] = this.pairOf(ops.msg[op]!, ops.topic[op]!);
      } else if (f === F_ACK || f === F_EXTEND || f === F_NACK || f === F_DEAD_LETTER) {
        opPair[op] = this.pairOf(ops.msg[op]!, ops.topic[op]!);
      }
    }
    const nPairs = this.nPairs;
    const start = new Int32Array(nPairs + 1);
    for (let op = 0; op < nOps; op++) if (opPair[op]! >= 0) start[opPair[op]! + 1]!++;
    for (let p = 0; p < nPairs; p++) start[p + 1]! += start[p]!;
    const rows = new Int32Array(start[nPairs]!);
    const fill = start.slice(0, nPairs);
    for (let op = 0; op < nOps; op++) {
      const p = opPair[op]!;
      if (p >= 0) rows[fill[p]!++] = op;
    }
    this.opsStart = start;
    this.opRows = rows;

    const nTopics = run.topics.size;
    const ambiguous: number[][] = Array.from({ length: nTopics }, () => []);
    for (let op = 0; op < nOps; op++) {
      if (ops.f[op] === F_CONSUME && (ops.outcome[op] === O_INFO || ops.outcome[op] === O_OPEN)) ambiguous[ops.topic[op]!]!.push(ops.invNs[op]!);
    }
    this.ambiguousConsumeNs = ambiguous.map((a) => Float64Array.from(a));
    this.drainOp = new Int32Array(nTopics).fill(-1);
    for (let op = 0; op < nOps; op++) {
      if (ops.f[op] !== F_CONSUME || ops.outcome[op] !== O_OK || ops.msg[op] !== -1) continue;
      const t = ops.topic[op]!;
      const d = this.drainOp[t]!;
      if (d < 0 || ops.invNs[op]! >= ops.invNs[d]!) this.drainOp[t] = op;
    }
    // The latest possible lease start of an ambiguous consume whose lease may outlive the drain's start.
    this.ambiguousLeaseNs = new Float64Array(nTopics).fill(-Infinity);
    this.ambiguousLeaseOp = new Int32Array(nTopics).fill(-1);
    for (let op = 0; op < nOps; op++) {
      if (ops.f[op] !== F_CONSUME) continue;
      const o = ops.outcome[op]!;
      if (o !== O_INFO && o !== O_OPEN) continue;
      const t = ops.topic[op]!;
      const d = this.drainOp[t]!;
      if (d < 0 || ops.invNs[op]! >= ops.compNs[d]!) continue;
      const latestLease = Math.min(ops.compNs[op]!, ops.compNs[d]!);
      if (latestLease + topology.visibilityTimeoutNs[t]! + slackNs > ops.invNs[d]! && latestLease > this.ambiguousLeaseNs[t]!) {
        this.ambiguousLeaseNs[t] = latestLease;
        this.ambiguousLeaseOp[t] = op;
      }
    }
  }

  /** The nodes that delivered message `m` on path `t` (the owners of its partition there). */
  deliverersOf(m: number, t: number): number[] {
    const ops = this.run.ops;
    const nodes: number[] = [];
    for (let p = this.firstOfMsg[m]!; p >= 0; p = this.nextOfMsg[p]!) {
      if (this.topicOf[p] !== t) continue;
      for (let i = this.opsStart[p]!; i < this.opsStart[p + 1]!; i++) {
        const op = this.opRows[i]!;
        if (ops.f[op] === F_CONSUME && ops.node[op]! >= 0 && !nodes.includes(ops.node[op]!)) nodes.push(ops.node[op]!);
      }
    }
    return nodes;
  }

  /**
   * Where an idempotent message was stored on its own topic: [partition, offset, op] for each
   * produce ok, delivery and replay line that names it there (in op order, replays last).
   */
  storedAt(m: number): number[] {
    const run = this.run;
    const ops = run.ops;
    const out: number[] = [];
    const produce = this.produceOf[m]!;
    const t = ops.topic[produce]!;
    const produces = this.repeatedProduces.get(m) ?? [produce];
    for (const pr of produces) if (ops.outcome[pr] === O_OK) out.push(ops.partition[pr]!, ops.offset[pr]!, pr);
    for (let p = this.firstOfMsg[m]!; p >= 0; p = this.nextOfMsg[p]!) {
      if (this.topicOf[p] !== t) continue;
      for (let i = this.opsStart[p]!; i < this.opsStart[p + 1]!; i++) {
        const op = this.opRows[i]!;
        if (ops.f[op] === F_CONSUME) out.push(ops.partition[op]!, ops.offset[op]!, op);
      }
    }
    for (const r of this.replaysOf(m)) out.push(r);
    return out;
  }

  private replayIndex: Map<number, number[]> | null = null;

  /** Replay lines of idempotent messages on their own topic, [partition, offset, op] each (built on first use). */
  private replaysOf(m: number): number[] {
    if (this.replayIndex === null) {
      const run = this.run;
      const ops = run.ops;
      const index = new Map<number, number[]>();
      for (const r of run.replays) {
        for (let i = 0; i < r.msgs.length; i++) {
          const msg = r.msgs[i]!;
          if (msg < 0 || !this.oneSequence[msg] || ops.topic[this.produceOf[msg]!] !== ops.topic[r.op]) continue;
          let l = index.get(msg);
          if (l === undefined) index.set(msg, (l = []));
          l.push(ops.partition[r.op]!, r.offsets[i]!, r.op);
        }
      }
      this.replayIndex = index;
    }
    return this.replayIndex.get(m) ?? [];
  }

  /** The pair of (m, t), or -1 when there is none. */
  findPair(m: number, t: number): number {
    for (let p = this.firstOfMsg[m]!; p >= 0; p = this.nextOfMsg[p]!) if (this.topicOf[p] === t) return p;
    return -1;
  }

  /** Makes the dead-letter path pair of (m, t) when t has a dead-letter topic. */
  private deadLetterPair(m: number, t: number, source: number, topology: Topology): void {
    const d = topology.deadLetterOf[t]!;
    if (d < 0) return;
    const p = this.pairOf(m, d);
    if (this.owed[p] === 1) return; // also produced there: owed for that reason
    this.owed[p] = 2;
    this.sourceOf[p] = source;
  }

  /** The pair of (m, t), made on first sight. */
  private pairOf(m: number, t: number): number {
    for (let p = this.firstOfMsg[m]!; p >= 0; p = this.nextOfMsg[p]!) if (this.topicOf[p] === t) return p;
    if (this.nPairs === this.msgOf.length) {
      const cap = this.msgOf.length * 2;
      this.msgOf = grown(this.msgOf, new Int32Array(cap));
      this.topicOf = grown(this.topicOf, new Int32Array(cap));
      this.nextOfMsg = grown(this.nextOfMsg, new Int32Array(cap));
      this.owed = grown(this.owed, new Uint8Array(cap));
      const sources = new Int32Array(cap).fill(-1);
      sources.set(this.sourceOf);
      this.sourceOf = sources;
    }
    const p = this.nPairs++;
    this.msgOf[p] = m;
    this.topicOf[p] = t;
    this.nextOfMsg[p] = this.firstOfMsg[m]!;
    this.owed[p] = 0;
    this.sourceOf[p] = -1;
    this.firstOfMsg[m] = p;
    return p;
  }
}

function grown<T extends Int32Array | Uint8Array>(a: T, b: T): T {
  b.set(a);
  return b;
}
