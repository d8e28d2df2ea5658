// The single produce's path on one node (Broker.produceOne, issue 17): concurrent unkeyed produces
// join one partition's commits, and what follows a commit (the pending bytes, the produced count,
// the commit time, long polls) is done once per commit for all the produces in it. Each message
// is answered 202 with its own place, stored once, and counted once; a long poll waiting on the
// topic is answered by a produce.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startInProcessNode } from "./support/in-process-node.js";

/** A metric's value from /metrics (the first line naming it with these labels). */
function metric(text: string, name: string, labels = ""): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}${labels} `));
  assert.ok(line !== undefined, `${name}${labels} in /metrics`);
  return Number(line.split(" ")[1]);
}

test("200 concurrent single produces, counted once per commit: each gets its own place, is stored once and counted once, and a long poll gets one", async () => {
  const dir = await mkdtemp(join(tmpdir(), "narad-single-"));
  const node = await startInProcessNode(dir);
  try {
    const created = await fetch(`${node.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "s", partitions: 3 }), headers: { "content-type": "application/json" } });
    assert.equal(created.status, 201);
    const poll = fetch(`${node.url}/v1/topics/s/consume?wait_ms=20000`, { method: "POST" });
    const n = 200;
    const answers = await Promise.all(
      Array.from({ length: n }, async (_, i) => {
        const r = await fetch(`${node.url}/v1/topics/s/messages`, { method: "POST", body: `single-${i}` });
        assert.equal(r.status, 202);
        return (await r.json()) as { partition: number; offset: number };
      }),
    );
    const polled = await poll;
    assert.equal(polled.status, 200);
    assert.match(await polled.text(), /^single-\d+$/);
    const places = new Set(answers.map((a) => `${a.partition}/${a.offset}`));
    assert.equal(places.size, n, "every 202 names its own place");
    const stored = new Map<string, string>();
    for (let p = 0; p < 3; p++) {
      const page = (await (await fetch(`${node.url}/v1/topics/s/partitions/${p}/messages?limit=1000`)).json()) as { messages: { offset: number; payload_base64: string }[] };
      for (const m of page.messages) stored.set(`${p}/${m.offset}`, Buffer.from(m.payload_base64, "base64").toString());
    }
    assert.equal(stored.size, n);
    assert.deepEqual(new Set(stored.values()), new Set(answers.map((_, i) => `single-${i}`)));
    for (const place of places) assert.ok(stored.has(place), `${place} holds a message`);
    const text = await (await fetch(`${node.url}/metrics`)).text();
    assert.equal(metric(text, "narad_produced_messages_total", '{topic="s"}'), n);
    const commits = metric(text, "narad_commit_seconds_count");
    assert.ok(commits >= 1 && commits <= n, `${commits} commits observed for ${n} produces`);
  } finally {
    await node.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
