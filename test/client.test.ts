// The SDK suite (test/client-suite.ts) against one node started with --dev, and what needs no
// node at all.

import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { Narad, NaradAmbiguousError, NaradConnectionError } from "../src/client/index.js";
import { defineSdkSuite, rejectsWith } from "./client-suite.js";
import { singleNode } from "./support/deployment.js";

defineSdkSuite("single node", singleNode);

/** A port nothing listens on: bind port 0, note it, close. */
async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

// No deployment at all (nothing listens), so it is the same on every one and runs once, here.
describe("SDK without a node", () => {
  it("a refused connection is a definite NaradConnectionError", async () => {
    const c = new Narad({ url: `http://127.0.0.1:${await freePort()}` });
    try {
      const err = await rejectsWith(c.produce("t", "x"), NaradConnectionError);
      assert.equal(err.definite, true);
      assert.equal(err.code, "connection_failed");
      assert.ok(!(err instanceof NaradAmbiguousError));
    } finally {
      await c.destroy();
    }
  });
});
