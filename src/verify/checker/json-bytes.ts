// Byte-level pieces of JSON the checker's two fast readers share (scan.ts for the lease model,
// stream/read.ts for the stream model): each reads one token of a line in place, from a Buffer,
// without making a string, and says -1 for anything it does not take, so that the reader sends
// the line to JSON.parse and the validator instead.

/**
 * The number the last uintAt read, in uintOut[0]: an out-parameter in a typed array, because a
 * number above 2^30 (any time_ns past a second) kept in a variable is a heap allocation each time.
 */
export const uintOut = new Float64Array(1);

/**
 * A JSON nonnegative integer of at most 15 digits (so exact in a double), without sign, fraction
 * or exponent, at p: past it (the number in uintOut[0]), or -1. A leading zero is refused as
 * JSON does, and so is a number followed by `.`, `e` or `E` (a float: JSON.parse's to judge).
 */
export function uintAt(b: Uint8Array, p: number, end: number): number {
  const s = p;
  let v = 0;
  while (p < end) {
    const c = b[p]!;
    if (c < 0x30 || c > 0x39) break;
    v = v * 10 + (c - 0x30);
    p++;
  }
  const n = p - s;
  if (n === 0 || n > 15 || (n > 1 && b[s] === 0x30)) return -1;
  if (p < end) {
    const c = b[p]!;
    if (c === 0x2e || c === 0x65 || c === 0x45) return -1;
  }
  uintOut[0] = v;
  return p;
}

/** Past the literal `l` at p, or -1. */
export function litAt(b: Uint8Array, p: number, end: number, l: Uint8Array): number {
  const n = l.length;
  if (p + n > end) return -1;
  for (let i = 0; i < n; i++) if (b[p + i] !== l[i]) return -1;
  return p + n;
}

/** A literal's bytes (ASCII). */
export function lit(text: string): Uint8Array {
  return Uint8Array.from(text, (c) => c.charCodeAt(0));
}
