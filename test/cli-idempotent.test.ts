// `narad produce --idempotent` against a real node (docs/client.md): it takes a producer id, and
// the same id and sequence sent again are answered as a duplicate at the first place, stored once.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, runNarad, startNode, type RunningNode } from "./harness.js";

let node: RunningNode;
before(async () => {
  node = await startNode({ dev: true });
});
after(async () => {
  await node?.kill();
  if (node) await removeDir(node.dataDir);
});

test("narad produce --idempotent: a re-send with --producer-id and --sequence is a duplicate, stored once", async () => {
  const env = { NARAD_URL: node.url };
  assert.equal((await runNarad(["topic", "create", "cli-idem"], { env })).code, 0);
  const first = await runNarad(["produce", "cli-idem", "once", "--idempotent", "--json"], { env });
  assert.equal(first.code, 0, first.stderr);
  const j = JSON.parse(first.stdout) as { partition: number; offset: number; producer_id: string; sequence: number; duplicate: boolean };
  assert.match(j.producer_id, /^[0-9a-f]{32}$/);
  assert.equal(j.sequence, 0);
  assert.equal(j.duplicate, false);
  const again = await runNarad(["produce", "cli-idem", "once", "--idempotent", "--producer-id", j.producer_id, "--sequence", "0"], { env });
  assert.equal(again.code, 0, again.stderr);
  assert.equal(again.stdout, `partition ${j.partition} offset ${j.offset} (duplicate: stored before) producer ${j.producer_id} sequence 0\n`);
  const replay = await fetch(`${node.url}/v1/topics/cli-idem/partitions/${j.partition}/messages`);
  const page = (await replay.json()) as { messages: unknown[] };
  assert.equal(page.messages.length, 1);
  const bad = await runNarad(["produce", "cli-idem", "x", "--sequence", "3"], { env });
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /--idempotent/);
});
