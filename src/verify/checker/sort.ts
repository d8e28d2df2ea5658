// Sorting the measures' time arrays. Float64Array.prototype.sort compares element by element
// and took about a fifth of the whole check of a million-line history (four arrays of ~200 000
// times). These arrays hold nonnegative numbers, whose IEEE 754 bit patterns, read as unsigned
// integers, are in the same order as the numbers; an LSD radix sort over the patterns, 16 bits
// a pass, sorts them in four linear passes. An array with a negative number (or -0) is left to
// the built-in sort, so the result is always exactly the built-in's.

const RADIX_BITS = 16;
const BUCKETS = 1 << RADIX_BITS;
/** Below this length the built-in sort is as fast. */
const RADIX_MIN = 2048;

/** Sorts `a` in place, ascending, exactly as `a.sort()` would; returns it. */
export function sortTimes(a: Float64Array): Float64Array {
  const n = a.length;
  if (n < RADIX_MIN || a.byteOffset % 8 !== 0) return a.sort();
  const words = new Uint32Array(a.buffer, a.byteOffset, n * 2);
  // Little-endian: the high word of element i is words[2i + 1]. A set sign bit: not ours to sort.
  for (let i = 1; i < 2 * n; i += 2) if (words[i]! >>> 31 !== 0) return a.sort();
  const tmp = new Float64Array(n);
  const tmpWords = new Uint32Array(tmp.buffer);
  const count = new Int32Array(BUCKETS);
  let src: Uint32Array = words;
  let dst: Uint32Array = tmpWords;
  for (let pass = 0; pass < 4; pass++) {
    const word = pass >> 1;
    const shift = (pass & 1) * RADIX_BITS;
    count.fill(0);
    for (let i = 0; i < n; i++) count[(src[2 * i + word]! >>> shift) & (BUCKETS - 1)]!++;
    // A pass where every element has the same digit moves nothing.
    if (count[(src[word]! >>> shift) & (BUCKETS - 1)] === n) continue;
    let sum = 0;
    for (let d = 0; d < BUCKETS; d++) {
      const c = count[d]!;
      count[d] = sum;
      sum += c;
    }
    for (let i = 0; i < n; i++) {
      const lo = src[2 * i]!;
      const hi = src[2 * i + 1]!;
      const j = count[((word === 0 ? lo : hi) >>> shift) & (BUCKETS - 1)]!++;
      dst[2 * j] = lo;
      dst[2 * j + 1] = hi;
    }
    const t = src;
    src = dst;
    dst = t;
  }
  if (src !== words) words.set(src);
  return a;
}

/**
 * The element a sorted copy of a[from, to) would hold at index k (from ≤ k < to), found by
 * selection: a's elements in [from, to) are reordered, none lost. Quickselect with a
 * median-of-three pivot; a range that keeps shrinking too slowly is sorted instead, so the worst
 * case stays n log n. For numbers without NaN it answers what sortTimes would put there.
 */
export function selectRank(a: Float64Array, k: number, from: number, to: number): number {
  let lo = from;
  let hi = to - 1;
  let budget = 2 * (32 - Math.clz32(Math.max(1, to - from))) + 8;
  while (hi > lo) {
    if (budget-- === 0 || hi - lo < 16) {
      sortTimes(a.subarray(lo, hi + 1));
      return a[k]!;
    }
    const mid = (lo + hi) >>> 1;
    // Median of three at lo, mid, hi, left at mid.
    if (a[mid]! < a[lo]!) swap(a, mid, lo);
    if (a[hi]! < a[lo]!) swap(a, hi, lo);
    if (a[hi]! < a[mid]!) swap(a, hi, mid);
    const pivot = a[mid]!;
    // Hoare partition: [lo, j] ≤ pivot ≤ [j + 1, hi].
    let i = lo - 1;
    let j = hi + 1;
    for (;;) {
      do i++;
      while (a[i]! < pivot);
      do j--;
      while (a[j]! > pivot);
      if (i >= j) break;
      swap(a, i, j);
    }
    if (k <= j) hi = j;
    else lo = j + 1;
  }
  return a[k]!;
}

function swap(a: Float64Array, i: number, j: number): void {
  const t = a[i]!;
  a[i] = a[j]!;
  a[j] = t;
}
