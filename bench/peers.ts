// The peer brokers, measured live in the same run as Narad, each when its server is installed:
// NATS JetStream (`nats-server`) and BullMQ on Redis (`redis-server`). This module starts each one
// itself, on 127.0.0.1 with its own temp directory, runs its loads interleaved with the Narad load
// it is compared with (the same closed loop, BENCH_SECONDS a run, medians of BENCH_ROUNDS runs, a
// `cpu:` line for the peer's server process), then stops it. Only one peer server runs at a time.
//
// The rows (ratio = Narad / peer):
//   produce, 1 message a request, 64 in flight, one partition, against
//     - NATS js.publish (nats.js), 64 in flight: the idiomatic client, which spends more CPU than
//       the server does (shared/peers/results.md, "Where the CPU went");
//     - NATS thin publish, 64 in flight: the same JetStream work (stored, then a PubAck) through
//       core publish with a reply subject and one subscription collecting the PubAcks;
//     - BullMQ queue.add, 64 in flight, Redis `appendfsync always`.
//   consume+ack in batches of 100, 8 in flight, against NATS pull requests of 100 on a durable
//     AckExplicit consumer, 8 in flight, each message acked: by nats.js (consumer.fetch, m.ack())
//     and by a thin client (MSG.NEXT requests, "+ACK" replies). NATS acks are not confirmed, as
//     the peers measured them; Narad's batch ack waits for its 200.
//   consume+ack one message a request (the ack riding on the next consume, as the SDK's process()
//     does), 50 in flight, against a BullMQ Worker of concurrency 50 with an empty processor.
// Durability differs: nats-server 2.9 answers a PubAck after write() and fsyncs on a timer;
// Redis with `appendfsync always`, like Narad, fsyncs before it answers.
//
// RabbitMQ is not started here: it needs epmd and an Erlang VM, and takes many seconds to come up
// (shared/peers/run-rabbit.sh); its recorded figures are printed at the end of the bench instead.
//
// Every server started here is stopped on every path, its directory removed: at the end of its
// figures, when they fail, and through cleanup.ts on SIGINT/SIGTERM or a bare exit.

