// What the workload test files share: a run directory per run, kept when a run failed (its
// history is what whoever reads the failure needs), and one way to say why a run is not valid.

import assert from "node:assert/strict";
import { removeDir, tempDir } from "../harness.js";
import type { RunResult } from "../../src/verify/workloads/index.js";

export class WorkloadRuns {
  private readonly dirs: string[] = [];
  /** Set by a failed run, so cleanup() keeps every run directory. */
  failed = false;

  /** `where`: how the runs are deployed, for the explanation ("" or " on 3 nodes"). */
  constructor(
    private readonly prefix: string,
    private readonly where = "",
  ) {}

  readonly outDir = async (): Promise<string> => {
    const d = await tempDir(this.prefix);
    this.dirs.push(d);
    return d;
  };

  readonly cleanup = async (): Promise<void> => {
    if (!this.failed) for (const d of this.dirs) await removeDir(d);
  };

  readonly explain = (r: RunResult): string => {
    const anomalies = r.report?.anomalies.slice(0, 5).map((a) => `${a.name} ${a.msg} on ${a.path} ops ${a.ops.join(",")}: ${a.explanation}`) ?? [];
    const unknowns = r.report?.unknowns.slice(0, 5).map((u) => `${u.reason} ${u.msg}: ${u.explanation}`) ?? [];
    return [
      `workload ${r.workload}${this.where}, seed ${r.seed}: verdict ${r.verdict} (${r.report?.reason ?? "-"})`,
      ...anomalies,
      ...unknowns,
      ...r.findings.map((f) => `driver ${f.kind}: ${f.text}`),
      `history ${r.historyPath}`,
    ].join("\n  ");
  };

  readonly assertValid = (r: RunResult): void => {
    if (r.verdict !== "valid" || r.exitCode !== 0 || r.findings.length > 0) this.failed = true;
    assert.equal(r.verdict, "valid", this.explain(r));
    assert.deepEqual(r.findings, [], this.explain(r));
    assert.equal(r.exitCode, 0, this.explain(r));
  };
}
