// The SDK's consume loops (docs/client.md): messages() yields leased messages, process() runs a
// handler on each with the ack riding on the next consume, autoExtend() keeps one lease alive while
// its handler runs. They use only the client's public calls, so a client that records around
// those calls (the verification toolkit's client workload) sees every request the loops make,
// and two things of its own: the fault seam of seeded SDK bugs (./faults.ts) and the topic's
// visibility timeout, which the client caches.

import { LIMITS } from "../protocol/wire.js";
import { NaradAmbiguousError, NaradClientError, NaradConnectionError, NaradGoneError, NaradRequestError } from "./errors.js";
import type { ClientFaults } from "./faults.js";
import type { Message } from "./narad.js";
import type { AckStatus } from "./types.js";

/** messages(): consecutive retryable consume failures before the iterator gives up and throws. */
const MESSAGES_ERRORS_MAX_DEFAULT = 30;
const RETRY_BACKOFF_MS_MIN = 100;
const RETRY_BACKOFF_MS_MAX = 5_000;
/** The cap after a failure to connect (nothing sent), as Kafka's reconnect.backoff.max.ms. */
const CONNECT_RETRY_BACKOFF_MS_MAX = 1_000;
/** process(): most loops one call may run. */
const PROCESS_CONCURRENCY_MAX = 1000;
/** autoExtend(): never extend more often than this, whatever the visibility timeout. */
const EXTEND_INTERVAL_MS_MIN = 5;

/** The client calls the loops make (a Narad, or a subclass of it). */
export interface LoopClient {
  consume(topic: string, opts: { waitMs?: number; signal?: AbortSignal; ack?: string }): Promise<Message | null>;
  consumeBatch(topic: string, opts: { maxMessages?: number; waitMs?: number; signal?: AbortSignal }): Promise<Message[]>;
  ack(topic: string, receiptHandle: string): Promise<void>;
  extend(topic: string, receiptHandle: string): Promise<void>;
  ackBatch(topic: string, receiptHandles: readonly string[], opts?: { extend?: boolean | 0 }): Promise<AckStatus[]>;
}

/** What the loops need of the client beyond its calls. */
export interface LoopOwn {
  /** The seeded SDK bugs installed now (none outside calibration runs). */
  faults(): ClientFaults;
  /** The topic's visibility timeout, ms (fetched once per topic). */
  visibilityTimeoutMs(topic: string): Promise<number>;
}

type Handler = (message: Message, signal: AbortSignal) => Promise<void> | void;

export interface MessagesOptions {
  /** Long poll of each consume; default 20 000 (the most the server allows). */
  waitMs?: number;
  /** Messages leased per request; 1 (default) uses single consumes, more uses consume batches. */
  batch?: number;
  /** Aborting ends the iteration quietly; leased messages not yet yielded are nacked. */
  signal?: AbortSignal;
  /** Consecutive retryable failures (429, 503, network) before the iterator throws. Default 30. */
  maxConsecutiveErrors?: number;
}

export interface ProcessOptions {
  /** Long poll of each consume; default 20 000 (the most the server allows). */
  waitMs?: number;
  /** Aborting ends the loop: the last handled message is acked, and process() resolves. */
  signal?: AbortSignal;
  /** Consecutive retryable failures (429, 503, network) before process() throws. Default 30. */
  maxConsecutiveErrors?: number;
  /**
   * Messages handled at once (1..1000), each by its own loop of one request a message. Default 1.
   * The first loop that fails ends the others; process() then rejects with its error.
   */
  concurrency?: number;
  /**
   * Told of a handler that threw (its message was nacked) and of an ack the server refused
   * (NaradGoneError: the lease lapsed first, so the message may come back). A 410 on the retry of
   * a poll that failed ambiguously with the ack on it is not told: the first try may have landed,
   * and either way there is nothing to do (a lapsed message comes back as any lapsed one does).
   * Without it, either ends the loop: process() rejects with that error. Told too, with `message` null, of each
   * consume that failed and will be retried (the node unreachable, 429, 503): process() goes on
   * retrying, but the caller sees a dead URL at once rather than after every retry is spent.
   * A throw from onError ends the loop with that error.
   */
  onError?: (err: unknown, message: Message | null) => void | Promise<void>;
}

export interface AutoExtendOptions {
  /** How often to extend; default a third of the topic's visibility timeout. */
  intervalMs?: number;
}

/**
 * Long-polls the topic and yields leased messages until `signal` aborts (then it returns quietly)
 * or a definite error (404, 401, 403, 400) throws. Retryable failures (429, 503, network
 * errors, timeouts) are retried with backoff, up to `maxConsecutiveErrors` in a row. The caller
 * settles each message. Leaving the loop early (break, abort) nacks the messages of the current
 * batch that were not yielded yet.
 */
