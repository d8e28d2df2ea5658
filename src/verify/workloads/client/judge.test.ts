// The client judge on hand-written application records with known measures: silence counted only
// while a message waited (a produce sent into the fault counts), lag from the 202 to the first
// finished handler, duplicates by cause, the errors a bound counts, and each broken bound a finding.
// And the SDK's fault seam: no bug is the SDK as shipped, and the package's entry does not offer it.

import { test } from "node:test";
import assert from "node:assert/strict";
import { findings, measureLane, type AppEvent, type FaultWindow } from "./judge.js";
import type { ClientPrediction } from "./scenarios.js";
import { clientFaults, isClientBugName } from "./seeded-bugs.js";
import { NO_CLIENT_FAULTS } from "../../../client/faults.js";
import * as sdk from "../../../client/index.js";

const MS = 1e6;
const P: ClientPrediction = { sentence: "test", maxSilenceMs: 1_000, maxLagMs: 3_000, maxAppErrors: 0, duplicatesOnlyAfterLeaseEnd: true };

function ev(ms: number, kind: AppEvent["kind"], extra: Partial<AppEvent> = {}): AppEvent {
  return { tNs: ms * MS, lane: "process", kind, ...extra };
}

test("silence runs from a fault's end to the next delivery while a message waited; a produce sent into the fault counts", () => {
  const producedNs = new Map([
    ["m1", 100 * MS],
    ["m2", 5_200 * MS], // sent at 4 s, into the fault, answered after it
  ]);
  const sentNs = new Map([
    ["m1", 90 * MS],
    ["m2", 4_000 * MS],
  ]);
  const events = [ev(150, "deliver", { msg: "m1" }), ev(151, "handled", { msg: "m1" }), ev(7_200, "deliver", { msg: "m2" }), ev(7_201, "handled", { msg: "m2" })];
  const faults: FaultWindow[] = [
    { kind: "cut", startNs: 1_000 * MS, endNs: 5_000 * MS, endsLeases: false, lane: null },
    // Another lane's restart: not this lane's fault.
    { kind: "app-restart", startNs: 6_000 * MS, endNs: 6_000 * MS, endsLeases: false, lane: "messages" },
  ];
  const l = measureLane({ api: "process", topic: "t", prediction: P, producedNs, sentNs, events, faults, visibilityTimeoutMs: 5_000 });
  assert.deepEqual(l.silences, [{ fault: "cut", endNs: 5_000 * MS, waiting: true, silenceMs: 2_200 }]);
  assert.equal(l.lagMaxMs, 2_001);
  assert.equal(l.lagMsg, "m2");
  const silence = l.checks.find((c) => c.bound === "silence")!;
  assert.equal(silence.ok, false);
  assert.deepEqual(findings([l]), ["process: silence predicted ≤ 1.00 s after each fault, measured worst 2.20 s"]);
  // Without the send times, m2 counts from its 202, after the end: nothing waited.
  const blind = measureLane({ api: "process", topic: "t", prediction: P, producedNs, events, faults, visibilityTimeoutMs: 5_000 });
  assert.equal(blind.silences[0]!.waiting, false);
  assert.ok(blind.checks.find((c) => c.bound === "silence")!.ok);
});

