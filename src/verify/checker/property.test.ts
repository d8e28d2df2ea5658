// Property tests: histories of a correct (simulated) broker are always valid, and one mutation of
// a known kind makes them invalid with the matching anomaly. fast-check prints the failing
// arguments (the simulation seed first) and its own seed; `simulateHistory({ seed })` replays it.

import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { checkEvents } from "./check.js";
import { simulateHistory, simulateWithStats, type SimBug, type SimOptions } from "./simulate.js";
import type { AnomalyName, Report } from "./types.js";

type Line = Record<string, unknown> & { index: number; time_ns: number; process: string; type: string; f: string; value: Record<string, unknown> };

const RUNS = 25;

function history(seed: number, nodes: number): Line[] {
  const options: SimOptions = { seed, nodes, durationMs: 300, producers: 2, consumers: 3, faultEveryMs: 150, visibilityTimeoutMs: 80 };
  return simulateHistory(options) as Line[];
}

function renumber(lines: Line[]): Line[] {
  return lines.map((l, i) => ({ ...l, index: i }));
}

/** Where an operation's completion is: the first line after `from` on the same process. */
function completionOf(lines: Line[], from: number): number {
  for (let i = from + 1; i < lines.length; i++) if (lines[i]!.process === lines[from]!.process) return i;
  return -1;
}

/** Inserts a complete consume ok (invoke and ok, same time) before the first line later than `afterNs`. */
function insertDelivery(lines: Line[], afterNs: number, value: Record<string, unknown>): Line[] | null {
  const at = lines.findIndex((l, i) => i > 0 && l.time_ns > afterNs);
  if (at < 0) return null;
  const timeNs = lines[at]!.time_ns;
  const topic = value["topic"];
  const inserted: Line[] = [
    { index: 0, time_ns: timeNs, process: "mutant", type: "invoke", f: "consume", value: { topic } },
    { index: 0, time_ns: timeNs, process: "mutant", type: "ok", f: "consume", value },
  ];
  return renumber([...lines.slice(0, at), ...inserted, ...lines.slice(at)]);
}

function delivery(topic: string, msg: unknown, handle: string, node = "n1", boot = "n1-b0", partition = 0, offset = 0): Record<string, unknown> {
  return { topic, msg, partition, offset, delivery: handle, delivery_count: 2, node, boot };
}

function names(r: Report): AnomalyName[] {
  return Array.from(new Set(r.anomalies.map((a) => a.name))).sort();
}

interface Mutated {
  lines: Line[];
  name: AnomalyName;
  msg: string | null;
  path: string;
}

type Mutation = (lines: Line[], pick: number) => Mutated | null;

function choose<T>(items: T[], pick: number): T | null {
  return items.length === 0 ? null : items[pick % items.length]!;
}

const dropDelivery: Mutation = (lines, pick) => {
  // A (message, topic) delivered exactly once, whose produce answered 202.
  const produced = new Set<string>();
  const deliveries = new Map<string, number[]>();
  lines.forEach((l, i) => {
    if (l.f === "produce" && l.type === "invoke") {
      const c = completionOf(lines, i);
      if (c >= 0 && lines[c]!.type === "ok") produced.add(String(l.value["msg"]));
    }
    if (l.f === "consume" && l.type === "ok" && l.value["msg"] !== null) {
      const key = `${String(l.value["msg"])}\u0000${String(l.value["topic"])}`;
      deliveries.set(key, [...(deliveries.get(key) ?? []), i]);
    }
  });
  const once = Array.from(deliveries.entries()).filter(([k, v]) => v.length === 1 && produced.has(k.split("\u0000")[0]!));
  const hit = choose(once, pick);
  if (hit === null) return null;
  const [key, [okLine]] = hit as [string, [number]];
  const [msg, topic] = key.split("\u0000") as [string, string];
  const handle = lines[okLine]!.value["delivery"];
  const drop = new Set<number>([okLine]);
  // Its invoke: the previous line of that process.
  for (let i = okLine - 1; i >= 0; i--) if (lines[i]!.process === lines[okLine]!.process) {
    drop.add(i);
    break;
  }
  lines.forEach((l, i) => {
    if (l.type === "invoke" && (l.f === "ack" || l.f === "extend" || l.f === "nack") && l.value["delivery"] === handle) {
      drop.add(i);
      const c = completionOf(lines, i);
      if (c >= 0) drop.add(c);
    }
  });
  return { lines: renumber(lines.filter((_, i) => !drop.has(i))), name: "lost", msg, path: topic };
};

