// A small seeded PRNG (mulberry32) for the nemesis schedule. The schedule must be reproducible
// from the seed alone, so every draw comes from here and none from Math.random. mulberry32 has a
// 32-bit state: plenty for picking nodes, faults and delays, and trivially portable.

export class Prng {
  private state: number;
  /** The seed as given, to be printed and recorded so a run can be replayed with `--seed N`. */
  readonly seed: number;

  constructor(seed: number) {
    if (!Number.isSafeInteger(seed)) throw new RangeError(`seed must be an integer, not ${seed}`);
    this.seed = seed;
    // Fold a seed wider than 32 bits into the state rather than silently truncating its top.
    this.state = (seed ^ Math.floor(seed / 0x1_0000_0000)) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 0x1_0000_0000;
  }

  /** Uniform integer in [0, n). */
  int(n: number): number {
    if (!Number.isInteger(n) || n <= 0) throw new RangeError(`int(n) needs a positive integer, not ${n}`);
    return Math.floor(this.next() * n);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)]!;
  }

  /** `baseMs ± jitterMs`, uniform, rounded, never below 0. */
  jittered(baseMs: number, jitterMs: number): number {
    return Math.max(0, Math.round(baseMs + (this.next() * 2 - 1) * jitterMs));
  }
}

/** A fresh seed when none is given: printed and recorded by the caller. */
export function randomSeed(): number {
  return Math.floor(Math.random() * 0x1_0000_0000);
}
