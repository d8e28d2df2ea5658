// Calibration: run every seeded broker bug against the workload that must expose it, and the
// correct build against the same workloads, and compare verdicts with what is expected.
//
// Design note. A checker that has never caught a real bug is untested (seed 002). Each bug of
// src/broker/seeded-bugs.ts (turned on only through NARAD_TEST_BUGS, with --dev or NARAD_TEST_MODE=1) gets a row naming the anomaly
// the checker must report; the correct build gets a row per workload configuration that must come
// back `valid`, so a workload that only "catches" bugs by flagging everything fails too.
// Rows are meant to be deterministic, not lucky:
//   - the lease bugs meet the prober's scripted scenarios (roles.ts), which provoke each one on a
//     private topic at a known moment, whatever the timing of the rest of the load;
//   - acks-not-persisted meets a graceful terminate + start, after which every acked message
//     comes back, and a terminate explains no duplicate;
//   - store-on-429 runs with limits.pending_sync_bytes at its 1 MiB minimum and big concurrent
//     produces, so some produces are refused; a row whose run saw no 429 cannot judge the bug and
//     says so (FAIL, "precondition") instead of passing by luck;
//   - ack-before-fsync needs a power loss while a 202-ed record still waits for its fsync: twelve
//     lanes of 16–64 KiB produces keep that window open most of the time (each fsync takes a
//     while, and produces arriving meanwhile are answered at once), and the run has three to five
//     power losses, each catching it with high probability (docs/verification-workloads.md has
//     the numbers). It is the one row that rests on timing; its precondition is that power losses
//     happened.
//   - the child-topic bugs meet the children workload's load cycle: the parent's owner and the
//     remote node are killed in the quiet window after a burst; the next burst is produced while
//     the remote node is down (child-skip-on-failure drops those copies: `lost` on the remote
//     path), and the parent's owner is back while the first burst's delay copies still wait
//     (delay-early-after-restart makes them at once: `early-delivery`), and the parent's owner
//     comes back copying the first burst again (copy-cursors-not-persisted: its cursors were never
//     written, so the copies already delivered and acked come twice, long before the kill: a
//     `duplicate-after-ack` no fault's window explains). Its precondition: both kills happened,
//     with evidence, and both nodes were started again.
//   - issue 14's bugs (ISSUE14_CALIBRATION_CASES, run by test/verify-issue14.test.ts beside the
//     main table, so the two long files run side by side): the idempotent workload's cut-kills
//     leave produces stored and unanswered by construction, for the SDK to re-send after the
//     restart (dedupe-forgets-after-restart: stored again, `duplicate-produce`); its
//     precondition: a cut-kill held an accepted message's answer, and its kill has evidence and
//     a start. The dead-letters workload nacks its poison messages a quarter of a visibility
//     timeout after each delivery, so many are between deliveries at every kill (delivery-counts-not-persisted: counted from 1 again, delivered past
//     max_deliveries, `delivered-after-dead-letter`), moves them at every step
//     (dead-letter-early: on the dead-letter topic after 2 of 3, `dead-lettered-early`;
//     dead-letter-settle-before-copy: a kill in the 500 ms between the settle and the copy loses
//     them, `lost` on the dead-letter path).
// Runs are sequential: on two cores, two runs at once would mostly measure each other.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { AnomalyName, Verdict } from "../checker/index.js";
import { runWorkload, type RunOptions, type RunProgress, type RunResult } from "./driver.js";
import { CHILDREN_CYCLE, type WorkloadName } from "./workloads.js";

export interface CalibrationCase {
  /** Short name of the configuration (also the run's directory). */
  config: string;
  workload: WorkloadName;
  /** The seeded bug, or null for the correct build. */
  bug: string | null;
  /** The anomaly the bug must show; a list when its shape may be judged as either (any one counts). */
  expect: { verdict: Verdict; anomaly: AnomalyName | readonly AnomalyName[] | null };
  options: Omit<RunOptions, "workload" | "outDir" | "seed" | "bugs" | "signal" | "onProgress">;
  /** Why the run cannot judge this row (a fault or refusal it needed never happened), or null. */
  precondition?: (r: RunResult) => string | null;
}

function faultsOk(r: RunResult, kind: string): number {
  return r.report?.faults.filter((f) => f.kind === kind && f.outcome === "ok").length ?? 0;
}

