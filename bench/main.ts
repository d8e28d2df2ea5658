// `npm run bench`: Narad's figures beside baselines measured in the same run, as ratios.
//
// Baselines: a bare node:http server answering at once ("plain"), and one answering 202 after a
// shared fdatasync ("fdatasync"), both in their own processes like the broker. The load comes
// from this process (closed loop: N requests kept outstanding), so client and server share the
// machine's two cores, as they do for the peer brokers' figures in shared/peers/results.md.
//
// BENCH_SECONDS (default 5) sets each run's duration and BENCH_ROUNDS (default 3) how many runs a
// figure takes, each interleaved with its baseline (A B A B A B), reported as medians: on a shared
// two-core VM one run of a figure can differ from the next by a third, and interleaving lets a
// slow spell hit both sides. BENCH_ONLY=name,name runs a subset.
//
// The peer brokers (NATS JetStream, BullMQ on Redis) are measured live in this run when their
// servers are installed: see peers.ts, and BENCH_ONLY=peers (or nats, bullmq). Idempotent
// producers beside plain produce, and the dedupe state's memory: idempotent.ts (BENCH_ONLY=idempotent).
// The SDK's produce() from many concurrent callers, batching on and off, beside nats.js:
// sdk-produce.ts (BENCH_ONLY=sdk).

import { spawn, type ChildProcess } from "node:child_process";
import { mkdtemp, rm, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Pool } from "undici";
import { encodeBinaryBatch, decodeDeliveries, BATCH_BINARY_TYPE, DELIVERIES_TYPE } from "../src/protocol/wire.js";
import { benchPeers, PEER_NAMES, withNatsPublish } from "./peers.js";
import { track } from "./cleanup.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** Each figure runs this many times, interleaved with its baseline; the medians are reported. */
const ROUNDS = Math.max(1, Math.floor(Number(process.env.BENCH_ROUNDS ?? 3)));
const WARMUP_SECONDS = 1;
const ONLY = new Set((process.env.BENCH_ONLY ?? "").split(",").filter(Boolean));
const PAYLOAD = Buffer.alloc(1024, 0x78);

interface Proc {
  url: string;
  proc: ChildProcess;
  stop(): Promise<void>;
}

async function spawnUntil(args: string[], re: RegExp, env: Record<string, string> = {}): Promise<{ proc: ChildProcess; m: RegExpExecArray }> {
  const proc = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, ...env } });
  const m = await new Promise<RegExpExecArray>((res, rej) => {
    let out = "";
    proc.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      const m = re.exec(out);
      if (m) res(m);
    });
    proc.on("exit", (c) => rej(new Error(`${args.join(" ")} exited ${c}: ${out}`)));
  });
  return { proc, m };
}

/** Stops `proc` (SIGTERM, then waits for it); until then cleanup.ts stops it on a signal or kills it on a bare exit. */
function stopper(proc: ChildProcess): () => Promise<void> {
  const stop = () =>
    new Promise<void>((res) => {
      if (proc.exitCode !== null) return res();
      proc.once("exit", () => res());
      proc.kill("SIGTERM");
    }).then(untrack);
  const untrack = track({ kill: () => proc.kill("SIGKILL"), stop });
  return stop;
}

async function baseline(mode: "plain" | "durable" | "shaped", dir: string): Promise<Proc> {
  const { proc, m } = await spawnUntil([join(ROOT, "dist/bench/baseline-server.js"), mode, dir], /port (\d+)/);
  return { url: `http://127.0.0.1:${m[1]}`, proc, stop: stopper(proc) };
}

/** BENCH_PROFILE_DIR=DIR writes a V8 CPU profile of the broker there when it stops. */
const PROFILE_ARGS = process.env.BENCH_PROFILE_DIR ? ["--cpu-prof", "--cpu-prof-dir", process.env.BENCH_PROFILE_DIR] : [];

async function narad(dir: string): Promise<Proc> {
  const { proc, m } = await spawnUntil(
    [...PROFILE_ARGS, join(ROOT, "bin/narad"), "server", "start", "--dev", "--data-dir", dir, "--listen", "127.0.0.1:0"],
    /narad listening on (http:\/\/\S+)/,
    { NARAD_LOG_LEVEL: "warn", UV_THREADPOOL_SIZE: "16" },
  );
  return { url: m[1]!, proc, stop: stopper(proc) };
}

/**
 * Runs each load `ROUNDS` times for SECONDS, interleaved (a, b, a, b, ...), after a warm-up run
 * of each, and returns per load the medians of its runs (throughput and latency percentiles).
 */
