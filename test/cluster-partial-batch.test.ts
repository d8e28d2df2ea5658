// A batch produce spread over several owners of a cluster, one of which cannot answer: the
// owner's node sits behind the fault proxy, cut, so its part times out (an ambiguous failure)
// while the other owners store theirs. The answer must say per message what is known, and what
// replay shows afterwards must match it; the SDK must expose it; and a remote child's copier
// pushing such a batch must send again only what was not stored (it used to push the whole
// batch again, so the owners that had stored their part stored it twice).
//
// Real processes, real HTTP, a real PostgreSQL (embedded), the real fault proxy; every wait has
// a deadline; everything is stopped in the after hook.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { keyPartition } from "../src/broker/partitioner.js";
import { Narad, NaradAmbiguousError, NaradPartialBatchError, type BatchItemResult } from "../src/client/index.js";
import { startCluster, type LocalCluster } from "./support/local-cluster.js";
import { startProxy, type Proxy } from "../src/verify/proxy/proxy.js";
import { removeDir, startNode, waitFor } from "./harness.js";
import { freePort, postgresForFile } from "./support/postgres.js";

const { pg: postgres, cleanups } = postgresForFile();

const PARTITIONS = 3;

/**
 * Three nodes; the third is reached by its peers only through a fault proxy. A forward gets
 * 1.5 s for its answer, so a cut makes the third node's parts fail as "no answer" (ambiguous),
 * while the other forwards have ample time even on a loaded machine.
 */
async function clusterWithProxiedNode(): Promise<{ c: LocalCluster; proxy: Proxy; cutNode: string }> {
  const cutPort = await freePort();
  const proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: cutPort });
  cleanups.push(() => proxy.close());
  const c = await startCluster({
    nodes: 3,
    controlPlaneUrl: await postgres().newDatabase(),
    env: {
      NARAD_CLUSTER_HEARTBEAT_INTERVAL_MS: "200",
      NARAD_CLUSTER_NODE_LEASE_MS: "1500",
      NARAD_CLUSTER_LEASE_SAFETY_MARGIN_MS: "200",
      NARAD_CLUSTER_RESYNC_INTERVAL_MS: "1000",
      NARAD_CLUSTER_FORWARD_TIMEOUT_MS: "1500",
    },
    ports: [0, 0, cutPort],
    advertise: (i) => (i === 2 ? `http://127.0.0.1:${proxy.address.port}` : undefined),
  });
  cleanups.push(() => c.stop());
  return { c, proxy, cutNode: c.nodes[2]!.id };
}

