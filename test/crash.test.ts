// Crash tests with real processes: what a 202 and a 204 promise across kill -9, SIGTERM and
// (in the test-only power-loss mode) a simulated power loss.

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, startNode, waitFor, type RunningNode } from "./harness.js";

const dirs: string[] = [];
const nodes: RunningNode[] = [];
after(async () => {
  for (const n of nodes) await n.kill();
  for (const d of dirs) await removeDir(d);
});

async function start(opts: Parameters<typeof startNode>[0] = {}): Promise<RunningNode> {
  const n = await startNode(opts);
  nodes.push(n);
  if (!dirs.includes(n.dataDir)) dirs.push(n.dataDir);
  return n;
}

async function createTopic(url: string, name: string, partitions = 3): Promise<void> {
  const r = await fetch(`${url}/v1/topics`, { method: "POST", body: JSON.stringify({ name, partitions }), headers: { "content-type": "application/json" } });
  assert.equal(r.status, 201);
}

async function replayAll(url: string, topic: string, partitions: number): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (let p = 0; p < partitions; p++) {
    let offset = 0;
    for (;;) {
      const r = await fetch(`${url}/v1/topics/${topic}/partitions/${p}/messages?offset=${offset}&limit=1000`);
      assert.equal(r.status, 200);
      const page = (await r.json()) as { messages: { offset: number; payload_base64: string }[]; next_offset: number; end_offset: number };
      for (const m of page.messages) out.set(`${p}/${m.offset}`, Buffer.from(m.payload_base64, "base64").toString());
      if (page.messages.length === 0 || page.next_offset >= page.end_offset) break;
      offset = page.next_offset;
    }
  }
  return out;
}

/** Producers that keep going until stopped, recording every 202. */
function producers(url: string, topic: string, concurrency: number) {
  const acked = new Map<string, string>(); // payload -> "p/offset"
  let stop = false;
  let seq = 0;
  const loops = Array.from({ length: concurrency }, async () => {
    while (!stop) {
      const payload = `m-${seq++}`;
      try {
        const r = await fetch(`${url}/v1/topics/${topic}/messages`, { method: "POST", body: payload });
        if (r.status === 202) {
          const j = (await r.json()) as { partition: number; offset: number };
          acked.set(payload, `${j.partition}/${j.offset}`);
        } else await r.arrayBuffer();
      } catch {
        // The node died under us: this produce is ambiguous and is not counted.
      }
    }
  });
  return {
    acked,
    async stop() {
      stop = true;
      await Promise.all(loops);
    },
  };
}

/** Consumers that consume and ack until stopped, recording when each ack answered 204. */
function ackers(url: string, topic: string, concurrency: number) {
  const ackedAt = new Map<string, number>(); // payload -> Date.now() when the 204 arrived
  let stop = false;
  const loops = Array.from({ length: concurrency }, async () => {
    while (!stop) {
      try {
        const r = await fetch(`${url}/v1/topics/${topic}/consume/batch?max_messages=20&wait_ms=200`, { method: "POST" });
        if (r.status !== 200) {
          await r.arrayBuffer();
          continue;
        }
        const ms = ((await r.json()) as { messages: { receipt_handle: string; payload_base64: string }[] }).messages;
        if (ms.length === 0) continue;
        const a = await fetch(`${url}/v1/topics/${topic}/ack/batch`, {
          method: "POST",
          body: JSON.stringify({ receipt_handles: ms.map((m) => m.receipt_handle) }),
          headers: { "content-type": "application/json" },
        });
        const now = Date.now();
        const res = ((await a.json()) as { results: { status: number }[] }).results;
        res.forEach((x, i) => {
          if (x.status === 204) ackedAt.set(Buffer.from(ms[i]!.payload_base64, "base64").toString(), now);
        });
      } catch {
        // Node gone: whatever was in flight is ambiguous.
      }
    }
  });
  return {
    ackedAt,
    async stop() {
      stop = true;
      await Promise.all(loops);
    },
  };
}

async function drain(url: string, topic: string): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    const r = await fetch(`${url}/v1/topics/${topic}/consume/batch?max_messages=100`, { method: "POST" });
    const ms = ((await r.json()) as { messages: { receipt_handle: string; payload_base64: string }[] }).messages;
    if (ms.length === 0) return out;
    for (const m of ms) out.push(Buffer.from(m.payload_base64, "base64").toString());
    await fetch(`${url}/v1/topics/${topic}/ack/batch`, {
      method: "POST",
      body: JSON.stringify({ receipt_handles: ms.map((m) => m.receipt_handle) }),
      headers: { "content-type": "application/json" },
    });
  }
}

