// A corpus of lease-model histories and the checker's reports on them, to show that a change to
// the checker (a faster reader, a faster judgement) changes no verdict and no byte of a report.
//
//   node dist/bench/checker-corpus.js save DIR      judge every history, write the reports to DIR
//   node dist/bench/checker-corpus.js compare DIR   judge again, compare with DIR byte by byte
//   (add --quick to leave out the two large histories)
//
// Save with the checker before the change and compare after it. The histories are made again
// each time (the simulation is deterministic), so DIR holds only the reports: per history the
// JSON report, the terminal summary and a hash of the HTML report, from the file reader (what
// `narad verify check` runs) and from the in-memory paths (checkText, checkEvents).
// What the corpus holds:
//   - correct simulated runs over many seeds, one and two nodes, plain, idempotent producers and
//     dead letters, and the bench's shape at a smaller size;
//   - every seeded bug of the simulation (lost, duplicate-after-ack, double-lease, stranded,
//     refused-delivered, skip, duplicate-produce, dead-lettered-early, delivered-after-dead-letter);
//   - the same runs with topic t declared replicated (replication_factor 3, a replication lag),
//     so the failover rules and the replicated replay rule judge them;
//   - hand-made anomalies (unexpected, misrouted), runs cut short (no final drain, open
//     operations), and hand-built failover bounds;
//   - the same text laid out differently (keys reordered and spaced, strings escaped), which
//     takes the reader's other paths and must judge alike;
//   - the bench's 1 000 000-line and 900 000-line histories;
//   - histories in the recorder's layout shaped like real runs (real-shapes.ts): a replicated
//     three-node run with keyed produces, owners' boots, a kill and a cut; idempotent producers
//     with re-sends; dead letters with origins; each correct and with one anomaly, long enough
//     that their messages outnumber the Collector's first guess (what the simulation never
//     reached, and where the faster checker once lost message ids); and a stream-model run.

import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { BENCH_SHAPE } from "./checker-bench.js";
import { check, checkEvents, checkText } from "../src/verify/checker/check.js";
import { clusterRun, deadLetterRun, paddedToOddGuesses, streamRun } from "../src/verify/checker/real-shapes.js";
import { checkStream, checkStreamText } from "../src/verify/checker/stream/index.js";
import { HistoryBuilder } from "../src/verify/checker/history-builder.js";
import { simulateToFile, simulateWithStats, type SimBug, type SimOptions } from "../src/verify/checker/simulate.js";
import type { Report } from "../src/verify/checker/types.js";
import { renderHtml } from "../src/verify/report/html.js";
import { renderJson } from "../src/verify/report/json.js";
import { formatSummary } from "../src/verify/report/terminal.js";
import { formatStreamSummary, renderStreamHtml, renderStreamJson } from "../src/verify/report/stream.js";

type Line = Record<string, unknown> & { value: Record<string, unknown> };

interface Case {
  name: string;
  /** The history's text, or a function writing a large one to a file. */
  text?: string;
  write?: (path: string) => Promise<unknown>;
  /** A stream-model history (the stream checker judges it). */
  stream?: boolean;
}

const SMALL: Partial<SimOptions> = { durationMs: 400, producers: 2, consumers: 3, faultEveryMs: 150, visibilityTimeoutMs: 80 };

const BUGS: Array<[SimBug, Partial<SimOptions>]> = [
  ["ack-not-persisted", {}],
  ["early-lapse", { visibilityTimeoutMs: 400, durationMs: 900, slowAckRate: 0.2 }],
  ["nack-drops", {}],
  ["stale-handle", { lapseRate: 0.3, visibilityTimeoutMs: 200, durationMs: 900 }],
  ["refused-stored", {}],
  ["replay-skip", {}],
  ["redeliver-acked", {}],
  ["lose-message", {}],
  ["recopy-on-terminate", {}],
  ["dedupe-forgets", { idempotent: true, lostResponseRate: 0.15 }],
  ["dead-letter-early", { deadLetters: true }],
  ["counts-forgotten", { deadLetters: true, ackFlushMs: 10, visibilityTimeoutMs: 200, durationMs: 900 }],
];


function text(lines: readonly unknown[]): string {
  return lines.map((l) => JSON.stringify(l)).join("\n") + "\n";
}

