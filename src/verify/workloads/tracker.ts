// What the driver knows about a run while it records it: counts for the progress line, the
// leases that may still be live (so the final drain starts only once every one of them surely
// ended), and for e2e every delivery of every message (any duplicate fails the run).
//
// Design note. The tracker sees each line the recorder writes, with the recorder's time, and
// nothing else: it is a second reader of the history, kept in memory, not a second source of truth.
// Its lease bookkeeping errs on the side of waiting: a lease counts as possibly live from the
// completion of its delivery (or of its last extend, whatever that extend answered) until a visibility
// timeout later, unless an ack or nack answered 204 or the handle answered 410. An ambiguous
// consume may hold a lease the driver never saw, for a visibility timeout after its completion.
// Memory: one entry per unsettled delivery and, for e2e, per message; both are bounded by
// TRACKED_MAX, past which the tracker stops itemising and falls back to "wait a full visibility
// timeout after the last consume" (still safe, only slower).

import { HEALING_FAULT_KINDS } from "../history/types.js";
import type { CompletionType } from "./protocol.js";

/** Entries per map at most (unsettled deliveries; e2e messages). */
export const TRACKED_MAX = 2_000_000;

interface OpenOp {
  f: string;
  value: Record<string, unknown>;
}

interface LeaseInfo {
  topic: string;
  /** Run-clock ns from which the lease may last a visibility timeout. */
  fromNs: number;
}

export interface TrackerCounts {
  /** Completed operations by f. */
  completed: Record<string, number>;
  produceOk: number;
  produceFail: number;
  produceInfo: number;
  /** Produces refused with 429. */
  produce429: number;
  deliveries: number;
  emptyConsumes: number;
  ackOk: number;
  settle410: number;
  replays: number;
  /** Fault operations completed, healing included (start, resume, heal). */
  faults: number;
  /** Faults injected (terminate, kill, power-loss, pause, cut, latency), healing excluded. */
  faultsInjected: number;
  faultsFailed: number;
}


export class RunTracker {
  readonly counts: TrackerCounts = {
    completed: {},
    produceOk: 0,
    produceFail: 0,
    produceInfo: 0,
    produce429: 0,
    deliveries: 0,
    emptyConsumes: 0,
    ackOk: 0,
    settle410: 0,
    replays: 0,
    faults: 0,
    faultsInjected: 0,
    faultsFailed: 0,
  };
  private readonly open = new Map<string, OpenOp>();
  private readonly leases = new Map<string, LeaseInfo>();
  /** Per topic: the latest completion of an ambiguous consume (it may hold an unseen lease). */
  private readonly ambiguousConsumeNs = new Map<string, number>();
  /** Per topic: the latest completion of any consume (the fallback when itemising stopped). */
  private readonly lastConsumeNs = new Map<string, number>();
  private overflowed = false;
  /** Messages acked with a 204 at least once (bounded). */
  private readonly acked = new Set<string>();
  private ackedOverflow = 0;

  /** Known-set runs only: deliveries per message (and path, off the main topic), produced messages. */
  readonly knownSet: boolean;
  readonly deliveryCount = new Map<string, number>();
  readonly producedOk = new Set<string>();
  readonly duplicates: string[] = [];
  /** e2e: messages in producedOk not yet acked (kept as a count: checked ten times a second). */
  private producedUnacked = 0;

  /** Duplicates on this topic are named by message id alone; on others, with the topic. */
  private readonly mainTopic: string;

  constructor(opts: { knownSet: boolean; mainTopic?: string }) {
    this.knownSet = opts.knownSet;
    this.mainTopic = opts.mainTopic ?? "t";
  }

  invoke(p: string, f: string, value: Record<string, unknown>): void {
    this.open.set(p, { f, value });
  }

