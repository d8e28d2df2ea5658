// The idempotent producers suite (test/idempotent-suite.ts), unchanged, against a three-node
// cluster on a real (embedded) PostgreSQL: producer ids in the control plane, re-sends through
// other nodes, crashes of the partition's owner.
import { defineIdempotentSuite } from "./idempotent-suite.js";
import { threeNodeCluster } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg } = postgresForFile();

defineIdempotentSuite("three-node cluster", threeNodeCluster(pg));
