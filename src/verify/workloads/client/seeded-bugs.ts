// Seeded SDK bugs: test-only implementations of the SDK's fault seam (src/client/faults.ts), so the
// client scenarios can prove they catch a broken consumer loop (a checker that has never caught a
// real bug is untested). A run turns one on with `--bug NAME` (`narad verify run --workload
// client`) and calibration does for its rows; it is installed on the consumers' clients only,
// through the seam's symbol, never by an option or variable a user's client reads.

import { NaradAmbiguousError, NaradConnectionError, type Narad } from "../../../client/index.js";
import { INSTALL_CLIENT_FAULTS, NO_CLIENT_FAULTS, type ClientFaults } from "../../../client/faults.js";

export const CLIENT_SEEDED_BUGS = {
  "process-stops-after-reset": "process() stops polling after a consume fails on a reset connection (it waits for its signal, and never polls again)",
  "messages-drops-batch-on-exit": "messages() drops the rest of its batch when the iteration is left early: those messages are not nacked, so they wait for their leases to lapse",
  "process-skips-nack": "process() does not nack a message whose handler threw: it comes back only when its lease lapses",
} as const;

export type ClientBugName = keyof typeof CLIENT_SEEDED_BUGS;
export const CLIENT_BUG_NAMES = Object.keys(CLIENT_SEEDED_BUGS) as ClientBugName[];

export function isClientBugName(s: string): s is ClientBugName {
  return Object.prototype.hasOwnProperty.call(CLIENT_SEEDED_BUGS, s);
}

/** Whether `err` is a request that broke on a reset connection (an RST, or one refused at accept). */
function isReset(err: unknown): boolean {
  if (!(err instanceof NaradAmbiguousError || err instanceof NaradConnectionError)) return false;
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ECONNRESET" || code === "UND_ERR_SOCKET" || code === "EPIPE" || code === "ECONNREFUSED") return true;
  }
  return false;
}

export function clientFaults(names: readonly ClientBugName[]): ClientFaults {
  if (names.length === 0) return NO_CLIENT_FAULTS;
  const on = new Set(names);
  return {
    keepsPolling: (err) => !(on.has("process-stops-after-reset") && isReset(err)),
    nacksFailedMessage: () => !on.has("process-skips-nack"),
    nackedOnExit: (rest) => (on.has("messages-drops-batch-on-exit") ? [] : rest),
  };
}

/** Plants the bugs on a consumer's client (none: the SDK as shipped). */
export function installClientBugs(client: Narad, names: readonly ClientBugName[]): void {
  if (names.length > 0) client[INSTALL_CLIENT_FAULTS](clientFaults(names));
}
