// The run clock: monotonic nanoseconds since the run started, the only time a history carries.
// Real-time order between operations of different processes comes from this clock alone, so every
// recorder of one run (workload processes, nemesis) must share one instance. The wall clock is never
// used: it can step backwards, and a history whose time goes back is rejected by the reader.

/** A source of monotonic nanoseconds; `process.hrtime.bigint` in production, a counter in tests. */
export type MonotonicNs = () => bigint;

export interface RunClock {
  /** Nanoseconds since the clock was created; never smaller than a value it returned before. */
  nowNs(): number;
}

export function createRunClock(source: MonotonicNs = process.hrtime.bigint): RunClock {
  const startNs = source();
  let lastNs = 0;
  return {
    nowNs(): number {
      // A Number holds nanoseconds exactly for 104 days, far longer than any run.
      const ns = Number(source() - startNs);
      // hrtime is monotonic already; the clamp keeps the promise even for an injected source.
      if (ns > lastNs) lastNs = ns;
      return lastNs;
    },
  };
}
