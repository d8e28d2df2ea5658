// What a client run measured, set beside what its scenario predicted (scenarios.ts). The lease
// model's checker judges the requests the SDK sent (history.jsonl); this judges what the
// application saw, from the application's own record (client.json's events): when a handler was
// given a message, when it finished one, the errors that reached it, its restarts.
//
// Measures, per consumer API (each has its own topic):
//   - silence after each fault: from the fault's end (the heal, the resume, the start after a
//     restart, the application's restart) to the next time a handler is given a message, counted
//     only when some message was waiting: acknowledged (202), its produce sent before the end,
//     not yet handled by then. (A produce sent into a frozen node is answered only after it
//     wakes: counting only those answered before the end would leave a freeze unmeasured.) Null
//     when no message came after it at all;
//   - lag: the longest from a produce's 202 to the first time a handler finished the message
//     without throwing (Infinity for one never handled: the application did not catch up);
//   - errors that reached the application, by kind (retry notices of process() and the handler
//     failures the application planted itself are listed, not counted against the bound);
//   - duplicates: a handler given a message again, by cause: `handler-failed` (the earlier
//     handler threw and the message was nacked), `restart` (the node restarted in between: leases
//     live in memory), `lapse` (a visibility timeout passed since the earlier delivery), `none`.

import type { ClientPrediction, ConsumerApi } from "./scenarios.js";

/** The application's record of one event (client.json), at the run clock's time. */
export interface AppEvent {
  tNs: number;
  lane: ConsumerApi;
  kind: "deliver" | "handled" | "failed" | "error" | "restart";
  msg?: string;
  deliveryCount?: number;
  /** For a delivery: when the request that leased it was sent (its lease may have begun then). */
  leasedNs?: number;
  /** For an error: what kind (retry, handler, refused-ack, ack-failed, nack-failed, fatal). */
  error?: string;
  detail?: string;
}

/** A fault's window as the run saw it (from its invoke to the end of its effect). */
export interface FaultWindow {
  kind: string;
  startNs: number;
  endNs: number;
  /** Leases end with it (a node restart). */
  endsLeases: boolean;
  /** Only this lane's application restarted (app-restart), or null: every lane's line or node. */
  lane: ConsumerApi | null;
}

export interface SilenceMeasure {
  fault: string;
  endNs: number;
  /** Whether acknowledged messages waited at the fault's end (only then is silence counted). */
  waiting: boolean;
  /** Null: nothing was handed to the application after it. */
  silenceMs: number | null;
}

export interface BoundCheck {
  bound: string;
  predicted: string;
  measured: string;
  ok: boolean;
}

/** Errors that are the application's own or notices of a retry: listed, never counted against maxAppErrors. */
const NOT_COUNTED = new Set(["retry", "handler"]);
export const DUPLICATE_CAUSES = ["handler-failed", "restart", "lapse", "none"] as const;
export type DuplicateCause = (typeof DUPLICATE_CAUSES)[number];
/** The checker's slack on every window, here on the lapse one. */
const SLACK_MS = 50;

export interface LaneMeasure {
  api: ConsumerApi;
  topic: string;
  prediction: ClientPrediction;
  produced: number;
  deliveries: number;
  handled: number;
  /** Acknowledged messages no handler ever finished. */
  unhandled: number;
  silences: SilenceMeasure[];
  lagMaxMs: number | null;
  lagMsg: string | null;
  errors: Record<string, number>;
  appErrors: number;
  fatal: number;
  duplicates: { total: number; byCause: Record<DuplicateCause, number>; unexplained: string[] };
  restarts: number;
  checks: BoundCheck[];
}

const MS = 1e6;

function s2(ms: number | null): string {
  return ms === null ? "never" : ms === Infinity ? "∞" : `${(ms / 1000).toFixed(2)} s`;
}

