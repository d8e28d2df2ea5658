// Calibration of the client scenarios on seeded SDK bugs (seeded-bugs.ts): each bug must be caught
// by the scenario named for it, as a prediction bound of the API it breaks that the run contradicts
// (silence, lag, or the application never catching up: stalled), and the SDK as shipped must keep
// every prediction of the same scenarios with a valid lease-model verdict. A row whose run had no
// chance to meet the bug says so (its precondition) instead of passing by luck.
//
// Kept apart from calibrate.ts's table (CALIBRATION_CASES, seeded broker bugs): test/verify-client
// .test.ts runs these rows, and `narad verify calibrate` runs them after the broker's.
//
// Why these scenarios:
//   - steady: no fault. process-skips-nack leaves the messages whose handler failed (every 20th,
//     at its first delivery) leased until their lease lapses, a visibility timeout (8 s) later
//     (lag), where the shipped SDK nacks them and has them again at once.
//   - reset-storm: six resets of the consumers' line. process-stops-after-reset parks the loop at
//     the first poll a reset breaks: nothing is handled after it (silence, stalled).
//   - app-restart: the iterator left in the middle of a batch four times. messages-drops-batch-
//     on-exit does not nack what it leased and did not yield: those wait for a lapse (lag).

import { join } from "node:path";
import { clientScenario, type ConsumerApi } from "./scenarios.js";
import { runClientScenario, type ClientRunResult } from "./run.js";
import type { ClientBugName } from "./seeded-bugs.js";

export interface ClientCalibrationCase {
  scenario: string;
  bug: ClientBugName | null;
  /**
   * The bounds the row is about, on one API: with a bug, any one of them must fail; with the SDK
   * as shipped, all of them must hold ("all": every bound of every API), and the lease model
   * must judge the run valid.
   */
  bounds: { api: ConsumerApi; names: readonly string[] } | "all";
  /** Why the run could not judge the row, or null. */
  precondition?: (r: ClientRunResult) => string | null;
}

const needRestarts = (r: ClientRunResult): string | null => {
  const l = r.lanes.find((x) => x.api === "messages");
  return l !== undefined && l.restarts > 0 ? null : "the iterator never restarted in the middle of a batch";
};
const needFailures = (r: ClientRunResult): string | null => {
  const l = r.lanes.find((x) => x.api === "process");
  return l !== undefined && (l.errors["handler"] ?? 0) > 0 ? null : "no handler of process() failed";
};
const needResets = (r: ClientRunResult): string | null => ((r.lanes.find((x) => x.api === "process")?.errors["retry"] ?? 0) > 0 ? null : "no poll of process() failed on a reset");

/**
 * The rows. A scenario's correct row holds the bounds its bug rows are caught by: a prediction
 * the shipped SDK breaks elsewhere in the same run (reset-storm's lag: a reset that destroys a
 * consume's answer leaves its message leased until the lease lapses) is a finding of that
 * scenario (docs/verification-clients.md), not a calibration failure.
 */
export const CLIENT_CALIBRATION_CASES: readonly ClientCalibrationCase[] = [
  { scenario: "steady", bug: null, bounds: "all", precondition: needFailures },
  { scenario: "steady", bug: "process-skips-nack", bounds: { api: "process", names: ["lag"] }, precondition: needFailures },
  { scenario: "reset-storm", bug: null, bounds: { api: "process", names: ["silence", "caught up", "loop"] }, precondition: needResets },
  { scenario: "reset-storm", bug: "process-stops-after-reset", bounds: { api: "process", names: ["silence", "caught up"] }, precondition: needResets },
  { scenario: "app-restart", bug: null, bounds: { api: "messages", names: ["lag", "duplicates", "errors"] }, precondition: needRestarts },
  { scenario: "app-restart", bug: "messages-drops-batch-on-exit", bounds: { api: "messages", names: ["lag"] }, precondition: needRestarts },
];

export interface ClientCalibrationRow {
  case: ClientCalibrationCase;
  pass: boolean;
  /** What the run showed: the lease verdict and the bounds that failed. */
  actual: string;
  reason: string | null;
  outDir: string;
  durationMs: number;
}

