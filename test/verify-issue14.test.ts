// Issue 14's toolkit against real brokers: the idempotent and dead-letters workloads, and the
// calibration rows of their seeded bugs (ISSUE14_CALIBRATION_CASES).
//
// Seeds are fixed (NARAD_TEST_SEED overrides them) and printed in every failure message.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, tempDir } from "./harness.js";
import { startPostgres, type TestPostgres } from "./support/postgres.js";
import { WorkloadRuns } from "./support/workload-runs.js";
import { calibrate, calibrationFailures, formatCalibrationTable, ISSUE14_CALIBRATION_CASES, runWorkload } from "../src/verify/workloads/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 20261202;

const runs = new WorkloadRuns("narad-issue14-test-");
const { outDir, explain, assertValid } = runs;
// The cluster runs' PostgreSQL, started by the first test that needs one.
let pg: TestPostgres | undefined;
after(async () => {
  await pg?.stop();
  await runs.cleanup();
});

describe("issue 14 workloads", { timeout: 600_000 }, () => {
  test("idempotent on one node under kills and power losses: valid, every fault evidenced", async () => {
    const r = await runWorkload({ workload: "idempotent", outDir: await outDir(), seed: SEED, durationS: 8, faultIntervalMs: 1_500 });
    assertValid(r);
    assert.ok(r.report!.faults.some((f) => (f.kind === "kill" || f.kind === "power-loss") && f.evidence === true), explain(r));
    assert.ok(r.counts.produceOk > 200, explain(r));
  });

  test("dead-letters on one node under kills and stops: valid, messages moved to the dead-letter topic and consumed there", async () => {
    const r = await runWorkload({ workload: "dead-letters", outDir: await outDir(), seed: SEED, durationS: 8, faultIntervalMs: 1_500 });
    assertValid(r);
    const dlq = r.report!.counts.operations["dead-letter"];
    assert.ok(dlq !== undefined && dlq.ok > 0, `no dead-letter ack answered 204: ${explain(r)}`);
    assert.ok(r.report!.counts.pairs.total > r.report!.counts.messages, `no pair on the dead-letter path: ${explain(r)}`);
  });

  test("idempotent on a 3-node cluster (security on), re-sends through other nodes: valid", async () => {
    pg ??= await startPostgres();
    const r = await runWorkload({ workload: "idempotent", nodes: 3, controlPlaneUrl: pg.url, outDir: await outDir(), seed: SEED, durationS: 6, faultIntervalMs: 2_000 });
    assertValid(r);
  });

  test("dead-letters on a 3-node cluster, the dead-letter topic's partitions on other owners: valid", async () => {
    pg ??= await startPostgres();
    const r = await runWorkload({ workload: "dead-letters", nodes: 3, controlPlaneUrl: pg.url, outDir: await outDir(), seed: SEED, durationS: 6, faultIntervalMs: 2_000 });
    assertValid(r);
    assert.ok(r.report!.counts.pairs.total > r.report!.counts.messages, `no pair on the dead-letter path: ${explain(r)}`);
  });

  test("issue 14's seeded bugs are caught with their anomalies, and the correct build is valid", async () => {
    const dir = await tempDir("narad-issue14-calibration-");
    const rows = await calibrate({ outDir: dir, seed: 1, cases: ISSUE14_CALIBRATION_CASES });
    const failed = rows.filter((r) => !r.pass);
    assert.deepEqual(
      failed.map((r) => `${r.case.bug ?? "correct"}/${r.case.config}`),
      [],
      // The failed rows lead the message: a long table is cut in CI's excerpt.
      `${calibrationFailures(rows).join("\n")}\ncalibration (runs kept in ${dir}):\n${formatCalibrationTable(rows)}`,
    );
    await removeDir(dir);
  });
});