const needFault = (kind: string) => (r: RunResult) => (faultsOk(r, kind) > 0 ? null : `no ${kind} fault completed`);
/** A fault of `kind` on each node, and a start after it, each with its boot evidence. */
const needFaultOn = (kind: string, nodes: string[]) => (r: RunResult) => {
  for (const node of nodes) {
    const f = r.report?.faults.find((x) => x.kind === kind && x.node === node && x.outcome === "ok" && x.evidence === true);
    if (f === undefined) return `no ${kind} of ${node} with boot evidence`;
    if (!r.report!.faults.some((x) => x.kind === "start" && x.node === node && x.op > f.op && x.outcome === "ok")) return `${node} was not started again after its ${kind}`;
  }
  return null;
};
/**
 * A cut-kill that held at least one accepted message's answer, its kill evidenced by a later
 * boot, and the node started again: a re-send of a stored produce met the restarted node. The
 * count is in the cut's recorded value, so it is read from the history.
 */
function needUnansweredKill(r: RunResult): string | null {
  const held = new Set<string>();
  for (const line of readFileSync(r.historyPath, "utf8").split("\n")) {
    if (!line.includes('"accepted_unanswered"')) continue;
    const e = JSON.parse(line) as { type: string; value: { kind: string; node: string; accepted_unanswered?: number } };
    if (e.type === "ok" && e.value.kind === "cut" && (e.value.accepted_unanswered ?? 0) > 0) held.add(e.value.node);
  }
  if (held.size === 0) return "no cut-kill held the answer of an accepted message";
  return [...held].some((node) => needFaultOn("kill", [node])(r) === null) ? null : "no cut-kill's kill was evidenced and followed by a start";
}
const need429 = (r: RunResult) => (r.counts.produce429 > 0 ? null : "no produce was refused with 429");

const MiB = 1024 * 1024;

