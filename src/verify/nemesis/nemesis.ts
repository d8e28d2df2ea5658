// The nemesis: a seeded schedule of faults on broker nodes, each recorded as a history fault.
//
// Design note.
// - One fault at a time: wait `intervalMs ± intervalJitterMs`, pick a node and a fault kind,
//   apply it, hold it `holdMs ± holdJitterMs`, then heal (start after terminate, kill and power
//   loss; resume after pause; heal the proxy after cut and latency). Sequential faults keep each
//   one's evidence unambiguous and the schedule easy to read back from a history.
// - Reproducible: every step makes exactly four draws from a seeded PRNG (wait, node, kind, hold)
//   in that order, whatever happened before, so a seed gives the same sequence of (node, kind)
//   and delays every time; `planFaults` shows it without running anything. Record the seed.
// - Recording follows history v1 fault events on process "nemesis": `invoke {kind, node, ...}`,
//   then `ok {kind, node, ...evidence}` or `info {kind, node, ..., error}` when the fault threw
//   (the outcome is unknown to the checker; a fault that was refused did nothing, but `info` is
//   what the format offers). The caller's `record` adds index, time and process.
// - Healing is by need, not by rote: after the hold the nemesis restores what is actually broken
//   (a node down is started, a paused one resumed, a proxy with toxics healed). If the fault
//   failed there may be nothing to restore, and nothing is recorded for it.
// - Bounded: `faultsMax` faults at most; stop() cuts the current wait or hold short, waits for the
//   fault in progress to finish (each node operation has its own deadline), then restores every
//   target and records those restorations too.
// - cut-kill is the one compound kind (one node): it leaves produces stored and unanswered by
//   construction, not by the luck of a kill landing between an fsync and its answer. The proxy
//   holds the node's answers (a downstream cut) until the node has accepted a message after the
//   cut began (its own /metrics, asked past the proxy: `acceptedCount`), so at least one 202 is
//   held; then the node is killed and the held answers are dropped (a downstream reset: the
//   clients see ECONNRESET, and new connections are reset at accept until the heal). Each of
//   those produces is stored and its sender does not know it: an idempotent producer re-sends
//   it after the restart. Recorded as a `cut` (direction downstream, `accepted_unanswered`)
//   and a `kill`; the hold's end brings `start` and `heal` (healed: cut and reset).

import { Prng } from "./prng.js";
import type { NodeProcess } from "./process.js";
import { countersToJson, type DirectionSpec, type Proxy } from "../proxy/proxy.js";

/** Fault kinds of history v1 that this module records (`move` belongs to the cluster). */
export type FaultKind = "terminate" | "kill" | "start" | "pause" | "resume" | "cut" | "heal" | "latency" | "power-loss";
/** The faults a schedule may pick; the rest are their healing. */
export type InjectedFaultKind = "terminate" | "kill" | "power-loss" | "pause" | "cut" | "latency" | "cut-kill";
export const INJECTED_FAULT_KINDS: readonly InjectedFaultKind[] = ["terminate", "kill", "power-loss", "pause", "cut", "latency", "cut-kill"];

export interface FaultValue {
  kind: FaultKind;
  node: string;
  [key: string]: unknown;
}
/** Called with history v1 fault events; the caller records them on process "nemesis". */
export type FaultRecorder = (type: "invoke" | "ok" | "info", f: "fault", value: FaultValue) => void;

export interface NemesisTarget {
  node: NodeProcess;
  /** The proxy in front of the node; required when the schedule includes cut, latency or cut-kill. */
  proxy?: Proxy;
  /**
   * Messages the node has accepted with a 202 since it started, asked of the node itself (not
   * through the proxy); required for cut-kill, which waits for it to grow during its cut.
   */
  acceptedCount?: () => Promise<number>;
}

export const NEMESIS_DEFAULTS = {
  /** Faults at most in one run. */
  faultsMax: 10_000,
  latencyMs: 500,
  latencyJitterMs: 50,
  cutDirection: "both" as DirectionSpec,
  /** cut-kill: how long its cut waits for the node to accept a message before the kill anyway. */
  cutKillAcceptWaitMs: 5_000,
  /** cut-kill: how often it asks the node meanwhile. */
  cutKillPollMs: 10,
} as const;

export interface FaultParams {
  /** cut and latency: which direction(s) of the proxy. */
  direction?: DirectionSpec;
  latencyMs?: number;
  latencyJitterMs?: number;
}

export interface NemesisOptions extends FaultParams {
  targets: NemesisTarget[];
  seed: number;
  /** Kinds to pick from, uniformly; a kind listed twice is picked twice as often. */
  faults: InjectedFaultKind[];
  intervalMs: number;
  intervalJitterMs?: number;
  holdMs: number;
  holdJitterMs?: number;
  faultsMax?: number;
  record: FaultRecorder;
}

