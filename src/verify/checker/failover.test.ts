// The failover rule on hand-written histories (SPEC "Checker verdicts"): on a replicated topic a
// failover — the partition's leader killed, powered off, frozen or cut off, and the next delivery
// made by another owner — ends the old owner's leases and explains a forgotten ack within the
// replication window (ack_flush_ms + replication_lag_ms). Nothing explains a lost 202. Times in ms.

import { test } from "node:test";
import assert from "node:assert/strict";
import { checkEvents } from "./check.js";
import { HistoryBuilder } from "./history-builder.js";
import type { ConfigValue } from "../history/types.js";

/** ack_flush_ms 100 and a replication lag of 400: the window is 500 ms (plus the 50 ms slack). */
function replicated(rf = 3, extra: Partial<ConfigValue> = {}): Partial<ConfigValue> {
  return { topics: { t: { partitions: 1, replication_factor: rf, acks: "quorum" } }, replication_lag_ms: 400, ...extra };
}

/** m1 produced, delivered by n1 and acked (204) at 30..31; then `fault`; then delivered again by `by`. */
function ackedThenRedelivered(config: Partial<ConfigValue>, fault: (b: HistoryBuilder) => number, by: string, againMs: number) {
  const b = new HistoryBuilder(config);
  b.produce("p1", "t", "m1", 0, 10);
  const d = b.consume("c1", "t", "m1", "d1", 20, 21, { node: "n1", boot: "b1" });
  const ack = b.ack("c1", "t", "m1", "d1", 30, 31);
  const f = fault(b);
  const again = b.consume("c2", "t", "m1", "d2", againMs, againMs + 1, { node: by, boot: by === "n1" ? "b1-2" : `b-${by}` });
  b.ack("c2", "t", "m1", "d2", againMs + 10, againMs + 11);
  b.empty("c2", "t", againMs + 100, againMs + 101);
  const h = b.build();
  return { r: checkEvents(h.events), h, d, ack, f, again };
}

const killAt = (ms: number) => (b: HistoryBuilder) => {
  const k = b.fault("kill", ms, ms + 2, { node: "n1" }, "ok", { signal: "SIGKILL" });
  b.fault("start", ms + 1500, ms + 1600, { node: "n1" }, "ok", { boot: "b1-2" });
  return k;
};

test("failover: a kill of the leader past ack_flush_ms but within the replication window explains a redelivery by the new leader", () => {
  const { r, h, ack, f, again } = ackedThenRedelivered(replicated(), killAt(400), "n2", 1000);
  assert.equal(r.verdict, "valid", r.reason);
  assert.deepEqual(r.redeliveries.explainedDuplicates, [{ msg: "m1", path: "t", deliveryOp: h.index(again), ackOp: h.index(ack), faultOp: h.index(f) }]);
});

test("failover: the same kill explains nothing on a topic of one copy, nor when the old owner delivers again", () => {
  const single = ackedThenRedelivered({}, killAt(400), "n2", 1000);
  assert.equal(single.r.verdict, "invalid");
  assert.deepEqual(single.r.anomalies.map((a) => a.name), ["duplicate-after-ack"]);
  // The old leader back and delivering again: a restart, not a failover; past ack_flush_ms.
  const same = ackedThenRedelivered(replicated(), killAt(400), "n1", 2500);
  assert.equal(same.r.verdict, "invalid");
  assert.deepEqual(same.r.anomalies.map((a) => a.name), ["duplicate-after-ack"]);
  assert.deepEqual(same.r.anomalies[0]!.ops, [same.h.index(same.d), same.h.index(same.ack), same.h.index(same.again)]);
});

test("failover: past the replication window nothing explains it (acks that never reached the followers)", () => {
  const { r, h, d, ack, again } = ackedThenRedelivered(replicated(), killAt(700), "n2", 1500);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(r.anomalies.map((a) => [a.name, a.ops]), [["duplicate-after-ack", [h.index(d), h.index(ack), h.index(again)]]]);
  assert.match(r.anomalies[0]!.explanation, /failover within the replication window/);
  // Without replication_lag_ms the window is one shipping interval, ack_flush_ms: 400 ms is past it.
  const narrow = ackedThenRedelivered(replicated(3, { replication_lag_ms: undefined }), killAt(400), "n2", 1000);
  assert.equal(narrow.r.verdict, "invalid");
});

