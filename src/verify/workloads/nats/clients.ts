// The NATS clients under test, behind one small interface: the two generations of nats.js on npm
// (`nats` 2.x, and `@nats-io/jetstream` 3.x with `@nats-io/transport-node` and `@nats-io/kv`)
// and their consumer APIs (seed 002's subject):
//   push-ordered  2.x only: js.subscribe(subject, consumerOpts().orderedConsumer()), the push
//                 ordered consumer that nats.go's KV watchers also use.
//   ordered       js.consumers.get(stream) with no name: the pull-based ordered consumer, consume().
//   pull          a durable pull consumer with explicit acks, consume(), each message acked.
//   fetch         the same durable consumer read by a loop of fetch() calls (the library's
//                 defaults: up to 100 messages, 30 s expiry), each message acked; a fetch that
//                 ends in an error is reported and the loop fetches again.
//   kv-watch      a KV bucket's watch() over every key (a push ordered consumer in both generations).
//
// Each adapter uses the library's defaults but for one option, maxReconnectAttempts: -1 (the
// default of 10 attempts would end a long cut with a closed connection, a different story): the
// point is what an application that imports the library gets. Everything the library tells the
// application (connection status, consumer notifications, callback errors) is handed to
// `onEvent`, which the driver records as client-event lines.
//
// The packages are loaded on use (dynamic import), so the CLI starts without them; they are
// devDependencies of this repository, the software under test, not Narad's own. Their types are
// declared here structurally, as far as the adapters use them.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";

//
// Two older 2.x releases, installed under npm aliases, are the calibration's (matrix.ts
// CALIBRATION_CELLS): nats@2.22.0, whose ordered consumer reused its consumer's name when it
// rebuilt it (nats.deno #688: a KV watcher dies after a server restart), and nats@2.23.0, the
// release with the fix (nats.deno #689). They have the 2.x APIs.

export type ClientGeneration = "nats2" | "nats3" | "nats2.22" | "nats2.23";
export type ConsumerApi = "push-ordered" | "ordered" | "pull" | "fetch" | "kv-watch";
const NATS2_APIS: readonly ConsumerApi[] = ["push-ordered", "ordered", "pull", "fetch", "kv-watch"];
export const CONSUMER_APIS: Record<ClientGeneration, readonly ConsumerApi[]> = {
  nats2: NATS2_APIS,
  nats3: ["ordered", "pull", "fetch", "kv-watch"],
  "nats2.22": NATS2_APIS,
  "nats2.23": NATS2_APIS,
};
/** The generations of the matrix: the current release of each line on npm. */
export const CLIENT_GENERATIONS: readonly ClientGeneration[] = ["nats2", "nats3"];
/** The older releases of the calibration rows. */
export const CALIBRATION_GENERATIONS: readonly ClientGeneration[] = ["nats2.22", "nats2.23"];
/** Every generation `startConsumer` knows. */
export const ALL_GENERATIONS: readonly ClientGeneration[] = [...CLIENT_GENERATIONS, ...CALIBRATION_GENERATIONS];
/** A generation of the 2.x line (one package, `nats`, and its APIs). */
export const isNats2 = (gen: ClientGeneration): boolean => gen !== "nats3";

/** The stream and the KV bucket a run uses, and the subject it publishes to. */
export const STREAM = "NARAD";
export const SUBJECT_PREFIX = "narad.";
export const BUCKET = "narad";
export const KV_STREAM = `KV_${BUCKET}`;
export const PULL_DURABLE = "narad-pull";
/** The fetch loop's pause after a fetch that failed. */
export const FETCH_RETRY_MS = 250;

/** The only option changed from the library's defaults, for every connection of a run. */
export const CONNECTION_OPTIONS = { maxReconnectAttempts: -1 } as const;

/** The package each generation imports: an npm alias (package.json `"nats-2.22.0": "npm:nats@2.22.0"`) for the older releases. */
const PACKAGES: Record<ClientGeneration, string> = { nats2: "nats", nats3: "@nats-io/jetstream", "nats2.22": "nats-2.22.0", "nats2.23": "nats-2.23.0" };
/** The package's own name, as its package.json says (an alias installs the aliased package). */
const REAL_NAMES: Record<ClientGeneration, string> = { nats2: "nats", nats3: "@nats-io/jetstream", "nats2.22": "nats", "nats2.23": "nats" };

