// The fault proxy: a TCP proxy placed between clients and one broker node, whose "toxics" break
// the line on demand so a test can watch what the broker and its clients do about it.
//
// Design note.
// - Each accepted client connection gets one upstream connection to the target. Bytes flow
//   through two pipes: upstream (client → node) and downstream (node → client). A pipe is a FIFO
//   queue of chunks drained by one pump; every toxic acts on that pump, so byte order within a
//   connection and direction is kept whatever the toxics do (a chunk never overtakes the one
//   before it, even when jitter would give it an earlier due time).
// - Toxics are set per direction, at most one of each kind per direction, and take effect at
//   once on existing and new connections:
//     cut        stop forwarding. Bytes that arrive are held in the pipe (as TCP would keep
//                retransmitting across a real partition) and forwarded in order on heal. Past
//                `cutBufferBytesMax` held bytes in one pipe the connection is dropped: both sides
//                get an RST. New connections are accepted and held: while upstream is cut the
//                proxy does not even connect to the node (the SYN would be upstream traffic); it
//                connects on heal. More than `connectionsMax` connections: new ones are reset.
//     latency    each chunk is due `latencyMs ± jitterMs` (uniform, floored at 0) after it arrived.
//     reset      every connection, existing and new, is torn down with an RST sent toward the
//                receiver of that direction: downstream → the client sees ECONNRESET, upstream →
//                the node does (both: both do). The other side is closed plainly. A new
//                connection is torn down at accept, before the node hears of it. It stays in
//                force until removed.
//     bandwidth  a token bucket per connection and direction, refilled at `bandwidthBytesPerS`,
//                holding at most BANDWIDTH_BURST_MS worth of tokens and starting empty, so
//                sending N bytes takes at least (N − burst) / rate seconds.
//     slicer     chunks are written in pieces of at most `sliceBytes`, `sliceDelayMs` apart.
// - A cut by source (`cutFrom(node)`): only the connections a given cluster node opened are cut,
//   both directions, held as a cut holds them. A node is recognised by the `narad-forwarded-by`
//   header of the first request on the connection (every request between Narad's nodes carries
//   it; a pooled keep-alive connection belongs to one node for its life). It exists because a
//   node's advertised address is the same for every peer: to cut the line from a leader to its
//   followers without cutting the followers from each other, the proxy in front of each follower
//   holds only the leader's connections.
// - Memory is bounded: outside a cut a pipe stops reading its source past `queueBytesHighWater`
//   (TCP back-pressure does the rest); during a cut the bound is `cutBufferBytesMax` and the
//   answer at the bound is dropping the connection (counted in `connectionsDropped`).
// - Counters are the evidence a nemesis records: connections accepted, active, held, reset,
//   dropped; per direction bytes received, forwarded, delayed (held by a cut or latency), dropped
//   (queued when the connection died) and the time spent cut.
// - The clock and the jitter's randomness are passed in (defaults: performance.now, Math.random).

import net from "node:net";
import { performance } from "node:perf_hooks";

export type Direction = "upstream" | "downstream";
export const DIRECTIONS: readonly Direction[] = ["upstream", "downstream"];
/** Where a toxic goes: one direction or both. */
export type DirectionSpec = Direction | "both";

export type Toxic =
  | { kind: "cut" }
  | { kind: "latency"; latencyMs: number; jitterMs?: number }
  | { kind: "reset" }
  | { kind: "bandwidth"; bandwidthBytesPerS: number }
  | { kind: "slicer"; sliceBytes: number; sliceDelayMs?: number };
export type ToxicKind = Toxic["kind"];
export const TOXIC_KINDS: readonly ToxicKind[] = ["cut", "latency", "reset", "bandwidth", "slicer"];

/** Bounds on toxic parameters; a value outside is a RangeError at setToxic. */
export const TOXIC_LIMITS = {
  latencyMsMax: 600_000,
  jitterMsMax: 600_000,
  bandwidthBytesPerSMin: 1,
  bandwidthBytesPerSMax: 10 * 1024 * 1024 * 1024,
  sliceBytesMin: 1,
  sliceBytesMax: 1_048_576,
  sliceDelayMsMax: 60_000,
} as const;