test("a message handed twice is put down to the earlier handler's failure, a restart, a lapse, or nothing", () => {
  const producedNs = new Map(["a", "b", "c", "d"].map((m) => [m, 0]));
  const events = [
    // a: its handler failed, then it came back at once (nacked).
    ev(10, "deliver", { msg: "a", leasedNs: 5 * MS }),
    ev(11, "failed", { msg: "a" }),
    ev(12, "error", { error: "handler" }),
    ev(20, "deliver", { msg: "a", leasedNs: 15 * MS }),
    ev(21, "handled", { msg: "a" }),
    // b: a restart began between its two deliveries.
    ev(30, "deliver", { msg: "b", leasedNs: 30 * MS }),
    ev(40, "deliver", { msg: "b", leasedNs: 38 * MS }),
    ev(41, "handled", { msg: "b" }),
    // c: a visibility timeout after the request that leased it (handed to the handler 100 ms later).
    ev(1_100, "deliver", { msg: "c", leasedNs: 1_000 * MS }),
    ev(6_050, "deliver", { msg: "c", leasedNs: 6_000 * MS }),
    ev(6_051, "handled", { msg: "c" }),
    // d: again within its lease, with no cause.
    ev(7_000, "deliver", { msg: "d", leasedNs: 7_000 * MS }),
    ev(7_500, "deliver", { msg: "d", leasedNs: 7_500 * MS }),
    ev(7_501, "handled", { msg: "d" }),
    ev(7_600, "error", { error: "retry" }),
    ev(7_700, "error", { error: "refused-ack" }),
  ];
  const faults: FaultWindow[] = [{ kind: "restart", startNs: 35 * MS, endNs: 36 * MS, endsLeases: true, lane: null }];
  const l = measureLane({ api: "process", topic: "t", prediction: P, producedNs, events, faults, visibilityTimeoutMs: 5_000 });
  assert.equal(l.duplicates.total, 4);
  assert.deepEqual(l.duplicates.byCause, { "handler-failed": 1, restart: 1, lapse: 1, none: 1 });
  assert.deepEqual(l.duplicates.unexplained, ["d"]);
  // retry notices and the application's own failures are listed, not counted.
  assert.deepEqual(l.errors, { handler: 1, retry: 1, "refused-ack": 1 });
  assert.equal(l.appErrors, 1);
  const byBound = Object.fromEntries(l.checks.map((c) => [c.bound, c]));
  assert.equal(byBound["duplicates"]!.ok, false);
  assert.equal(byBound["errors"]!.ok, false);
  assert.equal(byBound["errors"]!.measured, "refused-ack ×1 (not counted: handler ×1, retry ×1)");
  assert.equal(byBound["loop"]!.ok, true);
  assert.equal(byBound["caught up"]!.ok, true);
});

test("a message never handled is a stalled application and an unbounded lag; a fatal error breaks the loop bound", () => {
  const producedNs = new Map([
    ["m1", 0],
    ["m2", 10 * MS],
  ]);
  const events = [ev(5, "deliver", { msg: "m1" }), ev(6, "handled", { msg: "m1" }), ev(20, "error", { error: "fatal", detail: "process() rejected" })];
  const l = measureLane({ api: "process", topic: "t", prediction: { ...P, maxAppErrors: null }, producedNs, events, faults: [], visibilityTimeoutMs: 5_000 });
  assert.equal(l.unhandled, 1);
  assert.equal(l.lagMaxMs, Infinity);
  const byBound = Object.fromEntries(l.checks.map((c) => [c.bound, c]));
  assert.equal(byBound["caught up"]!.measured, "stalled: 1 never handled");
  assert.equal(byBound["lag"]!.ok, false);
  assert.equal(byBound["loop"]!.ok, false);
  assert.equal(byBound["errors"]!.ok, true, "errors not bounded");
});

test("the SDK's fault seam: no bug is the SDK as shipped, each bug changes its one hook, and the package entry does not offer the seam", () => {
  assert.equal(clientFaults([]), NO_CLIENT_FAULTS);
  const reset = new sdk.NaradAmbiguousError("network_error", "consume: read ECONNRESET", undefined, Object.assign(new Error("read ECONNRESET"), { code: "ECONNRESET" }));
  const timeout = new sdk.NaradAmbiguousError("request_timeout", "consume: no answer in time");
  const stops = clientFaults(["process-stops-after-reset"]);
  assert.equal(stops.keepsPolling(reset), false);
  assert.equal(stops.keepsPolling(timeout), true);
  assert.equal(stops.nacksFailedMessage(), true);
  assert.equal(NO_CLIENT_FAULTS.keepsPolling(reset), true);
  assert.equal(clientFaults(["process-skips-nack"]).nacksFailedMessage(), false);
  assert.deepEqual(clientFaults(["messages-drops-batch-on-exit"]).nackedOnExit([{} as sdk.Message]), []);
  assert.equal(NO_CLIENT_FAULTS.nackedOnExit([{} as sdk.Message]).length, 1);
  assert.ok(isClientBugName("process-skips-nack"));
  assert.ok(!isClientBugName("toString"));
  for (const name of ["NO_CLIENT_FAULTS", "INSTALL_CLIENT_FAULTS", "ClientFaults"]) assert.ok(!(name in sdk), `narad/client does not export ${name}`);
  assert.ok(!Object.values(sdk).some((v) => typeof v === "symbol"), "nor the symbol that installs one");
});
