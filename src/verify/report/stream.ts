// Reports of a stream-model check (SPEC.md "The stream model"): the one-screen terminal summary,
// the JSON document (the StreamReport as is) and a self-contained HTML page whose plot shades
// each fault and, in a second colour, the silence after it (from the fault's end to the next
// delivery), with the run's written prediction beside what was measured.

import type { StreamReport } from "../checker/stream/types.js";
import type { SummaryOptions } from "./terminal.js";

const ANOMALY_LINES_MAX = 10;

function n(v: number): string {
  return v.toLocaleString("en-US");
}

/** Seconds with two decimals, as the spec prints silence and lag. */
export function seconds(ms: number | null): string {
  return ms === null ? "—" : `${(ms / 1000).toFixed(2)} s`;
}

function faultName(f: StreamReport["faults"][number]): string {
  const mode = typeof f.detail["mode"] === "string" ? ` (${f.detail["mode"]})` : "";
  return `${f.kind}${mode}`;
}

export function formatStreamSummary(r: StreamReport, options: SummaryOptions = {}): string {
  const width = options.width ?? 120;
  const clip = (t: string) => (t.length > width ? t.slice(0, width - 1) + "…" : t);
  const out: string[] = [];
  const c = r.config;
  out.push(`narad verify check: ${r.verdict.toUpperCase()} — ${r.reason}`);
  out.push(`model        stream ${c.stream} · ${c.system} · ${c.client} · ${c.api}${c.scenario ? ` · scenario ${c.scenario}` : ""}`);
  const p = r.counts.publishes;
  out.push(
    `history      ${n(r.history.events)} lines over ${seconds(r.history.durationNs / 1e6)}; publish ${n(p.invoke)} (ok ${n(p.ok)}${p.fail ? `, fail ${n(p.fail)}` : ""}${p.info ? `, unknown ${n(p.info)}` : ""}${p.open ? `, open ${n(p.open)}` : ""}), ${n(r.counts.deliveries)} deliveries`,
  );
  for (const con of r.consumers) {
    const d = con.drain;
    const drain = d === null ? "no drain" : d.outcome === "ok" ? `drained to seq ${d.untilSeq} in ${seconds(d.tookMs)}` : d.outcome === "info" ? `drain TIMED OUT at seq ${d.seq} (wanted ${d.untilSeq})` : "drain open";
    out.push(`consumer     ${con.process}: ${n(con.deliveries)} deliveries, ${n(con.distinctSeqs)} seqs, last ${con.lastSeq ?? "—"}; ${drain}`);
  }
  const names = Object.entries(r.anomalyCounts);
  if (names.length > 0) {
    out.push(`anomalies    ${names.map(([k, v]) => `${k} ×${v}`).join(", ")}`);
    for (const a of r.anomalies.slice(0, ANOMALY_LINES_MAX)) out.push(clip(`  ${a.name} ${a.process} ops=[${a.ops.join(" ")}]: ${a.explanation}`));
    const more = r.anomalies.length - ANOMALY_LINES_MAX + r.anomaliesOmitted;
    if (more > 0) out.push(`  … and ${n(more)} more (see the JSON report)`);
  }
  const unknowns = Object.entries(r.unknownCounts);
  if (unknowns.length > 0) {
    out.push(`cannot judge ${unknowns.map(([k, v]) => `${k} ×${v}`).join(", ")}`);
    for (const u of r.unknowns.slice(0, 5)) out.push(clip(`  ${u.reason}: ${u.explanation}`));
  }
  for (const f of r.faults) {
    const end = f.endNs === null ? "never ended" : `ended ${(f.endNs / 1e9).toFixed(2)} s`;
    for (const s of f.silence.length > 0 ? f.silence : [null]) {
      const measured = s === null || s.silenceMs === null ? "nothing waiting" : `${seconds(s.silenceMs)}${s.nextDeliveryOp === null ? " (no delivery after it)" : ""}`;
      out.push(`silence after ${faultName(f)} (${end}): ${measured}${f.evidence ? "" : ` — no evidence: ${f.evidenceNote}`}`);
    }
  }
  out.push(`lag          max ${seconds(r.lag.maxMs)}${r.lag.seq !== null ? ` (seq ${r.lag.seq})` : ""}, p50 ${seconds(r.lag.p50Ms)}, p99 ${seconds(r.lag.p99Ms)}`);
  const events = Object.entries(r.counts.clientEvents);
  if (events.length > 0) out.push(`client       ${events.map(([k, v]) => `${k} ×${v}`).join(", ")}`);
  if (c.prediction) out.push(clip(`prediction   ${c.prediction}`));
  const reports = [options.jsonPath, options.htmlPath].filter((x): x is string => x !== undefined);
  if (reports.length > 0) out.push(`report       ${reports.join("  ")}`);
  return out.join("\n") + "\n";
}

export function renderStreamJson(r: StreamReport): string {
  return JSON.stringify(r, null, 2) + "\n";
}