/** The measures of one lane and its bounds checked. `producedNs` maps each acknowledged msg of its topic to its 202. */
export function measureLane(o: {
  api: ConsumerApi;
  topic: string;
  prediction: ClientPrediction;
  producedNs: ReadonlyMap<string, number>;
  /** When each acknowledged message's produce was sent (default: its 202). */
  sentNs?: ReadonlyMap<string, number>;
  events: readonly AppEvent[];
  faults: readonly FaultWindow[];
  visibilityTimeoutMs: number;
}): LaneMeasure {
  const ev = o.events.filter((e) => e.lane === o.api);
  const firstHandled = new Map<string, number>();
  const deliveries: number[] = [];
  const errors: Record<string, number> = {};
  const byCause: Record<DuplicateCause, number> = { "handler-failed": 0, restart: 0, lapse: 0, none: 0 };
  const unexplained: string[] = [];
  const last = new Map<string, { tNs: number; failed: boolean }>();
  let total = 0;
  let restarts = 0;
  for (const e of ev) {
    if (e.kind === "deliver" && e.msg !== undefined) {
      deliveries.push(e.tNs);
      const prev = last.get(e.msg);
      if (prev !== undefined) {
        // The earlier lease began at the earliest when its request was sent.
        total++;
        let cause: DuplicateCause;
        if (prev.failed) cause = "handler-failed";
        else if (o.faults.some((f) => f.endsLeases && f.startNs >= prev.tNs - SLACK_MS * MS && f.startNs <= e.tNs)) cause = "restart";
        else if (e.tNs - prev.tNs >= (o.visibilityTimeoutMs - SLACK_MS) * MS) cause = "lapse";
        else cause = "none";
        byCause[cause]++;
        if (cause === "none" && unexplained.length < 20) unexplained.push(e.msg);
      }
      last.set(e.msg, { tNs: e.leasedNs ?? e.tNs, failed: false });
    } else if (e.kind === "failed" && e.msg !== undefined) {
      const prev = last.get(e.msg);
      if (prev !== undefined) prev.failed = true;
    } else if (e.kind === "handled" && e.msg !== undefined) {
      if (!firstHandled.has(e.msg)) firstHandled.set(e.msg, e.tNs);
    } else if (e.kind === "error") {
      const k = e.error ?? "error";
      errors[k] = (errors[k] ?? 0) + 1;
    } else if (e.kind === "restart") {
      restarts++;
    }
  }
  // Lag, and what was never handled.
  let lagMax: number | null = null;
  let lagMsg: string | null = null;
  let unhandled = 0;
  for (const [msg, okNs] of o.producedNs) {
    const h = firstHandled.get(msg);
    const lag = h === undefined ? Infinity : Math.max(0, (h - okNs) / MS);
    if (h === undefined) unhandled++;
    if (lagMax === null || lag > lagMax) {
      lagMax = lag;
      lagMsg = msg;
    }
  }
  // Silence after each fault that touched this lane.
  const sent = [...o.producedNs].map(([msg, okNs]) => ({ sentNs: o.sentNs?.get(msg) ?? okNs, handledNs: firstHandled.get(msg) ?? Infinity }));
  const silences: SilenceMeasure[] = o.faults
    .filter((f) => f.lane === null || f.lane === o.api)
    .map((f) => {
      const waiting = sent.some((m) => m.sentNs <= f.endNs && m.handledNs > f.endNs);
      const next = deliveries.find((t) => t >= f.endNs);
      return { fault: f.kind, endNs: f.endNs, waiting, silenceMs: next === undefined ? null : Math.round((next - f.endNs) / 1e3) / 1e3 };
    });
  const appErrors = Object.entries(errors).reduce((n, [k, v]) => n + (NOT_COUNTED.has(k) ? 0 : v), 0);
  const fatal = errors["fatal"] ?? 0;
  const p = o.prediction;
  const worstSilence = silences.filter((s) => s.waiting).reduce<number | null>((w, s) => (s.silenceMs === null ? Infinity : w === null ? s.silenceMs : Math.max(w, s.silenceMs)), null);
  const checks: BoundCheck[] = [
    { bound: "silence", predicted: `≤ ${s2(p.maxSilenceMs)} after each fault`, measured: worstSilence === null ? "nothing waited" : `worst ${s2(worstSilence === Infinity ? null : worstSilence)}`, ok: worstSilence === null || worstSilence <= p.maxSilenceMs },
    { bound: "lag", predicted: `≤ ${s2(p.maxLagMs)}`, measured: lagMax === null ? "no message" : `${s2(lagMax)}${lagMsg !== null ? ` (${lagMsg})` : ""}`, ok: lagMax === null || lagMax <= p.maxLagMs },
    {
      bound: "errors",
      predicted: p.maxAppErrors === null ? "any (not bounded)" : `≤ ${p.maxAppErrors}`,
      measured: errorsText(errors),
      ok: p.maxAppErrors === null || appErrors <= p.maxAppErrors,
    },
    { bound: "loop", predicted: "never ends by itself", measured: fatal === 0 ? "kept running" : `ended ×${fatal}`, ok: fatal === 0 },
    {
      bound: "duplicates",
      predicted: p.duplicatesOnlyAfterLeaseEnd ? "only after a lease ended" : "any",
      measured: `${total} (${DUPLICATE_CAUSES.map((c) => `${c} ${byCause[c]}`).join(", ")})`,
      ok: !p.duplicatesOnlyAfterLeaseEnd || byCause.none === 0,
    },
    { bound: "caught up", predicted: "every acknowledged message handled", measured: unhandled === 0 ? "yes" : `stalled: ${unhandled} never handled`, ok: unhandled === 0 },
  ];
  return {
    api: o.api,
    topic: o.topic,
    prediction: p,
    produced: o.producedNs.size,
    deliveries: deliveries.length,
    handled: firstHandled.size,
    unhandled,
    silences,
    lagMaxMs: lagMax,
    lagMsg,
    errors,
    appErrors,
    fatal,
    duplicates: { total, byCause, unexplained },
    restarts,
    checks,
  };
}

/** Errors by kind: the counted ones first, then those the bound leaves out. */
function errorsText(errors: Record<string, number>): string {
  const part = (counted: boolean) =>
    Object.entries(errors)
      .filter(([k]) => NOT_COUNTED.has(k) !== counted)
      .map(([k, v]) => `${k} ×${v}`)
      .join(", ");
  const counted = part(true);
  const rest = part(false);
  return `${counted === "" ? "none" : counted}${rest === "" ? "" : ` (not counted: ${rest})`}`;
}

/** The findings of a run: every bound a lane broke, as one line each. */
export function findings(lanes: readonly LaneMeasure[]): string[] {
  const out: string[] = [];
  for (const l of lanes) for (const c of l.checks) if (!c.ok) out.push(`${l.api}: ${c.bound} predicted ${c.predicted}, measured ${c.measured}`);
  return out;
}
