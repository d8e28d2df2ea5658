// One lane: a logical client with its own HTTP connection, whose every operation is recorded.
//
// Design note.
// - The workload must record exactly what the broker answered, so this talks HTTP itself (undici,
//   one connection per lane, no retries) instead of going through the SDK, whose retries and typed
//   errors would hide statuses. Each answer is mapped to history v1 by the table in the spec:
//     produce  202 → ok {partition, offset, status}; 400/404/413/429/503 → fail {status}: it
//              certainly did not happen; anything else (500, 504, a reset, a timeout) → info.
//     consume  200 → ok with the message; 204 → ok {msg: null}; a definite error → fail; else info.
//     ack/extend/nack  204 → ok; 410 → info {status: 410} (a lapse and a lost answer look alike);
//              400/404 → fail; anything else → info.
//     replay   200 → ok {msgs: [[offset, msg], ...]}; a definite error → fail; else info.
// - A transport error is always `info`, even a refused connection: ambiguous is never wrong, and
//   through the fault proxy a connect that succeeded says nothing about the node behind it.
// - Each request has a deadline (headers and body), so a paused node or a cut line turns into an
//   `info` instead of a hung lane; undici then drops the connection and the next request opens one.
// - A lane may be given several URLs (the nodes of a cluster): it sends each request to the next
//   one in turn, so a delivery taken from one node is usually settled through another, and the
//   receipt handle must route the ack to the owner. Credentials go with every request.
// - The recorder decides when a request may leave (see protocol.ts): `invoke` resolves once the
//   invoke line is written, and `complete` is called after the whole answer has been read.

import { Client } from "undici";
import { ackProcess, type CompletionType, type Credentials, type OpF } from "./protocol.js";

export interface OpRecorder {
  /** Records the invoke; resolves when the request may be sent. */
  invoke(p: string, f: OpF, value: Record<string, unknown>): Promise<void>;
  /** Records the completion of the process's pending operation. */
  complete(p: string, type: CompletionType, value: Record<string, unknown>): void;
}

export interface Outcome {
  type: CompletionType;
  value: Record<string, unknown>;
  /** The HTTP status, when an answer came. */
  status: number | null;
}

export interface Delivery {
  msg: string;
  partition: number;
  offset: number;
  handle: string;
  deliveryCount: number;
}

export type SettleAction = "ack" | "extend" | "nack";

/** Statuses that say the operation certainly did not happen (docs/api.md, "definite"). */
const DEFINITE_FAIL = new Set([400, 404, 409, 413, 415, 429, 503]);

/** Longest message id read back from a payload; ids are far shorter. */
const MSG_ID_CHARS_MAX = 120;

/** The payload of message `msg`: its id, a newline, then filler up to `bytes` (never shorter than the id). */
export function encodePayload(msg: string, bytes: number): Buffer {
  const head = Buffer.from(`${msg}\n`, "utf8");
  if (bytes <= head.length) return head;
  const buf = Buffer.allocUnsafe(bytes);
  head.copy(buf, 0);
  buf.fill(0x2e, head.length); // '.'
  return buf;
}

/** The message id a payload carries, or a marker naming the bytes when it carries none. */
export function decodePayload(body: Buffer): string {
  const nl = body.indexOf(0x0a);
  if (nl > 0 && nl <= MSG_ID_CHARS_MAX) {
    const id = body.subarray(0, nl).toString("utf8");
    if (/^[A-Za-z0-9._-]+$/.test(id)) return id;
  }
  // Not written by a workload: give it a name the checker will report as unexpected.
  return `?${body.subarray(0, 24).toString("hex") || "empty"}`;
}

function errorText(e: unknown): string {
  if (e instanceof Error) {
    const code = (e as NodeJS.ErrnoException).code;
    return code !== undefined ? `${code}: ${e.message}` : e.message;
  }
  return String(e);
}