/** Topic t replicated: the failover rules and the replicated replay rule apply. */
function replicated(lines: Line[]): Line[] {
  const cfg = structuredClone(lines[0]!.value) as Record<string, any>;
  cfg["topics"]["t"] = { ...cfg["topics"]["t"], replication_factor: 3, acks: "quorum" };
  cfg["replication_lag_ms"] = 40;
  return [{ ...lines[0]!, value: cfg }, ...lines.slice(1)];
}

/** The same lines with their keys in reverse order and spaced: the reader's general path. */
function respaced(lines: Line[]): string {
  const rev = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(rev);
    if (v !== null && typeof v === "object") return Object.fromEntries(Object.entries(v).reverse().map(([k, x]) => [k, rev(x)]));
    return v;
  };
  return lines.map((l, i) => (i % 3 === 0 ? JSON.stringify(rev(l), null, 1).replace(/\n/g, " ") : JSON.stringify(rev(l)))).join("\n") + "\n";
}

/** Every fifth line's strings written with \u escapes (and a CR before some newlines): the slow path. */
function escaped(lines: Line[]): string {
  const esc = (s: string): string => '"' + Array.from(s, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0")).join("") + '"';
  return (
    lines
      .map((l, i) => {
        const plain = JSON.stringify(l);
        if (i % 5 !== 2) return i % 7 === 3 ? plain + "\r" : plain;
        return plain.replace(/"((?:[^"\\]|\\.)*)"/g, (_, s: string) => esc(JSON.parse(`"${s}"`) as string));
      })
      .join("\n") + "\n"
  );
}

/** A delivery of a message nobody produced, and one of a message of t on u, in the middle of a run. */
function withStrayDeliveries(lines: Line[]): Line[] {
  const mid = lines.length >> 1;
  const at = lines[mid]!["time_ns"] as number;
  const produced = lines.find((l) => l["f"] === "produce" && l["type"] === "invoke" && l.value["topic"] === "t")!.value["msg"];
  const d = (msg: unknown, topic: string, handle: string): Line[] => [
    { index: 0, time_ns: at, process: "stray", type: "invoke", f: "consume", value: { topic } },
    { index: 0, time_ns: at, process: "stray", type: "ok", f: "consume", value: { topic, msg, partition: 0, offset: 0, delivery: handle, delivery_count: 1, node: "n1", boot: "n1-b0" } },
  ];
  const out = [...lines.slice(0, mid), ...d("never-produced", "t", "stray-1"), ...d(produced, "u", "stray-2"), ...lines.slice(mid)];
  return out.map((l, i) => ({ ...l, index: i }));
}

/** Failover bounds on hand-built histories (failover.test.ts's shape): m1 acked on n1, a fault, delivered again by `by`. */
function failoverCases(): Case[] {
  const out: Case[] = [];
  const faults: Array<[string, (b: HistoryBuilder, ms: number) => void]> = [
    ["kill", (b, ms) => {
      b.fault("kill", ms, ms + 2, { node: "n1" }, "ok", { signal: "SIGKILL" });
      b.fault("start", ms + 1500, ms + 1600, { node: "n1" }, "ok", { boot: "b1-2" });
    }],
    ["power-loss", (b, ms) => {
      b.fault("power-loss", ms, ms + 2, { node: "n1" }, "ok", {});
      b.fault("start", ms + 1500, ms + 1600, { node: "n1" }, "ok", { boot: "b1-2" });
    }],
    ["pause", (b, ms) => {
      b.fault("pause", ms, ms + 2, { node: "n1" }, "ok", {});
      b.fault("resume", ms + 900, ms + 901, { node: "n1" }, "ok", {});
    }],
    ["cut", (b, ms) => {
      b.fault("cut", ms, ms + 2, { node: "n1" }, "ok", {});
      b.fault("heal", ms + 900, ms + 901, { node: "n1" }, "ok", {});
    }],
  ];
  for (const [kind, fault] of faults) {
    for (const rf of [1, 3]) {
      for (const faultMs of [50, 400, 700]) {
        for (const by of ["n1", "n2"]) {
          for (const lease of [undefined, 200]) {
            const b = new HistoryBuilder({
              topics: { t: { partitions: 1, replication_factor: rf, acks: "quorum" } },
              replication_lag_ms: 400,
              ...(lease !== undefined ? { node_lease_ms: lease } : {}),
            });
            b.produce("p1", "t", "m1", 0, 10);
            b.consume("c1", "t", "m1", "d1", 20, 21, { node: "n1", boot: "b1" });
            b.ack("c1", "t", "m1", "d1", 30, 31);
            fault(b, faultMs);
            const againMs = faultMs + 600;
            b.consume("c2", "t", "m1", "d2", againMs, againMs + 1, { node: by, boot: by === "n1" ? "b1-2" : `b-${by}` });
            b.ack("c2", "t", "m1", "d2", againMs + 10, againMs + 11);
            b.empty("c2", "t", againMs + 3000, againMs + 3001);
            out.push({ name: `failover-${kind}-rf${rf}-at${faultMs}-by-${by}-lease${lease ?? "none"}`, text: b.build().text });
          }
        }
      }
    }
  }
  return out;
}