import { spawn } from "node:child_process";
import { access, constants, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import type { LoadResult } from "./main.js";
import { track, STOP_GRACE_MS } from "./cleanup.js";
import type { NatsConnection, Msg } from "nats";
import type { Queue } from "bullmq";

/** The harness of main.ts that the peer figures use, so that they are measured as Narad's are. */
export interface Harness {
  seconds: number;
  rounds: number;
  warmupSeconds: number;
  payload: Buffer;
  want(name: string): boolean;
  closedLoop(inFlight: number, seconds: number, op: (loop: number) => Promise<number>, pid?: number | Record<string, number>): Promise<LoadResult>;
  interleaved(...loads: ((seconds: number) => Promise<LoadResult>)[]): Promise<LoadResult[]>;
  row(figure: string, naradV: string, baselineV: string, ratio: number | null, goal: string): void;
  fmt(n: number): string;
  narad: NaradSide;
}

/** The Narad loads the peers are set beside, on the node main.ts started. */
export interface NaradSide {
  pid: number;
  createTopic(name: string, partitions: number): Promise<void>;
  prefill(topic: string, count: number): Promise<void>;
  produceOp(topic: string): () => Promise<number>;
  consumeBatchOp(topic: string): () => Promise<number>;
  ackNextOp(topic: string): (loop: number) => Promise<number>;
}

/** BENCH_ONLY names that select peer figures: "peers" for all, or one peer. */
export const PEER_NAMES = ["peers", "nats", "bullmq"] as const;

const READY_TIMEOUT_MS = 30_000;
/** A NATS request (publish awaiting its PubAck, or a pull) not answered by then fails. */
const REPLY_TIMEOUT_MS = 10_000;
const LOG_TAIL_CHARS = 8192;
const CLOSE_TIMEOUT_MS = 10_000;
/** Where Debian installs the servers; /usr/sbin is not on a normal user's PATH. */
const EXTRA_BIN_DIRS = ["/usr/sbin", "/usr/local/sbin"];

export async function benchPeers(h: Harness): Promise<void> {
  const only = (name: string) => h.want("peers") || h.want(name);
  const n = h.narad;
  let topicsMade = false;
  const naradTopics = async () => {
    if (topicsMade) return;
    topicsMade = true;
    // One partition for produce: the peers' stream and queue are each one log.
    await n.createTopic("bench-peers-produce", 1);
  };
  if (only("nats")) {
    await guarded("NATS JetStream", "nats-server", "nats", async (exe) => {
      await naradTopics();
      await benchNats(h, exe);
    });
  }
  if (only("bullmq")) {
    await guarded("BullMQ on Redis", "redis-server", "bullmq", async (exe) => {
      await naradTopics();
      await benchBullmq(h, exe);
    });
  }
  if (h.want("peers")) process.stdout.write("  RabbitMQ: not measured live (its server needs epmd and an Erlang VM that take many seconds to start); recorded figures below\n");
}

/** Runs one peer's figures when its server and npm client are installed; a failure is printed, and the bench goes on. */
async function guarded(title: string, command: string, client: string, body: (exe: string) => Promise<void>): Promise<void> {
  const exe = await findExecutable(command);
  if (exe === undefined) {
    process.stdout.write(`  ${title}: not measured (${command} not found on PATH; install it to measure it live: apt-get install ${command})\n`);
    return;
  }
  try {
    await import(client);
  } catch {
    process.stdout.write(`  ${title}: not measured (the npm package ${client} is missing: npm install, with devDependencies)\n`);
    return;
  }
  process.stdout.write(`  ${title}: measuring live (${exe})\n`);
  try {
    await body(exe);
  } catch (e) {
    process.stdout.write(`  ${title}: failed, figures incomplete (${(e as Error).message})\n`);
  }
}

async function findExecutable(command: string): Promise<string | undefined> {
  const dirs = [...(process.env.PATH ?? "").split(delimiter).filter(Boolean), ...EXTRA_BIN_DIRS];
  for (const d of dirs) {
    try {
      await access(join(d, command), constants.X_OK);
      return join(d, command);
    } catch {
      // not here
    }
  }
  return undefined;
}

// ------------------------------------------------------------------ starting and stopping servers

interface PeerServer {
  name: string;
  pid: number;
  dir: string;
  /** The ready pattern's match on the server's output. */
  ready: RegExpExecArray;
  /** TERM, KILL after STOP_GRACE_MS, then the directory is removed. Idempotent. */
  stop(): Promise<void>;
  /** Why the server is gone with the end of its output, or undefined while it runs. */
  gone(): string | undefined;
}

async function startServer(name: string, command: string, args: (dir: string) => string[], ready: RegExp): Promise<PeerServer> {
  const dir = await mkdtemp(join(tmpdir(), `narad-bench-${name}-`));
  const proc = spawn(command, args(dir), { stdio: ["ignore", "pipe", "pipe"] });
  let tail = "";
  let exited = false;
  let exitNote = "";
  const exit = new Promise<void>((res) => {
    proc.once("exit", (code, signal) => {
      exited = true;
      exitNote = `exited ${code ?? signal}`;
      res();
    });
    proc.once("error", (e) => {
      exited = true;
      exitNote = e.message;
      res();
    });
  });
  // Keep reading both pipes for the server's whole life: a full pipe would block it.
  const onOutput = (b: Buffer) => {
    tail = (tail + b.toString()).slice(-LOG_TAIL_CHARS);
  };
  proc.stdout!.on("data", onOutput);
  proc.stderr!.on("data", onOutput);
  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      if (!exited) {
        proc.kill("SIGTERM");
        const grace = new AbortController();
        const late = sleep(STOP_GRACE_MS, true, { signal: grace.signal }).catch(() => false);
        if (await Promise.race([exit.then(() => false), late])) {
          proc.kill("SIGKILL");
          await exit;
        }
        grace.abort();
      }
      await rm(dir, { recursive: true, force: true });
      untrack();
    })());
  const untrack = track({ kill: () => proc.kill("SIGKILL"), dir, stop });
  try {
    const deadline = performance.now() + READY_TIMEOUT_MS;
    for (;;) {
      const m = ready.exec(tail);
      if (m) return { name, pid: proc.pid!, dir, ready: m, stop, gone: () => (exited ? `${name} ${exitNote}: ${tail.trim().slice(-300)}` : undefined) };
      if (exited) throw new Error(`${name} ${exitNote} before it was ready: ${tail.trim().slice(-1000)}`);
      if (performance.now() > deadline) throw new Error(`${name} not ready within ${READY_TIMEOUT_MS} ms: ${tail.trim().slice(-1000)}`);
      await sleep(20);
    }
  } catch (e) {
    await stop();
    throw e;
  }
}

