// The two cluster suites of seed 000, short, judged by the checker: three nodes on loopback with a
// PostgreSQL control plane and security on (nodes without --dev, workers with credentials), the
// workers' requests spread over every node in turn.
//   e2e:       a known set produced, consumed and acked with nothing broken; any duplicate, loss,
//              unknown message or wrong topic fails it.
//   e2e-chaos: the same while a random node is stopped every few seconds (SIGTERM, SIGKILL after
//              10 s) and started again; every message acked before the deadline, every
//              redelivery explained by a fault.
//   children:  a parent with a fan-out, a delay, a replica and a remote child on a second cluster
//              (two nodes, a control plane of its own) under continuous load, while the parent's
//              owners and the remote nodes are killed and started again; valid on every path.
// Longer by hand: `npm run test:cluster-e2e`, `npm run test:cluster-chaos`,
// `npm run test:cluster-children`. Seeds are fixed
// (NARAD_TEST_SEED overrides them) and printed in every failure message, so a failing run is
// reproduced with `narad verify run --workload W --nodes 3 --seed N`.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { startPostgres, type TestPostgres } from "./support/postgres.js";
import { WorkloadRuns } from "./support/workload-runs.js";
import { deriveSeed, runWorkload, type RunResult } from "../src/verify/workloads/index.js";
import { planFaults } from "../src/verify/nemesis/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 0;
/** The children run's seed: its schedule kills a main node, then a remote node, early on. */
const CHILDREN_SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 14;

let pg: TestPostgres | undefined;
const runs = new WorkloadRuns("narad-cluster-suite-", " on 3 nodes");
const { outDir, explain, assertValid } = runs;
before(async () => {
  // One PostgreSQL for both runs; each run makes a fresh database of its own on it.
  pg = await startPostgres();
});
after(async () => {
  await pg?.stop();
  await runs.cleanup();
});




