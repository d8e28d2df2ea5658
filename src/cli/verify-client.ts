// `narad verify run --workload client --scenario NAME` and the client rows of `narad verify
// calibrate`: argument checks and what they print. The work is in src/verify/workloads/client.

import type { Writable } from "node:stream";
import { resolve } from "node:path";
import { abortOnSignals } from "./verify-run.js";

export interface ClientRunArgs {
  scenario?: string;
  out: string;
  bug?: string[];
}

/** Exit code: the lease model's (0 valid, 1 invalid, 2 unknown), 2 for bad arguments, 130 interrupted. */
export async function runClientCommand(args: ClientRunArgs, out: Writable): Promise<number> {
  const c = await import("../verify/workloads/client/index.js");
  const list = c.CLIENT_SCENARIOS.map((s) => `  ${s.name.padEnd(14)} ${s.short ? "(short) " : ""}${s.description}`).join("\n");
  if (args.scenario === undefined) {
    process.stderr.write(`narad: --workload client needs --scenario NAME, one of:\n${list}\n`);
    return 2;
  }
  const sc = c.clientScenario(args.scenario);
  if (sc === undefined) {
    process.stderr.write(`narad: unknown client scenario ${JSON.stringify(args.scenario)}; one of:\n${list}\n`);
    return 2;
  }
  const bugs = args.bug ?? [];
  for (const b of bugs) {
    if (!c.isClientBugName(b)) {
      process.stderr.write(`narad: unknown SDK bug ${JSON.stringify(b)}; known: ${c.CLIENT_BUG_NAMES.join(", ")}\n`);
      return 2;
    }
  }
  const outDir = resolve(args.out);
  out.write(`narad verify run: workload client, scenario ${sc.name}${bugs.length > 0 ? `, TEST SDK BUGS ${bugs.join(",")}` : ""}, out ${outDir}\n`);
  const sig = abortOnSignals();
  try {
    const r = await c.runClientScenario({ scenario: sc, outDir, bugs: bugs as never, signal: sig.signal, onProgress: (l) => out.write(`  ${l}\n`) });
    out.write(c.formatClientSummary(sc, r.report, r.lanes, r.findings, { history: r.historyPath, html: r.reportHtmlPath, client: r.clientPath }));
    if (sig.signal.aborted) return 130;
    return r.report.verdict === "valid" ? 0 : r.report.verdict === "invalid" ? 1 : 2;
  } catch (e) {
    process.stderr.write(`narad: the client run failed: ${(e as Error).message}\n`);
    return 2;
  } finally {
    sig.dispose();
  }
}

/** The client calibration rows (after the broker's table); 0 when every row passes. */
export async function runClientCalibration(opts: { outDir: string; only?: string[]; signal: AbortSignal }, out: Writable): Promise<number> {
  const c = await import("../verify/workloads/client/index.js");
  const rows = await c.calibrateClients({
    outDir: opts.outDir,
    ...(opts.only && opts.only.length > 0 ? { only: opts.only } : {}),
    signal: opts.signal,
    onRowStart: (k, i, n) => out.write(`[client ${i + 1}/${n}] ${k.bug ?? "SDK as shipped"} against ${k.scenario} …\n`),
    onRow: (r) => out.write(`      ${r.pass ? "PASS" : "FAIL"}: ${r.actual}${r.reason ? ` (${r.reason})` : ""}\n`),
  });
  if (rows.length === 0) return 0;
  out.write("\n" + c.formatClientCalibrationTable(rows) + "\n");
  return rows.every((r) => r.pass) ? 0 : 1;
}
