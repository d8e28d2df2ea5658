// The SDK suite (test/client-suite.ts), unchanged, against a three-node cluster on a real
// (embedded) PostgreSQL: the SDK talks to one node, which forwards to the owners. One cluster
// for the file (and one more, with security on, for the users test).
import { defineSdkSuite } from "./client-suite.js";
import { threeNodeCluster } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg } = postgresForFile();

defineSdkSuite("three-node cluster", threeNodeCluster(pg));
