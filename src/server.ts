// The one wiring point of a node: the real clock, files, logger and (later) control plane are
// built here and passed down. Everything below takes them as arguments.

import { mkdir, access, constants } from "node:fs/promises";
import { resolve } from "node:path";
import { pino, type Logger } from "pino";
import { Broker } from "./broker/broker.js";
import { IdentityError, loadIdentity } from "./broker/identity.js";
import { TestBugs, TEST_BUGS } from "./broker/test-bugs.js";
import { createHttpServer, type NaradHttpServer } from "./http/server.js";
import { Authenticator } from "./auth/authenticator.js";
import { UserStore } from "./auth/store.js";
import { NaradError } from "./protocol/errors.js";
import { systemClock } from "./storage/types.js";
import type { ConfigValues } from "./cli/config.js";

/** A problem the operator must fix: printed as one line, exit non-zero. */
export class StartupError extends Error {}

export interface RunningServer {
  url: string;
  nodeId: string;
  bootId: string;
  dataDir: string;
  logger: Logger;
  /** Graceful stop: stop accepting, finish in-flight requests, flush and fsync, close. */
  stop(): Promise<void>;
}

const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export async function startServer(cfg: ConfigValues, env: NodeJS.ProcessEnv = process.env): Promise<RunningServer> {
  const dev = cfg.dev === true;
  if (cfg.control_plane !== undefined) {
    throw new StartupError("--control-plane: cluster mode is not available in this build yet; run a single node without it");
  }
  const listen = String(cfg.listen);
  const m = /^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(listen);
  if (!m || Number(m[2]) > 65535) throw new StartupError(`--listen ${JSON.stringify(listen)} is not HOST:PORT (for example 127.0.0.1:7070)`);
  const host = m[1]!.replace(/^\[|\]$/g, "");
  const port = Number(m[2]);
  const nodeIdWanted = cfg.node_id as string | undefined;
  if (nodeIdWanted !== undefined && !NODE_ID_RE.test(nodeIdWanted)) {
    throw new StartupError(`--node-id ${JSON.stringify(nodeIdWanted)} must match ${NODE_ID_RE.source}`);
  }
  const bugs = TestBugs.parse(env.NARAD_TEST_BUGS);
  if (typeof bugs === "string") throw new StartupError(`NARAD_TEST_BUGS: ${bugs}`);
  const powerLoss = env.NARAD_TEST_POWER_LOSS === "1";

  const dataDir = resolve((cfg.data_dir as string | undefined) ?? (dev ? ".narad" : "narad-data"));
  try {
    await mkdir(dataDir, { recursive: true });
    await access(dataDir, constants.W_OK | constants.R_OK);
  } catch (e) {
    throw new StartupError(`data directory ${dataDir} is not usable: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }

  const logger = pino({ level: String(cfg.log_level), base: undefined }, pino.destination({ fd: 2, sync: false }));
  let identity;
  try {
    identity = await loadIdentity(dataDir, nodeIdWanted);
  } catch (e) {
    if (e instanceof IdentityError) throw new StartupError(e.message);
    throw new StartupError(`data directory ${dataDir} is not usable: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const log = logger.child({ node: identity.nodeId, boot: identity.bootId });
  if (powerLoss) log.warn("TEST-ONLY POWER-LOSS MODE IS ON (NARAD_TEST_POWER_LOSS=1): unsynced bytes are kept in process memory");
  for (const b of bugs.names) log.warn({ bug: b, what: TEST_BUGS[b as keyof typeof TEST_BUGS] }, "TEST-ONLY SEEDED BUG IS ON (NARAD_TEST_BUGS)");

  let users: UserStore;
  try {
    users = await UserStore.open(dataDir);
  } catch (e) {
    throw new StartupError(`${(e as Error).message}; restore it from a backup or move it aside`);
  }
  if (!dev && users.userCount === 0) {
    const password = env.NARAD_ADMIN_PASSWORD;
    if (password === undefined || password === "") {
      throw new StartupError("security is on and there are no users yet: set NARAD_ADMIN_PASSWORD to create the user admin, or start with --dev for a local node with security off");
    }
    try {
      await users.addUser("admin", password, systemClock.nowMs(), [{ action: "admin", pattern: null }]);
    } catch (e) {
      if (e instanceof NaradError) throw new StartupError(`NARAD_ADMIN_PASSWORD: ${e.message}`);
      throw e;
    }
    log.warn("created the user admin from NARAD_ADMIN_PASSWORD (security is on)");
  }

  const broker = await Broker.open({
    dataDir,
    clock: systemClock,
    logger: log,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    bootSeq: identity.bootSeq,
    nodeNum: 0,
    secret: identity.secret,
    segmentBytesMax: cfg["storage.segment_bytes"] as number,
    segmentAgeMaxMs: cfg["storage.segment_ms"] as number,
    ackFlushIntervalMs: cfg["storage.ack_flush_interval_ms"] as number,
    ackSyncIntervalMs: cfg["storage.consumer_offset_commit_interval_ms"] as number,
    housekeepingIntervalMs: cfg["storage.housekeeping_interval_ms"] as number,
    powerLoss,
    pendingSyncBytesMax: cfg["limits.pending_sync_bytes"] as number,
    waitersMax: cfg["limits.long_polls"] as number,
    consumeBytesMax: cfg["limits.consume_bytes"] as number,
    defaultPartitions: cfg["topic_defaults.partitions"] as number,
    defaultVisibilityTimeoutMs: cfg["topic_defaults.visibility_timeout_ms"] as number,
    defaultRetentionMs: cfg["topic_defaults.retention_ms"] as number,
    bugs,
  });

  const http: NaradHttpServer = createHttpServer({
    broker,
    logger: log,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    headersTimeoutMs: cfg["http.headers_timeout_ms"] as number,
    requestTimeoutMs: cfg["http.request_timeout_ms"] as number,
    keepAliveTimeoutMs: cfg["http.keep_alive_timeout_ms"] as number,
    users,
    authenticator: dev ? undefined : new Authenticator(users, systemClock),
    nowMs: () => systemClock.nowMs(),
  });
  try {
    await new Promise<void>((res, rej) => {
      http.server.once("error", rej);
      http.server.listen(port, host, () => {
        http.server.off("error", rej);
        res();
      });
    });
  } catch (e) {
    await broker.close();
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE") throw new StartupError(`port ${port} on ${host} is in use; stop what holds it or pass --listen HOST:PORT`);
    throw new StartupError(`cannot listen on ${listen}: ${code ?? (e as Error).message}`);
  }
  http.setReady(true);
  const addr = http.server.address();
  const actualPort = typeof addr === "object" && addr !== null ? addr.port : port;
  const urlHost = host.includes(":") ? `[${host}]` : host;
  let stopping: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${actualPort}`,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    dataDir,
    logger: log,
    stop() {
      stopping ??= (async () => {
        log.info("stopping: finishing in-flight requests");
        await http.drain(cfg["http.shutdown_grace_ms"] as number);
        await broker.close();
        http.server.closeAllConnections();
        log.info("stopped: logs and acks flushed and synced");
        logger.flush();
      })();
      return stopping;
    },
  };
}
