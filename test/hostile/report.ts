// The suite's table: one row per family and node, then the examples of wrong answers, the known
// items of issue 12 met (and any now answered right: "fixed"), crashes and losses.

import { KNOWN, type KnownId } from "./known.js";
import type { SuiteResult } from "./suite.js";

export function verdict(r: SuiteResult): { failed: boolean; wrong: number; crashes: number; losses: number } {
  const wrong = r.tallies.reduce((a, t) => a + t.wrongCount, 0);
  const crashes = r.tallies.reduce((a, t) => a + t.crashes.length, 0);
  const losses = r.tallies.reduce((a, t) => a + t.losses.length, 0);
  return { failed: wrong + crashes + losses > 0, wrong, crashes, losses };
}

export function formatReport(r: SuiteResult): string {
  const rows = r.tallies.map((t) => [
    t.family,
    t.node,
    String(t.inputs),
    String(t.wrongCount),
    String([...t.known.values()].reduce((a, k) => a + k.count, 0)),
    String([...t.fixed.entries()].filter(([k]) => !t.known.has(k)).reduce((a, [, n]) => a + n, 0)),
    String(t.crashes.length),
    String(t.losses.length),
  ]);
  const head = ["family", "node", "inputs", "wrong", "known", "fixed", "crashes", "losses"];
  const total = ["total", "", ...[2, 3, 4, 5, 6, 7].map((i) => String(rows.reduce((a, row) => a + Number(row[i]), 0)))];
  const all = [head, ...rows, total];
  const widths = head.map((_, i) => Math.max(...all.map((row) => row[i]!.length)));
  const line = (row: string[]) => "| " + row.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(" | ") + " |";
  const out: string[] = [];
  out.push(`hostile-input suite, ${r.long ? "long" : "short"} form, seed ${r.seed} (reproduce: --seed ${r.seed}${r.long ? "" : " --short"}); ${(r.wallMs / 1000).toFixed(1)} s; ${r.ledgerMessages} messages answered 202 checked after every family`);
  out.push(line(head), "|" + widths.map((w, i) => (i < 2 ? "-".repeat(w + 2) : "-".repeat(w + 1) + ":")).join("|") + "|");
  for (const row of [...rows, total]) out.push(line(row));
  for (const t of r.tallies) {
    for (const x of t.wrong) out.push(`WRONG  [${t.family} / ${t.node}] input ${x.input}\n       expected ${x.expected}\n       got      ${x.got}`);
    for (const c of t.crashes) out.push(`CRASH  [${t.family} / ${t.node}] ${c}`);
    for (const l of t.losses.slice(0, 5)) out.push(`LOST   [${t.family} / ${t.node}] ${l}`);
    for (const n of t.notes) if (n.startsWith("the family stopped")) out.push(`NOTE   [${t.family} / ${t.node}] ${n}`);
  }
  const known = new Map<KnownId, { count: number; example?: { input: string; got: string } }>();
  const fixed = new Map<KnownId, number>();
  for (const t of r.tallies) {
    for (const [k, v] of t.known) {
      const e = known.get(k) ?? { count: 0 };
      e.count += v.count;
      e.example ??= v.example;
      known.set(k, e);
    }
    for (const [k, n] of t.fixed) fixed.set(k, (fixed.get(k) ?? 0) + n);
  }
  for (const [k, v] of known) out.push(`known, issue 12 item ${KNOWN[k].item} (${k}): ${v.count} inputs — ${KNOWN[k].what}\n       e.g. ${v.example?.input}\n       got  ${v.example?.got}`);
  for (const [k, n] of fixed) if (!known.has(k)) out.push(`FIXED? issue 12 item ${KNOWN[k].item} (${k}): all ${n} inputs aimed at it answered right — ${KNOWN[k].what}; move them out of known.ts`);
  const v = verdict(r);
  out.push(v.failed ? `FAILED: ${v.wrong} wrong answers, ${v.crashes} crashes, ${v.losses} losses` : "passed: no wrong answer outside the known items, no crash, no loss");
  return out.join("\n");
}