/** How far into a connection's first bytes the proxy looks for the source node's header. */
export const SOURCE_SNIFF_BYTES_MAX = 16 * 1024;
const SOURCE_HEADER_RE = /\r\nnarad-forwarded-by:[ \t]*([^\r\n]*?)[ \t]*\r\n/i;

/** A bucket holds at most this many milliseconds' worth of tokens: the largest burst. */
export const BANDWIDTH_BURST_MS = 20;

export const PROXY_DEFAULTS = {
  /** Held bytes per connection and direction while cut; past it the connection is dropped. */
  cutBufferBytesMax: 4 * 1024 * 1024,
  /** Queued bytes per pipe outside a cut above which the proxy stops reading the source. */
  queueBytesHighWater: 1024 * 1024,
  /** Open connections (active and held); past it new connections are reset at accept. */
  connectionsMax: 1024,
} as const;

export interface ProxyOptions {
  listenHost: string;
  /** 0 picks a free port; `proxy.address.port` tells which. */
  listenPort: number;
  targetHost: string;
  targetPort: number;
  cutBufferBytesMax?: number;
  queueBytesHighWater?: number;
  connectionsMax?: number;
  /** Monotonic milliseconds. */
  nowMs?: () => number;
  /** Uniform in [0, 1), for jitter. */
  random?: () => number;
}

export interface DirectionCounters {
  bytesReceived: number;
  bytesForwarded: number;
  /** Bytes whose forwarding a cut or a latency toxic deferred. */
  bytesDelayed: number;
  /** Bytes queued in the proxy when their connection was dropped, reset or closed. */
  bytesDropped: number;
  /** Bytes queued right now. */
  bytesQueued: number;
  /** Total time this direction has been cut, including a cut in progress. */
  cutMs: number;
}

export interface ProxyCounters {
  connectionsAccepted: number;
  connectionsActive: number;
  /** Accepted and waiting for an upstream heal before connecting to the target. */
  connectionsHeld: number;
  /** Torn down by a reset toxic. */
  connectionsReset: number;
  /** Dropped because a cut buffer overflowed. */
  connectionsDropped: number;
  /** Reset at accept because `connectionsMax` were open. */
  connectionsRefused: number;
  /** Upstream connects that failed (target down); the client got an RST. */
  upstreamConnectFailures: number;
  /** Open connections held now by a cut of their source node (cutFrom). */
  connectionsCutBySource: number;
  upstream: DirectionCounters;
  downstream: DirectionCounters;
}

export interface Proxy {
  readonly address: { host: string; port: number };
  readonly target: { host: string; port: number };
  /** Sets (or replaces) the toxic of that kind on the direction(s). Throws RangeError on bad values. */
  setToxic(direction: DirectionSpec, toxic: Toxic): void;
  /** Removes the toxic of that kind; absent is fine. */
  removeToxic(direction: DirectionSpec, kind: ToxicKind): void;
  /** Removes every toxic (of the direction(s), default both): held bytes flow, held connections connect. */
  heal(direction?: DirectionSpec): void;
  /** Shorthand for setToxic(direction, { kind: "cut" }). */
  cut(direction?: DirectionSpec): void;
  /** Cuts, both directions, the connections node `source` opened (see the design note). */
  cutFrom(source: string): void;
  /** Ends the cut of one source, or of every source; held bytes flow. */
  healFrom(source?: string): void;
  /** The sources cut now. */
  cutSources(): string[];
  toxics(): Record<Direction, Toxic[]>;
  counters(): ProxyCounters;
  /** Stops listening and destroys every connection. */
  close(): Promise<void>;
}

function directionsOf(spec: DirectionSpec): readonly Direction[] {
  if (spec === "both") return DIRECTIONS;
  if (spec === "upstream" || spec === "downstream") return [spec];
  throw new RangeError(`direction must be upstream, downstream or both, not ${JSON.stringify(spec)}`);
}

function checkNumber(name: string, v: unknown, min: number, max: number): number {
  if (typeof v !== "number" || !Number.isFinite(v) || v < min || v > max) {
    throw new RangeError(`${name} must be a number in [${min}, ${max}], not ${JSON.stringify(v)}`);
  }
  return v;
}