/** A client's error, with the likely cause when the server it talks to has died. */
function withCause(e: unknown, server: PeerServer): Error {
  const gone = server.gone();
  const err = e instanceof Error ? e : new Error(String(e));
  return gone === undefined ? err : new Error(`${err.message}; ${gone}`);
}

/** A port free on 127.0.0.1 now (for servers that cannot pick their own and print it). */
function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => res(port));
    });
  });
}

/** Resolves with `p`, or rejects when it takes longer than `ms` (a close that hangs on a dead server). */
async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

// ------------------------------------------------------------------ NATS JetStream

const NATS_BATCH = 100;
const NATS_PULLS_IN_FLIGHT = 8;
/** The consume stream's backlog is topped up before each run to this many messages a second of the run (or more, once a run has gone faster). */
const NATS_CONSUME_RATE_GUESS = 150_000;
const NATS_BACKLOG_MAX = 4_000_000;
const NATS_FILL_WINDOW = 512;

/**
 * A nats-server with JetStream on file storage in its own temp directory, nats.js connected, and
 * `stream(name, subject)` making a stream as the peers measured it (file storage, WorkQueue
 * retention: an acked message is deleted; one replica). `close()` closes the connection and stops
 * the server.
 */
async function startNats(exe: string) {
  const nats = await import("nats");
  const server = await startServer(
    "nats",
    exe,
    (dir) => ["-a", "127.0.0.1", "-p", "-1", "-js", "-sd", join(dir, "js")],
    /Listening for client connections on 127\.0\.0\.1:(\d+)[\s\S]*Server is ready/,
  );
  let nc: NatsConnection | undefined;
  try {
    nc = await nats.connect({ servers: `127.0.0.1:${server.ready[1]}`, maxPingOut: 100 });
    const jsm = await nc.jetstreamManager();
    const conn = nc;
    return {
      nats,
      server,
      nc: conn,
      jsm,
      js: nc.jetstream(),
      stream: (name: string, subject: string) => jsm.streams.add({ name, subjects: [subject], retention: nats.RetentionPolicy.Workqueue, storage: nats.StorageType.File, num_replicas: 1 }),
      close: async () => {
        await within(conn.close(), CLOSE_TIMEOUT_MS, "closing the NATS connection").catch(() => undefined);
        await server.stop();
      },
    };
  } catch (e) {
    if (nc !== undefined) await within(nc.close(), CLOSE_TIMEOUT_MS, "closing the NATS connection").catch(() => undefined);
    await server.stop();
    throw e;
  }
}

/**
 * nats.js `js.publish` of `payload` to a file-storage stream, as a closed-loop op (`publish`
 * resolves to 1 once its PubAck came), on a nats-server started for `body` and stopped after it;
 * `thinPublish` the same through the thin client (a core publish with a reply inbox, the PubAcks
 * collected by one subscription), `purge` empties the stream (not timed), `pid` is the server's.
 * When nats-server or the nats package is missing, prints why and returns without calling `body`
 * (bench/sdk-produce.ts, and the stream rows of main.ts).
 */