export async function* messagesLoop(c: LoopClient, own: LoopOwn, topic: string, opts: MessagesOptions): AsyncGenerator<Message, void, undefined> {
  const waitMs = opts.waitMs ?? LIMITS.waitMsMax;
  const batch = Math.max(1, Math.min(opts.batch ?? 1, LIMITS.consumeBatchMax));
  const errorsMax = opts.maxConsecutiveErrors ?? MESSAGES_ERRORS_MAX_DEFAULT;
  const signal = opts.signal;
  let pending: Message[] = [];
  let next = 0;
  let errors = 0;
  try {
    while (!signal?.aborted) {
      try {
        if (batch === 1) {
          const m = await c.consume(topic, { waitMs, signal });
          pending = m === null ? [] : [m];
        } else {
          pending = await c.consumeBatch(topic, { maxMessages: batch, waitMs, signal });
        }
        next = 0;
        errors = 0;
      } catch (err) {
        if (signal?.aborted) return;
        if (!isRetryable(err) || ++errors > errorsMax) throw err;
        await sleep(backoffMs(errors, err), signal);
        continue;
      }
      while (next < pending.length && !signal?.aborted) yield pending[next++]!;
    }
  } finally {
    const rest = own.faults().nackedOnExit(pending.slice(next));
    pending = [];
    if (rest.length > 0) {
      // Best effort: if this fails the leases simply lapse after the visibility timeout.
      await c.ackBatch(topic, rest.map((m) => m.receiptHandle), { extend: 0 }).catch(() => undefined);
    }
  }
}

/**
 * Runs `handler` on each message of the topic, `concurrency` at a time (default 1), until
 * `signal` aborts. A message whose handler resolves is acked by the next consume (`ack` of
 * consume(): one request a message); one whose handler throws is nacked, so it is available
 * again at once. Handlers
 * should finish within the topic's visibility timeout (slower ones: messages() and
 * autoExtend()). Retryable failures are retried with backoff as in messages(); a definite error
 * (404, 401, 403, 400) rejects. See `onError` for handler failures and refused acks. Resolves
 * once aborted, after acking the last handled message.
 */
