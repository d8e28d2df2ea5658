// Typed errors of the SDK. The one question a caller must answer after a failure is "did it
// happen?", so every error carries `definite`:
//
//   definite = true   the operation certainly did not take effect; retrying cannot duplicate it.
//   definite = false  it may have taken effect; a retried produce may store the message twice,
//                     a retried ack is harmless (a second ack of a settled handle answers 410).
//
// Three shapes cover every failure:
//   NaradRequestError    the server answered with an error status and a JSON code from the error
//                        table (src/protocol/errors.ts); `definite` comes from the table.
//     NaradGoneError     410 receipt_handle_gone: the handle is not the live lease. Indefinite,
//                        because a lost response of an earlier ack also ends in a 410.
//   NaradAmbiguousError  no usable answer: the connection broke mid-request, the request timed out,
//                        the caller aborted it, or a 5xx came back whose code is not definite.
//     NaradPartialBatchError  a batch produce whose messages went to several owners in a cluster
//                        and was stored only in part (502 forward_failed): `results` says per
//                        message whether it was stored, so the caller can resend only the rest.
//   NaradConnectionError the connection could not be opened (refused, unknown host, connect
//                        timeout): the request was never sent, so it is definite.
// All of them extend NaradClientError, so `catch (e) { if (e instanceof NaradClientError && !e.definite) … }`
// is the whole decision.

import { ERRORS, isErrorCode, type BatchItemResult, type ErrorCode } from "../protocol/errors.js";

export abstract class NaradClientError extends Error {
  /** `error.code` of the server's JSON body, or a client-side code (`network_error`, `request_timeout`, `aborted`, `connection_failed`). */
  abstract readonly code: string;
  /** True when the operation certainly did not take effect. */
  abstract readonly definite: boolean;
  /** HTTP status, when the server answered. */
  abstract readonly status: number | undefined;
}

/** The server answered with an error status (4xx, or a 5xx whose code is definite such as 503 `unavailable`). */
export class NaradRequestError extends NaradClientError {
  readonly code: string;
  readonly status: number;
  readonly definite: boolean;
  /** Seconds from the `Retry-After` header (429, 503), when present. */
  readonly retryAfterS: number | undefined;

  constructor(status: number, code: string, message: string, definite: boolean, retryAfterS?: number) {
    super(message);
    this.name = "NaradRequestError";
    this.status = status;
    this.code = code;
    this.definite = definite;
    this.retryAfterS = retryAfterS;
  }

  /** 429 and 503 are refusals the server asks you to retry, after `retryAfterS` when given. */
  get retryable(): boolean {
    return this.status === 429 || this.status === 503;
  }
}

/**
 * 410 `receipt_handle_gone`: the receipt handle is not the live lease. It lapsed, was settled
 * already (possibly by an earlier ack whose response was lost), or a later delivery replaced it.
 * Not definite: the message may or may not be delivered again. Do not retry with the same handle.
 */
export class NaradGoneError extends NaradRequestError {
  constructor(message: string) {
    super(410, "receipt_handle_gone", message, false);
    this.name = "NaradGoneError";
  }
}

/**
 * No usable answer arrived: the operation may or may not have happened. Retrying a produce may
 * store the message twice; retrying a consume is safe (a lease taken by the lost request lapses
 * after the visibility timeout); retrying an ack, extend or nack is safe.
 */
export class NaradAmbiguousError extends NaradClientError {
  readonly code: string;
  readonly status: number | undefined;
  readonly definite = false;

  constructor(code: string, message: string, status?: number, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "NaradAmbiguousError";
    this.code = code;
    this.status = status;
  }
}

/**
 * A batch produce that was stored only in part: in a cluster its messages went to the owners of
 * several partitions and not all of them stored their part (502 `forward_failed`). Ambiguous as a
 * whole, but `results` has one entry per message of the batch, in request order:
 * `{status: "stored", partition, offset}` (it is durable there: do not send it again),
 * `{status: "not_stored", code}` (certainly not stored: resend it freely), or
 * `{status: "unknown", code}` (it may be stored: resending it may store it twice).
 */
export class NaradPartialBatchError extends NaradAmbiguousError {
  readonly results: readonly BatchItemResult[];

  constructor(code: string, message: string, status: number, results: readonly BatchItemResult[]) {
    super(code, message, status);
    this.name = "NaradPartialBatchError";
    this.results = results;
  }
}

/** The connection could not be opened, so the request was never sent: definite, safe to retry. */
export class NaradConnectionError extends NaradClientError {
  readonly code = "connection_failed";
  readonly status = undefined;
  readonly definite = true;

  constructor(message: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "NaradConnectionError";
  }
}

/**
 * A request the SDK refuses itself, before sending anything, because it breaks a limit the server
 * would refuse it for (src/protocol/wire.ts LIMITS): the same code and status as the server's
 * answer, and definite, since nothing was sent. Sending it anyway could end as a lost answer
 * (the server's early 413 racing the body still being written), read as ambiguous.
 */
