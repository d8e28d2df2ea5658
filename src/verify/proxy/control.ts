// The fault proxy's HTTP control API and the `narad verify proxy` command.
//
// Design note. The control API lets a process other than the one running the proxy (a shell
// script, a workload in another language) set and clear toxics while traffic flows. It is small
// on purpose and speaks the same snake_case JSON as the rest of Narad's wire:
//   GET    /toxics                          → 200 {"upstream": [toxic...], "downstream": [toxic...]}
//   POST   /toxics {"direction", "kind", …} → 200 the toxics after the change
//          direction: "upstream" | "downstream" | "both"
//          kind "cut" | "reset" (no parameters), "latency" {latency_ms, jitter_ms?},
//          "bandwidth" {bandwidth_bytes_per_s}, "slicer" {slice_bytes, slice_delay_ms?}
//   DELETE /toxics[?direction=D][&kind=K]   → 200 the toxics after removal; no query heals everything
//   GET    /counters                        → 200 the counters (see countersToJson)
// Errors answer {"error": {"code", "message"}} with 400 (bad toxic), 404 (no such path), 405
// (wrong method) or 413 (a body over CONTROL_BODY_BYTES_MAX). It has no authentication: bind it to
// loopback.

import http from "node:http";
import type { AddressInfo } from "node:net";
import {
  countersToJson,
  startProxy,
  TOXIC_KINDS,
  toxicFromJson,
  toxicToJson,
  type DirectionSpec,
  type Proxy,
  type ToxicKind,
} from "./proxy.js";

/** Largest control request body; larger ones answer 413 without being read further. */
export const CONTROL_BODY_BYTES_MAX = 64 * 1024;

export interface ProxyControl {
  readonly address: { host: string; port: number };
  close(): Promise<void>;
}

/** Parses HOST:PORT (also [IPv6]:PORT). Throws with what is wrong. */
export function parseHostPort(s: string): { host: string; port: number } {
  const i = s.lastIndexOf(":");
  if (i <= 0) throw new Error(`expected HOST:PORT, got ${JSON.stringify(s)}`);
  let host = s.slice(0, i);
  if (host.startsWith("[") && host.endsWith("]")) host = host.slice(1, -1);
  const portText = s.slice(i + 1);
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port > 65535) throw new Error(`bad port in ${JSON.stringify(s)}`);
  return { host, port };
}

function formatHostPort(a: { host: string; port: number }): string {
  return a.host.includes(":") ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

function toxicsJson(proxy: Proxy): Record<string, unknown> {
  const t = proxy.toxics();
  return { upstream: t.upstream.map(toxicToJson), downstream: t.downstream.map(toxicToJson) };
}

function send(res: http.ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

function sendError(res: http.ServerResponse, status: number, code: string, message: string): void {
  send(res, status, { error: { code, message } });
}

function readBody(req: http.IncomingMessage): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let bytes = 0;
    // Past the bound the rest is read and discarded (memory stays bounded) so the 413 can still
    // be answered on an intact connection.
    req.on("data", (b: Buffer) => {
      bytes += b.length;
      if (bytes <= CONTROL_BODY_BYTES_MAX) parts.push(b);
      else parts.length = 0;
    });
    req.on("end", () => resolve(bytes > CONTROL_BODY_BYTES_MAX ? null : Buffer.concat(parts)));
    req.on("error", reject);
  });
}

