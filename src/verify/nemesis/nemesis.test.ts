// Process faults and the nemesis schedule against real broker processes (bin/narad), each with
// its own temp data directory. Every process is killed in `after`, also when a test fails.

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NodeProcess, readProcState, getHealth, type NodeProcessOptions } from "./process.js";
import { Nemesis, applyFault, planFaults, restoreTarget, type FaultValue, type InjectedFaultKind } from "./nemesis.js";
import { startProxy, type Proxy } from "../proxy/proxy.js";
import { waitUntil } from "../../../test/support/peers.js";

type Rec = { type: "invoke" | "ok" | "info"; value: FaultValue };

const nodes: NodeProcess[] = [];
const dirs: string[] = [];
const proxies: Proxy[] = [];

async function newNode(opts: Partial<NodeProcessOptions> = {}): Promise<NodeProcess> {
  const dataDir = await mkdtemp(join(tmpdir(), "narad-nemesis-"));
  dirs.push(dataDir);
  const n = new NodeProcess({ dataDir, ...opts });
  nodes.push(n);
  return n;
}

function recorder(): { recs: Rec[]; record: (type: Rec["type"], f: "fault", value: FaultValue) => void } {
  const recs: Rec[] = [];
  return {
    recs,
    record: (type, f, value) => {
      assert.equal(f, "fault");
      recs.push({ type, value });
    },
  };
}

