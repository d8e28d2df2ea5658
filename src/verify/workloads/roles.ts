// What each lane does: produce, consume (with a mix of ack, nack, extend, slow ack and lapse; half
// the acks at once ride on the next consume, consume?ack=H),
// probe leases, replay, drain and audit. The same code runs in worker processes (recording over
// IPC) and in the driver (drain and audit, recording directly).
//
// Design note.
// - Every loop ends: on stop, on a quota, or on a named maximum of iterations. Sleeps of the
//   ordinary roles end early on stop; the prober's do not, so a scenario it began is finished the
//   same way every time (each is bounded: at most about two visibility timeouts).
// - Randomness comes only from the lane's seeded Prng, with a fixed number of draws per step, so
//   `--seed` reproduces every choice (the interleaving with the broker stays up to timing).
// - The prober runs five scripted lease scenarios on a private one-partition topic, where no other
//   consumer can take its message. Each pins one rule of the contract to a moment the checker can
//   judge without luck:
//     nack     consume, nack, consume again: the message must come back (else `stranded`);
//     ack      consume, ack, consume: nothing may come back (else `duplicate-after-ack`);
//     overlap  consume, wait half a timeout, consume: nothing may come (else `double-lease`);
//     stale    consume, let the lease lapse, consume again, then ack the *first* handle: it must
//              answer 410, since a later delivery replaced it (a 204 is a `double-lease`);
//     extend   consume, extend at 60% of the timeout, consume at 120%: nothing may come.
// - Message ids are `m-<process>-<seq>`: unique within a run because process names are.
// - Next wave (issue 14): an idempotent producer lane produces through the SDK's idempotent
//   producer, which re-sends every ambiguous answer itself; on a topic with a dead-letter topic a
//   consumer fails some messages on purpose, chosen by a hash of the message id so every consumer
//   treats a message alike: nacked at every delivery until the broker moves it, or acked with
//   dead_letter=true at once (poisonFate).

import { Prng } from "../nemesis/index.js";
import { encodePayload, type Delivery, type Lane } from "./ops.js";
import type { CompletionType, ConsumerMix, ConsumerSpec, PoisonSpec, ProberSpec, ProducerSpec, ReplayerSpec, TopicSpec } from "./protocol.js";

/** Stop flag with sleeps that end early once it is raised. */
export class Stopper {
  private stoppingValue = false;
  private readonly wakers = new Set<() => void>();

  get stopping(): boolean {
    return this.stoppingValue;
  }

  stop(): void {
    this.stoppingValue = true;
    for (const w of [...this.wakers]) w();
  }

  /** Calls `cb` at stop (at once if stopped); returns a function that cancels it. */
  onStop(cb: () => void): () => void {
    if (this.stoppingValue) {
      cb();
      return () => undefined;
    }
    const w = () => {
      this.wakers.delete(w);
      cb();
    };
    this.wakers.add(w);
    return () => this.wakers.delete(w);
  }

  /** Sleeps `ms`, or less if stopped meanwhile. */
  sleep(ms: number): Promise<void> {
    if (this.stoppingValue || ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.wakers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.wakers.add(done);
    });
  }
}

/**
 * Lets producers produce only while it is open (the driver's load cycles: bursts, then quiet
 * windows in which faults are injected). A lane checks it right before each produce; a closed gate
 * holds it until the gate opens or the run stops. Open unless closed.
 */
export class Gate {
  private openValue = true;
  private readonly waiters = new Set<() => void>();

  get open(): boolean {
    return this.openValue;
  }

  set(open: boolean): void {
    this.openValue = open;
    if (open) for (const w of [...this.waiters]) w();
  }

  /** Resolves once the gate is open or `stopper` stopped. */
  wait(stopper: Stopper): Promise<void> {
    if (this.openValue || stopper.stopping) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.waiters.delete(done);
        cancel();
        resolve();
      };
      this.waiters.add(done);
      const cancel = stopper.onStop(done);
    });
  }
}