test("failover: a leader cut off from its followers and the control plane answers acks until the heal; the new leader may redeliver them", () => {
  const cut = (b: HistoryBuilder) => {
    const c = b.fault("cut", 5, 6, { node: "n1", lines: ["peers", "control-plane"] }, "ok", { proxy: {} });
    b.fault("heal", 3000, 3001, { node: "n1" }, "ok", { proxy: {} });
    return c;
  };
  // The ack (30..31) came after the cut began (5): the cut-off leader could not ship it.
  const { r } = ackedThenRedelivered(replicated(), cut, "n2", 2000);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.redeliveries.explainedDuplicatesTotal, 1);
  // A cut explains no forgotten ack on a topic of one copy.
  assert.equal(ackedThenRedelivered({}, cut, "n2", 2000).r.verdict, "invalid");
});

test("failover: a frozen leader's lease ends at the failover, so another owner may deliver before the visibility timeout; the old owner may not", () => {
  const run = (by: string, config: Partial<ConfigValue>) => {
    const b = new HistoryBuilder(config);
    b.produce("p1", "t", "m1", 0, 10);
    b.consume("c1", "t", "m1", "d1", 20, 21, { node: "n1", boot: "b1" });
    b.fault("pause", 100, 101, { node: "n1" }, "ok", { state: "T" });
    b.fault("resume", 3000, 3001, { node: "n1" }, "ok", { state: "S" });
    b.consume("c2", "t", "m1", "d2", 2000, 2001, { node: by, boot: by === "n1" ? "b1" : "b2" });
    b.ack("c2", "t", "m1", "d2", 2010, 2011);
    b.empty("c2", "t", 3100, 3101);
    return checkEvents(b.build().events);
  };
  const byNew = run("n2", replicated());
  assert.equal(byNew.verdict, "valid", byNew.reason);
  assert.equal(byNew.redeliveries.byCause.fault, 1);
  assert.deepEqual(run("n1", replicated()).anomalies.map((a) => a.name), ["double-lease"]);
  assert.deepEqual(run("n2", {}).anomalies.map((a) => a.name), ["double-lease"]);
});

test("failover: with node_lease_ms, a cut-off or frozen leader's acks and leases count only until its lease deadline (the fault plus the lease)", () => {
  // The cut takes hold at 6; with a lease of 1 000 ms the old leader is fenced by 1 006 (+50 slack).
  const cutThenAck = (ackAtMs: number, config: Partial<ConfigValue>) => {
    const b = new HistoryBuilder(config);
    b.produce("p1", "t", "m1", 0, 10);
    b.consume("c1", "t", "m1", "d1", 20, 21, { node: "n1", boot: "b1" });
    b.fault("cut", 5, 6, { node: "n1", lines: ["peers", "control-plane"] }, "ok", { proxy: {} });
    b.ack("c1", "t", "m1", "d1", ackAtMs, ackAtMs + 1);
    b.consume("c2", "t", "m1", "d2", 2500, 2501, { node: "n2", boot: "b2" });
    b.ack("c2", "t", "m1", "d2", 2510, 2511);
    b.fault("heal", 3000, 3001, { node: "n1" }, "ok", { proxy: {} });
    b.empty("c2", "t", 3100, 3101);
    return checkEvents(b.build().events);
  };
  const lease = replicated(3, { node_lease_ms: 1000 });
  assert.equal(cutThenAck(900, lease).verdict, "valid", "an ack begun before the deadline may be forgotten");
  assert.deepEqual(cutThenAck(1500, lease).anomalies.map((a) => a.name), ["duplicate-after-ack"], "a 204 from a fenced leader is a lie");
  assert.equal(cutThenAck(1500, replicated()).verdict, "valid", "without the lease, until the heal");
  // A lease handed out by the frozen leader after its deadline is not ended by the failover.
  const pauseThenLease = (leaseAtMs: number) => {
    const b = new HistoryBuilder(lease);
    b.produce("p1", "t", "m1", 0, 10);
    b.fault("pause", 100, 101, { node: "n1" }, "ok", { state: "T" });
    b.consume("c1", "t", "m1", "d1", leaseAtMs, leaseAtMs + 1, { node: "n1", boot: "b1" });
    b.consume("c2", "t", "m1", "d2", 2000, 2001, { node: "n2", boot: "b2" });
    b.ack("c2", "t", "m1", "d2", 2010, 2011);
    b.fault("resume", 3000, 3001, { node: "n1" }, "ok", { state: "S" });
    b.empty("c2", "t", 3100, 3101);
    return checkEvents(b.build().events);
  };
  assert.equal(pauseThenLease(50).verdict, "valid");
  assert.deepEqual(pauseThenLease(1300).anomalies.map((a) => a.name), ["double-lease"]);
});

