// Seeded bugs for calibrating the verification toolkit (`narad verify calibrate`). Each is
// reachable only through the test-only environment variable NARAD_TEST_BUGS (a comma-separated
// list), is logged loudly at start, and exists so the checker can prove it catches it.
// A checker that has never caught a real bug is untested.

export const TEST_BUGS = {
  "acks-not-persisted": "acks settle the lease in memory but never reach the ack log",
  "ack-before-fsync": "a produce answers 202 before the fsync that makes it durable",
  "store-on-429": "a produce refused with 429 is stored anyway",
  "early-lapse": "leases lapse after a quarter of the visibility timeout",
  "nack-drops": "a nack settles the message instead of returning it",
  "accept-replaced-handle": "an older receipt handle of a message still settles its live lease",
  "replay-skip": "replay leaves out the second record of every page",
  "redeliver-acked": "one in five first-delivery acks answers 204 but returns the message",
  "child-skip-on-failure": "a copy to a child that fails (its owner or cluster is down) is skipped, not retried",
  "delay-early-after-restart": "a delay child copies records committed before the restart without waiting for the delay",
  "copy-cursors-not-persisted": "child copy cursors reach the disk only on attach and graceful stop, so a kill makes children copy everything again",
} as const;

export type TestBugName = keyof typeof TEST_BUGS;

export class TestBugs {
  private readonly on: Set<string>;

  constructor(names: Iterable<string>) {
    this.on = new Set(names);
  }

  static parse(spec: string | undefined): TestBugs | string {
    const names = (spec ?? "").split(",").map((s) => s.trim()).filter(Boolean);
    for (const n of names) if (!(n in TEST_BUGS)) return `unknown test bug ${JSON.stringify(n)}; known: ${Object.keys(TEST_BUGS).join(", ")}`;
    return new TestBugs(names);
  }

  has(name: TestBugName): boolean {
    return this.on.size > 0 && this.on.has(name);
  }

  get names(): string[] {
    return [...this.on];
  }
}