async function handle(proxy: Proxy, req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
  const url = new URL(req.url ?? "/", "http://control");
  if (url.pathname === "/counters") {
    if (req.method !== "GET") return sendError(res, 405, "method_not_allowed", "use GET /counters");
    return send(res, 200, countersToJson(proxy.counters()));
  }
  if (url.pathname !== "/toxics") return sendError(res, 404, "not_found", "paths: /toxics, /counters");
  if (req.method === "GET") return send(res, 200, toxicsJson(proxy));
  if (req.method === "DELETE") {
    const direction = (url.searchParams.get("direction") ?? "both") as DirectionSpec;
    const kind = url.searchParams.get("kind");
    try {
      if (kind === null) proxy.heal(direction);
      else proxy.removeToxic(direction, kind as ToxicKind);
    } catch (e) {
      return sendError(res, 400, "bad_toxic", (e as Error).message);
    }
    return send(res, 200, toxicsJson(proxy));
  }
  if (req.method === "POST") {
    const body = await readBody(req);
    if (body === null) {
      return sendError(res, 413, "body_too_large", `a control request body is at most ${CONTROL_BODY_BYTES_MAX} bytes`);
    }
    let j: unknown;
    try {
      j = JSON.parse(body.toString("utf8"));
    } catch {
      return sendError(res, 400, "bad_json", "the body must be a JSON object {direction, kind, ...}");
    }
    if (typeof j !== "object" || j === null || Array.isArray(j)) {
      return sendError(res, 400, "bad_json", "the body must be a JSON object {direction, kind, ...}");
    }
    const o = j as Record<string, unknown>;
    try {
      if (!TOXIC_KINDS.includes(o.kind as ToxicKind)) {
        throw new RangeError(`kind must be one of ${TOXIC_KINDS.join(", ")}`);
      }
      proxy.setToxic((o.direction ?? "both") as DirectionSpec, toxicFromJson(o));
    } catch (e) {
      return sendError(res, 400, "bad_toxic", (e as Error).message);
    }
    return send(res, 200, toxicsJson(proxy));
  }
  return sendError(res, 405, "method_not_allowed", "use GET, POST or DELETE on /toxics");
}

/** Serves the control API for `proxy` on host:port (0 picks a free port). */
export function startProxyControl(proxy: Proxy, listen: { host: string; port: number }): Promise<ProxyControl> {
  const server = http.createServer((req, res) => {
    handle(proxy, req, res).catch((e: unknown) => {
      if (!res.headersSent) sendError(res, 500, "internal", (e as Error).message);
      else res.destroy();
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(listen.port, listen.host, () => {
      server.off("error", reject);
      const a = server.address() as AddressInfo;
      resolve({
        address: { host: a.address, port: a.port },
        close: () =>
          new Promise<void>((r) => {
            server.close(() => r());
            server.closeAllConnections();
          }),
      });
    });
  });
}

export interface ProxyCommandOptions {
  /** HOST:PORT to accept clients on. */
  listen: string;
  /** HOST:PORT of the node. */
  target: string;
  /** HOST:PORT of the control API; none when absent. */
  control?: string;
  /** Stops the command (besides SIGINT and SIGTERM); for tests and embedding. */
  signal?: AbortSignal;
}

/**
 * `narad verify proxy --listen HOST:PORT --target HOST:PORT [--control HOST:PORT]`: runs the proxy
 * until SIGINT or SIGTERM, prints one ready line, and the final counters when it stops.
 */
export async function runProxyCommand(opts: ProxyCommandOptions): Promise<void> {
  const listen = parseHostPort(opts.listen);
  const target = parseHostPort(opts.target);
  const controlAt = opts.control === undefined ? undefined : parseHostPort(opts.control);
  const proxy = await startProxy({ listenHost: listen.host, listenPort: listen.port, targetHost: target.host, targetPort: target.port });
  let control: ProxyControl | undefined;
  try {
    if (controlAt) control = await startProxyControl(proxy, controlAt);
  } catch (e) {
    await proxy.close();
    throw e;
  }
  console.log(
    `narad proxy listening on ${formatHostPort(proxy.address)}, forwarding to ${formatHostPort(target)}` +
      (control ? ` (control http://${formatHostPort(control.address)})` : ""),
  );
  await new Promise<void>((resolve) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      opts.signal?.removeEventListener("abort", stop);
      resolve();
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
    if (opts.signal?.aborted) stop();
    else opts.signal?.addEventListener("abort", stop);
  });
  await control?.close();
  await proxy.close();
  console.log(`narad proxy stopped; counters ${JSON.stringify(countersToJson(proxy.counters()))}`);
}
