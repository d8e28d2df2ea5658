// `narad verify run --system nats …` and `narad verify matrix --system nats`: the NATS runs of the
// stream model (docs/verification-clients.md). This file only parses and prints; the work is in
// src/verify/workloads/nats, loaded on use (it loads the nats.js packages under test).

import type { Writable } from "node:stream";
import { resolve } from "node:path";
import { abortOnSignals } from "./verify-run.js";

export interface NatsRunArgs {
  system: string;
  scenario?: string;
  client?: string;
  api?: string;
  linger?: string;
  out: string;
}

export interface MatrixArgs {
  system: string;
  out?: string;
  doc?: string;
  only?: string[];
  writeDoc?: boolean;
}

function usage(text: string): number {
  process.stderr.write(`narad: ${text}\n`);
  return 2;
}

/** One NATS run; returns the checker's exit code (0 valid, 1 invalid, 2 unknown or usage). */
export async function runNatsCommand(args: NatsRunArgs, out: Writable): Promise<number> {
  if (args.system !== "nats") return usage(`unknown system ${JSON.stringify(args.system)}; the one system besides Narad is nats`);
  const m = await import("../verify/workloads/nats/index.js");
  const scenario = m.natsScenario(args.scenario ?? "");
  if (scenario === undefined) return usage(`--scenario is one of ${[...m.NATS_SCENARIOS, ...m.CALIBRATION_SCENARIOS].map((s) => s.name).join(", ")}`);
  const gen = (args.client ?? "nats2") as (typeof m.ALL_GENERATIONS)[number];
  if (!m.ALL_GENERATIONS.includes(gen)) return usage(`--client is nats2 (nats@2.x), nats3 (@nats-io/jetstream@3.x), or nats2.22 or nats2.23 (the calibration's), not ${JSON.stringify(args.client)}`);
  const api = (args.api ?? "ordered") as (typeof m.CONSUMER_APIS)["nats2"][number];
  if (!m.CONSUMER_APIS[gen].includes(api)) return usage(`--api for ${gen} is one of ${m.CONSUMER_APIS[gen].join(", ")}`);
  if (m.findNatsServer() === null) return usage(`nats-server is not installed (${m.NATS_INSTALL_HINT})`);
  out.write(`narad verify run: system nats, ${m.clientName(gen)} ${api}, scenario ${scenario.name}, out ${resolve(args.out)}\n`);
  out.write(`prediction: ${scenario.prediction}\n`);
  const sig = abortOnSignals();
  try {
    const lingerS = args.linger === undefined ? 0 : Number(args.linger);
    if (!Number.isFinite(lingerS) || lingerS < 0) return usage(`--linger must be a number of seconds ≥ 0, not ${JSON.stringify(args.linger)}`);
    const r = await m.runNatsScenario({ gen, api, scenario, outDir: resolve(args.out), signal: sig.signal, lingerMs: lingerS * 1000, onProgress: (l) => out.write(`  ${l}\n`) });
    out.write(r.summary);
    out.write(`history: ${r.historyPath}\n`);
    return r.report.verdict === "valid" ? 0 : r.report.verdict === "invalid" ? 1 : 2;
  } catch (e) {
    process.stderr.write(`narad: the run failed: ${(e as Error).message}\n`);
    return 2;
  } finally {
    sig.dispose();
  }
}

/** The matrix; returns 0 when every cell is as expected, 1 otherwise. */
export async function runMatrixCommand(args: MatrixArgs, out: Writable): Promise<number> {
  if (args.system !== "nats") return usage(`unknown system ${JSON.stringify(args.system)}; the matrix runs --system nats`);
  const n = await import("../verify/workloads/nats/index.js");
  const mx = await import("../verify/workloads/nats/matrix.js");
  if (n.findNatsServer() === null) return usage(`nats-server is not installed (${n.NATS_INSTALL_HINT})`);
  const docPath = resolve(args.doc ?? "docs/verification-clients.md");
  const outDir = resolve(args.out ?? "verify-out/nats-matrix");
  const cells = mx.matrixCells(args.only ?? []);
  out.write(`narad verify matrix: ${cells.length} cells, expectations from ${docPath}, runs in ${outDir}\n`);
  const sig = abortOnSignals();
  let results;
  try {
    results = await mx.runMatrix({
      outDir,
      docPath,
      only: args.only ?? [],
      signal: sig.signal,
      onCellStart: (c, i, total) => out.write(`[${i + 1}/${total}] ${n.clientName(c.gen)} ${c.api} ${c.scenario.name} …\n`),
      onCell: (r) => out.write(`      ${r.pass ? "as expected" : "DIFFERS"}: ${r.verdict}, silence ${r.silenceMs === null ? "—" : `${(r.silenceMs / 1000).toFixed(2)} s`}${r.anomalies ? ` (${r.anomalies})` : ""}${r.pass ? "" : ` — ${r.why}`}\n`),
    });
  } catch (e) {
    process.stderr.write(`narad: the matrix failed: ${(e as Error).message}\n`);
    return 2;
  } finally {
    sig.dispose();
  }
  out.write("\n" + mx.formatMatrix(results));
  if (args.writeDoc) {
    await mx.writeMeasured(docPath, results);
    out.write(`measured columns written to ${docPath}\n`);
  }
  if (sig.signal.aborted) return 130;
  return results.length > 0 && results.every((r) => r.pass) ? 0 : 1;
}