/** Configurations: each row below uses one, with or without a bug. */
const CONFIGS = {
  "chaos-terminate": {
    workload: "chaos",
    options: { faults: ["terminate"], faultIntervalMs: 1_500, faultHoldMs: 400, visibilityTimeoutMs: 2_000 },
    precondition: needFault("terminate"),
  },
  "power-loss": {
    workload: "power-loss",
    options: {
      faults: ["power-loss"],
      faultIntervalMs: 600,
      faultHoldMs: 100,
      visibilityTimeoutMs: 2_000,
      producers: 2,
      producerLanes: 6,
      rate: 3_000,
      payloadBytesMin: 16_384,
      payloadBytesMax: 65_536,
    },
    precondition: needFault("power-loss"),
  },
  "steady-overload": {
    workload: "steady",
    options: {
      prober: false,
      pendingSyncBytes: MiB,
      producers: 2,
      producerLanes: 4,
      rate: 400,
      payloadBytesMin: 192 * 1024,
      payloadBytesMax: 384 * 1024,
      visibilityTimeoutMs: 2_000,
      mix: { ack: 1, nack: 0, extend: 0, slow: 0, lapse: 0, late: 0 },
    },
    precondition: need429,
  },
  steady: {
    workload: "steady",
    options: { visibilityTimeoutMs: 2_000 },
  },
  // One load cycle is enough (cycle.ts): a burst, then the parent's owner (n1) and the remote
  // node (r1) killed in its quiet window; n1 is back before the burst's delay copies fall due,
  // and the next burst is produced while r1 is still down. Kills only: a graceful stop can take
  // a second on a loaded machine, which would leave less room for n1 to be back in time.
  children: {
    workload: "children",
    options: { faults: ["kill"], visibilityTimeoutMs: 2_000, durationS: 3, cycle: CHILDREN_CYCLE },
    precondition: needFaultOn("kill", ["n1", "r1"]),
  },
  // Replicated topics (3 nodes, 3 copies, quorum). lag-kill: the leader's line to its first
  // follower is cut, that follower falls behind while the leader commits with the other, then
  // the leader is killed: an election must take the complete follower (elect-incomplete-follower
  // takes the first live one: `lost`), and acks must have reached the followers
  // (acks-not-replicated: every message acked on the old leader comes back from the new one,
  // long past the replication window: `duplicate-after-ack`).
  "repl-lag-kill": {
    workload: "failover",
    options: { nodes: 3, replicationFactor: 3, acks: "quorum", faults: ["lag-kill"], faultIntervalMs: 1_500, faultsMin: 2, visibilityTimeoutMs: 2_000 },
    precondition: needFault("kill"),
  },
  // kill: one kill of the leader, late enough that most acks of the run were taken long before
  // it, by a leader whose followers were never down: a new leader that never got them
  // (acks-not-replicated) delivers them again past every window (`duplicate-after-ack`).
  "repl-kill": {
    workload: "failover",
    options: { nodes: 3, replicationFactor: 3, acks: "quorum", faults: ["kill"], faultIntervalMs: 4_500, faultsMin: 1, visibilityTimeoutMs: 2_000 },
    precondition: needFault("kill"),
  },
  // isolate: the leader cut from its followers and PostgreSQL while clients still reach it. Its
  // lease lapses and a follower takes over; from its lease deadline on it must hand out no lease
  // and take no ack (fenced-leader-answers goes on serving from its cached view: the acks it
  // answers 204 never reach the new leader, which delivers those messages again:
  // `duplicate-after-ack`, begun after the deadline the config's node_lease_ms gives).
  "repl-isolate": {
    workload: "failover",
    options: {
      nodes: 3,
      replicationFactor: 3,
      acks: "quorum",
      faults: ["isolate"],
      // A consume through a node waits this long on an owner it cannot reach before it skips
      // it, so the lanes are not all held by the cut while the leader is fenced.
      forwardTimeoutMs: 400,
      faultIntervalMs: 1_500,
      faultsMin: 3,
      // Three in four deliveries are acked 2-2.5 s later (0.4-0.5 of the visibility timeout): those
      // the leader handed out just before the cut are acked after its lease deadline.
      visibilityTimeoutMs: 5_000,
      mix: { ack: 1, nack: 0, extend: 0, slow: 3, lapse: 0, late: 0 },
    },
    precondition: needFault("cut"),
  },
  // lag-power-loss: the leader's line to its second follower cut, then power loss of the first
  // follower and a kill of the leader: what a quorum acknowledged rests on that follower's fsync
  // (follower-ack-before-fsync answers before it: `lost`). Big produces keep fsyncs long.
  "repl-lag-power-loss": {
    workload: "failover",
    options: {
      nodes: 3,
      replicationFactor: 3,
      acks: "quorum",
      faults: ["lag-power-loss"],
      faultIntervalMs: 1_500,
      faultsMin: 2,
      visibilityTimeoutMs: 2_000,
      producers: 2,
      producerLanes: 6,
      rate: 1_500,
      payloadBytesMin: 16_384,
      payloadBytesMax: 65_536,
      // One consumer lane, so a backlog builds: what the bug loses was never delivered (on a fast
      // machine the consumers took every record at once, and a lost record that was delivered
      // and acked before the failover leaves no trace; a fresh-clone CI run judged it valid).
      consumers: 1,
      consumerLanes: 1,
    },
    precondition: needFault("power-loss"),
  },
  // Issue 14 (ISSUE14_CALIBRATION_CASES). idempotent: a cut-kill every 1.5 s (the nemesis's
  // design note): the node's answers held until it accepted a message, then the node killed and
  // the held answers dropped, so every fault leaves produces stored and unanswered, which the
  // SDK re-sends after the restart. Plain kills left that to luck: a kill had to land between a
  // produce's fsync and its answer, and a fresh-clone CI run had none.
  idempotent: {
    workload: "idempotent",
    options: { faults: ["cut-kill"], faultIntervalMs: 1_500, faultHoldMs: 300, visibilityTimeoutMs: 2_000 },
    precondition: needUnansweredKill,
  },
  "dead-letters": {
    workload: "dead-letters",
    options: { faults: ["kill"], faultIntervalMs: 1_500, faultHoldMs: 300, visibilityTimeoutMs: 2_000 },
    precondition: needFault("kill"),
  },
} satisfies Record<string, { workload: WorkloadName; options: CalibrationCase["options"]; precondition?: CalibrationCase["precondition"] }>;

type ConfigName = keyof typeof CONFIGS;

function row(config: ConfigName, bug: string | null, anomaly: AnomalyName | readonly AnomalyName[] | null): CalibrationCase {
  const c = CONFIGS[config] as { workload: WorkloadName; options: CalibrationCase["options"]; precondition?: CalibrationCase["precondition"] };
  return {
    config,
    workload: c.workload,
    bug,
    expect: { verdict: bug === null ? "valid" : "invalid", anomaly },
    options: c.options,
    ...(c.precondition ? { precondition: c.precondition } : {}),
  };
}

