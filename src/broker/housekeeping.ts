// A node's housekeeping, every housekeepingIntervalMs: stopped partition logs reopened after
// their back-off (FAILED_LOG_RETRY_MS_MIN doubling to FAILED_LOG_RETRY_MS_MAX, see the top of
// broker.ts), idle descriptors let go, segments rolled and retention applied; what /readyz says
// of stopped logs; and the per-topic gauges /metrics reads (backlog, in flight, oldest unacked,
// children's lag).

import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import { errnoOf } from "./node-topics.js";
import type { Partition } from "./partition.js";
import type { Topic } from "./topic.js";

/** A stopped partition log is tried again after this long, doubling up to the max (see the top). */
export const FAILED_LOG_RETRY_MS_MIN = 500;
export const FAILED_LOG_RETRY_MS_MAX = 30_000;

export interface HousekeepingOptions {
  topics: Map<string, Topic>;
  clock: Clock;
  logger: Logger;
  /** storage.idle_close_ms. */
  idleCloseMs: number;
}

export class Housekeeping {
  /** Stopped logs: when each may try its reopen next, and its back-off. */
  private readonly reopenAt = new Map<Partition, { atMs: number; backoffMs: number; topic: string; cause: string }>();

  constructor(private readonly o: HousekeepingOptions) {}

  /** A topic was deleted: its stopped logs are no longer retried. */
  topicDeleted(name: string): void {
    for (const [p, r] of this.reopenAt) if (r.topic === name) this.reopenAt.delete(p);
  }

  /** Starts the back-off of a log that just stopped (see the top of broker.ts). */
  noteStopped(t: Topic, p: Partition): void {
    if (this.reopenAt.has(p) || p.log.failed === null) return;
    this.reopenAt.set(p, { atMs: this.o.clock.monoMs() + FAILED_LOG_RETRY_MS_MIN, backoffMs: FAILED_LOG_RETRY_MS_MIN, topic: t.meta.name, cause: errnoOf(p.log.failed) });
    this.o.logger.error({ topic: t.meta.name, partition: p.index, err: p.log.failed.message }, "partition log stopped; it is reopened after a back-off, once its disk takes writes again");
  }

  /** Reopens a stopped log once its back-off is over; a failed try doubles the back-off. */
  async reopenIfDue(t: Topic, p: Partition): Promise<void> {
    if (p.log.failed === null) {
      this.reopenAt.delete(p);
      return;
    }
    this.noteStopped(t, p);
    const r = this.reopenAt.get(p)!;
    const now = this.o.clock.monoMs();
    if (now < r.atMs) return;
    r.atMs = Number.POSITIVE_INFINITY; // one try at a time
    try {
      await p.log.reopen();
      this.reopenAt.delete(p);
      this.o.logger.warn({ topic: t.meta.name, partition: p.index }, "partition log reopened after its failure; it takes produces again");
    } catch (e) {
      r.backoffMs = Math.min(2 * r.backoffMs, FAILED_LOG_RETRY_MS_MAX);
      r.atMs = this.o.clock.monoMs() + r.backoffMs;
      r.cause = errnoOf(e);
      this.o.logger.warn({ topic: t.meta.name, partition: p.index, err: (e as Error).message, retryInMs: r.backoffMs }, "partition log still cannot be reopened");
    }
  }

  /**
   * Why this node's storage cannot take writes now, or null (/readyz, which anyone may ask: it
   * counts partitions and names no topic; the log names them).
   */
  storageProblem(): string | null {
    let stopped = 0;
    const causes = new Set<string>();
    for (const t of this.o.topics.values()) {
      for (const p of t.open()) {
        if (p.log.failed === null) continue;
        stopped++;
        causes.add(this.reopenAt.get(p)?.cause ?? errnoOf(p.log.failed));
      }
    }
    if (stopped === 0) return null;
    return `${stopped} partition log${stopped === 1 ? " is" : "s are"} stopped by a failed write (${[...causes].slice(0, 4).join(", ")}); produces to ${stopped === 1 ? "it" : "them"} answer 503 storage_unavailable until the disk takes writes again (retried every ${FAILED_LOG_RETRY_MS_MIN}-${FAILED_LOG_RETRY_MS_MAX} ms).`;
  }

  /** One round: stopped logs reopened when due; idle descriptors let go, segments rolled, retention. */
  async run(): Promise<void> {
    const idleMs = this.o.idleCloseMs;
    for (const [p, r] of this.reopenAt) if (this.o.topics.get(r.topic)?.partitions[p.index] !== p) this.reopenAt.delete(p); // closed or deleted
    for (const t of [...this.o.topics.values()]) {
      if (t.deleted) continue;
      for (const p of t.open()) {
        if (t.partitions[p.index] !== p) continue; // closed meanwhile (cluster mode: moved, dropped)
        if (p.log.failed !== null) {
          await this.reopenIfDue(t, p);
          continue;
        }
        p.log.closeIdleFiles(idleMs);
        p.acks.closeIdleFile(idleMs);
        try {
          await p.log.maybeRoll();
          const before = p.log.earliestOffset;
          await p.log.enforceRetention(t.meta.retention_ms);
          if (p.log.earliestOffset !== before) {
            p.afterRetention();
            this.o.logger.info({ topic: t.meta.name, partition: p.index, earliest: p.log.earliestOffset }, "retention removed segments");
          }
        } catch (e) {
          if (t.deleted) break;
          this.o.logger.error({ err: (e as Error).message, topic: t.meta.name, partition: p.index }, "housekeeping failed");
        }
      }
    }
  }

  topicGauges() {
    return [...this.o.topics.values()]
      .filter((t) => !t.deleted)
      .map((t) => ({
        topic: t.meta.name,
        backlog: t.open().reduce((s, p) => s + p.backlog, 0),
        inFlight: t.open().reduce((s, p) => s + p.inFlight, 0),
        partitions: t.open().length,
      }));
  }

  async oldestUnackedAges(): Promise<{ topic: string; ageSeconds: number }[]> {
    const now = this.o.clock.nowMs();
    const out: { topic: string; ageSeconds: number }[] = [];
    for (const t of this.o.topics.values()) {
      if (t.deleted) continue;
      let oldest = Infinity;
      for (const p of t.open()) {
        const o = await p.oldestUnacked().catch(() => null); // a read that failed is logged where it is served
        if (o !== null) oldest = Math.min(oldest, o.producedAtMs);
      }
      out.push({ topic: t.meta.name, ageSeconds: oldest === Infinity ? 0 : Math.max(0, (now - oldest) / 1000) });
    }
    return out;
  }

  childGauges() {
    const out = new Map<string, { parent: string; child: string; lagMessages: number; lagSeconds: number; heldPartitions: number }>();
    for (const t of this.o.topics.values()) {
      if (t.deleted || t.meta.children.length === 0) continue;
      for (const c of t.copiers) {
        if (c === undefined) continue;
        for (const st of c.stats()) {
          const k = `${t.meta.name}\0${st.child}`;
          const g = out.get(k) ?? { parent: t.meta.name, child: st.child, lagMessages: 0, lagSeconds: 0, heldPartitions: 0 };
          g.lagMessages += st.lagMessages;
          if (st.held) g.heldPartitions++;
          g.lagSeconds = Math.max(g.lagSeconds, st.lagSeconds);
          out.set(k, g);
        }
      }
    }
    return [...out.values()];
  }
}