  complete(p: string, type: CompletionType, value: Record<string, unknown>, timeNs: number): void {
    const op = this.open.get(p);
    if (op === undefined) return;
    this.open.delete(p);
    const c = this.counts;
    c.completed[op.f] = (c.completed[op.f] ?? 0) + 1;
    const topic = op.value["topic"] as string;
    switch (op.f) {
      case "produce":
        if (type === "ok") {
          c.produceOk++;
          const m = op.value["msg"] as string;
          if (this.knownSet && this.producedOk.size < TRACKED_MAX) {
            this.producedOk.add(m);
            // A delivery (and its ack) can complete before its produce's answer is recorded.
            if (!this.acked.has(m)) this.producedUnacked++;
          }
        } else if (type === "fail") {
          c.produceFail++;
          if (value["status"] === 429) c.produce429++;
        } else c.produceInfo++;
        break;
      case "consume": {
        this.lastConsumeNs.set(topic, timeNs);
        if (type !== "ok") {
          if (type === "info") this.ambiguousConsumeNs.set(topic, timeNs);
          break;
        }
        const msg = value["msg"];
        if (msg === null) {
          c.emptyConsumes++;
          break;
        }
        c.deliveries++;
        this.setLease(String(value["delivery"]), { topic, fromNs: timeNs });
        if (this.knownSet) {
          // Per path: a child's copy is a delivery of its own, not a duplicate of the parent's.
          const m = topic === this.mainTopic ? String(msg) : `${String(msg)} on ${topic}`;
          const n = (this.deliveryCount.get(m) ?? 0) + 1;
          if (n > 1 || this.deliveryCount.size < TRACKED_MAX) this.deliveryCount.set(m, n);
          if (n === 2 && this.duplicates.length < 100) this.duplicates.push(m);
        }
        break;
      }
      case "ack":
      case "nack":
      case "extend":
      case "dead-letter": {
        const delivery = String(op.value["delivery"]);
        const status = value["status"];
        if (status === 410) c.settle410++;
        if (type === "ok" && op.f === "ack") {
          c.ackOk++;
          const m = String(op.value["msg"]);
          if (!this.acked.has(m)) {
            if (this.acked.size < TRACKED_MAX) {
              this.acked.add(m);
              if (this.producedOk.has(m)) this.producedUnacked--;
            } else this.ackedOverflow++;
          }
        }
        if ((type === "ok" && op.f !== "extend") || status === 410) {
          // Settled, ended by a nack, or not the live lease any more: nothing can hold it.
          this.leases.delete(delivery);
        } else if (op.f === "extend" || type === "info") {
          // An extend, or an ambiguous settle that may not have landed: the lease may run on.
          const l = this.leases.get(delivery);
          if (l !== undefined && op.f === "extend") l.fromNs = timeNs;
        }
        break;
      }
      case "replay":
        c.replays++;
        break;
      case "fault":
        c.faults++;
        if (!HEALING_FAULT_KINDS.has(String(op.value["kind"]))) c.faultsInjected++;
        if (type !== "ok") c.faultsFailed++;
        break;
    }
  }

  private setLease(delivery: string, info: LeaseInfo): void {
    if (this.leases.size >= TRACKED_MAX) {
      this.overflowed = true;
      return;
    }
    this.leases.set(delivery, info);
  }

  /** Operations of kind `f` invoked and not yet completed. */
  openCount(f: string): number {
    let n = 0;
    for (const o of this.open.values()) if (o.f === f) n++;
    return n;
  }

  /** Messages acked with a 204 so far. */
  get ackedMessages(): number {
    return this.acked.size + this.ackedOverflow;
  }

  /** e2e: whether every message that got a 202 has been acked with a 204. */
  allProducedAcked(): boolean {
    return this.producedUnacked === 0;
  }

  producedNotAcked(max: number): string[] {
    const out: string[] = [];
    for (const m of this.producedOk) {
      if (out.length >= max) break;
      if (!this.acked.has(m)) out.push(m);
    }
    return out;
  }

  /**
   * The run-clock time after which no lease on `topic` can still be live: what the final drain of
   * the topic must wait for. `vtNs` is the topic's visibility timeout, `nowNs` the run clock now.
   */
  leasesEndNs(topic: string, vtNs: number, nowNs: number): number {
    let end = 0;
    if (this.overflowed) end = Math.max(end, (this.lastConsumeNs.get(topic) ?? 0) + vtNs);
    end = Math.max(end, (this.ambiguousConsumeNs.get(topic) ?? -Infinity) + vtNs);
    for (const l of this.leases.values()) if (l.topic === topic) end = Math.max(end, l.fromNs + vtNs);
    // A consume still open (its worker died mid-request) may have taken a lease at any time up to now.
    for (const o of this.open.values()) if (o.f === "consume" && o.value["topic"] === topic) end = Math.max(end, nowNs + vtNs);
    return end;
  }
}
