// The verdict matrix (`narad verify matrix --system nats`): client version × consumer API ×
// scenario, each cell one run, its verdict and silence beside the expected table kept in
// docs/verification-clients.md. A cell whose verdict differs from its expected one, or whose
// silence falls outside its expected band, fails the matrix; so does a cell the table has no row
// for (a new client or scenario needs its expectation written first).
//
// The expected table sits between the markers <!-- nats-matrix:begin --> and
// <!-- nats-matrix:end -->, one row per cell:
//   | client | api | scenario | expected verdict | expected silence | expected lag | verdict | silence | lag |
// The first six columns are the expectation (a verdict, or verdicts joined by " or " where a race
// in the system decides between them; silence and lag as "≤ 3 s", "4–8 s", "≥ 8 s" or "any"); the
// last three are what the last full run measured, which `--write-doc` rewrites in place. Lag is
// the band that judges a restart or a pause of the server: the publisher is stopped with it, so no
// acknowledged publish is waiting when the fault ends and its silence is "nothing waiting", while
// the publishes acknowledged after it wait for the consumer's rebuild (seed 002's lesson: recovery
// alone is blind after a fault that let nothing through). A row without the lag column (eight
// columns, as the table had before) expects any lag.
//
// After the client × API × scenario cells come the calibration rows (CALIBRATION_CELLS): an older
// release with a known consumer bug must fail its row and the release with the fix pass it, the
// way seed 002 calibrated on nats.go #2107. Their table rows name the exact version.

import { readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { CLIENT_GENERATIONS, CONSUMER_APIS, clientName, type ClientGeneration, type ConsumerApi } from "./clients.js";
import { NATS_SCENARIOS, natsScenario, type NatsScenario } from "./scenarios.js";
import { runNatsScenario, type NatsRunResult } from "./run.js";

export const MATRIX_BEGIN = "<!-- nats-matrix:begin -->";
export const MATRIX_END = "<!-- nats-matrix:end -->";

export interface MatrixCell {
  gen: ClientGeneration;
  api: ConsumerApi;
  scenario: NatsScenario;
  /** A calibration row: its table row names the exact client version. */
  calibration?: boolean;
}

/**
 * The calibration rows: nats.deno #688 (nats@2.22.0: after a server restart, with nothing
 * published, the ordered consumer's second rebuild re-used its name, the server answered "consumer
 * name already in use", and the watcher ended in an error), fixed in nats@2.23.0 (#689: a new name
 * for each rebuild); the current releases beside them.
 */
export const CALIBRATION_CELLS: ReadonlyArray<{ gen: ClientGeneration; api: ConsumerApi; scenario: string }> = [
  { gen: "nats2.22", api: "kv-watch", scenario: "restart-quiet" },
  { gen: "nats2.23", api: "kv-watch", scenario: "restart-quiet" },
  { gen: "nats2.22", api: "push-ordered", scenario: "restart-quiet" },
  { gen: "nats2", api: "kv-watch", scenario: "restart-quiet" },
  { gen: "nats3", api: "kv-watch", scenario: "restart-quiet" },
];

/** A cell's key in the expected table: the client by its major version ("nats@2"), a calibration row's by its exact one. */
export function cellKey(cell: MatrixCell, client: string): string {
  return `${cell.calibration ? client : clientMajor(client)}|${cell.api}|${cell.scenario.name}`;
}

export interface Expectation {
  client: string;
  api: string;
  scenario: string;
  verdict: string;
  /** Inclusive band in seconds; null: any. */
  silence: [number, number] | null;
  silenceText: string;
  /** The same for the lag. */
  lag: [number, number] | null;
  lagText: string;
}

export interface CellResult {
  cell: MatrixCell;
  client: string;
  expected: Expectation | null;
  verdict: string;
  /** The longest silence after any of the scenario's faults, in ms (0 when nothing waited). */
  silenceMs: number | null;
  lagMs: number | null;
  anomalies: string;
  pass: boolean;
  why: string;
  run: NatsRunResult | null;
}

/** Runs of a calibration row that must catch a client's bug, at most (see runMatrix). */
export const BUG_CELL_RUNS = 3;

/** Every cell, in table order: client, then API, then scenario. */
export function matrixCells(only: string[] = []): MatrixCell[] {
  const cells: MatrixCell[] = [];
  for (const gen of CLIENT_GENERATIONS) for (const api of CONSUMER_APIS[gen]) for (const scenario of NATS_SCENARIOS) cells.push({ gen, api, scenario });
  for (const c of CALIBRATION_CELLS) cells.push({ gen: c.gen, api: c.api, scenario: natsScenario(c.scenario)!, calibration: true });
  if (only.length === 0) return cells;
  // A cell is kept when some term matches it; a term is parts joined by "/" (generation, API,
  // scenario, in any order), each of which must name the cell: "nats2/cut-8", "ordered".
  return cells.filter((c) => only.some((term) => term.split("/").every((part) => part === c.gen || part === c.api || part === c.scenario.name)));
}

function parseBand(text: string): [number, number] | null {
  const t = text.trim();
  if (t === "any" || t === "—" || t === "") return null;
  let m = /^≤\s*(\d+(?:\.\d+)?)\s*s$/.exec(t);
  if (m) return [0, Number(m[1])];
  m = /^(\d+(?:\.\d+)?)\s*[–-]\s*(\d+(?:\.\d+)?)\s*s$/.exec(t);
  if (m) return [Number(m[1]), Number(m[2])];
  m = /^≥\s*(\d+(?:\.\d+)?)\s*s$/.exec(t);
  if (m) return [Number(m[1]), Infinity];
  throw new Error(`expected silence ${JSON.stringify(text)}: write "≤ N s", "A–B s", "≥ N s" or "any"`);
}

function tableLines(doc: string): { before: string; rows: string[]; after: string } {
  const b = doc.indexOf(MATRIX_BEGIN);
  const e = doc.indexOf(MATRIX_END);
  if (b < 0 || e < b) throw new Error(`the expected table's markers ${MATRIX_BEGIN} … ${MATRIX_END} are missing`);
  const inner = doc.slice(b + MATRIX_BEGIN.length, e);
  return { before: doc.slice(0, b + MATRIX_BEGIN.length), rows: inner.split("\n"), after: doc.slice(e) };
}

const cellsOf = (line: string) => line.split("|").slice(1, -1).map((c) => c.trim().replace(/^`|`$/g, ""));

/** The expected table of the doc, keyed "client|api|scenario" (client as "nats@2" / "@nats-io/jetstream@3", major only; a calibration row's exact, "nats@2.22.0"). */
export function parseExpectations(doc: string): Map<string, Expectation> {
  const out = new Map<string, Expectation>();
  for (const line of tableLines(doc).rows) {
    if (!line.trim().startsWith("|")) continue;
    const c = cellsOf(line);
    if (c.length < 5 || c[0] === "client" || /^-+$/.test(c[0]!.replace(/:/g, ""))) continue;
    const [client, api, scenario, verdict, silence] = c as [string, string, string, string, string];
    const lag = c.length >= 9 ? c[5]! : "any";
    out.set(`${client}|${api}|${scenario}`, { client, api, scenario, verdict, silence: parseBand(silence), silenceText: silence, lag: parseBand(lag), lagText: lag });
  }
  return out;
}

/** "nats@2.29.3" → "nats@2": the table names a client by its major version. */
export function clientMajor(name: string): string {
  const at = name.lastIndexOf("@");
  return at <= 0 ? name : `${name.slice(0, at)}@${name.slice(at + 1).split(".")[0]}`;
}

const secs = (ms: number | null) => (ms === null ? "—" : `${(ms / 1000).toFixed(2)} s`);

export function judgeCell(cell: MatrixCell, run: NatsRunResult, expectations: Map<string, Expectation>): CellResult {
  const client = run.client;
  const key = cellKey(cell, client);
  const expected = expectations.get(key) ?? null;
  const r = run.report;
  let silenceMs: number | null = null;
  for (const f of r.faults) for (const s of f.silence) silenceMs = Math.max(silenceMs ?? 0, s.silenceMs ?? 0);
  const anomalies = Object.entries(r.anomalyCounts).map(([k, v]) => `${k} ×${v}`).join(", ");
  let pass = true;
  const why: string[] = [];
  if (expected === null) {
    pass = false;
    why.push(`no expected row for ${key}`);
  } else {
    if (!expected.verdict.split(" or ").includes(r.verdict)) {
      pass = false;
      why.push(`verdict ${r.verdict}, expected ${expected.verdict}`);
    }
    if (expected.silence !== null) {
      const s = (silenceMs ?? 0) / 1000;
      if (s < expected.silence[0] || s > expected.silence[1]) {
        pass = false;
        why.push(`silence ${secs(silenceMs)}, expected ${expected.silenceText}`);
      }
    }
    if (expected.lag !== null) {
      const l = (r.lag.maxMs ?? 0) / 1000;
      if (l < expected.lag[0] || l > expected.lag[1]) {
        pass = false;
        why.push(`lag ${secs(r.lag.maxMs)}, expected ${expected.lagText}`);
      }
    }
  }
  return { cell, client, expected, verdict: r.verdict, silenceMs, lagMs: r.lag.maxMs, anomalies, pass, why: why.join("; "), run };
}

export interface MatrixOptions {
  outDir: string;
  docPath: string;
  only?: string[];
  onCellStart?: (cell: MatrixCell, i: number, n: number) => void;
  onCell?: (r: CellResult) => void;
  onProgress?: (line: string) => void;
  signal?: AbortSignal;
}

export async function runMatrix(o: MatrixOptions): Promise<CellResult[]> {
  const expectations = parseExpectations(await readFile(o.docPath, "utf8"));
  const cells = matrixCells(o.only);
  const results: CellResult[] = [];
  for (let i = 0; i < cells.length; i++) {
    if (o.signal?.aborted) break;
    const cell = cells[i]!;
    o.onCellStart?.(cell, i, cells.length);
    // A calibration row that must catch a client's bug rests on that bug's race (nats.deno #688:
    // the second rebuild must come while the first one's consumer still exists); on a loaded
    // machine one run in many misses it. Such a row runs up to BUG_CELL_RUNS times and counts as
    // caught at the first run that shows it; every other cell, and a fixed release's row, runs once.
    const bugRow = cell.calibration === true && expectations.get(cellKey(cell, clientName(cell.gen)))?.verdict === "invalid";
    const attempts = bugRow ? BUG_CELL_RUNS : 1;
    let r!: CellResult;
    for (let a = 1; a <= attempts; a++) {
      if (o.signal?.aborted) break;
      try {
        const run = await runNatsScenario({
          gen: cell.gen,
          api: cell.api,
          scenario: cell.scenario,
          outDir: join(o.outDir, `${cell.gen}-${cell.api}-${cell.scenario.name}${a > 1 ? `-run${a}` : ""}`),
          ...(o.onProgress ? { onProgress: o.onProgress } : {}),
          ...(o.signal ? { signal: o.signal } : {}),
        });
        r = judgeCell(cell, run, expectations);
      } catch (e) {
        r = { cell, client: clientName(cell.gen), expected: null, verdict: "error", silenceMs: null, lagMs: null, anomalies: "", pass: false, why: `the run failed: ${(e as Error).message}`, run: null };
      }
      if (attempts > 1) r = { ...r, why: r.pass ? `caught in run ${a} of at most ${attempts}` : `not caught in ${a} of ${attempts} runs: ${r.why}` };
      if (r.pass) break;
    }
    results.push(r);
    o.onCell?.(r);
  }
  return results;
}

/** The table people read: expected beside measured, failures marked. */
export function formatMatrix(results: CellResult[]): string {
  const head = ["client", "api", "scenario", "expected", "verdict", "silence", "lag", "anomalies", ""];
  const rows = results.map((r) => [
    r.client,
    r.cell.api,
    r.cell.scenario.name,
    r.expected ? `${r.expected.verdict}, ${r.expected.silenceText}${r.expected.lag !== null ? `, lag ${r.expected.lagText}` : ""}` : "(none)",
    r.verdict,
    secs(r.silenceMs),
    secs(r.lagMs),
    r.anomalies || "—",
    r.pass ? (r.why !== "" ? `ok (${r.why})` : "ok") : `DIFFERS: ${r.why}`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((row) => row[i]!.length)));
  const fmt = (row: string[]) => row.map((c, i) => c.padEnd(widths[i]!)).join("  ").trimEnd();
  const failed = results.filter((r) => !r.pass).length;
  return [fmt(head), ...rows.map(fmt), "", `${results.length - failed} of ${results.length} cells as expected${failed > 0 ? `, ${failed} differ` : ""}`].join("\n") + "\n";
}

/** Rewrites the measured columns of the doc's table from a run (the expectations stay as written). */
export async function writeMeasured(docPath: string, results: CellResult[]): Promise<void> {
  const doc = await readFile(docPath, "utf8");
  const t = tableLines(doc);
  const byKey = new Map(results.map((r) => [cellKey(r.cell, r.client), r]));
  const rows = t.rows.map((line) => {
    if (!line.trim().startsWith("|")) return line;
    const c = cellsOf(line);
    const r = byKey.get(`${c[0]}|${c[1]}|${c[2]}`);
    if (r === undefined) return line;
    const measured = [r.verdict + (r.anomalies ? ` (${r.anomalies})` : ""), secs(r.silenceMs), secs(r.lagMs)];
    const lag = c.length >= 9 ? c[5] : "any";
    return `| ${[`\`${c[0]}\``, c[1], c[2], c[3], c[4], lag, ...measured].join(" | ")} |`;
  });
  await writeFile(docPath, t.before + rows.join("\n") + t.after);
}
