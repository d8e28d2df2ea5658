// The client scenarios' short forms in `npm test` (docs/verification-clients.md, "Narad's SDK"):
// the SDK's process() loop and messages() iterator against a real node through the fault proxy,
// with a producer on a direct line; each run's history judged by the lease model, and what the
// application saw set beside the scenario's written prediction. What is asserted is what must hold
// whatever the machine's speed: the lease model's verdict, the application catching up by itself,
// no loop ending, a silence measured for every fault, the prediction recorded in the history and
// the findings printed first. Whether a timing bound held is the run's finding, not the test's
// (the full runs' table in the doc has them); test/verify-client-calibrate.test.ts holds the rows
// where a bound must fail (seeded SDK bugs) or hold (the SDK as shipped).

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, runNarad, tempDir } from "./harness.js";
import { CLIENT_SCENARIOS, clientScenario, formatClientSummary, runClientScenario } from "../src/verify/workloads/client/index.js";

let keep = false;
const dirs: string[] = [];
after(async () => {
  if (!keep) for (const d of dirs) await removeDir(d);
});

describe("verify run --workload client", { timeout: 600_000 }, () => {
  test("an unknown scenario is refused with the list of scenarios; so is a run without one", async () => {
    const dir = await tempDir("narad-client-cli-");
    dirs.push(dir);
    const bad = await runNarad(["verify", "run", "--workload", "client", "--scenario", "cut-99s", "--out", dir]);
    assert.equal(bad.code, 2, bad.stdout + bad.stderr);
    assert.match(bad.stderr, /unknown client scenario "cut-99s"/);
    for (const s of CLIENT_SCENARIOS) assert.ok(bad.stderr.includes(s.name), `${s.name} listed`);
    const none = await runNarad(["verify", "run", "--workload", "client", "--out", dir]);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /needs --scenario NAME/);
    const bug = await runNarad(["verify", "run", "--workload", "client", "--scenario", "steady", "--bug", "no-such-bug", "--out", dir]);
    assert.equal(bug.code, 2);
    assert.match(bug.stderr, /unknown SDK bug "no-such-bug"; known: process-stops-after-reset/);
  });

  for (const name of ["cut-3s", "restart-2s", "sigstop-6s"]) {
    test(`${name}: the lease model judges the run valid, both APIs catch up, and every fault's silence is measured`, async () => {
      const sc = clientScenario(name)!;
      assert.ok(sc.short, `${name} is a short form`);
      const dir = await tempDir(`narad-client-${name}-`);
      dirs.push(dir);
      const r = await runClientScenario({ scenario: sc, outDir: dir });
      const summary = formatClientSummary(sc, r.report, r.lanes, r.findings, { history: r.historyPath, html: r.reportHtmlPath, client: r.clientPath });
      if (r.report.verdict !== "valid") keep = true;
      assert.equal(r.report.verdict, "valid", summary);
      // The prediction is in the history, written before the run: the config line is the first.
      const config = JSON.parse((await readFile(r.historyPath, "utf8")).split("\n")[0]!) as { value: Record<string, unknown> };
      assert.equal(config.value["scenario"], name);
      assert.deepEqual(config.value["predictions"], JSON.parse(JSON.stringify(sc.predictions)));
      // Every fault reached the node or its line, with its evidence (a restart: a new boot).
      const injected = r.report.faults.filter((f) => ["cut", "pause", "terminate"].includes(f.kind));
      assert.ok(injected.length > 0, summary);
      for (const f of r.report.faults) {
        assert.equal(f.outcome, "ok", summary);
        if (f.needsEvidence) assert.equal(f.evidence, true, `${f.kind} has its boot evidence`);
      }
      for (const lane of r.lanes) {
        const check = (bound: string) => lane.checks.find((c) => c.bound === bound)!;
        assert.ok(check("caught up").ok, `${lane.api} caught up by itself:\n${summary}`);
        assert.ok(check("loop").ok, `${lane.api} kept running:\n${summary}`);
        // Every acknowledged message handled (and maybe some whose produce was ambiguous).
        assert.ok(lane.produced > 0 && lane.handled >= lane.produced, summary);
        // One measure per fault; when messages waited, one came after it. A cut leaves the
        // producer's line alone, so messages always waited; a freeze or a restart stops the
        // producer too, and only the produce it had in flight (one topic's) waits.
        assert.equal(lane.silences.length, sc.faults.length, summary);
        for (const s of lane.silences) {
          if (s.fault === "cut") assert.ok(s.waiting, `${lane.api}: messages waited after the cut:\n${summary}`);
          if (s.waiting) assert.notEqual(s.silenceMs, null, `${lane.api}: a delivery after ${s.fault}:\n${summary}`);
        }
        // Each bound is set beside its measure; a broken one is a finding, printed first.
        assert.equal(lane.checks.length, 6);
        for (const c of lane.checks) if (!c.ok) assert.ok(r.findings.some((f) => f.startsWith(`${lane.api}: ${c.bound}`)), summary);
      }
      const lines = summary.split("\n");
      r.findings.forEach((f, i) => assert.equal(lines[1 + i], `FINDING  ${f}`));
      const client = JSON.parse(await readFile(r.clientPath, "utf8")) as { format: string; events: unknown[] };
      assert.equal(client.format, "narad-client-run/1");
      assert.ok(client.events.length > 0);
      const html = await readFile(join(dir, "report.html"), "utf8");
      assert.match(html, /Client scenario <code>/);
      assert.match(html, /class="prediction" data-api="process"/);
    });
  }
});