/** Validates a toxic and returns a normalised copy (defaults filled in). */
export function validateToxic(t: Toxic): Toxic {
  switch (t?.kind) {
    case "cut":
      return { kind: "cut" };
    case "reset":
      return { kind: "reset" };
    case "latency":
      return {
        kind: "latency",
        latencyMs: checkNumber("latencyMs", t.latencyMs, 0, TOXIC_LIMITS.latencyMsMax),
        jitterMs: checkNumber("jitterMs", t.jitterMs ?? 0, 0, TOXIC_LIMITS.jitterMsMax),
      };
    case "bandwidth":
      return {
        kind: "bandwidth",
        bandwidthBytesPerS: checkNumber(
          "bandwidthBytesPerS",
          t.bandwidthBytesPerS,
          TOXIC_LIMITS.bandwidthBytesPerSMin,
          TOXIC_LIMITS.bandwidthBytesPerSMax,
        ),
      };
    case "slicer":
      return {
        kind: "slicer",
        sliceBytes: Math.floor(checkNumber("sliceBytes", t.sliceBytes, TOXIC_LIMITS.sliceBytesMin, TOXIC_LIMITS.sliceBytesMax)),
        sliceDelayMs: checkNumber("sliceDelayMs", t.sliceDelayMs ?? 0, 0, TOXIC_LIMITS.sliceDelayMsMax),
      };
    default:
      throw new RangeError(`toxic kind must be one of ${TOXIC_KINDS.join(", ")}, not ${JSON.stringify((t as { kind?: unknown })?.kind)}`);
  }
}

type QueueItem = { data: Buffer; dueMs: number } | { end: true; dueMs: number };

/** Per-direction toxic state shared by every pipe of that direction. */
class DirectionState {
  readonly toxics = new Map<ToxicKind, Toxic>();
  cutSinceMs: number | null = null;
  cutMsTotal = 0;
  bytesReceived = 0;
  bytesForwarded = 0;
  bytesDelayed = 0;
  bytesDropped = 0;
  /** Bumped when the bandwidth toxic changes so buckets restart empty. */
  bandwidthEpoch = 0;
  constructor(readonly direction: Direction) {}
  get isCut(): boolean {
    return this.toxics.has("cut");
  }
}

class Pipe {
  private readonly queue: QueueItem[] = [];
  queuedBytes = 0;
  private endQueued = false;
  private timer: NodeJS.Timeout | null = null;
  private waitingDrain = false;
  private sliceGapUntilMs = 0;
  private tokens = 0;
  private tokensAtMs: number;
  private bucketEpoch = -1;
  private dest: net.Socket | null = null;
  private dead = false;

  constructor(
    private readonly proxy: ProxyImpl,
    private readonly state: DirectionState,
    private readonly conn: Connection,
    private readonly src: net.Socket,
  ) {
    this.tokensAtMs = proxy.nowMs();
    src.on("data", (chunk: Buffer) => this.onData(chunk));
    src.on("end", () => this.onEnd());
  }

  get ended(): boolean {
    return this.endQueued;
  }

  setDest(dest: net.Socket): void {
    this.dest = dest;
    this.pump();
  }

  private onData(chunk: Buffer): void {
    if (this.dead) return;
    const st = this.state;
    st.bytesReceived += chunk.length;
    if (st.direction === "upstream") this.conn.sniff(chunk);
    const dueMs = this.proxy.nowMs() + this.proxy.delayFor(st);
    if (st.isCut || st.toxics.has("latency") || this.conn.cutBySource()) st.bytesDelayed += chunk.length;
    this.queue.push({ data: chunk, dueMs });
    this.queuedBytes += chunk.length;
    if (st.isCut || this.conn.cutBySource()) {
      if (this.queuedBytes > this.proxy.cutBufferBytesMax) {
        this.conn.drop();
        return;
      }
    } else if (this.queuedBytes > this.proxy.queueBytesHighWater && !this.src.isPaused()) {
      this.src.pause();
    }
    this.pump();
  }

  private onEnd(): void {
    if (this.dead) return;
    this.endQueued = true;
    this.queue.push({ end: true, dueMs: this.proxy.nowMs() + this.proxy.delayFor(this.state) });
    this.pump();
  }

  /** Re-evaluates at once, e.g. after a toxic changed. */
  kick(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.pump();
  }