after(async () => {
  for (const p of proxies) await p.close();
  for (const n of nodes) await n.dispose();
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

describe("node process faults", { timeout: 120_000 }, () => {
  test("kill then start: the boot id changes and the port stays", async () => {
    const n = await newNode();
    const s1 = await n.start();
    assert.ok(s1.pid > 0);
    assert.ok(s1.boot.length > 0);
    assert.ok(n.port > 0);
    assert.equal(s1.port, n.port);
    const port = n.port;
    const h = await n.health();
    assert.equal(h.status, 200);
    assert.equal(h.node, n.nodeId);
    assert.equal(h.boot, s1.boot);

    const k = await n.kill();
    assert.equal(k.signal, "SIGKILL");
    assert.equal(k.pid, s1.pid);
    assert.equal(k.killed_boot, s1.boot);
    assert.equal(n.running, false);
    await assert.rejects(n.kill(), /not running/);

    const s2 = await n.start();
    assert.notEqual(s2.boot, s1.boot);
    assert.notEqual(s2.pid, s1.pid);
    assert.equal(n.port, port);
    assert.equal((await n.health()).boot, s2.boot);
  });

  test("terminate stops gracefully with exit code 0", async () => {
    const n = await newNode();
    await n.start();
    const t = await n.terminate();
    assert.equal(t.exit_code, 0, `exit ${JSON.stringify(t)}; output:\n${n.output()}`);
    assert.equal(t.signal, null);
    assert.equal(t.sigkill_needed, false);
    assert.ok(t.duration_ms >= 0);
  });

  test("pause: /proc shows T and requests time out; resume: it answers again", async () => {
    const n = await newNode();
    await n.start();
    const p = await n.pause();
    assert.equal(p.state, "T");
    assert.equal(await readProcState(p.pid), "T");
    assert.equal(n.paused, true);
    await assert.rejects(n.health(300), /timed out/);
    const r = await n.resume();
    assert.notEqual(r.state, "T");
    assert.equal(n.paused, false);
    assert.equal((await n.health(5_000)).status, 200);
  });

  test("terminate of a paused node continues it so it can stop gracefully", async () => {
    const n = await newNode();
    await n.start();
    await n.pause();
    const t = await n.terminate();
    assert.equal(t.exit_code, 0, `exit ${JSON.stringify(t)}; output:\n${n.output()}`);
    assert.equal(t.sigkill_needed, false);
  });

  test("power loss is refused on a node not in power-loss mode", async () => {
    const n = await newNode();
    await n.start();
    await assert.rejects(n.powerLoss(), /NARAD_TEST_POWER_LOSS=1/);
    assert.equal(n.running, true);
    const { recs, record } = recorder();
    assert.equal(await applyFault(record, { node: n }, "power-loss"), false);
    assert.deepEqual(recs.map((r) => r.type), ["invoke", "info"]);
    assert.match(String(recs[1]!.value.error), /NARAD_TEST_POWER_LOSS=1/);
  });

  test("power loss kills a node in power-loss mode, and it starts again", async () => {
    const n = await newNode({ powerLoss: true });
    const s1 = await n.start();
    const pl = await n.powerLoss();
    assert.equal(pl.signal, "SIGKILL");
    assert.equal(pl.power_loss_mode, true);
    const s2 = await n.start();
    assert.notEqual(s2.boot, s1.boot);
  });

  test("a start that cannot become ready says why", async () => {
    const n = await newNode({ extraArgs: ["--no-such-flag"] });
    await assert.rejects(n.start(), /exited/);
    assert.equal(n.running, false);
  });
});

describe("nemesis schedule", { timeout: 180_000 }, () => {
  const faults: InjectedFaultKind[] = ["kill", "pause", "terminate"];

  async function runOnce(targets: { node: NodeProcess }[], seed: number): Promise<Rec[]> {
    const { recs, record } = recorder();
    const nem = new Nemesis({ targets, seed, faults, intervalMs: 20, intervalJitterMs: 10, holdMs: 50, holdJitterMs: 20, faultsMax: 4, record });
    nem.start();
    await nem.finished();
    await nem.stop();
    return recs;
  }

  test("the same seed gives the same fault sequence, with evidence for each", async () => {
    const a = await newNode();
    const b = await newNode();
    await a.start();
    await b.start();
    const targets = [{ node: a }, { node: b }];
    const seed = 1234;
    const run1 = await runOnce(targets, seed);
    const run2 = await runOnce(targets, seed);
    const shape = (recs: Rec[]) => recs.map((r) => `${r.type} ${r.value.kind} ${r.value.node}`);
    assert.deepEqual(shape(run1), shape(run2), `seed ${seed}`);

    // The sequence is the plan: each injected fault followed by its healing.
    const plan = planFaults({ seed, faults, intervalMs: 20, intervalJitterMs: 10, holdMs: 50, holdJitterMs: 20, targetCount: 2 }, 4);
    const heal: Record<string, string> = { kill: "start", terminate: "start", pause: "resume" };
    const names = [a.nodeId, b.nodeId];
    const expected = plan.flatMap((s) => [
      `invoke ${s.kind} ${names[s.target]}`,
      `ok ${s.kind} ${names[s.target]}`,
      `invoke ${heal[s.kind]} ${names[s.target]}`,
      `ok ${heal[s.kind]} ${names[s.target]}`,
    ]);
    assert.deepEqual(shape(run1), expected);

    // Evidence: stops carry signal or exit code; starts a boot id other than the node's last.
    const lastBoot = new Map<string, string>();
    for (const r of run1.filter((r) => r.type === "ok")) {
      const v = r.value;
      if (v.kind === "kill") assert.equal(v.signal, "SIGKILL");
      if (v.kind === "terminate") assert.equal(v.exit_code, 0);
      if (v.kind === "pause") assert.equal(v.state, "T");
      if (v.kind === "start") {
        assert.equal(typeof v.boot, "string");
        assert.notEqual(v.boot, lastBoot.get(v.node));
        lastBoot.set(v.node, v.boot as string);
      }
    }
    assert.equal(a.running && b.running && !a.paused && !b.paused, true);
  });

  test("stop() cuts a hold short and restores every node and proxy", async () => {
    const n = await newNode();
    await n.start();
    const proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: n.port });
    proxies.push(proxy);
    assert.equal((await getHealth("127.0.0.1", proxy.address.port, 5_000)).status, 200);

    const { recs, record } = recorder();
    const nem = new Nemesis({ targets: [{ node: n, proxy }], seed: 9, faults: ["cut"], intervalMs: 0, holdMs: 600_000, record });
    nem.start();
    await waitUntil(() => recs.some((r) => r.type === "ok" && r.value.kind === "cut"), "the cut to be applied");
    await assert.rejects(getHealth("127.0.0.1", proxy.address.port, 300), /timed out/);
    await nem.stop();
    assert.deepEqual(
      recs.map((r) => `${r.type} ${r.value.kind}`),
      ["invoke cut", "ok cut", "invoke heal", "ok heal"],
    );
    const healOk = recs[3]!.value as FaultValue & { proxy: { upstream: { cut_ms: number } }; healed: { upstream: string[] } };
    assert.deepEqual(healOk.healed.upstream, ["cut"]);
    assert.ok(healOk.proxy.upstream.cut_ms >= 0);
    assert.equal((await getHealth("127.0.0.1", proxy.address.port, 5_000)).status, 200);

    // A paused node is resumed by stop().
    const rec2 = recorder();
    const nem2 = new Nemesis({ targets: [{ node: n }], seed: 9, faults: ["pause"], intervalMs: 0, holdMs: 600_000, record: rec2.record });
    nem2.start();
    await waitUntil(() => n.paused, "the pause");
    await nem2.stop();
    assert.equal(n.paused, false);
    assert.equal((await n.health(5_000)).status, 200);
    assert.deepEqual(rec2.recs.map((r) => `${r.type} ${r.value.kind}`), ["invoke pause", "ok pause", "invoke resume", "ok resume"]);
  });

  test("cut-kill: a produce sent during its cut is stored, its sender gets a reset instead of the 202, and after the start the record is there", async () => {
    const n = await newNode();
    await n.start();
    const proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: n.port });
    proxies.push(proxy);
    const created = await fetch(`${n.url}/v1/topics`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ name: "ck", partitions: 1 }) });
    assert.equal(created.status, 201, await created.text());
    // What the driver reads: the node's own count of 202s, past the proxy.
    const acceptedCount = async () => {
      const text = await (await fetch(`${n.url}/metrics`)).text();
      return [...text.matchAll(/^narad_produced_messages_total\{[^}]*\}\s+(\S+)/gm)].reduce((a, m) => a + Number(m[1]), 0);
    };
    const target = { node: n, proxy, acceptedCount };
    const { recs, record } = recorder();
    // Synchronously up to its first wait: the cut is in force before the produce leaves.
    const fault = applyFault(record, target, "cut-kill");
    const produced = fetch(`http://127.0.0.1:${proxy.address.port}/v1/topics/ck/messages`, { method: "POST", body: "held" }).then(
      (r) => `answered ${r.status}`,
      (e: Error) => `failed: ${e.message}`,
    );
    assert.equal(await fault, true);
    assert.match(await produced, /^failed/, "the 202 was held and dropped, never delivered");
    await restoreTarget(record, target);
    assert.deepEqual(
      recs.map((r) => `${r.type} ${r.value.kind}`),
      ["invoke cut", "ok cut", "invoke kill", "ok kill", "invoke start", "ok start", "invoke heal", "ok heal"],
    );
    assert.equal(recs[1]!.value.direction, "downstream");
    assert.ok((recs[1]!.value.accepted_unanswered as number) >= 1, JSON.stringify(recs[1]!.value));
    assert.deepEqual((recs[7]!.value.healed as { downstream: string[] }).downstream, ["cut", "reset"]);
    const page = (await (await fetch(`http://127.0.0.1:${proxy.address.port}/v1/topics/ck/partitions/0/messages?offset=0&limit=10`)).json()) as { messages: { payload_base64: string }[] };
    assert.deepEqual(page.messages.map((m) => Buffer.from(m.payload_base64, "base64").toString()), ["held"]);
  });

  test("a schedule with power-loss or cut needs nodes and proxies that can do it", async () => {
    const n = await newNode();
    assert.throws(() => new Nemesis({ targets: [{ node: n }], seed: 1, faults: ["power-loss"], intervalMs: 1, holdMs: 1, record: () => {} }), /NARAD_TEST_POWER_LOSS/);
    assert.throws(() => new Nemesis({ targets: [{ node: n }], seed: 1, faults: ["cut"], intervalMs: 1, holdMs: 1, record: () => {} }), /proxy/);
    const proxy = await startProxy({ listenHost: "127.0.0.1", listenPort: 0, targetHost: "127.0.0.1", targetPort: 1 });
    proxies.push(proxy);
    assert.throws(() => new Nemesis({ targets: [{ node: n, proxy }], seed: 1, faults: ["cut-kill"], intervalMs: 1, holdMs: 1, record: () => {} }), /accepted/);
  });
});
