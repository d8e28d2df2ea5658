import assert from "node:assert/strict";
import { test } from "node:test";
import { Histogram, Registry, type RegistryContentType } from "prom-client";
import { KindHistogram } from "./metrics.js";

const BUCKETS = [0.001, 0.01, 0.1, 1];
// On a bound, above every bound, in the first bucket, and a kind observed twice as often.
const OBSERVED: [string, number][] = [
  ["single", 0.0005],
  ["single", 0.001],
  ["single", 0.0011],
  ["batch", 0.1],
  ["single", 0.5],
  ["single", 7],
  ["batch", 0.02],
];

test("KindHistogram shows in /metrics what prom-client's own Histogram shows for the same observations, in both text formats", async () => {
  const ours = new Registry<RegistryContentType>();
  const theirs = new Registry<RegistryContentType>();
  const h = new KindHistogram({ name: "t_seconds", help: "latency", buckets: BUCKETS, registers: [ours] });
  const p = new Histogram({ name: "t_seconds", help: "latency", labelNames: ["kind"], buckets: BUCKETS, registers: [theirs] });
  const empty = await ours.metrics();
  assert.equal(empty, await theirs.metrics(), "no kind observed: the same HELP and TYPE lines, no values");
  // A kind's counts are taken before its first observation (the server keeps them per route).
  const single = h.counts("single");
  assert.equal(h.counts("single"), single, "one LatencyCounts per kind, kept");
  for (const [kind, v] of OBSERVED) {
    h.counts(kind).observe(v);
    p.labels(kind).observe(v);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  const json = async (r: Registry<RegistryContentType>) => JSON.parse(JSON.stringify(await r.getMetricsAsJSON())) as unknown;
  assert.deepEqual(await json(ours), await json(theirs), "the JSON a registry gives, as it would be sent");
  ours.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
  theirs.setContentType(Registry.OPENMETRICS_CONTENT_TYPE);
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.match(await ours.metrics(), /t_seconds_bucket\{le="0.001",kind="single"\} 2\n/, "a value on a bound counts in its bucket (le)");

  ours.resetMetrics();
  theirs.resetMetrics();
  h.counts("batch").observe(0.05);
  p.labels("batch").observe(0.05);
  // prom-client forgets the kinds at a reset; ours keeps their objects, showing only observed ones.
  assert.equal(await ours.metrics(), await theirs.metrics());
});
