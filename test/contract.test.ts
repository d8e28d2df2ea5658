// The contract suite against one node started with --dev.
import { defineContractSuite } from "./contract-suite.js";
import { removeDir, startNode } from "./harness.js";

defineContractSuite("single node", async () => {
  const node = await startNode();
  return {
    urls: [node.url],
    async stop() {
      await node.stop();
      await removeDir(node.dataDir);
    },
  };
});