function header(headers: Record<string, string | string[] | undefined>, name: string): string | null {
  const v = headers[name];
  return typeof v === "string" ? v : Array.isArray(v) ? (v[0] ?? null) : null;
}

function errorCode(body: Buffer): string | undefined {
  try {
    const j = JSON.parse(body.toString("utf8")) as { error?: { code?: unknown } };
    return typeof j.error?.code === "string" ? j.error.code : undefined;
  } catch {
    return undefined;
  }
}

function intHeader(headers: Record<string, string | string[] | undefined>, name: string): number | null {
  const v = header(headers, name);
  if (v === null || !/^\d+$/.test(v)) return null;
  const n = Number(v);
  return Number.isSafeInteger(n) ? n : null;
}

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export interface LaneOptions {
  /** Deadline of one request beyond its long-poll wait, ms. */
  requestTimeoutMs: number;
  /** HTTP Basic credentials sent with every request. */
  auth?: Credentials;
  /** Which of the URLs the first request goes to (then each next one in turn). */
  firstUrl?: number;
}

export class Lane {
  readonly process: string;
  /** One client per URL; requests go to them in turn. */
  private readonly clients: Client[];
  private nextClient: number;
  private readonly recorder: OpRecorder;
  private readonly requestTimeoutMs: number;
  private readonly authorization: string | undefined;

  constructor(process: string, urls: string | readonly string[], recorder: OpRecorder, opts: LaneOptions) {
    this.process = process;
    this.recorder = recorder;
    this.requestTimeoutMs = opts.requestTimeoutMs;
    const list = typeof urls === "string" ? [urls] : urls;
    if (list.length === 0) throw new RangeError("a lane needs at least one URL");
    // One connection per node, no pipelining: a lane has one request in flight, like one client thread.
    this.clients = list.map((url) => new Client(url, { pipelining: 1, connect: { timeout: opts.requestTimeoutMs }, keepAliveTimeout: 4_000 }));
    this.nextClient = (opts.firstUrl ?? 0) % this.clients.length;
    this.authorization = opts.auth === undefined ? undefined : `Basic ${Buffer.from(`${opts.auth.user}:${opts.auth.password}`, "utf8").toString("base64")}`;
  }

  close(): Promise<void> {
    return Promise.all(this.clients.map((c) => c.destroy().catch(() => undefined))).then(() => undefined);
  }

