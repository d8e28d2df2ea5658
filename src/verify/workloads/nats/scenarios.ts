// The NATS scenarios: what the fault proxy does to the consumer's line (never the publisher's),
// when, and the prediction written down before any run (seed 002's second lesson). The matrix's
// expected table (docs/verification-clients.md) holds what each client and API was then measured
// to do; the prediction stays as written, and a cell that contradicts it is a finding.
//
// Fault shapes, both through src/verify/proxy:
//   cut (mode "reset")  the line refused: every connection through the proxy torn down with an RST
//                       and every new one reset at accept, until the heal. The client sees its
//                       connection drop and its reconnects fail; the server sees the client go,
//                       so the consumer loses interest at once (toxiproxy's disabled proxy, the
//                       seed's cut).
//   latency             every byte from the server to the client delayed by `latencyMs`. Bytes
//                       already in the proxy when the toxic goes keep their due time (as bytes in
//                       flight on a slow path would), so the heal does not end their delay.
// and two on the server itself, so the publisher's direct line has them too:
//   restart             nats-server stopped (SIGTERM, a clean shutdown), down for `durationMs`, then
//                       started again on the same port and store directory (a new server ID: the
//                       boot evidence). File-backed streams and durable consumers survive it; the
//                       ordered consumers' (memory storage) do not.
//   pause               SIGSTOP for `durationMs`, then SIGCONT: every connection stays up and the
//                       kernel keeps accepting bytes, but nothing answers, no heartbeat either.

/** A fault of a scenario, at `atMs` after the warm-up began, for `durationMs`. */
export type ScenarioFault =
  | {
      kind: "cut";
      mode: "reset";
      atMs: number;
      durationMs: number;
      /**
       * Not before the consumer is connected again ("connected": it reported its reconnect, 0.5 s ago), or
       * exactly inside its next reconnect's handshake ("handshake": at its next `update` event,
       * the server's INFO read and its CONNECT and PING not yet answered).
       */
      when?: "connected" | "handshake";
    }
  | { kind: "latency"; latencyMs: number; atMs: number; durationMs: number }
  | {
      kind: "restart";
      atMs: number;
      /** How long the server stays down. */
      durationMs: number;
      /**
       * The publisher publishes nothing from the stop until this long after the start (a stream
       * nobody writes to while its server restarts, nats.deno #688's KV bucket); 0 or absent: it
       * goes on publishing, every publish of the downtime failing or timing out.
       */
      quietMs?: number;
    }
  | { kind: "pause"; atMs: number; durationMs: number };

export interface NatsScenario {
  name: string;
  description: string;
  prediction: string;
  faults: ScenarioFault[];
  /** The drain's deadline when not run.ts's DRAIN_TIMEOUT_MS. */
  drainTimeoutMs?: number;
}

/** Publishing before the first fault, so the consumer is running and caught up when it starts. */
export const WARMUP_MS = 2_000;
/** Publishing goes on this long after the last fault ends, then stops and the drain begins. */
export const AFTER_MS = 2_000;

const cut = (s: number): NatsScenario => ({
  name: `cut-${s}`,
  description: `the consumer's line refused for ${s} s (connections reset, reconnects reset) while the publisher goes on over a direct line`,
  prediction: "every consumer reconnects within its reconnect wait (2 s and jitter) of the heal and delivery resumes within 3 s; nothing lost, skipped or duplicated",
  faults: [{ kind: "cut", mode: "reset", atMs: WARMUP_MS, durationMs: s * 1000 }],
});

const pause = (s: number, heartbeats: string): NatsScenario => ({
  name: `pause-${s}`,
  description: `nats-server frozen (SIGSTOP) for ${s} s, then SIGCONT: ${heartbeats}; the client's own ping (every 2 min) notices nothing`,
  prediction:
    "no connection drops; each consumer whose heartbeat alarm rings during the freeze rebuilds itself, its requests answered after the SIGCONT, and delivery resumes within 3 s of the SIGCONT for every consumer; the publishes in flight time out (unknown) and may land; nothing lost, skipped or duplicated; no error surfaces",
  faults: [{ kind: "pause", atMs: WARMUP_MS, durationMs: s * 1000 }],
});

