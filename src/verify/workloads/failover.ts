// The nemesis of replicated topics: faults aimed at a partition's leader (and, for the double
// faults, at one of its followers), each recorded as ordinary history v1 fault lines.
//
// Design note.
// - The target is a partition, not a node: each step draws a partition and asks the cluster
//   (GET /v1/topics/t through the SDK, from the first node that answers) who leads it and who
//   follows, so the fault meets the leader wherever failovers have moved it. Every step makes
//   exactly four draws from a seeded PRNG (wait, partition, hold, order), whatever happened, and
//   the kinds are taken in a rotation the seed shuffles once: a short run meets every kind.
// - The faults (docs/verification-faults.md, "Replicated topics"):
//     kill, power-loss, terminate  the leader; started again after the hold.
//     pause          SIGSTOP of the leader, held longer than the node lease, so the followers elect.
//     isolate        the leader cut from its followers AND from PostgreSQL while clients still
//                    reach it: the proxy in front of its peer address is cut (no node reaches it),
//                    the proxy in front of each follower holds the connections it opened (cut by
//                    source), and its own control-plane proxy is cut. It must stop acknowledging
//                    by its lease deadline. Recorded as one `cut` of the leader and one `heal`.
//     pause-kill     the double fault: the first follower frozen, then the leader killed; held;
//                    the follower resumed (an election among the followers), then the leader
//                    started again.
//     lag-kill       the leader's line to its first follower cut (by source), so that follower
//                    falls behind while the leader commits with the other; then the leader killed.
//                    An election must not take the follower that lacks acknowledged records.
//     lag-power-loss the leader's line to its second follower cut; then power loss of the first
//                    follower and a kill of the leader at once. What a quorum acknowledged rested
//                    on the leader and the first follower; only the follower's fsync keeps it.
// - Healing by need, and stop() restores everything (resume, start, heal every proxy), recording
//   each step, as the ordinary nemesis does.

import { Narad } from "../../client/index.js";
import { applyFault, interruptibleSleep, restoreTarget, type FaultRecorder, type NemesisTarget } from "../nemesis/index.js";
import { Prng } from "../nemesis/prng.js";
import { countersToJson, type Proxy } from "../proxy/index.js";
import type { Credentials } from "./protocol.js";

export type ReplicatedFaultKind = "kill" | "power-loss" | "terminate" | "pause" | "isolate" | "pause-kill" | "lag-kill" | "lag-power-loss";
export const REPLICATED_FAULT_KINDS: readonly ReplicatedFaultKind[] = ["kill", "power-loss", "terminate", "pause", "isolate", "pause-kill", "lag-kill", "lag-power-loss"];

export function isReplicatedFaultKind(k: string): k is ReplicatedFaultKind {
  return (REPLICATED_FAULT_KINDS as readonly string[]).includes(k);
}

/** Kinds that need every node in the test-only power-loss mode. */
export function needsPowerLoss(kinds: readonly ReplicatedFaultKind[]): boolean {
  return kinds.some((k) => k === "power-loss" || k === "lag-power-loss");
}

/** A node of the cluster and the lines in front of it. */
export interface FailoverTarget extends NemesisTarget {
  /** Other nodes reach this one through it (its advertised URL). */
  peerProxy: Proxy;
  /** It reaches PostgreSQL through it. */
  controlPlaneProxy: Proxy;
}

export const FAILOVER_LIMITS = {
  /** One placement request. */
  placementTimeoutMs: 2_000,
  /** A lagging follower is left behind this long before the leader goes. */
  lagMs: 700,
} as const;

export interface FailoverNemesisOptions {
  targets: FailoverTarget[];
  topic: string;
  partitions: number;
  seed: number;
  kinds: ReplicatedFaultKind[];
  intervalMs: number;
  intervalJitterMs: number;
  /** How long each fault is held (a pause or an isolation: at least `failoverHoldMinMs`). */
  holdMs: number;
  holdJitterMs: number;
  /** The least hold that lets the leader's lease lapse and a follower take over. */
  failoverHoldMinMs: number;
  /** Credentials of the placement requests (security on), or null. */
  admin: Credentials | null;
  record: FaultRecorder;
  /** Faults at most. */
  faultsMax?: number;
}

interface Leadership {
  leader: FailoverTarget;
  followers: FailoverTarget[];
}

