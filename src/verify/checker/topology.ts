// The run's topology as the pair judgement reads it, per topic (the collector's interned ids):
// its visibility timeout, its children and parent, a delay child's delay, and for a child path
// the nodes a copy batch may have gone through and how long its copier waits for an answer
// (the re-copy rule of recopy.ts). From the config line, plus the nodes seen delivering on a child
// path whose batches may be split over several owners (every child but a replica). Next wave: a
// topic's max_deliveries and dead-letter topic (SPEC "Dead letters").

import { F_CONSUME, O_OK, type RunData } from "./collect.js";

const MS = 1e6;

export class Topology {
  /** The topic's own visibility_timeout_ms, else the config's, in ns. */
  readonly visibilityTimeoutNs: Float64Array;
  /** A delay child's delay_ms in ns; 0 for every other topic. */
  readonly delayNs: Float64Array;
  readonly childrenOf: number[][];
  /** A child topic's parent; -1 for a topic that is no child. */
  readonly parentOf: Int32Array;
  /** Per child path: the remote cluster's nodes its config lists, and the nodes that delivered on it when its batches may be split. */
  readonly viaNodesOf: number[][];
  /** Per child path: how long its copier may wait for a copy's answer (its copy_timeout_ms, else the config's, else ack_flush_ms), ns. */
  readonly answerNsOf: Float64Array;
  /** A topic's max_deliveries; Infinity when unlimited (or none given). */
  readonly maxDeliveries: Float64Array;
  /** A topic's dead_letter_topic; -1 when it has none. */
  readonly deadLetterOf: Int32Array;

  constructor(run: RunData) {
    const cfg = run.config;
    const ops = run.ops;
    const nTopics = run.topics.size;
    this.visibilityTimeoutNs = new Float64Array(nTopics).fill(cfg.visibility_timeout_ms * MS);
    for (const [name, t] of Object.entries(cfg.topics)) {
      if (t.visibility_timeout_ms !== undefined) this.visibilityTimeoutNs[run.topics.find(name)] = t.visibility_timeout_ms * MS;
    }
    this.maxDeliveries = new Float64Array(nTopics).fill(Infinity);
    this.deadLetterOf = new Int32Array(nTopics).fill(-1);
    for (const [name, t] of Object.entries(cfg.topics)) {
      if (typeof t.dead_letter_topic !== "string") continue;
      const id = run.topics.find(name);
      this.deadLetterOf[id] = run.topics.find(t.dead_letter_topic);
      if (typeof t.max_deliveries === "number") this.maxDeliveries[id] = t.max_deliveries;
    }
    this.delayNs = new Float64Array(nTopics);
    this.childrenOf = Array.from({ length: nTopics }, () => []);
    this.parentOf = new Int32Array(nTopics).fill(-1);
    this.viaNodesOf = Array.from({ length: nTopics }, () => []);
    this.answerNsOf = new Float64Array(nTopics).fill((cfg.copy_timeout_ms ?? cfg.ack_flush_ms) * MS);
    const splitBatches = new Uint8Array(nTopics);
    for (const [parent, list] of Object.entries(cfg.children ?? {})) {
      const p = run.topics.find(parent);
      for (const c of list) {
        const t = run.topics.find(c.topic);
        this.childrenOf[p]!.push(t);
        this.parentOf[t] = p;
        if (c.kind === "delay") this.delayNs[t] = (c.delay_ms ?? 0) * MS;
        for (const n of c.nodes ?? []) this.viaNodesOf[t]!.push(run.nodes.find(n));
        if (c.copy_timeout_ms !== undefined) this.answerNsOf[t] = c.copy_timeout_ms * MS;
        // A copy batch may go to several owners of the child's partitions, except for a replica.
        if (c.kind !== "replica") splitBatches[t] = 1;
      }
    }
    // For those children, every node that delivered on the path owns (owned) a partition of it.
    for (let op = 0; op < ops.length; op++) {
      if (ops.f[op] !== F_CONSUME || ops.outcome[op] !== O_OK || ops.msg[op]! < 0) continue;
      const t = ops.topic[op]!;
      const via = this.viaNodesOf[t]!;
      if (this.parentOf[t]! >= 0 && splitBatches[t] && !via.includes(ops.node[op]!)) via.push(ops.node[op]!);
    }
  }

  /** Whether a message produced to `produceTopic` is owed on path `t`: its own topic or a child. */
  owes(produceTopic: number, t: number): boolean {
    return produceTopic === t || this.childrenOf[produceTopic]!.includes(t);
  }
}
