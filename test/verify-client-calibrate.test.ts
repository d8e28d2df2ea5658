// The client scenarios' calibration in `npm test`: every seeded SDK bug (a process() loop that
// stops polling after a reset, one that does not nack a failed message, an iterator that drops the
// rest of its batch when left early) must break the prediction bound its row names, and the SDK
// as shipped must keep those bounds in the same scenario with a valid lease-model verdict
// (src/verify/workloads/client/calibrate.ts). Beside test/verify-client.test.ts, so the two run
// side by side.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, tempDir } from "./harness.js";
import { CLIENT_BUG_NAMES, CLIENT_CALIBRATION_CASES, calibrateClients, formatClientCalibrationTable } from "../src/verify/workloads/client/index.js";

let keep = false;
let dir: string | null = null;
after(async () => {
  if (dir !== null && !keep) await removeDir(dir);
});

describe("verify calibrate: the client rows", { timeout: 900_000 }, () => {
  test("every seeded SDK bug breaks its bound, and the SDK as shipped keeps them", async () => {
    dir = await tempDir("narad-client-calibration-");
    const rows = await calibrateClients({ outDir: dir });
    const table = formatClientCalibrationTable(rows);
    const failed = rows.filter((r) => !r.pass);
    if (failed.length > 0) keep = true;
    assert.equal(rows.length, CLIENT_CALIBRATION_CASES.length);
    assert.deepEqual(failed.map((r) => `${r.case.bug ?? "as shipped"}/${r.case.scenario}`), [], `client calibration (runs kept in ${dir}):\n${table}`);
    const bugs = new Set(rows.map((r) => r.case.bug));
    for (const b of CLIENT_BUG_NAMES) assert.ok(bugs.has(b), `no calibration row for ${b}`);
    // Each scenario with a bug row has a row for the SDK as shipped too.
    for (const r of rows) if (r.case.bug !== null) assert.ok(rows.some((x) => x.case.bug === null && x.case.scenario === r.case.scenario), `${r.case.scenario} has a correct row`);
  });
});
