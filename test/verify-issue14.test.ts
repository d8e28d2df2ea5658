// Issue 14's toolkit against real brokers: the idempotent and dead-letters workloads, and the
// calibration rows of their seeded bugs (ISSUE14_CALIBRATION_CASES).
//
// SKIP GUARD. These need the server branches idem (POST /v1/producers, narad.producer) and dlq
// (max_deliveries, dead_letter_topic, dead_letter=true) merged, and for the calibration rows the
// seeded bugs' hooks wired. At load this file starts a node and asks it, as a client would
// (probeNextWave: POST /v1/producers, a topic created with max_deliveries); each test that needs a
// feature the node lacks is skipped with the reason printed. What runs on a server without them:
// each next-wave workload stops at its start with one line saying what is missing.
// Seeds are fixed (NARAD_TEST_SEED overrides them) and printed in every failure message.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, startNode, tempDir } from "./harness.js";
import { startPostgres, type TestPostgres } from "./support/postgres.js";
import { WorkloadRuns } from "./support/workload-runs.js";
import { calibrate, formatCalibrationTable, ISSUE14_CALIBRATION_CASES, NextWaveUnsupported, probeNextWave, runWorkload } from "../src/verify/workloads/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 20261202;

async function probe(): Promise<{ producers: boolean; deadLetters: boolean }> {
  const node = await startNode();
  try {
    return await probeNextWave(node.url);
  } finally {
    await node.stop();
  }
}

const has = await probe();
const noProducers = has.producers ? false : "the server answers no 201 to POST /v1/producers: idempotent producers (branch idem) are not merged";
const noDeadLetters = has.deadLetters ? false : "the server does not keep max_deliveries on a created topic: dead letters (branch dlq) are not merged";
const noBoth = noProducers || noDeadLetters;
for (const why of [noProducers, noDeadLetters]) if (why !== false) console.log(`verify-issue14: skipping what needs it: ${why}`);

const runs = new WorkloadRuns("narad-issue14-test-");
const { outDir, explain, assertValid } = runs;
// The cluster runs' PostgreSQL, started by the first test that needs one (none while skipped).
let pg: TestPostgres | undefined;
after(async () => {
  await pg?.stop();
  await runs.cleanup();
});

describe("issue 14 workloads", { timeout: 600_000 }, () => {
  test("idempotent on one node under kills and power losses: valid, every fault evidenced", { skip: noProducers }, async () => {
    const r = await runWorkload({ workload: "idempotent", outDir: await outDir(), seed: SEED, durationS: 8, faultIntervalMs: 1_500 });
    assertValid(r);
    assert.ok(r.report!.faults.some((f) => (f.kind === "kill" || f.kind === "power-loss") && f.evidence === true), explain(r));
    assert.ok(r.counts.produceOk > 200, explain(r));
  });

  test("dead-letters on one node under kills and stops: valid, messages moved to the dead-letter topic and consumed there", { skip: noDeadLetters }, async () => {
    const r = await runWorkload({ workload: "dead-letters", outDir: await outDir(), seed: SEED, durationS: 8, faultIntervalMs: 1_500 });
    assertValid(r);
    const dlq = r.report!.counts.operations["dead-letter"];
    assert.ok(dlq !== undefined && dlq.ok > 0, `no dead-letter ack answered 204: ${explain(r)}`);
    assert.ok(r.report!.counts.pairs.total > r.report!.counts.messages, `no pair on the dead-letter path: ${explain(r)}`);
  });

  test("idempotent on a 3-node cluster (security on), re-sends through other nodes: valid", { skip: noProducers }, async () => {
    pg ??= await startPostgres();
    const r = await runWorkload({ workload: "idempotent", nodes: 3, controlPlaneUrl: pg.url, outDir: await outDir(), seed: SEED, durationS: 6, faultIntervalMs: 2_000 });
    assertValid(r);
  });

  test("dead-letters on a 3-node cluster, the dead-letter topic's partitions on other owners: valid", { skip: noDeadLetters }, async () => {
    pg ??= await startPostgres();
    const r = await runWorkload({ workload: "dead-letters", nodes: 3, controlPlaneUrl: pg.url, outDir: await outDir(), seed: SEED, durationS: 6, faultIntervalMs: 2_000 });
    assertValid(r);
    assert.ok(r.report!.counts.pairs.total > r.report!.counts.messages, `no pair on the dead-letter path: ${explain(r)}`);
  });

  test("issue 14's seeded bugs are caught with their anomalies, and the correct build is valid", { skip: noBoth }, async () => {
    const dir = await tempDir("narad-issue14-calibration-");
    const rows = await calibrate({ outDir: dir, seed: 1, cases: ISSUE14_CALIBRATION_CASES });
    const failed = rows.filter((r) => !r.pass);
    assert.deepEqual(
      failed.map((r) => `${r.case.bug ?? "correct"}/${r.case.config}`),
      [],
      `calibration (runs kept in ${dir}):\n${formatCalibrationTable(rows)}`,
    );
    await removeDir(dir);
  });

  test("on a server without them, each next-wave workload stops at its start with one line saying what is missing", { skip: has.producers && has.deadLetters ? "the server takes both" : false }, async () => {
    const cases: Array<["idempotent" | "dead-letters", boolean, RegExp]> = [
      ["idempotent", has.producers, /idempotent producers are not supported .*idem branch/],
      ["dead-letters", has.deadLetters, /dead letters are not supported .*dlq branch/],
    ];
    for (const [workload, supported, line] of cases) {
      if (supported) continue;
      await assert.rejects(
        runWorkload({ workload, outDir: await outDir(), seed: SEED, durationS: 2 }),
        (e: unknown) => e instanceof NextWaveUnsupported && line.test(e.message) && !e.message.includes("\n"),
        workload,
      );
    }
  });
});
