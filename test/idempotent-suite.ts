// The idempotent producers suite (SPEC "Idempotent producers"): one test body for every
// deployment (test/support/deployment.ts), run on one node and on a three-node cluster. Requests
// go through every node in turn, so on a cluster a re-send reaches a different node than its
// first send, and the crash tests kill the node that owns the producer's partition: the dedupe
// window must come back from the log, through kill -9 and the test-only power-loss mode
// (NARAD_TEST_POWER_LOSS=1: what was not fsynced is lost with the process).
//
// The window's and expiry's limits are set small by a restart of the whole deployment at the end
// (producers.window_sequences, producers.idle_expiry_ms), so the tests before it run on defaults.

import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Narad } from "../src/client/index.js";
import { waitFor } from "./harness.js";
import type { Deploy, Deployment } from "./support/deployment.js";

interface Answer {
  status: number;
  duplicate: boolean;
  body: { partition?: number; offset?: number; duplicate?: boolean; results?: { partition: number; offset: number; duplicate?: boolean }[]; error?: { code: string } };
}

async function mint(url: string): Promise<string> {
  const r = await fetch(`${url}/v1/producers`, { method: "POST" });
  assert.equal(r.status, 201);
  const j = (await r.json()) as { producer_id: string };
  assert.match(j.producer_id, /^[0-9a-f]{32}$/);
  return j.producer_id;
}

async function send(url: string, topic: string, id: string, seq: number | string, payload: string, key?: string): Promise<Answer> {
  const q = key === undefined ? "" : `?key=${encodeURIComponent(key)}`;
  const r = await fetch(`${url}/v1/topics/${topic}/messages${q}`, { method: "POST", body: payload, headers: { "narad-producer-id": id, "narad-sequence": String(seq) } });
  return { status: r.status, duplicate: r.headers.get("narad-duplicate") === "true", body: (await r.json()) as Answer["body"] };
}

async function sendBatch(url: string, topic: string, id: string, seq: number, payloads: string[], keys?: string[]): Promise<Answer> {
  const messages = payloads.map((p, i) => (keys === undefined ? { payload_base64: Buffer.from(p).toString("base64") } : { key: keys[i], payload_base64: Buffer.from(p).toString("base64") }));
  const r = await fetch(`${url}/v1/topics/${topic}/messages/batch`, {
    method: "POST",
    body: JSON.stringify({ messages }),
    headers: { "content-type": "application/json", "narad-producer-id": id, "narad-sequence": String(seq) },
  });
  return { status: r.status, duplicate: r.headers.get("narad-duplicate") === "true", body: (await r.json()) as Answer["body"] };
}

async function createTopic(url: string, name: string, partitions = 3): Promise<void> {
  const r = await fetch(`${url}/v1/topics`, { method: "POST", body: JSON.stringify({ name, partitions }), headers: { "content-type": "application/json" } });
  assert.equal(r.status, 201, await r.text());
}

/** Every stored payload of the topic and where it is ("p/offset"), through `url`. */
async function stored(url: string, topic: string, partitions = 3): Promise<{ payload: string; at: string }[]> {
  const out: { payload: string; at: string }[] = [];
  for (let p = 0; p < partitions; p++) {
    let offset = 0;
    for (;;) {
      const r = await fetch(`${url}/v1/topics/${topic}/partitions/${p}/messages?offset=${offset}&limit=1000`);
      assert.equal(r.status, 200, await r.clone().text());
      const page = (await r.json()) as { messages: { offset: number; payload_base64: string }[]; next_offset: number; end_offset: number };
      for (const m of page.messages) out.push({ payload: Buffer.from(m.payload_base64, "base64").toString(), at: `${p}/${m.offset}` });
      if (page.messages.length === 0 || page.next_offset >= page.end_offset) break;
      offset = page.next_offset;
    }
  }
  return out;
}

/** How many times each payload is stored. */
function counts(rows: { payload: string }[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const r of rows) m.set(r.payload, (m.get(r.payload) ?? 0) + 1);
  return m;
}

