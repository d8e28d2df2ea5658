// Issue 16 item 2: metrics that were declared and never moved (narad_produce_seconds,
// narad_http_requests_total), the doubled prefix of the process metrics, and the ones users look
// for first (oldest unacked age, consume and ack latency). One test reads the metrics table of
// docs/operations.md, drives a real node through what each metric counts, and sees every one of
// them move; a documented metric that nothing here moves must say where it is driven instead.

import { after, before, describe, it } from "node:test";
import { nodeForSuite } from "./support/suite-node.js";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Narad } from "../src/client/index.js";
import { REPO_ROOT, waitFor } from "./harness.js";

/** Documented metrics a single node cannot move, and where they are driven. */
const ELSEWHERE: Record<string, string> = {
  narad_dead_letter_move_failures_total: "test/dead-letters.test.ts (a move retried while its dead-letter topic is gone)",
  narad_child_copy_held_partitions: "test/hardening.test.ts (a damaged children.cursors)",
  narad_forwarded_requests_total: "cluster only (a request reaching a node that does not own the partition)",
  narad_replication_lag_records: "cluster only (replicated topics)",
  narad_replication_lag_seconds: "cluster only (replicated topics)",
  narad_replication_acks_pending: "cluster only (replicated topics)",
  narad_under_replicated_partitions: "cluster only (replicated topics)",
  narad_failovers_total: "cluster only (a leader's lease lapsing)",
  narad_dedupe_window_evictions_total: "only at producers.dedupe_entries_max (10 000 000 entries); the eviction itself is unit-tested in src/broker/producers.test.ts",
};

/** The metric names of docs/operations.md's table (a family such as `narad_process_*` as written). */
function documentedMetrics(): string[] {
  const doc = readFileSync(join(REPO_ROOT, "docs", "operations.md"), "utf8");
  const names = [...doc.matchAll(/^\| `(narad_[a-z_*]+)(?:\{[^}]*\})?` \|/gm)].map((m) => m[1]!);
  assert.ok(names.length >= 20, `found only ${names.length} metrics in docs/operations.md`);
  return names;
}

