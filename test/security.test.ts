// The security suite (test/security-suite.ts) against one node with security on, and --dev,
// which needs a node of its own.

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { removeDir, startNode } from "./harness.js";
import { defineSecuritySuite } from "./security-suite.js";
import { singleNode } from "./support/deployment.js";

defineSecuritySuite("single node", singleNode);

// Single-node only: a cluster with security off is what cluster-contract.test.ts runs, every one
// of its requests without credentials; this is the same promise for one node started with --dev.
describe("--dev", () => {
  test("takes requests with no credentials", async () => {
    const n = await startNode({ dev: true });
    try {
      assert.equal((await fetch(`${n.url}/v1/topics`, { method: "POST", body: JSON.stringify({ name: "open" }) })).status, 201);
      assert.equal((await fetch(`${n.url}/v1/topics/open/messages`, { method: "POST", body: "x" })).status, 202);
      assert.equal((await fetch(`${n.url}/v1/users`)).status, 200);
    } finally {
      await n.kill();
      await removeDir(n.dataDir);
    }
  });
});
