// `npm run test:consistency`: seed 004's comparison of the two acks modes. The same fault
// schedule (the failover workload's, one seed) is put to a topic with 3 copies and `acks: leader`,
// then to one with `acks: quorum`, on a fresh 3-node cluster each; for each it prints what was
// acknowledged (202), refused (503 no_quorum, which is indefinite: it may have landed), otherwise
// ambiguous or refused, lost (a 202 never delivered: the checker's `lost`), and the verdict.
// Each run is bounded by its duration (default 20 s, --duration S) plus setup and drain, so the
// whole comparison stops by itself within a few minutes. Exit 0 when both runs are valid.
//
//   npm run test:consistency [-- --duration 30 --seed 7 --faults kill,isolate,pause-kill]
import { readFile } from "node:fs/promises";
import { mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runWorkload } from "../dist/src/verify/workloads/index.js";

const args = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? args[i + 1] : dflt;
};
const durationS = Number(arg("--duration", "20"));
const seed = Number(arg("--seed", "4"));
const faults = arg("--faults", "kill,power-loss,pause,isolate,pause-kill,lag-kill").split(",");
const out = arg("--out", await mkdtemp(join(tmpdir(), "narad-consistency-")));

/** Produce outcomes from the history: 202s, 503 no_quorum, other ambiguous answers, definite refusals. */
async function produceOutcomes(historyPath) {
  const counts = { acknowledged: 0, noQuorum: 0, ambiguous: 0, refused: 0 };
  const open = new Map();
  for (const line of (await readFile(historyPath, "utf8")).split("\n")) {
    if (line === "") continue;
    const e = JSON.parse(line);
    if (e.f !== "produce") continue;
    if (e.type === "invoke") {
      open.set(e.process, e);
      continue;
    }
    open.delete(e.process);
    if (e.type === "ok") counts.acknowledged++;
    else if (e.type === "fail") counts.refused++;
    else if (e.value.error === "no_quorum") counts.noQuorum++;
    else counts.ambiguous++;
  }
  counts.ambiguous += open.size;
  return counts;
}

const rows = [];
for (const acks of ["leader", "quorum"]) {
  process.stdout.write(`acks ${acks}: ${durationS} s of load on 3 nodes, faults ${faults.join(", ")}, seed ${seed} …\n`);
  const r = await runWorkload({ workload: "failover", nodes: 3, replicationFactor: 3, acks, faults, durationS, seed, outDir: join(out, acks) });
  const p = await produceOutcomes(r.historyPath);
  const kinds = {};
  for (const f of r.report?.faults ?? []) if (f.outcome === "ok" && !["start", "resume", "heal"].includes(f.kind)) kinds[f.kind] = (kinds[f.kind] ?? 0) + 1;
  rows.push({ acks, ...p, lost: r.report?.anomalyCounts.lost ?? 0, verdict: r.verdict ?? "none", exit: r.exitCode, faults: kinds, history: r.historyPath });
}

const head = ["acks", "acknowledged (202)", "refused 503 no_quorum", "other ambiguous", "refused (definite)", "lost 202s", "verdict"];
const body = rows.map((x) => [x.acks, String(x.acknowledged), String(x.noQuorum), String(x.ambiguous), String(x.refused), String(x.lost), x.verdict]);
const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
const fmt = (cells) => cells.map((c, i) => c.padEnd(widths[i])).join("  ");
process.stdout.write(`\n${fmt(head)}\n${fmt(widths.map((w) => "-".repeat(w)))}\n${body.map(fmt).join("\n")}\n`);
for (const x of rows) process.stdout.write(`  ${x.acks}: faults ${Object.entries(x.faults).map(([k, n]) => `${k} ×${n}`).join(", ")}; history ${x.history}\n`);
process.exit(rows.every((x) => x.exit === 0) ? 0 : 1);