const addUnexpected: Mutation = (lines, pick) => {
  const afterNs = lines[1 + (pick % (lines.length - 2))]!.time_ns;
  const out = insertDelivery(lines, afterNs, delivery("t", "never-produced", "ghost-1"));
  return out && { lines: out, name: "unexpected", msg: "never-produced", path: "t" };
};

const addDuplicateAfterAck: Mutation = (lines, pick) => {
  const cfg = lines[0]!.value as { ack_flush_ms: number; ack_sync_ms: number };
  const slackNs = 50e6;
  const faults: Array<{ kind: string; invNs: number; compNs: number }> = [];
  lines.forEach((l, i) => {
    if (l.f === "fault" && l.type === "invoke") {
      const c = completionOf(lines, i);
      faults.push({ kind: String(l.value["kind"]), invNs: l.time_ns, compNs: c >= 0 ? lines[c]!.time_ns : Infinity });
    }
  });
  const acks: Array<{ inv: number; comp: number }> = [];
  lines.forEach((l, i) => {
    if (l.f === "ack" && l.type === "invoke") {
      const c = completionOf(lines, i);
      if (c >= 0 && lines[c]!.type === "ok") acks.push({ inv: i, comp: c });
    }
  });
  const candidates = acks.filter(({ inv, comp }) => {
    const aInv = lines[inv]!.time_ns;
    const aComp = lines[comp]!.time_ns;
    const later = lines.find((l) => l.time_ns > aComp);
    if (later === undefined) return false;
    const dNs = later.time_ns;
    // No fault that could make the broker forget this ack before the duplicate.
    return faults.every((f) => {
      if (f.invNs > dNs || f.compNs + slackNs < aInv) return true;
      if (f.kind === "kill") return f.invNs > aComp + (cfg.ack_flush_ms * 1e6 + slackNs);
      if (f.kind === "power-loss") return f.invNs > aComp + (cfg.ack_sync_ms + cfg.ack_flush_ms) * 1e6 + slackNs;
      return f.kind !== "move";
    });
  });
  const hit = choose(candidates, pick);
  // The acked record itself, delivered again (another offset would be another copy on a child path).
  return hit && deliverAfterAck(lines, hit, "dup-1", null);
};

/**
 * Inserts a delivery of the acked message, on its path and by the owner of the acked delivery,
 * right after the ack completed: at `offset`, or (null) at the acked record's own offset.
 */
function deliverAfterAck(lines: Line[], hit: { inv: number; comp: number }, handle: string, offset: number | null): Mutated | null {
  const ack = lines[hit.inv]!;
  const topic = String(ack.value["topic"]);
  const original = lines.find((l) => l.f === "consume" && l.type === "ok" && l.value["delivery"] === ack.value["delivery"])!;
  const v = original.value;
  const d = delivery(topic, ack.value["msg"], handle, String(v["node"]), String(v["boot"]), v["partition"] as number, offset ?? (v["offset"] as number));
  const out = insertDelivery(lines, lines[hit.comp]!.time_ns, d);
  return out && { lines: out, name: "duplicate-after-ack", msg: String(ack.value["msg"]), path: topic };
}

