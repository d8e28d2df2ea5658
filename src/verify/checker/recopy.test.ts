// The re-copy rule on hand-written histories: a second copy of a message on a child path (another
// offset) is legal only when a fault could have made the copier copy it again (recopy.ts), and is
// judged as before (one record: here a duplicate after a 204 ack) otherwise. Times in ms.

import { test } from "node:test";
import assert from "node:assert/strict";
import { checkEvents } from "./check.js";
import { HistoryBuilder } from "./history-builder.js";
import { explainsRecopy } from "./recopy.js";
import type { Report } from "./types.js";

interface Scenario {
  /** The owner the produce's ok names; null: the ok names none. Default n1. */
  owner?: string | null;
  /** The node that delivered the message on the parent path. Default the owner (n1 when none). */
  parentNode?: string;
  /** The child's kind, and for a remote child the other cluster's nodes the config lists. */
  kind?: "fanout" | "remote";
  viaNodes?: string[];
  /** The node that delivered the first copy (the owner of its partition). Default n1. */
  copyNode?: string;
  /** The fault and when it was invoked; null: none. Default a kill of n1 at 60. */
  fault?: { kind: string; node: string; atMs: number; evidence?: boolean } | null;
  /** When the second copy was delivered. Default 400. */
  recopyAtMs?: number;
  /** Where the two copies are: [partition, offset] of the first and of the second. */
  at?: [[number, number], [number, number]];
  /** The config's copy_timeout_ms (left out by default). */
  copyTimeoutMs?: number;
  /** The child's own copy_timeout_ms (left out by default). */
  childCopyTimeoutMs?: number;
}

/**
 * m1 produced to t (0..10), delivered and acked on t; its copy on child c delivered at 20..21
 * (c/0 offset 0) and acked at 30..31; the fault, then its node started again; a second copy
 * (c/1 offset 0) delivered and acked; both paths drained.
 */
function scenario(o: Scenario = {}) {
  const kind = o.kind ?? "fanout";
  const child = {
    topic: "c",
    kind,
    ...(o.viaNodes !== undefined ? { nodes: o.viaNodes } : {}),
    ...(o.childCopyTimeoutMs !== undefined ? { copy_timeout_ms: o.childCopyTimeoutMs } : {}),
  };
  const b = new HistoryBuilder({
    topics: { t: { partitions: 1 }, c: { partitions: 2 } },
    children: { t: [child] },
    ...(o.copyTimeoutMs !== undefined ? { copy_timeout_ms: o.copyTimeoutMs } : {}),
  });
  const owner = o.owner === undefined ? "n1" : o.owner;
  const copyNode = o.copyNode ?? "n1";
  const fault = o.fault === undefined ? { kind: "kill", node: "n1", atMs: 60 } : o.fault;
  const recopyAt = o.recopyAtMs ?? 400;
  const [[p1, o1], [p2, o2]] = o.at ?? [[0, 0], [1, 0]];
  const bootAt = (node: string, ms: number) => (fault !== null && fault.node === node && fault.evidence !== false && ms > fault.atMs ? `${node}-b2` : `${node}-b1`);
  const produce = b.produce("p1", "t", "m1", 0, 10, "ok", 0, owner === null ? undefined : { node: owner, boot: `${owner}-b1` });
  const parentNode = o.parentNode ?? owner ?? "n1";
  b.consume("c0", "t", "m1", "t-d1", 12, 13, { node: parentNode, boot: `${parentNode}-b1` });
  b.ack("c0", "t", "m1", "t-d1", 14, 15);
  const first = b.consume("c1", "c", "m1", "c-d1", 20, 21, { partition: p1, offset: o1, node: copyNode, boot: bootAt(copyNode, 20) });
  const ack = b.ack("c1", "c", "m1", "c-d1", 30, 31);
  let faultRef = -1;
  if (fault !== null) {
    faultRef = b.fault(fault.kind, fault.atMs, fault.atMs + 1, { node: fault.node });
    b.fault("start", fault.atMs + 10, fault.atMs + 40, { node: fault.node }, "ok", fault.evidence === false ? {} : { boot: `${fault.node}-b2` });
  }
  const again = b.consume("c2", "c", "m1", "c-d2", recopyAt, recopyAt + 1, { partition: p2, offset: o2, node: copyNode, boot: bootAt(copyNode, recopyAt) });
  b.ack("c2", "c", "m1", "c-d2", recopyAt + 10, recopyAt + 11);
  const drainAt = Math.max(2000, recopyAt + 1000);
  b.empty("c0", "t", drainAt, drainAt + 1);
  b.empty("c1", "c", drainAt, drainAt + 1);
  const h = b.build();
  return { r: checkEvents(h.events), i: (ref: number) => h.index(ref), produce, first, ack, again, fault: faultRef };
}