/** "nats@2.29.3" or "@nats-io/jetstream@3.4.0": the package as installed. */
export function clientName(gen: ClientGeneration): string {
  const pkg = REAL_NAMES[gen];
  const require = createRequire(import.meta.url);
  let dir = dirname(require.resolve(PACKAGES[gen]));
  // Walk up to the package's own package.json (its main file may sit in lib/).
  for (let i = 0; i < 4; i++) {
    try {
      const j = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name?: string; version?: string };
      if (j.name === pkg) return `${pkg}@${j.version}`;
    } catch {
      // up one
    }
    dir = dirname(dir);
  }
  return `${pkg}@?`;
}

export interface Delivery {
  msg: string;
  seq: number;
}

export interface ConsumerCallbacks {
  onDeliver(d: Delivery): void;
  onEvent(event: string, detail?: unknown): void;
}

export interface RunningConsumer {
  /** Events the adapter can only read at the end (the push ordered consumer's restarts). */
  finalEvents(): Array<{ event: string; detail: unknown }>;
  stop(): Promise<void>;
}

// ---- the structural types the adapters use ----

interface Msg {
  seq: number;
  data: Uint8Array;
  ack(): void;
}
interface Iter<T> extends AsyncIterable<T> {
  stop(err?: Error): void;
}
interface StatusEvent {
  type: string;
  data?: unknown;
  [k: string]: unknown;
}
interface Connection {
  status(): AsyncIterable<StatusEvent>;
  close(): Promise<void>;
  closed(): Promise<void | Error>;
  jetstream(): Js2;
  jetstreamManager(): Promise<Jsm>;
}
type Messages = Iter<Msg> & { status(): AsyncIterable<StatusEvent> | Promise<AsyncIterable<StatusEvent>> };
interface Consumer {
  fetch(opts?: Record<string, unknown>): Promise<Messages>;
  consume(opts?: Record<string, unknown>): Promise<Iter<Msg> & { status(): AsyncIterable<StatusEvent> | Promise<AsyncIterable<StatusEvent>> }>;
}
interface Consumers {
  get(stream: string, name?: string): Promise<Consumer>;
}
interface Jsm {
  consumers: { add(stream: string, cfg: Record<string, unknown>): Promise<unknown> };
  streams: { add(cfg: Record<string, unknown>): Promise<unknown>; info(name: string): Promise<{ state: { consumer_count: number; last_seq: number } }> };
}
interface KvEntry {
  revision: number;
  value: Uint8Array;
}
interface Kv {
  watch(opts?: Record<string, unknown>): Promise<Iter<KvEntry>>;
  put(key: string, value: Uint8Array | string): Promise<number>;
}
interface Sub {
  unsubscribe(): void;
  info?: { flow_control?: { consumer_restarts?: number } };
}
interface Js2 {
  consumers: Consumers;
  subscribe(subject: string, opts: unknown): Promise<Sub>;
  publish(subject: string, data: Uint8Array, opts?: Record<string, unknown>): Promise<{ seq: number }>;
  views: { kv(name: string, opts?: Record<string, unknown>): Promise<Kv> };
}
interface Nats2Module {
  connect(opts: Record<string, unknown>): Promise<Connection>;
  consumerOpts(): { orderedConsumer(): unknown; deliverAll(): unknown; callback(fn: (err: Error | null, m: Msg | null) => void): unknown };
  AckPolicy: { Explicit: string };
}
interface Js3 {
  consumers: Consumers;
}
interface Nats3Modules {
  connect(opts: Record<string, unknown>): Promise<Connection>;
  jetstream(nc: Connection): Js3;
  Kvm: new (nc: Connection) => { open(name: string): Promise<Kv>; create(name: string, opts?: Record<string, unknown>): Promise<Kv> };
}

