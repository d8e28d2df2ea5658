// The calibration table in `npm test`: every seeded broker bug must be caught with its anomaly by
// the workload built to expose it, and the correct build must come back valid on the same
// workloads. Short runs (a few seconds of load each, about five minutes in all).
// The seed is fixed (NARAD_TEST_SEED overrides it) and printed with the table on failure.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, tempDir } from "./harness.js";
import { calibrate, calibrationFailures, formatCalibrationTable, CALIBRATION_CASES } from "../src/verify/workloads/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 1;

let keep = false;
let dir: string | null = null;
after(async () => {
  if (dir !== null && !keep) await removeDir(dir);
});

describe("verify calibrate", { timeout: 1_000_000 }, () => {
  test("every seeded bug is caught with the right anomaly, and the correct build is valid", async () => {
    dir = await tempDir("narad-calibration-test-");
    const rows = await calibrate({ outDir: dir, seed: SEED });
    const table = formatCalibrationTable(rows);
    const failed = rows.filter((r) => !r.pass);
    if (failed.length > 0) keep = true;
    assert.equal(rows.length, CALIBRATION_CASES.length);
    // The failed rows and their reasons lead the message: a long table is cut in CI's excerpt.
    assert.deepEqual(
      failed.map((r) => `${r.case.bug ?? "correct"}/${r.case.config}`),
      [],
      `${calibrationFailures(rows).join("\n")}\ncalibration (seed ${SEED}, runs kept in ${dir}):\n${table}`,
    );
    // The seeded bugs the verification toolkit must catch (issue 3), those of child topics (issue 6)
    // and of replicated topics (issue 13).
    const bugs = new Set(rows.map((r) => r.case.bug).filter((b): b is string => b !== null));
    for (const b of [
      "acks-not-persisted",
      "ack-before-fsync",
      "store-on-429",
      "early-lapse",
      "nack-drops",
      "accept-replaced-handle",
      "replay-skip",
      "redeliver-acked",
      "child-skip-on-failure",
      "delay-early-after-restart",
      "copy-cursors-not-persisted",
      "elect-incomplete-follower",
      "follower-ack-before-fsync",
      "fenced-leader-answers",
      "acks-not-replicated",
    ]) {
      assert.ok(bugs.has(b), `no calibration row for ${b}`);
    }
  });
});