  private schedule(delayMs: number): void {
    // Timers may fire a little early against our clock; pump() re-checks and reschedules.
    this.timer = setTimeout(() => {
      this.timer = null;
      this.pump();
    }, Math.max(1, Math.ceil(delayMs)));
  }

  private pump(): void {
    for (;;) {
      if (this.dead || this.timer || this.waitingDrain || !this.dest) return;
      const st = this.state;
      if (st.isCut || this.conn.cutBySource()) return;
      const head = this.queue[0];
      if (!head) {
        if (this.src.isPaused()) this.src.resume();
        return;
      }
      if (this.dest.destroyed) {
        // The receiver is gone (it closed after its FIN): nothing queued can be delivered.
        this.conn.close();
        return;
      }
      const nowMs = this.proxy.nowMs();
      if (head.dueMs > nowMs) return this.schedule(head.dueMs - nowMs);
      if (this.sliceGapUntilMs > nowMs) return this.schedule(this.sliceGapUntilMs - nowMs);
      if ("end" in head) {
        this.queue.shift();
        this.dest.end();
        return;
      }
      let n = head.data.length;
      const slicer = st.toxics.get("slicer");
      if (slicer?.kind === "slicer") n = Math.min(n, slicer.sliceBytes);
      const bw = st.toxics.get("bandwidth");
      if (bw?.kind === "bandwidth") {
        const rate = bw.bandwidthBytesPerS;
        const capacity = Math.max(1, (rate * BANDWIDTH_BURST_MS) / 1000);
        if (this.bucketEpoch !== st.bandwidthEpoch) {
          this.bucketEpoch = st.bandwidthEpoch;
          this.tokens = 0;
          this.tokensAtMs = nowMs;
        }
        this.tokens = Math.min(capacity, this.tokens + ((nowMs - this.tokensAtMs) * rate) / 1000);
        this.tokensAtMs = nowMs;
        const wantTokens = Math.min(n, Math.floor(capacity));
        if (this.tokens < wantTokens) return this.schedule(((wantTokens - this.tokens) * 1000) / rate);
        n = Math.min(n, Math.floor(this.tokens));
        this.tokens -= n;
      }
      const piece = head.data.subarray(0, n);
      if (n === head.data.length) this.queue.shift();
      else head.data = head.data.subarray(n);
      this.queuedBytes -= n;
      st.bytesForwarded += n;
      const flushed = this.dest.write(piece);
      if (slicer?.kind === "slicer" && (slicer.sliceDelayMs ?? 0) > 0) this.sliceGapUntilMs = nowMs + slicer.sliceDelayMs!;
      if (this.src.isPaused() && this.queuedBytes <= this.proxy.queueBytesHighWater / 2) this.src.resume();
      if (!flushed) {
        this.waitingDrain = true;
        this.dest.once("drain", () => {
          this.waitingDrain = false;
          this.pump();
        });
        return;
      }
    }
  }

  /** The connection is gone: whatever is queued is dropped. */
  kill(): void {
    if (this.dead) return;
    this.dead = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.state.bytesDropped += this.queuedBytes;
    this.queuedBytes = 0;
    this.queue.length = 0;
  }
}

class Connection {
  readonly up: Pipe;
  down: Pipe | null = null;
  server: net.Socket | null = null;
  private clientClosed = false;
  private serverClosed = false;
  private finished = false;
  held = false;
  /** The cluster node that opened it (its first request's narad-forwarded-by), null: none; undefined: not known yet. */
  source: string | null | undefined = undefined;
  private sniffed = "";

  constructor(
    private readonly proxy: ProxyImpl,
    readonly client: net.Socket,
  ) {
    client.setNoDelay(true);
    this.up = new Pipe(proxy, proxy.dir.upstream, this, client);
    client.on("error", (err: NodeJS.ErrnoException) => this.onSocketError("client", err));
    client.on("close", () => {
      this.clientClosed = true;
      this.afterClose(this.up);
    });
  }

