// The baselines Narad's figures are set beside: bare node:http servers.
//   plain:   read the body, answer 202 (or, for GET/POST to any other path, 200 with a 1 KiB body)
//   durable: write the body to an append-only file, answer 202 only after an fdatasync that
//            started after the write; one fdatasync covers every write queued before it
//            (group commit, started as soon as the previous one returns).
//   shaped:  do nothing, but answer a consume and an ack with the headers Narad's answers carry
//            (200 with a 1 KiB body and the nine Narad-* headers; 204 with Narad-Node/-Boot), so
//            it costs node:http and the load generator what Narad's answers cost them.
// Usage: node dist/bench/baseline-server.js plain|durable DIR — prints "port N" when listening.

import { createServer, type ServerResponse } from "node:http";
import { openSync, writeSync, fdatasync } from "node:fs";
import { join } from "node:path";

const mode = process.argv[2] === "durable" || process.argv[2] === "shaped" ? process.argv[2] : "plain";
const dir = process.argv[3] ?? ".";
const fd = mode === "durable" ? openSync(join(dir, `baseline-${process.pid}.log`), "a") : -1;
const NL = Buffer.from("\n");
const body1k = Buffer.alloc(1024, 0x61);
let pending: ServerResponse[] = [];
let syncing = false;

function commit(): void {
  if (syncing || pending.length === 0) return;
  const batch = pending;
  pending = [];
  syncing = true;
  fdatasync(fd, (err) => {
    syncing = false;
    for (const res of batch) {
      res.writeHead(err ? 500 : 202, { "content-length": "2" });
      res.end("{}");
    }
    if (pending.length > 0) setImmediate(commit);
  });
}

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    if (mode === "shaped") return shapedAnswer(req.url!, res);
    if (!req.url!.endsWith("/messages")) {
      // The consume-shaped answer: 200 with a 1 KiB body.
      res.writeHead(200, { "content-length": String(body1k.length) });
      res.end(body1k);
      return;
    }
    if (mode === "plain") {
      res.writeHead(202, { "content-length": "2" });
      res.end("{}");
      return;
    }
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    writeSync(fd, Buffer.concat([body, NL]));
    pending.push(res);
    setImmediate(commit);
  });
});
// What a Narad node sends, with values of the same lengths (a handle is 42 characters).
const IDENTITY = ["narad-node", "node-1c0ffe", "narad-boot", "0b1c0ffee0b1c0ff"];
const HANDLE = "h".repeat(42);
let offset = 0;

function shapedAnswer(url: string, res: ServerResponse): void {
  if (url.includes("/consume")) {
    offset++;
    res.writeHead(200, [
      ...IDENTITY,
      "content-type", "application/octet-stream",
      "content-length", String(body1k.length),
      "narad-receipt-handle", HANDLE,
      "narad-partition", String(offset % 3),
      "narad-offset", String(offset),
      "narad-delivery-count", "1",
      "narad-produced-at", String(Date.now()),
      "narad-owner", IDENTITY[1]!,
      "narad-owner-boot", IDENTITY[3]!,
    ]);
    res.end(body1k);
  } else {
    res.writeHead(204, IDENTITY);
    res.end();
  }
}

server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const a = server.address();
  process.stdout.write(`port ${typeof a === "object" && a ? a.port : 0}\n`);
});
process.on("SIGTERM", () => process.exit(0));
