// The run's progress as `narad verify run` prints it: the phase, the operations completed and
// their rate (measured at each tick, averaged over the load), what is still owed an ack.

import type { RunOptions, RunProgress } from "./run-options.js";
import type { RunTracker } from "./tracker.js";

/** Reports progress: on every phase change, and every `intervalMs` while the timer runs. */
export class RunProgressReporter {
  private phase: RunProgress["phase"] = "start";
  private timer: NodeJS.Timeout | null = null;
  private lastOps = 0;
  private lastTick = performance.now();
  private opsPerS = 0;

  constructor(
    private readonly tracker: RunTracker,
    private readonly t0: number,
    private readonly onProgress: RunOptions["onProgress"],
  ) {}

  /** When the load began ("run"), and the operations completed then. */
  private loadStart: { at: number; ops: number } | null = null;

  set(p: RunProgress["phase"]): void {
    this.phase = p;
    if (p === "run" && this.loadStart === null) this.loadStart = { at: performance.now(), ops: this.completedOps() };
    this.emit(false);
  }

  private completedOps(): number {
    return Object.values(this.tracker.counts.completed).reduce((a, b) => a + b, 0);
  }

  startTimer(intervalMs: number): void {
    this.timer = setInterval(() => this.emit(true), intervalMs);
    this.timer.unref();
  }

  stopTimer(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** `tick`: the periodic call, which measures the rate; phase changes report the last rate. */
  private emit(tick: boolean): void {
    if (!this.onProgress) return;
    const now = performance.now();
    const counts = this.tracker.counts;
    const ops = this.completedOps();
    const ls = this.loadStart;
    if (tick) {
      this.opsPerS = now > this.lastTick ? ((ops - this.lastOps) * 1000) / (now - this.lastTick) : 0;
      this.lastOps = ops;
      this.lastTick = now;
    }
    this.onProgress({
      phase: this.phase,
      elapsedMs: Math.round(now - this.t0),
      opsPerS: Math.round(this.opsPerS),
      opsPerSAvg: ls !== null && now > ls.at ? Math.round(((ops - ls.ops) * 1000) / (now - ls.at)) : 0,
      ops,
      pending: Math.max(0, counts.produceOk - this.tracker.ackedMessages),
      faults: counts.faultsInjected,
      produceOk: counts.produceOk,
      deliveries: counts.deliveries,
    });
  }
}