/** The calibration table: every seeded bug with the anomaly it must show, and the correct build. */
export const CALIBRATION_CASES: readonly CalibrationCase[] = [
  row("chaos-terminate", null, null),
  row("chaos-terminate", "acks-not-persisted", "duplicate-after-ack"),
  row("power-loss", null, null),
  row("power-loss", "ack-before-fsync", "lost"),
  row("steady-overload", null, null),
  row("steady-overload", "store-on-429", "refused-delivered"),
  row("steady", null, null),
  row("steady", "early-lapse", "double-lease"),
  row("steady", "nack-drops", "stranded"),
  row("steady", "accept-replaced-handle", "double-lease"),
  row("steady", "replay-skip", "skip"),
  row("steady", "redeliver-acked", "duplicate-after-ack"),
  row("children", null, null),
  row("children", "child-skip-on-failure", "lost"),
  row("children", "delay-early-after-restart", "early-delivery"),
  row("children", "copy-cursors-not-persisted", "duplicate-after-ack"),
  row("repl-lag-kill", null, null),
  // Lost records that were delivered before the failover show only as a replay stepping over them.
  row("repl-lag-kill", "elect-incomplete-follower", ["lost", "skip"]),
  row("repl-kill", null, null),
  row("repl-kill", "acks-not-replicated", "duplicate-after-ack"),
  row("repl-isolate", null, null),
  // The fenced leader's 204 comes before or after the new leader's delivery: either shape.
  row("repl-isolate", "fenced-leader-answers", ["duplicate-after-ack", "double-lease"]),
  row("repl-lag-power-loss", null, null),
  row("repl-lag-power-loss", "follower-ack-before-fsync", ["lost", "skip"]),
];

/**
 * Issue 14's rows (idempotent producers and dead letters), kept apart from CALIBRATION_CASES so
 * that test/verify-issue14.test.ts runs them beside test/verify-calibrate.test.ts (two files at
 * a time) rather than after it; `narad verify calibrate` runs both lists.
 */
export const ISSUE14_CALIBRATION_CASES: readonly CalibrationCase[] = [
  row("idempotent", null, null),
  row("idempotent", "dedupe-forgets-after-restart", "duplicate-produce"),
  row("dead-letters", null, null),
  row("dead-letters", "dead-letter-early", "dead-lettered-early"),
  row("dead-letters", "delivery-counts-not-persisted", "delivered-after-dead-letter"),
  row("dead-letters", "dead-letter-settle-before-copy", "lost"),
];

export interface CalibrationRow {
  case: CalibrationCase;
  seed: number;
  verdict: Verdict | null;
  anomalies: Partial<Record<AnomalyName, number>>;
  unknowns: Record<string, number>;
  pass: boolean;
  /** Why it failed, when it did. */
  reason: string | null;
  /** Why its first run could not happen, when the row was run again (see calibrate()). */
  retried: string | null;
  outDir: string;
  durationMs: number;
}

export interface CalibrationOptions {
  outDir: string;
  durationS?: number;
  seed?: number;
  /** Run only the rows whose bug (or "none") or config is listed. */
  only?: string[];
  /** The rows to run (default CALIBRATION_CASES). */
  cases?: readonly CalibrationCase[];
  signal?: AbortSignal;
  onRowStart?: (c: CalibrationCase, index: number, total: number) => void;
  onRow?: (r: CalibrationRow) => void;
  onProgress?: (p: RunProgress) => void;
}

/** Seconds each calibration run produces load for (short: calibration runs in `npm test`). */
export const CALIBRATION_DURATION_S = 6;

function judgeRow(c: CalibrationCase, r: RunResult): { pass: boolean; reason: string | null } {
  const pre = c.precondition?.(r) ?? null;
  if (r.verdict === null) return { pass: false, reason: "no verdict (the run was interrupted)" };
  const harness = r.findings.filter((f) => f.kind === "harness");
  if (harness.length > 0) return { pass: false, reason: `harness: ${harness[0]!.text}` };
  if (c.expect.verdict === "valid") {
    if (r.verdict !== "valid") return { pass: false, reason: r.report?.reason ?? `verdict ${r.verdict}` };
    if (pre !== null) return { pass: false, reason: `precondition: ${pre}` };
    return { pass: true, reason: null };
  }
  const wanted = c.expect.anomaly === null ? [] : typeof c.expect.anomaly === "string" ? [c.expect.anomaly] : c.expect.anomaly;
  const count = wanted.reduce((n, a) => n + (r.report?.anomalyCounts[a] ?? 0), 0);
  if (r.verdict === c.expect.verdict && (c.expect.anomaly === null || count > 0)) return { pass: true, reason: null };
  if (pre !== null) return { pass: false, reason: `precondition: ${pre}` };
  return { pass: false, reason: `expected ${c.expect.verdict}${wanted.length > 0 ? ` with ${wanted.join(" or ")}` : ""}; ${r.report?.reason ?? ""}` };
}

