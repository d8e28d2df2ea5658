// The body of the password checker's thread (./password-checker.ts): scrypt, synchronously, one
// request at a time, off libuv's thread pool. Messages in: {id, password, salt_b64, n, r, p,
// keylen}; out: {id, hash_b64} or {id, error}.

import { scryptSync } from "node:crypto";
import { parentPort } from "node:worker_threads";

interface HashRequest {
  id: number;
  password: string;
  salt_b64: string;
  n: number;
  r: number;
  p: number;
  keylen: number;
}

parentPort?.on("message", (m: HashRequest) => {
  try {
    const hash = scryptSync(Buffer.from(m.password, "utf8"), Buffer.from(m.salt_b64, "base64"), m.keylen, {
      N: m.n,
      r: m.r,
      p: m.p,
      maxmem: 64 * 1024 * 1024,
    });
    parentPort!.postMessage({ id: m.id, hash_b64: hash.toString("base64") });
  } catch (err) {
    parentPort!.postMessage({ id: m.id, error: err instanceof Error ? err.message : String(err) });
  }
});
