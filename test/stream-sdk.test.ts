// The SDK suite (test/client-suite.ts) again with produce() on the streaming protocol
// (transport: "stream"): every produce answer, error and owner the suite checks over HTTP must
// come back the same over the stream.

import { defineSdkSuite } from "./client-suite.js";
import { singleNode } from "./support/deployment.js";

defineSdkSuite("single node, transport stream", singleNode, "stream");