export class FailoverNemesis {
  private readonly prng: Prng;
  private readonly rotation: ReplicatedFaultKind[];
  private loop: Promise<void> | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;
  private faultsApplied = 0;
  /** Steps skipped because no node told the placement, or the partition had too few replicas. */
  readonly skipped: string[] = [];

  constructor(private readonly o: FailoverNemesisOptions) {
    if (o.targets.length < 2) throw new RangeError("faults on a replicated topic need a cluster");
    if (o.kinds.length === 0) throw new RangeError("a failover nemesis needs at least one fault kind");
    for (const k of o.kinds) if (!isReplicatedFaultKind(k)) throw new RangeError(`unknown fault kind ${JSON.stringify(k)} for a replicated topic`);
    if (needsPowerLoss(o.kinds) && o.targets.some((t) => !t.node.powerLossMode)) throw new RangeError("power loss needs every node in the power-loss mode");
    this.prng = new Prng(o.seed);
    // The rotation, shuffled once by the seed (Fisher-Yates).
    this.rotation = [...o.kinds];
    for (let i = this.rotation.length - 1; i > 0; i--) {
      const j = this.prng.int(i + 1);
      [this.rotation[i], this.rotation[j]] = [this.rotation[j]!, this.rotation[i]!];
    }
  }

  get applied(): number {
    return this.faultsApplied;
  }

  start(): void {
    if (this.loop) throw new Error("this nemesis has already been started");
    this.loop = this.run();
  }

  private sleep(ms: number): Promise<void> {
    return interruptibleSleep(ms, this.stopping, (w) => (this.wake = w));
  }

  /** Who leads `partition` now and who follows, by the first node that answers. */
  private async leadership(partition: number): Promise<Leadership | null> {
    for (const t of this.o.targets) {
      if (!t.node.running || t.node.paused) continue;
      const c = new Narad({ url: t.node.url, connections: 1, requestTimeoutMs: FAILOVER_LIMITS.placementTimeoutMs, ...(this.o.admin ? { user: this.o.admin.user, password: this.o.admin.password } : {}) });
      try {
        const p = (await c.getTopic(this.o.topic)).placement?.find((x) => x.partition === partition);
        if (p === undefined) continue;
        const byName = (n: string) => this.o.targets.find((x) => x.node.name === n);
        const leader = byName(p.node);
        const followers = p.replicas.filter((n) => n !== p.node).map(byName).filter((x): x is FailoverTarget => x !== undefined);
        if (leader === undefined) continue;
        return { leader, followers };
      } catch {
        // Another node may answer.
      } finally {
        await c.destroy().catch(() => undefined);
      }
    }
    return null;
  }

  private async run(): Promise<void> {
    const o = this.o;
    const faultsMax = o.faultsMax ?? 10_000;
    for (let step = 0; !this.stopping && this.faultsApplied < faultsMax; step++) {
      const waitMs = this.prng.jittered(o.intervalMs, o.intervalJitterMs);
      const partition = this.prng.int(o.partitions);
      let holdMs = this.prng.jittered(o.holdMs, o.holdJitterMs);
      this.prng.int(2); // the fourth draw: kept so every step draws alike
      // By faults applied, not steps: a kind skipped (no placement known yet, too few followers)
      // is tried again at the next step, so a short run still meets every kind.
      const kind = this.rotation[this.faultsApplied % this.rotation.length]!;
      await this.sleep(waitMs);
      if (this.stopping) break;
      const who = await this.leadership(partition);
      const followersNeeded = kind === "lag-power-loss" ? 2 : kind === "pause-kill" || kind === "lag-kill" ? 1 : 0;
      if (who === null || who.followers.length < followersNeeded) {
        if (this.skipped.length < 100) this.skipped.push(`${kind} of ${o.topic}/${partition}: ${who === null ? "no node told its placement" : "too few followers"}`);
        continue;
      }
      if (kind !== "kill" && kind !== "power-loss" && kind !== "terminate") holdMs = Math.max(holdMs, o.failoverHoldMinMs);
      this.faultsApplied++;
      await this.apply(kind, who, holdMs);
    }
  }

