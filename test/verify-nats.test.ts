// The NATS rows of the client matrix, short form (issue 15 items 3 and 4; the full matrix is
// `npm run verify:clients`): real nats-server processes, the fault proxy on the consumer's line,
// nats.js 2.x and 3.x consumers, each cell judged by the stream model and compared with the
// expected table in docs/verification-clients.md. Without nats-server on PATH the cells skip with
// how to install it; the table's own checks always run.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { findNatsServer, NATS_INSTALL_HINT } from "../src/verify/workloads/nats/index.js";
import { CALIBRATION_CELLS, cellKey, matrixCells, parseExpectations, runMatrix } from "../src/verify/workloads/nats/matrix.js";
import { clientName } from "../src/verify/workloads/nats/clients.js";
import { checkStream } from "../src/verify/checker/stream/index.js";
import { runNarad } from "./harness.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const DOC = join(ROOT, "docs/verification-clients.md");

/**
 * The short form: the two sides of the seed's 5-second edge for the push ordered consumer of 2.x
 * (a cut of 3 s, under the server's 5 s; one of 8 s, over it), the 3.x ordered consumer across
 * the same 8 s cut, and the 3.x KV watcher (a push ordered consumer of its own) across it too;
 * then the calibration on nats.deno #688: nats@2.22.0's KV watcher must fail a quiet restart
 * (an error, then nothing: stalled, its publishes lost) and nats@2.23.0's, with the fix, pass it.
 */
// nats3/ordered/reset-handshake is left to the full matrix (npm run verify:clients): once, under
// the full suite's load, its run was judged invalid where the table expects valid, and a short
// form must not depend on where a reset lands in a loaded machine's handshake.
const SHORT_FORM = ["nats2/push-ordered/cut-3", "nats2/push-ordered/cut-8", "nats3/ordered/cut-8", "nats3/kv-watch/cut-8", "nats2.22/kv-watch/restart-quiet", "nats2.23/kv-watch/restart-quiet"];

test("the expected table has exactly one row per matrix cell, each naming an installed client's major version (a calibration row's exact one)", async () => {
  const doc = await readFile(DOC, "utf8");
  const expected = parseExpectations(doc);
  const cells = matrixCells();
  assert.equal(cells.filter((c) => c.calibration).length, CALIBRATION_CELLS.length);
  const keys = cells.map((c) => cellKey(c, clientName(c.gen)));
  assert.equal(new Set(keys).size, cells.length);
  assert.deepEqual([...expected.keys()].sort(), [...keys].sort());
  for (const e of expected.values()) {
    for (const v of e.verdict.split(" or ")) assert.ok(["valid", "invalid", "unknown"].includes(v), `${e.client} ${e.api} ${e.scenario}: verdict ${e.verdict}`);
  }
  for (const term of SHORT_FORM) assert.equal(matrixCells([term]).length, 1, term);
});

test("narad verify run --system and narad verify matrix refuse what they do not know in one line", async () => {
  const a = await runNarad(["verify", "run", "--system", "nats", "--scenario", "nope", "--out", tmpdir()]);
  assert.equal(a.code, 2);
  assert.match(a.stderr, /^narad: --scenario is one of cut-3, cut-4, cut-6, cut-8, latency-25, reset-storm, reset-handshake, restart, pause-20, pause-35, restart-quiet\n$/);
  const b = await runNarad(["verify", "run", "--system", "kafka", "--scenario", "cut-3", "--out", tmpdir()]);
  assert.equal(b.code, 2);
  assert.match(b.stderr, /^narad: unknown system "kafka"/);
  const c = await runNarad(["verify", "run", "--system", "nats", "--scenario", "cut-3", "--client", "nats3", "--api", "push-ordered", "--out", tmpdir()]);
  assert.equal(c.code, 2);
  assert.match(c.stderr, /^narad: --api for nats3 is one of ordered, pull, fetch, kv-watch\n$/);
  const d = await runNarad(["verify", "run", "--out", tmpdir()]);
  assert.equal(d.code, 2);
  assert.match(d.stderr, /--workload is required \(or --system nats with --scenario\)/);
  const e = await runNarad(["verify", "matrix", "--system", "redis"]);
  assert.equal(e.code, 2);
  assert.match(e.stderr, /^narad: unknown system "redis"; the matrix runs --system nats\n$/);
});

const natsServer = findNatsServer();

test(
  "NATS short form: each cell's verdict and silence are the expected table's",
  natsServer === null ? { skip: `nats-server is not on PATH: ${NATS_INSTALL_HINT}` } : {},
  async () => {
    const out = await mkdtemp(join(tmpdir(), "narad-nats-matrix-"));
    try {
      const results = await runMatrix({ outDir: out, docPath: DOC, only: SHORT_FORM });
      assert.equal(results.length, SHORT_FORM.length);
      for (const r of results) {
        const name = `${r.client} ${r.cell.api} ${r.cell.scenario.name}`;
        assert.ok(r.pass, `${name}: ${r.why}\n${r.run?.summary ?? ""}`);
        // The history on disk is the one judged, and every fault has its evidence.
        const again = await checkStream(r.run!.historyPath);
        assert.equal(again.verdict, r.verdict, name);
        assert.ok(again.faults.length > 0 && again.faults.every((f) => f.evidence), `${name}: ${again.faults.map((f) => f.evidenceNote).join("; ")}`);
        assert.ok(again.counts.publishes.ok > 0 && again.counts.deliveries > 0, name);
      }
      // The calibration's bad release fails the way nats.deno #688 says: the watcher's rebuild
      // after the restart is refused, the error reaches the application, and nothing more comes.
      // (It rests on the bug's race, so it may take up to BUG_CELL_RUNS runs: the run that caught it is judged.)
      const bad = results.find((r) => r.cell.gen === "nats2.22")!;
      assert.deepEqual(Object.keys(bad.run!.report.anomalyCounts).sort(), ["lost", "stalled"], bad.run!.summary);
      const history = await readFile(bad.run!.historyPath, "utf8");
      assert.match(history, /"event":"error","detail":"unable to recreate ordered consumer KV_narad at seq \d+: consumer name already in use \(err_code 10013\)"/);
      const good = results.find((r) => r.cell.gen === "nats2.23")!;
      assert.equal(good.verdict, "valid", good.run!.summary);
    } finally {
      await rm(out, { recursive: true, force: true });
    }
  },
);
