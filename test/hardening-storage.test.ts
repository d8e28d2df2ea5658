// Regression tests of issue 12 items 2 and 4 (file descriptors run out; a full disk), each named
// after what broke, against real node processes: a real tmpfs filled up (skipped with the reason
// where this process may not mount one), and a real descriptor limit set with prlimit(1).
// (The rest of issue 12 is in hardening.test.ts; the in-process fault-injection cases are in
// storage-faults.test.ts.)

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { open, readdir, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { removeDir, startNode, tempDir, waitFor, type RunningNode } from "./harness.js";
import { keyPartition } from "../src/broker/partitioner.js";

const json = { "content-type": "application/json" };

async function post(url: string, body: unknown): Promise<{ status: number; code?: string; message?: string; body: unknown }> {
  const r = await fetch(url, { method: "POST", headers: json, body: JSON.stringify(body) });
  const text = await r.text();
  const parsed = text.startsWith("{") ? (JSON.parse(text) as { error?: { code: string; message: string } }) : text;
  const err = typeof parsed === "object" ? parsed.error : undefined;
  return { status: r.status, code: err?.code, message: err?.message, body: parsed };
}

async function produce(url: string, topic: string, payload: string, key?: string): Promise<{ status: number; code?: string; offset?: number }> {
  const r = await fetch(`${url}/v1/topics/${topic}/messages${key === undefined ? "" : `?key=${key}`}`, { method: "POST", body: payload });
  const b = (await r.json()) as { offset?: number; error?: { code: string } };
  return { status: r.status, code: b.error?.code, offset: b.offset };
}

async function ack(url: string, topic: string, handle: string): Promise<number> {
  const r = await fetch(`${url}/v1/topics/${topic}/ack?receipt_handle=${encodeURIComponent(handle)}`, { method: "POST" });
  await r.arrayBuffer();
  return r.status;
}

async function replay(url: string, topic: string, partition = 0): Promise<Map<number, string>> {
  const r = await fetch(`${url}/v1/topics/${topic}/partitions/${partition}/messages?offset=0&limit=1000`);
  assert.equal(r.status, 200);
  const body = (await r.json()) as { messages: { offset: number; payload_base64: string }[] };
  return new Map(body.messages.map((m) => [m.offset, Buffer.from(m.payload_base64, "base64").toString("utf8")]));
}

/** A tmpfs of `sizeBytes` at a fresh directory, or the reason none can be mounted here. */
async function mountTmpfs(sizeBytes: number): Promise<{ dir: string; unmount(): Promise<void> } | string> {
  if (process.platform !== "linux") return "tmpfs is Linux only";
  const dir = await tempDir("narad-full-disk-");
  const r = spawnSync("mount", ["-t", "tmpfs", "-o", `size=${sizeBytes}`, "tmpfs", dir], { encoding: "utf8" });
  if (r.status !== 0) {
    await removeDir(dir);
    return `cannot mount a tmpfs here (${(r.stderr || r.error?.message || "").trim() || `exit ${r.status}`}); needs root or CAP_SYS_ADMIN`;
  }
  return {
    dir,
    async unmount() {
      spawnSync("umount", ["-l", dir]);
      await removeDir(dir);
    },
  };
}

/** Fills the filesystem of `dir` until a write fails ENOSPC; returns the filler's path. */
async function fillDisk(dir: string): Promise<string> {
  const filler = join(dir, "filler");
  const h = await open(filler, "a");
  try {
    for (const size of [1 << 20, 64 << 10, 4096, 512, 1]) {
      const buf = Buffer.alloc(size, 0x7a);
      for (;;) {
        try {
          await h.write(buf);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === "ENOSPC") break;
          throw e;
        }
      }
    }
  } finally {
    await h.close();
  }
  return filler;
}

const mounted = await mountTmpfs(8 * 1024 * 1024);

