// Workloads against real broker processes: a short e2e, a short chaos and a short children run
// (with a remote child on a second node) on one node must come back valid, and `narad verify run`
// prints the verdict, the report paths and the seed. The cluster runs are in verify-cluster.test.ts.
// Seeds are fixed (NARAD_TEST_SEED overrides them) and printed in every failure message, so a
// failing run is reproduced with `narad verify run --workload W --seed N`.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { runNarad } from "./harness.js";
import { WorkloadRuns } from "./support/workload-runs.js";
import { runWorkload, deriveSeed } from "../src/verify/workloads/index.js";
import { planFaults } from "../src/verify/nemesis/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 20261201;
/** The children run's seed: its schedule kills the parent's owner and stops the remote node early on. */
const CHILDREN_SEED = 9;

const runs = new WorkloadRuns("narad-workload-test-");
const { outDir, explain, assertValid } = runs;
after(runs.cleanup);




describe("verify workloads", { timeout: 240_000 }, () => {
  test("e2e on one node: every message produced, delivered once and acked; valid", async () => {
    const r = await runWorkload({ workload: "e2e", outDir: await outDir(), seed: SEED, durationS: 3, rate: 200 });
    assertValid(r);
    assert.ok(r.counts.produceOk >= 500, `seed ${SEED}: only ${r.counts.produceOk} produces succeeded`);
    assert.equal(r.report!.counts.deliveries, r.counts.produceOk, `seed ${SEED}: e2e delivers each message exactly once`);
    assert.equal(r.report!.redeliveries.total, 0, explain(r));
    // The history starts with the config the checker needs.
    const first = JSON.parse((await readFile(r.historyPath, "utf8")).split("\n", 1)[0]!) as { f: string; value: Record<string, unknown> };
    assert.equal(first.f, "config");
    for (const k of ["ack_flush_ms", "ack_sync_ms", "visibility_timeout_ms", "topics", "children"]) assert.ok(k in first.value, `config lacks ${k}`);
  });

  test("chaos on one node (terminate or kill, then start): valid, every fault evidenced", async () => {
    // Sanity of the fixed seed: its schedule has both a kill and a terminate early on.
    const plan = planFaults({ seed: deriveSeed(SEED, "nemesis"), faults: ["terminate", "kill"], intervalMs: 1_500, intervalJitterMs: 500, holdMs: 400, holdJitterMs: 200, targetCount: 1 }, 4);
    const kinds = new Set(plan.map((p) => p.kind));
    if (process.env.NARAD_TEST_SEED === undefined) assert.ok(kinds.has("kill") && kinds.has("terminate"), `seed ${SEED} plans ${plan.map((p) => p.kind).join(", ")}`);

    // faultsMin: on a loaded machine restarts are slow, so the load goes on until two faults were made.
    const r = await runWorkload({ workload: "chaos", outDir: await outDir(), seed: SEED, durationS: 8, faultIntervalMs: 1_500, faultHoldMs: 400, faultsMin: 2 });
    assertValid(r);
    const stops = r.report!.faults.filter((f) => (f.kind === "kill" || f.kind === "terminate") && f.outcome === "ok");
    const starts = r.report!.faults.filter((f) => f.kind === "start" && f.outcome === "ok");
    assert.ok(stops.length >= 2, `seed ${SEED}: only ${stops.length} stops happened`);
    assert.ok(starts.length >= stops.length, `seed ${SEED}: ${stops.length} stops but ${starts.length} starts`);
    for (const f of [...stops, ...starts]) assert.equal(f.evidence, true, `seed ${SEED}: fault op ${f.op} (${f.kind}) has no boot evidence`);
  });

  test("narad verify run prints the verdict, the report paths and the seed, and exits 0", async () => {
    const out = await outDir();
    const r = await runNarad(["verify", "run", "--workload", "e2e", "--duration", "1", "--rate", "100", "--seed", String(SEED), "--out", out], { timeoutMs: 90_000 });
    if (r.code !== 0) runs.failed = true;
    assert.equal(r.code, 0, `seed ${SEED}:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stdout, /^result: +valid, exit 0$/m);
    assert.match(r.stdout, new RegExp(`^seed: +${SEED}\\b`, "m"));
    // Progress lines give the last interval's rate and the run's average (issue 16 item 8).
    assert.match(r.stdout + r.stderr, /ops\/s now, \d+ avg/);
    assert.ok(r.stdout.includes(join(out, "history.jsonl")), r.stdout);
    assert.ok(r.stdout.includes(join(out, "report.json")), r.stdout);
    const report = JSON.parse(await readFile(join(out, "report.json"), "utf8")) as { verdict: string };
    assert.equal(report.verdict, "valid");
  });

  test("children on one node, with a remote child on a second node (security on), under continuous load: valid on every path, faults on both nodes evidenced", async () => {
    // Sanity of the fixed seed: its schedule kills the parent's owner n1 and stops r1 early on.
    const seed = process.env.NARAD_TEST_SEED !== undefined ? SEED : CHILDREN_SEED;
    const schedule = { intervalMs: 1_200, intervalJitterMs: 400, holdMs: 500, holdJitterMs: 250 };
    const plan = planFaults({ seed: deriveSeed(seed, "nemesis"), faults: ["terminate", "kill"], ...schedule, targetCount: 2 }, 2);
    if (process.env.NARAD_TEST_SEED === undefined) assert.deepEqual(plan.map((p) => `${p.kind} ${["n1", "r1"][p.target]}`), ["kill n1", "terminate r1"]);

    // At least those two faults, however slow restarts are on this machine.
    const r = await runWorkload({ workload: "children", outDir: await outDir(), seed, durationS: 4, faultIntervalMs: schedule.intervalMs, faultHoldMs: schedule.holdMs, faultsMin: 2 });
    assertValid(r);
    // The config line names the children, the remote one by its topic on the other node with the
    // push's timeout (on one node the local children's copies are appends: no timeout).
    const first = JSON.parse((await readFile(r.historyPath, "utf8")).split("\n", 1)[0]!) as { value: { children: Record<string, unknown>; topics: Record<string, unknown> } };
    assert.deepEqual(first.value.children, {
      t: [
        { topic: "t.fan", kind: "fanout" },
        { topic: "t.delay", kind: "delay", delay_ms: 5_000 },
        { topic: "remote-t", kind: "remote", nodes: ["r1"], copy_timeout_ms: 10_000 },
      ],
    });
    assert.deepEqual(Object.keys(first.value.topics).sort(), ["remote-t", "t", "t.delay", "t.fan"]);
    // Every message is owed on four paths, and was delivered on each.
    const rep = r.report!;
    assert.equal(rep.counts.pairs.total, 4 * rep.counts.messages, explain(r));
    for (const node of ["n1", "r1"]) {
      const stop = rep.faults.find((f) => (f.kind === "kill" || f.kind === "terminate") && f.node === node && f.outcome === "ok");
      assert.ok(stop !== undefined, `seed ${seed}: no stop of ${node}: ${JSON.stringify(rep.faults.map((f) => [f.kind, f.node]))}`);
      assert.equal(stop.evidence, true, `seed ${seed}: ${node}'s ${stop.kind} has no boot evidence`);
    }
    for (const a of ["lost", "misrouted", "early-delivery"] as const) assert.equal(rep.anomalyCounts[a] ?? 0, 0, explain(r));
  });

  test("narad verify run refuses an unknown workload and a bad node count in one line", async () => {
    const out = await outDir();
    const a = await runNarad(["verify", "run", "--workload", "nope", "--out", out]);
    assert.equal(a.code, 2);
    assert.match(a.stderr, /^narad: unknown workload "nope"; one of e2e, e2e-chaos, chaos, steady, power-loss, pause, partition, children, failover, idempotent, dead-letters\n$/);
    const b = await runNarad(["verify", "run", "--workload", "e2e", "--nodes", "0", "--out", out]);
    assert.equal(b.code, 2);
    assert.match(b.stderr, /--nodes must be a positive integer/);
    const c = await runNarad(["verify", "run", "--workload", "e2e", "--quiet-windows", "--out", out]);
    assert.equal(c.code, 2);
    assert.match(c.stderr, /^narad: --quiet-windows and --no-quiet-windows go with --workload children\n$/);
  });
});
