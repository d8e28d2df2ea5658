// The SDK's fault seam: the few decisions of the consumer loops that a planted bug can change, as
// one typed hooks object a client is handed. A client runs NO_CLIENT_FAULTS, whose hooks keep the
// documented behaviour; the seeded SDK bugs that calibrate the client scenarios
// (src/verify/workloads/client/seeded-bugs.ts, `narad verify calibrate`) are implementations of
// it. This module is not part of the SDK's public entry (src/client/index.ts, the package's
// "./client" export): only the toolkit imports it, and it installs faults with the symbol below,
// so no option a user can pass and no environment variable reaches these hooks.
//
// The hooks sit where a loop decides once per failure or per exit, never per message read.

import type { Message } from "./narad.js";

export interface ClientFaults {
  /** process(): after a retryable consume failure (`err`), whether the loop goes on polling. */
  keepsPolling(err: unknown): boolean;
  /** process(): after a handler threw, whether the loop nacks its message (else the lease lapses). */
  nacksFailedMessage(): boolean;
  /** messages(): the leased messages not yet yielded when the iteration ends, which it nacks. */
  nackedOnExit(rest: Message[]): Message[];
}

export const NO_CLIENT_FAULTS: ClientFaults = {
  keepsPolling: () => true,
  nacksFailedMessage: () => true,
  nackedOnExit: (rest) => rest,
};

/** The method key that installs faults on a client: `client[INSTALL_CLIENT_FAULTS](faults)`. */
export const INSTALL_CLIENT_FAULTS: unique symbol = Symbol("narad.client.installFaults");
