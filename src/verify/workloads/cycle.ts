// Load cycles: producers produce in bursts, and the faults are injected in the quiet window after
// a burst, at a moment when no copy to any child is in flight and every copy cursor is on disk.
//
// Design note: why the children workload needs this.
// A parent partition's copier copies each committed message into every child and then advances
// the child's copy cursor; the cursor reaches the disk on the ack log's schedule. So a kill of the
// parent's owner makes the child receive again the copies of the last ~ack_flush_ms (allowed by
// docs/contract.md), and so does, today, a graceful stop that lands while a copy is in flight (the
// copier's close does not wait for it: a broker bug). A second copy is a second record of the same
// message on the child path, and the checker has no rule that explains it: it judges it a
// `duplicate-after-ack` or a `double-lease` unless a fault of the *delivery's* owner falls within
// ack_flush_ms after the ack, which a re-copy does not need (the copy, not the ack, precedes the
// kill, and for a remote child the owner is another node). Likewise a push to a remote child that
// is in flight when the remote node dies may land and then be sent again. Until the checker has
// those rules, faults that could make such copies are not injected. Each cycle is
//
//   burst (producers on, burstMs) → pause (gate closed; every produce in flight answered) →
//   wait until the fan-out and remote children have caught up (their lag metric is 0), then two
//   ack_flush_ms more (the cursors reach the OS) → the faults of this window, unless the window
//   has closed (then they are skipped, and the window keeps its turn) → hold, start again →
//   next burst `gapMs` after the pause (or once the main node is back, if later).
//
// A delay child is not waited for (its copies wait for the delay on purpose); the window keeps
// its copies away from the faults instead. A burst's delay copies fall due `delayMs` after its
// produces: the window closes `faultMarginMs` before the burst's first one is due (room for a
// graceful stop to finish). Earlier bursts' delay copies are due by their pause + delayMs, plus
// 1 s for messages committed before a restart of the parent's owner (PRE_BOOT_MARGIN_MS, the
// broker's rule): the window opens 300 ms after the last of those (made and on disk).
// The messages of the burst just before a restart of the parent's owner are still waiting for
// their delay when it comes back: exactly the case `delay-early-after-restart` gets wrong.
//
// Targets: each window faults the next main node in turn (on one node: the parent's owner) and
// the next remote node in turn, if there is one. The main node's fault comes first and is held
// `holdMs ± holdJitterMs`; the remote node's is held `remoteHoldMs ± remoteHoldJitterMs`, long
// enough that the next burst is produced while it is down, so its remote copies must wait and be
// retried (what `child-skip-on-failure` gets wrong). Two nodes down at once is no ambiguity for
// the checker: each fault's evidence is its own node's new boot id; the fault operations are still
// recorded one at a time (the history has one "nemesis" process). Draws come from the nemesis's
// planStep (four per target), so a seed gives the same kinds and holds.

import { Prng, applyFault, planStep, restoreTarget, type FaultRecorder, type InjectedFaultKind, type NemesisTarget } from "../nemesis/index.js";
import { Stopper } from "./roles.js";

export interface CycleSpec {
  /**
   * Producers produce this long in each cycle, and until `burstProducesMin` produces of the burst
   * got a 202 (a slow start, such as a fresh node's first produces, does not leave a burst empty),
   * but never longer than three times this.
   */
  burstMs: number;
  burstProducesMin: number;
  /** From the pause to the next burst. */
  gapMs: number;
  /** The delay child's delay (0: none): the window closes before the burst's delay copies fall due. */
  delayMs: number;
  /** The faults are invoked at least this long before the burst's first delay copy falls due. */
  faultMarginMs: number;
  /** Without a delay child: the window closes this long after the pause. */
  windowMs: number;
  holdMs: number;
  holdJitterMs: number;
  remoteHoldMs: number;
  remoteHoldJitterMs: number;
}

