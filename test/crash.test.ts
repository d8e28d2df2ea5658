// The crash suite (test/crash-suite.ts) against one node started with --dev.
import { defineCrashSuite } from "./crash-suite.js";
import { singleNode } from "./support/deployment.js";

defineCrashSuite("single node", singleNode);