function cases(quick: boolean): Case[] {
  const out: Case[] = [];
  for (let seed = 1; seed <= 12; seed++) {
    for (const nodes of [1, 2]) {
      const variants: Array<[string, Partial<SimOptions>]> = [
        ["plain", {}],
        ["idempotent", { idempotent: true, lostResponseRate: 0.1 }],
        ["dead-letters", { deadLetters: true }],
      ];
      for (const [v, extra] of variants) {
        const lines = simulateWithStats({ seed, nodes, ...SMALL, ...extra }).lines as Line[];
        const name = `sim-${v}-n${nodes}-s${seed}`;
        out.push({ name, text: text(lines) });
        if (nodes === 2) out.push({ name: `${name}-replicated`, text: text(replicated(lines)) });
        if (seed <= 3) {
          out.push({ name: `${name}-respaced`, text: respaced(lines) });
          out.push({ name: `${name}-escaped`, text: escaped(lines) });
          out.push({ name: `${name}-stray`, text: text(withStrayDeliveries(lines)) });
          // Cut short: no final drain, operations left open.
          out.push({ name: `${name}-truncated`, text: text(lines.slice(0, Math.floor(lines.length * 0.9))) });
        }
      }
    }
  }
  for (const [bug, extra] of BUGS) {
    for (let seed = 1; seed <= 6; seed++) {
      const lines = simulateWithStats({ seed, bug, nodes: 1 + (seed % 2), ...SMALL, ...extra }).lines as Line[];
      out.push({ name: `bug-${bug}-s${seed}`, text: text(lines) });
      if (seed % 2 === 1) out.push({ name: `bug-${bug}-s${seed}-replicated`, text: text(replicated(lines)) });
    }
  }
  for (let seed = 1; seed <= 3; seed++) {
    for (const [v, extra] of [["plain", {}], ["idempotent", { idempotent: true, lostResponseRate: 0.05 }], ["dead-letters", { deadLetters: true }]] as const) {
      out.push({ name: `bench-shape-${v}-s${seed}`, write: (p) => simulateToFile({ seed, ...BENCH_SHAPE, mainPhaseEventsMax: 40_000, ...extra }, p) });
    }
  }
  out.push(...failoverCases());
  const real: Array<[string, string]> = [
    ["real-cluster", clusterRun({ messages: 4000 }).text],
    ["real-cluster-lost", clusterRun({ messages: 4000, dropDelivery: 3217 }).text],
    ["real-idempotent", clusterRun({ messages: 3000, idempotent: true }).text],
    ["real-idempotent-stored-twice", clusterRun({ messages: 3000, idempotent: true, storeTwice: 2500 }).text],
    ["real-dead-letters", deadLetterRun(3000)],
    ["real-dead-letters-early", deadLetterRun(3000, 2801)],
  ];
  for (const [name, t] of real) {
    const padded = paddedToOddGuesses(t);
    out.push({ name, text: padded });
    const lines = padded
      .split("\n")
      .filter((l) => l.length > 0)
      .map((l) => JSON.parse(l) as Line);
    out.push({ name: `${name}-respaced`, text: respaced(lines) });
    out.push({ name: `${name}-escaped`, text: escaped(lines) });
  }
  out.push({ name: "real-stream", text: streamRun(5000, 3333), stream: true });
  if (!quick) {
    out.push({ name: "bench-1m", write: (p) => simulateToFile({ seed: 1, ...BENCH_SHAPE, mainPhaseEventsMax: 1_000_000 }, p) });
    out.push({ name: "bench-900k", write: (p) => simulateToFile({ seed: 1, ...BENCH_SHAPE, mainPhaseEventsMax: 896_600 }, p) });
  }
  return out;
}