test(
  "a full disk broke a partition until a restart and a node could not start on it: writes answer the storage error, the log recovers when space returns, and a start on the full disk serves consumes, acks, replay and deletes",
  { skip: typeof mounted === "string" ? mounted : false },
  async () => {
    assert.ok(typeof mounted !== "string");
    const dataDir = join(mounted.dir, "data");
    let node: RunningNode | undefined;
    try {
      node = await startNode({ dataDir });
      assert.equal((await post(`${node.url}/v1/topics`, { name: "t", partitions: 1 })).status, 201);
      const accepted = new Map<number, string>();
      for (let i = 0; i < 20; i++) {
        const r = await produce(node.url, "t", `before the disk filled ${i}`);
        assert.equal(r.status, 202);
        accepted.set(r.offset!, `before the disk filled ${i}`);
      }
      // Acks in acks.log, so the next start has an ack log to compact (what a full disk refused).
      for (let i = 0; i < 2; i++) {
        const consumed = await fetch(`${node.url}/v1/topics/t/consume`, { method: "POST" });
        assert.equal(consumed.status, 200);
        await consumed.arrayBuffer();
        assert.equal(await ack(node.url, "t", consumed.headers.get("narad-receipt-handle")!), 204);
      }

      let filler = await fillDisk(mounted.dir);
      // A page's slack may take a record or two; then every write is refused.
      let refused: Awaited<ReturnType<typeof produce>> | undefined;
      for (let i = 0; i < 200 && refused === undefined; i++) {
        const r = await produce(node.url, "t", "x".repeat(8192));
        if (r.status === 202) accepted.set(r.offset!, "x".repeat(8192));
        else refused = r;
      }
      assert.ok(refused, "the full disk refused a produce");
      assert.equal(refused.status, 500);
      assert.equal(refused.code, "storage_failed", "the failed write itself is indefinite");
      const stopped = await produce(node.url, "t", "while stopped");
      assert.deepEqual([stopped.status, stopped.code], [503, "storage_unavailable"], "a stopped log refuses before it takes an offset");
      const ready = await fetch(`${node.url}/readyz`);
      assert.equal(ready.status, 503, "/readyz tells the truth");
      assert.equal(((await ready.json()) as { error: { code: string } }).error.code, "storage_unavailable");
      const create = await post(`${node.url}/v1/topics`, { name: "u", partitions: 2 });
      assert.deepEqual([create.status, create.code], [503, "storage_unavailable"], `a create on a full disk answers the storage error: ${JSON.stringify(create.body)}`);
      assert.match(create.message!, /disk is full \(ENOSPC\)/);
      assert.deepEqual(await readdir(join(dataDir, "topics")), ["t"], "the refused create left no directory");

      // Space returns: the log is reopened from disk, with no restart.
      await unlink(filler);
      const after = await waitFor(
        async () => {
          const r = await produce(node!.url, "t", "after space returned");
          return r.status === 202 ? r : undefined;
        },
        { timeoutMs: 15_000, intervalMs: 100, what: "the stopped log to take produces again" },
      );
      accepted.set(after.offset!, "after space returned");
      assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
      assert.deepEqual(await replay(node.url, "t"), accepted, "every 202 is there, byte for byte, and nothing refused");
      assert.equal(await node.stop(), 0);
      node = undefined;

      // A start on a full disk: read-mostly.
      filler = await fillDisk(mounted.dir);
      node = await startNode({ dataDir });
      assert.match(node.output(), /the disk is full: node.json keeps the previous boot sequence/);
      assert.match(node.output(), /the ack log is not compacted at open/, "the ack log opened without the compaction the full disk refused");
      assert.deepEqual(await replay(node.url, "t"), accepted, "replay serves on a full disk");
      const c = await fetch(`${node.url}/v1/topics/t/consume`, { method: "POST" });
      assert.equal(c.status, 200, "consume serves on a full disk");
      await c.arrayBuffer();
      assert.equal(await ack(node.url, "t", c.headers.get("narad-receipt-handle")!), 204, "an ack on a full disk is kept in memory");
      const full = await produce(node.url, "t", "y".repeat(65536));
      assert.ok(full.status === 500 || full.status === 503, `a produce answers the storage error, not 202 (${full.status} ${full.code})`);
      assert.ok(full.code === "storage_failed" || full.code === "storage_unavailable");
      // The API that frees space is reachable: delete the topic.
      assert.equal((await fetch(`${node.url}/v1/topics/t`, { method: "DELETE" })).status, 204);
      await unlink(filler);
      assert.equal((await post(`${node.url}/v1/topics`, { name: "v", partitions: 1 })).status, 201);
      assert.equal((await produce(node.url, "v", "fresh")).status, 202);
      assert.equal(await node.stop(), 0, "a graceful stop after a full disk exits 0");
      node = undefined;
    } finally {
      await node?.kill();
      await mounted.unmount();
    }
  },
);

test.after(async () => {
  if (typeof mounted !== "string") await mounted.unmount().catch(() => {});
});

const hasPrlimit = spawnSync("prlimit", ["--version"]).status === 0;

/** Descriptors the process has open now (Linux). */
async function fdsOf(pid: number): Promise<number> {
  return (await readdir(`/proc/${pid}/fd`)).length;
}