// Specifiers as values, so the compiler does not resolve the packages' own (v3: broken) type paths.
const NATS3_TRANSPORT: string = "@nats-io/transport-node";
const NATS3_JETSTREAM: string = "@nats-io/jetstream";
const NATS3_KV: string = "@nats-io/kv";

/** The 2.x module of `gen` (the publisher's is always the current one). */
async function nats2(gen: ClientGeneration = "nats2"): Promise<Nats2Module> {
  return (await import(PACKAGES[gen])) as Nats2Module;
}

async function nats3(): Promise<Nats3Modules> {
  const [t, j, k] = await Promise.all([import(NATS3_TRANSPORT), import(NATS3_JETSTREAM), import(NATS3_KV)]);
  return { connect: t.connect, jetstream: j.jetstream, Kvm: k.Kvm } as Nats3Modules;
}

const decoder = new TextDecoder();

/** Connection status events, except the ping timer's ticks. */
function watchStatus(nc: Connection, cb: ConsumerCallbacks): void {
  void (async () => {
    try {
      for await (const s of nc.status()) {
        if (s.type === "pingTimer") continue;
        cb.onEvent(s.type, s.data === undefined ? undefined : String(s.data));
      }
    } catch {
      // the connection closed
    }
  })();
}

/** Consumer notifications, except "next" (a pull request, several a second). */
function watchConsumerStatus(src: AsyncIterable<StatusEvent> | Promise<AsyncIterable<StatusEvent>>, cb: ConsumerCallbacks): void {
  void (async () => {
    try {
      for await (const s of await src) {
        if (s.type === "next") continue;
        const { type, ...rest } = s;
        cb.onEvent(type, Object.keys(rest).length > 0 ? JSON.parse(JSON.stringify(rest)) : undefined);
      }
    } catch {
      // the iterator stopped
    }
  })();
}

function pump<T>(iter: AsyncIterable<T>, each: (v: T) => void, cb: ConsumerCallbacks): void {
  void (async () => {
    try {
      for await (const v of iter) each(v);
      cb.onEvent("iterator-ended");
    } catch (e) {
      cb.onEvent("error", errorText(e));
    }
  })();
}

/**
 * An error as the application would log it: its message and the error it wraps (a 2.x NatsError's
 * `chainedError`, a 3.x error's `cause`), with the JetStream API error's code where there is one
 * ("unable to recreate ordered consumer …: consumer name already in use (err_code 10013)").
 */
export function errorText(e: unknown): string {
  const parts: string[] = [];
  let cur: unknown = e;
  for (let depth = 0; cur instanceof Error && depth < 4; depth++) {
    const api = (cur as { api_error?: { err_code?: number } }).api_error;
    parts.push(cur.message + (typeof api?.err_code === "number" ? ` (err_code ${api.err_code})` : ""));
    const x = cur as { chainedError?: unknown; cause?: unknown };
    cur = x.chainedError ?? x.cause;
  }
  return parts.length > 0 ? parts.join(": ") : String(e);
}

