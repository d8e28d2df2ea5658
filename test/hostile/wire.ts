// Raw HTTP/1.1 over node:net. An HTTP client would normalise most hostile inputs away (dot
// segments, header case, duplicate lengths, bare LFs), so the suite writes bytes itself and
// parses whatever comes back, down to "the node closed the connection without a word".
//
// An exchange ends when the expected number of answers has been parsed, when the node closes or
// resets the connection, or at a deadline. The deadline is a bound, not an expectation: a node
// that neither answers nor closes by then is reported as such (outcome "deadline").

import { connect, type Socket } from "node:net";

export interface RawResponse {
  status: number;
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>;
  body: Buffer;
  /** ms from the first byte written to this answer's end. */
  atMs: number;
}

export interface Exchange {
  responses: RawResponse[];
  /** How the connection ended: answers complete (we closed it), node closed, reset, or our deadline. */
  end: "done" | "closed" | "reset" | "deadline";
  /** Bytes after the last complete answer (a truncated or unparseable answer). */
  leftover: Buffer;
}

export interface SendOptions {
  /** Stop once this many answers are parsed (default: read until the node closes). */
  responses?: number;
  /** Half-close after the last chunk: the node sees EOF, so no parse can wait for more. */
  halfClose?: boolean;
  /** Destroy the socket right after writing (a client that vanishes): no answer is read. */
  destroy?: boolean;
  /** Pause between chunks (slowloris); only the long form uses it. */
  chunkDelayMs?: number;
  /** Methods of the requests in order, for answers without a body (HEAD). */
  methods?: string[];
  deadlineMs?: number;
}

export function send(port: number, data: Buffer | string | (Buffer | string)[], opts: SendOptions = {}): Promise<Exchange> {
  const chunks = (Array.isArray(data) ? data : [data]).map((c) => (typeof c === "string" ? Buffer.from(c, "latin1") : c));
  return new Promise((resolve) => {
    const sock: Socket = connect(port, "127.0.0.1");
    sock.setNoDelay(true);
    const received: Buffer[] = [];
    const responses: RawResponse[] = [];
    let buf = Buffer.alloc(0);
    let started = 0;
    let finished = false;
    const finish = (end: Exchange["end"]) => {
      if (finished) return;
      finished = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ responses, end, leftover: buf });
    };
    const timer = setTimeout(() => finish("deadline"), opts.deadlineMs ?? 15_000);
    sock.on("data", (c: Buffer) => {
      received.push(c);
      buf = Buffer.concat([buf, c]);
      for (;;) {
        const method = opts.methods?.[responses.length];
        const r = parseResponse(buf, method === "HEAD", false);
        if (r === null) break;
        responses.push({ ...r.response, atMs: Date.now() - started });
        buf = buf.subarray(r.used);
        if (opts.responses !== undefined && responses.length >= opts.responses) return finish("done");
      }
    });
    sock.on("end", () => {
      // An answer delimited by the close (no length, not chunked) is complete now.
      const r = buf.length > 0 ? parseResponse(buf, opts.methods?.[responses.length] === "HEAD", true) : null;
      if (r !== null) {
        responses.push({ ...r.response, atMs: Date.now() - started });
        buf = buf.subarray(r.used);
      }
      finish("closed");
    });
    sock.on("error", (e: NodeJS.ErrnoException) => finish(e.code === "ECONNRESET" || e.code === "EPIPE" ? "reset" : "closed"));
    sock.on("close", () => finish("closed"));
    sock.on("connect", async () => {
      started = Date.now();
      for (let i = 0; i < chunks.length; i++) {
        if (finished) return;
        sock.write(chunks[i]!);
        if (opts.chunkDelayMs !== undefined && i < chunks.length - 1) await new Promise((r) => setTimeout(r, opts.chunkDelayMs));
      }
      if (opts.destroy) return finish("closed");
      if (opts.halfClose) sock.end();
    });
  });
}

/** One complete answer at the start of `b`, or null while it is incomplete. */
export function parseResponse(b: Buffer, isHead: boolean, atEof: boolean): { response: Omit<RawResponse, "atMs">; used: number } | null {
  const headEnd = b.indexOf("\r\n\r\n");
  if (headEnd < 0) return null;
  const lines = b.subarray(0, headEnd).toString("latin1").split("\r\n");
  const m = /^HTTP\/\d\.\d (\d{3})/.exec(lines[0] ?? "");
  if (m === null) return null;
  const status = Number(m[1]);
  const headers: Record<string, string> = {};
  for (const line of lines.slice(1)) {
    const i = line.indexOf(":");
    if (i <= 0) continue;
    const k = line.slice(0, i).trim().toLowerCase();
    const v = line.slice(i + 1).trim();
    headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
  }
  let at = headEnd + 4;
  if (isHead || status === 204 || status === 304 || (status >= 100 && status < 200)) return { response: { status, headers, body: Buffer.alloc(0) }, used: at };
  if (headers["transfer-encoding"]?.toLowerCase().includes("chunked")) {
    const parts: Buffer[] = [];
    for (;;) {
      const le = b.indexOf("\r\n", at);
      if (le < 0) return null;
      const size = parseInt(b.subarray(at, le).toString("latin1"), 16);
      if (!Number.isFinite(size)) return null;
      if (size === 0) {
        const te = b.indexOf("\r\n\r\n", le);
        if (te < 0) return null;
        return { response: { status, headers, body: Buffer.concat(parts) }, used: te + 4 };
      }
      if (b.length < le + 2 + size + 2) return null;
      parts.push(b.subarray(le + 2, le + 2 + size));
      at = le + 2 + size + 2;
    }
  }
  if (headers["content-length"] !== undefined) {
    const n = Number(headers["content-length"]);
    if (b.length < at + n) return null;
    return { response: { status, headers, body: b.subarray(at, at + n) }, used: at + n };
  }
  if (!atEof) return null;
  return { response: { status, headers, body: b.subarray(at) }, used: b.length };
}

/** Builds one request's bytes. Headers are written as given (order, case, duplicates kept). */
export function request(method: string, path: string, headers: [string, string][] = [], body?: Buffer | string, version = "HTTP/1.1"): Buffer {
  const b = body === undefined ? undefined : typeof body === "string" ? Buffer.from(body, "utf8") : body;
  const lines = [`${method} ${path} ${version}`, ...headers.map(([k, v]) => `${k}: ${v}`)];
  if (b !== undefined && !headers.some(([k]) => /^(content-length|transfer-encoding)$/i.test(k))) lines.push(`Content-Length: ${b.length}`);
  return Buffer.concat([Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1"), b ?? Buffer.alloc(0)]);
}

/** A short printable form of an input, for the table's examples. */
export function preview(b: Buffer | string, max = 120): string {
  const s = typeof b === "string" ? b : b.toString("latin1");
  const shown = s.length > max ? s.slice(0, max) + `…(${s.length} bytes)` : s;
  return JSON.stringify(shown).replace(/\\u00([0-9a-f]{2})/g, "\\x$1");
}
