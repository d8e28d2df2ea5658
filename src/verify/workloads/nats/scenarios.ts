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
  | { kind: "latency"; latencyMs: number; atMs: number; durationMs: number };

export interface NatsScenario {
  name: string;
  description: string;
  prediction: string;
  faults: ScenarioFault[];
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
];

export function natsScenario(name: string): NatsScenario | undefined {
  return NATS_SCENARIOS.find((s) => s.name === name);
}

/** When the scenario's last fault ends, from the start of the warm-up. */
export function scenarioFaultsEndMs(s: NatsScenario): number {
  return Math.max(WARMUP_MS, ...s.faults.map((f) => f.atMs + f.durationMs));
}
