// From collected columns to a verdict: the driver over the units that judge.
//
// Steps, each linear in the history (the per-pair search is bounded by a step cap):
//   1. faults: evidence and windows (faults.ts); a fault that needs evidence and has none is an
//      unknown of the run;
//   2. the run indexed: the topology per topic (topology.ts), and per message its produces, per
//      (message, path) pair its operations, per path its final drain (pair-index.ts);
//   3. every pair judged in turn (pair-judgement.ts: direct tests, the order search of pair.ts,
//      re-copies, lost and stranded, each delivery's cause and lag);
//   4. replays: skip and nonmonotonic (replays.ts);
//   5. measures: lag, silence after each fault, counts and time series (measures.ts), and the
//      report with its verdict.
//
// Pure: RunData in, Report out.

import { O_FAIL, O_INFO, O_OK, O_OPEN, type RunData } from "./collect.js";
import { analyseFaults, type FaultInfo } from "./faults.js";
import { Findings } from "./findings.js";
import { buildMeasures } from "./measures.js";
import { PairIndex } from "./pair-index.js";
import { PairJudgement } from "./pair-judgement.js";
import { judgeReplays } from "./replays.js";
import { Topology } from "./topology.js";
import type { CheckOptions, FaultSummary, Report, Verdict } from "./types.js";

export const SLACK_MS_DEFAULT = 50;
export const SEARCH_STEPS_MAX_DEFAULT = 20_000;
export const LIST_MAX_DEFAULT = 1000;

const MS = 1e6;

export function judge(run: RunData, options: CheckOptions = {}): Report {
  const slackMs = options.slackMs ?? SLACK_MS_DEFAULT;
  const slackNs = slackMs * MS;
  const stepsMax = options.searchStepsMax ?? SEARCH_STEPS_MAX_DEFAULT;
  const listMax = options.listMax ?? LIST_MAX_DEFAULT;
  const ops = run.ops;
  const idx = (op: number): number => ops.invIdx[op]!;
  const findings = new Findings(listMax);

  const faults = analyseFaults(run);
  for (const f of faults) {
    if (!f.needsEvidence || f.evidence) continue;
    const node = f.node >= 0 ? run.nodes.name(f.node) : "its node";
    findings.unknown({
      reason: "unevidenced-fault",
      msg: null,
      path: null,
      ops: [idx(f.op)],
      explanation: `${f.kind} of ${node}: no later boot id other than the one before it was reported, so the fault may not have happened`,
    });
  }

  const topology = new Topology(run);
  const index = new PairIndex(run, topology, slackNs);
  const judgement = new PairJudgement(run, topology, index, faults, findings, { slackNs, stepsMax, listMax });
  for (let p = 0; p < index.nPairs; p++) judgement.judge(p);

  judgeReplays(run, findings);

  const measures = buildMeasures(run, options, faults, judgement.times, judgement.lagMs, judgement.lagSince, findings.anomalies);
  const perFault = judgement.redeliveries.perFault;
  const byFault = faults.map((f, i) => ({ op: idx(f.op), kind: f.kind, count: perFault[i]! })).filter((x) => x.count > 0);
  const { verdict, reason } = verdictOf(findings, `${index.nPairs} pairs, ${faults.length} faults`);
  const tally = judgement.redeliveries;

  return {
    format: "narad-check/1",
    verdict,
    reason,
    history: { events: run.events, operations: ops.length, durationNs: run.lastTimeNs },
    config: configReport(run, slackMs),
    counts: {
      operations: measures.operationCounts,
      consumeEmpty: measures.consumeEmpty,
      gone410: measures.gone410,
      messages: run.msgs.size,
      deliveries: index.deliveries,
      pairs: { total: index.nPairs, ...judgement.pairs },
    },
    anomalies: findings.anomalies,
    anomalyCounts: findings.anomalyCounts,
    anomaliesOmitted: findings.anomaliesOmitted,
    unknowns: findings.unknowns,
    unknownCounts: findings.unknownCounts,
    unknownsOmitted: findings.unknownsOmitted,
    faults: summariseFaults(run, faults, measures.silenceMs, perFault),
    redeliveries: {
      total: tally.total,
      byCause: tally.byCause,
      byFault,
      explainedDuplicates: tally.explainedDuplicates,
      explainedDuplicatesTotal: tally.explainedDuplicatesTotal,
      explainedRecopies: tally.explainedRecopies,
      explainedRecopiesTotal: tally.explainedRecopiesTotal,
    },
    lag: measures.lag,
    series: measures.series,
    timeline: measures.timeline,
    search: { stepsMax, capHits: judgement.capHits, stepsMostInOnePair: judgement.stepsMostInOnePair },
  };
}

/** The config the run was judged by, and the slack. */
function configReport(run: RunData, slackMs: number): Report["config"] {
  const cfg = run.config;
  const children: Report["config"]["children"] = {};
  for (const [parent, list] of Object.entries(cfg.children ?? {})) {
    children[parent] = list.map((c) => ({ topic: c.topic, kind: c.kind, delayMs: c.delay_ms ?? null }));
  }
  const topics: Report["config"]["topics"] = {};
  for (const [name, tc] of Object.entries(cfg.topics)) {
    topics[name] = { partitions: tc.partitions, visibilityTimeoutMs: tc.visibility_timeout_ms ?? cfg.visibility_timeout_ms };
  }
  return { ackFlushMs: cfg.ack_flush_ms, ackSyncMs: cfg.ack_sync_ms, visibilityTimeoutMs: cfg.visibility_timeout_ms, slackMs, topics, children };
}

/** One summary per fault: what it touched, how it ended, its evidence, the silence after it and the redeliveries it explains. */
function summariseFaults(run: RunData, faults: readonly FaultInfo[], silenceMs: ReadonlyArray<number | null>, perFault: Int32Array): FaultSummary[] {
  const ops = run.ops;
  const idx = (op: number): number => ops.invIdx[op]!;
  return faults.map((f, i) => {
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
      silenceMs: silenceMs[i] ?? null,
      redeliveries: perFault[i]!,
    };
  });
}

/** invalid on any anomaly, else unknown on any unknown, else valid; the reason counts them by name. */
function verdictOf(findings: Findings, judged: string): { verdict: Verdict; reason: string } {
  const anomalyTotal = Object.values(findings.anomalyCounts).reduce((s, n) => s + (n ?? 0), 0);
  const unknownTotal = Object.values(findings.unknownCounts).reduce((s, n) => s + (n ?? 0), 0);
  const list = (counts: Partial<Record<string, number>>): string =>
    Object.entries(counts)
      .map(([k, n]) => `${n} ${k}`)
      .join(", ");
  if (anomalyTotal > 0) return { verdict: "invalid", reason: `${anomalyTotal} ${anomalyTotal === 1 ? "anomaly" : "anomalies"}: ${list(findings.anomalyCounts)}` };
  if (unknownTotal > 0) return { verdict: "unknown", reason: `cannot judge all of the run: ${list(findings.unknownCounts)}` };
  return { verdict: "valid", reason: `every pair has a legal order and every due pair was drained (${judged})` };
}
