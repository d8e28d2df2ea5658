// The data path: produce (one message or a batch), consume (one message, with an optional ?ack=
// of the previous one, or a batch in JSON or the binary encoding), ack / extend / nack (one handle
// or a batch) and replay of a partition by offset. These are the hot routes: each handler is made
// once, here, and per request does only its own parsing, one Service call and one writeHead with
// a flat header list (src/http/respond.ts); nothing here adds an await or a closure per message.

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Delivery, ProduceItem, SettleAction, SettleStatus } from "../../broker/broker.js";
import type { ProducerIdsApi } from "../../broker/producer-ids.js";
import type { Produced, SettleOutcome } from "../../broker/service.js";
import { NaradError } from "../../protocol/errors.js";
import { DELIVERIES_TYPE, HEADERS, LIMITS } from "../../protocol/wire.js";
import { readBatch, readBody, readBodyThen, readJson } from "../body.js";
import { asObject, badExtend, checkKey, headersFromRequest, parseDelayMs, partitionParam, prefersMinimal, queryInt, queryLimit, settleAction, topicParam } from "../params.js";
import { abortOnClose, head, outcomeCode, outcomeStatus, sendDeliveries, sendDelivery, sendEmpty, sendJson, sendReplay, toJsonMessage } from "../respond.js";
import type { Ctx, RouteDeps } from "../router.js";

