// The idempotent producers suite (test/idempotent-suite.ts) against one node started with --dev.
import { defineIdempotentSuite } from "./idempotent-suite.js";
import { singleNode } from "./support/deployment.js";

defineIdempotentSuite("single node", singleNode);
