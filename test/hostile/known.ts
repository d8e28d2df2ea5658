// Wrong answers that are KNOWN open items of issue 12. An input that meets one is counted as
// "known, issue 12 item N" and does not fail the run; an input aimed at one that is answered
// right is counted as "fixed", so the table shows the moment a fix lands (then move the input's
// expectation into the family and delete the row here). Every other wrong answer fails the run.
//
// Fixed and moved out so far (each now a plain expectation of its family, and a regression test
// in test/hardening.test.ts): item 8's deep JSON (500), Node's own answers (no Host, bad Expect,
// CONNECT), timeouts (400 after ~30 s), header overflow (400), HEAD/OPTIONS (405), 405 without
// Allow, replay limits past 16 digits; item 6's garbage pipelined behind a request in flight;
// item 7's /metrics naming every topic. The suite's own notes (docs/hostile-input.md), fixed the
// same way: a half-closed connection left unanswered, a topic path past 400 characters answered
// 404, a receipt handle's non-canonical last character accepted as the handle.

import type { Exchange } from "./wire.js";

export interface KnownItem {
  item: string;
  what: string;
  /** True when the exchange shows this known wrong answer. */
  matches(ex: Exchange): boolean;
}

/** Empty while no open item is known: every wrong answer fails the run. */
export const KNOWN: Record<string, KnownItem> = {};

export type KnownId = string;