function esc(v: unknown): string {
  return String(v).replace(/[&<>"']/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[ch]!);
}

/**
 * The HTML page. Hooks for tests: svg#deliveries with rect.fault per fault window, rect.silence
 * per measured silence and path.series for the publish and delivery rates.
 */
export function renderStreamHtml(r: StreamReport): string {
  const W = 1000;
  const H = 220;
  const pad = 30;
  const total = Math.max(1, r.series.bucketNs * r.series.buckets);
  const x = (ns: number) => pad + ((W - 2 * pad) * Math.min(ns, total)) / total;
  const peak = Math.max(1, ...r.series.publishOk, ...r.series.deliver);
  const y = (v: number) => H - pad - ((H - 2 * pad) * v) / peak;
  const path = (series: number[]) => series.map((v, i) => `${i === 0 ? "M" : "L"}${x((i + 0.5) * r.series.bucketNs).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  const shapes: string[] = [];
  for (const f of r.faults) {
    const end = f.endNs ?? r.history.durationNs;
    shapes.push(`<rect class="fault" x="${x(f.invokeNs).toFixed(1)}" y="${pad}" width="${Math.max(1, x(end) - x(f.invokeNs)).toFixed(1)}" height="${H - 2 * pad}"><title>${esc(faultName(f))}</title></rect>`);
    for (const s of f.silence) {
      if (s.silenceMs === null || f.endNs === null) continue;
      const to = f.endNs + s.silenceMs * 1e6;
      shapes.push(`<rect class="silence" x="${x(f.endNs).toFixed(1)}" y="${pad}" width="${Math.max(1, x(to) - x(f.endNs)).toFixed(1)}" height="${H - 2 * pad}"><title>silence ${esc(seconds(s.silenceMs))} (${esc(s.process)})</title></rect>`);
    }
  }
  const rows = r.faults
    .flatMap((f) =>
      (f.silence.length > 0 ? f.silence : [null]).map(
        (s) =>
          `<tr><td>${f.op}</td><td>${esc(faultName(f))}</td><td class="num">${(f.invokeNs / 1e9).toFixed(2)} s</td><td class="num">${f.endNs === null ? "—" : `${(f.endNs / 1e9).toFixed(2)} s`}</td><td class="num">${s === null || s.silenceMs === null ? "—" : esc(seconds(s.silenceMs))}</td><td>${f.evidence ? "yes" : "no"}: ${esc(f.evidenceNote)}</td></tr>`,
      ),
    )
    .join("");
  const anomalies = r.anomalies.map((a) => `<tr><td>${esc(a.name)}</td><td>${esc(a.process)}</td><td><code>${a.ops.join(" ")}</code></td><td>${esc(a.explanation)}</td></tr>`).join("");
  const c = r.config;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>narad stream check: ${esc(r.verdict)}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; color: #1d2733; margin: 0 auto; padding: 24px; max-width: 1040px; }
.verdict { padding: 2px 10px; border-radius: 4px; color: #fff; font-weight: 700; }
.valid { background: #2e7d32; } .invalid { background: #c62828; } .unknown { background: #ef6c00; }
table { border-collapse: collapse; width: 100%; font-size: 13px; } th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e3e7ec; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
svg { width: 100%; height: auto; background: #fafbfc; border: 1px solid #e3e7ec; }
.fault { fill: #ef6c00; fill-opacity: .15; } .silence { fill: #c62828; fill-opacity: .22; }
.series { fill: none; stroke-width: 1.5; } .pub { stroke: #5f6b7a; } .del { stroke: #1565c0; }
</style></head>
<body data-ready="true">
<h1>narad verify check <span class="verdict ${esc(r.verdict)}">${esc(r.verdict.toUpperCase())}</span></h1>
<p>${esc(r.reason)}</p>
<p>stream <code>${esc(c.stream)}</code> · ${esc(c.system)} · <code>${esc(c.client)}</code> · ${esc(c.api)}${c.scenario ? ` · scenario <code>${esc(c.scenario)}</code>` : ""}</p>
<h2>Prediction and measure</h2>
<table><tr><th>written before the run</th><th>measured</th></tr>
<tr><td>${esc(c.prediction ?? "(none written)")}</td><td>${r.faults.map((f) => `${esc(faultName(f))}: silence ${f.silence.map((s) => esc(seconds(s.silenceMs))).join(", ") || "—"}`).join("<br>") || "no faults"}<br>lag max ${esc(seconds(r.lag.maxMs))}</td></tr></table>
<h2>Deliveries and publishes over time</h2>
<svg id="deliveries" viewBox="0 0 ${W} ${H}" data-drawn="true">${shapes.join("")}
<path class="series pub" d="${path(r.series.publishOk)}"><title>publishes acknowledged</title></path>
<path class="series del" d="${path(r.series.deliver)}"><title>deliveries</title></path>
<text x="${pad}" y="${H - 8}">0 s</text><text x="${W - pad - 40}" y="${H - 8}">${(total / 1e9).toFixed(1)} s</text></svg>
<p>orange: a fault in force · red: silence after it (until the next delivery, while acknowledged publishes waited)</p>
<h2>Faults</h2>
<table><tr><th>op</th><th>fault</th><th>began</th><th>ended</th><th>silence</th><th>evidence</th></tr>${rows}</table>
<h2>Anomalies</h2>
<table><tr><th>name</th><th>consumer</th><th>ops</th><th>what</th></tr>${anomalies || "<tr><td colspan=4>none</td></tr>"}</table>
</body></html>
`;
}
