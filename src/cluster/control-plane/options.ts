// The control plane's settings, their defaults and its fixed limits (docs/cluster-control-plane.md,
// "Settings and limits"), and the one rate limit on its warnings. A lost database makes every
// heartbeat, resync and reconnect fail several times a second; one warning per kind per
// warnIntervalMs says so without flooding the log.

import type { Logger } from "pino";
import type { Clock } from "../../platform/clock.js";
import type { Scheduler } from "../../platform/scheduler.js";

export const CONTROL_PLANE_DEFAULTS = {
  heartbeatIntervalMs: 1000,
  nodeLeaseMs: 5000,
  leaseSafetyMarginMs: 500,
  resyncIntervalMs: 5000,
  poolMax: 4,
  statementTimeoutMs: 3000,
  connectTimeoutMs: 2000,
  listenReconnectMinMs: 100,
  listenReconnectMaxMs: 5000,
  startupTimeoutMs: 15_000,
  ownsWithoutLease: false,
} as const;

export const CONTROL_PLANE_LIMITS = {
  /** Topic or user names waiting for a targeted refresh; past it, one full resync instead. */
  refreshTargetsMax: 1024,
  /** Attempts of a transaction that hit a serialization failure or deadlock. */
  txAttemptsMax: 3,
  /** Node numbers fit in 16 bits (receipt handles). */
  nodeNumberMax: 65535,
  /** At most one warning per kind of failure in this interval. */
  warnIntervalMs: 5000,
} as const;

export interface ControlPlaneOptions {
  /** postgres://user:password@host:port/database */
  url: string;
  nodeId: string;
  /** The URL other nodes use to reach this one. */
  advertiseUrl: string;
  /** Changes at every process start. */
  bootId: string;
  clock: Clock;
  /** Every timer of the control plane (heartbeats, lease check, resync, reconnects, back-offs); systemScheduler when absent. */
  scheduler?: Scheduler;
  logger: Logger;
  heartbeatIntervalMs?: number;
  nodeLeaseMs?: number;
  /** The local lease deadline is this much earlier than the database's. */
  leaseSafetyMarginMs?: number;
  resyncIntervalMs?: number;
  poolMax?: number;
  statementTimeoutMs?: number;
  connectTimeoutMs?: number;
  listenReconnectMinMs?: number;
  listenReconnectMaxMs?: number;
  /** connect() retries an unreachable database this long before giving up. */
  startupTimeoutMs?: number;
  /**
   * Test only, the seeded bug fenced-leader-answers (src/broker/seeded-bugs.ts): the owner check
   * trusts the cached view and ignores the lease deadline, as a zombie leader would.
   */
  ownsWithoutLease?: boolean;
}

/** The options with every default filled in; the clock, scheduler and logger are kept apart. */
export type Settings = Required<Omit<ControlPlaneOptions, "clock" | "scheduler" | "logger">>;

/** Fills in the defaults and refuses a lease that one heartbeat interval and the margin would use up. */
export function settingsOf(opts: ControlPlaneOptions): Settings {
  const { clock: _clock, scheduler: _scheduler, logger: _logger, ...given } = opts;
  const o = { ...CONTROL_PLANE_DEFAULTS, ...stripUndefined(given) } as Settings;
  if (!(o.nodeLeaseMs > o.heartbeatIntervalMs + o.leaseSafetyMarginMs)) {
    throw new Error(`control plane: nodeLeaseMs (${o.nodeLeaseMs}) must exceed heartbeatIntervalMs + leaseSafetyMarginMs (${o.heartbeatIntervalMs + o.leaseSafetyMarginMs})`);
  }
  return o;
}

/** A warning, logged at most once per kind every CONTROL_PLANE_LIMITS.warnIntervalMs. */
export type Warn = (kind: string, fields: Record<string, unknown>, msg: string) => void;

export function rateLimitedWarn(log: Logger, clock: Clock): Warn {
  const lastWarnMono = new Map<string, number>();
  return (kind, fields, msg) => {
    const now = clock.monoMs();
    const last = lastWarnMono.get(kind);
    if (last !== undefined && now - last < CONTROL_PLANE_LIMITS.warnIntervalMs) return;
    lastWarnMono.set(kind, now);
    log.warn(fields, msg);
  };
}

/** The URL without its password, for logs and messages. */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    return u.toString();
  } catch {
    return "(unparseable control-plane URL)";
  }
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
