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

/** A literal as little-endian 32-bit words and its tail bytes, to compare four bytes at a time. */
export interface Lit32 {
  readonly n: number;
  readonly words: Uint32Array;
  readonly bytes: Uint8Array;
}

export function lit32(text: string): Lit32 {
  const bytes = lit(text);
  const words = new Uint32Array(bytes.length >> 2);
  for (let i = 0; i < words.length; i++) {
    words[i] = (bytes[4 * i]! | (bytes[4 * i + 1]! << 8) | (bytes[4 * i + 2]! << 16) | (bytes[4 * i + 3]! << 24)) >>> 0;
  }
  return { n: bytes.length, words, bytes };
}

/** Past the literal at p (dv: a view of b's bytes), or -1: litAt, a word at a time. */
export function lit32At(dv: DataView, b: Uint8Array, p: number, end: number, l: Lit32): number {
  const n = l.n;
  if (p + n > end) return -1;
  const w = l.words;
  const nw = w.length;
  for (let i = 0; i < nw; i++) if (dv.getUint32(p + 4 * i, true) !== w[i]) return -1;
  for (let i = nw * 4; i < n; i++) if (b[p + i] !== l.bytes[i]) return -1;
  return p + n;
}
