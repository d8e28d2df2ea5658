// What a judgement found: anomalies and unknowns, with exact counts per name and lists capped at
// `listMax` (a run with a million anomalies still has a report of bounded size). Shared by the
// pair judgement, the replay judgement and the fault evidence, in that order of the report.

import type { Anomaly, AnomalyName, Unknown, UnknownReason } from "./types.js";

const MS = 1e6;

export class Findings {
  anomalies: Anomaly[] = [];
  anomalyCounts: Partial<Record<AnomalyName, number>> = {};
  anomaliesOmitted = 0;
  unknowns: Unknown[] = [];
  unknownCounts: Partial<Record<UnknownReason, number>> = {};
  unknownsOmitted = 0;
  constructor(private readonly listMax: number) {}

  anomaly(a: Anomaly): void {
    this.anomalyCounts[a.name] = (this.anomalyCounts[a.name] ?? 0) + 1;
    if (this.anomalies.length < this.listMax) this.anomalies.push(a);
    else this.anomaliesOmitted++;
  }
  unknown(u: Unknown): void {
    this.unknownCounts[u.reason] = (this.unknownCounts[u.reason] ?? 0) + 1;
    if (this.unknowns.length < this.listMax) this.unknowns.push(u);
    else this.unknownsOmitted++;
  }
}

/** A span of run-clock nanoseconds as the explanations print it. */
export function fmtMs(ns: number): string {
  const v = ns / MS;
  if (!Number.isFinite(v)) return "never";
  return v >= 100 ? `${Math.round(v)} ms` : `${Math.round(v * 10) / 10} ms`;
}

/** The operation list of a finding: invoke-line indexes, each once, ascending. */
export function sortedUnique(a: number[]): number[] {
  return Array.from(new Set(a)).sort((x, y) => x - y);
}

/** The first index of `a` (sorted ascending) holding a value ≥ x; a.length when none does. */
export function lowerBound(a: ArrayLike<number>, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