export function defineIdempotentSuite(name: string, deploy: Deploy): void {
  describe(`idempotent producers (${name})`, () => {
    let d: Deployment;
    const url = (i: number) => d.urls[i % d.urls.length]!;
    before(async () => {
      d = await deploy();
    });
    after(async () => {
      await d?.stop();
    });

    test("a re-send through another node lands once, answered with the original partition and offset", async () => {
      await createTopic(url(0), "resend");
      const id = await mint(url(0));
      const first = await send(url(0), "resend", id, 0, "r-0");
      assert.equal(first.status, 202, JSON.stringify(first.body));
      assert.equal(first.duplicate, false);
      assert.equal(first.body.duplicate, undefined);
      for (let i = 1; i <= 3; i++) {
        const again = await send(url(i), "resend", id, 0, "r-0");
        assert.equal(again.status, 202, JSON.stringify(again.body));
        assert.equal(again.duplicate, true, "Narad-Duplicate: true");
        assert.deepEqual(again.body, { partition: first.body.partition, offset: first.body.offset, duplicate: true });
      }
      // A keyed one goes to its key's partition, and its re-send finds it there.
      const keyed = await send(url(1), "resend", id, 1, "r-1", "k");
      const keyedAgain = await send(url(2), "resend", id, 1, "r-1", "k");
      assert.deepEqual(keyedAgain.body, { partition: keyed.body.partition, offset: keyed.body.offset, duplicate: true });
      // With Prefer: return=minimal the duplicate's answer is its headers (docs/api.md, "Produce").
      const minimal = await fetch(`${url(3)}/v1/topics/resend/messages`, { method: "POST", body: "r-0", headers: { "narad-producer-id": id, "narad-sequence": "0", prefer: "return=minimal" } });
      assert.equal(minimal.status, 202);
      assert.equal(await minimal.text(), "");
      assert.deepEqual(
        ["narad-duplicate", "narad-partition", "narad-offset", "preference-applied"].map((h) => minimal.headers.get(h)),
        ["true", String(first.body.partition), String(first.body.offset), "return=minimal"],
      );
      const c = counts(await stored(url(0), "resend"));
      assert.equal(c.get("r-0"), 1);
      assert.equal(c.get("r-1"), 1);
    });

    test("single sends, one a request, are found again after a kill -9 of their owner: every re-send is a duplicate at its first place", async () => {
      // On one node every send after the first takes the single produce's direct path (the
      // window is built by then): what it stored must be in the log with its producer and sequence.
      await createTopic(url(0), "singles");
      const id = await mint(url(0));
      const firsts: Answer[] = [];
      for (let seq = 0; seq < 20; seq++) {
        const a = await send(url(seq), "singles", id, seq, `s-${seq}`);
        assert.equal(a.status, 202, JSON.stringify(a.body));
        assert.equal(a.duplicate, false);
        firsts.push(a);
      }
      assert.equal(new Set(firsts.map((a) => a.body.partition)).size, 1, "sequences of one run share a partition");
      const owner = await d.owner("singles", firsts[0]!.body.partition!);
      await owner.kill();
      await owner.start();
      for (let seq = 0; seq < 20; seq++) {
        const again = await send(url(seq + 1), "singles", id, seq, `s-${seq}`);
        assert.equal(again.duplicate, true, `sequence ${seq}: ${JSON.stringify(again.body)}`);
        assert.deepEqual(again.body, { partition: firsts[seq]!.body.partition, offset: firsts[seq]!.body.offset, duplicate: true });
      }
      const next = await send(url(0), "singles", id, 20, "s-20");
      assert.equal(next.duplicate, false);
      const c = counts(await stored(url(0), "singles"));
      for (let seq = 0; seq <= 20; seq++) assert.equal(c.get(`s-${seq}`), 1, `s-${seq} stored once`);
    });

    test("a batch re-sent in part stores only the new messages, and re-sent whole stores nothing", async () => {
      await createTopic(url(0), "batch");
      const id = await mint(url(1));
      const p = (i: number) => `b-${i}`;
      const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => a + i);
      const first = await sendBatch(url(0), "batch", id, 100, range(100, 110).map(p));
      assert.equal(first.status, 202, JSON.stringify(first.body));
      assert.equal(first.duplicate, false);
      assert.ok(first.body.results!.every((r) => r.duplicate === undefined));
      // 105..114: the first five are stored already.
      const part = await sendBatch(url(1), "batch", id, 105, range(105, 115).map(p));
      assert.equal(part.status, 202, JSON.stringify(part.body));
      assert.equal(part.duplicate, true);
      part.body.results!.forEach((r, i) => {
        if (i < 5) assert.deepEqual(r, { ...first.body.results![5 + i], duplicate: true });
        else assert.equal(r.duplicate, undefined);
      });
      const whole = await sendBatch(url(2), "batch", id, 100, range(100, 115).map(p));
      assert.equal(whole.status, 202);
      const expected = [...first.body.results!, ...part.body.results!.slice(5)].map((r) => ({ partition: r.partition, offset: r.offset, duplicate: true }));
      assert.deepEqual(whole.body.results, expected);
      // Keyed: the batch spans partitions (on a cluster, several owners); re-sent whole, nothing is stored again.
      const keys = range(0, 12).map((i) => `key-${i}`);
      const kb = await sendBatch(url(0), "batch", id, 200, range(200, 212).map(p), keys);
      assert.equal(kb.status, 202, JSON.stringify(kb.body));
      assert.ok(new Set(kb.body.results!.map((r) => r.partition)).size > 1, "the keyed batch spans partitions");
      const kb2 = await sendBatch(url(1), "batch", id, 200, range(200, 212).map(p), keys);
      assert.deepEqual(kb2.body.results, kb.body.results!.map((r) => ({ ...r, duplicate: true })));
      const c = counts(await stored(url(2), "batch"));
      for (const i of [...range(100, 115), ...range(200, 212)]) assert.equal(c.get(p(i)), 1, `${p(i)} stored once`);
    });

    test("concurrent sends of one sequence store it once", async () => {
      await createTopic(url(0), "concurrent");
      const id = await mint(url(2));
      // Sequences 0..4 through every node; 5..9 all through one (on a cluster its forwards to the
      // owner are merged into one batch that holds the sequence many times).
      for (let seq = 0; seq < 10; seq++) {
        const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => send(url(seq < 5 ? i : 1), "concurrent", id, seq, `c-${seq}`)));
        for (const a of answers) assert.equal(a.status, 202, JSON.stringify(a.body));
        const places = new Set(answers.map((a) => `${a.body.partition}/${a.body.offset}`));
        assert.equal(places.size, 1, `every answer names one place: ${[...places].join(", ")}`);
        assert.equal(answers.filter((a) => !a.duplicate).length, 1, "exactly one send stored it");
      }
      const c = counts(await stored(url(1), "concurrent"));
      for (let seq = 0; seq < 10; seq++) assert.equal(c.get(`c-${seq}`), 1);
    });

    test("bad producer headers: an unknown id is 400 unknown_producer, a bad sequence 400 invalid_argument", async () => {
      await createTopic(url(0), "bad");
      const unknown = await send(url(0), "bad", "0123456789abcdef0123456789abcdef", 0, "x");
      assert.equal(unknown.status, 400);
      assert.equal(unknown.body.error?.code, "unknown_producer");
      const notHex = await send(url(1), "bad", "not-an-id", 0, "x");
      assert.equal(notHex.body.error?.code, "unknown_producer");
      const id = await mint(url(0));
      for (const seq of ["-1", "9007199254740992", "1.5", "x", ""]) {
        const a = await send(url(2), "bad", id, seq, "x");
        assert.equal(a.status, 400, `sequence ${JSON.stringify(seq)}`);
        assert.equal(a.body.error?.code, "invalid_argument");
      }
      const r = await fetch(`${url(0)}/v1/topics/bad/messages`, { method: "POST", body: "x", headers: { "narad-producer-id": id } });
      assert.equal(r.status, 400);
      assert.equal(((await r.json()) as Answer["body"]).error?.code, "invalid_argument");
      assert.equal((await stored(url(0), "bad")).length, 0, "nothing was stored");
    });

    for (const mode of ["kill", "power-loss"] as const) {
      test(`${mode}: the SDK's idempotent producer stores every message once across a crash of the owner`, async () => {
        const topic = `crash-${mode}`;
        await createTopic(url(0), topic);
        // Each lane is an SDK client of one node with its own producer; sequences below 1024 of
        // one producer share a partition, whose owner is killed.
        const clients = d.urls.map((u) => new Narad({ url: u, requestTimeoutMs: 5_000 }));
        try {
          const lanes = clients.map((c) => c.producer({ idempotent: true, retryDeadlineMs: 90_000 }));
          const firsts = await Promise.all(lanes.map((p, i) => p.produce(topic, `${i}-0`)));
          const victim = await d.owner(topic, firsts[0]!.partition);
          if (mode === "power-loss") {
            assert.equal(await victim.stop(), 0);
            await victim.start({ env: { NARAD_TEST_POWER_LOSS: "1" } });
            assert.match(victim.output(), /POWER-LOSS MODE IS ON/);
          }
          const perLane = 120;
          const results: { payload: string; at: string; duplicate: boolean }[] = firsts.map((r, i) => ({ payload: `${i}-0`, at: `${r.partition}/${r.offset}`, duplicate: r.duplicate }));
          let done = 0;
          const run = lanes.map(async (p, i) => {
            await Promise.all(
              Array.from({ length: 4 }, async (_, w) => {
                for (let k = 1 + w; k < perLane; k += 4) {
                  const payload = `${i}-${k}`;
                  const r = await p.produce(topic, payload);
                  results.push({ payload, at: `${r.partition}/${r.offset}`, duplicate: r.duplicate });
                  done++;
                }
              }),
            );
          });
          await waitFor(() => done >= 60, { timeoutMs: 60_000, what: "60 idempotent produces before the kill" });
          await victim.kill();
          await victim.start();
          await Promise.all(run);
          const rows = await stored(url(1), topic);
          const c = counts(rows);
          const where = new Map(rows.map((r) => [r.payload, r.at]));
          assert.equal(results.length, lanes.length * perLane);
          for (const r of results) {
            assert.equal(c.get(r.payload), 1, `${r.payload} stored once (answered ${r.at}${r.duplicate ? ", duplicate" : ""})`);
            assert.equal(where.get(r.payload), r.at, `${r.payload} is where its answer said`);
          }
          // Never routed around the dead owner: each lane's sequences (all below 1024) stayed on its
          // producer's partition, however its sends were refused meanwhile.
          lanes.forEach((_, i) => {
            const parts = new Set(results.filter((r) => r.payload.startsWith(`${i}-`)).map((r) => r.at.split("/")[0]));
            assert.equal(parts.size, 1, `lane ${i} stored on one partition: ${[...parts].join(", ")}`);
          });
          // And a re-send of what was stored before the crash is a duplicate at its first place.
          const id = await lanes[0]!.id();
          const again = await send(url(2), topic, id, 0, "0-0");
          assert.deepEqual(again.body, { partition: firsts[0]!.partition, offset: firsts[0]!.offset, duplicate: true });
        } finally {
          await Promise.all(clients.map((c) => c.close()));
        }
      });
    }

    test("with the SDK, produceBatch says which messages were duplicates", async () => {
      await createTopic(url(0), "sdk-batch");
      const c = new Narad({ url: url(1) });
      try {
        const p = c.producer({ idempotent: true });
        const rs = await p.produceBatch("sdk-batch", [{ payload: "s-0" }, { payload: "s-1" }, { payload: "s-2", key: "k" }]);
        assert.deepEqual(rs.map((r) => [r.sequence, r.duplicate]), [[0, false], [1, false], [2, false]]);
        // Another client going on from the same id and sequence: a re-send, answered as such.
        const c2 = new Narad({ url: url(2) });
        try {
          const p2 = c2.producer({ idempotent: true, producerId: await p.id(), nextSequence: 1 });
          const again = await p2.produceBatch("sdk-batch", [{ payload: "s-1" }, { payload: "s-2", key: "k" }, { payload: "s-3" }]);
          assert.deepEqual(again.map((r) => r.duplicate), [true, true, false]);
          assert.deepEqual(again.slice(0, 2).map((r) => [r.partition, r.offset]), rs.slice(1).map((r) => [r.partition, r.offset]));
        } finally {
          await c2.close();
        }
      } finally {
        await c.close();
      }
    });

    test("a small window: a sequence older than the window is 409, before and after a restart", async () => {
      const env = { NARAD_PRODUCERS_WINDOW_SEQUENCES: "50" };
      assert.deepEqual(await d.stopAll(), d.nodes.map(() => 0));
      await d.startAll({ env });
      await createTopic(url(0), "window");
      const id = await mint(url(0));
      const payloads = Array.from({ length: 60 }, (_, i) => `w-${i}`);
      const b = await sendBatch(url(1), "window", id, 0, payloads);
      assert.equal(b.status, 202, JSON.stringify(b.body));
      const check = async (via: number) => {
        const old = await send(url(via), "window", id, 3, "w-3");
        assert.equal(old.status, 409, JSON.stringify(old.body));
        assert.equal(old.body.error?.code, "sequence_out_of_window");
        const recent = await send(url(via + 1), "window", id, 55, "w-55");
        assert.deepEqual(recent.body, { ...b.body.results![55], duplicate: true });
      };
      await check(0);
      // After a restart the window is rebuilt from the log, with the same bound.
      const owner = await d.owner("window", b.body.results![0]!.partition);
      await owner.kill();
      await owner.start({ env });
      await check(1);
      assert.equal(counts(await stored(url(2), "window")).get("w-3"), 1);
    });

    test("a short idle expiry: an id unused for longer is 400 unknown_producer through every node", async () => {
      // Its own start: an id must outlive the restarts of the test before, not this expiry.
      const idleExpiryMs = 2000;
      assert.deepEqual(await d.stopAll(), d.nodes.map(() => 0));
      await d.startAll({ env: { NARAD_PRODUCERS_IDLE_EXPIRY_MS: String(idleExpiryMs) } });
      await createTopic(url(0), "expiry");
      // An id unused for longer than producers.idle_expiry_ms (plus the coarse recording of use,
      // a quarter of it) is unknown. Time itself is what is under test here.
      const idle = await mint(url(2));
      assert.equal((await send(url(0), "expiry", idle, 0, "e-0")).status, 202);
      const usedAt = Date.now();
      await waitFor(() => Date.now() - usedAt > idleExpiryMs * 1.5, { timeoutMs: idleExpiryMs * 3, intervalMs: 100, what: "the idle expiry to pass" });
      for (let i = 0; i < d.urls.length; i++) {
        const a = await send(url(i), "expiry", idle, 1, "e-1");
        assert.equal(a.status, 400, JSON.stringify(a.body));
        assert.equal(a.body.error?.code, "unknown_producer");
      }
    });
  });
}
