// A clock and a scheduler that move only when told to: `advance(ms)` moves both clocks and fires
// every timer that falls due, in deadline order (ties in the order they were set), each at its own
// instant. `soon` callbacks run on the next `runSoon()` or `advance()`. This is the deterministic
// implementation of ./clock.ts and ./scheduler.ts that unit tests pass in, as etcd's raft is
// driven by ticks and Kafka's by MockTime.

import type { Clock } from "./clock.js";
import type { Scheduler, Timer } from "./scheduler.js";

interface Pending {
  id: number;
  dueMs: number;
  /** 0 for a one-shot timer. */
  periodMs: number;
  fn: () => void;
  cancelled: boolean;
}

export class ManualClock implements Clock {
  constructor(
    private mono = 0,
    private wall = Date.UTC(2026, 0, 1),
  ) {}

  nowMs(): number {
    return this.wall;
  }

  monoMs(): number {
    return this.mono;
  }

  /** Moves both clocks; called by ManualScheduler.advance, or directly when no timers matter. */
  set(monoMs: number): void {
    if (monoMs < this.mono) throw new Error(`a manual clock only moves forward (${monoMs} < ${this.mono})`);
    this.wall += monoMs - this.mono;
    this.mono = monoMs;
  }
}

export class ManualScheduler implements Scheduler {
  private readonly timers: Pending[] = [];
  private soonQueue: (() => void)[] = [];
  private nextId = 0;

  constructor(readonly clock: ManualClock = new ManualClock()) {}

  after(ms: number, fn: () => void): Timer {
    return this.add(ms, 0, fn);
  }

  every(ms: number, fn: () => void): Timer {
    if (!(ms > 0)) throw new Error(`every() needs a positive period, got ${ms}`);
    return this.add(ms, ms, fn);
  }

  soon(fn: () => void): void {
    this.soonQueue.push(fn);
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.after(ms, resolve));
  }

  /** Timers not yet fired or cancelled. */
  get pending(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  /** Runs the queued `soon` callbacks (and any they queue), up to a bound that catches a loop. */
  runSoon(): void {
    for (let rounds = 0; this.soonQueue.length > 0; rounds++) {
      if (rounds > 10_000) throw new Error("soon() callbacks keep queueing more; a loop?");
      const q = this.soonQueue;
      this.soonQueue = [];
      for (const fn of q) fn();
    }
  }

  /**
   * Moves time forward by ms, firing due timers in deadline order, each with the clock set to its
   * deadline; `soon` work runs after each timer, as Node runs immediates between timer phases.
   */
  advance(ms: number): void {
    if (!(ms >= 0)) throw new Error(`advance() needs ms >= 0, got ${ms}`);
    const end = this.clock.monoMs() + ms;
    this.runSoon();
    for (;;) {
      const next = this.nextDue();
      if (next === undefined || next.dueMs > end) break;
      this.clock.set(next.dueMs);
      if (next.periodMs > 0) next.dueMs += next.periodMs;
      else next.cancelled = true;
      next.fn();
      this.runSoon();
    }
    this.clock.set(end);
  }

  private nextDue(): Pending | undefined {
    let best: Pending | undefined;
    for (let i = this.timers.length - 1; i >= 0; i--) {
      const t = this.timers[i]!;
      if (t.cancelled) {
        this.timers.splice(i, 1);
        continue;
      }
      if (best === undefined || t.dueMs < best.dueMs || (t.dueMs === best.dueMs && t.id < best.id)) best = t;
    }
    return best;
  }

  private add(ms: number, periodMs: number, fn: () => void): Timer {
    const t: Pending = { id: this.nextId++, dueMs: this.clock.monoMs() + Math.max(0, ms), periodMs, fn, cancelled: false };
    this.timers.push(t);
    return { cancel: () => void (t.cancelled = true) };
  }
}