async function interleaved(...loads: ((seconds: number) => Promise<LoadResult>)[]): Promise<LoadResult[]> {
  // A short unmeasured run of each first, so the JIT has compiled the hot paths of both sides.
  for (const load of loads) await load(WARMUP_SECONDS);
  const runs: LoadResult[][] = loads.map(() => []);
  for (let r = 0; r < ROUNDS; r++) for (let i = 0; i < loads.length; i++) runs[i]!.push(await loads[i]!(SECONDS));
  const median = (xs: number[]) => {
    const a = [...xs].sort((x, y) => x - y);
    return a.length % 2 ? a[(a.length - 1) / 2]! : (a[a.length / 2 - 1]! + a[a.length / 2]!) / 2;
  };
  return runs.map((rs) => ({
    ops: rs.reduce((n, x) => n + x.ops, 0),
    seconds: rs.reduce((n, x) => n + x.seconds, 0),
    perS: median(rs.map((x) => x.perS)),
    p50Ms: median(rs.map((x) => x.p50Ms)),
    p99Ms: median(rs.map((x) => x.p99Ms)),
    errors: rs.reduce((n, x) => n + x.errors, 0),
    cpuUsPerMsg: Object.fromEntries(Object.keys(rs[0]!.cpuUsPerMsg).map((k) => [k, median(rs.map((x) => x.cpuUsPerMsg[k] ?? NaN))])),
    ...(rs[0]!.fsyncsPerMsg !== undefined ? { fsyncsPerMsg: median(rs.map((x) => x.fsyncsPerMsg ?? NaN)) } : {}),
  }));
}

export interface LoadResult {
  ops: number;
  seconds: number;
  perS: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
  /** Server CPU time a message (µs), per process named in the closed loop's `pid`. */
  cpuUsPerMsg: Record<string, number>;
  /** fdatasync calls of the server a message, when counted (countFsyncs). */
  fsyncsPerMsg?: number;
}

