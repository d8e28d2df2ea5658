// Redrive (SPEC "Dead letters"): messages of a dead-letter topic produced again to the topic they
// came from (their origin attribute), or to one named topic, then acked in the dead-letter topic.
//
// Written against the Service seam (./service.ts), so it is the same on one node and in a
// cluster, where the dead-letter topic's and the targets' partitions may live anywhere: each round
// leases a batch from the dead-letter topic, produces each target's share and waits for its 202
// (durable on the target's owner), and only then acks those leases. At least once, never lost: a
// crash or a failed produce leaves the messages in the dead-letter topic (their leases lapse or
// are ended here), and one produced whose ack did not land is produced again by a later redrive.
// The new copies are ordinary messages of their target: no origin, delivery counts from 1.
//
// Limits: one request moves at most `maxMessages` (LIMITS.redriveMessagesMax); a message with
// no origin and no `to` is skipped (left in the dead-letter topic, counted in `skipped`).

import { LIMITS, type RedriveResponse } from "../protocol/wire.js";
import type { Delivery } from "./broker.js";
import type { RequestContext, Service } from "./service.js";

export interface RedriveOptions {
  maxMessages: number;
  /** Produce every message here instead of to its origin topic. */
  to?: string;
  /** Throws (forbidden, topic_not_found) unless the caller may produce to the topic. */
  mayProduce(topic: string): Promise<void>;
}

const NEVER_ABORTED = new AbortController().signal;

export async function redrive(svc: Service, dlq: string, o: RedriveOptions, ctx: RequestContext): Promise<RedriveResponse> {
  let moved = 0;
  let skipped = 0;
  const skippedHandles: string[] = [];
  const allowed = new Set<string>();
  /** Leases taken and not yet acked: ended (extend=0) if the run stops on an error. */
  let open: Delivery[] = [];
  try {
    while (moved + skipped < o.maxMessages) {
      const want = Math.min(LIMITS.consumeBatchMax, o.maxMessages - moved - skipped);
      const ds = await svc.consume(dlq, want, 0, NEVER_ABORTED, ctx);
      if (ds.length === 0) break;
      open = ds;
      const byTarget = new Map<string, Delivery[]>();
      for (const d of ds) {
        const target = o.to ?? d.origin?.topic;
        if (target === undefined) {
          skippedHandles.push(d.receiptHandle); // leased until the end, so it is not taken again
          skipped++;
          continue;
        }
        const list = byTarget.get(target) ?? [];
        list.push(d);
        byTarget.set(target, list);
      }
      open = [...byTarget.values()].flat();
      for (const [target, list] of byTarget) {
        if (!allowed.has(target)) {
          await o.mayProduce(target);
          allowed.add(target);
        }
        await svc.produce(target, list.map((d) => ({ key: d.record.key === null ? null : d.record.key.toString("utf8"), payload: d.record.payload })), ctx);
        // Durable on the target: now the dead-letter copies may go.
        await svc.settle(dlq, list.map((d) => d.receiptHandle), "ack", ctx);
        open = open.filter((d) => !list.includes(d));
        moved += list.length;
        svc.metrics.redriven.inc({ topic: dlq }, list.length);
      }
    }
  } catch (e) {
    await release(svc, dlq, open.map((d) => d.receiptHandle), ctx);
    throw e;
  } finally {
    await release(svc, dlq, skippedHandles, ctx);
  }
  return { moved, skipped };
}

/** Ends leases now (extend=0), so what was not moved is available in the dead-letter topic at once. */
async function release(svc: Service, dlq: string, handles: string[], ctx: RequestContext): Promise<void> {
  for (let i = 0; i < handles.length; i += LIMITS.ackBatchMax) {
    await svc.settle(dlq, handles.slice(i, i + LIMITS.ackBatchMax), "nack", ctx).catch(() => undefined); // else they lapse
  }
}
