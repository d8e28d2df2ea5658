// The security suite (test/security-suite.ts), unchanged, against a three-node cluster with
// security on, on a real (embedded) PostgreSQL that holds the users and grants: the same 401s,
// 403s and 200s through every node, forwarded requests included. One cluster for the file.
import { defineSecuritySuite } from "./security-suite.js";
import { threeNodeCluster } from "./support/deployment.js";
import { postgresForFile } from "./support/postgres.js";

const { pg } = postgresForFile();

defineSecuritySuite("three-node cluster", threeNodeCluster(pg));