export function refusedBeforeSending(code: ErrorCode, message: string): NaradRequestError {
  return new NaradRequestError(ERRORS[code].status, code, `${message}; nothing was sent`, true);
}

/** Maps an error answer (status, parsed body, Retry-After) to a typed error. */
export function errorFromResponse(
  status: number,
  bodyText: string,
  retryAfter: string | string[] | undefined,
): NaradClientError {
  let code: string | undefined;
  let message: string | undefined;
  let results: BatchItemResult[] | undefined;
  try {
    const parsed = JSON.parse(bodyText) as { error?: { code?: unknown; message?: unknown; results?: unknown } };
    if (typeof parsed?.error?.code === "string") code = parsed.error.code;
    if (typeof parsed?.error?.message === "string") message = parsed.error.message;
    results = batchItemResults(parsed?.error?.results);
  } catch {
    // Not our JSON (a proxy's page, an empty body): fall back on the status alone.
  }
  if (status === 410) return new NaradGoneError(message ?? ERRORS.receipt_handle_gone.message);
  const known = code !== undefined && isErrorCode(code) ? ERRORS[code] : undefined;
  // Without a code the table knows, only a 4xx is a clear refusal; a bare 5xx may come from a
  // node that crashed half-way through the work.
  const definite = known ? known.definite : status < 500;
  const text = message ?? known?.message ?? `HTTP ${status}${bodyText ? `: ${bodyText.slice(0, 200)}` : ""}`;
  const finalCode = code ?? `http_${status}`;
  if (!definite && status >= 500) return results === undefined ? new NaradAmbiguousError(finalCode, text, status) : new NaradPartialBatchError(finalCode, text, status, results);
  return new NaradRequestError(status, finalCode, text, definite, parseRetryAfterS(retryAfter));
}

/** A body's per-message results, when every entry has the shape docs/api.md gives; otherwise none. */
function batchItemResults(v: unknown): BatchItemResult[] | undefined {
  if (!Array.isArray(v) || v.length === 0) return undefined;
  const ok = v.every((r: unknown) => {
    if (typeof r !== "object" || r === null) return false;
    const x = r as Record<string, unknown>;
    if (x.status === "stored") return Number.isInteger(x.partition) && Number.isInteger(x.offset);
    return (x.status === "not_stored" || x.status === "unknown") && typeof x.code === "string";
  });
  return ok ? (v as BatchItemResult[]) : undefined;
}

function parseRetryAfterS(h: string | string[] | undefined): number | undefined {
  const v = Array.isArray(h) ? h[0] : h;
  if (v === undefined || v === "") return undefined;
  const n = Number(v);
  if (Number.isFinite(n) && n >= 0) return n;
  const at = Date.parse(v);
  return Number.isFinite(at) ? Math.max(0, Math.ceil((at - Date.now()) / 1000)) : undefined;
}

const CONNECT_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

/** Maps a transport failure (undici or socket error) to a typed error. */
export function errorFromTransport(err: unknown, what: string, aborted: boolean): NaradClientError {
  if (err instanceof NaradClientError) return err;
  if (aborted) return new NaradAmbiguousError("aborted", `${what}: aborted by the caller; it may or may not have happened`, undefined, err);
  const code = transportCode(err);
  const detail = err instanceof Error ? err.message : String(err);
  // A failure of the connect call itself (its RST came in the handshake: "connect ECONNRESET")
  // is one too: nothing is written before a connection is open.
  if ((code !== undefined && CONNECT_CODES.has(code)) || transportSyscall(err) === "connect") {
    return new NaradConnectionError(`${what}: cannot connect (${detail}); the request was not sent`, err);
  }
  if (code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") {
    return new NaradAmbiguousError("request_timeout", `${what}: no answer in time; it may or may not have happened`, undefined, err);
  }
  return new NaradAmbiguousError("network_error", `${what}: ${detail}; it may or may not have happened`, undefined, err);
}

/** The system call a socket error names (`connect`, `read`, `write`), looking through causes. */
function transportSyscall(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { syscall?: unknown; cause?: unknown };
  if (typeof e.syscall === "string") return e.syscall;
  return e.cause !== undefined ? transportSyscall(e.cause) : undefined;
}

function transportCode(err: unknown): string | undefined {
  if (typeof err !== "object" || err === null) return undefined;
  const e = err as { code?: unknown; errors?: unknown[]; cause?: unknown };
  if (typeof e.code === "string") return e.code;
  // Happy-eyeballs connects report an AggregateError of per-address failures.
  if (Array.isArray(e.errors)) {
    for (const inner of e.errors) {
      const c = transportCode(inner);
      if (c !== undefined) return c;
    }
  }
  return e.cause !== undefined ? transportCode(e.cause) : undefined;
}
