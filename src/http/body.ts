// Request bodies with a limit. A body announced (Content-Length) or found (while streaming) to
// be over the limit is refused with 413 without reading the rest: the server stops reading and
// closes the connection after the answer, so a client cannot make the node buffer a huge body.
// A produce batch is read here too, in either encoding (JSON or BATCH_BINARY_TYPE), and refused
// whole if any message in it is over a limit.

import type { IncomingMessage } from "node:http";
import type { ProduceItem } from "../broker/broker.js";
import { NaradError, type ErrorCode } from "../protocol/errors.js";
import { BATCH_BINARY_TYPE, decodeBinaryBatch, LIMITS } from "../protocol/wire.js";
import { asObject, checkKey, isBase64, parseDelayMs, parseMessageHeaders } from "./params.js";

export class BodyTooLarge extends NaradError {
  constructor(code: ErrorCode, message: string) {
    super(code, message);
  }
}

export async function readBody(req: IncomingMessage, limitBytes: number, code: ErrorCode = "payload_too_large"): Promise<Buffer> {
  const chunks = await readBodyChunks(req, limitBytes, code);
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
}

/** The body as the chunks it arrived in (a binary batch is decoded from them without a join). */
export function readBodyChunks(req: IncomingMessage, limitBytes: number, code: ErrorCode = "payload_too_large"): Promise<Buffer[]> {
  return new Promise((resolve, reject) => readBodyThen(req, limitBytes, code, (err, chunks) => (err === null ? resolve(chunks!) : reject(err))));
}

/**
 * Reads the body and calls `done` once, with its chunks or the error to answer (a 413 as
 * BodyTooLarge). The callback form is the single produce's path, which takes no promise per step.
 */
export function readBodyThen(req: IncomingMessage, limitBytes: number, code: ErrorCode, done: (err: NaradError | null, chunks?: Buffer[]) => void): void {
  const tooLarge = () =>
    new BodyTooLarge(code, code === "payload_too_large"
      ? `The message is over ${limitBytes} bytes (1 MiB); split it or store it elsewhere and send a reference.`
      : `The request body is over ${limitBytes} bytes; send fewer or smaller messages per request.`);
  const announced = req.headers["content-length"];
  if (announced !== undefined && Number(announced) > limitBytes) return done(tooLarge());
  const chunks: Buffer[] = [];
  let size = 0;
  let settled = false;
  const settle = (err: NaradError | null) => {
    if (settled) return;
    settled = true;
    if (err === null) done(null, chunks);
    else done(err);
  };
  const onData = (c: Buffer) => {
    size += c.length;
    if (size > limitBytes) {
      req.off("data", onData);
      req.pause();
      settle(tooLarge());
      return;
    }
    chunks.push(c);
  };
  // on, not once (once wraps each listener): `settle` takes the first of them only.
  req.on("data", onData);
  req.on("end", () => settle(null));
  req.on("error", (e) => settle(new NaradError("bad_request", `Reading the request body failed: ${e.message}`)));
  req.on("aborted", () => settle(new NaradError("bad_request", "The client went away before sending the whole body.")));
}

/**
 * Content types a JSON body may be sent with, on every route that reads one (topics, users, acks,
 * a JSON batch): JSON's own, none, and what curl -d (form) and fetch with a string body
 * (text/plain) send by default. Any other type names another encoding: 415. One rule for all
 * (topic create took text/plain while a batch refused it).
 */
const JSON_BODY_TYPES = new Set(["", "application/json", "text/plain", "application/x-www-form-urlencoded"]);

/** The request's media type, lowercased, without parameters. */
export function mediaType(req: IncomingMessage): string {
  return (req.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
}

export async function readJson(req: IncomingMessage, limitBytes: number, also?: string): Promise<unknown> {
  const type = mediaType(req);
  if (!JSON_BODY_TYPES.has(type)) {
    throw new NaradError("unsupported_media_type", `Send this body as JSON (Content-Type: application/json${also === undefined ? "" : ` or ${also}`}), not ${type}.`);
  }
  const body = await readBody(req, limitBytes, "batch_too_large");
  if (body.length === 0) throw new NaradError("invalid_json", "The body is empty; send a JSON object.");
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (e) {
    throw new NaradError("invalid_json", `The body is not valid JSON: ${(e as Error).message}`);
  }
}

/** A produce batch's messages, from a JSON or a binary body (by Content-Type). */
export async function readBatch(req: IncomingMessage): Promise<ProduceItem[]> {
  const type = mediaType(req);
  let items: ProduceItem[];
  if (type === BATCH_BINARY_TYPE) {
    const decoded = decodeBinaryBatch(await readBodyChunks(req, LIMITS.batchBodyBytesMax, "batch_too_large"));
    if (typeof decoded === "string") throw new NaradError("bad_request", `The binary batch is malformed: ${decoded}.`);
    items = decoded;
  } else {
    const body = asObject(await readJson(req, LIMITS.batchBodyBytesMax, BATCH_BINARY_TYPE));
    const msgs = body.messages;
    if (!Array.isArray(msgs)) throw new NaradError("invalid_argument", "The body must be {\"messages\": [{\"key\"?, \"payload_base64\"}]}.");
    items = msgs.map((m: unknown, i) => {
      if (typeof m !== "object" || m === null) throw new NaradError("invalid_argument", `messages[${i}] is not an object.`);
      const o = m as Record<string, unknown>;
      if (typeof o.payload_base64 !== "string" || !isBase64(o.payload_base64)) {
        throw new NaradError("invalid_argument", `messages[${i}].payload_base64 must be a base64 string.`);
      }
      if (o.key !== undefined && o.key !== null && typeof o.key !== "string") throw new NaradError("invalid_argument", `messages[${i}].key must be a string.`);
      const key = (o.key as string | null | undefined) ?? null;
      checkKey(key, `messages[${i}].key`);
      const headers = parseMessageHeaders(o.headers, `messages[${i}].headers`);
      const delayMs = parseDelayMs(o.delay_ms, `messages[${i}].delay_ms`);
      const item: ProduceItem = { key, payload: Buffer.from(o.payload_base64, "base64") };
      if (headers !== undefined) item.headers = headers;
      if (delayMs !== undefined) item.delayMs = delayMs;
      return item;
    });
  }
  if (items.length === 0) throw new NaradError("invalid_argument", "The batch has no messages.");
  if (items.length > LIMITS.batchMessagesMax) throw new NaradError("batch_too_large", `A batch holds at most ${LIMITS.batchMessagesMax} messages.`);
  items.forEach((it, i) => {
    if (it.payload.length > LIMITS.messageBytesMax) {
      throw new NaradError("payload_too_large", `messages[${i}] is ${it.payload.length} bytes, over the 1 MiB (${LIMITS.messageBytesMax} bytes) limit; the whole batch was refused.`);
    }
    checkKey(it.key, `messages[${i}].key`);
  });
  return items;
}
