// Writing answers. Every answer names the node and its boot (Narad-Node, Narad-Boot): the server
// tags each response with the node's identity header list as the request arrives (`identify`),
// and `head` puts that list first in the flat [name, value, ...] list it gives writeHead. Not
// res.setHeader: once any header is set that way, Node sends every later one through
// setHeader's checks too, which cost more than a produce route. Errors are the JSON body of the
// error table (src/protocol/errors.ts).

import { originOf } from "../broker/dead-letters.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import { recordAttrs, type Delivery, type ReplayResult } from "../broker/broker.js";
import type { SettleOutcome } from "../broker/service.js";
import { NaradError, type ErrorCode } from "../protocol/errors.js";
import { DELIVERIES_TYPE, encodeDeliveries, HEADERS, type ConsumedMessageJson } from "../protocol/wire.js";
import { headersHeaderValue } from "./params.js";

const IDENTITY = Symbol("narad.identityHeaders");
type Answer = ServerResponse & { [IDENTITY]?: readonly string[] };


/** Tags an answer with the node's identity headers (a flat list made once per server). */
export function identify(res: ServerResponse, identityHeaders: readonly string[]): void {
  (res as Answer)[IDENTITY] = identityHeaders;
}

/** writeHead with the node's identity headers first; `headers` is a flat [name, value, ...] list. */
export function head(res: ServerResponse, status: number, headers: string[] = []): void {
  const id = (res as Answer)[IDENTITY];
  res.writeHead(status, id === undefined ? headers : [...id, ...headers]);
}

export function sendJson(res: ServerResponse, status: number, body: unknown, extra: string[] = []): void {
  const text = JSON.stringify(body);
  const bytes = Buffer.byteLength(text);
  head(res, status, ["content-type", "application/json", "content-length", String(bytes), ...extra]);
  // ASCII (every answer but an error quoting what it was sent): its characters are its bytes;
  // otherwise its UTF-8 bytes, one character each (see sendBody).
  endInOneWrite(res, bytes === text.length ? text : Buffer.from(text).toString("latin1"));
}

export function sendEmpty(res: ServerResponse, status: number, headers?: string[]): void {
  head(res, status, headers);
  res.end();
}

/** A body up to this size is sent in the head's socket write (copied once more as a string); a larger one after it. */
const ONE_WRITE_BODY_BYTES_MAX = 64 * 1024;

/**
 * Sends `body` after the head written by `head()`, both in one socket write where it can. Node's
 * res.end(body) corks the socket and queues the head, the body and an empty chunk, then flushes
 * them with one writev of three buffers: ~9 µs a request more than one write (issue 17). Node
 * joins the head to a first body chunk that is a string, so the body goes as a Latin-1 string
 * (byte for byte what it holds) written with the socket corked only around it: end() then finds
 * nothing waiting and adds no empty chunk. test/answer-writes.test.ts counts the writes.
 */
export function sendBody(res: ServerResponse, body: Buffer): void {
  if (body.length > ONE_WRITE_BODY_BYTES_MAX) res.end(body);
  else endInOneWrite(res, body.toString("latin1"));
}

/** Writes a Latin-1 string as the head's first body chunk, then ends the answer (see sendBody). */
function endInOneWrite(res: ServerResponse, text: string): void {
  const socket = res.socket;
  // An answer queued behind an earlier one on its connection has no socket yet: Node keeps it.
  if (socket === null) {
    res.end(text, "latin1");
    return;
  }
  socket.cork();
  res.write(text, "latin1");
  socket.uncork();
  res.end();
}

export function sendError(res: ServerResponse, e: NaradError): void {
  const extra: string[] = [];
  if (e.retryAfterS !== undefined) extra.push("retry-after", String(e.retryAfterS));
  if (e.status === 401) extra.push("www-authenticate", 'Basic realm="narad"');
  sendJson(res, e.status, e.toBody(), extra);
}

/**
 * A single consume's 200: the message's bytes as the body, its delivery in the headers docs/api.md
 * lists ("Consume"), and no other. One header list (the node's identity first, as head() puts
 * it) and one socket write (sendBody). `nodeId`/`bootId` name the owner when the delivery names
 * no other.
 */
export function sendDelivery(res: ServerResponse, d: Delivery, nodeId: string, bootId: string): void {
  const r = d.record;
  const id = (res as Answer)[IDENTITY];
  const headers = id === undefined ? [] : id.slice();
  headers.push(
    "content-type", "application/octet-stream",
    "content-length", String(r.payload.length),
    HEADERS.receiptHandle, d.receiptHandle,
    HEADERS.partition, String(d.partition),
    HEADERS.offset, String(d.offset),
    HEADERS.deliveryCount, String(d.deliveryCount),
    HEADERS.producedAt, String(r.producedAtMs),
    HEADERS.owner, d.owner ?? nodeId,
    HEADERS.ownerBoot, d.ownerBoot ?? bootId,
  );
  if (r.key !== null) headers.push(HEADERS.key, encodeURIComponent(r.key.toString("utf8")));
  const o = d.origin;
  if (o !== undefined) {
    headers.push(HEADERS.originTopic, o.topic, HEADERS.originPartition, String(o.partition), HEADERS.originOffset, String(o.offset), HEADERS.originDeliveries, String(o.deliveries), HEADERS.originProducedAt, String(o.produced_at));
  }
  if (d.headers !== undefined) headers.push(HEADERS.messageHeaders, headersHeaderValue(d.headers));
  res.writeHead(200, headers);
  sendBody(res, r.payload);
}