test(
  "five topics of 1 024 partitions exhausted the descriptors: limits.partitions (derived from RLIMIT_NOFILE) refuses a create or grow past it with 409, leaving nothing on disk",
  { skip: hasPrlimit ? false : "prlimit(1) is not installed" },
  async () => {
    // RLIMIT_NOFILE 512: (512 - 256) / 4 = 64 partitions.
    const node = await startNode({ wrapper: ["prlimit", "--nofile=512:512", "--"] });
    try {
      const over = await post(`${node.url}/v1/topics`, { name: "big", partitions: 65 });
      assert.deepEqual([over.status, over.code], [409, "partitions_limit"], JSON.stringify(over.body));
      assert.match(over.message!, /limits\.partitions/);
      assert.match(over.message!, /of the 64/);
      await assert.rejects(stat(join(node.dataDir, "topics", "big")), { code: "ENOENT" }, "a refused create leaves nothing on disk");
      assert.equal((await post(`${node.url}/v1/topics`, { name: "a", partitions: 40 })).status, 201);
      const grow = await fetch(`${node.url}/v1/topics/a`, { method: "PATCH", headers: json, body: JSON.stringify({ partitions: 65 }) });
      assert.equal(grow.status, 409);
      assert.equal(((await grow.json()) as { error: { code: string } }).error.code, "partitions_limit");
      assert.equal((await readdir(join(node.dataDir, "topics", "a", "partitions"))).length, 40, "a refused grow makes no partition");
      const b = await post(`${node.url}/v1/topics`, { name: "b", partitions: 25 });
      assert.equal(b.status, 409, "40 + 25 is past 64");
      assert.equal((await post(`${node.url}/v1/topics`, { name: "b", partitions: 24 })).status, 201);
      assert.equal((await fetch(`${node.url}/v1/topics/a`, { method: "DELETE" })).status, 204);
      assert.equal((await post(`${node.url}/v1/topics`, { name: "c", partitions: 40 })).status, 201, "a delete gives its partitions back");
      assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
    } finally {
      await node.kill();
      await removeDir(node.dataDir);
    }
  },
);

test(
  "each partition held its descriptors for life and a create that ran out of them answered 500 and left half-made directories: idle partitions let their descriptors go, and a create hitting EMFILE is undone with 503 storage_unavailable",
  { skip: hasPrlimit ? false : "prlimit(1) is not installed" },
  async () => {
    // A limit set above what 512 descriptors hold, so the descriptors run out first.
    const node = await startNode({
      wrapper: ["prlimit", "--nofile=512:512", "--"],
      env: { NARAD_LIMITS_PARTITIONS: "5000", NARAD_STORAGE_IDLE_CLOSE_MS: "100", NARAD_STORAGE_HOUSEKEEPING_INTERVAL_MS: "50" },
    });
    try {
      assert.match(node.output(), /limits.partitions is above what the descriptor limit holds/);
      // Three topics of 120 partitions: ~3 descriptors each while created, none once idle.
      const baseline = await fdsOf(node.proc.pid!);
      for (const name of ["p1", "p2", "p3"]) {
        const r = await post(`${node.url}/v1/topics`, { name, partitions: 120 });
        assert.equal(r.status, 201, JSON.stringify(r.body));
        await waitFor(async () => (await fdsOf(node.proc.pid!)) < baseline + 40, { timeoutMs: 10_000, what: `${name}'s idle partitions to let their descriptors go` });
      }
      // Every partition is opened again on demand: 360 produces, one keyed to each partition
      // (unkeyed ones would fill one partition's run: docs/api.md, "Partitioning").
      const keyOf = (p: number) => {
        let j = 0;
        while (keyPartition(`k${j}`, 120) !== p) j++;
        return `k${j}`;
      };
      for (const name of ["p1", "p2", "p3"]) {
        for (let i = 0; i < 120; i++) assert.equal((await produce(node.url, name, `m${i}`, keyOf(i))).status, 202);
      }
      for (let p = 0; p < 120; p += 17) assert.equal((await replay(node.url, "p2", p)).size, 1, `p2/${p} holds its message`);

      // One create that needs more descriptors than there are: undone, with the storage error.
      const huge = await post(`${node.url}/v1/topics`, { name: "huge", partitions: 1000 });
      assert.deepEqual([huge.status, huge.code], [503, "storage_unavailable"], JSON.stringify(huge.body));
      assert.match(huge.message!, /no file descriptor is free \(EMFILE\)/);
      await assert.rejects(stat(join(node.dataDir, "topics", "huge")), { code: "ENOENT" }, "no half-made directory is left");
      // The descriptors it took are given back: the node goes on.
      await waitFor(async () => (await fetch(`${node.url}/readyz`)).status === 200, { timeoutMs: 10_000, what: "/readyz to be 200 again" });
      assert.equal((await post(`${node.url}/v1/topics`, { name: "after", partitions: 10 })).status, 201);
      assert.equal((await produce(node.url, "after", "still serving")).status, 202);
      assert.equal(await node.stop(), 0, "a graceful stop after EMFILE exits 0");
    } finally {
      await node.kill();
      await removeDir(node.dataDir);
    }
  },
);
