// Typed errors of the control plane, and the one place that decides whether a PostgreSQL error
// means "the control plane is unreachable" (retry later) or is a real answer (a constraint
// violation, a bug).
//
// ControlPlaneUnavailable extends NaradError with the table's `unavailable` code so that the HTTP
// layer answers 503 without knowing about PostgreSQL. A write that failed before its COMMIT was
// sent certainly did not happen (definite); one that lost its connection during COMMIT may have
// (indefinite), and says so.

import { NaradError } from "../protocol/errors.js";

export const CONTROL_PLANE_UNAVAILABLE_MESSAGE = "the control plane is unreachable; retry";

export class ControlPlaneUnavailable extends NaradError {
  /** false when the write may have taken effect (the connection was lost during COMMIT). */
  override readonly definite: boolean;

  constructor(
    readonly mayHaveHappened: boolean,
    override readonly cause?: unknown,
  ) {
    super(
      "unavailable",
      mayHaveHappened
        ? `${CONTROL_PLANE_UNAVAILABLE_MESSAGE} (the change may or may not have been made; check, then retry)`
        : CONTROL_PLANE_UNAVAILABLE_MESSAGE,
    );
    this.name = "ControlPlaneUnavailable";
    this.definite = !mayHaveHappened;
  }
}

/**
 * Why a partition move was refused. Suggested HTTP statuses: 400 for same_node and
 * node_unknown, 409 for move_in_progress, not_moving, stale_epoch and replicated, 503 for node_down.
 */
export type MoveRefusal = "same_node" | "node_unknown" | "node_down" | "move_in_progress" | "not_moving" | "stale_epoch" | "replicated";

const MOVE_STATUS: Record<MoveRefusal, number> = {
  same_node: 400,
  node_unknown: 400,
  node_down: 503,
  move_in_progress: 409,
  not_moving: 409,
  stale_epoch: 409,
  // Moving one replica of a replicated partition is not built yet (issue 13, part 5).
  replicated: 409,
};

export class MoveRefused extends Error {
  readonly status: number;
  constructor(
    readonly reason: MoveRefusal,
    message: string,
  ) {
    super(message);
    this.name = "MoveRefused";
    this.status = MOVE_STATUS[reason];
  }
}

/** This process's registration was taken over by a newer process with the same node id. */
export class NodeSuperseded extends Error {
  constructor(nodeId: string) {
    super(`node ${nodeId} was registered again by another process (a newer boot); this process must stop serving`);
    this.name = "NodeSuperseded";
  }
}

interface PgLikeError {
  code?: string;
  message?: string;
}

// SQLSTATE classes and codes that mean the server or the connection is not usable now:
// 08 connection exception, 53 insufficient resources, 57P01..57P05 shutdown / cannot connect now,
// 57014 query canceled (our statement_timeout), 55P03 lock not available (our lock_timeout).
const UNAVAILABLE_SQLSTATE = /^(08|53|57P0[1-5]$|57014$|55P03$|58)/;
// Node socket errors and node-postgres's own connection errors carry no SQLSTATE.
const UNAVAILABLE_ERRNO = new Set(["ECONNREFUSED", "ECONNRESET", "EPIPE", "ETIMEDOUT", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "ENOTFOUND", "ECONNABORTED"]);
const UNAVAILABLE_TEXT = /Connection terminated|timeout exceeded when trying to connect|Query read timeout|Client has encountered a connection error|Connection ended|not queryable|Client was closed|Cannot use a pool after calling end/i;

/** True when the error says PostgreSQL cannot be reached or cannot answer now. */
export function isUnavailableError(e: unknown): boolean {
  if (e instanceof ControlPlaneUnavailable) return true;
  if (typeof e !== "object" || e === null) return false;
  const x = e as PgLikeError;
  if (typeof x.code === "string") {
    if (UNAVAILABLE_ERRNO.has(x.code)) return true;
    if (/^[0-9A-Z]{5}$/.test(x.code)) return UNAVAILABLE_SQLSTATE.test(x.code);
  }
  return typeof x.message === "string" && UNAVAILABLE_TEXT.test(x.message);
}

/** unique_violation */
export function isUniqueViolation(e: unknown): boolean {
  return typeof e === "object" && e !== null && (e as PgLikeError).code === "23505";
}

/** serialization_failure, deadlock_detected: the transaction may simply be run again. */
export function isRetryableConflict(e: unknown): boolean {
  const c = typeof e === "object" && e !== null ? (e as PgLikeError).code : undefined;
  return c === "40001" || c === "40P01";
}