export interface PlannedFault {
  /** Wait before applying the fault. */
  waitMs: number;
  /** Index into targets. */
  target: number;
  kind: InjectedFaultKind;
  /** How long the fault is held before healing. */
  holdMs: number;
}

/** One step of the schedule: always exactly four draws, in this order. */
export function planStep(prng: Prng, opts: Pick<NemesisOptions, "faults" | "intervalMs" | "intervalJitterMs" | "holdMs" | "holdJitterMs"> & { targetCount: number }): PlannedFault {
  const waitMs = prng.jittered(opts.intervalMs, opts.intervalJitterMs ?? 0);
  const target = prng.int(opts.targetCount);
  const kind = prng.pick(opts.faults);
  const holdMs = prng.jittered(opts.holdMs, opts.holdJitterMs ?? 0);
  return { waitMs, target, kind, holdMs };
}

/** The first `count` steps a nemesis with these options would take. */
export function planFaults(opts: Pick<NemesisOptions, "seed" | "faults" | "intervalMs" | "intervalJitterMs" | "holdMs" | "holdJitterMs"> & { targetCount: number }, count: number): PlannedFault[] {
  const prng = new Prng(opts.seed);
  return Array.from({ length: count }, () => planStep(prng, opts));
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function requireProxy(t: NemesisTarget, kind: FaultKind): Proxy {
  if (!t.proxy) throw new Error(`${kind} needs a proxy in front of node ${t.node.name}, and it has none`);
  return t.proxy;
}

function proxyHasToxics(p: Proxy): boolean {
  const t = p.toxics();
  return t.upstream.length + t.downstream.length > 0;
}

/**
 * Applies one fault (or healing) to a target and records it: invoke, then ok with the evidence or
 * info with the error. Returns whether it succeeded. Never throws.
 */
export async function applyFault(record: FaultRecorder, target: NemesisTarget, kind: FaultKind | "cut-kill", params: FaultParams = {}): Promise<boolean> {
  if (kind === "cut-kill") return cutKill(record, target);
  const node = target.node.name;
  const direction = params.direction ?? NEMESIS_DEFAULTS.cutDirection;
  const latencyMs = params.latencyMs ?? NEMESIS_DEFAULTS.latencyMs;
  const jitterMs = params.latencyJitterMs ?? NEMESIS_DEFAULTS.latencyJitterMs;
  const args: Record<string, unknown> =
    kind === "cut" ? { direction } : kind === "latency" ? { direction, latency_ms: latencyMs, jitter_ms: jitterMs } : {};
  record("invoke", "fault", { kind, node, ...args });
  try {
    let evidence: object;
    switch (kind) {
      case "terminate":
        evidence = await target.node.terminate();
        break;
      case "kill":
        evidence = await target.node.kill();
        break;
      case "power-loss":
        evidence = await target.node.powerLoss();
        break;
      case "start":
        evidence = await target.node.start();
        break;
      case "pause":
        evidence = await target.node.pause();
        break;
      case "resume":
        evidence = await target.node.resume();
        break;
      case "cut": {
        const p = requireProxy(target, kind);
        p.cut(direction);
        evidence = { proxy: countersToJson(p.counters()) };
        break;
      }
      case "latency": {
        const p = requireProxy(target, kind);
        p.setToxic(direction, { kind: "latency", latencyMs, jitterMs });
        evidence = { proxy: countersToJson(p.counters()) };
        break;
      }
      case "heal": {
        const p = requireProxy(target, kind);
        const healed = p.toxics();
        p.heal();
        evidence = {
          healed: { upstream: healed.upstream.map((t) => t.kind), downstream: healed.downstream.map((t) => t.kind) },
          proxy: countersToJson(p.counters()),
        };
        break;
      }
      default:
        throw new Error(`unknown fault kind ${JSON.stringify(kind)}`);
    }
    record("ok", "fault", { kind, node, ...args, ...evidence });
    return true;
  } catch (e) {
    record("info", "fault", { kind, node, ...args, error: errorText(e) });
    return false;
  }
}

/**
 * cut-kill (the design note): the node's answers held until it accepted a message, then the node
 * killed and the held answers dropped. Healing (start, heal) is restoreTarget's, after the hold.
 * Returns whether the kill succeeded.
 */
async function cutKill(record: FaultRecorder, target: NemesisTarget): Promise<boolean> {
  const node = target.node.name;
  const args = { direction: "downstream" };
  record("invoke", "fault", { kind: "cut", node, ...args });
  let accepted: number;
  try {
    const p = requireProxy(target, "cut");
    if (target.acceptedCount === undefined) throw new Error(`cut-kill needs the accepted count of node ${node}`);
    p.cut("downstream");
    // Read after the cut is in force: every message accepted past this count was answered
    // after it, so its 202 is held by the proxy.
    const before = await target.acceptedCount();
    const until = performance.now() + NEMESIS_DEFAULTS.cutKillAcceptWaitMs;
    accepted = 0;
    while (accepted === 0 && performance.now() < until) {
      await new Promise((r) => setTimeout(r, NEMESIS_DEFAULTS.cutKillPollMs));
      accepted = (await target.acceptedCount()) - before;
    }
    record("ok", "fault", { kind: "cut", node, ...args, accepted_unanswered: accepted, proxy: countersToJson(p.counters()) });
  } catch (e) {
    record("info", "fault", { kind: "cut", node, ...args, error: errorText(e) });
    return false;
  }
  const killed = await applyFault(record, target, "kill");
  // Dropped, not delivered on heal (a cut alone would deliver them, as TCP would).
  target.proxy!.setToxic("downstream", { kind: "reset" });
  return killed;
}

/** Brings a target back to health, recording each step: resume, start, heal the proxy. */
export async function restoreTarget(record: FaultRecorder, target: NemesisTarget): Promise<void> {
  if (target.node.paused) await applyFault(record, target, "resume");
  if (!target.node.running) await applyFault(record, target, "start");
  if (target.proxy && proxyHasToxics(target.proxy)) await applyFault(record, target, "heal");
}

export class Nemesis {
  readonly seed: number;
  private readonly opts: NemesisOptions;
  private readonly prng: Prng;
  private loop: Promise<void> | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;
  private faultsApplied = 0;

  constructor(opts: NemesisOptions) {
    if (opts.targets.length === 0) throw new RangeError("a nemesis needs at least one target");
    if (opts.faults.length === 0) throw new RangeError("a nemesis needs at least one fault kind");
    for (const k of opts.faults) {
      if (!INJECTED_FAULT_KINDS.includes(k)) throw new RangeError(`unknown fault kind ${JSON.stringify(k)}`);
      if ((k === "cut" || k === "latency" || k === "cut-kill") && opts.targets.some((t) => !t.proxy)) {
        throw new RangeError(`${k} is in the schedule but not every target has a proxy`);
      }
      if (k === "cut-kill" && opts.targets.some((t) => t.acceptedCount === undefined)) {
        throw new RangeError("cut-kill is in the schedule but not every target can say how many messages it accepted");
      }
      if (k === "power-loss" && opts.targets.some((t) => !t.node.powerLossMode)) {
        throw new RangeError("power-loss is in the schedule but not every node runs with NARAD_TEST_POWER_LOSS=1");
      }
    }
    for (const [name, v] of [["intervalMs", opts.intervalMs], ["holdMs", opts.holdMs]] as const) {
      if (!Number.isFinite(v) || v < 0) throw new RangeError(`${name} must be a non-negative number`);
    }
    this.opts = opts;
    this.seed = opts.seed;
    this.prng = new Prng(opts.seed);
  }

  /** Faults applied so far (each counted once, whether it succeeded or not). */
  get applied(): number {
    return this.faultsApplied;
  }

  /** Begins the schedule; it runs until stop() or `faultsMax` faults. */
  start(): void {
    if (this.loop) throw new Error("this nemesis has already been started");
    this.loop = this.run();
  }

  /** Resolves when the schedule has run out (after `faultsMax` faults) or stopped. */
  finished(): Promise<void> {
    return this.loop ?? Promise.resolve();
  }

  private sleep(ms: number): Promise<void> {
    return interruptibleSleep(ms, this.stopping, (w) => (this.wake = w));
  }

  private async run(): Promise<void> {
    const o = this.opts;
    const faultsMax = o.faultsMax ?? NEMESIS_DEFAULTS.faultsMax;
    const params: FaultParams = { direction: o.direction, latencyMs: o.latencyMs, latencyJitterMs: o.latencyJitterMs };
    while (!this.stopping && this.faultsApplied < faultsMax) {
      const step = planStep(this.prng, { ...o, targetCount: o.targets.length });
      await this.sleep(step.waitMs);
      if (this.stopping) break;
      const target = o.targets[step.target]!;
      this.faultsApplied++;
      await applyFault(o.record, target, step.kind, params);
      await this.sleep(step.holdMs);
      await restoreTarget(o.record, target);
    }
  }

  /** Stops scheduling, waits for the fault in progress, then restores every target. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    for (const t of this.opts.targets) await restoreTarget(this.opts.record, t);
  }
}

/**
 * A nemesis's wait between faults: `ms`, or until the wake it hands to `setWake` is called (a
 * stop). Resolves at once when already stopping.
 */
export function interruptibleSleep(ms: number, stopping: boolean, setWake: (wake: (() => void) | null) => void): Promise<void> {
  if (stopping) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      setWake(null);
      resolve();
    };
    const timer = setTimeout(done, ms);
    setWake(done);
  });
}
