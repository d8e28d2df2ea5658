// One node for a describe block: started before its tests, stopped and removed after them. A
// test may replace it (a restart on the same data directory: `s.node = await startNode(...)`).
// Also the small helpers several black-box files of issue 16 share.

import { after, before } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";
import { NaradRequestError } from "../../src/client/index.js";
import { removeDir, startNode, type NodeOptions, type RunningNode } from "../harness.js";

export interface SuiteNode {
  node: RunningNode;
  /** SIGKILL, then the same node again on its data directory and port. */
  crashAndRestart(): Promise<void>;
}

export function nodeForSuite(opts: NodeOptions = {}): SuiteNode {
  const s: SuiteNode = {
    node: undefined as unknown as RunningNode,
    async crashAndRestart() {
      await s.node.kill();
      s.node = await startNode({ ...opts, dataDir: s.node.dataDir, port: s.node.port });
    },
  };
  before(async () => {
    s.node = await startNode(opts);
  });
  after(async () => {
    await s.node.stop();
    await removeDir(s.node.dataDir);
  });
  return s;
}

/** The NaradRequestError `p` rejects with (fails the test otherwise). */
export async function refusal(p: Promise<unknown>): Promise<NaradRequestError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof NaradRequestError, `expected a NaradRequestError, got ${String(e)}`);
    return e;
  }
  assert.fail("expected a refusal");
}

/** A port nothing listens on: bind port 0, note it, close. */
export async function deadPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
