// `narad verify run` and `narad verify calibrate`: argument parsing and everything they print.
// The work is in src/verify/workloads (loaded on use); this file only talks to people: a progress
// line while a run goes (rewritten in place on a terminal, a line every few seconds otherwise),
// then the verdict, the report paths and the seed, and the checker's exit code.

import type { Command } from "commander";
import type { Writable } from "node:stream";
import { resolve } from "node:path";
import type { RunProgress, RunResult, CalibrationRow } from "../verify/workloads/index.js";
import { HEALING_FAULT_KINDS } from "../verify/history/types.js";

/** Without a terminal, a progress line this often. */
const PLAIN_PROGRESS_EVERY_MS = 5_000;

export interface RunCommandArgs {
  workload: string;
  out: string;
  nodes?: string;
  duration?: string;
  seed?: string;
  rate?: string;
  keep?: boolean;
  bug?: string[];
  /** commander: --security → true, --no-security → false, neither → undefined. */
  security?: boolean;
  controlPlane?: string;
  /** commander: --quiet-windows → true, --no-quiet-windows → false, neither → undefined. */
  quietWindows?: boolean;
  replicationFactor?: string;
  acks?: string;
  transport?: string;
}

export interface CalibrateCommandArgs {
  out?: string;
  duration?: string;
  seed?: string;
  only?: string[];
}

class UsageError extends Error {}

function num(name: string, v: string | undefined, integer: boolean): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || (integer && !Number.isSafeInteger(n))) {
    throw new UsageError(`${name} must be ${integer ? "an integer" : "a number"}, not ${JSON.stringify(v)}`);
  }
  return n;
}

function isTty(out: Writable): boolean {
  return (out as unknown as { isTTY?: boolean }).isTTY === true;
}

export function progressText(p: RunProgress): string {
  const s = (p.elapsedMs / 1000).toFixed(1).padStart(6);
  // Both rates: the last interval's dips inside a fault window, the average is the run's. The
  // faults are those injected, healing not counted, as the verdict's summary counts them.
  return `${s}s  ${p.phase.padEnd(10)} ${String(p.opsPerS).padStart(6)} ops/s now, ${p.opsPerSAvg} avg  ${p.ops} ops  ${p.produceOk} produced  ${p.pending} pending  ${p.faults} faults`;
}

/** A progress printer: one rewritten line on a terminal, else a line every few seconds and on phase changes. */
function progressPrinter(out: Writable): { onProgress: (p: RunProgress) => void; end: () => void } {
  const tty = isTty(out);
  let lastPrintMs = -Infinity;
  let lastPhase = "";
  let drawn = false;
  return {
    onProgress(p) {
      if (tty) {
        out.write(`\r\x1b[K${progressText(p)}`);
        drawn = true;
        return;
      }
      if (p.phase !== lastPhase || p.elapsedMs - lastPrintMs >= PLAIN_PROGRESS_EVERY_MS) {
        out.write(progressText(p) + "\n");
        lastPrintMs = p.elapsedMs;
        lastPhase = p.phase;
      }
    },
    end() {
      if (tty && drawn) out.write("\r\x1b[K");
    },
  };
}

/** Aborts on SIGINT/SIGTERM so the driver can clean up; a second signal exits at once. */
export function abortOnSignals(): { signal: AbortSignal; dispose: () => void } {
  const ac = new AbortController();
  let count = 0;
  const handler = (sig: NodeJS.Signals) => {
    if (++count > 1) process.exit(130);
    process.stderr.write(`\nnarad: ${sig}: stopping the run and cleaning up (again to quit at once)\n`);
    ac.abort();
  };
  process.on("SIGINT", handler);
  process.on("SIGTERM", handler);
  return {
    signal: ac.signal,
    dispose: () => {
      process.off("SIGINT", handler);
      process.off("SIGTERM", handler);
    },
  };
}

/** Faults injected, healing (start, resume, heal) not counted: the number progress lines show. */
export function injectedFaults(faults: readonly { kind: string }[]): number {
  return faults.filter((f) => !HEALING_FAULT_KINDS.has(f.kind)).length;
}