  /** Learns the source node from the first request's head (bounded by SOURCE_SNIFF_BYTES_MAX). */
  sniff(chunk: Buffer): void {
    if (this.source !== undefined) return;
    this.sniffed += chunk.toString("latin1", 0, Math.min(chunk.length, SOURCE_SNIFF_BYTES_MAX - this.sniffed.length));
    const m = SOURCE_HEADER_RE.exec(this.sniffed);
    const headEnd = this.sniffed.indexOf("\r\n\r\n");
    if (m !== null && (headEnd < 0 || m.index < headEnd)) this.source = m[1]!;
    else if (headEnd >= 0 || this.sniffed.length >= SOURCE_SNIFF_BYTES_MAX) this.source = null;
    if (this.source !== undefined) this.sniffed = "";
  }

  cutBySource(): boolean {
    return typeof this.source === "string" && this.proxy.sourcesCut.has(this.source);
  }

  connect(): void {
    this.held = false;
    const server = net.connect({ host: this.proxy.target.host, port: this.proxy.target.port, allowHalfOpen: true });
    this.server = server;
    server.setNoDelay(true);
    this.down = new Pipe(this.proxy, this.proxy.dir.downstream, this, server);
    let connected = false;
    server.on("connect", () => {
      connected = true;
      this.up.setDest(server);
      this.down!.setDest(this.client);
    });
    server.on("error", (err: NodeJS.ErrnoException) => {
      if (!connected) this.proxy.upstreamConnectFailures++;
      this.onSocketError("server", err);
    });
    server.on("close", () => {
      this.serverClosed = true;
      this.afterClose(this.down!);
    });
  }

  private onSocketError(side: "client" | "server", err: NodeJS.ErrnoException): void {
    // Pass an RST on as an RST, so the other side sees what a direct connection would have;
    // a refused upstream connect also reaches the client as a reset.
    const other = side === "client" ? this.server : this.client;
    const reset = err.code === "ECONNRESET" || err.code === "ECONNREFUSED" || err.code === "EPIPE";
    this.teardown(reset ? other : null);
  }

  /** A socket closed: if it sent its FIN, let its pipe deliver the rest; otherwise end it all. */
  private afterClose(from: Pipe): void {
    if (this.clientClosed && (this.serverClosed || this.server === null)) return this.teardown(null);
    if (!from.ended) this.teardown(null);
  }

  /** Drops the connection because a cut buffer overflowed. */
  drop(): void {
    if (this.finished) return;
    this.proxy.connectionsDropped++;
    this.teardown(this.client, this.server);
  }

  /** Applies a reset toxic on `directions`: an RST toward the receiver of each. */
  reset(directions: readonly Direction[]): void {
    if (this.finished) return;
    this.proxy.connectionsReset++;
    this.teardown(directions.includes("downstream") ? this.client : null, directions.includes("upstream") ? this.server : null);
  }

  private teardown(...resetSockets: (net.Socket | null)[]): void {
    if (this.finished) return;
    this.finished = true;
    this.up.kill();
    this.down?.kill();
    for (const s of [this.client, this.server]) {
      if (!s) continue;
      if (resetSockets.includes(s) && !s.destroyed) {
        try {
          s.resetAndDestroy();
          continue;
        } catch {
          // Not a TCP handle any more: plain destroy below.
        }
      }
      s.destroy();
    }
    this.proxy.forget(this);
  }

  close(): void {
    this.teardown(null);
  }

  kick(): void {
    this.up.kick();
    this.down?.kick();
  }
}

class ProxyImpl implements Proxy {
  readonly dir: Record<Direction, DirectionState> = {
    upstream: new DirectionState("upstream"),
    downstream: new DirectionState("downstream"),
  };
  readonly cutBufferBytesMax: number;
  readonly queueBytesHighWater: number;
  readonly connectionsMax: number;
  readonly nowMs: () => number;
  private readonly random: () => number;
  private readonly connections = new Set<Connection>();
  readonly sourcesCut = new Set<string>();
  private readonly server: net.Server;
  address: { host: string; port: number } = { host: "", port: 0 };
  readonly target: { host: string; port: number };
  connectionsAccepted = 0;
  connectionsReset = 0;
  connectionsDropped = 0;
  connectionsRefused = 0;
  upstreamConnectFailures = 0;