/** A sleep that stop does not cut short (the prober's scenarios). */
export function sleepFull(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
}

/** A 32-bit seed for `label` derived from the run's seed, so each lane has its own stream. */
export function deriveSeed(seed: number, label: string): number {
  // FNV-1a over the label, mixed with the seed, then one PRNG step to spread the bits.
  let h = 0x811c9dc5;
  for (let i = 0; i < label.length; i++) {
    h ^= label.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  const folded = (h ^ (seed >>> 0) ^ Math.floor(seed / 0x1_0000_0000)) >>> 0;
  return Math.floor(new Prng(folded).next() * 0x1_0000_0000);
}

/** Most consecutive failed requests before a lane's backoff stops growing (at 400–800 ms). */
const BACKOFF_STEPS_MAX = 4;

function backoffMs(prng: Prng, failures: number): number {
  const base = 25 * 2 ** Math.min(failures, BACKOFF_STEPS_MAX);
  return base + prng.int(base);
}

// ---- producer ----------------------------------------------------------------------------------

/** Produces until stopped or the quota is reached. Returns how many produces it made. */
export async function runProducer(lane: Lane, spec: ProducerSpec, prng: Prng, stopper: Stopper, quotaMax: number, gate?: Gate): Promise<number> {
  const quota = Math.min(spec.quotaPerLane ?? quotaMax, quotaMax);
  let next = performance.now();
  let failures = 0;
  let seq = 0;
  if (spec.idempotent === true) await lane.openIdempotent();
  while (!stopper.stopping && seq < quota) {
    const waitMs = next - performance.now();
    if (waitMs > 0) await stopper.sleep(waitMs);
    if (gate !== undefined && !gate.open) {
      await gate.wait(stopper);
      next = performance.now();
    }
    if (stopper.stopping) break;
    // No await from here to the invoke: a gate closed meanwhile is seen by the next produce.
    // Pacing without catch-up bursts: a late start does not make the next one early.
    next = Math.max(next + spec.intervalMs, performance.now());
    // Always three draws, so the sequence of choices depends only on the seed.
    const size = spec.payloadBytesMin + prng.int(spec.payloadBytesMax - spec.payloadBytesMin + 1);
    const keyed = prng.next() < spec.keyedShare;
    const keyIndex = prng.int(Math.max(1, spec.keys));
    const msg = `m-${lane.process}-${seq++}`;
    const payload = encodePayload(msg, size);
    const key = keyed ? `k${keyIndex}` : null;
    const out = spec.idempotent === true ? await lane.produceIdempotent(spec.topic, msg, payload, key) : await lane.produce(spec.topic, msg, payload, key);
    if (out.type === "ok") {
      failures = 0;
    } else {
      // Refused (429, 503) or ambiguous: back off so a struggling node is not flooded.
      await stopper.sleep(backoffMs(prng, failures++));
    }
  }
  return seq;
}

// ---- consumer ----------------------------------------------------------------------------------

type Behaviour = keyof ConsumerMix;
const BEHAVIOURS: readonly Behaviour[] = ["ack", "nack", "extend", "slow", "lapse", "late"];

export function pickBehaviour(prng: Prng, mix: ConsumerMix): Behaviour {
  let total = 0;
  for (const b of BEHAVIOURS) total += Math.max(0, mix[b]);
  let x = prng.next() * total;
  for (const b of BEHAVIOURS) {
    const w = Math.max(0, mix[b]);
    if (x < w) return b;
    x -= w;
  }
  return "ack";
}

/** What a consumer does with message `msg` on a topic with a dead-letter topic: fail it on purpose, or go by the mix. */
export function poisonFate(msg: string, spec: PoisonSpec): "nack" | "dead-letter" | "mix" {
  let h = 0x811c9dc5;
  for (let i = 0; i < msg.length; i++) h = Math.imul(h ^ msg.charCodeAt(i), 0x01000193);
  // FNV-1a's high bits barely move between ids that differ in their last digits (m-p1-74,
  // m-p1-75): a finalizer spreads them, or the shares come out skewed.
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  h = (h ^ (h >>> 16)) >>> 0;
  const x = h / 0x1_0000_0000;
  if (x < spec.nackShare) return "nack";
  if (x < spec.nackShare + spec.deadLetterShare) return "dead-letter";
  return "mix";
}

/** Deliveries one consumer lane holds (slow acks, extends) at most; at the limit it stops consuming. */
export const HELD_MAX = 16;
/** Share of the "ack at once" deliveries whose ack rides on the lane's next consume (consume?ack=H). */
export const RIDING_ACK_SHARE = 0.5;

interface Held {
  d: Delivery;
  dueMs: number;
  /** What to do when due: extend (then hold again and ack), ack, or nack (a message failed on purpose). */
  next: "extend" | "ack" | "nack";
}

/**
 * How long a consumer holds a message it fails on purpose before the nack, as a share of the
 * visibility timeout: long enough that such messages sit between deliveries (their counts
 * persisted) when a fault strikes, short enough that max_deliveries runs out within a run.
 */
export const POISON_HOLD_SHARE = 0.25;

/**
 * Consumes until stopped; each delivery is settled as the mix says. A delivery to be acked slowly
 * or extended is held while the lane goes on consuming (like a client with prefetch), and settled
 * when due; a lane thus stays one operation at a time, and slow handling does not starve the load.
 */
export async function runConsumer(lane: Lane, spec: ConsumerSpec, prng: Prng, stopper: Stopper, opsMax: number): Promise<void> {
  const vt = spec.visibilityTimeoutMs;
  const held: Held[] = [];
  let failures = 0;
  const settleDue = async (all: boolean): Promise<void> => {
    // Oldest first; on stop everything is settled now (an extend is skipped, the ack is not).
    held.sort((a, b) => a.dueMs - b.dueMs);
    while (held.length > 0 && (all || held[0]!.dueMs <= performance.now())) {
      const h = held.shift()!;
      if (h.next === "extend" && !all) {
        await lane.settle(spec.topic, h.d, "extend");
        held.push({ d: h.d, dueMs: performance.now() + vt * 0.35, next: "ack" });
        held.sort((a, b) => a.dueMs - b.dueMs);
      } else {
        await lane.settle(spec.topic, h.d, h.next === "nack" ? "nack" : "ack");
      }
    }
  };
  // An ack that rides on the next consume (consume?ack=H): acked in the same request that leases
  // the next message. Sent on its own before any pause, so "ack at once" stays at once.
  let riding: Delivery | null = null;
  const ackRiding = async (): Promise<void> => {
    if (riding === null) return;
    const d = riding;
    riding = null;
    await lane.settle(spec.topic, d, "ack");
  };
  for (let i = 0; i < opsMax && !stopper.stopping; i++) {
    await settleDue(false);
    if (held.length >= HELD_MAX) {
      await ackRiding();
      await stopper.sleep(held[0]!.dueMs - performance.now());
      continue;
    }
    // Never wait past the next due settle.
    const untilDueMs = held.length > 0 ? Math.max(0, Math.floor(held[0]!.dueMs - performance.now())) : spec.waitMs;
    const waitMs = Math.min(spec.waitMs, untilDueMs);
    let c: { type: CompletionType; delivery: Delivery | null };
    if (riding !== null) {
      const d: Delivery = riding;
      riding = null;
      const r = await lane.consumeAcking(spec.topic, waitMs, d);
      c = { type: r.consume.type, delivery: r.delivery };
    } else {
      c = await lane.consume(spec.topic, waitMs);
    }
    const jitter = prng.next();
    if (c.delivery === null) {
      if (c.type !== "ok") await stopper.sleep(Math.min(backoffMs(prng, failures++), held.length > 0 ? held[0]!.dueMs - performance.now() : Infinity));
      continue;
    }
    failures = 0;
    const d: Delivery = c.delivery;
    const behaviour = pickBehaviour(prng, spec.mix);
    const fate = spec.deadLetters !== undefined ? poisonFate(d.msg, spec.deadLetters) : "mix";
    if (fate === "dead-letter") {
      await lane.settle(spec.topic, d, "dead-letter");
      continue;
    }
    if (fate === "nack") {
      held.push({ d, dueMs: performance.now() + vt * POISON_HOLD_SHARE, next: "nack" });
      continue;
    }
    switch (behaviour) {
      case "ack":
        // Half of them ride on the next consume (the draw is the jitter holds use; acks hold none).
        if (jitter < RIDING_ACK_SHARE) riding = d;
        else await lane.settle(spec.topic, d, "ack");
        break;
      case "nack":
        await lane.settle(spec.topic, d, "nack");
        break;
      case "extend":
        held.push({ d, dueMs: performance.now() + vt * (0.3 + 0.1 * jitter), next: "extend" });
        break;
      case "slow":
        held.push({ d, dueMs: performance.now() + vt * (0.4 + 0.1 * jitter), next: "ack" });
        break;
      case "late":
        // Past the lease: by then another consumer may hold the message, and this handle is stale.
        held.push({ d, dueMs: performance.now() + vt * (1.1 + 0.2 * jitter), next: "ack" });
        break;
      case "lapse":
        // Walk away: the lease lapses and the message goes to someone else.
        break;
    }
  }
  await ackRiding();
  await settleDue(true);
}

// ---- prober ------------------------------------------------------------------------------------

/** Scenario cycles at most per run (each cycle takes about three visibility timeouts). */
const PROBE_CYCLES_MAX = 10_000;
/** Consumes of one clean-up or one wait for a specific message. */
const PROBE_TAKE_TRIES_MAX = 10;

/** Runs the lease scenarios (see the design note) until stopped, between scenarios. */
export async function runProber(lane: Lane, spec: ProberSpec, stopper: Stopper): Promise<void> {
  const topic = spec.topic;
  const vt = spec.visibilityTimeoutMs;
  let seq = 0;

  // Consume and ack whatever is there, so a scenario starts on an empty topic.
  const clean = async (): Promise<void> => {
    for (let i = 0; i < PROBE_TAKE_TRIES_MAX; i++) {
      const c = await lane.consume(topic, 0);
      if (c.delivery === null) return;
      await lane.settle(topic, c.delivery, "ack");
    }
  };
  // Consume until `msg` is delivered (acking anything else), or give up.
  const take = async (msg: string, waitMs: number): Promise<Delivery | null> => {
    for (let i = 0; i < PROBE_TAKE_TRIES_MAX; i++) {
      const c = await lane.consume(topic, waitMs);
      if (c.delivery === null) {
        if (c.type === "ok") return null;
        await sleepFull(50);
        continue;
      }
      if (c.delivery.msg === msg) return c.delivery;
      await lane.settle(topic, c.delivery, "ack");
    }
    return null;
  };
  // A consume that should find nothing; whatever it finds is acked after `first`.
  const expectNothing = async (): Promise<Delivery | null> => {
    const c = await lane.consume(topic, 0);
    return c.delivery;
  };

  const scenarios: Array<(msg: string) => Promise<void>> = [
    async function nack(msg) {
      const d1 = await take(msg, 200);
      if (d1 === null) return;
      await lane.settle(topic, d1, "nack");
      const d2 = await take(msg, 200);
      if (d2 !== null) await lane.settle(topic, d2, "ack");
    },
    async function ack(msg) {
      const d1 = await take(msg, 200);
      if (d1 === null) return;
      await lane.settle(topic, d1, "ack");
      const again = await expectNothing();
      if (again !== null) await lane.settle(topic, again, "ack");
    },
    async function overlap(msg) {
      const d1 = await take(msg, 200);
      if (d1 === null) return;
      await sleepFull(vt / 2);
      const d2 = await expectNothing();
      await lane.settle(topic, d1, "ack");
      if (d2 !== null) await lane.settle(topic, d2, "ack");
    },
    async function stale(msg) {
      const d1 = await take(msg, 200);
      if (d1 === null) return;
      await sleepFull(vt + 250);
      const d2 = await take(msg, 200);
      // The first handle was replaced by d2 (or lapsed): it must answer 410.
      await lane.settle(topic, d1, "ack");
      if (d2 !== null) await lane.settle(topic, d2, "ack");
    },
    async function extend(msg) {
      const d1 = await take(msg, 200);
      if (d1 === null) return;
      await sleepFull(vt * 0.6);
      await lane.settle(topic, d1, "extend");
      await sleepFull(vt * 0.6);
      const d2 = await expectNothing();
      await lane.settle(topic, d1, "ack");
      if (d2 !== null) await lane.settle(topic, d2, "ack");
    },
  ];

  for (let cycle = 0; cycle < PROBE_CYCLES_MAX && !stopper.stopping; cycle++) {
    for (const scenario of scenarios) {
      if (stopper.stopping) break;
      await clean();
      const msg = `m-${lane.process}-${seq++}`;
      const p = await lane.produce(topic, msg, encodePayload(msg, 32), null);
      if (p.type !== "ok") {
        await sleepFull(100);
        continue;
      }
      await scenario(msg);
    }
  }
  await clean();
}

// ---- replayer ----------------------------------------------------------------------------------

/** Replays pages of random partitions, from 0 or from a random offset below the last end seen. */
export async function runReplayer(lane: Lane, spec: ReplayerSpec, prng: Prng, stopper: Stopper, opsMax: number): Promise<void> {
  const ends = new Map<string, number>();
  for (let i = 0; i < opsMax && !stopper.stopping; i++) {
    await stopper.sleep(spec.intervalMs);
    if (stopper.stopping) break;
    const t = spec.topics[prng.int(spec.topics.length)]!;
    const partition = prng.int(t.partitions);
    const fromStart = prng.next() < 0.5;
    const r = prng.next();
    const key = `${t.name}/${partition}`;
    const end = ends.get(key) ?? 0;
    const offset = fromStart ? 0 : Math.floor(r * (end + 1));
    const out = await lane.replay(t.name, partition, offset, spec.limit);
    if (out.page !== null) ends.set(key, out.page.endOffset);
  }
}

// ---- drain and audit (run by the driver) ---------------------------------------------------------

/**
 * Consumes and acks until an empty consume (the checker's final drain). Returns whether it saw
 * one; `false` after `opsMax` operations or too many errors in a row.
 */
export async function drainTopic(lane: Lane, topic: string, opsMax: number, errorsMax: number): Promise<boolean> {
  let errors = 0;
  for (let i = 0; i < opsMax; i++) {
    const c = await lane.consume(topic, 0);
    if (c.delivery !== null) {
      errors = 0;
      await lane.settle(topic, c.delivery, "ack");
      continue;
    }
    if (c.type === "ok") return true;
    if (++errors > errorsMax) return false;
    await sleepFull(100);
  }
  return false;
}

/** Replays every partition from offset 0 to its end, page by page. Returns the pages read. */
export async function auditTopic(lane: Lane, topic: TopicSpec, pagesMax: number): Promise<number> {
  let pages = 0;
  for (let p = 0; p < topic.partitions; p++) {
    let offset = 0;
    while (pages < pagesMax) {
      const out = await lane.replay(topic.name, p, offset, 1000);
      pages++;
      if (out.page === null || out.page.count === 0 || out.page.nextOffset >= out.page.endOffset) break;
      offset = out.page.nextOffset;
    }
  }
  return pages;
}
