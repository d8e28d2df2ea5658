// The set of acked offsets of one partition: a floor (everything below is acked) plus sorted,
// disjoint, non-adjacent half-open ranges [start, end) above it.
//
// Acks arrive roughly in offset order, so the floor absorbs them and the ranges stay few: memory
// grows with the number of gaps (unacked messages below acked ones), never with the number of
// messages, and unacked messages above the last ack cost nothing. Ranges rather than a Set of
// numbers keep a long run of acks behind one stuck message at 16 bytes instead of ~50 per offset.
// The state only ever grows (acks and floor raises are facts that are never taken back), which is
// what lets recovery apply snapshot and log entries in any order and any number of times.

import assert from "node:assert/strict";

export class AckedSet {
  private floorValue = 0;
  private readonly starts: number[] = [];
  private readonly ends: number[] = [];
  private aboveFloor = 0;

  get floor(): number {
    return this.floorValue;
  }

  /** Number of acked offsets at or above the floor. */
  get ackedAboveFloor(): number {
    return this.aboveFloor;
  }

  /** Number of ranges above the floor (what a snapshot stores). */
  get rangeCount(): number {
    return this.starts.length;
  }

  has(offset: number): boolean {
    if (offset < this.floorValue) return true;
    const i = this.lastStartAtOrBelow(offset);
    return i >= 0 && offset < this.ends[i]!;
  }

  /** Adds one offset; returns false when it was acked already. */
  add(offset: number): boolean {
    if (offset < this.floorValue) return false;
    // Fast paths: the common cases are "next after the floor" and "extend the last range".
    const n = this.starts.length;
    if (offset === this.floorValue) {
      this.floorValue++;
      if (n > 0 && this.starts[0] === this.floorValue) this.absorbFirstRange();
      this.check();
      return true;
    }
    if (n > 0 && offset === this.ends[n - 1]) {
      this.ends[n - 1]++;
      this.aboveFloor++;
      this.check();
      return true;
    }
    if (n === 0 || offset > this.ends[n - 1]!) {
      this.starts.push(offset);
      this.ends.push(offset + 1);
      this.aboveFloor++;
      this.check();
      return true;
    }
    if (this.has(offset)) return false;
    this.addRange(offset, offset + 1);
    return true;
  }

  /** Adds [start, end). */
  addRange(start: number, end: number): void {
    start = Math.max(start, this.floorValue);
    if (start >= end) return;
    if (start === this.floorValue) {
      this.raiseFloor(end);
      return;
    }
    // Ranges that overlap or touch [start, end) merge with it.
    let i = this.lastStartAtOrBelow(start);
    if (i < 0 || this.ends[i]! < start) i++;
    let j = i;
    let mergedStart = start;
    let mergedEnd = end;
    let removed = 0;
    while (j < this.starts.length && this.starts[j]! <= end) {
      mergedStart = Math.min(mergedStart, this.starts[j]!);
      mergedEnd = Math.max(mergedEnd, this.ends[j]!);
      removed += this.ends[j]! - this.starts[j]!;
      j++;
    }
    this.starts.splice(i, j - i, mergedStart);
    this.ends.splice(i, j - i, mergedEnd);
    this.aboveFloor += mergedEnd - mergedStart - removed;
    this.check();
  }

  /** Everything below `offset` counts as acked (retention removed it, or a snapshot said so). */
  raiseFloor(offset: number): boolean {
    if (offset <= this.floorValue) return false;
    this.floorValue = offset;
    let drop = 0;
    while (drop < this.starts.length && this.ends[drop]! <= offset) {
      this.aboveFloor -= this.ends[drop]! - this.starts[drop]!;
      drop++;
    }
    if (drop > 0) {
      this.starts.splice(0, drop);
      this.ends.splice(0, drop);
    }
    if (this.starts.length > 0 && this.starts[0]! <= offset) {
      this.aboveFloor -= offset - this.starts[0]!;
      this.starts[0] = offset;
    }
    if (this.starts.length > 0 && this.starts[0] === this.floorValue) this.absorbFirstRange();
    this.check();
    return true;
  }

  /** Visits the ranges above the floor in order. */
  forEachRange(fn: (start: number, end: number) => void): void {
    for (let i = 0; i < this.starts.length; i++) fn(this.starts[i]!, this.ends[i]!);
  }

  private absorbFirstRange(): void {
    this.aboveFloor -= this.ends[0]! - this.starts[0]!;
    this.floorValue = this.ends[0]!;
    this.starts.shift();
    this.ends.shift();
  }

  private lastStartAtOrBelow(offset: number): number {
    let lo = 0;
    let hi = this.starts.length - 1;
    let found = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >>> 1;
      if (this.starts[mid]! <= offset) {
        found = mid;
        lo = mid + 1;
      } else hi = mid - 1;
    }
    return found;
  }

  private check(): void {
    // Cheap invariants only; the full structure is checked by the tests.
    assert.ok(this.aboveFloor >= 0);
    assert.ok(this.starts.length === 0 || this.starts[0]! > this.floorValue);
  }
}