function invalidAsDuplicate(s: ReturnType<typeof scenario>): void {
  assert.equal(s.r.verdict, "invalid", s.r.reason);
  assert.deepEqual(
    s.r.anomalies.map((a) => [a.name, a.path, a.ops]),
    [["duplicate-after-ack", "c", [s.i(s.first), s.i(s.ack), s.i(s.again)]]],
  );
  assert.equal(s.r.redeliveries.explainedRecopiesTotal, 0);
}

function explainedBy(s: ReturnType<typeof scenario>): Report {
  assert.equal(s.r.verdict, "valid", `${s.r.reason} ${JSON.stringify(s.r.anomalies)}`);
  assert.deepEqual(s.r.redeliveries.explainedRecopies, [{ msg: "m1", path: "c", deliveryOp: s.i(s.again), sourceOp: s.i(s.first), faultOp: s.i(s.fault) }]);
  assert.equal(s.r.redeliveries.explainedRecopiesTotal, 1);
  assert.equal(s.r.redeliveries.explainedDuplicatesTotal, 0);
  assert.equal(s.r.redeliveries.byCause.fault, 1);
  assert.equal(s.r.faults.find((f) => f.op === s.i(s.fault))!.redeliveries, 1);
  return s.r;
}

test("re-copy explained: a kill of the parent's owner within ack_flush_ms after the copy's first delivery", () => {
  const r = explainedBy(scenario());
  // The re-copy waited from the end of the fault (its start completed at 100) to 401.
  assert.equal(r.lag.maxMs, 301);
});

// In the tests below the first copy sits on n2 whenever the parent's owner n1 is the one killed, so
// no rule but the re-copy rule can explain the second copy (a kill of the copy's own node within
// ack_flush_ms of its ack would also explain it the old way: as a forgotten ack).

test("re-copy explained at the edge of the window, not past it: a kill of the parent's owner at first delivery + 2 × ack_flush_ms + slack", () => {
  // The copy went to n2: the copier's answer may come ack_flush_ms after a consumer got the
  // copy, and the cursor reaches the OS ack_flush_ms after that.
  explainedBy(scenario({ copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 21 + 100 + 100 + 50 } }));
  invalidAsDuplicate(scenario({ copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 21 + 100 + 100 + 50 + 1 } }));
});

test("re-copy not explained: the kill hit a node that neither owns the parent's partition nor stored the copy", () => {
  invalidAsDuplicate(scenario({ fault: { kind: "kill", node: "n3", atMs: 60 } }));
});

test("re-copy not explained: a graceful terminate of the parent's owner (the copier finishes and syncs its cursors)", () => {
  invalidAsDuplicate(scenario({ fault: { kind: "terminate", node: "n1", atMs: 60 } }));
});

test("re-copy not explained: the second copy was delivered before the kill", () => {
  const s = scenario({ recopyAtMs: 45, fault: { kind: "kill", node: "n1", atMs: 60 } });
  invalidAsDuplicate(s);
});

test("re-copy on the copy's own partition: explained at a higher offset, not at a lower one (offsets grow with time)", () => {
  explainedBy(scenario({ copyNode: "n2", at: [[0, 5], [0, 9]] }));
  invalidAsDuplicate(scenario({ copyNode: "n2", at: [[0, 5], [0, 2]] }));
});

test("with copy_timeout_ms in the config, the copier's answer may come that much later (a batch waits for its slowest owner)", () => {
  const late = { copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 21 + 5_000 + 100 + 50 }, recopyAtMs: 9_000 };
  explainedBy(scenario({ ...late, copyTimeoutMs: 5_000 }));
  invalidAsDuplicate(scenario(late));
  invalidAsDuplicate(scenario({ ...late, copyTimeoutMs: 5_000, fault: { kind: "kill", node: "n1", atMs: 21 + 5_000 + 100 + 51 } }));
});