/**
 * A second copy of a message on a child path (a new offset), delivered after a 204 ack of the
 * first, with no kill, power loss or move anywhere from the message's produce to it: nothing could
 * have made the copier copy it again, nor the broker forget the ack.
 */
const addUnexplainedRecopy: Mutation = (lines, pick) => {
  const cfg = lines[0]!.value as { children?: Record<string, Array<{ topic: string }>> };
  const childPaths = new Set(Object.values(cfg.children ?? {}).flatMap((l) => l.map((c) => c.topic)));
  const slackNs = 50e6;
  const faults: Array<{ invNs: number; compNs: number }> = [];
  const produceNs = new Map<string, number>();
  lines.forEach((l, i) => {
    if (l.f === "fault" && l.type === "invoke" && ["kill", "power-loss", "move"].includes(String(l.value["kind"]))) {
      const c = completionOf(lines, i);
      faults.push({ invNs: l.time_ns, compNs: c >= 0 ? lines[c]!.time_ns : Infinity });
    }
    if (l.f === "produce" && l.type === "invoke") produceNs.set(String(l.value["msg"]), l.time_ns);
  });
  const candidates: Array<{ inv: number; comp: number }> = [];
  lines.forEach((l, i) => {
    if (l.f !== "ack" || l.type !== "invoke" || !childPaths.has(String(l.value["topic"]))) return;
    const c = completionOf(lines, i);
    if (c < 0 || lines[c]!.type !== "ok") return;
    const from = produceNs.get(String(l.value["msg"]))!;
    const later = lines.find((x) => x.time_ns > lines[c]!.time_ns);
    if (later === undefined) return;
    if (faults.every((f) => f.compNs + slackNs < from || f.invNs > later.time_ns)) candidates.push({ inv: i, comp: c });
  });
  const hit = choose(candidates, pick);
  return hit && deliverAfterAck(lines, hit, "recopy-1", 1_000_000);
};

const deliverRefused: Mutation = (lines, pick) => {
  const refused: number[] = [];
  lines.forEach((l, i) => {
    if (l.f === "produce" && l.type === "invoke") {
      const c = completionOf(lines, i);
      if (c >= 0 && lines[c]!.type === "fail") refused.push(i);
    }
  });
  const hit = choose(refused, pick);
  if (hit === null) return null;
  const msg = lines[hit]!.value["msg"];
  const out = insertDelivery(lines, lines[completionOf(lines, hit)]!.time_ns, delivery("t", msg, "refused-1"));
  return out && { lines: out, name: "refused-delivered", msg: String(msg), path: "t" };
};

const misroute: Mutation = (lines, pick) => {
  const ok: number[] = [];
  lines.forEach((l, i) => {
    if (l.f === "produce" && l.type === "invoke") {
      const c = completionOf(lines, i);
      if (c >= 0 && lines[c]!.type === "ok") ok.push(i);
    }
  });
  const hit = choose(ok, pick);
  if (hit === null) return null;
  const msg = lines[hit]!.value["msg"];
  const out = insertDelivery(lines, lines[completionOf(lines, hit)]!.time_ns, delivery("u", msg, "wrong-1"));
  return out && { lines: out, name: "misrouted", msg: String(msg), path: "u" };
};

const replaySkip: Mutation = (lines, pick) => {
  const replays = lines
    .map((l, i) => [l, i] as const)
    .filter(([l]) => l.f === "replay" && l.type === "ok" && (l.value["msgs"] as unknown[]).length >= 3);
  const hit = choose(replays, pick);
  if (hit === null) return null;
  const [l, i] = hit;
  const msgs = [...(l.value["msgs"] as unknown[])];
  msgs.splice(1 + (pick % (msgs.length - 2)), 1);
  const out = [...lines];
  out[i] = { ...l, value: { ...l.value, msgs } };
  return { lines: out, name: "skip", msg: null, path: "t" };
};

