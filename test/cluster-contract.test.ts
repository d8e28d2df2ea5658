// The contract suite, unchanged, against a three-node cluster: PostgreSQL control plane (a real
// one, embedded), three real node processes, security off (--dev with --control-plane), and the
// suite's requests spread across the nodes in turn, so most of them reach a node that does not
// own the partition and are forwarded.
import { after } from "node:test";
import { startCluster } from "./support/local-cluster.js";
import { defineContractSuite } from "./contract-suite.js";
import { startPostgres, type TestPostgres } from "./support/postgres.js";

let pg: TestPostgres | undefined;
after(async () => {
  await pg?.stop();
});

defineContractSuite("three-node cluster", async () => {
  pg = await startPostgres();
  const cluster = await startCluster({ nodes: 3, controlPlaneUrl: await pg.newDatabase() });
  return {
    urls: cluster.urls,
    async stop() {
      await cluster.stop();
      await pg?.stop();
    },
  };
});