test("a child's own copy_timeout_ms overrides the config's for its path, both ways", () => {
  const late = { copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 21 + 5_000 + 100 + 50 }, recopyAtMs: 9_000 };
  explainedBy(scenario({ ...late, childCopyTimeoutMs: 5_000 }));
  // A local child on one node: its copies are appends, so a wide window elsewhere must not widen its own.
  invalidAsDuplicate(scenario({ ...late, copyTimeoutMs: 10_000, childCopyTimeoutMs: 100 }));
  explainedBy(scenario({ ...late, copyTimeoutMs: 100, childCopyTimeoutMs: 5_000 }));
});

test("re-copy explained: a power loss of the parent's owner within ack_sync_ms + ack_flush_ms, not after", () => {
  explainedBy(scenario({ copyNode: "n2", fault: { kind: "power-loss", node: "n1", atMs: 21 + 1100 + 100 + 50 }, recopyAtMs: 1500 }));
  invalidAsDuplicate(scenario({ copyNode: "n2", fault: { kind: "power-loss", node: "n1", atMs: 21 + 1100 + 100 + 51 }, recopyAtMs: 1500 }));
});

test("explainsRecopy: the window of each role the faulted node plays", () => {
  const env = { slackNs: 50e6, ackFlushNs: 100e6, ackSyncNs: 1000e6, produceInvNs: 0, parentOwners: [1], viaNodes: [7], answerNs: 100e6 };
  const y = { partition: 0, offset: 0, firstDeliveryNs: 20e6, node: 2 };
  const local = { ...y, node: 1 };
  const x = { partition: 1, offset: 0, firstDeliveryNs: 5000e6, node: 2 };
  const f = (kind: "kill" | "power-loss" | "terminate", node: number, atMs: number) => ({ fault: 0, kind, node, invNs: atMs * 1e6, compNs: atMs * 1e6 + 1e6 });
  // The parent's owner: the answer's time plus the cursor's window (ack_flush_ms; a power loss
  // ack_sync_ms + ack_flush_ms), wherever the copy is (its batch may have gone to other owners too).
  for (const copy of [local, y]) {
    assert.equal(explainsRecopy(f("kill", 1, 270), copy, x, env), true);
    assert.equal(explainsRecopy(f("kill", 1, 271), copy, x, env), false);
    assert.equal(explainsRecopy(f("power-loss", 1, 1270), copy, x, env), true);
    assert.equal(explainsRecopy(f("power-loss", 1, 1271), copy, x, env), false);
  }
  // The node that stored the copy, or one the batch went to or through: the answer's time only.
  for (const node of [2, 7]) {
    assert.equal(explainsRecopy(f("power-loss", node, 170), y, x, env), true);
    assert.equal(explainsRecopy(f("power-loss", node, 171), y, x, env), false);
  }
  // Another node, a terminate, a fault over before the produce began, a copy delivered before it.
  assert.equal(explainsRecopy(f("kill", 3, 100), y, x, env), false);
  assert.equal(explainsRecopy(f("terminate", 1, 100), y, x, env), false);
  assert.equal(explainsRecopy(f("kill", 1, 100), y, x, { ...env, produceInvNs: 200e6 }), false);
  assert.equal(explainsRecopy(f("kill", 1, 100), y, { ...x, firstDeliveryNs: 99e6 }, env), false);
  // A fault that names no node may concern any.
  assert.equal(explainsRecopy(f("power-loss", -1, 1270), y, x, env), true);
});

