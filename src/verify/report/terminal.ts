// The one-screen terminal summary of a check: verdict first, then what a reader needs to act on
// (anomalies with their operations, what could not be judged), then how the run went (faults and
// the silence after them, redeliveries by cause, lag). Long lists are cut with a pointer to the
// JSON report, so the summary stays on one screen whatever the history's size.

import type { Report } from "../checker/types.js";

const ANOMALY_LINES_MAX = 10;
const UNKNOWN_LINES_MAX = 5;

/** An integer with thousands separators, as en-US writes it (toLocaleString's first call loads ICU's number formats: ~25 ms). */
function n(v: number): string {
  if (!Number.isSafeInteger(v)) return v.toLocaleString("en-US");
  return String(v).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** Milliseconds as a short human duration. */
export function duration(ms: number | null): string {
  if (ms === null) return "—";
  if (ms < 1) return `${Math.round(ms * 1000)} µs`;
  if (ms < 1000) return `${Math.round(ms * 10) / 10} ms`;
  const s = ms / 1000;
  if (s < 60) return `${Math.round(s * 100) / 100} s`;
  const m = Math.floor(s / 60);
  return `${m}m ${Math.round((s - m * 60) * 10) / 10}s`;
}

function ops(list: number[]): string {
  const shown = list.slice(0, 6).join(", ");
  return list.length > 6 ? `${shown}, … (${list.length})` : shown;
}

function clip(text: string, width: number): string {
  return text.length > width ? text.slice(0, width - 1) + "…" : text;
}

export interface SummaryOptions {
  /** Paths of the reports written, to point at. */
  jsonPath?: string;
  htmlPath?: string;
  /** Width to clip explanations at. */
  width?: number;
}

export function formatSummary(r: Report, options: SummaryOptions = {}): string {
  const width = options.width ?? 120;
  const out: string[] = [];
  out.push(`narad verify check: ${r.verdict.toUpperCase()} — ${r.reason}`);
  out.push(`history      ${n(r.history.events)} lines, ${n(r.history.operations)} operations over ${duration(r.history.durationNs / 1e6)}`);

  const parts: string[] = [];
  for (const [f, c] of Object.entries(r.counts.operations)) {
    if (c.invoke === 0) continue;
    const detail = [`ok ${n(c.ok)}`];
    if (f === "consume") detail.push(`empty ${n(r.counts.consumeEmpty)}`);
    if (c.fail) detail.push(`fail ${n(c.fail)}`);
    if (c.info) detail.push(`info ${n(c.info)}`);
    if (c.open) detail.push(`open ${n(c.open)}`);
    parts.push(`${f} ${n(c.invoke)} (${detail.join(", ")})`);
  }
  out.push(`operations   ${parts.join(" · ")}`);
  const p = r.counts.pairs;
  out.push(
    `pairs        ${n(p.total)} (message, path): ${n(p.legal)} legal, ${n(p.invalid)} invalid, ${n(p.unknown)} unknown; ` +
      `${n(r.counts.messages)} messages, ${n(r.counts.deliveries)} deliveries`,
  );

  const anomalyTotal = Object.values(r.anomalyCounts).reduce((s, v) => s + (v ?? 0), 0);
  if (anomalyTotal > 0) {
    out.push(`anomalies    ${Object.entries(r.anomalyCounts).map(([k, v]) => `${k} ×${v}`).join(", ")}`);
    for (const a of r.anomalies.slice(0, ANOMALY_LINES_MAX)) {
      const who = a.msg !== null ? `${a.msg} on ${a.path}` : a.path;
      out.push(clip(`  ${a.name.padEnd(20)} ${who} · ops ${ops(a.ops)} · ${a.explanation}`, width));
    }
    if (anomalyTotal > ANOMALY_LINES_MAX) out.push(`  … ${n(anomalyTotal - ANOMALY_LINES_MAX)} more in the JSON report`);
  }
  const unknownTotal = Object.values(r.unknownCounts).reduce((s, v) => s + (v ?? 0), 0);
  if (unknownTotal > 0) {
    out.push(`not judged   ${Object.entries(r.unknownCounts).map(([k, v]) => `${k} ×${v}`).join(", ")}`);
    for (const u of r.unknowns.slice(0, UNKNOWN_LINES_MAX)) {
      const who = u.msg !== null ? `${u.msg} on ${u.path} · ` : "";
      out.push(clip(`  ${u.reason.padEnd(20)} ${who}ops ${ops(u.ops)} · ${u.explanation}`, width));
    }
    if (unknownTotal > UNKNOWN_LINES_MAX) out.push(`  … ${n(unknownTotal - UNKNOWN_LINES_MAX)} more in the JSON report`);
  }

  const rd = r.redeliveries;
  const byFault = [...rd.byFault]
    .sort((a, b) => b.count - a.count)
    .slice(0, 3)
    .map((f) => `${f.kind} op ${f.op} ×${f.count}`);
  out.push(
    `redeliveries ${n(rd.total)}: lapse ${n(rd.byCause.lapse)}, nack ${n(rd.byCause.nack)}, fault ${n(rd.byCause.fault)}` +
      (byFault.length ? ` (${byFault.join(", ")}${rd.byFault.length > 3 ? ", …" : ""})` : "") +
      `; after a 204 ack, explained by a fault: ${n(rd.explainedDuplicatesTotal)}` +
      (rd.explainedRecopiesTotal > 0 ? `; child copies made again, explained by a fault: ${n(rd.explainedRecopiesTotal)}` : ""),
  );

  if (r.faults.length > 0) {
    const kinds = new Map<string, number>();
    for (const f of r.faults) kinds.set(f.kind, (kinds.get(f.kind) ?? 0) + 1);
    const needing = r.faults.filter((f) => f.needsEvidence);
    const evidenced = needing.filter((f) => f.evidence).length;
    const silences = r.faults.filter((f) => f.silenceMs !== null);
    const worst = silences.reduce<(typeof silences)[number] | null>((w, f) => (w === null || f.silenceMs! > w.silenceMs! ? f : w), null);
    out.push(
      `faults       ${r.faults.length}: ${Array.from(kinds, ([k, v]) => `${k} ×${v}`).join(", ")}; boot evidence ${evidenced}/${needing.length}` +
        (worst ? `; longest silence after one ${duration(worst.silenceMs)} (${worst.kind}${worst.node ? " " + worst.node : ""}, op ${worst.op})` : ""),
    );
  } else {
    out.push("faults       none");
  }
  const lag = r.lag;
  out.push(
    lag.maxMs === null
      ? "lag          no delivery to measure"
      : `lag          max ${duration(lag.maxMs)} (${lag.msg} on ${lag.path}, delivery op ${lag.deliveryOp}, since ${lag.since}); ` +
          `p50 ${duration(lag.p50Ms)}, p99 ${duration(lag.p99Ms)} over ${n(lag.samples)} deliveries`,
  );
  if (r.search.capHits > 0) out.push(`search       ${r.search.capHits} pairs hit the cap of ${n(r.search.stepsMax)} steps`);
  const reports = [options.jsonPath ? `JSON ${options.jsonPath}` : null, options.htmlPath ? `HTML ${options.htmlPath}` : null].filter(Boolean);
  if (reports.length > 0) out.push(`reports      ${reports.join(" · ")}`);
  return out.join("\n") + "\n";
}