/** Runs the calibration table; rows are reported as they finish. */
export async function calibrate(opts: CalibrationOptions): Promise<CalibrationRow[]> {
  const cases = (opts.cases ?? CALIBRATION_CASES).filter(
    (c) => opts.only === undefined || opts.only.length === 0 || opts.only.includes(c.bug ?? "none") || opts.only.includes(c.config),
  );
  const rows: CalibrationRow[] = [];
  const seed = opts.seed ?? 1;
  for (let i = 0; i < cases.length; i++) {
    if (opts.signal?.aborted) break;
    const c = cases[i]!;
    opts.onRowStart?.(c, i, cases.length);
    const outDir = join(opts.outDir, `${String(i + 1).padStart(2, "0")}-${c.config}-${c.bug ?? "correct"}`);
    const run = (dir: string) =>
      runWorkload({
        ...c.options,
        workload: c.workload,
        outDir: dir,
        seed,
        durationS: opts.durationS ?? c.options.durationS ?? CALIBRATION_DURATION_S,
        bugs: c.bug === null ? [] : [c.bug],
        ...(opts.signal ? { signal: opts.signal } : {}),
        ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
      });
    let r: RunResult | null = null;
    let retried: string | null = null;
    // A run that could not happen (its nodes or workers did not start: nothing was judged) is
    // run once more, in a directory of its own, and the row says so; a verdict is never re-run.
    for (let attempt = 0; attempt < 2 && r === null; attempt++) {
      try {
        r = await run(attempt === 0 ? outDir : `${outDir}-again`);
      } catch (e) {
        const why = (e as Error).message.split("\n")[0]!;
        if (attempt === 0 && !opts.signal?.aborted) {
          retried = why;
          continue;
        }
        // A run that could not happen twice is a failed row, not a crashed table.
        const out: CalibrationRow = { case: c, seed, verdict: null, anomalies: {}, unknowns: {}, pass: false, reason: `the run failed: ${why}`, retried, outDir, durationMs: 0 };
        rows.push(out);
        opts.onRow?.(out);
      }
    }
    if (r === null) continue;
    const { pass, reason } = judgeRow(c, r);
    const out: CalibrationRow = {
      case: c,
      seed,
      verdict: r.verdict,
      anomalies: r.report?.anomalyCounts ?? {},
      unknowns: (r.report?.unknownCounts ?? {}) as Record<string, number>,
      pass,
      reason,
      retried,
      outDir: retried !== null ? `${outDir}-again` : outDir,
      durationMs: r.durationMs,
    };
    rows.push(out);
    opts.onRow?.(out);
  }
  return rows;
}

function expectedText(c: CalibrationCase): string {
  return c.expect.anomaly === null ? c.expect.verdict : `${c.expect.verdict}: ${typeof c.expect.anomaly === "string" ? c.expect.anomaly : c.expect.anomaly.join(" or ")}`;
}

function actualText(r: CalibrationRow): string {
  if (r.verdict === null) return "(no verdict)";
  const names = Object.entries(r.anomalies)
    .filter(([, n]) => (n ?? 0) > 0)
    .map(([name, n]) => `${name} ×${n}`);
  const unknowns = Object.entries(r.unknowns).map(([name, n]) => `${name} ×${n}`);
  const parts = [...names, ...(r.verdict === "unknown" ? unknowns : [])];
  return parts.length > 0 ? `${r.verdict}: ${parts.join(", ")}` : r.verdict;
}

/** The table as text: bug, workload, expected, actual, PASS/FAIL, and why a row failed. */
/** One line per failed row: the bug, the workload, why it failed, its seed and its run's directory. */
export function calibrationFailures(rows: readonly CalibrationRow[]): string[] {
  return rows
    .filter((r) => !r.pass)
    .map((r) => `FAIL ${r.case.bug ?? "(correct build)"} / ${r.case.config}: ${r.reason ?? ""} (seed ${r.seed}, ${r.outDir})`);
}

export function formatCalibrationTable(rows: readonly CalibrationRow[]): string {
  const head = ["bug", "workload", "expected", "actual", "result", "time"];
  const body = rows.map((r) => [
    r.case.bug ?? "(correct build)",
    r.case.config,
    expectedText(r.case),
    actualText(r),
    r.pass ? "PASS" : "FAIL",
    `${(r.durationMs / 1000).toFixed(1)} s`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const out = [line(head), line(widths.map((w) => "-".repeat(w))), ...body.map(line)];
  out.push(...calibrationFailures(rows).map((f) => `  ${f}`));
  for (const r of rows) if (r.retried !== null) out.push(`  run again: ${r.case.bug ?? "(correct build)"} / ${r.case.config}: the first run could not happen: ${r.retried}`);
  const failed = rows.filter((r) => !r.pass).length;
  out.push(failed === 0 ? `calibration: all ${rows.length} rows pass` : `calibration: ${failed} of ${rows.length} rows FAIL`);
  return out.join("\n");
}