test("histories of a correct broker are judged valid, its child copies made again after kills included", () => {
  let recopies = 0;
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 0x7fffffff }), fc.integer({ min: 1, max: 2 }), (seed, nodes) => {
      const r = checkEvents(history(seed, nodes));
      assert.equal(r.verdict, "valid", `${r.reason}: ${JSON.stringify(r.anomalies.slice(0, 3))} ${JSON.stringify(r.unknowns.slice(0, 3))}`);
      recopies += r.redeliveries.explainedRecopiesTotal;
    }),
    { numRuns: RUNS },
  );
  assert.ok(recopies > 0, "no run had a re-copy for the checker to explain");
});

test("histories of a correct broker with idempotent producers re-sending lost answers are valid, duplicates answered included", () => {
  let resent = 0;
  let duplicates = 0;
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 0x7fffffff }), fc.integer({ min: 1, max: 2 }), (seed, nodes) => {
      const lines = simulateHistory({ seed, nodes, durationMs: 300, producers: 2, consumers: 3, faultEveryMs: 150, visibilityTimeoutMs: 80, idempotent: true, lostResponseRate: 0.1 }) as Line[];
      const r = checkEvents(lines);
      assert.equal(r.verdict, "valid", `${r.reason}: ${JSON.stringify(r.anomalies.slice(0, 3))} ${JSON.stringify(r.unknowns.slice(0, 3))}`);
      const sends = new Map<string, number>();
      for (const l of lines) {
        if (l.f === "produce" && l.type === "invoke") sends.set(String(l.value["msg"]), (sends.get(String(l.value["msg"])) ?? 0) + 1);
        if (l.f === "produce" && l.type === "ok" && l.value["duplicate"] === true) duplicates++;
      }
      for (const n of sends.values()) if (n > 1) resent++;
    }),
    { numRuns: RUNS },
  );
  assert.ok(resent > 0, "no run re-sent a produce");
  assert.ok(duplicates > 0, "no re-send was answered as a duplicate");
});

test("histories of a correct broker with dead letters (moves by count and dead_letter=true, counts forgotten by kills) are valid", () => {
  let moved = 0;
  let excess = 0;
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 0x7fffffff }), fc.integer({ min: 1, max: 2 }), (seed, nodes) => {
      const lines = simulateHistory({ seed, nodes, durationMs: 400, producers: 2, consumers: 3, faultEveryMs: 150, visibilityTimeoutMs: 80, deadLetters: true }) as Line[];
      const r = checkEvents(lines);
      assert.equal(r.verdict, "valid", `seed ${seed}: ${r.reason}: ${JSON.stringify(r.anomalies.slice(0, 3))} ${JSON.stringify(r.unknowns.slice(0, 3))}`);
      for (const l of lines) {
        if (l.f !== "consume" || l.type !== "ok" || l.value["msg"] === null) continue;
        if (l.value["topic"] === "t.dlq") moved++;
        else if (l.value["topic"] === "t" && (l.value["delivery_count"] as number) > 3) excess++;
      }
    }),
    { numRuns: RUNS },
  );
  assert.ok(moved > 0, "no run moved a message to the dead-letter topic");
  void excess;
});

const MUTATIONS: Array<[string, Mutation]> = [
  ["dropping a delivery is lost", dropDelivery],
  ["delivering a never-produced message is unexpected", addUnexpected],
  ["delivering again after a confirmed ack, with no fault, is duplicate-after-ack", addDuplicateAfterAck],
  ["a second copy on a child path after a confirmed ack, with no fault since the produce, is duplicate-after-ack", addUnexplainedRecopy],
  ["delivering a refused produce is refused-delivered", deliverRefused],
  ["delivering on a wrong topic is misrouted", misroute],
  ["making a replay skip an offset is skip", replaySkip],
];