export async function withNatsPublish(payload: Buffer, body: (n: { pid: number; publish: () => Promise<number>; thinPublish: () => Promise<number>; purge: () => Promise<void> }) => Promise<void>): Promise<void> {
  await guarded("NATS JetStream", "nats-server", "nats", async (exe) => {
    const n = await startNats(exe);
    const thin = new ThinNats(n.nc, n.nats.createInbox());
    try {
      await n.stream("PUB", "pub.>");
      const publish = async () => {
        await n.js.publish("pub.q", payload);
        return 1;
      };
      const thinPublish = async () => {
        await thin.publish("pub.q", payload);
        return 1;
      };
      await body({ pid: n.server.pid, publish, thinPublish, purge: async () => void (await n.jsm.streams.purge("PUB")) });
    } catch (e) {
      throw withCause(e, n.server);
    } finally {
      thin.close();
      await n.close();
    }
  });
}

async function benchNats(h: Harness, exe: string): Promise<void> {
  const started = await startNats(exe);
  const { nats, server, nc, jsm, js, stream } = started;
  let thin: ThinNats | undefined;
  try {
    // Narad stays up while a peer runs: its CPU is shown too, to see that it is idle then.
    const pid = { "nats-server": server.pid, "narad (idle)": h.narad.pid };
    await stream("PUB", "pub.>");
    await stream("CON", "con.>");
    await jsm.consumers.add("CON", { durable_name: "C", ack_policy: nats.AckPolicy.Explicit, max_ack_pending: 10_000 });
    thin = new ThinNats(nc, nats.createInbox());
    const t = thin;
    const n = h.narad;
    const np = { narad: n.pid };

    // Publish: the stream is emptied before each run (not timed), so it stays small.
    const purged = async () => {
      await jsm.streams.purge("PUB");
    };
    const jsPublish = async () => {
      await js.publish("pub.q", h.payload);
      return 1;
    };
    const thinPublish = async () => {
      await t.publish("pub.q", h.payload);
      return 1;
    };
    const narad64 = n.produceOp("bench-peers-produce");
    const [nar, jsp, thp] = (await h.interleaved(
      (s) => h.closedLoop(64, s, narad64, np),
      async (s) => {
        await purged();
        return h.closedLoop(64, s, jsPublish, pid);
      },
      async (s) => {
        await purged();
        return h.closedLoop(64, s, thinPublish, pid);
      },
    )) as [LoadResult, LoadResult, LoadResult];
    const produceFigure = "produce, 1 msg/request, 64 in flight, 1 partition";
    h.row(`${produceFigure}, vs NATS JetStream js.publish (nats.js), 64 in flight (msgs/s)`, h.fmt(nar.perS), `NATS ${h.fmt(jsp.perS)} (live)`, nar.perS / jsp.perS, "(peer; acks before any fsync)");
    h.row(`${produceFigure}, vs NATS JetStream thin publish (PubAck to a reply inbox), 64 in flight (msgs/s)`, h.fmt(nar.perS), `NATS ${h.fmt(thp.perS)} (live)`, nar.perS / thp.perS, "(peer; acks before any fsync)");

    // Consume: Narad drains a prefilled topic; NATS a stream topped up before each run.
    const naradFill = Math.min(170_000 * (h.seconds * h.rounds + h.warmupSeconds), 2_600_000);
    await n.createTopic("bench-peers-cbatch", 3);
    await n.prefill("bench-peers-cbatch", naradFill);
    const best = { perS: NATS_CONSUME_RATE_GUESS };
    const toppedUp = async (seconds: number) => {
      const want = Math.min(NATS_BACKLOG_MAX, Math.ceil(best.perS * 1.5 * seconds));
      const have = (await jsm.streams.info("CON")).state.messages;
      if (have < want) await t.fill("con.q", h.payload, want - have, NATS_FILL_WINDOW);
    };
    const drained = async (r: LoadResult) => {
      best.perS = Math.max(best.perS, r.perS);
      if ((await jsm.streams.info("CON")).state.messages === 0) process.stdout.write("    (the NATS backlog ran out during this run: the figure is a lower bound)\n");
      return r;
    };
    const consumer = await js.consumers.get("CON", "C");
    const fetchBatch = async () => {
      const it = await consumer.fetch({ max_messages: NATS_BATCH, expires: 2000 });
      let got = 0;
      for await (const m of it) {
        m.ack();
        got++;
      }
      return got;
    };
    const thinPull = (loop: number) => t.pull("$JS.API.CONSUMER.MSG.NEXT.CON.C", loop, NATS_BATCH);
    const naradBatch = n.consumeBatchOp("bench-peers-cbatch");
    const [nb, fb, tb] = (await h.interleaved(
      (s) => h.closedLoop(NATS_PULLS_IN_FLIGHT, s, naradBatch, np),
      async (s) => {
        await toppedUp(s);
        return drained(await h.closedLoop(NATS_PULLS_IN_FLIGHT, s, fetchBatch, pid));
      },
      async (s) => {
        await toppedUp(s);
        return drained(await h.closedLoop(NATS_PULLS_IN_FLIGHT, s, thinPull, pid));
      },
    )) as [LoadResult, LoadResult, LoadResult];
    const consumeFigure = `consume+ack, batches of 100, ${NATS_PULLS_IN_FLIGHT} in flight`;
    h.row(`${consumeFigure}, vs NATS pull consumer.fetch(100) + ack (nats.js) (msgs/s)`, h.fmt(nb.perS), `NATS ${h.fmt(fb.perS)} (live)`, nb.perS / fb.perS, "(peer; acks not confirmed)");
    h.row(`${consumeFigure}, vs NATS thin pull of 100 + ack each (msgs/s)`, h.fmt(nb.perS), `NATS ${h.fmt(tb.perS)} (live)`, nb.perS / tb.perS, "(peer; acks not confirmed)");
  } catch (e) {
    throw withCause(e, server);
  } finally {
    thin?.close();
    await started.close();
  }
}

