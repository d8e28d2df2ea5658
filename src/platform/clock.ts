// The clock every part of the server is handed. Wall time for what is stored or shown (produce
// times, retention, expiry), monotonic time for anything measured or scheduled. Nothing deep in
// the broker reads Date.now() itself, so tests can drive time (see ./manual.ts).

export interface Clock {
  /** Wall-clock milliseconds since the epoch (produce times, retention). */
  nowMs(): number;
  /** Monotonic milliseconds (timers, intervals, latencies). */
  monoMs(): number;
}

export const systemClock: Clock = {
  nowMs: () => Date.now(),
  monoMs: () => performance.now(),
};