  private async send(method: "GET" | "POST", path: string, body: Buffer | null, extraWaitMs = 0): Promise<Answer> {
    const timeoutMs = this.requestTimeoutMs + extraWaitMs;
    // In turn over the nodes: consume on one, ack on the next, as a client of a cluster may.
    const client = this.clients[this.nextClient]!;
    this.nextClient = (this.nextClient + 1) % this.clients.length;
    const headers: Record<string, string> = {};
    if (body !== null) headers["content-type"] = "application/octet-stream";
    if (this.authorization !== undefined) headers["authorization"] = this.authorization;
    const res = await client.request({
      method,
      path,
      body: body ?? undefined,
      headers,
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
    const bytes = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: res.headers, body: bytes };
  }

  /** Records an operation around `exec`; `exec` maps the answer (or throws for a transport error). */
  private async op(f: OpF, invoke: Record<string, unknown>, exec: () => Promise<Outcome>): Promise<Outcome> {
    await this.recorder.invoke(this.process, f, invoke);
    let out: Outcome;
    try {
      out = await exec();
    } catch (e) {
      out = { type: "info", value: { error: errorText(e) }, status: null };
    }
    this.recorder.complete(this.process, out.type, out.value);
    return out;
  }

  private static otherStatus(a: Answer): Outcome {
    const code = errorCode(a.body);
    const value: Record<string, unknown> = { status: a.status, ...(code !== undefined ? { error: code } : {}) };
    return { type: DEFINITE_FAIL.has(a.status) ? "fail" : "info", value, status: a.status };
  }

  async produce(topic: string, msg: string, payload: Buffer, key: string | null): Promise<Outcome> {
    const path = `/v1/topics/${encodeURIComponent(topic)}/messages` + (key !== null ? `?key=${encodeURIComponent(key)}` : "");
    return this.op("produce", key !== null ? { topic, msg, key } : { topic, msg }, async () => {
      const a = await this.send("POST", path, payload);
      if (a.status !== 202) return Lane.otherStatus(a);
      let j: { partition?: unknown; offset?: unknown };
      try {
        j = JSON.parse(a.body.toString("utf8")) as typeof j;
      } catch {
        return { type: "info", value: { status: 202, error: "202 with a body that is not JSON" }, status: 202 };
      }
      if (typeof j.partition !== "number" || typeof j.offset !== "number") {
        return { type: "info", value: { status: 202, error: "202 without partition and offset" }, status: 202 };
      }
      // The owner that stored it (its copier makes the child copies); on one node, the node itself.
      const node = header(a.headers, "narad-owner") ?? header(a.headers, "narad-node");
      const boot = header(a.headers, "narad-owner-boot") ?? header(a.headers, "narad-boot");
      const owner = node !== null && boot !== null ? { node, boot } : {};
      return { type: "ok", value: { partition: j.partition, offset: j.offset, status: 202, ...owner }, status: 202 };
    });
  }

  /** One consume; `delivery` is set when a message was leased. */
  async consume(topic: string, waitMs: number): Promise<Outcome & { delivery: Delivery | null }> {
    let delivery: Delivery | null = null;
    const out = await this.op("consume", { topic }, async () => {
      const c = Lane.consumeAnswer(topic, await this.send("POST", `/v1/topics/${encodeURIComponent(topic)}/consume?wait_ms=${waitMs}`, null, waitMs));
      delivery = c.delivery;
      return c;
    });
    return { ...out, delivery };
  }

  /**
   * `consume?ack=H`: the ack of `d` rides on this consume (docs/api.md). Recorded as two
   * operations, the ack on the lane's ack process (ackProcess) and the consume on the lane's own,
   * both invoked before the request leaves and completed by its one answer, so each recorded
   * interval contains the real one (protocol.ts). A 410 or a definite refusal leased nothing: the
   * consume fails; so does an ack refused for certain.
   */
  async consumeAcking(topic: string, waitMs: number, d: Delivery): Promise<{ ack: Outcome; consume: Outcome; delivery: Delivery | null }> {
    const ackP = ackProcess(this.process);
    await this.recorder.invoke(ackP, "ack", { topic, msg: d.msg, delivery: d.handle });
    await this.recorder.invoke(this.process, "consume", { topic });
    let ack: Outcome;
    let consume: Outcome & { delivery: Delivery | null };
    try {
      const path = `/v1/topics/${encodeURIComponent(topic)}/consume?wait_ms=${waitMs}&ack=${encodeURIComponent(d.handle)}`;
      const a = await this.send("POST", path, null, waitMs);
      if (a.status === 200 || a.status === 204) {
        ack = { type: "ok", value: { status: 204 }, status: a.status };
        consume = Lane.consumeAnswer(topic, a);
      } else if (a.status === 410) {
        ack = { type: "info", value: { status: 410 }, status: 410 };
        consume = { type: "fail", value: { status: 410 }, status: 410, delivery: null };
      } else {
        ack = Lane.otherStatus(a);
        consume = { ...ack, delivery: null };
      }
    } catch (e) {
      ack = { type: "info", value: { error: errorText(e) }, status: null };
      consume = { ...ack, delivery: null };
    }
    this.recorder.complete(ackP, ack.type, ack.value);
    this.recorder.complete(this.process, consume.type, consume.value);
    return { ack, consume, delivery: consume.delivery };
  }

  /** A consume's answer in history terms; `delivery` is set when a message was leased. */
  private static consumeAnswer(topic: string, a: Answer): Outcome & { delivery: Delivery | null } {
    if (a.status === 204) return { type: "ok", value: { topic, msg: null }, status: 204, delivery: null };
    if (a.status !== 200) return { ...Lane.otherStatus(a), delivery: null };
    const handle = header(a.headers, "narad-receipt-handle");
    const partition = intHeader(a.headers, "narad-partition");
    const offset = intHeader(a.headers, "narad-offset");
    const deliveryCount = intHeader(a.headers, "narad-delivery-count");
    // The lease holder: the partition's owner. On one node it is the node that answered.
    const node = header(a.headers, "narad-owner") ?? header(a.headers, "narad-node");
    const boot = header(a.headers, "narad-owner-boot") ?? header(a.headers, "narad-boot");
    if (handle === null || partition === null || offset === null || node === null || boot === null) {
      // A lease may exist, but the answer cannot name it: ambiguous.
      return { type: "info", value: { status: 200, error: "200 without the delivery headers" }, status: 200, delivery: null };
    }
    const msg = decodePayload(a.body);
    const value: Record<string, unknown> = { topic, msg, partition, offset, delivery: handle, node, boot };
    if (deliveryCount !== null) value["delivery_count"] = deliveryCount;
    return { type: "ok", value, status: 200, delivery: { msg, partition, offset, handle, deliveryCount: deliveryCount ?? 0 } };
  }

  async settle(topic: string, d: Delivery, action: SettleAction): Promise<Outcome> {
    const extend = action === "extend" ? "&extend=true" : action === "nack" ? "&extend=0" : "";
    const path = `/v1/topics/${encodeURIComponent(topic)}/ack?receipt_handle=${encodeURIComponent(d.handle)}${extend}`;
    return this.op(action, { topic, msg: d.msg, delivery: d.handle }, async () => {
      const a = await this.send("POST", path, null);
      if (a.status === 204) return { type: "ok", value: { status: 204 }, status: 204 };
      if (a.status === 410) return { type: "info", value: { status: 410 }, status: 410 };
      return Lane.otherStatus(a);
    });
  }

  /** One replay page; `page` is set on a 200. */
  async replay(
    topic: string,
    partition: number,
    offset: number,
    limit: number,
  ): Promise<Outcome & { page: { count: number; nextOffset: number; endOffset: number } | null }> {
    let page: { count: number; nextOffset: number; endOffset: number } | null = null;
    const path = `/v1/topics/${encodeURIComponent(topic)}/partitions/${partition}/messages?offset=${offset}&limit=${limit}`;
    const out = await this.op("replay", { topic, partition, offset, limit }, async () => {
      const a = await this.send("GET", path, null);
      if (a.status !== 200) return Lane.otherStatus(a);
      let j: { messages?: Array<{ offset?: unknown; payload_base64?: unknown }>; next_offset?: unknown; end_offset?: unknown; earliest_offset?: unknown };
      try {
        j = JSON.parse(a.body.toString("utf8")) as typeof j;
      } catch {
        return { type: "info", value: { status: 200, error: "replay answer is not JSON" }, status: 200 };
      }
      if (!Array.isArray(j.messages) || typeof j.next_offset !== "number" || typeof j.end_offset !== "number") {
        return { type: "info", value: { status: 200, error: "replay answer without messages, next_offset, end_offset" }, status: 200 };
      }
      const msgs: Array<[number, string]> = [];
      for (const m of j.messages) {
        if (typeof m.offset !== "number" || typeof m.payload_base64 !== "string") {
          return { type: "info", value: { status: 200, error: "replay message without offset or payload" }, status: 200 };
        }
        msgs.push([m.offset, decodePayload(Buffer.from(m.payload_base64, "base64"))]);
      }
      page = { count: msgs.length, nextOffset: j.next_offset, endOffset: j.end_offset };
      return {
        type: "ok",
        value: { msgs, next_offset: j.next_offset, end_offset: j.end_offset, earliest_offset: j.earliest_offset },
        status: 200,
      };
    });
    return { ...out, page };
  }
}