async function json(url: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await fetch(url + path, { method, headers: { "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  return { status: r.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** Creates a topic of PARTITIONS partitions; returns the partition the cut node owns. */
async function topicWithCutPartition(url: string, name: string, cutNode: string): Promise<number> {
  const r = await json(url, "POST", "/v1/topics", { name, partitions: PARTITIONS });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const placement = (await json(url, "GET", `/v1/topics/${name}`)).body.placement as { partition: number; node: string }[];
  const cut = placement.find((p) => p.node === cutNode);
  assert.ok(cut !== undefined && placement.some((p) => p.node !== cutNode), `${name} has partitions on the cut node and on others: ${JSON.stringify(placement)}`);
  // Forwarding to the cut node works before the cut (and its connections are open).
  await waitFor(async () => (await json(url, "GET", `/v1/topics/${name}/partitions/${cut.partition}/messages?limit=1`)).status === 200, { timeoutMs: 5000, what: "a forward through the proxy" });
  return cut.partition;
}

interface Msg {
  key: string;
  payload: string;
  partition: number;
}

/** `perPartition` messages for each partition, interleaved, each keyed to land there. */
function spreadBatch(tag: string, perPartition: number): Msg[] {
  const keys: string[][] = Array.from({ length: PARTITIONS }, () => []);
  for (let i = 0; keys.some((k) => k.length < perPartition); i++) {
    const k = `${tag}-key-${i}`;
    const p = keyPartition(k, PARTITIONS);
    if (keys[p]!.length < perPartition) keys[p]!.push(k);
  }
  const out: Msg[] = [];
  for (let i = 0; i < perPartition; i++) for (let p = 0; p < PARTITIONS; p++) out.push({ key: keys[p]![i]!, payload: `${tag}-${p}-${i}`, partition: p });
  return out;
}

/** Every message of a partition, read through `url`, in offset order. */
async function replayAll(url: string, topic: string, partition: number): Promise<{ offset: number; payload: string; key: string | null }[]> {
  const out: { offset: number; payload: string; key: string | null }[] = [];
  for (let offset = 0; ; ) {
    const r = await json(url, "GET", `/v1/topics/${topic}/partitions/${partition}/messages?offset=${offset}&limit=1000`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const page = r.body as { messages: { offset: number; key: string | null; payload_base64: string }[]; next_offset: number; end_offset: number };
    for (const m of page.messages) out.push({ offset: m.offset, key: m.key, payload: Buffer.from(m.payload_base64, "base64").toString() });
    if (page.next_offset >= page.end_offset || page.messages.length === 0) return out;
    offset = page.next_offset;
  }
}

function count(xs: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const x of xs) m.set(x, (m.get(x) ?? 0) + 1);
  return m;
}

describe("a batch stored in part by a cluster", () => {
  test("answers 502 with a result per message, the SDK exposes them, and replay shows exactly what they say", async () => {
    const { c, proxy, cutNode } = await clusterWithProxiedNode();
    const [a, b] = c.urls;
    const cutP = await topicWithCutPartition(a!, "parts", cutNode);
    // b has never failed to reach the cut node either.
    await waitFor(async () => (await json(b!, "GET", `/v1/topics/parts/partitions/${cutP}/messages?limit=1`)).status === 200, { timeoutMs: 5000, what: "b's forward through the proxy" });
    proxy.cut("both");

    // Through node a, over HTTP: the parts of the other owners are stored, the cut owner's part is unknown.
    const raw = spreadBatch("raw", 3);
    const r = await fetch(`${a}/v1/topics/parts/messages/batch`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ messages: raw.map((m) => ({ key: m.key, payload_base64: Buffer.from(m.payload).toString("base64") })) }),
    });
    const body = (await r.json()) as { error: { code: string; message: string; results?: BatchItemResult[] } };
    assert.equal(r.status, 502, JSON.stringify(body));
    assert.equal(body.error.code, "forward_failed");
    const rawResults = body.error.results;
    assert.ok(rawResults !== undefined, `a result per message: ${JSON.stringify(body)}`);
    assert.deepEqual(
      rawResults.map((x) => (x.status === "stored" ? `stored:${x.partition}` : `${x.status}:${x.code}`)),
      raw.map((m) => (m.partition === cutP ? "unknown:forward_failed" : `stored:${m.partition}`)),
      "in request order: stored at the key's partition, or unknown for the part the cut owner got",
    );

    // Through node b, with the SDK: the same answer as a typed error.
    const sdk = new Narad({ url: b! });
    cleanups.push(() => sdk.close());
    const viaSdk = spreadBatch("sdk", 2);
    const err = await sdk.produceBatch("parts", viaSdk).then(
      () => assert.fail("the batch cannot be stored whole while an owner is cut off"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof NaradPartialBatchError, `expected NaradPartialBatchError, got ${String(err)}`);
    assert.ok(err instanceof NaradAmbiguousError);
    assert.deepEqual([err.status, err.code, err.definite], [502, "forward_failed", false]);
    assert.deepEqual(
      err.results.map((x) => x.status),
      viaSdk.map((m) => (m.partition === cutP ? "unknown" : "stored")),
    );

    // Every message said stored is readable where the result says, with its key, while the cut still holds.
    const said = [...raw.map((m, i) => ({ m, x: rawResults[i]! })), ...viaSdk.map((m, i) => ({ m, x: err.results[i]! }))];
    for (const { m, x } of said) {
      if (x.status !== "stored") continue;
      const page = await json(a!, "GET", `/v1/topics/parts/partitions/${x.partition}/messages?offset=${x.offset}&limit=1`);
      const got = (page.body.messages as { offset: number; key: string; payload_base64: string }[])[0];
      assert.deepEqual(got && [got.offset, got.key, Buffer.from(got.payload_base64, "base64").toString()], [x.offset, m.key, m.payload], `stored ${m.payload}`);
    }

    // After the heal: each stored message is there exactly once, at its result's place; an
    // unknown one, if it was stored at all, only in the cut owner's partition and once (its
    // part was sent there once); nothing is said "not stored" here.
    proxy.heal("both");
    await waitFor(async () => (await json(a!, "GET", `/v1/topics/parts/partitions/${cutP}/messages?limit=1`)).status === 200, { timeoutMs: 10_000, what: "forwarding to heal" });
    const where = new Map<string, string[]>();
    for (let p = 0; p < PARTITIONS; p++) {
      for (const x of await replayAll(a!, "parts", p)) where.set(x.payload, [...(where.get(x.payload) ?? []), `${p}:${x.offset}`]);
    }
    for (const { m, x } of said) {
      assert.notEqual(x.status, "not_stored");
      if (x.status === "stored") assert.deepEqual(where.get(m.payload), [`${x.partition}:${x.offset}`], `${m.payload} stored once, where its result says`);
      else assert.ok((where.get(m.payload) ?? []).every((w) => w.startsWith(`${cutP}:`)) && (where.get(m.payload)?.length ?? 0) <= 1, `${m.payload} (unknown): ${String(where.get(m.payload))}`);
    }
  });

  test("a remote child's copier sends again only the part of a push the other cluster did not store", async () => {
    const { c, proxy, cutNode } = await clusterWithProxiedNode();
    const [a] = c.urls;
    const cutP = await topicWithCutPartition(a!, "mirror", cutNode);
    const local = await startNode({ env: { NARAD_LOG_LEVEL: "warn" } }); // its warnings are evidence below
    cleanups.push(async () => {
      await local.kill();
      await removeDir(local.dataDir);
    });
    assert.equal((await json(local.url, "POST", "/v1/topics", { name: "events", partitions: 1 })).status, 201);
    const at = await json(local.url, "POST", "/v1/topics/events/children", { topic: "mirror", kind: "remote", url: a });
    assert.equal(at.status, 201, JSON.stringify(at.body));
    const produce = async (ms: Msg[]) => {
      const r = await json(local.url, "POST", "/v1/topics/events/messages/batch", { messages: ms.map((m) => ({ key: m.key, payload_base64: Buffer.from(m.payload).toString("base64") })) });
      assert.equal(r.status, 202, JSON.stringify(r.body));
    };
    const lag = async () => /narad_child_lag_messages\{parent="events",child="mirror"\} 0\b/.test(await (await fetch(`${local.url}/metrics`)).text());
    // A first copy through to the cut node's partition, before the cut.
    const warm = spreadBatch("warm", 1).filter((m) => m.partition === cutP);
    await produce(warm);
    await waitFor(async () => (await replayAll(a!, "mirror", cutP)).some((x) => x.payload === warm[0]!.payload), { timeoutMs: 10_000, what: "the first copy" });
    await waitFor(lag, { timeoutMs: 10_000, what: "the copier to record the first copy" });

    proxy.cut("both");
    const batch = spreadBatch("copy", 3);
    await produce(batch); // one parent append: the copier pushes it as one batch
    // The push spans three owners; the cut one's part gets no answer, the others store theirs.
    // The copier then pushes only that part again, which goes around the cut owner.
    await waitFor(lag, { timeoutMs: 20_000, what: "every copy to be stored on the other cluster" });
    const stored = batch.filter((m) => m.partition !== cutP).length;
    assert.match(local.output(), new RegExp(`"storedKept":${stored}\\b`), "the first push was stored in part, and the copier kept which records were");

    // Around the cut owner, every copy is there exactly once: the parts stored by the first push
    // were not pushed again.
    const around: string[] = [];
    for (let p = 0; p < PARTITIONS; p++) if (p !== cutP) around.push(...(await replayAll(a!, "mirror", p)).map((x) => x.payload));
    assert.deepEqual([...count(around)].sort(), batch.map((m) => [m.payload, 1] as [string, number]).sort());
    // The cut owner's partition holds, besides the first copy, at most the part whose answer was lost.
    proxy.heal("both");
    await waitFor(async () => (await json(a!, "GET", `/v1/topics/mirror/partitions/${cutP}/messages?limit=1`)).status === 200, { timeoutMs: 10_000, what: "forwarding to heal" });
    const cutPart = new Set(batch.filter((m) => m.partition === cutP).map((m) => m.payload));
    for (const x of await replayAll(a!, "mirror", cutP)) assert.ok(x.payload === warm[0]!.payload || cutPart.has(x.payload), `${x.payload} in the cut owner's partition`);
  });
});