/** The sum of a metric's samples whose labels include `labels` (a histogram: its _count). */
function value(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue;
    const m = /^([a-z_]+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m === null) continue;
    if (m[1] !== name && m[1] !== `${name}_count`) continue;
    const l = m[2] ?? "";
    if (!Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`))) continue;
    sum += Number(m[3]);
  }
  return sum;
}

describe("issue 16 item 2: every documented metric moves", () => {
  const suite = nodeForSuite();
  let c: Narad;
  before(async () => {
    c = new Narad({ url: suite.node.url });
  });
  after(async () => {
    await c.close();
  });

  it("the process metrics have one prefix (it was narad_process_process_cpu_*)", async () => {
    const text = await c.metrics();
    assert.ok(value(text, "narad_process_cpu_seconds_total") > 0);
    assert.doesNotMatch(text, /narad_process_process_|narad_process_nodejs_/);
    assert.match(text, /^narad_nodejs_eventloop_lag_seconds /m);
  });

  it("each metric of docs/operations.md moves when what it counts happens (narad_produce_seconds and narad_http_requests_total never did)", async () => {
    const moved = new Set<string>();
    const first = await c.metrics();
    await c.createTopic({ name: "m", partitions: 2, visibilityTimeoutMs: 60_000 });
    await c.createTopic({ name: "m-copy", partitions: 1 });
    await c.attachChild("m", { topic: "m-copy", kind: "fanout" });
    const before = await c.metrics();
    const see = (after: string, name: string, labels: Record<string, string> = {}, base = before) => {
      assert.notEqual(value(after, name, labels), value(base, name, labels), `${name}${JSON.stringify(labels)} did not move`);
      moved.add(name);
    };

    // A long poll that waits, then is answered by a produce.
    const polling = c.consume("m", { waitMs: 10_000 });
    const waiting = await waitFor(async () => {
      const t = await c.metrics();
      return value(t, "narad_long_polls_waiting") === 1 ? t : null;
    }, { what: "a waiting long poll" });
    see(waiting, "narad_long_polls_waiting");
    await c.produce("m", "one");
    const polled = await polling;
    assert.ok(polled !== null);
    await c.produceBatch("m", [{ payload: "two" }, { payload: "three" }, { payload: "four" }]);
    const batch = await c.consumeBatch("m", { maxMessages: 2 });
    assert.equal(batch.length, 2);
    await c.nack("m", batch[0]!.receiptHandle);
    const again = await c.consume("m");
    assert.ok(again !== null && again.deliveryCount === 2);

    const leased = await waitFor(async () => {
      const t = await c.metrics();
      return value(t, "narad_topic_oldest_unacked_age_seconds", { topic: "m" }) > 0 && value(t, "narad_child_copied_messages_total") >= 4 ? t : null;
    }, { what: "the oldest unacked age and the copies" });
    see(leased, "narad_produced_messages_total", { topic: "m" });
    see(leased, "narad_produce_seconds", { kind: "single" });
    see(leased, "narad_produce_seconds", { kind: "batch" });
    see(leased, "narad_commit_seconds");
    see(leased, "narad_delivered_messages_total", { topic: "m" });
    see(leased, "narad_redelivered_messages_total", { topic: "m" });
    see(leased, "narad_consume_seconds", { kind: "single" });
    see(leased, "narad_consume_seconds", { kind: "batch" });
    see(leased, "narad_topic_backlog_messages", { topic: "m" });
    see(leased, "narad_topic_inflight_leases", { topic: "m" });
    see(leased, "narad_topic_partitions", { topic: "m" }, first);
    see(leased, "narad_topic_oldest_unacked_age_seconds", { topic: "m" });
    see(leased, "narad_child_copied_messages_total", { parent: "m", child: "m-copy" });
    see(leased, "narad_settle_total", { action: "nack" });
    see(leased, "narad_http_requests_total", { route: "POST /v1/topics/:topic/messages", status: "202" });
    see(leased, "narad_http_requests_total", { route: "POST /v1/topics/:topic/consume", status: "200" });

    await c.ack("m", polled.receiptHandle);
    await c.ackBatch("m", [batch[1]!.receiptHandle, again.receiptHandle]);
    await assert.rejects(c.produce("no-such-topic", "x"));
    // The last message is leased and acked: nothing is unacked, so the oldest age falls to 0.
    const last = await c.consume("m");
    assert.ok(last !== null);
    await c.ack("m", last.receiptHandle);
    const settled = await c.metrics();
    see(settled, "narad_settle_total", { action: "ack" }, leased);
    see(settled, "narad_ack_seconds", { kind: "single" }, leased);
    see(settled, "narad_ack_seconds", { kind: "batch" }, leased);
    see(settled, "narad_refusals_total", { status: "404", code: "topic_not_found" }, leased);
    see(settled, "narad_http_requests_total", { route: "POST /v1/topics/:topic/messages", status: "404" }, leased);
    assert.equal(value(settled, "narad_topic_oldest_unacked_age_seconds", { topic: "m" }), 0, "every message acked: age 0");
    assert.equal(value(settled, "narad_topic_backlog_messages", { topic: "m" }), 0);
    see(settled, "narad_topic_oldest_unacked_age_seconds", { topic: "m" }, leased);

    // The child's lag: copies are made after the parent's fsync, so the lag seen at some moment
    // may be 0 already; what must move is its series appearing for the new child.
    assert.match(settled, /^narad_child_lag_messages\{parent="m",child="m-copy"\} \d/m);
    assert.match(settled, /^narad_child_lag_seconds\{parent="m",child="m-copy"\} \d/m);
    moved.add("narad_child_lag_messages").add("narad_child_lag_seconds");
    // Idempotent producers (dedupe windows) and the streaming protocol.
    const p = c.producer({ idempotent: true });
    await p.produce("m", "once");
    const id = await p.id();
    const resent = await c.produce("m", "once", { producerId: id, sequence: 0 });
    assert.equal(resent.duplicate, true);
    const streamed = new Narad({ url: suite.node.url, transport: "stream" });
    try {
      await streamed.produce("m", "by stream");
      const live = await c.metrics();
      see(live, "narad_stream_connections", {}, settled);
      see(live, "narad_stream_frames_total", {}, settled);
      see(live, "narad_dedupe_window_entries", {}, settled);
      see(live, "narad_dedupe_window_partitions", {}, settled);
      see(live, "narad_produce_duplicates_total", {}, settled);
    } finally {
      await streamed.close();
    }
    // Dead letters: a message out of deliveries moves to its dead-letter topic, and back by a redrive.
    await c.createTopic({ name: "m-dlq" });
    await c.createTopic({ name: "dl", maxDeliveries: 1, deadLetterTopic: "m-dlq" });
    await c.produce("dl", "poison");
    const poison = await c.consume("dl");
    assert.ok(poison !== null);
    await c.nack("dl", poison.receiptHandle);
    const moved1 = await waitFor(async () => {
      const t = await c.metrics();
      return value(t, "narad_dead_lettered_messages_total", { topic: "dl" }) > 0 ? t : null;
    }, { what: "the nacked message moved to the dead-letter topic" });
    see(moved1, "narad_dead_lettered_messages_total", { topic: "dl" }, settled);
    assert.equal((await c.redrive("m-dlq")).moved, 1);
    see(await c.metrics(), "narad_redriven_messages_total", { topic: "m-dlq" }, settled);
    if (value(settled, "narad_process_cpu_seconds_total") > value(first, "narad_process_cpu_seconds_total")) moved.add("narad_process_*");
    if (value(settled, "narad_nodejs_heap_size_used_bytes") !== value(first, "narad_nodejs_heap_size_used_bytes")) moved.add("narad_nodejs_*");

    const missing = documentedMetrics().filter((n) => !moved.has(n) && ELSEWHERE[n] === undefined);
    assert.deepEqual(missing, [], "documented metrics this test did not see move");
    for (const n of Object.keys(ELSEWHERE)) assert.ok(documentedMetrics().includes(n), `${n} is listed here but not documented`);
  });
});
