// A full disk and a failing fsync, answered through the node: a real Broker on real files, its
// storage behind the fault-injecting filesystem (test/support/fault-fs.ts, through
// BrokerOptions.storageFs), behind the real HTTP server in this process. The spec's answer: the
// produce is refused with the error table's JSON body (500 storage_failed, indefinite), the log
// stops rather than retrying (fsyncgate): the produces that follow are refused before they take an
// offset (503 storage_unavailable, definite) until, after a back-off, the log is reopened from
// disk in place (issue 12 item 4: it once stayed stopped until a restart). Every message answered
// 202 before is still there, byte for byte, and none of the refused ones, then and after the node
// is opened again from disk.
//
// In-process because src/server.ts builds its own filesystem (the real one) and offers no seam
// for it: test/support/in-process-node.ts composes what startServer composes for a single node,
// with the faulty filesystem passed to the broker.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ERRORS } from "../src/protocol/errors.js";
import { FaultFs } from "./support/fault-fs.js";
import { startInProcessNode as startNode, type InProcessNode as Node } from "./support/in-process-node.js";

async function produce(url: string, payload: Buffer): Promise<{ status: number; body: unknown; contentType: string | null }> {
  const r = await fetch(`${url}/v1/topics/t/messages`, { method: "POST", body: payload, headers: { "content-type": "application/octet-stream" } });
  return { status: r.status, body: await r.json(), contentType: r.headers.get("content-type") };
}

async function replayAll(url: string): Promise<Map<number, Buffer>> {
  const r = await fetch(`${url}/v1/topics/t/partitions/0/messages?offset=0&limit=1000`);
  assert.equal(r.status, 200);
  const body = (await r.json()) as { messages: { offset: number; payload_base64: string }[] };
  return new Map(body.messages.map((m) => [m.offset, Buffer.from(m.payload_base64, "base64")]));
}

const STORED = 20;

const FAULTS: { name: string; arm: (fs: FaultFs) => void }[] = [
  { name: "ENOSPC on append (the disk fills up mid-write)", arm: (fs) => fs.fillDiskAfter(300, ".log") },
  { name: "EIO on fdatasync", arm: (fs) => fs.inject({ op: "fdatasync", code: "EIO", pathEndsWith: ".log" }) },
];

for (const fault of FAULTS) {
  test(`${fault.name}: the node answers 500 storage_failed with the table's JSON body, refuses later produces definitely, reopens the log once the fault is gone (no restart), and keeps every earlier 202`, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "narad-storage-faults-"));
    const ffs = new FaultFs();
    let node: Node | undefined = await startNode(dataDir, ffs);
    try {
      const created = await fetch(`${node.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "t", partitions: 1 }), headers: { "content-type": "application/json" } });
      assert.equal(created.status, 201);
      const accepted = new Map<number, Buffer>();
      for (let i = 0; i < STORED; i++) {
        const payload = Buffer.from(`message ${i} `.repeat(40));
        const r = await produce(node.url, payload);
        assert.equal(r.status, 202, JSON.stringify(r.body));
        accepted.set((r.body as { offset: number }).offset, payload);
      }
      assert.equal(accepted.size, STORED);

      fault.arm(ffs);
      const refused = await produce(node.url, Buffer.alloc(1000, 0x61));
      assert.equal(refused.status, 500);
      assert.match(refused.contentType ?? "", /^application\/json/);
      assert.deepEqual(refused.body, { error: { code: "storage_failed", message: ERRORS.storage_failed.message } });
      assert.equal(ERRORS.storage_failed.definite, false, "the table calls it indefinite: the message may be stored");

      // The log stopped: no retry of the failed fsync; the next produce is refused before it
      // takes an offset, and /readyz says the node's storage is not taking writes.
      const fdatasyncs = ffs.count("fdatasync", ".log");
      const again = await produce(node.url, Buffer.from("while stopped"));
      assert.equal(again.status, 503);
      assert.equal((again.body as { error: { code: string } }).error.code, "storage_unavailable");
      assert.equal(ERRORS.storage_unavailable.definite, true);
      assert.equal(ffs.count("fdatasync", ".log"), fdatasyncs, "the stopped log issued no fdatasync");
      const notReady = await fetch(`${node.url}/readyz`);
      assert.equal(notReady.status, 503);
      const why = (await notReady.json()) as { error: { code: string; message: string } };
      assert.equal(why.error.code, "storage_unavailable");
      assert.match(why.error.message, /1 partition log is stopped/);
      assert.doesNotMatch(why.error.message, /\bt\//, "an unauthenticated probe names no topic");

      // Nothing of the refused produces is visible; every 202 is.
      const live = await replayAll(node.url);
      assert.deepEqual([...live.keys()], [...accepted.keys()]);
      for (const [o, p] of accepted) assert.ok(live.get(o)!.equals(p), `offset ${o} as stored`);

      // The fault is gone: after its back-off the log is reopened by a produce, without a restart.
      ffs.clear();
      let revived: Awaited<ReturnType<typeof produce>> | undefined;
      const deadline = Date.now() + 10_000;
      while (revived === undefined && Date.now() < deadline) {
        const r = await produce(node.url, Buffer.from("after the fault"));
        if (r.status === 202) revived = r;
        else {
          assert.equal(r.status, 503, JSON.stringify(r.body));
          await new Promise((res) => setTimeout(res, 50));
        }
      }
      assert.ok(revived, "the log took produces again within 10 s of the fault's end");
      assert.equal((revived.body as { offset: number }).offset, STORED, "the reopened log goes on right after the last synced record");
      assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
      const afterReopen = await replayAll(node.url);
      assert.equal(afterReopen.size, STORED + 1, "the failed commit's record was cut; the new one is there");
      for (const [o, p] of accepted) assert.ok(afterReopen.get(o)!.equals(p), `offset ${o} as stored`);
      accepted.set(STORED, Buffer.from("after the fault"));

      await node.stop();
      node = undefined;

      // Opened again from disk, with the real filesystem: every 202 is there, byte for byte.
      node = await startNode(dataDir, undefined);
      const reopened = await replayAll(node.url);
      for (const [o, p] of accepted) assert.ok(reopened.get(o)?.equals(p), `offset ${o} survived the reopen`);
      assert.equal(reopened.size, STORED + 1, "no record of the failed commit came back");
      const after = await produce(node.url, Buffer.from("after the restart"));
      assert.equal(after.status, 202);
      assert.equal((after.body as { offset: number }).offset, STORED + 1);
    } finally {
      await node?.stop();
      await rm(dataDir, { recursive: true, force: true });
    }
  });
}