export function judgeClientRow(c: ClientCalibrationCase, r: ClientRunResult): { pass: boolean; reason: string | null } {
  const pre = c.precondition?.(r) ?? null;
  const failed = r.lanes.flatMap((l) => l.checks.filter((k) => !k.ok).map((k) => ({ api: l.api, bound: k.bound })));
  const b = c.bounds;
  const mine = b === "all" ? failed : failed.filter((f) => f.api === b.api && b.names.includes(f.bound));
  const what = b === "all" ? "every bound" : `${b.api} ${b.names.join(", ")}`;
  if (c.bug === null) {
    if (r.report.verdict !== "valid") return { pass: false, reason: `lease model ${r.report.verdict}: ${r.report.reason}` };
    if (mine.length > 0) return { pass: false, reason: `${what} must hold: ${r.findings.join("; ")}` };
    if (pre !== null) return { pass: false, reason: `precondition: ${pre}` };
    return { pass: true, reason: null };
  }
  // A client bug of these kinds breaks what the application sees, not the broker's contract.
  if (r.report.verdict === "invalid") return { pass: false, reason: `lease model invalid: ${r.report.reason}` };
  if (mine.length > 0) return { pass: true, reason: null };
  if (pre !== null) return { pass: false, reason: `precondition: ${pre}` };
  return { pass: false, reason: `expected ${b === "all" ? "a bound" : `${b.api} ${b.names.join(" or ")}`} to fail; ${failed.length === 0 ? "every prediction held" : r.findings.join("; ")}` };
}

function actualText(r: ClientRunResult): string {
  const failed = r.lanes.flatMap((l) => l.checks.filter((k) => !k.ok).map((k) => `${l.api} ${k.bound}`));
  return `${r.report.verdict}${failed.length > 0 ? `; failed: ${failed.join(", ")}` : "; predictions held"}`;
}

export async function calibrateClients(o: {
  outDir: string;
  only?: string[];
  cases?: readonly ClientCalibrationCase[];
  signal?: AbortSignal;
  onRowStart?: (c: ClientCalibrationCase, i: number, n: number) => void;
  onRow?: (r: ClientCalibrationRow) => void;
}): Promise<ClientCalibrationRow[]> {
  const cases = (o.cases ?? CLIENT_CALIBRATION_CASES).filter((c) => o.only === undefined || o.only.length === 0 || o.only.includes(c.bug ?? "none") || o.only.includes(c.scenario) || o.only.includes("client"));
  const rows: ClientCalibrationRow[] = [];
  for (const [i, c] of cases.entries()) {
    if (o.signal?.aborted) break;
    o.onRowStart?.(c, i, cases.length);
    const outDir = join(o.outDir, `client-${String(i + 1).padStart(2, "0")}-${c.scenario}-${c.bug ?? "correct"}`);
    const sc = clientScenario(c.scenario);
    let row: ClientCalibrationRow;
    if (sc === undefined) {
      row = { case: c, pass: false, actual: "(no run)", reason: `no scenario ${c.scenario}`, outDir, durationMs: 0 };
    } else {
      try {
        const r = await runClientScenario({ scenario: sc, outDir, bugs: c.bug === null ? [] : [c.bug], ...(o.signal ? { signal: o.signal } : {}) });
        const j = judgeClientRow(c, r);
        row = { case: c, pass: j.pass, actual: actualText(r), reason: j.reason, outDir, durationMs: r.durationMs };
      } catch (e) {
        row = { case: c, pass: false, actual: "(no verdict)", reason: `the run failed: ${(e as Error).message.split("\n")[0]}`, outDir, durationMs: 0 };
      }
    }
    rows.push(row);
    o.onRow?.(row);
  }
  return rows;
}

export function formatClientCalibrationTable(rows: readonly ClientCalibrationRow[]): string {
  const head = ["SDK bug", "scenario", "expected", "actual", "result", "time"];
  const body = rows.map((r) => [
    r.case.bug ?? "(SDK as shipped)",
    r.case.scenario,
    r.case.bounds === "all" ? "valid; every bound holds" : r.case.bug === null ? `valid; ${r.case.bounds.api} ${r.case.bounds.names.join(", ")} hold` : `${r.case.bounds.api} ${r.case.bounds.names.join(" or ")} fails`,
    r.actual,
    r.pass ? "PASS" : "FAIL",
    `${(r.durationMs / 1000).toFixed(1)} s`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const out = [line(head), line(widths.map((w) => "-".repeat(w))), ...body.map(line)];
  for (const r of rows) if (!r.pass) out.push(`  FAIL ${r.case.bug ?? "(SDK as shipped)"} / ${r.case.scenario}: ${r.reason ?? ""} (${r.outDir})`);
  const failed = rows.filter((r) => !r.pass).length;
  out.push(failed === 0 ? `client calibration: all ${rows.length} rows pass` : `client calibration: ${failed} of ${rows.length} rows FAIL`);
  return out.join("\n");
}
