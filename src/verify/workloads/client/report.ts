// Reports of a client run: the terminal summary and the HTML page. Both put the findings (a bound
// of the prediction that the run broke, or a lease-model verdict other than valid) first, then per
// consumer API the prediction as written beside what was measured; the HTML page is the checker's
// report (html.ts) with that section on top and the application's silence after each fault
// shaded on every plot.

import type { Report } from "../../checker/index.js";
import { renderHtml, type SilenceWindow } from "../../report/html.js";
import type { AppEvent, FaultWindow, LaneMeasure } from "./judge.js";
import type { ClientScenario } from "./scenarios.js";

function s2(ns: number): string {
  return `${(ns / 1e9).toFixed(2)} s`;
}

function esc(v: unknown): string {
  return String(v).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

function silenceText(s: LaneMeasure["silences"][number]): string {
  if (!s.waiting) return "nothing waiting";
  return s.silenceMs === null ? "no delivery after it" : `${(s.silenceMs / 1000).toFixed(2)} s`;
}

/** The one-screen summary: findings first, then per API each bound, predicted and measured. */
export function formatClientSummary(sc: ClientScenario, report: Report, lanes: readonly LaneMeasure[], found: readonly string[], paths: { history: string; html: string; client: string }): string {
  const out: string[] = [];
  out.push(`narad verify run --workload client --scenario ${sc.name}: ${found.length === 0 ? "every prediction held" : `${found.length} FINDING${found.length === 1 ? "" : "S"}`}; lease model ${report.verdict.toUpperCase()}`);
  for (const f of found) out.push(`FINDING  ${f}`);
  out.push(`scenario ${sc.description}`);
  out.push(`lease    ${report.verdict} — ${report.reason}`);
  for (const l of lanes) {
    out.push(`${l.api.padEnd(8)} (topic ${l.topic}) ${l.produced} acknowledged, ${l.deliveries} handed to handlers, ${l.handled} handled, ${l.restarts} restarts`);
    out.push(`  predicted: ${l.prediction.sentence}`);
    for (const s of l.silences) out.push(`  silence after ${s.fault} (ended ${s2(s.endNs)}): ${silenceText(s)}`);
    for (const c of l.checks) out.push(`  ${c.ok ? "ok  " : "FAIL"} ${c.bound.padEnd(10)} predicted ${c.predicted}; measured ${c.measured}`);
  }
  out.push(`history  ${paths.history}`);
  out.push(`report   ${paths.html}  ${paths.client}`);
  return out.join("\n") + "\n";
}

/** The application's silences as windows to shade (one per fault and API, labelled). */
export function laneSilences(lanes: readonly LaneMeasure[]): SilenceWindow[] {
  const out: SilenceWindow[] = [];
  for (const l of lanes) {
    for (const s of l.silences) {
      if (!s.waiting || s.silenceMs === null) continue;
      out.push({ startNs: s.endNs, endNs: s.endNs + s.silenceMs * 1e6, label: `${l.api}: silence ${(s.silenceMs / 1000).toFixed(2)} s after ${s.fault} (predicted ≤ ${(l.prediction.maxSilenceMs / 1000).toFixed(2)} s)` });
    }
  }
  return out;
}

export function renderClientHtml(report: Report, sc: ClientScenario, lanes: readonly LaneMeasure[], faults: readonly FaultWindow[], events: readonly AppEvent[], found: readonly string[]): string {
  const findingsHtml =
    found.length === 0
      ? `<p id="findings" data-count="0">Every prediction held.</p>`
      : `<ul id="findings" data-count="${found.length}">${found.map((f) => `<li class="failed">${esc(f)}</li>`).join("")}</ul>`;
  const laneHtml = lanes
    .map((l) => {
      const rows = l.checks.map((c) => `<tr class="check${c.ok ? "" : " failed"}" data-ok="${c.ok}"><td>${esc(c.bound)}</td><td>${esc(c.predicted)}</td><td>${esc(c.measured)}</td><td>${c.ok ? "held" : "FAILED"}</td></tr>`).join("");
      const sil = l.silences.map((s) => `<tr><td>${esc(s.fault)}</td><td class="num">${esc(s2(s.endNs))}</td><td class="num">${esc(silenceText(s))}</td></tr>`).join("");
      return `<h3>${esc(l.api)} <span class="note">topic ${esc(l.topic)}: ${l.produced} acknowledged, ${l.deliveries} handed to handlers, ${l.handled} handled</span></h3>
<table class="prediction" data-api="${esc(l.api)}"><thead><tr><th>bound</th><th>predicted (written before the run)</th><th>measured</th><th></th></tr></thead><tbody>${rows}</tbody></table>
<p class="note">${esc(l.prediction.sentence)}</p>
<table><thead><tr><th>fault</th><th>ended</th><th>silence after it</th></tr></thead><tbody>${sil || "<tr><td colspan=3>no faults</td></tr>"}</tbody></table>`;
    })
    .join("\n");
  const restarts = events.filter((e) => e.kind === "restart").length;
  const prelude = `<h2 id="client">Client scenario <code>${esc(sc.name)}</code>: prediction and measure</h2>
<p>${esc(sc.description)}. ${faults.length} fault windows, ${restarts} application restarts.</p>
<h3>Findings</h3>
${findingsHtml}
${laneHtml}`;
  return renderHtml(report, `narad verify run --workload client --scenario ${sc.name}`, { prelude, silence: laneSilences(lanes) });
}
