// Connections to the other nodes of the cluster: one bounded pool of keep-alive HTTP/1.1
// connections per peer for ordinary forwards, and one for long polls (which hold a connection for
// up to their wait), both to the peer's advertised URL as the control plane lists it.
//
// The one decision this module makes for every caller is what a failure means:
// - definite: the request never left this node (the connection was refused, the name did not
//   resolve, the connect timed out). Nothing happened at the peer; the caller may route around.
// - ambiguous: the request may have reached the peer (the connection broke afterwards, or no
//   answer came within the timeout). The caller must report it as "may have happened".
// A peer that failed either way is "suspect" for a short, doubling time (PEER_LIMITS), so routing
// goes around it without paying a timeout for every request; the first success clears it.
//
// Limits: `connections` per peer for ordinary requests (more wait in undici's queue, at most
// `queueMax` per peer, past which the request is refused as definite); `longPollsMax` long polls
// in flight per peer (past it a consume simply does not wait on that peer).

import { Pool, type Dispatcher } from "undici";
import type { Logger } from "pino";
import type { Clock } from "../platform/clock.js";
import type { ControlPlane } from "./control-plane.js";
import { INTERNAL_HEADERS } from "./wire.js";

export const PEER_LIMITS = {
  suspectMinMs: 250,
  suspectMaxMs: 5000,
  longPollsMax: 1024,
  queueMax: 4096,
} as const;

export interface PeerResponse {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

export class PeerError extends Error {
  constructor(
    readonly node: string,
    /** true: the request was never sent; false: it may have been. */
    readonly definite: boolean,
    message: string,
    override readonly cause?: unknown,
  ) {
    super(message);
    this.name = "PeerError";
  }
}

export interface PeerRequest {
  method: "GET" | "POST" | "DELETE";
  path: string;
  headers?: Record<string, string>;
  body?: Buffer | string;
  signal?: AbortSignal;
  /** Extra time on top of the forward timeout (a long poll's wait). */
  waitMs?: number;
}

interface PeerPools {
  url: string;
  pool: Pool;
  longPool: Pool;
  queued: number;
  longPolls: number;
}

const CONNECT_CODES = new Set(["ECONNREFUSED", "ENOTFOUND", "EAI_AGAIN", "EHOSTUNREACH", "ENETUNREACH", "EADDRNOTAVAIL", "UND_ERR_CONNECT_TIMEOUT"]);

export class Peers {
  private readonly pools = new Map<string, PeerPools>();
  private readonly suspect = new Map<string, { untilMono: number; backoffMs: number }>();
  private readonly log: Logger;
  private closed = false;

  constructor(
    private readonly o: {
      cp: ControlPlane;
      token: string;
      nodeId: string;
      clock: Clock;
      logger: Logger;
      timeoutMs: number;
      connections: number;
    },
  ) {
    this.log = o.logger.child({ module: "peers" });
  }

  /** Live by the control plane's view and not suspect by our own experience. */
  usable(node: string): boolean {
    if (node === this.o.nodeId) return true;
    const n = this.o.cp.node(node);
    if (n === undefined || n.state !== "live") return false;
    const s = this.suspect.get(node);
    return s === undefined || s.untilMono <= this.o.clock.monoMs();
  }

  /** Live by the control plane's view (a down node's partitions wait for it). */
  live(node: string): boolean {
    return node === this.o.nodeId || this.o.cp.node(node)?.state === "live";
  }

  private poolsFor(node: string): PeerPools {
    const n = this.o.cp.node(node);
    if (n === undefined) throw new PeerError(node, true, `node ${node} is not registered with the control plane`);
    let p = this.pools.get(node);
    if (p !== undefined && p.url !== n.advertiseUrl) {
      // The node restarted with another address: new connections, the old ones go.
      void p.pool.close().catch(() => undefined);
      void p.longPool.close().catch(() => undefined);
      p = undefined;
    }
    if (p === undefined) {
      const origin = new URL(n.advertiseUrl).origin;
      const common = { pipelining: 1, keepAliveTimeout: 30_000, connectTimeout: Math.min(this.o.timeoutMs, 2000) };
      p = {
        url: n.advertiseUrl,
        pool: new Pool(origin, { ...common, connections: this.o.connections, headersTimeout: this.o.timeoutMs, bodyTimeout: this.o.timeoutMs }),
        longPool: new Pool(origin, { ...common, connections: PEER_LIMITS.longPollsMax, headersTimeout: this.o.timeoutMs, bodyTimeout: this.o.timeoutMs }),
        queued: 0,
        longPolls: 0,
      };
      this.pools.set(node, p);
    }
    return p;
  }

