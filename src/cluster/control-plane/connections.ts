// The connections to PostgreSQL and the one way a statement runs in a transaction. A pool of
// poolMax connections serves writes and view reads; heartbeats get a pool of their own (one
// connection) so that slow writes never delay them, with a timeout no longer than the lease a
// heartbeat extends: a later answer could not extend anything. (The LISTEN connection is
// ./listen.ts's.) Every statement is bounded by statementTimeoutMs on the server and a second
// more on the client; every connection by connectTimeoutMs.
//
// Failures are sorted here, once: a connection-level failure is ControlPlaneUnavailable, definite
// unless COMMIT was already sent (then the change may have been made); a serialization failure
// or deadlock is retried up to txAttemptsMax; anything else is the statement's own answer.

import pg from "pg";
import { ControlPlaneUnavailable, isRetryableConflict, isUnavailableError } from "../errors.js";
import { CONTROL_PLANE_LIMITS, type Settings, type Warn } from "./options.js";
import { NOTIFY_CHANNEL } from "./rows.js";

/** The body of a transaction, on its connection. */
export type InTransaction<T> = (c: pg.PoolClient) => Promise<T>;

/**
 * A write: runs fn in a transaction that NOTIFYs the targets (`topic:NAME`, `user:NAME`,
 * `nodes`), and returns once this node's view has re-read them (the façade's discipline).
 */
export type Write = <T>(targets: string[], fn: InTransaction<T>) => Promise<T>;

export class Connections {
  readonly pool: pg.Pool;
  /** Heartbeats get their own connection so slow writes never delay them. */
  readonly hbPool: pg.Pool;

  constructor(o: Settings, warn: Warn) {
    const common: pg.PoolConfig = {
      connectionString: o.url,
      connectionTimeoutMillis: o.connectTimeoutMs,
      keepAlive: true,
      idle_in_transaction_session_timeout: o.statementTimeoutMs * 2,
      lock_timeout: o.statementTimeoutMs,
    };
    this.pool = new pg.Pool({
      ...common,
      max: o.poolMax,
      idleTimeoutMillis: 30_000,
      statement_timeout: o.statementTimeoutMs,
      query_timeout: o.statementTimeoutMs + 1000,
      application_name: `narad ${o.nodeId}`,
    });
    // The heartbeat is useless once it takes longer than the lease it extends.
    const hbTimeoutMs = Math.max(250, o.nodeLeaseMs - o.leaseSafetyMarginMs);
    this.hbPool = new pg.Pool({
      ...common,
      max: 1,
      connectionTimeoutMillis: Math.min(o.connectTimeoutMs, hbTimeoutMs),
      statement_timeout: hbTimeoutMs,
      query_timeout: hbTimeoutMs,
      application_name: `narad-heartbeat ${o.nodeId}`,
    });
    // Idle connections that die (a database restart) emit here; without a handler they would
    // crash the process. The next query opens a new connection.
    this.pool.on("error", (e) => warn("pool", { err: e.message }, "an idle control-plane connection failed"));
    this.hbPool.on("error", (e) => warn("pool", { err: e.message }, "an idle heartbeat connection failed"));
  }

  /**
   * One transaction on a pooled connection, retried on serialization failures and deadlocks;
   * the notify payloads are sent inside it (delivered at commit).
   * Connection-level failures become ControlPlaneUnavailable, definite unless COMMIT was sent.
   */
  async tx<T>(fn: InTransaction<T>, notify: string[] = [], mode = "BEGIN"): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      let c: pg.PoolClient;
      try {
        c = await this.pool.connect();
      } catch (e) {
        throw isUnavailableError(e) ? new ControlPlaneUnavailable(false, e) : e;
      }
      // A checked-out client that loses its connection emits 'error'; the pool listens only to
      // idle ones, and an unheard 'error' would crash the process. The failing query rejects too,
      // which is where the error is handled.
      let lostConnection: Error | undefined;
      const onError = (e: Error): void => {
        lostConnection = e;
      };
      c.on("error", onError);
      const release = (err?: Error): void => {
        c.removeListener("error", onError);
        c.release(err ?? lostConnection);
      };
      let commitSent = false;
      try {
        await c.query(mode);
        const r = await fn(c);
        for (const n of notify) await c.query("SELECT pg_notify($1, $2)", [NOTIFY_CHANNEL, n]);
        commitSent = true;
        await c.query("COMMIT");
        release();
        return r;
      } catch (e) {
        if (isUnavailableError(e) || lostConnection !== undefined) {
          release(e as Error); // destroys the connection
          throw new ControlPlaneUnavailable(commitSent, e);
        }
        try {
          await c.query("ROLLBACK");
          release();
        } catch (e2) {
          release(e2 as Error);
        }
        if (isRetryableConflict(e) && attempt < CONTROL_PLANE_LIMITS.txAttemptsMax) continue;
        throw e;
      }
    }
  }

  async end(): Promise<void> {
    await Promise.all([this.pool.end().catch(() => undefined), this.hbPool.end().catch(() => undefined)]);
  }
}