  private async apply(kind: ReplicatedFaultKind, who: Leadership, holdMs: number): Promise<void> {
    const rec = this.o.record;
    const { leader, followers } = who;
    switch (kind) {
      case "kill":
      case "power-loss":
      case "terminate":
        await applyFault(rec, leader, kind);
        await this.sleep(holdMs);
        await restoreTarget(rec, leader);
        return;
      case "pause":
        await applyFault(rec, leader, "pause");
        await this.sleep(holdMs);
        await restoreTarget(rec, leader);
        return;
      case "isolate":
        await this.isolate(leader, followers);
        await this.sleep(holdMs);
        await this.healLines(leader);
        return;
      case "pause-kill": {
        const frozen = followers[0]!;
        await applyFault(rec, frozen, "pause");
        await this.sleep(FAILOVER_LIMITS.lagMs);
        await applyFault(rec, leader, "kill");
        await this.sleep(holdMs);
        await restoreTarget(rec, frozen);
        await this.sleep(holdMs / 2);
        await restoreTarget(rec, leader);
        return;
      }
      case "lag-kill":
      case "lag-power-loss": {
        const behind = kind === "lag-kill" ? followers[0]! : followers[1]!;
        await this.cutLink(leader, behind);
        await this.sleep(FAILOVER_LIMITS.lagMs);
        if (kind === "lag-power-loss") await applyFault(rec, followers[0]!, "power-loss");
        await applyFault(rec, leader, "kill");
        await this.sleep(holdMs);
        if (kind === "lag-power-loss") await restoreTarget(rec, followers[0]!);
        await this.sleep(holdMs / 2);
        await restoreTarget(rec, leader);
        await this.healLines(leader);
        return;
      }
    }
  }

  /** Records a `cut` of `node` over `lines`, acting with `act`; the evidence is each proxy's counters. */
  private cutRecorded(node: string, value: Record<string, unknown>, act: () => Record<string, unknown>): void {
    this.o.record("invoke", "fault", { kind: "cut", node, ...value });
    try {
      this.o.record("ok", "fault", { kind: "cut", node, ...value, ...act() });
    } catch (e) {
      this.o.record("info", "fault", { kind: "cut", node, ...value, error: (e as Error).message });
    }
  }

  private isolate(leader: FailoverTarget, followers: FailoverTarget[]): void {
    const others = this.o.targets.filter((t) => t !== leader);
    this.cutRecorded(leader.node.name, { lines: ["peers", "control-plane"], followers: followers.map((f) => f.node.name) }, () => {
      leader.peerProxy.cut("both");
      for (const t of others) t.peerProxy.cutFrom(leader.node.name);
      leader.controlPlaneProxy.cut("both");
      return {
        proxy: {
          peers_in: countersToJson(leader.peerProxy.counters()),
          control_plane: countersToJson(leader.controlPlaneProxy.counters()),
          peers_out: Object.fromEntries(others.map((t) => [t.node.name, countersToJson(t.peerProxy.counters())])),
        },
      };
    });
  }

  private cutLink(leader: FailoverTarget, follower: FailoverTarget): void {
    this.cutRecorded(leader.node.name, { lines: ["peer"], to: [follower.node.name] }, () => {
      follower.peerProxy.cutFrom(leader.node.name);
      return { proxy: { peers_out: { [follower.node.name]: countersToJson(follower.peerProxy.counters()) } } };
    });
  }

  /** Heals every line cut for `leader` (its own proxies, and its connections to the others). */
  private async healLines(leader: FailoverTarget): Promise<void> {
    const cutNow = leader.peerProxy.toxics().upstream.length + leader.peerProxy.toxics().downstream.length > 0 || leader.controlPlaneProxy.toxics().upstream.length > 0 || this.o.targets.some((t) => t.peerProxy.cutSources().includes(leader.node.name));
    if (!cutNow) return;
    const node = leader.node.name;
    this.o.record("invoke", "fault", { kind: "heal", node });
    leader.peerProxy.heal();
    leader.controlPlaneProxy.heal();
    for (const t of this.o.targets) t.peerProxy.healFrom(node);
    this.o.record("ok", "fault", { kind: "heal", node, proxy: { peers_in: countersToJson(leader.peerProxy.counters()), control_plane: countersToJson(leader.controlPlaneProxy.counters()) } });
  }

  /** Stops scheduling, waits for the fault in progress, then restores every node and line. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    await this.loop;
    for (const t of this.o.targets) await restoreTarget(this.o.record, t);
    for (const t of this.o.targets) await this.healLines(t);
  }
}