export async function processLoops(c: LoopClient, own: LoopOwn, topic: string, handler: Handler, opts: ProcessOptions): Promise<void> {
  const concurrency = Math.floor(opts.concurrency ?? 1);
  if (!(concurrency >= 1 && concurrency <= PROCESS_CONCURRENCY_MAX)) throw new RangeError(`concurrency must be 1..${PROCESS_CONCURRENCY_MAX}`);
  // `concurrency` loops, each one message at a time; the first to fail ends the others. Each
  // loop has a signal of its own: one shared by all gathered an abort listener per pooled
  // request and sleep, past Node's 10 (MaxListenersExceededWarning at concurrency 8).
  const controllers = Array.from({ length: concurrency }, () => new AbortController());
  const stopAll = (reason: unknown) => {
    for (const ctl of controllers) ctl.abort(reason);
  };
  const onAbort = () => stopAll(opts.signal?.reason);
  if (opts.signal?.aborted) onAbort();
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const loops = controllers.map((ctl) =>
      processLoop(c, own, topic, handler, opts, ctl.signal).catch((err: unknown) => {
        stopAll(err);
        throw err;
      }),
    );
    const results = await Promise.allSettled(loops);
    const failed = results.find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

async function processLoop(c: LoopClient, own: LoopOwn, topic: string, handler: Handler, opts: ProcessOptions, signal: AbortSignal): Promise<void> {
  const waitMs = opts.waitMs ?? LIMITS.waitMsMax;
  const errorsMax = opts.maxConsecutiveErrors ?? MESSAGES_ERRORS_MAX_DEFAULT;
  const fail = async (err: unknown, m: Message) => {
    if (opts.onError === undefined) throw err;
    await opts.onError(err, m);
  };
  let done: Message | undefined; // handled, not yet acked
  // The ack of `done` rode on a poll that failed ambiguously: the node may have applied it.
  let ackMayHaveLanded = false;
  let errors = 0;
  try {
    while (!signal.aborted) {
      let m: Message | null;
      try {
        m = await c.consume(topic, { waitMs, signal, ack: done?.receiptHandle });
        done = undefined;
        ackMayHaveLanded = false;
        errors = 0;
      } catch (err) {
        if (signal.aborted) return;
        if (done !== undefined && isRefusedAck(err)) {
          const m = done;
          const retried = ackMayHaveLanded;
          done = undefined;
          ackMayHaveLanded = false;
          // A 410 on the retry of an ack that may have landed says nothing the handler can act
          // on: the first try settled it, or the lease lapsed and the message comes back as any
          // lapsed one does. It is not a refused ack (docs/verification-clients.md, finding 2).
          if (retried && err instanceof NaradGoneError) continue;
          await fail(err, m);
          continue;
        }
        if (!isRetryable(err) || ++errors > errorsMax) throw err;
        if (done !== undefined && !err.definite) ackMayHaveLanded = true;
        await opts.onError?.(err, null);
        if (!own.faults().keepsPolling(err)) return await sleep(2 ** 31 - 1, signal);
        await sleep(backoffMs(errors, err), signal);
        continue;
      }
      if (m === null) continue;
      try {
        await handler(m, signal);
        done = m;
      } catch (err) {
        if (own.faults().nacksFailedMessage()) await m.nack().catch(() => undefined); // if this fails the lease lapses on its own
        await fail(err, m);
      }
    }
  } finally {
    // Best effort: after an aborted consume the ack may have landed already (then this is a 410).
    if (done !== undefined) await c.ack(topic, done.receiptHandle).catch(() => undefined);
  }
}

/**
 * Runs `handler` while keeping the message's lease alive, then settles it: ack when the handler
 * resolves, nack when it throws (the handler's error is rethrown; a failed nack is ignored, the
 * lease then lapses on its own). The lease is extended every `intervalMs` (default a third of
 * the topic's visibility timeout, fetched once per topic) and no more once the handler ends.
 *
 * If the lease is lost (an extend answered 410, or no extend succeeded for a whole visibility
 * timeout) the `signal` given to the handler aborts with the reason: another consumer may get
 * the message, so the handler should stop. The final ack then throws NaradGoneError as well.
 * Resolves with the handler's result.
 */
export async function autoExtendLoop<T>(c: LoopClient, own: LoopOwn, message: Message, handler: (message: Message, signal: AbortSignal) => Promise<T> | T, opts: AutoExtendOptions): Promise<T> {
  const visibilityMs = await own.visibilityTimeoutMs(message.topic);
  const intervalMs = Math.max(EXTEND_INTERVAL_MS_MIN, opts.intervalMs ?? Math.floor(visibilityMs / 3));
  const controller = new AbortController();
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let inFlight: Promise<void> | undefined;
  // The lease surely ends no later than visibilityMs after the last good extend's answer (or the
  // delivery, which we approximate by now: the caller just got the message).
  let leaseSureUntil = Date.now() + visibilityMs;
  const schedule = () => {
    if (!stopped) timer = setTimeout(tick, intervalMs);
  };
  const tick = () => {
    timer = undefined;
    if (stopped) return;
    inFlight = c.extend(message.topic, message.receiptHandle).then(
      () => {
        leaseSureUntil = Date.now() + visibilityMs;
        schedule();
      },
      (err: unknown) => {
        if (stopped) return;
        if (err instanceof NaradGoneError) {
          stopped = true;
          controller.abort(err);
        } else if (Date.now() > leaseSureUntil) {
          stopped = true;
          controller.abort(
            new NaradAmbiguousError(
              "lease_expired",
              `no extend succeeded within the visibility timeout (${visibilityMs} ms); the lease has likely lapsed`,
              undefined,
              err,
            ),
          );
        } else {
          schedule();
        }
      },
    );
  };
  schedule();
  let result: T;
  try {
    result = await handler(message, controller.signal);
  } catch (err) {
    await stop();
    await message.nack().catch(() => undefined);
    throw err;
  }
  await stop();
  await message.ack();
  return result;

  async function stop(): Promise<void> {
    stopped = true;
    if (timer !== undefined) clearTimeout(timer);
    // Let a running extend land first so it cannot race the ack and confuse the outcome.
    if (inFlight !== undefined) await inFlight;
  }
}

/** An ack the server refused: the handle is not the live lease, or not a handle of this topic. */
function isRefusedAck(err: unknown): boolean {
  return err instanceof NaradGoneError || (err instanceof NaradRequestError && err.code === "invalid_receipt_handle");
}

function isRetryable(err: unknown): err is NaradClientError {
  if (err instanceof NaradConnectionError) return true;
  if (err instanceof NaradAmbiguousError) return err.code !== "aborted";
  return err instanceof NaradRequestError && err.retryable;
}

function backoffMs(attempt: number, err: NaradClientError): number {
  if (err instanceof NaradRequestError && err.retryAfterS !== undefined) return Math.min(err.retryAfterS * 1000, RETRY_BACKOFF_MS_MAX * 4);
  // Nothing was sent (the node or its line is down): trying costs the node nothing, and the
  // line's return is seen within a second instead of the 5 s cap (docs/verification-clients.md,
  // finding 1).
  const max = err instanceof NaradConnectionError ? CONNECT_RETRY_BACKOFF_MS_MAX : RETRY_BACKOFF_MS_MAX;
  return Math.min(RETRY_BACKOFF_MS_MIN * 2 ** (attempt - 1), max);
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
