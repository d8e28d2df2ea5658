// The LISTEN connection: every write NOTIFYs narad_changes with what it changed (`topic:NAME`,
// `user:NAME`, `nodes`), and each node listens on a dedicated connection (not pooled: a pooled
// one would be handed to a query) and re-reads just that entity through the refresh queue. So a
// change reaches every node within a notification's latency.
//
// A lost LISTEN connection is reopened with exponential back-off (listenReconnectMinMs …
// listenReconnectMaxMs, with jitter, on the scheduler), and every reconnect is followed by a full
// resync, because notifications sent while it was down are gone. A connection that dies silently
// is covered by the periodic resync (./refresh.ts).

import pg from "pg";
import type { Logger } from "pino";
import type { Scheduler, Timer } from "../../platform/scheduler.js";
import type { Settings, Warn } from "./options.js";
import { parseTargets, type RefreshQueue } from "./refresh.js";
import { NOTIFY_CHANNEL } from "./rows.js";

export interface ListenDeps {
  scheduler: Scheduler;
  log: Logger;
  warn: Warn;
  refresh: RefreshQueue;
}

export class Listener {
  private client: pg.Client | undefined;
  /** Reconnect attempts since the connection was last up; 0 before the first connect. */
  private attempts = 0;
  private reconnectTimer: Timer | undefined;
  private stopped = false;

  constructor(
    private readonly o: Settings,
    private readonly d: ListenDeps,
  ) {}

  /** The LISTEN connection is up. */
  get listening(): boolean {
    return this.client !== undefined;
  }

  /** Opens the connection and LISTENs; a failure is thrown (then call scheduleReconnect). */
  async connect(): Promise<void> {
    const c = new pg.Client({
      connectionString: this.o.url,
      connectionTimeoutMillis: this.o.connectTimeoutMs,
      keepAlive: true,
      statement_timeout: this.o.statementTimeoutMs,
      query_timeout: this.o.statementTimeoutMs + 1000,
      application_name: `narad-listen ${this.o.nodeId}`,
    });
    const lost = (e?: Error): void => this.lost(c, e);
    c.on("error", lost);
    c.on("end", () => lost());
    c.on("notification", (n) => this.onNotification(n.payload));
    try {
      await c.connect();
      await c.query(`LISTEN ${NOTIFY_CHANNEL}`);
    } catch (e) {
      c.removeAllListeners("end");
      c.on("error", () => undefined);
      await c.end().catch(() => undefined);
      throw e;
    }
    if (this.stopped) {
      await c.end().catch(() => undefined);
      return;
    }
    const again = this.attempts > 0;
    this.client = c;
    this.attempts = 0;
    if (again) {
      this.d.log.info("LISTEN connection back; resyncing what it missed");
      this.d.refresh.request({ full: true }).catch((e: Error) => this.d.warn("resync", { err: e.message }, "resync after LISTEN reconnect failed"));
    }
  }

  /** Tries again after the back-off, and again after each failure, until connected or stopped. */
  scheduleReconnect(): void {
    if (this.stopped || this.reconnectTimer !== undefined) return;
    const base = Math.min(this.o.listenReconnectMaxMs, this.o.listenReconnectMinMs * 2 ** Math.min(this.attempts, 20));
    const delay = Math.round(base * (0.8 + 0.4 * Math.random()));
    this.attempts++;
    this.reconnectTimer = this.d.scheduler.after(delay, () => {
      this.reconnectTimer = undefined;
      this.connect().catch((e: Error) => {
        this.d.warn("listen", { err: e.message }, "LISTEN reconnect failed");
        this.scheduleReconnect();
      });
    });
  }

  /** Stops reconnecting and closes the connection. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.reconnectTimer?.cancel();
    const c = this.client;
    this.client = undefined;
    if (c !== undefined) {
      c.removeAllListeners("end");
      c.on("error", () => undefined);
      await c.end().catch(() => undefined);
    }
  }

  private lost(c: pg.Client, e?: Error): void {
    if (this.client !== c) return;
    this.client = undefined;
    c.removeAllListeners("end");
    c.on("error", () => undefined);
    c.end().catch(() => undefined);
    if (this.stopped) return;
    this.d.warn("listen", { err: e?.message }, "LISTEN connection lost; reconnecting (the periodic resync covers the gap)");
    this.scheduleReconnect();
  }

  private onNotification(payload: string | undefined): void {
    if (this.stopped) return;
    this.d.refresh.request(parseTargets([payload ?? ""])).catch((e: Error) => this.d.warn("refresh", { err: e.message }, "refresh after a notification failed; the next resync will"));
  }
}