const sha = (s: string): string => createHash("sha256").update(s).digest("hex");

/** A stream report's JSON, summary and HTML hash. */
function streamOutputs(r: Awaited<ReturnType<typeof checkStream>>): string {
  return `${renderStreamJson(r)}\n--- summary\n${formatStreamSummary(r)}\n--- html ${sha(renderStreamHtml(r))}\n`;
}

/** What is kept of one report: the JSON, the summary, and the HTML's hash. */
function outputs(r: Report): string {
  return `${renderJson(r)}\n--- summary\n${formatSummary(r)}\n--- html ${sha(renderHtml(r))}\n`;
}

/** An in-memory path's outputs beside the file reader's: named outright when they differ, so one run shows it. */
function besideFile(label: string, other: string, fileOut: string): string {
  return `--- ${label} ${other === fileOut ? "same as the file reader's" : `DIFFERS from the file reader's: ${sha(other)}`}\n`;
}

async function judgeCase(c: Case, dir: string): Promise<string> {
  const path = join(dir, `${c.name}.jsonl`);
  if (c.write !== undefined) await c.write(path);
  else await writeFile(path, c.text!);
  let out: string;
  try {
    out = c.stream === true ? streamOutputs(await checkStream(path)) : outputs(await check(path));
  } catch (e) {
    out = `error: ${(e as Error).name}: ${(e as Error).message}\n`;
  }
  const fileOut = out;
  if (c.stream === true) {
    const other = streamOutputs(checkStreamText(c.text!));
    out += besideFile("checkStreamText", other, fileOut);
  } else if (c.text !== undefined) {
    // The in-memory paths, for the histories small enough to hold as objects.
    for (const [label, run] of [
      ["checkText", () => checkText(c.text!)],
      ["checkEvents", () => checkEvents(c.text!.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l)))],
    ] as const) {
      let other: string;
      try {
        other = outputs(run());
      } catch (e) {
        other = `error: ${(e as Error).name}: ${(e as Error).message}\n`;
      }
      out += besideFile(label, other, fileOut);
    }
  }
  await rm(path, { force: true });
  return out;
}

async function main(): Promise<void> {
  const [mode, dir] = [process.argv[2], process.argv[3]];
  const quick = process.argv.includes("--quick");
  if ((mode !== "save" && mode !== "compare") || dir === undefined) {
    process.stderr.write("usage: checker-corpus save|compare DIR [--quick]\n");
    process.exit(2);
  }
  const work = await mkdtemp(join(tmpdir(), "narad-corpus-"));
  await mkdir(dir, { recursive: true });
  let differ = 0;
  let same = 0;
  const verdicts: Record<string, number> = {};
  try {
    for (const c of cases(quick)) {
      const out = await judgeCase(c, work);
      const verdict = /"verdict": "(\w+)"/.exec(out)?.[1] ?? "error";
      verdicts[verdict] = (verdicts[verdict] ?? 0) + 1;
      const file = join(dir, `${c.name}.txt`);
      if (mode === "save") {
        await writeFile(file, out);
        continue;
      }
      let before: string;
      try {
        before = await readFile(file, "utf8");
      } catch {
        process.stdout.write(`${c.name}: no saved report\n`);
        differ++;
        continue;
      }
      if (before === out) {
        same++;
        continue;
      }
      differ++;
      const a = before.split("\n");
      const b = out.split("\n");
      const i = a.findIndex((l, k) => l !== b[k]);
      process.stdout.write(`${c.name}: DIFFERS at line ${i + 1}\n  before: ${a[i]?.slice(0, 200)}\n  after:  ${b[i]?.slice(0, 200)}\n`);
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  const tally = Object.entries(verdicts).map(([v, n]) => `${n} ${v}`).join(", ");
  if (mode === "save") process.stdout.write(`saved ${Object.values(verdicts).reduce((s, n) => s + n, 0)} reports to ${dir} (${tally})\n`);
  else process.stdout.write(`${same} identical, ${differ} different (${tally})\n`);
  if (differ > 0) process.exitCode = 1;
}

if (import.meta.url === `file://${process.argv[1]}`) await main();
