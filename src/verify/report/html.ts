// The HTML report: one self-contained file (no network, no external script or font) that opens
// in any browser. Tables are rendered here; the plots are drawn in the page by a small inline
// script from the report's bucketed series, embedded as JSON, so the file stays small for any
// history size (at most a few hundred buckets per series and a few dozen timeline rows).
//
// Stable hooks for tests and tools: svg#timeline, svg#throughput, svg#latency, svg#lag; each gets
// data-drawn="true" once drawn, series are path.series, fault windows rect.fault, the silence after
// each fault rect.silence (from the fault's end to the next delivery while messages waited),
// anomaly marks line.mark; <body data-ready="true"> when every plot is drawn.

import type { Report } from "../checker/types.js";
import { duration } from "./terminal.js";

function esc(v: unknown): string {
  return String(v).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

function num(v: number): string {
  return v.toLocaleString("en-US");
}

const STYLE = `
:root { color-scheme: light; --ok: #2e7d32; --bad: #c62828; --unk: #ef6c00; --ink: #1d2733; --muted: #5f6b7a; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); margin: 0 auto; padding: 24px; max-width: 1040px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; }
.verdict { display: inline-block; padding: 2px 10px; border-radius: 4px; color: #fff; font-weight: 700; letter-spacing: .04em; }
.verdict.valid { background: var(--ok); } .verdict.invalid { background: var(--bad); } .verdict.unknown { background: var(--unk); }
.reason { color: var(--muted); margin: 6px 0 16px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e3e7ec; vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num { font-variant-numeric: tabular-nums; text-align: right; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; }
svg { width: 100%; height: auto; display: block; background: #fafbfc; border: 1px solid #e3e7ec; border-radius: 4px; }
svg text { font: 11px system-ui, sans-serif; fill: var(--muted); }
svg .axis { stroke: #9aa5b1; stroke-width: 1; }
svg .grid { stroke: #e3e7ec; stroke-width: 1; }
svg .fault { fill: #ef6c00; fill-opacity: .13; }
svg .silence { fill: #c62828; fill-opacity: .2; }
.failed { color: var(--bad); font-weight: 600; }
svg .mark { stroke: var(--bad); stroke-width: 1.5; }
svg path.series { fill: none; stroke-width: 1.6; stroke-linecap: round; stroke-linejoin: round; }
svg .s0 { stroke: #1565c0; fill: #1565c0; } svg .s1 { stroke: #2e7d32; fill: #2e7d32; } svg .s2 { stroke: #6d4c41; fill: #6d4c41; }
svg .s3 { stroke: #1565c0; fill: #1565c0; stroke-dasharray: 3 3; } svg .s4 { stroke: #2e7d32; fill: #2e7d32; stroke-dasharray: 3 3; }
svg .s5 { stroke: #6d4c41; fill: #6d4c41; stroke-dasharray: 3 3; } svg .s6 { stroke: #c62828; fill: #c62828; }
svg rect.ok { fill: #2e7d32; } svg rect.fail { fill: #c62828; } svg rect.info { fill: #ef6c00; }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; }
.kv div:nth-child(odd) { color: var(--muted); }
.note { color: var(--muted); font-size: 12px; }
`;

// The drawing script. Plain ES5 so any browser runs it; it reads only the embedded JSON.
const SCRIPT = String.raw`
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("narad-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 960, L = 64, R = 16, T = 12, B = 26, PW = W - L - R;
  var S = data.series;
  var spanNs = S.buckets * S.bucketNs;
  function el(name, attrs, parent, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
    if (text !== undefined) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  function xNs(ns) { return L + Math.max(0, Math.min(1, ns / spanNs)) * PW; }
  function nice(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log(v) / Math.LN10)), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function fmt(v) { return v >= 100 ? String(Math.round(v)) : String(Math.round(v * 100) / 100); }
  function xAxis(svg, H) {
    el("line", { "class": "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }, svg);
    var step = nice(spanNs / 1e9 / 8);
    for (var s = 0; s * 1e9 <= spanNs; s += step) {
      var x = xNs(s * 1e9);
      el("line", { "class": "grid", x1: x, y1: T, x2: x, y2: H - B }, svg);
      el("text", { x: x, y: H - B + 14, "text-anchor": "middle" }, svg, fmt(s) + " s");
    }
  }
  function faults(svg, H) {
    data.timeline.faultWindows.forEach(function (f) {
      var x1 = xNs(f.startNs), x2 = xNs(f.endNs);
      var r = el("rect", { "class": "fault", x: x1, y: T, width: Math.max(1.5, x2 - x1), height: H - T - B }, svg);
      el("title", {}, r, f.kind + (f.node ? " " + f.node : "") + " (op " + f.op + ")");
    });
  }
  function silences(svg, H) {
    (data.silence || []).forEach(function (s) {
      var x1 = xNs(s.startNs), x2 = xNs(s.endNs);
      var r = el("rect", { "class": "silence", x: x1, y: T, width: Math.max(1.5, x2 - x1), height: H - T - B }, svg);
      el("title", {}, r, s.label);
    });
  }
  function marks(svg, H) {
    data.timeline.marks.forEach(function (m) {
      var x = xNs(m.timeNs);
      var l = el("line", { "class": "mark", x1: x, y1: T, x2: x, y2: H - B }, svg);
      el("title", {}, l, m.name + " (op " + m.op + ")");
    });
  }
  function chart(id, series, unit) {
    var svg = document.getElementById(id);
    var H = 200;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    var max = 0;
    series.forEach(function (s) { s.values.forEach(function (v) { if (v !== null && v > max) max = v; }); });
    var top = nice(max || 1);
    faults(svg, H);
    silences(svg, H);
    for (var i = 0; i <= 4; i++) {
      var y = H - B - (i / 4) * (H - T - B);
      el("line", { "class": i ? "grid" : "axis", x1: L, y1: y, x2: W - R, y2: y }, svg);
      el("text", { x: L - 6, y: y + 4, "text-anchor": "end" }, svg, fmt((top * i) / 4) + (i === 4 ? " " + unit : ""));
    }
    xAxis(svg, H);
    series.forEach(function (s, k) {
      var d = "", pen = false;
      for (var b = 0; b < s.values.length; b++) {
        var v = s.values[b];
        if (v === null) { pen = false; continue; }
        var x = xNs((b + 0.5) * S.bucketNs), y = H - B - (v / top) * (H - T - B);
        // A run starts with a dot-sized stroke, so a lone value still shows.
        d += (pen ? "L" : "M") + x.toFixed(1) + " " + y.toFixed(1) + (pen ? "" : "l0.01 0");
        pen = true;
      }
      el("path", { "class": "series " + s.cls, d: d || "M" + L + " " + (H - B) }, svg);
      var lx = L + 8 + k * 150;
      el("rect", { "class": s.cls, x: lx, y: T + 2, width: 12, height: 3 }, svg);
      el("text", { x: lx + 16, y: T + 8 }, svg, s.name);
    });
    marks(svg, H);
    svg.setAttribute("data-drawn", "true");
  }
  function perSecond(values) { return values.map(function (c) { return c / (S.bucketNs / 1e9); }); }
  chart("throughput", [
    { name: "produce ok/s", values: perSecond(S.throughput.produce), cls: "s0" },
    { name: "deliveries/s", values: perSecond(S.throughput.deliver), cls: "s1" },
    { name: "acks ok/s", values: perSecond(S.throughput.ack), cls: "s2" }
  ], "/s");
  chart("latency", [
    { name: "produce mean", values: S.latency.produce.meanMs, cls: "s0" },
    { name: "consume mean", values: S.latency.consume.meanMs, cls: "s1" },
    { name: "ack mean", values: S.latency.ack.meanMs, cls: "s2" },
    { name: "produce max", values: S.latency.produce.maxMs, cls: "s3" },
    { name: "consume max", values: S.latency.consume.maxMs, cls: "s4" },
    { name: "ack max", values: S.latency.ack.maxMs, cls: "s5" }
  ], "ms");
  chart("lag", [{ name: "longest wait before delivery", values: S.lagMs, cls: "s6" }], "ms");

  (function timeline() {
    var svg = document.getElementById("timeline");
    var tl = data.timeline, rows = tl.processes, rowH = 14;
    var H = T + B + Math.max(1, rows.length) * rowH;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    faults(svg, H);
    silences(svg, H);
    xAxis(svg, H);
    var most = 1;
    rows.forEach(function (r) { for (var b = 0; b < tl.buckets; b++) most = Math.max(most, r.ok[b] + r.fail[b] + r.info[b]); });
    var bw = PW / tl.buckets;
    rows.forEach(function (r, i) {
      var y = T + i * rowH;
      el("text", { x: L - 6, y: y + rowH - 3, "text-anchor": "end" }, svg, r.process);
      for (var b = 0; b < tl.buckets; b++) {
        var total = r.ok[b] + r.fail[b] + r.info[b];
        if (!total) continue;
        // A stacked cell: the share of ok (bottom), ambiguous and failed operations in the slice.
        var g = el("g", { "class": "op", "fill-opacity": (0.3 + 0.7 * total / most).toFixed(2) }, svg);
        var x = (L + b * bw).toFixed(1), w = Math.max(1, bw - 0.5).toFixed(1), h = rowH - 4, base = y + 2 + h;
        [["ok", r.ok[b]], ["info", r.info[b]], ["fail", r.fail[b]]].forEach(function (part) {
          if (!part[1]) return;
          var ph = Math.max(1, (h * part[1]) / total);
          base -= ph;
          el("rect", { "class": part[0], x: x, y: base.toFixed(1), width: w, height: ph.toFixed(1) }, g);
        });
        el("title", {}, g, r.process + ": " + r.ok[b] + " ok, " + r.fail[b] + " fail, " + r.info[b] + " info");
      }
    });
    marks(svg, H);
    svg.setAttribute("data-drawn", "true");
  })();
  document.body.setAttribute("data-ready", "true");
})();
`;

function table(head: string[], rows: string[][], numeric: number[] = []): string {
  if (rows.length === 0) return `<p class="note">none</p>`;
  const th = head.map((h) => `<th>${esc(h)}</th>`).join("");
  const tr = rows
    .map((r) => `<tr>${r.map((c, i) => (numeric.includes(i) ? `<td class="num">${c}</td>` : `<td>${c}</td>`)).join("")}</tr>`)
    .join("\n");
  return `<table><thead><tr>${th}</tr></thead><tbody>\n${tr}\n</tbody></table>`;
}

/** A stretch of silence to shade: from a fault's end to the next delivery. */
export interface SilenceWindow {
  startNs: number;
  endNs: number;
  label: string;
}

export interface HtmlExtras {
  /** HTML placed first, under the verdict (a client run's findings and predictions). */
  prelude?: string;
  /** The silences to shade; default: the checker's, after each fault (FaultSummary.silenceMs). */
  silence?: SilenceWindow[];
}

/** The checker's silence after each fault, as windows to shade. */
export function faultSilences(r: Report): SilenceWindow[] {
  return r.faults
    .filter((f) => f.endNs !== null && f.silenceMs !== null)
    .map((f) => ({ startNs: f.endNs!, endNs: f.endNs! + f.silenceMs! * 1e6, label: `silence ${duration(f.silenceMs)} after ${f.kind}${f.node ? ` ${f.node}` : ""} (op ${f.op})` }));
}

export function renderHtml(r: Report, title = "narad verify check", extras: HtmlExtras = {}): string {
  const anomalyTotal = Object.values(r.anomalyCounts).reduce((s, v) => s + (v ?? 0), 0);
  const unknownTotal = Object.values(r.unknownCounts).reduce((s, v) => s + (v ?? 0), 0);
  const opsRows = Object.entries(r.counts.operations)
    .filter(([, c]) => c.invoke > 0)
    .map(([f, c]) => [esc(f), num(c.invoke), num(c.ok), num(c.fail), num(c.info), num(c.open)]);
  const anomalies = table(
    ["anomaly", "message", "path", "operations", "explanation"],
    r.anomalies.map((a) => [esc(a.name), a.msg === null ? "" : `<code>${esc(a.msg)}</code>`, esc(a.path), `<code>${esc(a.ops.join(", "))}</code>`, esc(a.explanation)]),
  );
  const unknowns = table(
    ["reason", "message", "path", "operations", "explanation"],
    r.unknowns.map((u) => [esc(u.reason), u.msg === null ? "" : `<code>${esc(u.msg)}</code>`, esc(u.path ?? ""), `<code>${esc(u.ops.join(", "))}</code>`, esc(u.explanation)]),
  );
  const faults = table(
    ["op", "fault", "node / partition", "outcome", "boot evidence", "ended (op)", "silence after", "redeliveries"],
    r.faults.map((f) => [
      String(f.op),
      esc(f.kind),
      esc(f.node ?? f.partition ?? "any"),
      esc(f.outcome),
      f.evidence === null ? "—" : f.evidence ? `yes (op ${f.evidenceOp})` : "<strong>none</strong>",
      f.endOp === null ? "—" : String(f.endOp),
      esc(duration(f.silenceMs)),
      num(f.redeliveries),
    ]),
    [0, 7],
  );
  const rd = r.redeliveries;
  const data = { series: r.series, timeline: r.timeline, silence: extras.silence ?? faultSilences(r) };
  // "<" is escaped so no string in the data can close the script element.
  const json = JSON.stringify(data).replace(/</g, "\\u003c");
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${esc(title)}: ${esc(r.verdict)}</title>
<style>${STYLE}</style>
</head>
<body data-verdict="${esc(r.verdict)}">
<header>
<h1>${esc(title)} <span class="verdict ${esc(r.verdict)}" id="verdict">${esc(r.verdict.toUpperCase())}</span></h1>
<p class="reason">${esc(r.reason)}</p>
<div class="kv" id="summary">
<div>history</div><div>${num(r.history.events)} lines, ${num(r.history.operations)} operations over ${esc(duration(r.history.durationNs / 1e6))}</div>
<div>pairs</div><div>${num(r.counts.pairs.total)}: ${num(r.counts.pairs.legal)} legal, ${num(r.counts.pairs.invalid)} invalid, ${num(r.counts.pairs.unknown)} unknown</div>
<div>deliveries</div><div>${num(r.counts.deliveries)} of ${num(r.counts.messages)} messages; ${num(r.counts.consumeEmpty)} empty consumes; ${num(r.counts.gone410)} answers 410</div>
<div>redeliveries</div><div>${num(rd.total)}: lapse ${num(rd.byCause.lapse)}, nack ${num(rd.byCause.nack)}, fault ${num(rd.byCause.fault)}; ${num(rd.explainedDuplicatesTotal)} after a 204 ack, each explained by a fault; ${num(rd.explainedRecopiesTotal)} child copies made again, each explained by a fault</div>
<div>lag</div><div>${r.lag.maxMs === null ? "no delivery" : `max ${esc(duration(r.lag.maxMs))} (${esc(r.lag.msg)} on ${esc(r.lag.path)}, delivery op ${r.lag.deliveryOp}, since ${esc(r.lag.since)}); p50 ${esc(duration(r.lag.p50Ms))}, p99 ${esc(duration(r.lag.p99Ms))}`}</div>
<div>config</div><div>ack_flush_ms ${r.config.ackFlushMs}, ack_sync_ms ${r.config.ackSyncMs}, visibility_timeout_ms ${r.config.visibilityTimeoutMs}, slack ${r.config.slackMs} ms</div>
</div>
</header>
${extras.prelude ?? ""}
<h2>Timeline of operations per process</h2>
<p class="note">Operations invoked per time slice (${esc(duration(r.timeline.bucketNs / 1e6))}): the share of ok (green), ambiguous (orange) and failed (red) ones, darker when busier; fault windows shaded orange, the silence after each (until the next delivery while messages waited) red, anomalies marked in red.${r.timeline.processesOmitted ? ` ${r.timeline.processesOmitted} quieter processes not shown.` : ""}</p>
<svg id="timeline" role="img" aria-label="timeline of operations per process"></svg>
<h2>Throughput</h2>
<svg id="throughput" role="img" aria-label="throughput over time"></svg>
<h2>Latency</h2>
<svg id="latency" role="img" aria-label="latency over time"></svg>
<h2>Lag</h2>
<svg id="lag" role="img" aria-label="lag over time"></svg>
<h2 id="anomalies">Anomalies (${num(anomalyTotal)})</h2>
${anomalies}${r.anomaliesOmitted ? `<p class="note">${num(r.anomaliesOmitted)} more not listed.</p>` : ""}
<h2 id="unknowns">Not judged (${num(unknownTotal)})</h2>
${unknowns}${r.unknownsOmitted ? `<p class="note">${num(r.unknownsOmitted)} more not listed.</p>` : ""}
<h2 id="faults">Faults (${r.faults.length})</h2>
${faults}
<h2 id="operations">Operations</h2>
${table(["f", "invoked", "ok", "fail", "info", "open"], opsRows, [1, 2, 3, 4, 5])}
<script type="application/json" id="narad-data">${json}</script>
<script>${SCRIPT}</script>
</body>
</html>
`;
}
