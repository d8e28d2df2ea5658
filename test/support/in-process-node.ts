// A single node composed in this process as src/server.ts composes one (identity, users, broker,
// LocalService, createHttpServer), on real files and real HTTP, for the tests that need a seam
// src/server.ts does not offer: a filesystem of their own (test/storage-faults.test.ts), or the
// HTTP server's sockets before it listens (test/answer-writes.test.ts).

import assert from "node:assert/strict";
import type { Server } from "node:http";
import { pino } from "pino";
import { Broker, type BrokerOptions } from "../../src/broker/broker.js";
import { loadIdentity } from "../../src/broker/identity.js";
import { LocalService } from "../../src/broker/service.js";
import { createHttpServer } from "../../src/http/server.js";
import { UserStore } from "../../src/auth/store.js";
import { systemClock } from "../../src/platform/clock.js";
import type { StorageFs } from "../../src/storage/fs.js";

export interface InProcessNode {
  url: string;
  stop(): Promise<void>;
}

export async function startInProcessNode(dataDir: string, storageFs?: StorageFs, onServer?: (server: Server) => void): Promise<InProcessNode> {
  const logger = pino({ level: "silent" });
  const identity = await loadIdentity(dataDir, undefined);
  const opts: BrokerOptions = {
    dataDir,
    clock: systemClock,
    logger,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    bootSeq: identity.bootSeq,
    nodeNum: 0,
    secret: identity.secret,
    segmentBytesMax: 64 * 1024 * 1024,
    segmentAgeMaxMs: 3600_000,
    ackFlushIntervalMs: 100,
    consumerOffsetCommitIntervalMs: 1000,
    housekeepingIntervalMs: 1000,
    powerLoss: false,
    pendingSyncBytesMax: 64 * 1024 * 1024,
    longPollsMax: 1000,
    consumeBytesMax: 8 * 1024 * 1024,
    defaultPartitions: 1,
    defaultVisibilityTimeoutMs: 30_000,
    defaultRetentionMs: 7 * 24 * 3600_000,
    storageFs,
  };
  const broker = await Broker.open(opts);
  const users = await UserStore.open(dataDir);
  const http = createHttpServer({
    service: new LocalService(broker),
    logger,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    headersTimeoutMs: 10_000,
    requestTimeoutMs: 30_000,
    keepAliveTimeoutMs: 5_000,
    users,
    nowMs: () => systemClock.nowMs(),
    notReady: () => broker.storageProblem(),
  });
  onServer?.(http.server);
  await new Promise<void>((resolve, reject) => {
    http.server.once("error", reject);
    http.server.listen(0, "127.0.0.1", () => resolve());
  });
  http.setReady(true);
  const addr = http.server.address();
  assert.ok(typeof addr === "object" && addr !== null);
  return {
    url: `http://127.0.0.1:${addr.port}`,
    async stop() {
      await http.drain(1000);
      // A partition log that failed rejects its close with the failure (the log stopped); the
      // node is being stopped either way.
      await broker.close().catch(() => {});
    },
  };
}