test("fan-out child in a cluster: a kill of another owner of the child's partitions explains a re-copy (the batch failed as a whole); on a replica it does not", () => {
  const build = (kind: "fanout" | "replica") => {
    const b = new HistoryBuilder({ topics: { t: { partitions: 1 }, c: { partitions: 2 } }, children: { t: [{ topic: "c", kind }] } });
    b.produce("p1", "t", "m1", 0, 10, "ok", 0, { node: "n1", boot: "n1-b1" });
    b.consume("c0", "t", "m1", "t-d1", 12, 13, { node: "n1", boot: "n1-b1" });
    b.ack("c0", "t", "m1", "t-d1", 14, 15);
    // m1's copy went to c/0 on n2; another message's copy to c/1 on n3, the node then killed.
    b.produce("p2", "t", "m2", 0, 10, "ok", 0, { node: "n1", boot: "n1-b1" });
    b.consume("c0", "t", "m2", "t-d2", 16, 17, { node: "n1", boot: "n1-b1" });
    b.ack("c0", "t", "m2", "t-d2", 18, 19);
    b.consume("c1", "c", "m2", "c-m2", 20, 21, { partition: 1, node: "n3", boot: "n3-b1" });
    b.ack("c1", "c", "m2", "c-m2", 22, 23);
    b.consume("c1", "c", "m1", "c-d1", 24, 25, { partition: 0, node: "n2", boot: "n2-b1" });
    b.ack("c1", "c", "m1", "c-d1", 30, 31);
    b.fault("kill", 60, 61, { node: "n3" });
    b.fault("start", 70, 100, { node: "n3" }, "ok", { boot: "n3-b2" });
    b.consume("c1", "c", "m1", "c-d2", 400, 401, { partition: 0, offset: 1, node: "n2", boot: "n2-b1" });
    b.ack("c1", "c", "m1", "c-d2", 410, 411);
    b.empty("c0", "t", 2000, 2001);
    b.empty("c1", "c", 2000, 2001);
    return checkEvents(b.build().events);
  };
  const fan = build("fanout");
  assert.equal(fan.verdict, "valid", fan.reason);
  assert.equal(fan.redeliveries.explainedRecopiesTotal, 1);
  const rep = build("replica");
  assert.equal(rep.verdict, "invalid", rep.reason);
  assert.deepEqual(Object.keys(rep.anomalyCounts), ["duplicate-after-ack"]);
});

test("re-copy explained: a kill of the node that stored the copy (the copier's forward lost its answer)", () => {
  explainedBy(scenario({ copyNode: "n2", fault: { kind: "kill", node: "n2", atMs: 60 } }));
});

test("without the owner in the produce's ok (its answer was lost), the node that delivered it on the parent path stands for the owner", () => {
  explainedBy(scenario({ owner: "n1", copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 60 } }));
  explainedBy(scenario({ owner: null, parentNode: "n1", copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 60 } }));
  invalidAsDuplicate(scenario({ owner: null, parentNode: "n3", copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 60 } }));
  // The ok's owner wins over the parent path's deliveries (a later owner, after a move).
  invalidAsDuplicate(scenario({ owner: "n3", parentNode: "n1", copyNode: "n2", fault: { kind: "kill", node: "n1", atMs: 60 } }));
});

test("remote child: a kill of a node of the other cluster that the config lists explains a re-push; unlisted, it does not", () => {
  explainedBy(scenario({ kind: "remote", viaNodes: ["r1", "r2"], copyNode: "r2", fault: { kind: "kill", node: "r1", atMs: 60 } }));
  invalidAsDuplicate(scenario({ kind: "remote", copyNode: "r2", fault: { kind: "kill", node: "r1", atMs: 60 } }));
  // The node that stored the pushed copy needs no listing.
  explainedBy(scenario({ kind: "remote", copyNode: "r2", fault: { kind: "kill", node: "r2", atMs: 60 } }));
});

test("a re-copy explained only by a kill without boot evidence is unknown", () => {
  const s = scenario({ fault: { kind: "kill", node: "n1", atMs: 60, evidence: false } });
  assert.equal(s.r.verdict, "unknown", s.r.reason);
  assert.deepEqual(Object.keys(s.r.unknownCounts).sort(), ["explained-by-unevidenced-fault", "unevidenced-fault"]);
});

/** m1 produced to t (owner n1, boot b1), delivered and acked there; t has the fan-out child c. */
function producedToParent(childPartitions: number): HistoryBuilder {
  const b = new HistoryBuilder({ topics: { t: { partitions: 1 }, c: { partitions: childPartitions } }, children: { t: [{ topic: "c", kind: "fanout" }] } });
  b.produce("p1", "t", "m1", 0, 10, "ok", 0, { node: "n1", boot: "b1" });
  b.consume("c0", "t", "m1", "t-d1", 12, 13, { boot: "b1" });
  b.ack("c0", "t", "m1", "t-d1", 14, 15);
  return b;
}