test("failover: no fault explains a lost 202 on a replicated topic", () => {
  const b = new HistoryBuilder(replicated());
  const p = b.produce("p1", "t", "m1", 0, 10, "ok", 0, { node: "n1", boot: "b1" });
  b.fault("kill", 12, 14, { node: "n1" }, "ok", { signal: "SIGKILL" });
  b.fault("start", 1500, 1600, { node: "n1" }, "ok", { boot: "b1-2" });
  const drain = b.empty("c1", "t", 2000, 2001);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "invalid");
  assert.deepEqual(r.anomalies.map((a) => [a.name, a.ops]), [["lost", [h.index(p), h.index(drain)]]]);
});

test("the config's replication fields are checked: replication_factor ≥ 1, acks leader or quorum, replication_lag_ms ≥ 0", () => {
  for (const [config, rule] of [
    [{ topics: { t: { partitions: 1, replication_factor: 0 } } }, /replication_factor/],
    [{ topics: { t: { partitions: 1, acks: "all" } } }, /acks must be "leader" or "quorum"/],
    [{ replication_lag_ms: -1 }, /replication_lag_ms/],
  ] as const) {
    const b = new HistoryBuilder(config as Partial<ConfigValue>);
    b.empty("c1", "t", 1, 2);
    assert.throws(() => checkEvents(b.build().events), rule);
  }
});

test("replays of a replicated partition may step over its epoch markers, never over an offset a 202 or a delivery named", () => {
  const run = (rf: number, named: number[], replayed: number[]) => {
    const b = new HistoryBuilder(replicated(rf));
    // m0 produced at offset 1 (offset 0 is the first epoch's marker), then the named ones.
    for (const [i, off] of named.entries()) {
      b.op("p1", "produce", { topic: "t", msg: `m${i}` }, 10 * i, 10 * i + 5, "ok", { partition: 0, offset: off, status: 202 });
      b.consume("c1", "t", `m${i}`, `d${i}`, 10 * i + 6, 10 * i + 7, { offset: off });
      b.ack("c1", "t", `m${i}`, `d${i}`, 10 * i + 8, 10 * i + 9);
    }
    b.replay("r1", "t", 0, 0, 500, 501, replayed.map((o) => [o, `m${named.indexOf(o)}`] as [number, string]));
    b.empty("c1", "t", 600, 601);
    return checkEvents(b.build().events);
  };
  assert.equal(run(3, [1, 2, 4], [1, 2, 4]).verdict, "valid", "the markers at 0 and 3 are not records");
  assert.deepEqual(run(3, [1, 2, 4], [1, 4]).anomalies.map((a) => a.name), ["skip"]);
  assert.deepEqual(run(3, [0, 1, 2], [1, 2]).anomalies.map((a) => a.name), ["skip"]);
  // One copy: the log has no holes, so any jump is a skip.
  assert.deepEqual(run(1, [1, 2, 4], [1, 2, 4]).anomalies.map((a) => a.name), ["skip"]);
});

// The follower rule: acks reach a follower on the ack log's schedule and wait in its memory for
// its own flush (and fsync); a follower that crashes before then lost them for good, and
// redelivers them once it leads, however long after. Window (replicated(): replication_lag_ms
// 400, ack_flush_ms 100, ack_sync_ms 1000, slack 50): the ack's arrival (ack + 500) plus
// ack_flush_ms (kill) or plus ack_sync_ms too (power loss, or a kill in the power-loss mode).

/** A crash of n2 (a follower: the ack was taken by n1) at `ms`, back 1.5 s later. */
const followerCrash = (kind: "kill" | "power-loss", ms: number, okExtra: Record<string, unknown> = {}) => (b: HistoryBuilder) => {
  const k = b.fault(kind, ms, ms + 2, { node: "n2" }, "ok", { signal: "SIGKILL", ...okExtra });
  b.fault("start", ms + 1500, ms + 1600, { node: "n2" }, "ok", { boot: "b-n2" });
  return k;
};

test("follower rule: a follower killed before the ack reached its OS redelivers it when it leads, long after", () => {
  // The ack completes at 31; a kill of n2 at 600 (within 31 + 500 + 100 + 50); n2 redelivers 20 s later.
  const { r, h, ack, f, again } = ackedThenRedelivered(replicated(), followerCrash("kill", 600), "n2", 20_000);
  assert.equal(r.verdict, "valid", r.reason);
  assert.deepEqual(r.redeliveries.explainedDuplicates, [{ msg: "m1", path: "t", deliveryOp: h.index(again), ackOp: h.index(ack), faultOp: h.index(f) }]);
  // Past the kill's window the follower had the ack in its OS: nothing explains it.
  const late = ackedThenRedelivered(replicated(), followerCrash("kill", 800), "n2", 20_000);
  assert.deepEqual(late.r.anomalies.map((a) => [a.name, a.ops]), [["duplicate-after-ack", [late.h.index(late.d), late.h.index(late.ack), late.h.index(late.again)]]]);
  assert.match(late.r.anomalies[0]!.explanation, /crash of the redelivering replica/);
});

