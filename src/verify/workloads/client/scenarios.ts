// The client scenarios (`narad verify run --workload client --scenario NAME`): what happens to the
// consumers' line or node, when, and the prediction written down before the scenario's first run
// (seed 002's second lesson), as data: a sentence for people and bounds a run is checked against.
// The run records both in the history's config line; the report sets each bound beside what was
// measured, and a bound the run broke is a finding, shown first.
//
// Two consumer APIs of the SDK run side by side in every run, each on its own topic (so each has
// its own silence and lag): `process` (Narad.process(), acks riding on the next consume) and
// `messages` (the Narad.messages() iterator, batches of 10, the application acking each message).
// Both go through the fault proxy; the producer has a direct line to the node.
//
// Fault shapes:
//   cut          the consumers' line refused (proxy mode "reset"): every connection torn down with
//                an RST, every new one reset at accept, until the heal (the seed's cut);
//   latency      every byte from the node to the consumers delayed by `latencyMs`; bytes already
//                in the proxy at the heal keep their delay;
//   pause        the node frozen with SIGSTOP, then SIGCONT (both lines stall: the producer's too);
//   restart      the node stopped with SIGTERM, left down `durationMs`, started again;
//   app-restart  the application restarts its consumers (a deploy): the process() loop is ended
//                from inside a handler and started again; the iterator is left in the middle of a
//                batch (after a 1 s slow handler let a backlog build) and a new one started.

/** One fault of a scenario, at `atMs` after publishing began. */
export type ClientFault =
  | { kind: "cut"; atMs: number; durationMs: number }
  | { kind: "latency"; atMs: number; durationMs: number; latencyMs: number }
  | { kind: "pause"; atMs: number; durationMs: number }
  | { kind: "restart"; atMs: number; durationMs: number }
  | { kind: "app-restart"; atMs: number };

export type ConsumerApi = "process" | "messages";
export const CONSUMER_APIS: readonly ConsumerApi[] = ["process", "messages"];

/**
 * A prediction, checkable: each bound is compared with the run's measure.
 * - maxSilenceMs: after each fault's end, how long until the application is handed a message
 *   again while messages were waiting;
 * - maxLagMs: the longest from a produce's 202 to the first time a handler finished the message;
 * - maxAppErrors: errors that reached the application other than the retry notices process()
 *   gives onError (message null) and the handler failures the application planted itself: an
 *   ack refused or failed, a loop or iterator that threw. null: not bounded;
 * - duplicatesOnlyAfterLeaseEnd: a handler is given a message a second time only when its lease
 *   could have ended first (it lapsed: a visibility timeout passed since the earlier delivery;
 *   the node restarted in between; or the earlier handler failed and it was nacked).
 * Every scenario also expects the lease model's verdict `valid` and the application to catch up
 * by itself after the faults (`stalled` otherwise).
 */
export interface ClientPrediction {
  sentence: string;
  maxSilenceMs: number;
  maxLagMs: number;
  maxAppErrors: number | null;
  duplicatesOnlyAfterLeaseEnd: boolean;
}

export interface ClientScenario {
  name: string;
  description: string;
  faults: ClientFault[];
  predictions: Record<ConsumerApi, ClientPrediction>;
  /** The topics' visibility timeout (a lapse ends a lease this long after its delivery). */
  visibilityTimeoutMs: number;
  /** How long the application may take to handle every acknowledged message after the faults. */
  drainTimeoutMs: number;
  /** A short form for `npm test` (scaled faults). */
  short: boolean;
}

/** The SDK's options in every scenario: a request deadline of 10 s and long polls of 5 s. */
export const CLIENT_OPTIONS = { requestTimeoutMs: 10_000, waitMs: 5_000, batch: 10 } as const;
/** Publishing before the first fault. */
export const WARMUP_MS = 2_000;
/** Publishing after the last fault ended. */
export const AFTER_MS = 3_000;