  /**
   * Sends one request to a peer and reads its whole answer. Throws PeerError (definite or not)
   * for transport failures; any HTTP status, error or not, is returned for the caller to map.
   */
  async request(node: string, r: PeerRequest): Promise<PeerResponse> {
    if (this.closed) throw new PeerError(node, true, "this node is stopping");
    const pools = this.poolsFor(node);
    const long = (r.waitMs ?? 0) > 0;
    if (long) {
      if (pools.longPolls >= PEER_LIMITS.longPollsMax) throw new PeerError(node, true, `too many long polls wait on node ${node}`);
      pools.longPolls++;
    } else {
      if (pools.queued >= PEER_LIMITS.queueMax) throw new PeerError(node, true, `too many requests wait for node ${node}`);
      pools.queued++;
    }
    const headers: Record<string, string> = { ...r.headers, [INTERNAL_HEADERS.token]: this.o.token, [INTERNAL_HEADERS.from]: this.o.nodeId };
    let res: Dispatcher.ResponseData;
    try {
      res = await (long ? pools.longPool : pools.pool).request({
        method: r.method,
        path: r.path,
        headers,
        body: r.body,
        signal: r.signal,
        headersTimeout: this.o.timeoutMs + (r.waitMs ?? 0),
      });
      const chunks: Buffer[] = [];
      for await (const c of res.body) chunks.push(c as Buffer);
      const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      this.suspect.delete(node);
      return { status: res.statusCode, headers: res.headers, body };
    } catch (e) {
      if (r.signal?.aborted) throw new PeerError(node, false, "aborted", e);
      const code = errCode(e);
      const definite = code !== undefined && CONNECT_CODES.has(code);
      this.markSuspect(node, code ?? (e as Error).message);
      throw new PeerError(node, definite, `node ${node} (${pools.url}): ${definite ? "cannot connect" : "no answer"} (${code ?? (e as Error).message})`, e);
    } finally {
      if (long) pools.longPolls--;
      else pools.queued--;
    }
  }

  /**
   * Like request(), but hands over the response with its body unread (a file being copied), for
   * the caller to consume. Transport failures before the answer throw PeerError.
   */
  async stream(node: string, r: PeerRequest): Promise<Dispatcher.ResponseData> {
    if (this.closed) throw new PeerError(node, true, "this node is stopping");
    const pools = this.poolsFor(node);
    const headers: Record<string, string> = { ...r.headers, [INTERNAL_HEADERS.token]: this.o.token, [INTERNAL_HEADERS.from]: this.o.nodeId };
    try {
      return await pools.pool.request({ method: r.method, path: r.path, headers, body: r.body, signal: r.signal, headersTimeout: this.o.timeoutMs + (r.waitMs ?? 0) });
    } catch (e) {
      const code = errCode(e);
      const definite = code !== undefined && CONNECT_CODES.has(code);
      throw new PeerError(node, definite, `node ${node} (${pools.url}): ${definite ? "cannot connect" : "no answer"} (${code ?? (e as Error).message})`, e);
    }
  }

  private markSuspect(node: string, why: string): void {
    const prev = this.suspect.get(node);
    const backoffMs = prev === undefined ? PEER_LIMITS.suspectMinMs : Math.min(prev.backoffMs * 2, PEER_LIMITS.suspectMaxMs);
    this.suspect.set(node, { untilMono: this.o.clock.monoMs() + backoffMs, backoffMs });
    if (prev === undefined) this.log.warn({ peer: node, err: why }, "a peer failed; routing around it for a while");
  }

  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.flatMap((p) => [p.pool.destroy().catch(() => undefined), p.longPool.destroy().catch(() => undefined)]));
  }
}

function errCode(e: unknown): string | undefined {
  if (typeof e !== "object" || e === null) return undefined;
  const x = e as { code?: unknown; errors?: unknown[]; cause?: unknown };
  if (typeof x.code === "string" && x.code !== "UND_ERR_SOCKET") return x.code;
  if (Array.isArray(x.errors)) {
    for (const inner of x.errors) {
      const c = errCode(inner);
      if (c !== undefined) return c;
    }
  }
  const c = x.cause !== undefined ? errCode(x.cause) : undefined;
  return c ?? (typeof x.code === "string" ? x.code : undefined);
}
