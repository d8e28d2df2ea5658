// The crash suite (test/crash-suite.ts), unchanged, against a three-node cluster on a real
// (embedded) PostgreSQL: each test kills or stops the owner of the partition it wrote to, starts
// it again, and reads every 202 back through every node in turn. One cluster for the file.
import { defineCrashSuite } from "./crash-suite.js";
import { threeNodeCluster } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg } = postgresForFile();

defineCrashSuite("three-node cluster", threeNodeCluster(pg));