/**
 * JetStream without nats.js's per-message machinery: a publish goes out with a reply subject
 * under one inbox, and one wildcard subscription settles the waiting promise when the PubAck (or
 * a pull's messages) come back. Each waiting request fails after REPLY_TIMEOUT_MS.
 */
class ThinNats {
  readonly #nc: NatsConnection;
  readonly #inbox: string;
  readonly #acks = new Map<string, { res: () => void; rej: (e: Error) => void; at: number }>();
  readonly #pulls = new Map<number, { got: number; want: number; res: (n: number) => void; rej: (e: Error) => void; at: number }>();
  readonly #pullSubs = new Set<number>();
  readonly #sweep: NodeJS.Timeout;
  #seq = 0;
  static readonly #ACK = new TextEncoder().encode("+ACK");

  constructor(nc: NatsConnection, inbox: string) {
    this.#nc = nc;
    this.#inbox = inbox;
    nc.subscribe(`${inbox}.a.*`, { callback: (err, m) => this.#onPubAck(err, m) });
    this.#sweep = setInterval(() => this.#expire(), 1000);
    this.#sweep.unref();
  }

  publish(subject: string, payload: Uint8Array): Promise<void> {
    const id = String(++this.#seq);
    return new Promise((res, rej) => {
      this.#acks.set(id, { res, rej, at: performance.now() });
      this.#nc.publish(subject, payload, { reply: `${this.#inbox}.a.${id}` });
    });
  }

  /**
   * One pull request of `batch` (no_wait), acking each message; resolves with how many came.
   * Each loop has its own reply subject and subscription: a pulled message arrives with its
   * stored subject, so only the subscription tells whose request it answers.
   */
  pull(apiSubject: string, loop: number, batch: number): Promise<number> {
    if (!this.#pullSubs.has(loop)) {
      this.#pullSubs.add(loop);
      this.#nc.subscribe(`${this.#inbox}.p.${loop}`, { callback: (err, m) => this.#onPulled(loop, err, m) });
    }
    return new Promise((res, rej) => {
      this.#pulls.set(loop, { got: 0, want: batch, res, rej, at: performance.now() });
      this.#nc.publish(apiSubject, JSON.stringify({ batch, no_wait: true }), { reply: `${this.#inbox}.p.${loop}` });
    });
  }

  /** Publishes `count` messages, `window` awaiting their PubAck at a time (not timed). */
  async fill(subject: string, payload: Uint8Array, count: number, window: number): Promise<void> {
    let left = count;
    await Promise.all(
      Array.from({ length: Math.min(window, count) }, async () => {
        while (left > 0) {
          left--;
          await this.publish(subject, payload);
        }
      }),
    );
  }

  close(): void {
    clearInterval(this.#sweep);
    this.#expire(Infinity);
  }

  #onPubAck(err: Error | null, m: Msg): void {
    const id = m.subject.slice(m.subject.lastIndexOf(".") + 1);
    const w = this.#acks.get(id);
    if (w === undefined) return;
    this.#acks.delete(id);
    // A PubAck is JSON: {"stream":..,"seq":..}, or {"error":{..}} when the message was not stored.
    if (err !== null) w.rej(err);
    else if (m.string().includes('"error"')) w.rej(new Error(m.string()));
    else w.res();
  }

  #onPulled(loop: number, err: Error | null, m: Msg): void {
    const status = m.headers?.code ?? 0;
    if (status === 0 && err === null) m.respond(ThinNats.#ACK);
    // A message left over from a request that timed out is acked, and not counted.
    const w = this.#pulls.get(loop);
    if (w === undefined) return;
    if (err !== null) {
      this.#pulls.delete(loop);
      w.rej(err);
      return;
    }
    // A status (404 no messages, 408 request timeout) ends a request that got fewer than it asked for.
    if (status === 0) w.got++;
    if (status !== 0 || w.got >= w.want) {
      this.#pulls.delete(loop);
      w.res(w.got);
    }
  }

  #expire(olderThanMs = REPLY_TIMEOUT_MS): void {
    const now = performance.now();
    const late = new Error(`no answer from nats-server within ${REPLY_TIMEOUT_MS} ms`);
    for (const [id, w] of this.#acks) {
      if (now - w.at < olderThanMs) continue;
      this.#acks.delete(id);
      w.rej(late);
    }
    for (const [loop, w] of this.#pulls) {
      if (now - w.at < olderThanMs) continue;
      this.#pulls.delete(loop);
      w.rej(late);
    }
  }
}

// ------------------------------------------------------------------ BullMQ on Redis

const BULL_CONCURRENCY = 50;
/** The worker's queue is topped up before each run to this many jobs a second of the run (or more, once a run has gone faster). */
const BULL_WORK_RATE_GUESS = 30_000;
const BULL_BULK = 500;
const REDIS_START_TRIES = 3;

async function startRedis(exe: string): Promise<{ server: PeerServer; port: number }> {
  // redis-server cannot pick a port and print it, so a free one is picked first; if another
  // process takes it meanwhile, redis exits and another is tried.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    try {
      const server = await startServer(
        "redis",
        exe,
        (dir) => [
          "--bind", "127.0.0.1", "--port", String(port), "--protected-mode", "yes", "--dir", dir,
          // Durable like Narad: each reply only after the AOF holding it is fsynced (grouped per event-loop turn).
          "--appendonly", "yes", "--appendfsync", "always",
          "--save", "", "--daemonize", "no", "--logfile", "", "--maxmemory-policy", "noeviction",
        ],
        /Ready to accept connections/,
      );
      return { server, port };
    } catch (e) {
      if (attempt >= REDIS_START_TRIES || !/Address already in use/.test((e as Error).message)) throw e;
    }
  }
}