const VT_FULL_MS = 10_000;
const VT_SHORT_MS = 4_000;
/** The calibration scenarios' (steady, reset-storm, app-restart): a lapse shows as lag above their 1 to 3 s bounds. */
const VT_CALIBRATION_MS = 5_000;

/** The same prediction for both APIs. */
function both(p: ClientPrediction): Record<ConsumerApi, ClientPrediction> {
  return { process: p, messages: p };
}

const cut = (s: number, short: boolean): ClientScenario => ({
  name: `cut-${s}s`,
  description: `the consumers' line refused for ${s} s (connections reset, new ones reset at accept) while the producer goes on over a direct line`,
  faults: [{ kind: "cut", atMs: WARMUP_MS, durationMs: s * 1000 }],
  predictions: {
    process: {
      sentence: "delivery resumes within 1 s of the line coming back; process() keeps running (onError hears of each failed poll, nothing else surfaces); the handler sees no message twice unless its lease ended",
      maxSilenceMs: 1_000,
      maxLagMs: s * 1000 + 2_000,
      maxAppErrors: 0,
      duplicatesOnlyAfterLeaseEnd: true,
    },
    messages: {
      sentence: "delivery resumes within 1 s of the line coming back; the iterator does not throw (an ack the application sends into the cut fails, and its message comes back after a lapse); the handler sees no message twice unless its lease ended",
      maxSilenceMs: 1_000,
      maxLagMs: s * 1000 + 2_000,
      maxAppErrors: null,
      duplicatesOnlyAfterLeaseEnd: true,
    },
  },
  visibilityTimeoutMs: short ? VT_SHORT_MS : VT_FULL_MS,
  drainTimeoutMs: short ? 20_000 : 60_000,
  short,
});

const pause = (s: number, short: boolean): ClientScenario => {
  const vt = short ? VT_SHORT_MS : VT_FULL_MS;
  return {
    name: `sigstop-${s}s`,
    description: `the node frozen with SIGSTOP for ${s} s (longer than the visibility timeout, ${vt / 1000} s), then SIGCONT`,
    faults: [{ kind: "pause", atMs: WARMUP_MS, durationMs: s * 1000 }],
    predictions: both({
      sentence: `requests into the freeze time out and are retried; delivery resumes within 1 s of the node waking; leases held at the freeze lapse in it, so their acks are refused (410, told to onError) and those messages are handled again (after a lapse: allowed); nothing ends a loop; lag at most the freeze plus a visibility timeout and 5 s`,
      maxSilenceMs: 1_000,
      maxLagMs: s * 1000 + vt + 5_000,
      maxAppErrors: null,
      duplicatesOnlyAfterLeaseEnd: true,
    }),
    visibilityTimeoutMs: vt,
    drainTimeoutMs: short ? 20_000 : 60_000,
    short,
  };
};

const restart = (s: number, short: boolean): ClientScenario => ({
  name: `restart-${s}s`,
  description: `the node stopped with SIGTERM, down for ${s} s, started again (leases live in memory: every unacked message is available again)`,
  faults: [{ kind: "restart", atMs: WARMUP_MS, durationMs: s * 1000 }],
  predictions: both({
    sentence: "consumes fail while the node is down and are retried; delivery resumes within 1 s of the node answering again; a message handled just before the stop may be handled again (its lease ended with the restart: allowed); nothing ends a loop",
    maxSilenceMs: 1_000,
    maxLagMs: s * 1000 + 5_000,
    maxAppErrors: null,
    duplicatesOnlyAfterLeaseEnd: true,
  }),
  visibilityTimeoutMs: short ? VT_SHORT_MS : VT_FULL_MS,
  drainTimeoutMs: short ? 20_000 : 60_000,
  short,
});

