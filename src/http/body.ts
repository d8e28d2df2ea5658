// Request bodies with a limit. A body announced (Content-Length) or found (while streaming) to
// be over the limit is refused with 413 without reading the rest: the server stops reading and
// closes the connection after the answer, so a client cannot make the node buffer a huge body.

import type { IncomingMessage } from "node:http";
import { NaradError, type ErrorCode } from "../protocol/errors.js";

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
  const tooLarge = () =>
    new BodyTooLarge(code, code === "payload_too_large"
      ? `The message is over ${limitBytes} bytes (1 MiB); split it or store it elsewhere and send a reference.`
      : `The request body is over ${limitBytes} bytes; send fewer or smaller messages per request.`);
  const announced = req.headers["content-length"];
  if (announced !== undefined && Number(announced) > limitBytes) return Promise.reject(tooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    const onData = (c: Buffer) => {
      size += c.length;
      if (size > limitBytes) {
        failed = true;
        req.off("data", onData);
        req.pause();
        reject(tooLarge());
        return;
      }
      chunks.push(c);
    };
    req.on("data", onData);
    req.once("end", () => {
      if (failed) return;
      resolve(chunks);
    });
    req.once("error", (e) => {
      if (!failed) reject(new NaradError("bad_request", `Reading the request body failed: ${e.message}`));
    });
    req.once("aborted", () => {
      if (!failed) reject(new NaradError("bad_request", "The client went away before sending the whole body."));
    });
  });
}

export async function readJson(req: IncomingMessage, limitBytes: number): Promise<unknown> {
  const body = await readBody(req, limitBytes, "batch_too_large");
  if (body.length === 0) throw new NaradError("invalid_json", "The body is empty; send a JSON object.");
  try {
    return JSON.parse(body.toString("utf8"));
  } catch (e) {
    throw new NaradError("invalid_json", `The body is not valid JSON: ${(e as Error).message}`);
  }
}