test("follower rule: a power loss (or a kill in the power-loss mode) of the follower adds ack_sync_ms", () => {
  assert.equal(ackedThenRedelivered(replicated(), followerCrash("power-loss", 1500), "n2", 20_000).r.verdict, "valid");
  assert.equal(ackedThenRedelivered(replicated(), followerCrash("kill", 1500, { power_loss_mode: true }), "n2", 20_000).r.verdict, "valid");
  assert.equal(ackedThenRedelivered(replicated(), followerCrash("kill", 1500), "n2", 20_000).r.verdict, "invalid");
  assert.equal(ackedThenRedelivered(replicated(), followerCrash("power-loss", 1800), "n2", 20_000).r.verdict, "invalid");
});

test("follower rule: the crash explains only a redelivery by the crashed follower, only on a replicated topic", () => {
  // n3 redelivers: it had the ack whatever n2 lost.
  assert.equal(ackedThenRedelivered(replicated(), followerCrash("kill", 600), "n3", 20_000).r.verdict, "invalid");
  assert.equal(ackedThenRedelivered({}, followerCrash("kill", 600), "n2", 20_000).r.verdict, "invalid");
});

test("follower rule: a follower down when the ack was taken gets it after it is back, within replication_rejoin_ms", () => {
  // n2 killed at 100, started 5000..5100; m1 acked by n1 at 1000..1001 meanwhile; a power loss
  // of n2 at `at`; n2 redelivers at 20 s.
  const run = (extra: Partial<ConfigValue>, at: number) => {
    const b = new HistoryBuilder(replicated(3, extra));
    b.produce("p1", "t", "m1", 0, 10);
    b.consume("c1", "t", "m1", "d1", 20, 21, { node: "n1", boot: "b1" });
    b.fault("kill", 100, 101, { node: "n2" }, "ok", { signal: "SIGKILL" });
    b.ack("c1", "t", "m1", "d1", 1000, 1001);
    b.fault("start", 5000, 5100, { node: "n2" }, "ok", { boot: "b-n2" });
    b.fault("power-loss", at, at + 2, { node: "n2" }, "ok", { signal: "SIGKILL", power_loss_mode: true });
    b.fault("start", at + 1500, at + 1600, { node: "n2" }, "ok", { boot: "b-n2-2" });
    b.consume("c2", "t", "m1", "d2", 20_000, 20_001, { node: "n2", boot: "b-n2-2" });
    b.ack("c2", "t", "m1", "d2", 20_010, 20_011);
    b.empty("c2", "t", 20_100, 20_101);
    return checkEvents(b.build().events);
  };
  // Back at 5100: the ack reaches n2 by 5100 + 2000; on its disk by + 100 + 1000 (+ 50 slack).
  assert.equal(run({ replication_rejoin_ms: 2000 }, 8000).verdict, "valid");
  assert.deepEqual(run({ replication_rejoin_ms: 2000 }, 8500).anomalies.map((a) => a.name), ["duplicate-after-ack"]);
  // Without replication_rejoin_ms the allowance is replication_lag_ms (400): 8000 is past it.
  assert.equal(run({}, 8000).verdict, "invalid");
  // The kill at 100 itself explains nothing: the ack came after it, while n2 was down.
  assert.equal(run({ replication_rejoin_ms: 2000 }, 30_000).verdict, "invalid");
});

test("a kill of the owner in the power-loss mode forgets acks within ack_sync_ms + ack_flush_ms, as a power loss", () => {
  const ownKill = (okExtra: Record<string, unknown>) => (b: HistoryBuilder) => {
    const k = b.fault("kill", 800, 802, { node: "n1" }, "ok", { signal: "SIGKILL", ...okExtra });
    b.fault("start", 2300, 2400, { node: "n1" }, "ok", { boot: "b1-2" });
    return k;
  };
  assert.equal(ackedThenRedelivered({}, ownKill({ power_loss_mode: true }), "n1", 3000).r.verdict, "valid");
  assert.equal(ackedThenRedelivered({}, ownKill({}), "n1", 3000).r.verdict, "invalid");
});
