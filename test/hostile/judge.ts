// The oracle: what a right answer to a hostile input looks like, and the tally per family.
//
// A right error answer is the spec's JSON body {"error": {"code", "message"}} whose code is a row
// of the error table (src/protocol/errors.ts) with the status it was sent with, carrying
// Narad-Node and Narad-Boot (every answer does), WWW-Authenticate on a 401, Retry-After on a 429
// and Allow on a 405. Each input states which answers are right for it: success statuses, error
// codes (or statuses), and whether closing without an answer is allowed (only where the spec or
// issue 12 allows it: no request was started, the client vanished, a response was pending).

import { ERRORS, isErrorCode } from "../../src/protocol/errors.js";
import { KNOWN, type KnownId } from "./known.js";
import { preview, type Exchange, type RawResponse } from "./wire.js";

export interface Expect {
  /** Success statuses that are right (202, 200, 204, ...). */
  ok?: number[];
  /** Error codes or statuses that are right. */
  errors?: (string | number)[];
  /** Closing (or resetting) without an answer is right too. */
  close?: boolean;
  /** How many answers the exchange must carry (default: exactly one unless `close`). */
  count?: number;
  /** Any number of answers, each judged (a mutated request may turn into several). */
  anyCount?: boolean;
  /** Answers to HEAD carry no body: only their status and headers are judged. */
  head?: boolean;
  /** Extra checks on the answers; returns what is wrong, or undefined. */
  check?: (ex: Exchange) => string | undefined;
}

/** What is wrong with one answer as an error body (undefined when it is a right one). */
export function errorBodyProblem(r: RawResponse): string | undefined {
  if (r.headers["narad-node"] === undefined || r.headers["narad-boot"] === undefined) return `${r.status} without Narad-Node/Narad-Boot (${preview(r.body, 60)})`;
  let body: unknown;
  try {
    body = JSON.parse(r.body.toString("utf8"));
  } catch {
    return `${r.status} with a non-JSON body ${preview(r.body, 60)}`;
  }
  const e = (body as { error?: { code?: unknown; message?: unknown } }).error;
  if (typeof e !== "object" || e === null || typeof e.code !== "string" || typeof e.message !== "string") return `${r.status} body is not {"error": {"code", "message"}}: ${preview(r.body, 80)}`;
  if (!isErrorCode(e.code)) return `${r.status} with code ${e.code}, not in the error table`;
  if (ERRORS[e.code].status !== r.status) return `code ${e.code} sent with ${r.status}, the table says ${ERRORS[e.code].status}`;
  if (r.status === 401 && r.headers["www-authenticate"] !== 'Basic realm="narad"') return "401 without WWW-Authenticate";
  if (r.status === 429 && r.headers["retry-after"] === undefined) return "429 without Retry-After";
  return undefined;
}

export function codeOf(r: RawResponse): string | undefined {
  try {
    return (JSON.parse(r.body.toString("utf8")) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
}

/** Describes an exchange in a few words (for the examples). */
export function describe(ex: Exchange): string {
  if (ex.responses.length === 0) return ex.end === "deadline" ? "no answer and no close by the deadline" : `closed without an answer (${ex.end})`;
  return ex.responses.map((r) => `${r.status}${codeOf(r) ? " " + codeOf(r) : ""}`).join(", ") + (ex.end === "deadline" ? " (then hung)" : "");
}

export function describeExpect(e: Expect): string {
  const parts = [...(e.ok ?? []).map(String), ...(e.errors ?? []).map(String)];
  if (e.close) parts.push("close");
  return parts.join(" | ") + (e.count !== undefined ? ` (${e.count} answers)` : "");
}

/** What is wrong with the exchange against the expectation (undefined: right). */
export function problem(ex: Exchange, e: Expect): string | undefined {
  if (ex.end === "deadline" && (e.count === undefined || ex.responses.length < e.count)) return `no answer and no close within the deadline (${describe(ex)})`;
  if (ex.responses.length === 0) return e.close ? undefined : `closed without an answer (${ex.end})`;
  const want = e.anyCount ? ex.responses.length : (e.count ?? 1);
  if (ex.responses.length !== want && !(e.close && ex.responses.length < want)) return `${ex.responses.length} answers, expected ${want}`;
  for (const r of ex.responses.slice(0, want)) {
    if (r.status < 400) {
      if (!(e.ok ?? []).includes(r.status)) return `answered ${r.status}`;
      if (r.headers["narad-node"] === undefined) return `${r.status} without Narad-Node`;
      continue;
    }
    const allowed = e.errors ?? [];
    if (e.head) {
      if (r.headers["narad-node"] === undefined) return `${r.status} without Narad-Node`;
      if (r.status === 405 && r.headers.allow === undefined) return "405 without Allow";
      if (!allowed.includes(r.status)) return `answered ${r.status}`;
      continue;
    }
    const bad = errorBodyProblem(r);
    if (bad !== undefined) return bad;
    if (r.status === 405 && r.headers.allow === undefined) return "405 without Allow";
    const code = codeOf(r)!;
    if (!allowed.includes(code) && !allowed.includes(r.status)) return `answered ${r.status} ${code}`;
  }
  return e.check?.(ex);
}

export interface Example {
  input: string;
  expected: string;
  got: string;
}

/** The tally of one family on one node. */
export class Tally {
  inputs = 0;
  right = 0;
  wrong: Example[] = [];
  wrongCount = 0;
  known = new Map<KnownId, { count: number; example?: Example }>();
  /** Inputs aimed at a known item that were answered right. */
  fixed = new Map<KnownId, number>();
  crashes: string[] = [];
  losses: string[] = [];
  notes: string[] = [];

  constructor(readonly family: string, readonly node: string) {}

  /**
   * Judges one input. `known` names the open item the input exercises: an answer that shows it is
   * counted as known, a right answer as fixed.
   */
  judge(input: Buffer | string, ex: Exchange, e: Expect, known?: KnownId): boolean {
    this.inputs++;
    const p = problem(ex, e);
    const example = (): Example => ({ input: preview(input), expected: describeExpect(e), got: p === undefined ? describe(ex) : `${describe(ex)}: ${p}` });
    if (p === undefined) {
      this.right++;
      if (known !== undefined) this.fixed.set(known, (this.fixed.get(known) ?? 0) + 1);
      return true;
    }
    const k: KnownId | undefined = known !== undefined && KNOWN[known].matches(ex) ? known : undefined;
    if (k !== undefined) {
      const entry = this.known.get(k) ?? { count: 0 };
      entry.count++;
      entry.example ??= example();
      this.known.set(k, entry);
      return false;
    }
    this.wrongFound(example());
    return false;
  }

  /** A wrong answer found by a check of the family's own (not one exchange's answer). */
  wrongFound(x: Example): void {
    this.wrongCount++;
    if (this.wrong.length < 5) this.wrong.push(x);
  }

  /** An input counted as right without an exchange to judge (a follow-up check that held). */
  passed(): void {
    this.inputs++;
    this.right++;
  }
}