export interface CycleTarget extends NemesisTarget {
  role: "main" | "remote";
}

export interface CycleOptions {
  spec: CycleSpec;
  seed: number;
  /** Fault kinds (empty: bursts only, no faults). */
  faults: InjectedFaultKind[];
  targets: CycleTarget[];
  record: FaultRecorder;
  /** Opens or closes the producers' gate; a close resolves once no produce is in flight. */
  gate: (open: boolean) => Promise<void>;
  /** Produces answered 202 so far (the burst's minimum). */
  producedOk: () => number;
  /** Whether every fan-out and remote child has caught up with its parent. */
  caughtUp: () => Promise<boolean>;
  /** ack_flush_ms of the nodes: how often copy cursors reach the OS. */
  ackFlushMs: number;
  /** Notes a fault skipped because its window closed before the copies caught up. */
  onSkip?: (target: string, reason: string) => void;
}

/** Poll interval of the caught-up check. */
const CATCH_UP_POLL_MS = 50;
/** Poll interval of a burst waiting for its minimum of produces. */
const BURST_POLL_MS = 10;
/** Delay copies of messages committed before a restart wait this much longer (the broker's PRE_BOOT_COMMIT_MARGIN_MS). */
export const PRE_BOOT_MARGIN_MS = 1_000;
/** A delay copy is made and its cursor on disk this long after it fell due, at the latest (assumed). */
const DELAY_COPY_SETTLED_MS = 300;

export class LoadCycle {
  private readonly o: CycleOptions;
  private readonly prng: Prng;
  private loop: Promise<void> | null = null;
  private readonly stopper = new Stopper();
  /** A remote node's restart runs while the next burst is produced. */
  private pendingRestore: Promise<void> = Promise.resolve();
  private turn = 0;
  /** Fault operations one at a time: the history has one "nemesis" process. */
  private faultChain: Promise<unknown> = Promise.resolve();
  skipped = 0;
  applied = 0;
  /** Bursts completed since the last window with faults (Infinity before any). */
  private burstsSinceFaults = Infinity;

  constructor(o: CycleOptions) {
    if (o.faults.length > 0 && o.targets.length === 0) throw new RangeError("a load cycle with faults needs a target");
    if (o.spec.delayMs > 0 && o.spec.delayMs <= o.spec.burstMs + o.spec.faultMarginMs) throw new RangeError("the delay must exceed burstMs + faultMarginMs");
    this.o = o;
    this.prng = new Prng(o.seed);
  }

  start(): void {
    if (this.loop) throw new Error("this load cycle has already been started");
    this.loop = this.run();
  }