test("one fault explains one extra copy: a third copy needs a second fault", () => {
  const build = (secondKill: boolean) => {
    const b = producedToParent(3);
    b.consume("c1", "c", "m1", "c-d1", 20, 21, { partition: 0, boot: "b1" });
    b.ack("c1", "c", "m1", "c-d1", 30, 31);
    b.fault("kill", 60, 61, { node: "n1" });
    b.fault("start", 70, 100, { node: "n1" }, "ok", { boot: "b2" });
    b.consume("c1", "c", "m1", "c-d2", 200, 201, { partition: 1, boot: "b2" });
    b.ack("c1", "c", "m1", "c-d2", 210, 211);
    if (secondKill) {
      b.fault("kill", 260, 261, { node: "n1" });
      b.fault("start", 270, 300, { node: "n1" }, "ok", { boot: "b3" });
    }
    b.consume("c1", "c", "m1", "c-d3", 400, 401, { partition: 2, boot: secondKill ? "b3" : "b2" });
    b.ack("c1", "c", "m1", "c-d3", 410, 411);
    b.empty("c0", "t", 2000, 2001);
    b.empty("c1", "c", 2000, 2001);
    return checkEvents(b.build().events);
  };
  const one = build(false);
  assert.equal(one.verdict, "invalid", one.reason);
  assert.deepEqual(Object.keys(one.anomalyCounts), ["duplicate-after-ack"]);
  const two = build(true);
  assert.equal(two.verdict, "valid", two.reason);
  assert.equal(two.redeliveries.explainedRecopiesTotal, 2);
});

test("two copies leased at once are two records: no double-lease when a kill explains the second", () => {
  // Copy one on c/0 leased at 20, copy two delivered at 200 while that lease is still live (no
  // lapse; n2, their owner, was not restarted), both acked after: two records, or one.
  const leasedTwice = (secondPartition: number) => {
    const b = producedToParent(2);
    b.consume("c1", "c", "m1", "c-d1", 20, 21, { partition: 0, boot: "b1", node: "n2" });
    b.fault("kill", 60, 61, { node: "n1" });
    b.fault("start", 70, 100, { node: "n1" }, "ok", { boot: "b2" });
    b.consume("c2", "c", "m1", "c-d2", 200, 201, { partition: secondPartition, boot: "b1", node: "n2" });
    b.ack("c1", "c", "m1", "c-d1", 300, 301);
    b.ack("c2", "c", "m1", "c-d2", 310, 311);
    b.empty("c0", "t", 2000, 2001);
    b.empty("c1", "c", 2000, 2001);
    return checkEvents(b.build().events);
  };
  const r = leasedTwice(1);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.redeliveries.explainedRecopiesTotal, 1);
  // The second delivery at the same offset is the same record: two live leases at once.
  const r2 = leasedTwice(0);
  assert.equal(r2.verdict, "invalid", r2.reason);
  assert.deepEqual(Object.keys(r2.anomalyCounts), ["double-lease"]);
});

test("the produce's owner is validated (both node and boot, strings) and its boot counts as a report of that node", () => {
  const b = new HistoryBuilder();
  b.produce("p1", "t", "m1", 0, 10, "ok", 0, { node: "n1", boot: "b1" });
  b.fault("kill", 20, 21, { node: "n1" });
  b.fault("start", 30, 60, { node: "n1" }, "ok", {});
  // No start boot: the evidence is the produce's ok naming a new boot of n1.
  b.produce("p1", "t", "m2", 70, 80, "ok", 0, { node: "n1", boot: "b2" });
  b.consume("c1", "t", "m1", "d1", 90, 91, { boot: "b2" });
  b.ack("c1", "t", "m1", "d1", 92, 93);
  b.consume("c1", "t", "m2", "d2", 94, 95, { boot: "b2" });
  b.ack("c1", "t", "m2", "d2", 96, 97);
  b.empty("c1", "t", 200, 201);
  const h = b.build();
  const r = checkEvents(h.events);
  assert.equal(r.verdict, "valid", r.reason);
  assert.equal(r.faults.find((f) => f.kind === "kill")!.evidence, true);

  const bad = h.events.map((e) => (e.f === "produce" && e.type === "ok" && e.value["node"] !== undefined ? { ...e, value: { ...e.value, boot: 7 } } : e));
  assert.throws(() => checkEvents(bad), /boot must be a nonempty string/);
});
