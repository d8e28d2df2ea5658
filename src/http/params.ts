// Reading what a request names: path parameters, query parameters and the fields of a JSON body,
// each checked against the limits of src/protocol/wire.ts. A value out of range is refused with
// the error table's code (invalid_argument, invalid_topic_name) and a message naming the field and
// what it must be.

import type { SettleAction } from "../broker/broker.js";
import { NaradError } from "../protocol/errors.js";
import { HEADER_NAME_RE, LIMITS, TOPIC_NAME_RE, type AcksMode } from "../protocol/wire.js";

/**
 * A value as an error message may show it: short, and never walked (a 20 000-deep JSON value
 * once overflowed the stack of the JSON.stringify that put it in a message: a 500).
 */
export function shown(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v.length > SHOWN_CHARS_MAX ? `${v.slice(0, SHOWN_CHARS_MAX)}...` : v);
  if (typeof v === "number" || typeof v === "boolean" || v === null) return String(v);
  if (Array.isArray(v)) return "an array";
  return typeof v === "object" ? "an object" : typeof v;
}

const SHOWN_CHARS_MAX = 64;

/** A route's path parameters, as find-my-way gives them. */
export type Params = Record<string, string | undefined>;

/** The longest topic name TOPIC_NAME_RE takes (a longer one is refused naming this bound). */
const TOPIC_NAME_CHARS_MAX = 200;

export function topicParam(p: Params): string {
  const name = p.topic ?? "";
  if (name.length > TOPIC_NAME_CHARS_MAX) throw new NaradError("invalid_topic_name", `A topic name is at most ${TOPIC_NAME_CHARS_MAX} characters; this one has ${name.length}.`);
  if (!TOPIC_NAME_RE.test(name)) throw new NaradError("invalid_topic_name", `${shown(name)} is not a valid topic name.`);
  return name;
}

export function partitionParam(p: Params): number {
  const ps = p.partition ?? "";
  if (!/^\d{1,5}$/.test(ps)) throw new NaradError("invalid_argument", `Partition ${shown(ps)} is not a partition number.`);
  return Number(ps);
}

export function queryInt(q: URLSearchParams, name: string, dflt: number, min: number, max: number): number {
  const s = q.get(name);
  if (s === null || s === "") return dflt;
  if (!/^\d{1,16}$/.test(s)) throw new NaradError("invalid_argument", `${name} must be an integer from ${min} to ${max}, not ${shown(s)}.`);
  const v = Number(s);
  if (v < min || v > max) throw new NaradError("invalid_argument", `${name} must be from ${min} to ${max}, not ${v}.`);
  return v;
}

/** A page size: any count of digits, read as at most `max` (a larger limit is not an error). */
export function queryLimit(q: URLSearchParams, name: string, dflt: number, max: number): number {
  const s = q.get(name);
  if (s === null || s === "") return dflt;
  if (!/^\d+$/.test(s) || /^0+$/.test(s)) throw new NaradError("invalid_argument", `${name} must be a positive integer (at most ${max} is used), not ${shown(s)}.`);
  return s.length > 16 ? max : Math.min(Number(s), max);
}

export function asObject(v: unknown): Record<string, unknown> {
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new NaradError("invalid_argument", "The body must be a JSON object.");
  return v as Record<string, unknown>;
}

export function onlyFields(o: Record<string, unknown>, allowed: string[]): void {
  for (const k of Object.keys(o)) {
    if (!allowed.includes(k)) throw new NaradError("invalid_argument", `Unknown field ${shown(k)}; allowed: ${allowed.join(", ")}.`);
  }
}

export function optInt(o: Record<string, unknown>, field: string, min: number, max: number): number | undefined {
  const v = o[field];
  if (v === undefined) return undefined;
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < min || v > max) {
    throw new NaradError("invalid_argument", `${field} must be an integer from ${min} to ${max}, not ${shown(v)}.`);
  }
  return v;
}

/**
 * The optional dead-letter fields (SPEC "Dead letters"): max_deliveries 1..1000 or null,
 * dead_letter_topic a topic name or null; absent fields stay undefined (PATCH: unchanged).
 */
export function optDeadLetters(o: Record<string, unknown>): { max_deliveries?: number | null; dead_letter_topic?: string | null } {
  const out: { max_deliveries?: number | null; dead_letter_topic?: string | null } = {};
  if (o.max_deliveries !== undefined) out.max_deliveries = o.max_deliveries === null ? null : optInt(o, "max_deliveries", LIMITS.maxDeliveriesMin, LIMITS.maxDeliveriesMax)!;
  const d = o.dead_letter_topic;
  if (d !== undefined) {
    if (d !== null && (typeof d !== "string" || !TOPIC_NAME_RE.test(d))) throw new NaradError("invalid_dead_letter_topic", `dead_letter_topic ${shown(d)} is not a topic name (or null, to clear it).`);
    out.dead_letter_topic = d;
  }
  return out;
}

/** An optional `acks` field: "leader" or "quorum". */
export function optAcks(o: Record<string, unknown>): AcksMode | undefined {
  const v = o.acks;
  if (v === undefined) return undefined;
  if (v !== "leader" && v !== "quorum") throw new NaradError("invalid_argument", `acks must be "leader" or "quorum", not ${shown(v)}.`);
  return v;
}

