// This node's lease: its registration, its heartbeats, and the local deadline it honours itself.
//
// Leases are timed by the database clock: a heartbeat sets lease_expires_at = now() + nodeLeaseMs
// and other nodes call a node live while lease_expires_at > now(). The node itself cannot read
// that clock, so it keeps a conservative local deadline: the monotonic time at which it SENT the
// heartbeat that succeeded (measured before it even takes a connection), plus nodeLeaseMs, minus
// leaseSafetyMarginMs. The database's now() for that heartbeat is later than the send, so the
// local deadline always passes first: by the time anyone sees the node down, the node has
// already stopped acknowledging (isLive() false). The margin absorbs the difference in clock
// rates and the time between reading the clock and sending.
//
// Heartbeats start every heartbeatIntervalMs (counted from the previous start, so a slow one does
// not push the next one later); a timer at the deadline reports the lapse as a `lease` event even
// when no heartbeat answers at all. A heartbeat that renews no row means another process
// registered this node id with a newer boot: this one is superseded for good and stops
// heartbeating. Every timer is the scheduler's, so a test drives a lapse by advancing a
// ManualScheduler. The statements themselves are ./nodes-sql.ts's.

import type { Logger } from "pino";
import type { Clock } from "../../platform/clock.js";
import type { Scheduler, Timer } from "../../platform/scheduler.js";
import type { ChangeEvent } from "./model.js";
import type { Settings, Warn } from "./options.js";
import type { NodeRow } from "./rows.js";

export interface LeaseStatements {
  /** Registers this node (or takes over its own row after a restart), granting the first lease; returns its node number. */
  register(): Promise<number>;
  /** One heartbeat: every node row, or undefined when no row of this boot was renewed (superseded). */
  heartbeat(): Promise<NodeRow[] | undefined>;
}

export interface LeaseDeps {
  clock: Clock;
  scheduler: Scheduler;
  log: Logger;
  warn: Warn;
  sql: LeaseStatements;
  emit(events: ChangeEvent[]): void;
  /** The membership a successful heartbeat read (this node's own row marked live). */
  membershipRead(rows: NodeRow[]): void;
}

export type LeaseTiming = Pick<Settings, "nodeId" | "heartbeatIntervalMs" | "nodeLeaseMs" | "leaseSafetyMarginMs">;

export class NodeLease {
  superseded = false;
  lastHeartbeatOkMono: number | undefined;
  heartbeatFailures = 0;

  private deadlineMono = -Infinity;
  /** The last `lease` event said live. */
  private reportedLive = false;
  private stopped = false;
  private hbTimer: Timer | undefined;
  private deadlineTimer: Timer | undefined;
  /** Kept apart from d: isLive() is on the path of every owner write. */
  private readonly clock: Clock;

  constructor(
    private readonly o: LeaseTiming,
    private readonly d: LeaseDeps,
  ) {
    this.clock = d.clock;
  }

  /** Monotonic ms (the clock's monoMs) until which this node may act as owner; -Infinity before the first heartbeat. */
  validUntilMono(): number {
    return this.superseded || this.stopped ? -Infinity : this.deadlineMono;
  }

  /** False from the moment the local lease deadline passes: stop acknowledging. */
  isLive(): boolean {
    return this.clock.monoMs() < this.validUntilMono();
  }

  /** Registers (the send time counts as a heartbeat's); returns the node number. */
  async register(): Promise<number> {
    const sentAt = this.clock.monoMs();
    const nodeNumber = await this.d.sql.register();
    this.renewed(sentAt);
    return nodeNumber;
  }

  /** Starts heartbeating, the first one heartbeatIntervalMs from now. */
  start(): void {
    this.scheduleHeartbeat(this.clock.monoMs());
  }

  /** Stops heartbeats and the deadline timer; the lease counts as dead from now on. */
  stop(): void {
    this.stopped = true;
    this.reportedLive = false;
    this.hbTimer?.cancel();
    this.deadlineTimer?.cancel();
  }

  /** The local deadline rule: sentAt + nodeLeaseMs − leaseSafetyMarginMs, never moved back. */
  private renewed(sentAtMono: number): void {
    const deadline = sentAtMono + this.o.nodeLeaseMs - this.o.leaseSafetyMarginMs;
    if (deadline > this.deadlineMono) this.deadlineMono = deadline;
    if (this.isLive() && !this.reportedLive) {
      this.reportedLive = true;
      this.d.emit([{ kind: "lease", live: true }]);
    }
    this.armDeadlineTimer();
  }

  private armDeadlineTimer(): void {
    this.deadlineTimer?.cancel();
    if (this.stopped) return;
    const wait = this.validUntilMono() - this.clock.monoMs();
    if (wait > 0 && Number.isFinite(wait)) {
      this.deadlineTimer = this.d.scheduler.after(wait + 1, () => this.checkDeadline());
    } else {
      this.checkDeadline();
    }
  }

  private checkDeadline(): void {
    if (!this.isLive() && this.reportedLive) {
      this.reportedLive = false;
      this.d.log.warn({ leaseValidUntilMono: this.validUntilMono() }, "this node's control-plane lease ran out: it must stop acknowledging until a heartbeat succeeds");
      this.d.emit([{ kind: "lease", live: false }]);
    } else if (this.isLive()) {
      this.armDeadlineTimer();
    }
  }

  private scheduleHeartbeat(startedAtMono: number): void {
    if (this.stopped || this.superseded) return;
    const delay = Math.max(0, startedAtMono + this.o.heartbeatIntervalMs - this.clock.monoMs());
    this.hbTimer = this.d.scheduler.after(delay, () => void this.heartbeat());
  }

  private async heartbeat(): Promise<void> {
    if (this.stopped || this.superseded) return;
    // Measured before the connection is even taken: the earliest moment the database's now()
    // for this heartbeat could be, so sentAt + lease is never later than the database's expiry.
    const sentAt = this.clock.monoMs();
    try {
      const rows = await this.d.sql.heartbeat();
      if (this.stopped) return;
      if (rows === undefined) {
        this.becomeSuperseded();
        return;
      }
      this.heartbeatFailures = 0;
      this.lastHeartbeatOkMono = this.clock.monoMs();
      this.renewed(sentAt);
      this.d.membershipRead(rows);
    } catch (e) {
      this.heartbeatFailures++;
      this.d.warn("heartbeat", { err: (e as Error).message, failures: this.heartbeatFailures, leaseLeftMs: Math.round(this.validUntilMono() - this.clock.monoMs()) }, "heartbeat failed");
      this.checkDeadline();
    } finally {
      this.scheduleHeartbeat(sentAt);
    }
  }

  private becomeSuperseded(): void {
    if (this.superseded) return;
    this.superseded = true;
    this.hbTimer?.cancel();
    this.d.log.error({ node: this.o.nodeId }, "another process registered this node id with a newer boot; this process stops serving");
    this.reportedLive = false;
    this.d.emit([{ kind: "lease", live: false }, { kind: "superseded" }]);
  }
}