  /** Runs `fn` after every fault operation queued before it. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.faultChain.then(fn);
    this.faultChain = p.catch(() => undefined);
    return p;
  }

  private async run(): Promise<void> {
    const s = this.o.spec;
    // When the last delay copy of the bursts so far falls due (conservatively: with the restart margin).
    let delayCopiesDueBy = -Infinity;
    while (!this.stopper.stopping) {
      const burstAt = performance.now();
      const okBefore = this.o.producedOk();
      await this.o.gate(true);
      await this.stopper.sleep(s.burstMs);
      while (!this.stopper.stopping && this.o.producedOk() - okBefore < s.burstProducesMin && performance.now() < burstAt + 3 * s.burstMs) await this.stopper.sleep(BURST_POLL_MS);
      if (this.stopper.stopping) break;
      this.burstsSinceFaults++;
      const pauseAt = performance.now();
      await this.o.gate(false);
      // Every produce of the burst is answered: its messages are committed (or never will be).
      const quietAt = performance.now();
      if (this.o.faults.length > 0 && !this.stopper.stopping) {
        const opensAt = delayCopiesDueBy + DELAY_COPY_SETTLED_MS;
        const closesAt = s.delayMs > 0 ? burstAt + s.delayMs - s.faultMarginMs : pauseAt + s.windowMs;
        await this.faultTurn(opensAt, closesAt);
      }
      if (s.delayMs > 0) delayCopiesDueBy = quietAt + s.delayMs + PRE_BOOT_MARGIN_MS;
      await this.stopper.sleep(pauseAt + s.gapMs - performance.now());
    }
  }

  private async faultTurn(opensAt: number, closesAt: number): Promise<void> {
    const s = this.o.spec;
    // This window's targets: the next main node in turn, and the remote node (if any). A window
    // whose faults are skipped keeps its turn, so every main node keeps getting faults.
    const mains = this.o.targets.filter((t) => t.role === "main");
    const remotes = this.o.targets.filter((t) => t.role === "remote");
    const window = [...(mains.length > 0 ? [mains[this.turn % mains.length]!] : []), ...(remotes.length > 0 ? [remotes[this.turn % remotes.length]!] : [])];
    // Four draws per target, always (the wait and node draws are not used: the cycle sets both).
    const steps = window.map((t) =>
      planStep(this.prng, {
        faults: this.o.faults,
        intervalMs: 0,
        holdMs: t.role === "remote" ? s.remoteHoldMs : s.holdMs,
        holdJitterMs: t.role === "remote" ? s.remoteHoldJitterMs : s.holdJitterMs,
        targetCount: this.o.targets.length,
      }),
    );
    await this.pendingRestore;
    const flushMs = 2 * this.o.ackFlushMs;
    const deadline = closesAt;
    await this.stopper.sleep(opensAt - flushMs - performance.now());
    let caught = false;
    while (!this.stopper.stopping && performance.now() + flushMs <= deadline) {
      if (await this.o.caughtUp().catch(() => false)) {
        caught = true;
        break;
      }
      await this.stopper.sleep(CATCH_UP_POLL_MS);
    }
    if (this.stopper.stopping) return;
    const names = window.map((t) => t.node.name).join(" and ");
    if (!caught) {
      this.skipped++;
      this.o.onSkip?.(names, "the children had not caught up");
      return;
    }
    // The copy cursors reach the OS every ack_flush_ms: after two, every copy made is on record.
    await this.stopper.sleep(flushMs);
    if (this.stopper.stopping) return;
    if (performance.now() > deadline) {
      this.skipped++;
      this.o.onSkip?.(names, "its window closed");
      return;
    }
    this.turn++;
    this.burstsSinceFaults = 0;
    // The main node first (its fault must be over before the burst's delay copies fall due), then
    // the remote node, held through the next burst while the main node comes back.
    const restores: Promise<void>[] = [];
    for (let i = 0; i < window.length; i++) {
      const t = window[i]!;
      const step = steps[i]!;
      this.applied++;
      await this.exclusive(() => applyFault(this.o.record, t, step.kind));
      const restore = (async (): Promise<void> => {
        await this.stopper.sleep(step.holdMs);
        await this.exclusive(() => restoreTarget(this.o.record, t));
      })();
      if (t.role === "remote") this.pendingRestore = restore;
      else restores.push(restore);
    }
    await Promise.all(restores);
  }

  /**
   * Whether faults were injected and a burst has been produced since the last of them (always,
   * without faults): a run should not end before its first faults, nor right after faults,
   * before the load has met their effect (a remote node held down).
   */
  get settled(): boolean {
    if (this.o.faults.length === 0) return true;
    return this.burstsSinceFaults >= 1 && this.burstsSinceFaults !== Infinity;
  }

  /**
   * Stops the cycles (the fault in progress finishes) and restores every target. The gate stays
   * closed: the load ends with the last burst, so the children can catch up while the consumers
   * go on (the recovery the run measures), and no fault can meet a later copy.
   */
  async stop(): Promise<void> {
    this.stopper.stop();
    await this.loop;
    await this.pendingRestore;
    for (const t of this.o.targets) await this.exclusive(() => restoreTarget(this.o.record, t));
    await this.o.gate(false);
  }
}