describe("cluster suites (three nodes, security on)", { timeout: 240_000 }, () => {
  test("cluster e2e: a known set produced, consumed and acked exactly once; valid", async () => {
    const r = await runWorkload({ workload: "e2e", nodes: 3, controlPlaneUrl: pg!.url, outDir: await outDir(), seed: SEED, durationS: 2, rate: 100 });
    assertValid(r);
    assert.equal((r.config["run"] as { security?: boolean } | undefined)?.security, true);
    assert.ok(r.counts.produceOk >= 150, `seed ${SEED}: only ${r.counts.produceOk} produces succeeded`);
    assert.equal(r.report!.counts.deliveries, r.counts.produceOk, `seed ${SEED}: e2e delivers each message exactly once`);
    assert.equal(r.report!.redeliveries.total, 0, explain(r));
    // The topic's partitions are spread over the nodes: deliveries name more than one owner.
    const owners = await ownersOf(r);
    assert.ok(owners.size >= 2, `seed ${SEED}: deliveries name the owners ${[...owners].join(", ")}`);
  });

  test("cluster chaos: a random node stopped (SIGTERM) and started again every few seconds; everything acked, every redelivery explained", async () => {
    const r = await runWorkload({
      workload: "e2e-chaos",
      nodes: 3,
      controlPlaneUrl: pg!.url,
      outDir: await outDir(),
      seed: SEED,
      durationS: 6,
      rate: 100,
      faultIntervalMs: 1_500,
      faultHoldMs: 500,
    });
    assertValid(r);
    const faults = r.report!.faults;
    const stops = faults.filter((f) => f.kind === "terminate" && f.outcome === "ok");
    const starts = faults.filter((f) => f.kind === "start" && f.outcome === "ok");
    assert.ok(stops.length >= 1, `seed ${SEED}: no node was stopped`);
    assert.ok(starts.length >= stops.length, `seed ${SEED}: ${stops.length} stops but ${starts.length} starts`);
    for (const f of [...stops, ...starts]) assert.equal(f.evidence, true, `seed ${SEED}: fault op ${f.op} (${f.kind} ${f.node}) has no boot evidence`);
    // Every message with a 202 was acked (the driver fails the run otherwise) and no 204 came back.
    assert.equal(r.report!.anomalyCounts["duplicate-after-ack"] ?? 0, 0, explain(r));
  });

  test("cluster children: fan-out, delay, replica and a remote child on a second cluster, under kills of the parent's owner and of a remote node; valid on every path", async () => {
    // Sanity of the fixed seed: the nemesis's first two faults are kills, one of a main node (each
    // owns a partition of t: a parent's owner) and one of a remote node. Targets are n1..n3, r1, r2.
    const schedule = { faults: ["terminate", "kill"] as const, intervalMs: 1_200, intervalJitterMs: 400, holdMs: 500, holdJitterMs: 250, targetCount: 5 };
    const plan = planFaults({ ...schedule, faults: [...schedule.faults], seed: deriveSeed(CHILDREN_SEED, "nemesis") }, 2);
    if (process.env.NARAD_TEST_SEED === undefined) {
      assert.deepEqual(plan.map((p) => [p.kind, p.target < 3 ? "main" : "remote"]).sort(), [["kill", "main"], ["kill", "remote"]], `seed ${CHILDREN_SEED}`);
    }
    const r = await runWorkload({
      workload: "children",
      nodes: 3,
      controlPlaneUrl: pg!.url,
      outDir: await outDir(),
      seed: CHILDREN_SEED,
      durationS: 6,
      rate: 80,
      faultIntervalMs: schedule.intervalMs,
      faultHoldMs: schedule.holdMs,
      // At least those two kills, however slow restarts are on this machine.
      faultsMin: 2,
    });
    assertValid(r);
    const rep = r.report!;
    for (const a of ["lost", "misrouted", "early-delivery"] as const) assert.equal(rep.anomalyCounts[a] ?? 0, 0, explain(r));
    // The topology the checker judged: four children, the remote one on the two nodes of the other
    // cluster; each with how long its copier waits for a copy's answer (the forward timeout, the push's).
    assert.deepEqual(r.config.children, {
      t: [
        { topic: "t.fan", kind: "fanout", copy_timeout_ms: 5_000 },
        { topic: "t.delay", kind: "delay", delay_ms: 5_000, copy_timeout_ms: 5_000 },
        { topic: "t.replica", kind: "replica", copy_timeout_ms: 5_000 },
        { topic: "remote-t", kind: "remote", nodes: ["r1", "r2"], copy_timeout_ms: 10_000 },
      ],
    });
    assert.equal(rep.counts.pairs.total, 5 * rep.counts.messages, explain(r));
    // The kills happened, each with boot evidence: a main node (a parent's owner) and a remote node.
    const kills = rep.faults.filter((f) => f.kind === "kill" && f.outcome === "ok");
    for (const side of [/^n\d$/, /^r\d$/]) {
      const k = kills.find((f) => side.test(f.node ?? ""));
      assert.ok(k !== undefined, `seed ${CHILDREN_SEED}: no kill of a ${side.source} node: ${JSON.stringify(rep.faults.map((f) => [f.kind, f.node]))}`);
      assert.equal(k.evidence, true, `seed ${CHILDREN_SEED}: the kill of ${k.node} has no boot evidence`);
    }
    // Every path got deliveries, the remote one from both nodes of the other cluster.
    const byPath = await deliveriesByPath(r);
    for (const path of ["t", "t.fan", "t.delay", "t.replica", "remote-t"]) assert.ok((byPath.get(path)?.count ?? 0) > 0, `seed ${CHILDREN_SEED}: no delivery on ${path}`);
    assert.deepEqual([...byPath.get("remote-t")!.nodes].sort(), ["r1", "r2"]);
    // Every 202 names the parent partition's owner, as the re-copy rule needs; the owners are spread.
    const owners = new Set<string>();
    let oks = 0;
    for (const line of (await readFile(r.historyPath, "utf8")).split("\n")) {
      if (!line.includes('"f":"produce"') || !line.includes('"type":"ok"')) continue;
      oks++;
      const node = (JSON.parse(line) as { value: { node?: string } }).value.node;
      if (node !== undefined) owners.add(node);
      assert.match(node ?? "", /^n[123]$/, line);
    }
    assert.equal(oks, r.counts.produceOk);
    assert.deepEqual([...owners].sort(), ["n1", "n2", "n3"]);
  });
});

/** Deliveries per path in the history, and the owners that leased them. */
async function deliveriesByPath(r: RunResult): Promise<Map<string, { count: number; nodes: Set<string> }>> {
  const out = new Map<string, { count: number; nodes: Set<string> }>();
  for (const line of (await readFile(r.historyPath, "utf8")).split("\n")) {
    if (!line.includes('"f":"consume"') || !line.includes('"type":"ok"')) continue;
    const v = (JSON.parse(line) as { value: { topic: string; msg: unknown; node?: string } }).value;
    if (v.msg === null) continue;
    const e = out.get(v.topic) ?? { count: 0, nodes: new Set<string>() };
    e.count++;
    if (v.node !== undefined) e.nodes.add(v.node);
    out.set(v.topic, e);
  }
  return out;
}

/** The owners (Narad-Owner) the history's deliveries name. */
async function ownersOf(r: RunResult): Promise<Set<string>> {
  const owners = new Set<string>();
  for (const line of (await readFile(r.historyPath, "utf8")).split("\n")) {
    if (!line.includes('"f":"consume"') || !line.includes('"type":"ok"')) continue;
    const node = (JSON.parse(line) as { value: { node?: string } }).value.node;
    if (node !== undefined) owners.add(node);
  }
  return owners;
}
