// An AckLog that hands every call to another: the base of the wrappers that change a few of its
// calls (a replicated leader's ShippingAcks, which also queues acks for its followers; the
// seeded bugs' test-only ack logs). One place to extend when the AckLog interface grows.

import type { AckLog } from "./types.js";

export class ForwardingAckLog implements AckLog {
  constructor(protected readonly inner: AckLog) {}

  get floor(): number {
    return this.inner.floor;
  }

  get ackedAboveFloor(): number {
    return this.inner.ackedAboveFloor;
  }

  isAcked(offset: number): boolean {
    return this.inner.isAcked(offset);
  }

  ack(offset: number): void {
    this.inner.ack(offset);
  }

  raiseFloor(offset: number): void {
    this.inner.raiseFloor(offset);
  }

  ackRange(start: number, end: number): void {
    this.inner.ackRange(start, end);
  }

  settledRanges(rangesMax: number): { floor: number; ranges: [number, number][] } {
    return this.inner.settledRanges(rangesMax);
  }

  deliveries(offset: number): number {
    return this.inner.deliveries(offset);
  }

  deadLetterAsked(offset: number): boolean {
    return this.inner.deadLetterAsked(offset);
  }

  recordDeliveries(offset: number, count: number, deadLetter?: boolean): void {
    this.inner.recordDeliveries(offset, count, deadLetter);
  }

  forEachDelivery(fn: (offset: number, count: number, deadLetter: boolean) => void): void {
    this.inner.forEachDelivery(fn);
  }

  flushAndSync(): Promise<void> {
    return this.inner.flushAndSync();
  }

  closeIdleFile(idleMs: number): void {
    this.inner.closeIdleFile(idleMs);
  }

  close(): Promise<void> {
    return this.inner.close();
  }
}
