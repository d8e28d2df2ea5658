// Wrong answers that are KNOWN open items of issue 12. An input that meets one is counted as
// "known, issue 12 item N" and does not fail the run; an input aimed at one that is answered
// right is counted as "fixed", so the table shows the moment a fix lands (then move the input's
// expectation into the family and delete the row here). Every other wrong answer fails the run.

import type { Exchange } from "./wire.js";

export interface KnownItem {
  item: string;
  what: string;
  /** True when the exchange shows this known wrong answer. */
  matches(ex: Exchange): boolean;
}

const first = (ex: Exchange) => ex.responses[0];
const errorCode = (ex: Exchange): string | undefined => {
  const r = first(ex);
  if (r === undefined) return undefined;
  try {
    return (JSON.parse(r.body.toString("utf8")) as { error?: { code?: string } }).error?.code;
  } catch {
    return undefined;
  }
};

export const KNOWN = {
  "deep-json": {
    item: "8",
    what: "a 20 000-deep JSON value in a field answers 500 (its error message stringifies it: stack overflow)",
    matches: (ex) => first(ex)?.status === 500 && errorCode(ex) === "internal",
  },
  "node-answers": {
    item: "8",
    what: "no Host header, a bad Expect, CONNECT: answered by Node itself without the JSON error body (or closed unanswered)",
    matches: (ex) => first(ex) === undefined || first(ex)!.headers["narad-node"] === undefined,
  },
  timeouts: {
    item: "8",
    what: "header and request timeouts answer 400 after ~30 s (Node's connectionsCheckingInterval) rather than 408 at their setting",
    matches: (ex) => first(ex)?.status === 400 || first(ex)?.status === 408,
  },
  "header-overflow": {
    item: "8",
    what: "header overflow answers 400 rather than 431",
    matches: (ex) => first(ex)?.status === 400 && errorCode(ex) === "bad_request",
  },
  "replay-limit": {
    item: "8",
    what: "replay limit above 1000 refused (here: past 16 digits) instead of read as 1000",
    matches: (ex) => first(ex)?.status === 400 && errorCode(ex) === "invalid_argument",
  },
  "head-options": {
    item: "8",
    what: "HEAD/OPTIONS on GET routes answer 405",
    matches: (ex) => first(ex)?.status === 405,
  },
  allow: {
    item: "8",
    what: "no 405 carries Allow",
    matches: (ex) => ex.responses.some((r) => r.status === 405 && r.headers.allow === undefined),
  },
  "pipelined-garbage": {
    item: "6",
    what: "garbage pipelined after a produce or an ack answers 400 bad_request while the first request waits for its fsync (and it was executed)",
    matches: (ex) => first(ex)?.status === 400,
  },
  "metrics-names": {
    item: "7",
    what: "/metrics names every topic to any user (grants are meant not to reveal names)",
    matches: (ex) => first(ex)?.status === 200,
  },
} as const satisfies Record<string, KnownItem>;

export type KnownId = keyof typeof KNOWN;