/**
 * Leased messages in the binary encoding (DELIVERIES_TYPE): a consume batch that asked for it,
 * and a consume forwarded to this node as their owner. `nodeId`/`bootId` name this node where a
 * delivery does not name another owner.
 */
export function sendDeliveries(res: ServerResponse, ds: readonly Delivery[], nodeId: string, bootId: string): void {
  const body = encodeDeliveries(
    ds.map((d) => ({
      partition: d.partition,
      offset: d.offset,
      deliveryCount: d.deliveryCount,
      producedAtMs: d.record.producedAtMs,
      receiptHandle: d.receiptHandle,
      owner: d.owner ?? nodeId,
      ownerBoot: d.ownerBoot ?? bootId,
      key: d.record.key,
      payload: d.record.payload,
      ...(d.origin !== undefined ? { origin: d.origin } : {}),
    })),
  );
  head(res, 200, ["content-type", DELIVERIES_TYPE, "content-length", String(body.length), HEADERS.owner, nodeId, HEADERS.ownerBoot, bootId]);
  sendBody(res, body);
}

/** A replay page as its JSON answer. */
export function sendReplay(res: ServerResponse, r: ReplayResult): void {
  sendJson(res, 200, {
    messages: r.records.map((x) => {
      const origin = x.attrs === undefined ? undefined : originOf(x);
      const m = {
        offset: x.offset,
        key: x.key === null ? null : x.key.toString("utf8"),
        produced_at: x.producedAtMs,
        payload_base64: x.payload.toString("base64"),
        ...(origin !== undefined ? { origin } : {}),
      };
      if (x.attrs === undefined) return m;
      const a = recordAttrs(x);
      return { ...m, ...(a.headers !== undefined ? { headers: Object.fromEntries(a.headers) } : {}), ...(a.notBeforeMs !== undefined ? { not_before: a.notBeforeMs } : {}) };
    }),
    next_offset: r.nextOffset,
    earliest_offset: r.earliestOffset,
    end_offset: r.endOffset,
  });
}

/** One leased message in the JSON answer of a consume batch. */
export function toJsonMessage(d: Delivery, owner: string, ownerBoot: string): ConsumedMessageJson {
  const r = d.record;
  return {
    receipt_handle: d.receiptHandle,
    partition: d.partition,
    offset: d.offset,
    key: r.key === null ? null : r.key.toString("utf8"),
    delivery_count: d.deliveryCount,
    produced_at: r.producedAtMs,
    payload_base64: r.payload.toString("base64"),
    owner,
    owner_boot: ownerBoot,
    ...(d.origin !== undefined ? { origin: d.origin } : {}),
    ...(d.headers !== undefined ? { headers: Object.fromEntries(d.headers) } : {}),
  };
}

/** The status a settle outcome answers with in a batch. */
export function outcomeStatus(o: SettleOutcome): number {
  return o instanceof NaradError ? o.status : o;
}

/** A settle outcome's error code, what the single request answers (null for 204). */
export function outcomeCode(o: SettleOutcome): ErrorCode | null {
  if (o instanceof NaradError) return o.code;
  return o === 204 ? null : o === 410 ? "receipt_handle_gone" : "invalid_receipt_handle";
}

/** Never aborted: what a consume that does not wait gets, since it has nothing to give up. */
const NEVER_ABORTED = new AbortController().signal;

/**
 * Aborts a long poll when its client goes away, or shuts its side (FIN): the poll then ends now,
 * answered empty. A half-closed socket stays open for the answers (src/http/server.ts,
 * httpAllowHalfOpen), so without this a client gone with a FIN would hold its waiter slot for
 * the whole wait. A consume with wait_ms 0 needs none (the cost shows).
 */
export function abortOnClose(req: IncomingMessage, res: ServerResponse, waitMs: number): AbortSignal {
  if (waitMs === 0) return NEVER_ABORTED;
  const ac = new AbortController();
  const socket = req.socket;
  if (socket.readableEnded) {
    ac.abort();
    return ac.signal;
  }
  const onEnd = () => ac.abort();
  socket.once("end", onEnd);
  res.once("close", () => {
    socket.off("end", onEnd);
    if (!res.writableFinished) ac.abort();
  });
  return ac.signal;
}
