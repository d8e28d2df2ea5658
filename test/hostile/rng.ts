// Seeded draws so a hostile run is reproducible: the same seed draws the same
// inputs in the same order. Each family gets its own stream (seed mixed with the family's name),
// so adding a family or changing one does not shift the inputs of the others.

import { Prng } from "../../src/verify/nemesis/prng.js";

/** The nemesis's mulberry32 (src/verify/nemesis/prng.ts) with the draws the families need. */
export class Rng {
  private readonly p: Prng;
  constructor(seed: number) {
    this.p = new Prng(seed >>> 0);
  }
  /** A stream of its own for `name`, derived from `seed`. */
  static forFamily(seed: number, name: string): Rng {
    let h = seed >>> 0;
    for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), 0x9e3779b1) >>> 0;
    return new Rng(h);
  }
  /** A float in [0, 1). */
  next(): number {
    return this.p.next();
  }
  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + this.p.int(hi - lo + 1);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(0, xs.length - 1)]!;
  }
  bytes(n: number): Buffer {
    const b = Buffer.allocUnsafe(n);
    for (let i = 0; i < n; i++) b[i] = this.int(0, 255);
    return b;
  }
  /** `n` distinct indexes of [0, size), in increasing order (all of them when n >= size). */
  sample(size: number, n: number): number[] {
    if (n >= size) return Array.from({ length: size }, (_, i) => i);
    const chosen = new Set<number>();
    while (chosen.size < n) chosen.add(this.int(0, size - 1));
    return [...chosen].sort((a, b) => a - b);
  }
}