/** What the run adds to the checker's summary: the driver's findings, counts, paths and seed. */
function summary(r: RunResult, verdictPrinted: boolean): string {
  const lines: string[] = [];
  const rep = r.report;
  if (r.interrupted) lines.push("interrupted: no verdict (the history so far is kept)");
  else if (rep !== null && !verdictPrinted) {
    lines.push(`verdict: ${rep.verdict} (${rep.reason})`);
    const anomalies = Object.entries(rep.anomalyCounts).map(([k, n]) => `${k} ×${n}`);
    if (anomalies.length > 0) lines.push(`  anomalies: ${anomalies.join(", ")}`);
    for (const a of rep.anomalies.slice(0, 5)) lines.push(`    ${a.name} ${a.msg ?? ""} on ${a.path}: ${a.explanation} (ops ${a.ops.join(", ")})`);
    const unknowns = Object.entries(rep.unknownCounts).map(([k, n]) => `${k} ×${n}`);
    if (unknowns.length > 0) lines.push(`  cannot judge: ${unknowns.join(", ")}`);
    const rd = rep.redeliveries;
    lines.push(
      `  ${rep.counts.messages} messages, ${rep.counts.deliveries} deliveries; redeliveries ${rd.total} ` +
        `(lapse ${rd.byCause.lapse}, nack ${rd.byCause.nack}, fault ${rd.byCause.fault}${rd.explainedRecopiesTotal > 0 ? `, of them child re-copies ${rd.explainedRecopiesTotal}` : ""}); ${injectedFaults(rep.faults)} faults (${rep.faults.length} fault operations with healing); ` +
        `lag max ${rep.lag.maxMs === null ? "-" : `${Math.round(rep.lag.maxMs)} ms`}`,
    );
  }
  for (const f of r.findings) lines.push(`  driver (${f.kind}): ${f.text}`);
  for (const n of r.notes) lines.push(`  note: ${n}`);
  const c = r.counts;
  lines.push(
    `  produce ${c.produceOk} ok / ${c.produceFail} refused (${c.produce429} × 429) / ${c.produceInfo} ambiguous; ` +
      `${c.deliveries} deliveries, ${c.ackOk} acks; ${r.events} history lines in ${(r.durationMs / 1000).toFixed(1)} s`,
  );
  lines.push(`history: ${r.historyPath}`);
  const reports = [r.reportJsonPath, r.reportHtmlPath].filter((p): p is string => p !== null);
  if (reports.length > 0 && !verdictPrinted) lines.push(`report:  ${reports.join("  ")}`);
  if (r.dataDirs.length > 0) lines.push(`data:    ${r.dataDirs.join("  ")} (kept)`);
  lines.push(`seed:    ${r.seed} (same schedule: --seed ${r.seed})`);
  if (!r.interrupted) lines.push(`result:  ${r.verdict ?? "no verdict"}${r.findings.some((f) => f.kind === "violation") ? " (and the driver's findings above)" : ""}, exit ${r.exitCode}`);
  return lines.join("\n") + "\n";
}