describe("crashes", () => {
  test("kill -9 during concurrent produces loses no message that got a 202", async () => {
    const n1 = await start();
    await createTopic(n1.url, "crash");
    const p = producers(n1.url, "crash", 32);
    await waitFor(() => p.acked.size >= 3000, { timeoutMs: 60_000, what: "3000 acknowledged produces" });
    await n1.kill();
    await p.stop();
    const n2 = await start({ dataDir: n1.dataDir });
    const stored = await replayAll(n2.url, "crash", 3);
    let missing = 0;
    for (const [payload, where] of p.acked) if (stored.get(where) !== payload) missing++;
    assert.equal(missing, 0, `${missing} of ${p.acked.size} acknowledged messages were lost or moved`);
    for (const v of stored.values()) assert.match(v, /^m-\d+$/, "recovery serves only whole, valid records");
    await n2.stop();
  });

  test("after SIGTERM and a restart, no acked message comes back", async () => {
    const n1 = await start();
    await createTopic(n1.url, "graceful");
    const sent: string[] = [];
    for (let i = 0; i < 300; i++) {
      const r = await fetch(`${n1.url}/v1/topics/graceful/messages`, { method: "POST", body: `g-${i}` });
      assert.equal(r.status, 202);
      sent.push(`g-${i}`);
    }
    const acked = new Set<string>();
    while (acked.size < 150) {
      const r = await fetch(`${n1.url}/v1/topics/graceful/consume`, { method: "POST" });
      assert.equal(r.status, 200);
      const body = Buffer.from(await r.arrayBuffer()).toString();
      const a = await fetch(`${n1.url}/v1/topics/graceful/ack?receipt_handle=${encodeURIComponent(r.headers.get("narad-receipt-handle")!)}`, { method: "POST" });
      assert.equal(a.status, 204);
      acked.add(body);
    }
    assert.equal(await n1.stop(), 0, "a graceful stop exits 0");
    const n2 = await start({ dataDir: n1.dataDir });
    const back = await drain(n2.url, "graceful");
    assert.deepEqual(back.filter((b) => acked.has(b)), [], "acked messages came back after a graceful stop");
    assert.deepEqual(new Set(back), new Set(sent.filter((s) => !acked.has(s))), "every unacked message is available after the restart");
    await n2.stop();
  });

  for (const mode of ["kill", "power-loss"] as const) {
    // A kill may forget the acks not yet written to the OS (~ack_flush_interval_ms = 100 ms);
    // a power loss those not yet fsynced (~1000 + 100 ms). Allow 400 ms of slack for timers
    // and the test's own clock readings on a busy two-core machine.
    const windowMs = mode === "kill" ? 100 + 400 : 1100 + 400;
    test(`${mode}: no 202 is lost, and only acks of the last ~${windowMs - 400} ms are forgotten`, async () => {
      const env: Record<string, string> = mode === "power-loss" ? { NARAD_TEST_POWER_LOSS: "1" } : {};
      const n1 = await start({ env });
      if (mode === "power-loss") assert.match(n1.output(), /POWER-LOSS MODE IS ON/);
      await createTopic(n1.url, "pl");
      const p = producers(n1.url, "pl", 8);
      const c = ackers(n1.url, "pl", 4);
      await waitFor(() => c.ackedAt.size >= 2000 && p.acked.size >= 3000, { timeoutMs: 60_000, what: "2000 acks" });
      const killedAt = Date.now();
      await n1.kill();
      await Promise.all([p.stop(), c.stop()]);
      const n2 = await start({ dataDir: n1.dataDir });
      const stored = await replayAll(n2.url, "pl", 3);
      let missing = 0;
      for (const [payload, where] of p.acked) if (stored.get(where) !== payload) missing++;
      assert.equal(missing, 0, `${missing} acknowledged produces lost`);
      const back = await drain(n2.url, "pl");
      const forgotten = back.filter((b) => c.ackedAt.has(b));
      const tooOld = forgotten.filter((b) => killedAt - c.ackedAt.get(b)! > windowMs);
      assert.deepEqual(tooOld, [], `acks older than ${windowMs} ms before the kill were forgotten`);
      await n2.stop();
    });
  }
});