async function benchBullmq(h: Harness, exe: string): Promise<void> {
  const { Queue, Worker } = await import("bullmq");
  const { server, port } = await startRedis(exe);
  const pid = { "redis-server": server.pid, "narad (idle)": h.narad.pid };
  // The Worker needs maxRetriesPerRequest: null (it blocks on Redis); the queues fail after ioredis's retries instead.
  const connection = { host: "127.0.0.1", port };
  const jobOptions = { removeOnComplete: true, removeOnFail: true };
  let lastError = "";
  const noteError = (e: Error) => (lastError = e.message);
  const queues: Queue[] = [];
  try {
    const queue = (name: string) => {
      const q = new Queue(name, { connection, defaultJobOptions: jobOptions });
      q.on("error", noteError);
      queues.push(q);
      return q;
    };
    const adds = queue("bench-add");
    const work = queue("bench-work");
    await Promise.all([adds.waitUntilReady(), work.waitUntilReady()]);
    // A job's data is JSON of about 1 KiB: {"p":"xxx…"}.
    const data = { p: "x".repeat(h.payload.length - 8) };
    const n = h.narad;
    const np = { narad: n.pid };

    const add = async () => {
      await adds.add("j", data);
      return 1;
    };
    // Emptied before each run (not timed), as the peers did, so Redis's memory and AOF stay small.
    const emptied = () => adds.obliterate({ force: true });
    const narad64 = n.produceOp("bench-peers-produce");
    const [nar, bull] = (await h.interleaved(
      (s) => h.closedLoop(64, s, narad64, np),
      async (s) => {
        await emptied();
        return h.closedLoop(64, s, add, pid);
      },
    )) as [LoadResult, LoadResult];
    h.row("produce, 1 msg/request, 64 in flight, 1 partition, vs BullMQ queue.add, 64 in flight, Redis AOF always (msgs/s)", h.fmt(nar.perS), `BullMQ ${h.fmt(bull.perS)} (live)`, nar.perS / bull.perS, "(peer; fsync before the ack)");

    // Consume one at a time: Narad's loops each ack on their next consume; the BullMQ Worker
    // drains a queue topped up before each run. The Worker pushes, so its run is one closed-loop
    // operation lasting the whole run that returns the jobs completed meanwhile.
    await n.createTopic("bench-peers-one", 3);
    await n.prefill("bench-peers-one", Math.min(25_000 * (h.seconds * h.rounds + h.warmupSeconds), 1_000_000));
    const best = { perS: BULL_WORK_RATE_GUESS };
    const bulk = Array.from({ length: BULL_BULK }, () => ({ name: "j", data }));
    const toppedUp = async (seconds: number) => {
      const want = Math.ceil(best.perS * 1.5 * seconds);
      for (let have = await work.getWaitingCount(); have < want; have += BULL_BULK) await work.addBulk(bulk);
    };
    const workerRun = async (seconds: number) => {
      await toppedUp(seconds);
      let completed = 0;
      let failed = 0;
      const worker = new Worker("bench-work", async () => undefined, { connection: { ...connection, maxRetriesPerRequest: null }, concurrency: BULL_CONCURRENCY, autorun: false });
      worker.on("completed", () => completed++);
      worker.on("failed", () => failed++);
      worker.on("error", noteError);
      try {
        await worker.waitUntilReady();
        const r = await h.closedLoop(1, seconds, async () => {
          const from = completed;
          void worker.run().catch(noteError);
          await sleep(seconds * 1000);
          return completed - from;
        }, pid);
        if (failed > 0) process.stdout.write(`    (${failed} BullMQ jobs failed in this run; ${lastError})\n`);
        if ((await work.getWaitingCount()) === 0) process.stdout.write("    (the BullMQ backlog ran out during this run: the figure is a lower bound)\n");
        best.perS = Math.max(best.perS, r.perS);
        return r;
      } finally {
        await within(worker.close(), CLOSE_TIMEOUT_MS, "closing the BullMQ worker").catch(noteError);
      }
    };
    const naradOne = n.ackNextOp("bench-peers-one");
    const [one, w] = (await h.interleaved((s) => h.closedLoop(BULL_CONCURRENCY, s, naradOne, np), workerRun)) as [LoadResult, LoadResult];
    h.row(`consume+ack, 1 msg/request, the ack riding on the next consume, ${BULL_CONCURRENCY} in flight, vs BullMQ Worker, concurrency ${BULL_CONCURRENCY} (msgs/s)`, h.fmt(one.perS), `BullMQ ${h.fmt(w.perS)} (live)`, one.perS / w.perS, "(peer; fsync before the ack)");
  } catch (e) {
    throw withCause(e, server);
  } finally {
    for (const q of queues) await within(q.close(), CLOSE_TIMEOUT_MS, "closing a BullMQ queue").catch(noteError);
    await server.stop();
  }
}