/** Starts a consumer of `api` with the `gen` library, connecting to `servers` (the proxy). */
export async function startConsumer(gen: ClientGeneration, api: ConsumerApi, servers: string, cb: ConsumerCallbacks): Promise<RunningConsumer> {
  if (!CONSUMER_APIS[gen].includes(api)) throw new Error(`${clientName(gen)} has no ${api} consumer here (one of ${CONSUMER_APIS[gen].join(", ")})`);
  const v2 = isNats2(gen);
  const mod = v2 ? await nats2(gen) : await nats3();
  const nc = await mod.connect({ servers, name: `narad-consumer-${api}`, ...CONNECTION_OPTIONS });
  watchStatus(nc, cb);
  const stops: Array<() => void> = [];
  let sub: Sub | null = null;
  const deliver = (m: Msg) => cb.onDeliver({ msg: decoder.decode(m.data), seq: m.seq });
  const consumers = v2 ? nc.jetstream().consumers : (mod as Nats3Modules).jetstream(nc).consumers;
  switch (api) {
    case "push-ordered": {
      const m2 = mod as Nats2Module;
      const opts = m2.consumerOpts();
      opts.orderedConsumer();
      opts.deliverAll();
      opts.callback((err, m) => {
        if (err) cb.onEvent("error", errorText(err));
        else if (m) deliver(m);
      });
      sub = await nc.jetstream().subscribe(`${SUBJECT_PREFIX}>`, opts);
      stops.push(() => sub!.unsubscribe());
      break;
    }
    case "ordered":
    case "pull": {
      const c = api === "ordered" ? await consumers.get(STREAM) : await consumers.get(STREAM, PULL_DURABLE);
      const iter = await c.consume();
      watchConsumerStatus(iter.status(), cb);
      pump(
        iter,
        (m) => {
          deliver(m);
          if (api === "pull") m.ack();
        },
        cb,
      );
      stops.push(() => iter.stop());
      break;
    }
    case "fetch": {
      const c = await consumers.get(STREAM, PULL_DURABLE);
      let running = true;
      let current: Messages | null = null;
      void (async () => {
        while (running) {
          try {
            current = await c.fetch();
            watchConsumerStatus(current.status(), cb);
            for await (const m of current) {
              deliver(m);
              m.ack();
            }
          } catch (e) {
            if (!running) break;
            cb.onEvent("error", errorText(e));
            // An application's retry loop paces itself; a disconnected client refuses at once.
            await new Promise((r) => setTimeout(r, FETCH_RETRY_MS));
          }
        }
      })();
      stops.push(() => {
        running = false;
        current?.stop();
      });
      break;
    }
    case "kv-watch": {
      const kv = v2 ? await nc.jetstream().views.kv(BUCKET) : await new (mod as Nats3Modules).Kvm(nc).open(BUCKET);
      const w = await kv.watch({ key: ">" });
      pump(w, (e) => cb.onDeliver({ msg: decoder.decode(e.value), seq: e.revision }), cb);
      stops.push(() => w.stop());
      break;
    }
  }
  return {
    finalEvents() {
      const restarts = sub?.info?.flow_control?.consumer_restarts;
      return typeof restarts === "number" ? [{ event: "consumer-restarts", detail: restarts }] : [];
    },
    async stop() {
      for (const s of stops) {
        try {
          s();
        } catch {
          // already stopped
        }
      }
      await nc.close().catch(() => undefined);
    },
  };
}

/** The publisher: `nats` 2.x on a direct line (never through the proxy), and what it needs to set up. */
export interface Publisher {
  /** Publishes msg; resolves with the stream seq of its PubAck. */
  publish(msg: string): Promise<number>;
  /** The stream's consumer count now, as the server reports it. */
  consumerCount(): Promise<number>;
  close(): Promise<void>;
}

/** Errors after which the publish certainly did not happen (no stream listened). */
export function isDefiniteRefusal(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return code === "503" || /no responders/i.test((e as Error).message ?? "");
}

export const PUBLISH_TIMEOUT_MS = 5_000;

export async function startPublisher(servers: string, api: ConsumerApi): Promise<Publisher> {
  const m = await nats2();
  const nc = await m.connect({ servers, name: "narad-publisher", ...CONNECTION_OPTIONS });
  const js = nc.jetstream();
  const jsm = await nc.jetstreamManager();
  const encoder = new TextEncoder();
  if (api === "kv-watch") {
    const kv = await js.views.kv(BUCKET, { history: 1 });
    return {
      publish: (msg) => kv.put(`m.${msg}`, encoder.encode(msg)),
      consumerCount: async () => (await jsm.streams.info(KV_STREAM)).state.consumer_count,
      close: () => nc.close(),
    };
  }
  await jsm.streams.add({ name: STREAM, subjects: [`${SUBJECT_PREFIX}>`], storage: "file" });
  if (api === "pull" || api === "fetch") await jsm.consumers.add(STREAM, { durable_name: PULL_DURABLE, ack_policy: m.AckPolicy.Explicit });
  return {
    publish: async (msg) => (await js.publish(`${SUBJECT_PREFIX}m`, encoder.encode(msg), { timeout: PUBLISH_TIMEOUT_MS })).seq,
    consumerCount: async () => (await jsm.streams.info(STREAM)).state.consumer_count,
    close: () => nc.close(),
  };
}