/** Keeps `inFlight` operations outstanding for `seconds`; `op` resolves to the count it did. `pid`: the server, whose CPU use is printed. */
async function closedLoop(inFlight: number, seconds: number, op: (loop: number) => Promise<number>, pid?: number | Record<string, number>): Promise<LoadResult> {
  const lat: number[] = [];
  let ops = 0;
  let errors = 0;
  let lastError = "";
  const pids: Record<string, number> = typeof pid === "number" ? { server: pid } : (pid ?? {});
  const cpu0 = await cpuOf(pids);
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  await Promise.all(
    Array.from({ length: inFlight }, async (_, loop) => {
      while (performance.now() < end) {
        const s = performance.now();
        try {
          // Not `ops += await op()`: that reads ops before the await and loses the other
          // loops' counts (a regression test of sorts: every figure was 1/N of the truth).
          const n = await op(loop);
          ops += n;
          lat.push(performance.now() - s);
        } catch (e) {
          errors++;
          lastError = (e as Error).message;
        }
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  const cpu1 = await cpuOf(pids);
  const cpuUsPerMsg: Record<string, number> = {};
  const parts = Object.keys(pids).filter((k) => cpu0[k] !== undefined && cpu1[k] !== undefined).map((k) => {
    const used = cpu1[k]! - cpu0[k]!;
    cpuUsPerMsg[k] = ops > 0 ? (used * 1e6) / ops : NaN;
    return `${k} ${(used / elapsed).toFixed(2)} cores (${ops > 0 ? ((used * 1e6) / ops).toFixed(1) : "-"} µs a message)`;
  });
  if (parts.length > 0) process.stdout.write(`    cpu: ${parts.join(", ")}, load generator ${((cpu1.self! - cpu0.self!) / elapsed).toFixed(2)} cores\n`);
  if (errors > 0) process.stdout.write(`    (${errors} operations failed in this figure; ${lastError})\n`);
  lat.sort((a, b) => a - b);
  const pct = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(lat.length * p))]! : NaN);
  return { ops, seconds: elapsed, perS: ops / elapsed, p50Ms: pct(0.5), p99Ms: pct(0.99), errors, cpuUsPerMsg };
}

/** CPU seconds used so far by each named process (from /proc) and, as `self`, by this load generator. */
async function cpuOf(pids: Record<string, number>): Promise<Record<string, number | undefined>> {
  const u = process.cpuUsage();
  const out: Record<string, number | undefined> = { self: (u.user + u.system) / 1e6 };
  for (const [name, pid] of Object.entries(pids)) {
    try {
      // /proc/PID/stat: utime and stime are fields 14 and 15, in clock ticks (100 a second here).
      const f = (await readFile(`/proc/${pid}/stat`, "utf8")).split(") ")[1]!.split(" ");
      out[name] = (Number(f[11]) + Number(f[12])) / 100;
    } catch {
      out[name] = undefined;
    }
  }
  return out;
}

/**
 * Counts the fdatasync calls of process `pid` (all its threads: libuv's pool does them) while
 * `load` runs, with perf's syscall tracepoint; the count is per message in the result. Without
 * perf (or its tracepoints) the figure is NaN and the load runs as is.
 */
async function countFsyncs(pid: number, load: () => Promise<LoadResult>): Promise<LoadResult> {
  let perf: ChildProcess;
  try {
    perf = spawn("perf", ["stat", "-x", ",", "-e", "syscalls:sys_enter_fdatasync", "-p", String(pid)], { stdio: ["ignore", "ignore", "pipe"] });
  } catch {
    return { ...(await load()), fsyncsPerMsg: NaN };
  }
  let err = "";
  perf.stderr!.on("data", (b: Buffer) => (err += b.toString()));
  const exited = new Promise<void>((res) => {
    perf.once("exit", () => res());
    perf.once("error", () => res());
  });
  await new Promise((r) => setTimeout(r, 200)); // perf attaches to every thread first
  const r = await load();
  perf.kill("SIGINT");
  await exited;
  const m = /^(\d+),/m.exec(err);
  return { ...r, fsyncsPerMsg: m && r.ops > 0 ? Number(m[1]) / r.ops : NaN };
}

async function request(pool: Pool, method: "GET" | "POST", path: string, body?: Buffer | string, headers?: Record<string, string>) {
  const r = await pool.request({ method, path, body, headers });
  const buf = Buffer.from(await r.body.arrayBuffer());
  return { status: r.statusCode, headers: r.headers, body: buf };
}

async function createTopic(pool: Pool, name: string, partitions: number): Promise<void> {
  const r = await request(pool, "POST", "/v1/topics", JSON.stringify({ name, partitions }), { "content-type": "application/json" });
  if (r.status !== 201) throw new Error(`create topic: ${r.status} ${r.body}`);
}

async function prefill(pool: Pool, topic: string, count: number): Promise<void> {
  const batch = encodeBinaryBatch(Array.from({ length: 1000 }, () => ({ payload: PAYLOAD })));
  let sent = 0;
  await Promise.all(
    Array.from({ length: 4 }, async () => {
      while (sent < count) {
        sent += 1000;
        const r = await request(pool, "POST", `/v1/topics/${topic}/messages/batch`, batch, { "content-type": BATCH_BINARY_TYPE });
        if (r.status !== 202) throw new Error(`prefill: ${r.status} ${r.body}`);
      }
    }),
  );
}

/** One 1 KiB message a request, answered 202. */
const produceOp = (p: Pool, path: string, headers?: Record<string, string>) => async () => {
  const r = await p.request({ method: "POST", path, body: PAYLOAD, ...(headers !== undefined ? { headers } : {}) });
  await r.body.arrayBuffer();
  if (r.statusCode !== 202) throw new Error(String(r.statusCode));
  return 1;
};

/** Up to 100 messages in one binary answer, then one request acking them all. */
const consumeBatchOp = (p: Pool, topic: string) => async () => {
  const r = await p.request({ method: "POST", path: `/v1/topics/${topic}/consume/batch?max_messages=100`, headers: { accept: DELIVERIES_TYPE } });
  const ds = decodeDeliveries(Buffer.from(await r.body.arrayBuffer()));
  if (typeof ds === "string") throw new Error(ds);
  if (ds.length === 0) return 0;
  const a = await p.request({
    method: "POST",
    path: `/v1/topics/${topic}/ack/batch`,
    body: JSON.stringify({ receipt_handles: ds.map((m) => m.receiptHandle) }),
    headers: { "content-type": "application/json" },
  });
  await a.body.arrayBuffer();
  if (a.statusCode !== 200) throw new Error(String(a.statusCode));
  return ds.length;
};

/** One request a message: each loop acks its previous message on its next consume (?ack=H). */
function ackNextOp(p: Pool, topic: string): (loop: number) => Promise<number> {
  const lastHandle: (string | undefined)[] = [];
  return async (loop) => {
    const prev = lastHandle[loop];
    lastHandle[loop] = undefined;
    const r = await p.request({ method: "POST", path: prev === undefined ? `/v1/topics/${topic}/consume` : `/v1/topics/${topic}/consume?ack=${prev}` });
    await r.body.arrayBuffer();
    // 410: the lease lapsed between two runs of the figure (longer BENCH_SECONDS); the next op starts afresh.
    if (r.statusCode !== 200) throw new Error(String(r.statusCode));
    lastHandle[loop] = r.headers["narad-receipt-handle"] as string;
    return 1;
  };
}

async function rssMiB(pid: number): Promise<number> {
  const s = await readFile(`/proc/${pid}/status`, "utf8");
  const m = /VmRSS:\s+(\d+) kB/.exec(s);
  return m ? Number(m[1]) / 1024 : NaN;
}

interface Row {
  figure: string;
  narad: string;
  baseline: string;
  ratio: string;
  goal: string;
}

const rows: Row[] = [];
const fmt = (n: number) => (n >= 1000 ? Math.round(n).toLocaleString("en-US") : n.toFixed(2));
function row(figure: string, naradV: string, baselineV: string, ratio: number | null, goal: string): void {
  const r = { figure, narad: naradV, baseline: baselineV, ratio: ratio === null ? "" : `${ratio.toFixed(2)}x`, goal };
  rows.push(r);
  process.stdout.write(`  ${figure}: narad ${naradV} | baseline ${baselineV} | ${r.ratio} | goal ${goal}\n`);
}
const want = (name: string) => ONLY.size === 0 || ONLY.has(name);
/** A row's server CPU and fdatasyncs a message (NaN where not counted). */
const perMsg = (r: LoadResult) => `${(r.cpuUsPerMsg.server ?? NaN).toFixed(1)} µs CPU, ${(r.fsyncsPerMsg ?? NaN).toFixed(3)} fdatasyncs a message`;

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), "narad-bench-"));
  const untrackWork = track({ dir: work, stop: () => rm(work, { recursive: true, force: true }) });
  const procs: Proc[] = [];
  try {
    process.stdout.write(`narad bench: ${SECONDS} s a figure, 1 KiB messages, data in ${work}\n`);
    const plain = await baseline("plain", work);
    const durable = await baseline("durable", work);
    const shaped = await baseline("shaped", work);
    const node = await narad(join(work, "narad"));
    procs.push(plain, durable, shaped, node);
    const pool = (url: string, connections: number) => new Pool(url, { connections, pipelining: 1, keepAliveTimeout: 60_000 });
    const np = pool(node.url, 128);
    const pp = pool(plain.url, 128);
    const dp = pool(durable.url, 128);
    const sp = pool(shaped.url, 128);

    if (want("produce")) {
      // wrk-style (issue 17): 50 connections, each sending one unkeyed 1 KiB message a request and
      // waiting for its 202, beside the bare node:http server that answers 202 after a shared
      // fdatasync. The default topic has 3 partitions, each its own log: unkeyed produces go to
      // them in runs (docs/api.md, "Partitioning"), so a group commit is one partition's, as the
      // baseline's is its one file's. One partition (one log) is the like-for-like figure, and
      // Prefer: return=minimal (a 202 without a body) is shown beside them.
      await createTopic(np, "bench-produce-1", 1);
      await createTopic(np, "bench-produce", 3);
      const wrk = (p: Pool, path: string, pid: number, headers?: Record<string, string>) => (s: number) => countFsyncs(pid, () => closedLoop(50, s, produceOp(p, path, headers), pid));
      const [base, plainB, n3, n1, n3min] = (await interleaved(
        wrk(dp, "/v1/topics/x/messages", durable.proc.pid!),
        (s) => closedLoop(50, s, produceOp(pp, "/v1/topics/x/messages"), plain.proc.pid),
        wrk(np, "/v1/topics/bench-produce/messages", node.proc.pid!),
        wrk(np, "/v1/topics/bench-produce-1/messages", node.proc.pid!),
        wrk(np, "/v1/topics/bench-produce/messages", node.proc.pid!, { prefer: "return=minimal" }),
      )) as [LoadResult, LoadResult, LoadResult, LoadResult, LoadResult];
      const vs = `fdatasync ${fmt(base.perS)} (${perMsg(base)}); plain ${fmt(plainB.perS)}`;
      row(`produce, 1 msg/request, 50 connections, 3 partitions (msgs/s; ${perMsg(n3)})`, fmt(n3.perS), vs, n3.perS / base.perS, ">= 0.9x fdatasync");
      row(`produce, 1 msg/request, 50 connections, 1 partition (msgs/s; ${perMsg(n1)})`, fmt(n1.perS), vs, n1.perS / base.perS, ">= 0.9x fdatasync");
      row(`  the same, 3 partitions, Prefer: return=minimal (msgs/s; ${perMsg(n3min)})`, fmt(n3min.perS), vs, n3min.perS / base.perS, "(a 202 without a body)");
      const [l1b, l1] = (await interleaved(
        (s) => closedLoop(1, s, produceOp(dp, "/v1/topics/x/messages"), durable.proc.pid),
        (s) => closedLoop(1, s, produceOp(np, "/v1/topics/bench-produce-1/messages"), node.proc.pid),
      )) as [LoadResult, LoadResult];
      row("produce latency at 1 in flight, p50 (ms)", l1.p50Ms.toFixed(3), `fdatasync ${l1b.p50Ms.toFixed(3)}`, l1.p50Ms / l1b.p50Ms, "");
      row("produce latency at 1 in flight, p99 (ms)", l1.p99Ms.toFixed(3), `fdatasync ${l1b.p99Ms.toFixed(3)}`, l1.p99Ms / l1b.p99Ms, `<= fdatasync p99 + 2 ms (${(l1b.p99Ms + 2).toFixed(3)})`);
    }

    if (want("stream")) {
      // The streaming protocol (docs/api.md, "Streaming protocol") through the SDK's
      // transport: "stream", one connection, N produce() calls kept in flight, beside the HTTP
      // row (one message a request, 64 in flight) and the bare node:http+fdatasync server, on the
      // default 3-partition topic. Server CPU and fdatasyncs a message on every row.
      const { Narad } = await import("../src/client/index.js");
      await createTopic(np, "bench-stream", 3).catch(() => undefined);
      const sdk = new Narad({ url: node.url, transport: "stream" });
      const streamOp = () => async () => {
        await sdk.produce("bench-stream", PAYLOAD);
        return 1;
      };
      const node64 = (s: number) => countFsyncs(node.proc.pid!, () => closedLoop(64, s, produceOp(np, "/v1/topics/bench-stream/messages"), node.proc.pid));
      const [base, http, s64, s256, s1024] = (await interleaved(
        (s) => countFsyncs(durable.proc.pid!, () => closedLoop(64, s, produceOp(dp, "/v1/topics/x/messages"), durable.proc.pid)),
        node64,
        (s) => countFsyncs(node.proc.pid!, () => closedLoop(64, s, streamOp(), node.proc.pid)),
        (s) => countFsyncs(node.proc.pid!, () => closedLoop(256, s, streamOp(), node.proc.pid)),
        (s) => countFsyncs(node.proc.pid!, () => closedLoop(1024, s, streamOp(), node.proc.pid)),
      )) as [LoadResult, LoadResult, LoadResult, LoadResult, LoadResult];
      const per = perMsg;
      row(`produce over HTTP, 1 msg/request, 64 in flight, 3 partitions (msgs/s; ${per(http)})`, fmt(http.perS), `fdatasync ${fmt(base.perS)} (${per(base)})`, http.perS / base.perS, "(the HTTP row)");
      for (const [n, r, goal] of [[64, s64, ">= 3x the HTTP row"], [256, s256, ">= 3x the HTTP row"], [1024, s1024, ">= 6x the HTTP row"]] as const) {
        row(`produce over the stream, ${n} in flight, 3 partitions (msgs/s; ${per(r)}; p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms)`, fmt(r.perS), `HTTP ${fmt(http.perS)}; fdatasync ${fmt(base.perS)}`, r.perS / http.perS, goal);
      }
      // Issue 17: the stream at 1 024 in flight beside NATS's thin publish at the same depth (a
      // core publish with a reply inbox: JetStream's PubAck comes before any fsync), live.
      await withNatsPublish(PAYLOAD, async (nats) => {
        const [s, t] = (await interleaved(
          (sec) => countFsyncs(node.proc.pid!, () => closedLoop(1024, sec, streamOp(), node.proc.pid)),
          async (sec) => {
            await nats.purge(); // not timed: the stream stays small
            return closedLoop(1024, sec, nats.thinPublish, { "nats-server": nats.pid });
          },
        )) as [LoadResult, LoadResult];
        row(`produce over the stream, 1024 in flight, vs NATS thin publish at 1024 in flight (msgs/s; ${per(s)})`, fmt(s.perS), `NATS ${fmt(t.perS)} (live; ${(t.cpuUsPerMsg["nats-server"] ?? NaN).toFixed(1)} µs server CPU a message)`, s.perS / t.perS, ">= 1x NATS thin publish");
      });
      await sdk.close();
    }

    if (want("sdk")) {
      const { benchSdkProduce } = await import("./sdk-produce.js");
      await benchSdkProduce({ closedLoop, interleaved, row, fmt, payload: PAYLOAD, url: node.url, pid: node.proc.pid!, createTopic: (name, partitions) => createTopic(np, name, partitions) });
    }

    if (want("batch")) {
      await createTopic(np, "bench-batch", 3);
      const batch = encodeBinaryBatch(Array.from({ length: 100 }, () => ({ payload: PAYLOAD })));
      const [n] = (await interleaved((s) => closedLoop(24, s, async () => {
        const r = await np.request({ method: "POST", path: "/v1/topics/bench-batch/messages/batch", body: batch, headers: { "content-type": BATCH_BINARY_TYPE } });
        await r.body.arrayBuffer();
        if (r.statusCode !== 202) throw new Error(String(r.statusCode));
        return 100;
      }, node.proc.pid))) as [LoadResult];
      row("produce, batches of 100, 24 in flight (msgs/s)", fmt(n.perS), "NATS JetStream ~160 000 (recorded)", n.perS / 200_000, ">= 200 000 msgs/s (ratio to goal)");
    }

    if (want("idempotent")) {
      const { benchIdempotent } = await import("./idempotent.js");
      await benchIdempotent({ seconds: SECONDS, rounds: ROUNDS, warmupSeconds: WARMUP_SECONDS, payload: PAYLOAD, want, closedLoop, interleaved, row, fmt, pool: np, pid: node.proc.pid!, countFsyncs, perMsg, createTopic: (name, partitions) => createTopic(np, name, partitions) });
    }

    if (want("consume")) {
      const fill = Math.min(Math.round(60_000 * SECONDS * ROUNDS), 600_000);
      for (const t of ["bench-consume", "bench-acknext"]) {
        await createTopic(np, t, 3);
        await prefill(np, t, fill);
      }
      const plainOp = (p: Pool) => async () => {
        const r = await p.request({ method: "POST", path: "/v1/topics/x/consume" });
        await r.body.arrayBuffer();
        return 1;
      };
      // Two requests a message: consume, then ack. The do-nothing "shaped" server answers both
      // with Narad's headers, so it is the most any broker behind this API and node:http can do
      // under this load generator: the gap to it is Narad's own work.
      const twoRequestsOp = (p: Pool) => async () => {
        const r = await p.request({ method: "POST", path: "/v1/topics/bench-consume/consume" });
        const h = r.headers["narad-receipt-handle"];
        await r.body.arrayBuffer();
        if (r.statusCode !== 200) throw new Error(String(r.statusCode));
        const a = await p.request({ method: "POST", path: `/v1/topics/bench-consume/ack?receipt_handle=${h}` });
        await a.body.arrayBuffer();
        if (a.statusCode !== 204) throw new Error(String(a.statusCode));
        return 1;
      };
      // wrk-style, as the produce rows: 50 connections, one message a request (issue 17).
      // The shaped server answers consume?ack= as a consume (it ignores the ack): the most this API's
      // one-request answer, nine Narad-* headers and a 1 KiB body, can do through node:http here.
      const [plainB, shapedB, shapedOne, two, one] = (await interleaved(
        (s) => closedLoop(50, s, plainOp(pp), plain.proc.pid),
        (s) => closedLoop(50, s, twoRequestsOp(sp), shaped.proc.pid),
        (s) => closedLoop(50, s, ackNextOp(sp, "bench-acknext"), shaped.proc.pid),
        (s) => closedLoop(50, s, twoRequestsOp(np), node.proc.pid),
        (s) => countFsyncs(node.proc.pid!, () => closedLoop(50, s, ackNextOp(np, "bench-acknext"), node.proc.pid)),
      )) as [LoadResult, LoadResult, LoadResult, LoadResult, LoadResult];
      row(`consume+ack, 1 msg/request, the ack riding on the next consume (consume?ack=), 50 connections (msgs/s; ${perMsg(one)})`, fmt(one.perS), `plain ${fmt(plainB.perS)} req/s (${perMsg(plainB)})`, one.perS / plainB.perS, ">= 0.9x plain");
      row(`  the same, vs a do-nothing server giving Narad's answer (msgs/s; ${perMsg(shapedOne)})`, fmt(one.perS), `shaped ${fmt(shapedOne.perS)}`, one.perS / shapedOne.perS, "(the HTTP layer's ceiling)");
      row(`consume+ack, 1 msg/request, consume then ack (two requests), 50 connections (msgs/s; ${perMsg(two)})`, fmt(two.perS), `plain ${fmt(plainB.perS)} req/s`, two.perS / plainB.perS, "(shown beside it)");
      row("  the same, vs a do-nothing server giving Narad's answers (msgs/s)", fmt(two.perS), `shaped ${fmt(shapedB.perS)}`, two.perS / shapedB.perS, "(the HTTP layer's ceiling)");
    }

    if (want("consume-batch")) {
      await createTopic(np, "bench-cbatch", 3);
      await prefill(np, "bench-cbatch", Math.min(170_000 * SECONDS * ROUNDS, 2_600_000));
      const [n] = (await interleaved((s) => closedLoop(8, s, consumeBatchOp(np, "bench-cbatch"), node.proc.pid))) as [LoadResult];
      row("consume+ack, batches of 100, 8 in flight (msgs/s)", fmt(n.perS), "NATS JetStream ~134 000 (recorded)", n.perS / 134_000, ">= 134 000 msgs/s (ratio to goal)");
    }

    if (want("rss")) {
      // A node of its own: the shared one holds what every row before sent (on a fast disk, many
      // millions of messages and the dedupe windows of the idempotent rows), which is not this figure.
      const fresh = await narad(join(work, "narad-rss"));
      const fp = pool(fresh.url, 16);
      try {
        await createTopic(fp, "bench-rss", 3);
        await prefill(fp, "bench-rss", 1_000_000);
        const rss = await rssMiB(fresh.proc.pid!);
        row("server RSS with 1 000 000 unacked messages, a fresh node (MiB)", rss.toFixed(0), "", rss / 300, "< 300 MiB (ratio to goal)");
        const shared = await rssMiB(node.proc.pid!);
        row("  the bench's shared node after the rows before (MiB)", shared.toFixed(0), "", null, "(everything sent so far, unacked)");
      } finally {
        await fp.close();
        await fresh.stop();
      }
    }

    if (want("forward")) {
      // Three nodes on an embedded PostgreSQL: the same load sent to a partition's owner and to a
      // node that must forward it.
      const { startCluster } = (await import(["../test/support/local-cluster", "js"].join("."))) as {
        startCluster(o: { nodes: number; security: boolean }): Promise<{ urls: string[]; nodes: { id: string; url: string; pid: number | undefined }[]; stop(): Promise<void> }>;
      };
      const cluster = await startCluster({ nodes: 3, security: false });
      const untrackCluster = track({ stop: () => cluster.stop() });
      try {
        const c0 = pool(cluster.urls[0]!, 128);
        await createTopic(c0, "bench-fwd", 1);
        const t = (await (await request(c0, "GET", "/v1/topics/bench-fwd")).body.toString()) as string;
        const owner = (JSON.parse(t) as { placement: { node: string }[] }).placement[0]!.node;
        const nodes = (JSON.parse((await request(c0, "GET", "/v1/nodes")).body.toString()) as { nodes: { id: string; url?: string; advertise_url?: string }[] }).nodes;
        const ownerUrl = nodes.find((n) => n.id === owner)?.url ?? nodes.find((n) => n.id === owner)?.advertise_url;
        const otherUrl = cluster.urls.find((u) => u !== ownerUrl) ?? cluster.urls[1]!;
        const po = pool(ownerUrl ?? cluster.urls[0]!, 128);
        const pf = pool(otherUrl, 128);
        const produceVia = (p: Pool) => async () => {
          const r = await p.request({ method: "POST", path: "/v1/topics/bench-fwd/messages", body: PAYLOAD });
          await r.body.arrayBuffer();
          if (r.statusCode !== 202) throw new Error(String(r.statusCode));
          return 1;
        };
        const byUrl = (u: string | undefined) => cluster.nodes.find((n) => n.url === u)?.pid;
        const pids: Record<string, number> = {};
        const ownerPid = byUrl(ownerUrl);
        const otherPid = byUrl(otherUrl);
        if (ownerPid !== undefined) pids.owner = ownerPid;
        if (otherPid !== undefined) pids["non-owner"] = otherPid;
        const [own, fwd] = (await interleaved(
          (s) => closedLoop(64, s, produceVia(po), pids),
          (s) => closedLoop(64, s, produceVia(pf), pids),
        )) as [LoadResult, LoadResult];
        row("cluster produce via a non-owner vs the owner, 64 in flight (msgs/s)", fmt(fwd.perS), `owner ${fmt(own.perS)}`, fwd.perS / own.perS, ">= 0.7x (forwarding costs < 30%)");
        const consumeVia = (p: Pool) => async () => {
          const r = await p.request({ method: "POST", path: "/v1/topics/bench-fwd/consume" });
          const h = r.headers["narad-receipt-handle"];
          await r.body.arrayBuffer();
          if (r.statusCode !== 200) throw new Error(String(r.statusCode));
          const a = await p.request({ method: "POST", path: `/v1/topics/bench-fwd/ack?receipt_handle=${h}` });
          await a.body.arrayBuffer();
          return 1;
        };
        const [ownC, fwdC] = (await interleaved(
          (s) => closedLoop(64, s, consumeVia(po), pids),
          (s) => closedLoop(64, s, consumeVia(pf), pids),
        )) as [LoadResult, LoadResult];
        row("cluster consume+ack via a non-owner vs the owner, 64 in flight (msgs/s)", fmt(fwdC.perS), `owner ${fmt(ownC.perS)}`, fwdC.perS / ownC.perS, ">= 0.7x (forwarding costs < 30%)");
        await Promise.all([c0.close(), po.close(), pf.close()]);
      } finally {
        await cluster.stop();
        untrackCluster();
      }
    }

    if (want("replication")) {
      const { benchReplication } = await import("./replication.js");
      await benchReplication({ seconds: SECONDS, rounds: ROUNDS, warmupSeconds: WARMUP_SECONDS, payload: PAYLOAD, want, closedLoop, interleaved, row, fmt });
    }

    if (want("checker")) {
      try {
        const mod = (await import(["./checker-bench", "js"].join("."))) as { benchChecker: (events: number, seed: number, rounds: number) => Promise<import("./checker-bench.js").CheckerBenchResult> };
        const r = await mod.benchChecker(896_600, 1, ROUNDS);
        row(`checker, whole process, ${r.events.toLocaleString("en-US")}-line history (events/s)`, fmt(r.processEventsPerSecond), `${r.processSeconds.toFixed(2)} s wall, ${r.processCpuSeconds.toFixed(2)} s CPU = ${fmt(r.processEventsPerCpuSecond)} events per CPU second, ${r.processRssMiB} MiB peak RSS`, r.processEventsPerSecond / 800_000, ">= 800 000 events/s (ratio to goal)");
        row("checker, in process (events/s)", fmt(r.eventsPerSecond), `${r.seconds.toFixed(2)} s, ${r.rssMiB.toFixed(0)} MiB RSS`, r.eventsPerSecond / 800_000, ">= 800 000 events/s (ratio to goal)");
      } catch (e) {
        process.stdout.write(`  checker: not measured (${(e as Error).message})\n`);
      }
    }
    if (want("stream-checker")) {
      try {
        const { benchStreamChecker } = await import("./stream-checker-bench.js");
        const r = await benchStreamChecker(900_000);
        row("stream model checker on a 900 000-line history (events/s)", fmt(r.eventsPerSecond), `${r.seconds.toFixed(2)} s wall, ${r.cpuSeconds.toFixed(2)} s CPU`, r.eventsPerSecond / 500_000, ">= 500 000 events/s (ratio to goal)");
      } catch (e) {
        process.stdout.write(`  stream checker: not measured (${(e as Error).message})\n`);
      }
    }
    if (PEER_NAMES.some(want)) {
      await benchPeers({
        seconds: SECONDS,
        rounds: ROUNDS,
        warmupSeconds: WARMUP_SECONDS,
        payload: PAYLOAD,
        want,
        closedLoop,
        interleaved,
        row,
        fmt,
        narad: {
          pid: node.proc.pid!,
          createTopic: (name, partitions) => createTopic(np, name, partitions),
          prefill: (topic, count) => prefill(np, topic, count),
          produceOp: (topic) => produceOp(np, `/v1/topics/${topic}/messages`),
          consumeBatchOp: (topic) => consumeBatchOp(np, topic),
          ackNextOp: (topic) => ackNextOp(np, topic),
        },
      });
    }
    await Promise.all([np.close(), pp.close(), dp.close()]);
  } finally {
    for (const p of procs) await p.stop();
    await rm(work, { recursive: true, force: true });
    untrackWork();
  }
  process.stdout.write("\n| figure | narad | baseline (same run) | ratio | goal |\n|---|---|---|---|---|\n");
  for (const r of rows) process.stdout.write(`| ${r.figure} | ${r.narad} | ${r.baseline} | ${r.ratio} | ${r.goal} |\n`);
  process.stdout.write("\nPeer brokers as recorded, not measured in this run (shared/peers/results.md, 2026-11-30, this machine kind): NATS JetStream thin client w256 163 751 publishes/s (no fsync), batch-100 pull consume+ack 134 353/s; RabbitMQ quorum w256 42 373/s; BullMQ AOF always w64 26 348/s.\n");
}

await main();