/** `narad verify run`; returns the exit code (the checker's: 0 valid, 1 invalid, 2 unknown; 130 interrupted). */
export async function runRunCommand(args: RunCommandArgs, out: Writable): Promise<number> {
  const { runWorkload, isWorkloadName, WORKLOAD_NAMES, CHILDREN_CYCLE } = await import("../verify/workloads/index.js");
  let opts;
  try {
    if (!isWorkloadName(args.workload)) throw new UsageError(`unknown workload ${JSON.stringify(args.workload)}; one of ${WORKLOAD_NAMES.join(", ")}`);
    if (args.quietWindows !== undefined && args.workload !== "children") throw new UsageError("--quiet-windows and --no-quiet-windows go with --workload children");
    if (args.acks !== undefined && args.acks !== "leader" && args.acks !== "quorum") throw new UsageError(`--acks must be leader or quorum, not ${JSON.stringify(args.acks)}`);
    if (args.transport !== undefined && args.transport !== "http" && args.transport !== "stream") throw new UsageError(`--transport must be http or stream, not ${JSON.stringify(args.transport)}`);
    opts = {
      workload: args.workload,
      outDir: resolve(args.out),
      nodes: num("--nodes", args.nodes, true),
      durationS: num("--duration", args.duration, false),
      seed: num("--seed", args.seed, true),
      rate: num("--rate", args.rate, false),
      keep: args.keep === true,
      bugs: args.bug ?? [],
      security: args.security,
      controlPlaneUrl: args.controlPlane,
      replicationFactor: num("--replication-factor", args.replicationFactor, true),
      ...(args.acks !== undefined ? { acks: args.acks as "leader" | "quorum" } : {}),
      ...(args.transport !== undefined ? { transport: args.transport as "http" | "stream" } : {}),
      ...(args.quietWindows === true ? { cycle: CHILDREN_CYCLE } : args.quietWindows === false ? { cycle: null } : {}),
    };
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`narad: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const seed = opts.seed ?? (await import("../verify/nemesis/index.js")).randomSeed();
  const clean = Object.fromEntries(Object.entries({ ...opts, seed }).filter(([, v]) => v !== undefined)) as typeof opts & { seed: number };
  const nodes = clean.nodes ?? 1;
  const security = clean.security ?? nodes > 1;
  const rf = clean.replicationFactor ?? (clean.workload === "failover" ? 3 : 1);
  out.write(`narad verify run: workload ${clean.workload}, ${nodes === 1 ? "one node" : `${nodes} nodes`}${rf > 1 ? `, ${rf} copies (acks ${clean.acks ?? "quorum"})` : ""}, security ${security ? "on" : "off"}, seed ${seed}${clean.bugs.length > 0 ? `, TEST BUGS ${clean.bugs.join(",")}` : ""}, out ${clean.outDir}\n`);
  const progress = progressPrinter(out);
  const sig = abortOnSignals();
  let r: RunResult;
  try {
    r = await runWorkload({ ...clean, signal: sig.signal, onProgress: progress.onProgress });
  } catch (e) {
    progress.end();
    process.stderr.write(`narad: the run failed: ${(e as Error).message} (seed ${seed})\n`);
    return 2;
  } finally {
    sig.dispose();
  }
  progress.end();
  let verdictPrinted = false;
  if (r.report !== null) {
    // The checker's own one-screen summary, pointing at the reports the run wrote.
    const { formatSummary } = await import("../verify/report/index.js");
    out.write(formatSummary(r.report, { ...(r.reportJsonPath ? { jsonPath: r.reportJsonPath } : {}), ...(r.reportHtmlPath ? { htmlPath: r.reportHtmlPath } : {}) }));
    verdictPrinted = true;
  }
  out.write(summary(r, verdictPrinted));
  return r.exitCode;
}

/** `narad verify calibrate`; returns 0 when every row passes, 1 otherwise. */
export async function runCalibrateCommand(args: CalibrateCommandArgs, out: Writable): Promise<number> {
  const { calibrate, formatCalibrationTable, CALIBRATION_CASES, ISSUE14_CALIBRATION_CASES } = await import("../verify/workloads/index.js");
  const cases = [...CALIBRATION_CASES, ...ISSUE14_CALIBRATION_CASES];
  let durationS: number | undefined;
  let seed: number | undefined;
  try {
    durationS = num("--duration", args.duration, false);
    seed = num("--seed", args.seed, true);
  } catch (e) {
    if (e instanceof UsageError) {
      process.stderr.write(`narad: ${e.message}\n`);
      return 2;
    }
    throw e;
  }
  const outDir = resolve(args.out ?? "narad-calibration");
  out.write(`narad verify calibrate: ${cases.length} rows, runs in ${outDir}\n`);
  const progress = progressPrinter(out);
  const sig = abortOnSignals();
  let rows: CalibrationRow[];
  try {
    rows = await calibrate({
      outDir,
      cases,
      ...(durationS !== undefined ? { durationS } : {}),
      ...(seed !== undefined ? { seed } : {}),
      ...(args.only && args.only.length > 0 ? { only: args.only } : {}),
      signal: sig.signal,
      onRowStart: (c, i, n) => {
        progress.end();
        out.write(`[${i + 1}/${n}] ${c.bug ?? "correct build"} against ${c.config} …\n`);
      },
      onRow: (r) => {
        progress.end();
        out.write(`      ${r.pass ? "PASS" : "FAIL"}: ${r.verdict ?? "no verdict"}${r.reason ? ` (${r.reason})` : ""}\n`);
      },
      onProgress: isTty(out) ? progress.onProgress : undefined,
    });
  } finally {
    sig.dispose();
  }
  progress.end();
  if (rows.length > 0 || args.only === undefined) out.write("\n" + formatCalibrationTable(rows) + "\n");
  if (sig.signal.aborted) return 130;
  // The client scenarios' rows (seeded SDK bugs) after the broker's.
  const { runClientCalibration } = await import("./verify-client.js");
  const again = abortOnSignals();
  let clientExit: number;
  try {
    clientExit = await runClientCalibration({ outDir, ...(args.only ? { only: args.only } : {}), signal: again.signal }, out);
  } finally {
    again.dispose();
  }
  if (again.signal.aborted) return 130;
  return rows.every((r) => r.pass) && clientExit === 0 ? 0 : 1;
}

const collect = (v: string, prev: string[] = []) => [...prev, ...v.split(",").map((s) => s.trim()).filter(Boolean)];

/** Adds `run` and `calibrate` under `narad verify`. */
export function registerRunCommands(verify: Command): void {
  verify
    .command("run")
    .description("run a workload against real broker processes, record the history, and judge it (exit 0 valid, 1 invalid, 2 unknown)")
    .option("--workload <name>", "e2e, e2e-chaos, chaos, steady, power-loss, pause, partition, children, failover, idempotent or dead-letters (a Narad run); client: the SDK's consumer loops under a --scenario (without one it lists them)")
    .option("--system <name>", "another broker under the stream model instead of Narad: nats (docs/verification-clients.md)")
    .option("--scenario <name>", "with --system nats: cut-3, cut-4, cut-6, cut-8, latency-25, reset-storm or reset-handshake")
    .option("--client <gen>", "with --system nats: nats2 (nats@2.x, default), nats3 (@nats-io/jetstream@3.x), nats2.22 or nats2.23 (calibration)")
    .option("--api <name>", "with --system nats: push-ordered (nats2), ordered (default), pull, fetch or kv-watch")
    .option("--linger <s>", "with --system nats: after the drain, keep recording late deliveries this many seconds")
    .requiredOption("--out <dir>", "where history.jsonl, report.json and report.html go")
    .option("--nodes <n>", "broker nodes: 1 (default) or a cluster of n on a PostgreSQL control plane")
    .option("--security", "security on: nodes without --dev, workers with credentials (default for a cluster)")
    .option("--no-security", "security off (--dev)")
    .option("--control-plane <url>", "cluster: a PostgreSQL server to use (a fresh database is made) instead of an embedded one")
    .option("--quiet-windows", "children: load in bursts, faults only in the quiet windows between them (no copy in flight)")
    .option("--no-quiet-windows", "children: continuous load, faults at any moment (the default)")
    .option("--replication-factor <n>", "copies of each partition of the main topic (a cluster; faults then aim at the partitions' leaders)")
    .option("--acks <mode>", "a replicated topic's acks mode: quorum (default) or leader")
    .option("--transport <t>", "how the workers produce: http (default) or stream (the streaming protocol, docs/api.md)")
    .option("--duration <s>", "seconds of load (default per workload)")
    .option("--seed <n>", "seed of every random choice (default: random, printed)")
    .option("--rate <r>", "produces per second over all producers")
    .option("--keep", "keep the nodes' data directories")
    .option("--bug <name>", "TEST ONLY: turn on a seeded broker bug (repeatable); with --workload client, a seeded SDK bug", collect)
    .action(async (opts: RunCommandArgs & { system?: string; scenario?: string; client?: string; api?: string; linger?: string }) => {
      if (opts.system !== undefined && opts.system !== "narad") {
        const { runNatsCommand } = await import("./verify-nats.js");
        process.exitCode = await runNatsCommand({ ...opts, system: opts.system }, process.stdout);
        return;
      }
      if (opts.workload === "client") {
        const { runClientCommand } = await import("./verify-client.js");
        process.exitCode = await runClientCommand({ out: opts.out, ...(opts.scenario !== undefined ? { scenario: opts.scenario } : {}), ...(opts.bug !== undefined ? { bug: opts.bug } : {}) }, process.stdout);
        return;
      }
      if (opts.workload === undefined) {
        process.stderr.write("narad: --workload is required (or --system nats with --scenario)\n");
        process.exitCode = 2;
        return;
      }
      process.exitCode = await runRunCommand(opts, process.stdout);
    });
  verify
    .command("calibrate")
    .description("run every seeded bug against the workload that must catch it, and the correct build; print the table")
    .option("--out <dir>", "where each run's history and report go", "narad-calibration")
    .option("--duration <s>", "seconds of load per run")
    .option("--seed <n>", "seed of every run (default 1)")
    .option("--only <names>", "only these bugs (or 'none', or a config name), comma-separated", collect)
    .action(async (opts: CalibrateCommandArgs) => {
      process.exitCode = await runCalibrateCommand(opts, process.stdout);
    });
  verify
    .command("matrix")
    .description("the client verdict matrix: client version × consumer API × scenario, against the expected table (exit 0 when every cell is as expected)")
    .requiredOption("--system <name>", "nats")
    .option("--out <dir>", "where each cell's history and reports go", "verify-out/nats-matrix")
    .option("--doc <file>", "the doc holding the expected table", "docs/verification-clients.md")
    .option("--only <terms>", "only cells matching one of these terms, comma-separated; a term joins generation, API and scenario with / (nats2/cut-8, ordered, nats3/kv-watch/cut-6)", collect)
    .option("--write-doc", "rewrite the doc's measured columns from this run")
    .action(async (opts: { system: string; out?: string; doc?: string; only?: string[]; writeDoc?: boolean }) => {
      const { runMatrixCommand } = await import("./verify-nats.js");
      process.exitCode = await runMatrixCommand(opts, process.stdout);
    });
}