  constructor(private readonly opts: ProxyOptions) {
    this.target = { host: opts.targetHost, port: opts.targetPort };
    this.cutBufferBytesMax = opts.cutBufferBytesMax ?? PROXY_DEFAULTS.cutBufferBytesMax;
    this.queueBytesHighWater = opts.queueBytesHighWater ?? PROXY_DEFAULTS.queueBytesHighWater;
    this.connectionsMax = opts.connectionsMax ?? PROXY_DEFAULTS.connectionsMax;
    this.nowMs = opts.nowMs ?? (() => performance.now());
    this.random = opts.random ?? Math.random;
    this.server = net.createServer({ allowHalfOpen: true }, (sock) => this.accept(sock));
  }

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.opts.listenPort, this.opts.listenHost, () => {
        this.server.off("error", reject);
        const a = this.server.address() as net.AddressInfo;
        this.address = { host: a.address, port: a.port };
        resolve();
      });
    });
  }

  delayFor(st: DirectionState): number {
    const lat = st.toxics.get("latency");
    if (lat?.kind !== "latency") return 0;
    const jitterMs = lat.jitterMs ?? 0;
    return Math.max(0, lat.latencyMs + (jitterMs > 0 ? (this.random() * 2 - 1) * jitterMs : 0));
  }

  private accept(sock: net.Socket): void {
    this.connectionsAccepted++;
    // Without a listener an error on a socket we are about to throw away would crash us.
    sock.on("error", () => {});
    if (this.connections.size >= this.connectionsMax) {
      this.connectionsRefused++;
      sock.resetAndDestroy();
      return;
    }
    if (this.dir.downstream.toxics.has("reset") || this.dir.upstream.toxics.has("reset")) {
      this.connectionsReset++;
      // The node never hears of it; the client hears an RST only for a downstream reset.
      if (this.dir.downstream.toxics.has("reset")) sock.resetAndDestroy();
      else sock.destroy();
      return;
    }
    const conn = new Connection(this, sock);
    this.connections.add(conn);
    if (this.dir.upstream.isCut) conn.held = true;
    else conn.connect();
  }

  forget(conn: Connection): void {
    this.connections.delete(conn);
  }

  setToxic(direction: DirectionSpec, toxic: Toxic): void {
    const t = validateToxic(toxic);
    const dirs = directionsOf(direction);
    for (const d of dirs) {
      const st = this.dir[d];
      if (t.kind === "cut" && st.cutSinceMs === null) st.cutSinceMs = this.nowMs();
      if (t.kind === "bandwidth") st.bandwidthEpoch++;
      st.toxics.set(t.kind, t);
    }
    if (t.kind === "reset") {
      for (const c of [...this.connections]) c.reset(dirs);
    }
    this.kickAll();
  }

  removeToxic(direction: DirectionSpec, kind: ToxicKind): void {
    if (!TOXIC_KINDS.includes(kind)) throw new RangeError(`unknown toxic kind ${JSON.stringify(kind)}`);
    for (const d of directionsOf(direction)) {
      const st = this.dir[d];
      if (!st.toxics.delete(kind)) continue;
      if (kind === "cut" && st.cutSinceMs !== null) {
        st.cutMsTotal += this.nowMs() - st.cutSinceMs;
        st.cutSinceMs = null;
      }
    }
    this.kickAll();
  }

  heal(direction: DirectionSpec = "both"): void {
    for (const d of directionsOf(direction)) for (const k of TOXIC_KINDS) this.removeToxic(d, k);
  }

  cut(direction: DirectionSpec = "both"): void {
    this.setToxic(direction, { kind: "cut" });
  }

  cutFrom(source: string): void {
    if (typeof source !== "string" || source === "") throw new RangeError("cutFrom needs a node id");
    this.sourcesCut.add(source);
    this.kickAll();
  }

  healFrom(source?: string): void {
    if (source === undefined) this.sourcesCut.clear();
    else this.sourcesCut.delete(source);
    this.kickAll();
  }

  cutSources(): string[] {
    return [...this.sourcesCut];
  }

  private kickAll(): void {
    const upCut = this.dir.upstream.isCut;
    for (const c of [...this.connections]) {
      if (c.held && !upCut) c.connect();
      c.kick();
    }
  }

  toxics(): Record<Direction, Toxic[]> {
    return {
      upstream: [...this.dir.upstream.toxics.values()].map((t) => ({ ...t })),
      downstream: [...this.dir.downstream.toxics.values()].map((t) => ({ ...t })),
    };
  }

  counters(): ProxyCounters {
    const nowMs = this.nowMs();
    let held = 0;
    let cutBySource = 0;
    const queued: Record<Direction, number> = { upstream: 0, downstream: 0 };
    for (const c of this.connections) {
      if (c.held) held++;
      if (c.cutBySource()) cutBySource++;
      queued.upstream += c.up.queuedBytes;
      queued.downstream += c.down?.queuedBytes ?? 0;
    }
    const dc = (d: Direction): DirectionCounters => {
      const st = this.dir[d];
      return {
        bytesReceived: st.bytesReceived,
        bytesForwarded: st.bytesForwarded,
        bytesDelayed: st.bytesDelayed,
        bytesDropped: st.bytesDropped,
        bytesQueued: queued[d],
        cutMs: Math.round(st.cutMsTotal + (st.cutSinceMs === null ? 0 : nowMs - st.cutSinceMs)),
      };
    };
    return {
      connectionsAccepted: this.connectionsAccepted,
      connectionsActive: this.connections.size,
      connectionsHeld: held,
      connectionsReset: this.connectionsReset,
      connectionsDropped: this.connectionsDropped,
      connectionsRefused: this.connectionsRefused,
      upstreamConnectFailures: this.upstreamConnectFailures,
      connectionsCutBySource: cutBySource,
      upstream: dc("upstream"),
      downstream: dc("downstream"),
    };
  }

  close(): Promise<void> {
    for (const c of [...this.connections]) c.close();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function startProxy(opts: ProxyOptions): Promise<Proxy> {
  const p = new ProxyImpl(opts);
  await p.listen();
  return p;
}

/** Counters as snake_case JSON: the form used on the wire and in history fault values. */
export function countersToJson(c: ProxyCounters): Record<string, unknown> {
  const dir = (d: DirectionCounters) => ({
    bytes_received: d.bytesReceived,
    bytes_forwarded: d.bytesForwarded,
    bytes_delayed: d.bytesDelayed,
    bytes_dropped: d.bytesDropped,
    bytes_queued: d.bytesQueued,
    cut_ms: d.cutMs,
  });
  return {
    connections_accepted: c.connectionsAccepted,
    connections_active: c.connectionsActive,
    connections_held: c.connectionsHeld,
    connections_reset: c.connectionsReset,
    connections_dropped: c.connectionsDropped,
    connections_refused: c.connectionsRefused,
    upstream_connect_failures: c.upstreamConnectFailures,
    connections_cut_by_source: c.connectionsCutBySource,
    upstream: dir(c.upstream),
    downstream: dir(c.downstream),
  };
}

/** A toxic as snake_case JSON (the control API's form). */
export function toxicToJson(t: Toxic): Record<string, unknown> {
  switch (t.kind) {
    case "latency":
      return { kind: t.kind, latency_ms: t.latencyMs, jitter_ms: t.jitterMs ?? 0 };
    case "bandwidth":
      return { kind: t.kind, bandwidth_bytes_per_s: t.bandwidthBytesPerS };
    case "slicer":
      return { kind: t.kind, slice_bytes: t.sliceBytes, slice_delay_ms: t.sliceDelayMs ?? 0 };
    default:
      return { kind: t.kind };
  }
}

/** Parses the control API's snake_case toxic; throws RangeError with what is wrong. */
export function toxicFromJson(j: Record<string, unknown>): Toxic {
  const num = (k: string): number => j[k] as number;
  switch (j.kind) {
    case "latency":
      return validateToxic({ kind: "latency", latencyMs: num("latency_ms"), jitterMs: (j.jitter_ms as number | undefined) ?? 0 });
    case "bandwidth":
      return validateToxic({ kind: "bandwidth", bandwidthBytesPerS: num("bandwidth_bytes_per_s") });
    case "slicer":
      return validateToxic({ kind: "slicer", sliceBytes: num("slice_bytes"), sliceDelayMs: (j.slice_delay_ms as number | undefined) ?? 0 });
    default:
      return validateToxic({ kind: j.kind } as Toxic);
  }
}