/** A message key (or a batch item's, named by `what`) within LIMITS.keyBytesMax. */
export function checkKey(key: string | null, what = "key"): void {
  if (key !== null && Buffer.byteLength(key) > LIMITS.keyBytesMax) {
    throw new NaradError("invalid_argument", `${what} is over ${LIMITS.keyBytesMax} bytes.`);
  }
}

export function isBase64(s: string): boolean {
  return s.length % 4 === 0 && /^[A-Za-z0-9+/]*={0,2}$/.test(s);
}

/** A single ack's ?extend=: absent acks, true restarts the lease, 0 ends it now (a nack). */
export function settleAction(extend: string | null, deadLetter: string | null = null): SettleAction {
  if (deadLetter !== null && deadLetter !== "false") {
    if (deadLetter !== "true") throw new NaradError("invalid_argument", "dead_letter must be true or false.");
    if (extend !== null) throw new NaradError("invalid_argument", "dead_letter=true settles the lease; it takes no extend.");
    return "dead_letter";
  }
  if (extend === null) return "ack";
  if (extend === "true") return "extend";
  if (extend === "0") return "nack";
  return badExtend();
}

export function badExtend(): never {
  throw new NaradError("invalid_argument", "extend must be true (restart the lease) or 0 (end it now).");
}

/**
 * A message's headers (issue 16 item 13): a JSON object of strings within LIMITS' bounds, as
 * name/value pairs in the order given; undefined when absent or empty.
 */
export function parseMessageHeaders(v: unknown, what = "headers"): [string, string][] | undefined {
  if (v === undefined || v === null) return undefined;
  const bad = (why: string) => new NaradError("invalid_headers", `${what}: ${why}.`);
  if (typeof v !== "object" || Array.isArray(v)) throw bad("must be a JSON object of strings");
  const pairs = Object.entries(v as Record<string, unknown>);
  if (pairs.length > LIMITS.headersMax) throw bad(`${pairs.length} headers, over ${LIMITS.headersMax}`);
  let total = 0;
  const out: [string, string][] = [];
  for (const [name, value] of pairs) {
    if (!HEADER_NAME_RE.test(name) || Buffer.byteLength(name) > LIMITS.headerNameBytesMax) throw bad(`the name ${JSON.stringify(name.slice(0, 80))} must match ${HEADER_NAME_RE.source}, at most ${LIMITS.headerNameBytesMax} bytes`);
    if (typeof value !== "string") throw bad(`${name} must be a string`);
    const vb = Buffer.byteLength(value);
    if (vb > LIMITS.headerValueBytesMax) throw bad(`${name} is ${vb} bytes, over ${LIMITS.headerValueBytesMax}`);
    total += Buffer.byteLength(name) + vb;
    out.push([name, value]);
  }
  if (total > LIMITS.headersBytesMax) throw bad(`${total} bytes of names and values, over ${LIMITS.headersBytesMax}`);
  return out.length === 0 ? undefined : out;
}

/** A request header of JSON headers (Narad-Headers), parsed as parseMessageHeaders does. */
export function headersFromRequest(raw: string | string[] | undefined): [string, string][] | undefined {
  if (raw === undefined) return undefined;
  const text = Array.isArray(raw) ? raw.join(",") : raw;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new NaradError("invalid_headers", "Narad-Headers must be a JSON object of strings, for example {\"trace\":\"abc\"}.");
  }
  return parseMessageHeaders(v, "Narad-Headers");
}

/** A per-message delay, ms (?delay_ms=, "delay_ms"); undefined when absent or 0. */
export function parseDelayMs(v: unknown, what = "delay_ms"): number | undefined {
  if (v === undefined || v === null) return undefined;
  const n = typeof v === "number" ? v : typeof v === "string" && /^\d{1,16}$/.test(v) ? Number(v) : NaN;
  if (!Number.isSafeInteger(n) || n < 0 || n > LIMITS.delayMsMax) throw new NaradError("invalid_delay", `${what} must be an integer from 0 to ${LIMITS.delayMsMax} (7 days), not ${JSON.stringify(v)}.`);
  return n === 0 ? undefined : n;
}

/** A headers object as one ASCII header value: JSON with every other character \u-escaped. */
export function headersHeaderValue(h: readonly (readonly [string, string])[]): string {
  return JSON.stringify(Object.fromEntries(h)).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * Whether the request's Prefer header (RFC 7240) asks for `return=minimal`: among its
 * comma-separated preferences, one named `return` (any case) whose value is `minimal` (any case,
 * quoted or not), its parameters after `;` ignored. Repeated Prefer headers arrive joined by ", ".
 */
export function prefersMinimal(prefer: string | string[] | undefined): boolean {
  if (prefer === undefined) return false;
  if (prefer === "return=minimal") return true; // what the SDK sends
  for (const pref of (Array.isArray(prefer) ? prefer.join(",") : prefer).split(",")) {
    const [nv] = pref.split(";", 1);
    const eq = nv!.indexOf("=");
    if (eq < 0 || nv!.slice(0, eq).trim().toLowerCase() !== "return") continue;
    let v = nv!.slice(eq + 1).trim();
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
    if (v.toLowerCase() === "minimal") return true;
  }
  return false;
}