export const NATS_SCENARIOS: readonly NatsScenario[] = [
  cut(3),
  cut(4),
  cut(6),
  cut(8),
  {
    name: "latency-25",
    description: "every byte from the server to the consumer delayed by 25 s for 30 s: past the 5 s JetStream request timeout and the consumers' 5 s heartbeats",
    prediction: "each consumer's idle-heartbeat alarm (two missed heartbeats) rings during the delay and the consumer rebuilds itself; nothing lost, skipped or duplicated; lag about 25 s; delivery within 3 s of the heal",
    faults: [{ kind: "latency", latencyMs: 25_000, atMs: WARMUP_MS, durationMs: 30_000 }],
  },
  {
    name: "reset-storm",
    description: "six resets of the consumer's line, 1.5 s apart, each refusing it for 0.1 s; each waits until the consumer has reported its reconnect and 0.5 s more, so that every reset finds a working connection to reset",
    prediction: "the consumer reconnects after each reset and delivery resumes within 3 s of each heal; nothing lost, skipped or duplicated",
    faults: Array.from({ length: 6 }, (_, i) => ({ kind: "cut" as const, mode: "reset" as const, atMs: WARMUP_MS + i * 1500, durationMs: 100, when: "connected" as const })),
  },
  {
    name: "reset-handshake",
    description: "a reset of the consumer's line, then a second one landing inside the handshake of the client's reconnect (after it read the server's INFO, before its reconnect completed)",
    prediction: "a reset during the handshake is one more failed attempt: the client tries again after its reconnect wait and delivery resumes within 3 s of the last heal; nothing lost, skipped or duplicated",
    faults: [
      { kind: "cut", mode: "reset", atMs: WARMUP_MS, durationMs: 100, when: "connected" },
      { kind: "cut", mode: "reset", atMs: WARMUP_MS + 200, durationMs: 100, when: "handshake" },
    ],
  },
  {
    name: "restart",
    description: "nats-server stopped (SIGTERM), down 5 s, started again on the same port and store directory; the publisher goes on publishing (its publishes of the downtime fail or time out)",
    prediction:
      "every consumer reconnects within its reconnect wait (2 s and jitter) of the start; the durable pull and fetch consumers (file storage) resume within 3 s; the ordered consumers and KV watchers, whose server-side consumer is memory-only and gone, rebuild it: the 2.x push ordered consumer and 2.x KV watcher on their heartbeat alarm (5 to 15 s of silence, finding 1), every other one on reconnect (within 3 s); nothing lost, skipped or duplicated; no error surfaces",
    faults: [{ kind: "restart", atMs: WARMUP_MS, durationMs: 5_000 }],
  },
  pause(20, "past the 2.x push ordered consumers' alarm (two missed 5-s heartbeats: 10 to 15 s), under the 3.x pull consumers' (two missed 15-s heartbeats: 30 to 45 s)"),
  pause(35, "past the 3.x pull consumers' 30 s alarm too (seed 002's docker pause, whose alarm rang at 30.04 s)"),
];

/**
 * Scenarios of the calibration rows only (matrix.ts CALIBRATION_CELLS), not of every cell: the
 * shape a known bug of an older release needs to show itself.
 */
export const CALIBRATION_SCENARIOS: readonly NatsScenario[] = [
  {
    name: "restart-quiet",
    description:
      "nats-server stopped, down 5 s and started again on the same port and store, while nobody publishes: publishing stops at the stop and starts again 25 s after the start (nats.deno #688: a KV bucket nobody wrote to while its server restarted)",
    prediction:
      "the consumer rebuilds its memory-only consumer after the restart (on reconnect, or on its heartbeat alarm: two missed heartbeats) and delivers what is published once publishing starts again, within 3 s; nothing lost, skipped or duplicated; no error surfaces",
    faults: [{ kind: "restart", atMs: WARMUP_MS, durationMs: 5_000, quietMs: 25_000 }],
    // Every consumer had the 25 s of quiet to rebuild itself (the slowest alarm of the 3.x pull
    // consumers rings within 45 s of the stop); what is published after is owed at once.
    drainTimeoutMs: 15_000,
  },
];

export function natsScenario(name: string): NatsScenario | undefined {
  return NATS_SCENARIOS.find((s) => s.name === name) ?? CALIBRATION_SCENARIOS.find((s) => s.name === name);
}

/** When the scenario's last fault ends, from the start of the warm-up (a quiet restart's end: publishing again). */
export function scenarioFaultsEndMs(s: NatsScenario): number {
  return Math.max(WARMUP_MS, ...s.faults.map((f) => f.atMs + f.durationMs + (f.kind === "restart" ? (f.quietMs ?? 0) : 0)));
}
