// The scheduler every timer of the server goes through: `after` (once), `every` (repeating) and
// `soon` (after the current I/O poll phase, for group commit). With the system scheduler these are
// Node's timers; with a ManualScheduler (./manual.ts) a test fires them by advancing a clock, so a
// lease lapse, an ack flush or a heartbeat is driven without waiting in real time.
//
// Timers are unref'd by default: a pending timer never keeps a process alive on its own; a server
// is kept alive by its listening socket.

export interface Timer {
  /** Stops the timer; a no-op when it already fired (once) or was cancelled. */
  cancel(): void;
}

export interface Scheduler {
  /** Runs fn once, ms milliseconds from now. */
  after(ms: number, fn: () => void): Timer;
  /** Runs fn every ms milliseconds until cancelled. */
  every(ms: number, fn: () => void): Timer;
  /** Runs fn after the current poll phase (setImmediate): work queued meanwhile shares the call. */
  soon(fn: () => void): void;
  /** Resolves after ms milliseconds (for retry back-offs). */
  sleep(ms: number): Promise<void>;
}

export const systemScheduler: Scheduler = {
  after(ms, fn) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
  every(ms, fn) {
    const t = setInterval(fn, ms);
    t.unref();
    return { cancel: () => clearInterval(t) };
  },
  soon(fn) {
    setImmediate(fn);
  },
  sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  },
};
