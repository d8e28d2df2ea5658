// The two cluster suites of seed 000, short, judged by the checker: three nodes on loopback with a
// PostgreSQL control plane and security on (nodes without --dev, workers with credentials), the
// workers' requests spread over every node in turn.
//   e2e:       a known set produced, consumed and acked with nothing broken; any duplicate, loss,
//              unknown message or wrong topic fails it.
//   e2e-chaos: the same while a random node is stopped every few seconds (SIGTERM, SIGKILL after
//              10 s) and started again; every message acked before the deadline, every
//              redelivery explained by a fault.
// Longer by hand: `npm run test:cluster-e2e`, `npm run test:cluster-chaos`. Seeds are fixed
// (NARAD_TEST_SEED overrides them) and printed in every failure message, so a failing run is
// reproduced with `narad verify run --workload W --nodes 3 --seed N`.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { removeDir, tempDir } from "./harness.js";
import { startPostgres, type TestPostgres } from "./support/postgres.js";
import { runWorkload, type RunResult } from "../src/verify/workloads/index.js";

const SEED = process.env.NARAD_TEST_SEED !== undefined ? Number(process.env.NARAD_TEST_SEED) : 0;

let pg: TestPostgres | undefined;
const dirs: string[] = [];
let failed = false;
before(async () => {
  // One PostgreSQL for both runs; each run makes a fresh database of its own on it.
  pg = await startPostgres();
});
after(async () => {
  await pg?.stop();
  if (!failed) for (const d of dirs) await removeDir(d);
});

async function outDir(): Promise<string> {
  const d = await tempDir("narad-cluster-suite-");
  dirs.push(d);
  return d;
}

function explain(r: RunResult): string {
  const anomalies = r.report?.anomalies.slice(0, 5).map((a) => `${a.name} ${a.msg} on ${a.path} ops ${a.ops.join(",")}: ${a.explanation}`) ?? [];
  const unknowns = r.report?.unknowns.slice(0, 5).map((u) => `${u.reason} ${u.msg}: ${u.explanation}`) ?? [];
  return [
    `workload ${r.workload} on 3 nodes, seed ${r.seed}: verdict ${r.verdict} (${r.report?.reason ?? "-"})`,
    ...anomalies,
    ...unknowns,
    ...r.findings.map((f) => `driver ${f.kind}: ${f.text}`),
    `history ${r.historyPath}`,
  ].join("\n  ");
}

function assertValid(r: RunResult): void {
  if (r.verdict !== "valid" || r.exitCode !== 0 || r.findings.length > 0) failed = true;
  assert.equal(r.verdict, "valid", explain(r));
  assert.deepEqual(r.findings, [], explain(r));
  assert.equal(r.exitCode, 0, explain(r));
}

describe("cluster suites (three nodes, security on)", { timeout: 150_000 }, () => {
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
});

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