for (const [title, mutate] of MUTATIONS) {
  test(`mutation: ${title}`, () => {
    let applied = 0;
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 0x7fffffff }), fc.integer({ min: 1, max: 2 }), fc.nat(), (seed, nodes, pick) => {
        const m = mutate(history(seed, nodes), pick);
        fc.pre(m !== null);
        applied++;
        const r = checkEvents(m!.lines);
        const detail = `${r.reason}: ${JSON.stringify(r.anomalies.slice(0, 3))}`;
        assert.equal(r.verdict, "invalid", detail);
        assert.deepEqual(names(r), [m!.name], detail);
        assert.ok(
          r.anomalies.some((a) => a.name === m!.name && a.path === m!.path && (m!.msg === null || a.msg === m!.msg)),
          `expected ${m!.name} of ${m!.msg} on ${m!.path}; ${detail}`,
        );
      }),
      { numRuns: RUNS },
    );
    assert.ok(applied > 0, "the mutation never applied");
  });
}

// Seeded bugs of the simulated broker (the model-level twin of `narad verify calibrate`): each must
// be caught with its anomaly in some run, no run may blame another anomaly, and a run where the
// bug never struck must stay valid. Some strikes are legitimately invisible (an ack forgotten
// within a power loss's window looks like the power loss), hence "some run", not "every run".
const SEEDED_BUGS: Array<[SimBug, AnomalyName[], Partial<SimOptions>]> = [
  // A duplicate that overlaps the ack it follows is not "after" it: such pairs are no-legal-order.
  ["ack-not-persisted", ["duplicate-after-ack", "no-legal-order"], {}],
  // With an ambiguous ack between the two deliveries the spec's double-lease does not apply.
  ["early-lapse", ["double-lease", "no-legal-order"], { visibilityTimeoutMs: 400, durationMs: 900, slowAckRate: 0.2 }],
  ["nack-drops", ["stranded"], {}],
  ["stale-handle", ["double-lease"], { lapseRate: 0.3, visibilityTimeoutMs: 200, durationMs: 900 }],
  ["refused-stored", ["refused-delivered"], {}],
  ["replay-skip", ["skip"], {}],
  ["redeliver-acked", ["duplicate-after-ack", "no-legal-order"], {}],
  ["lose-message", ["lost"], {}],
  // A second copy while the first's lease is live is a double lease; overlapping its ack, no legal order.
  ["recopy-on-terminate", ["duplicate-after-ack", "no-legal-order", "double-lease"], {}],
  // Issue 14: a re-send after the owner's restart stored again; the copies' other rules stay quiet.
  ["dedupe-forgets", ["duplicate-produce"], { idempotent: true, lostResponseRate: 0.15 }],
  ["dead-letter-early", ["dead-lettered-early"], { deadLetters: true }],
  // Counts must be on disk well before a kill for forgetting them to show: a short flush, long leases.
  ["counts-forgotten", ["delivered-after-dead-letter"], { deadLetters: true, ackFlushMs: 10, visibilityTimeoutMs: 200, durationMs: 900 }],
];

for (const [bug, expected, extra] of SEEDED_BUGS) {
  test(`seeded bug "${bug}" is caught as ${expected[0]}`, () => {
    let caught = 0;
    for (let seed = 1; seed <= 6; seed++) {
      const { lines, bugTriggered } = simulateWithStats({
        seed,
        bug,
        nodes: 1 + (seed % 2),
        durationMs: 400,
        faultEveryMs: 150,
        visibilityTimeoutMs: 80,
        ...extra,
      });
      const r = checkEvents(lines);
      const found = names(r);
      const where = `seed ${seed}: ${r.reason} ${JSON.stringify(r.anomalies.slice(0, 2))}`;
      assert.deepEqual(r.unknownCounts, {}, where);
      assert.ok(found.every((n) => expected.includes(n)), where);
      if (bugTriggered === 0) assert.equal(r.verdict, "valid", where);
      if (found.includes(expected[0]!)) caught++;
    }
    assert.ok(caught > 0, `${bug} was never caught`);
  });
}