export const CLIENT_SCENARIOS: readonly ClientScenario[] = [
  {
    name: "steady",
    description: "no fault: five seconds of producing, the baseline every other scenario is read against",
    faults: [],
    predictions: both({
      sentence: "every message is handled within 2.5 s of its 202 (half the visibility timeout: a lapse is told apart); a message whose handler failed is nacked and handed again at once; no error reaches the application but its own handler failures; no duplicate but those",
      maxSilenceMs: 1_000,
      maxLagMs: 2_500,
      maxAppErrors: 0,
      duplicatesOnlyAfterLeaseEnd: true,
    }),
    visibilityTimeoutMs: VT_CALIBRATION_MS,
    drainTimeoutMs: 20_000,
    short: true,
  },
  cut(3, true),
  cut(8, false),
  {
    name: "latency-25s",
    description: "every byte from the node to the consumers delayed by 25 s for 30 s: longer than any request's deadline (10 s, a long poll's 15 s)",
    faults: [{ kind: "latency", atMs: WARMUP_MS, durationMs: 30_000, latencyMs: 25_000 }],
    predictions: both({
      sentence: "every request in the delay times out (ambiguous) and is retried; a message leased by a timed-out consume comes back when its lease lapses (10 s); delivery resumes within 1 s of the heal; duplicates only after a lapse; nothing ends a loop",
      maxSilenceMs: 1_000,
      maxLagMs: 30_000 + VT_FULL_MS + 5_000,
      maxAppErrors: null,
      duplicatesOnlyAfterLeaseEnd: true,
    }),
    visibilityTimeoutMs: VT_FULL_MS,
    drainTimeoutMs: 60_000,
    short: false,
  },
  pause(35, false),
  pause(6, true),
  restart(5, false),
  restart(2, true),
  {
    name: "reset-storm",
    description: "six resets of the consumers' line, 1.5 s apart, each refusing it for 0.1 s",
    faults: Array.from({ length: 6 }, (_, i) => ({ kind: "cut" as const, atMs: WARMUP_MS + i * 1_500, durationMs: 100 })),
    predictions: {
      process: {
        sentence: "each reset costs one failed poll, retried after 100 ms: delivery resumes within 1 s of each; no error but the retry notices; no duplicate unless a lease ended; lag under 3 s",
        maxSilenceMs: 1_000,
        maxLagMs: 3_000,
        maxAppErrors: 0,
        duplicatesOnlyAfterLeaseEnd: true,
      },
      messages: {
        sentence: "each reset costs one failed poll, retried after 100 ms: delivery resumes within 1 s of each; the iterator does not throw; no duplicate unless a lease ended; lag under 3 s unless an ack was sent into a reset (its message lapses)",
        maxSilenceMs: 1_000,
        maxLagMs: 3_000,
        maxAppErrors: null,
        duplicatesOnlyAfterLeaseEnd: true,
      },
    },
    visibilityTimeoutMs: VT_CALIBRATION_MS,
    drainTimeoutMs: 10_000,
    short: true,
  },
  {
    name: "app-restart",
    description: "the application restarts its consumers four times, 2.5 s apart: process() ended from inside a handler, the iterator left in the middle of a batch, each started again at once",
    faults: Array.from({ length: 4 }, (_, i) => ({ kind: "app-restart" as const, atMs: WARMUP_MS + i * 2_500 })),
    predictions: both({
      sentence: "a restart hands nothing to a lapse: process() acks the message it handled last, the iterator nacks what it leased and did not yield, so those are delivered again at once; lag under 3 s (the 1 s slow handler included); no error; no duplicate",
      maxSilenceMs: 1_000,
      maxLagMs: 3_000,
      maxAppErrors: 0,
      duplicatesOnlyAfterLeaseEnd: true,
    }),
    visibilityTimeoutMs: VT_CALIBRATION_MS,
    drainTimeoutMs: 15_000,
    short: true,
  },
];

export const CLIENT_SCENARIO_NAMES: readonly string[] = CLIENT_SCENARIOS.map((s) => s.name);

export function clientScenario(name: string): ClientScenario | undefined {
  return CLIENT_SCENARIOS.find((s) => s.name === name);
}

/** When a fault's effect ends, from the start of publishing (an app restart: at once). */
export function faultEndMs(f: ClientFault): number {
  return f.kind === "app-restart" ? f.atMs : f.atMs + f.durationMs;
}