export function messageRoutes({ on, svc, nodeId, bootId }: RouteDeps, producers: ProducerIdsApi): void {
  // ---- idempotent producers (docs/api.md, "Idempotent producers") -----------------------------
  on("POST", "/v1/producers", "user", async (_req, res) => {
    sendJson(res, 201, { producer_id: await producers.mint() });
  });
  /** An idempotent produce's producer and first sequence as its headers give them, checked (not the id's life), or null when it is not one. */
  const idempotenceHeaders = (req: IncomingMessage): { id: string; sequence: number } | null => {
    const idh = req.headers[HEADERS.producerId];
    const seqh = req.headers[HEADERS.sequence];
    if (idh === undefined && seqh === undefined) return null;
    if (typeof idh !== "string" || typeof seqh !== "string") {
      throw new NaradError("invalid_argument", "An idempotent produce carries both Narad-Producer-Id and Narad-Sequence, once each.");
    }
    if (!/^(0|[1-9][0-9]{0,15})$/.test(seqh) || !Number.isSafeInteger(Number(seqh))) {
      throw new NaradError("invalid_argument", "Narad-Sequence is an integer N with 0 <= N < 2^53, in decimal digits.");
    }
    return { id: idh.toLowerCase(), sequence: Number(seqh) };
  };
  /** idempotenceHeaders, and the id known live (400 unknown_producer otherwise). */
  const idempotence = async (req: IncomingMessage): Promise<{ id: string; sequence: number } | null> => {
    const idem = idempotenceHeaders(req);
    if (idem !== null) await producers.use(idem.id);
    return idem;
  };
  const numbered = (items: ProduceItem[], idem: { id: string; sequence: number }): ProduceItem[] => {
    if (idem.sequence + items.length - 1 > Number.MAX_SAFE_INTEGER) {
      throw new NaradError("invalid_argument", "The batch's last sequence (Narad-Sequence + messages - 1) would pass 2^53 - 1.");
    }
    // The rest of each item (headers, a delay) goes along, so the broker refuses what this path
    // cannot carry yet instead of it being dropped here. Numbered in place (the items are this
    // request's own): a copy of every item cost more than the dedupe window's work.
    for (let i = 0; i < items.length; i++) items[i]!.producer = { id: idem.id, sequence: idem.sequence + i };
    return items;
  };
  const resultJson = (r: Produced) => (r.duplicate === true ? { partition: r.partition, offset: r.offset, duplicate: true } : { partition: r.partition, offset: r.offset });

  /**
   * A single produce's 202: JSON by default; with `Prefer: return=minimal` (RFC 7240) no body, the
   * place in Narad-Partition and Narad-Offset (docs/api.md). Either way it names the owner that
   * stored it, as a consume names the lease's owner (the verification toolkit records it: a kill
   * of that node is what can make a child receive a copy twice).
   */
  const produced = (req: IncomingMessage, res: ServerResponse, r: Produced): void => {
    const headers = [HEADERS.owner, r.owner ?? nodeId, HEADERS.ownerBoot, r.ownerBoot ?? bootId];
    if (r.duplicate === true) headers.push(HEADERS.duplicate, "true");
    if (!prefersMinimal(req.headers.prefer)) return sendJson(res, 202, resultJson(r), headers);
    headers.push(HEADERS.partition, String(r.partition), HEADERS.offset, String(r.offset), "preference-applied", "return=minimal", "content-length", "0");
    sendEmpty(res, 202, headers);
  };

  // ---- produce --------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/messages", "produce", (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const key = q.get("key");
    const direct = svc.direct;
    const h = req.headers;
    if (direct === undefined || q.has("delay_ms") || h[HEADERS.messageHeaders] !== undefined) {
      return produceRouted(req, res, topic, key, q, ctx);
    }
    // A plain or idempotent message on the single node: one promise for the request, no await
    // per step (issue 17). The same checks in the same order as produceRouted, the same answers.
    direct.assertTopic(topic); // 404 before reading a body for a topic that does not exist
    checkKey(key);
    const idem = idempotenceHeaders(req);
    // An id not checked within the touch interval is checked (and its use recorded) by produceRouted.
    if (idem !== null && !producers.usedRecently(idem.id)) return produceRouted(req, res, topic, key, q, ctx);
    return new Promise<void>((resolve, reject) => {
      readBodyThen(req, LIMITS.messageBytesMax, "payload_too_large", (err, chunks) => {
        if (err !== null) return reject(err);
        try {
          const payload = chunks!.length === 1 ? chunks![0]! : Buffer.concat(chunks!);
          const answer = (e: unknown, r?: Produced) => {
            if (e !== null) return reject(e);
            try {
              produced(req, res, r!);
              resolve();
            } catch (x) {
              reject(x);
            }
          };
          if (idem === null) direct.produceOne(topic, key, payload, answer);
          else direct.produceOneIdempotent(topic, key, payload, idem, answer);
        } catch (e) {
          reject(e);
        }
      });
    });
  });
  /** A produce of one message through Service.produce: a cluster's, an idempotent one, one with headers or a delay. */
  const produceRouted = async (req: IncomingMessage, res: ServerResponse, topic: string, key: string | null, q: URLSearchParams, ctx: Ctx): Promise<void> => {
    await svc.checkTopic(topic); // 404 before reading a body for a topic that does not exist
    checkKey(key);
    // A per-message delay and headers (issue 16 item 13): checked before the body is read.
    const delayMs = parseDelayMs(q.get("delay_ms") ?? undefined);
    const msgHeaders = headersFromRequest(req.headers[HEADERS.messageHeaders]);
    const idem = await idempotence(req);
    const payload = await readBody(req, LIMITS.messageBytesMax);
    const item = msgHeaders === undefined && delayMs === undefined ? { key, payload } : { key, payload, ...(msgHeaders !== undefined ? { headers: msgHeaders } : {}), ...(delayMs !== undefined ? { delayMs } : {}) };
    const [r] = await svc.produce(topic, idem === null ? [item] : numbered([item], idem), ctx.req);
    produced(req, res, r!);
  };
  on("POST", "/v1/topics/:topic/messages/batch", "produce", async (req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    await svc.checkTopic(topic);
    const idem = await idempotence(req);
    const items = await readBatch(req);
    const results = await svc.produce(topic, idem === null ? items : numbered(items, idem), ctx.req);
    const dup = idem !== null && results.some((r) => r.duplicate === true);
    // One owner stored it all (the SDK's batches are of one partition): name it, as a single produce does.
    const o = results[0]!;
    const oneOwner = results.every((r) => r.owner === o.owner && r.ownerBoot === o.ownerBoot);
    const headers = oneOwner ? [HEADERS.owner, o.owner ?? nodeId, HEADERS.ownerBoot, o.ownerBoot ?? bootId] : [];
    if (dup) headers.push(HEADERS.duplicate, "true");
    sendJson(res, 202, { results: results.map(resultJson) }, headers);
  });

  // ---- consume ----------------------------------------------------------------------------------
  on("POST", "/v1/topics/:topic/consume", "consume", (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
    // ?ack=H: ack the previous delivery first, in the same round trip (JetStream's AckNext). A
    // refused ack answers as the ack would have and leases nothing. Once the ack took effect, a
    // consume refused for certain (429 too many waiters, 503) answers 204: the ack is done and
    // nothing was leased, which a definite error would deny. An ambiguous one stays ambiguous.
    const ackHandle = q.get("ack");
    if (ackHandle === "") throw new NaradError("invalid_receipt_handle", "?ack= names no receipt handle.");
    const direct = svc.directConsume;
    if (direct === undefined) return consumeRouted(req, res, topic, waitMs, ackHandle, ctx);
    // The single node: the ack and a message in memory without an await, one socket write for
    // the answer (issue 17). The same steps in the same order as consumeRouted, the same answers.
    if (ackHandle !== null) settledOrThrow(direct.settleOne(topic, ackHandle, "ack"));
    let d: Delivery | null | Promise<Delivery | null>;
    try {
      d = direct.consumeOne(topic);
    } catch (e) {
      return consumeRefused(res, ackHandle !== null, e);
    }
    if (d instanceof Promise) {
      // Its record is read from the log (one consume in READ_AHEAD_RECORDS): the rest waits for it.
      return d.then(
        (x) => (x === null ? nothingNow(req, res, topic, waitMs, ackHandle !== null, ctx) : sendDelivery(res, x, nodeId, bootId)),
        (e: unknown) => consumeRefused(res, ackHandle !== null, e),
      );
    }
    if (d === null) return nothingNow(req, res, topic, waitMs, ackHandle !== null, ctx);
    sendDelivery(res, d, nodeId, bootId);
  });
  /** A single consume through Service.settle and Service.consume: a cluster's. */
  const consumeRouted = async (req: IncomingMessage, res: ServerResponse, topic: string, waitMs: number, ackHandle: string | null, ctx: Ctx): Promise<void> => {
    if (ackHandle !== null) await ack(topic, ackHandle, "ack", ctx);
    await consumeWaiting(req, res, topic, waitMs, ackHandle !== null, ctx);
  };
  /** The single node found no message now: 204, or the long poll through Service.consume. */
  const nothingNow = (req: IncomingMessage, res: ServerResponse, topic: string, waitMs: number, acked: boolean, ctx: Ctx): Promise<void> | void =>
    waitMs === 0 ? sendEmpty(res, 204) : consumeWaiting(req, res, topic, waitMs, acked, ctx);
  /** The consume after the ack, if any (`acked`), through Service.consume: it may wait `waitMs` for a message. */
  const consumeWaiting = async (req: IncomingMessage, res: ServerResponse, topic: string, waitMs: number, acked: boolean, ctx: Ctx): Promise<void> => {
    let d: Delivery | undefined;
    try {
      [d] = await svc.consume(topic, 1, waitMs, abortOnClose(req, res, waitMs), ctx.req);
    } catch (e) {
      return consumeRefused(res, acked, e);
    }
    if (d === undefined) return sendEmpty(res, 204);
    sendDelivery(res, d, nodeId, bootId);
  };
  /** A consume that failed after its ?ack= took effect answers 204 when the failure is definite (see above). */
  const consumeRefused = (res: ServerResponse, acked: boolean, e: unknown): void => {
    if (acked && e instanceof NaradError && e.definite) return sendEmpty(res, 204);
    throw e;
  };
  on("POST", "/v1/topics/:topic/consume/batch", "consume", async (req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const max = queryInt(q, "max_messages", 10, 1, LIMITS.consumeBatchMax);
    const waitMs = queryInt(q, "wait_ms", 0, 0, LIMITS.waitMsMax);
    const binary = wantsDeliveries(req);
    const ds = await svc.consume(topic, max, waitMs, abortOnClose(req, res, waitMs), ctx.req);
    // The binary encoding has no room for headers: a batch with any is answered in JSON (the
    // Content-Type says which; the SDK reads either).
    if (binary && !ds.some((d) => d.headers !== undefined)) return sendDeliveries(res, ds, nodeId, bootId);
    sendJson(res, 200, { messages: ds.map((d) => toJsonMessage(d, d.owner ?? nodeId, d.ownerBoot ?? bootId)), owner: nodeId, owner_boot: bootId });
  });

  // ---- ack, extend, nack -----------------------------------------------------------------------
  /** Settles one handle; throws the error the ack answers with when it is refused. */
  const ack = async (topic: string, handle: string, action: SettleAction, ctx: Ctx): Promise<void> => {
    const [outcome] = await svc.settle(topic, [handle], action, ctx.req);
    if (outcome instanceof NaradError) throw outcome;
    settledOrThrow(outcome!);
  };
  on("POST", "/v1/topics/:topic/ack", "consume", (_req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const handle = q.get("receipt_handle");
    if (handle === null || handle === "") throw new NaradError("invalid_receipt_handle", "Send the receipt handle as ?receipt_handle=H.");
    const action = settleAction(q.get("extend"), q.get("dead_letter"));
    const direct = svc.directConsume;
    // dead_letter=true waits for the ack log's fsync (Broker.settleDurable): the general path.
    if (direct === undefined || action === "dead_letter") return ack(topic, handle, action, ctx).then(() => sendEmpty(res, 204));
    settledOrThrow(direct.settleOne(topic, handle, action)); // the single node: no await
    sendEmpty(res, 204);
  });
  on("POST", "/v1/topics/:topic/ack/batch", "consume", async (req, res, p, _q, ctx) => {
    const topic = topicParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    const handles = body.receipt_handles;
    if (!Array.isArray(handles) || handles.some((h) => typeof h !== "string")) {
      throw new NaradError("invalid_argument", "The body must be {\"receipt_handles\": [\"...\"], \"extend\"?: true | 0}.");
    }
    if (handles.length > LIMITS.ackBatchMax) throw new NaradError("batch_too_large", `An ack batch holds at most ${LIMITS.ackBatchMax} handles.`);
    const ext = body.extend;
    const dl = body.dead_letter;
    if (dl !== undefined && typeof dl !== "boolean") throw new NaradError("invalid_argument", "dead_letter must be true or false.");
    if (dl === true && ext !== undefined && ext !== false && ext !== null) throw new NaradError("invalid_argument", "dead_letter: true settles the leases; it takes no extend.");
    const action: SettleAction =
      dl === true ? "dead_letter" : ext === undefined || ext === false || ext === null ? "ack" : ext === true || ext === "true" ? "extend" : ext === 0 || ext === "0" ? "nack" : badExtend();
    const outcomes = await svc.settle(topic, handles as string[], action, ctx.req);
    sendJson(res, 200, {
      results: outcomes.map((o, i) => {
        const error = outcomeCode(o);
        return error === null ? { receipt_handle: handles[i] as string, status: 204 } : { receipt_handle: handles[i] as string, status: outcomeStatus(o), error };
      }),
    });
  });

  // ---- replay -----------------------------------------------------------------------------------
  on("GET", "/v1/topics/:topic/partitions/:partition/messages", "consume", async (_req, res, p, q, ctx) => {
    const topic = topicParam(p);
    const partition = partitionParam(p);
    const offset = queryInt(q, "offset", 0, 0, Number.MAX_SAFE_INTEGER);
    const limit = queryLimit(q, "limit", LIMITS.replayLimitDefault, LIMITS.replayLimitMax);
    const r = await svc.replay(topic, partition, offset, limit, ctx.req);
    if ("json" in r) {
      head(res, 200, ["content-type", "application/json", "content-length", String(r.json.length)]);
      res.end(r.json);
      return;
    }
    sendReplay(res, r);
  });
}

/** A single settle's status as its answer: nothing for a 204, the refusal thrown otherwise (the error table's). */
function settledOrThrow(status: SettleOutcome | SettleStatus): void {
  if (status === 503) throw new NaradError("not_owner"); // not served here now (a cluster's; Service.settle says so as an error)
  if (status instanceof NaradError) throw status;
  const code = outcomeCode(status);
  if (code !== null) throw new NaradError(code);
}

/** True when the client asked for the binary consume/batch answer (Accept names DELIVERIES_TYPE). */
function wantsDeliveries(req: IncomingMessage): boolean {
  const a = req.headers.accept;
  return a !== undefined && a.includes(DELIVERIES_TYPE);
}
