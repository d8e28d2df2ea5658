// The one wiring point of a node: the real clock, files, logger and control plane are built here
// and passed down. Everything below takes them as arguments.
//
// A single node: identity → users (a file) → broker → HTTP. A cluster node (--control-plane):
// identity → HTTP bound first (so an unset --advertise can name the port it got) but answering
// 503 → control plane (membership, lease, view, users) → broker keyed with the cluster's secret
// and node number → peers, router, ownership, moves → admin bootstrap → open what this node owns →
// ready. A graceful stop goes the other way: HTTP drained, broker closed (everything synced),
// control plane closed last, which releases the lease so the other nodes route around at once.

import { mkdir, access, constants, rm } from "node:fs/promises";
import { devLogDestination } from "./platform/dev-log.js";
import type { Server } from "node:http";
import { resolve } from "node:path";
import { pino, type Logger } from "pino";
import { Broker, type BrokerOptions } from "./broker/broker.js";
import { IdentityError, loadIdentity, NODE_ID_RE } from "./broker/identity.js";
import { LocalService } from "./broker/service.js";
import { parseSeededBugs, SEEDED_BUGS, seededFaults } from "./broker/seeded-bugs.js";
import { SdkRemoteSink } from "./remote-children.js";
import { createHttpListener, createHttpServer, type NaradHttpServer } from "./http/server.js";
import { streamCreditBytes } from "./http/stream.js";
import { Authenticator } from "./auth/authenticator.js";
import { UserStore } from "./auth/store.js";
import { ControlPlane } from "./cluster/control-plane.js";
import { ClusterUsers } from "./cluster/users.js";
import { Mover } from "./cluster/moves.js";
import { Replication } from "./cluster/replication/replication.js";
import { replicationFaults } from "./cluster/replication/faults.js";
import { Ownership } from "./cluster/ownership.js";
import { Peers } from "./cluster/peers.js";
import { ClusterService, cpCall } from "./cluster/service.js";
import { ClusterProducerIds } from "./cluster/producers.js";
import { ProducerFile, ProducerIds } from "./broker/producer-ids.js";
import { internalRoutes } from "./cluster/internal-routes.js";
import type { UserStoreApi } from "./auth/user-store-api.js";
import { clusterToken } from "./cluster/wire.js";
import { NaradError } from "./protocol/errors.js";
import { systemClock } from "./platform/clock.js";
import { DataDirLockedError, lockDataDir, type DataDirLock } from "./platform/data-dir-lock.js";
import { systemScheduler } from "./platform/scheduler.js";
import { descriptorLimit, descriptorsReserved, DESCRIPTORS_PER_PARTITION, openDescriptors, partitionsForDescriptors } from "./platform/descriptors.js";
import type { ConfigValues } from "./config.js";

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


export async function startServer(cfg: ConfigValues, env: NodeJS.ProcessEnv = process.env): Promise<RunningServer> {
  // A refused start leaves no data directory it made itself behind (a first secure start without
  // NARAD_ADMIN_PASSWORD left ./narad-data/): nothing in it ever served.
  const made: { dir?: string } = {};
  try {
    return await startServerIn(cfg, env, made);
  } catch (e) {
    if (made.dir !== undefined) await rm(made.dir, { recursive: true, force: true }).catch(() => undefined);
    throw e;
  }
}

async function startServerIn(cfg: ConfigValues, env: NodeJS.ProcessEnv, made: { dir?: string }): Promise<RunningServer> {
  const dev = cfg.dev === true;
  const controlPlaneUrl = cfg.control_plane as string | undefined;
  if (controlPlaneUrl !== undefined && !/^postgres(ql)?:\/\//.test(controlPlaneUrl)) {
    throw new StartupError("--control-plane must be a postgres:// URL (for example postgres://narad:secret@db:5432/narad)");
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
  const advertiseWanted = cfg.advertise as string | undefined;
  if (advertiseWanted !== undefined && !/^https?:\/\/[^\s/]+\/?$/.test(advertiseWanted)) {
    throw new StartupError(`--advertise ${JSON.stringify(advertiseWanted)} must be a URL like http://10.0.0.5:7070 (no path)`);
  }
  if (controlPlaneUrl !== undefined && advertiseWanted === undefined && (host === "0.0.0.0" || host === "::")) {
    throw new StartupError("--listen on every address needs --advertise: the URL other nodes use to reach this one");
  }
  const bugs = parseSeededBugs(env.NARAD_TEST_BUGS);
  if (typeof bugs === "string") throw new StartupError(`NARAD_TEST_BUGS: ${bugs}`);
  // Seeded bugs are for calibrating the checker: a node for real data never runs one.
  if (bugs.length > 0 && !dev && env.NARAD_TEST_MODE !== "1") {
    throw new StartupError("NARAD_TEST_BUGS plants bugs for calibrating the checker; it is refused unless the node runs with --dev or NARAD_TEST_MODE=1");
  }
  const powerLoss = env.NARAD_TEST_POWER_LOSS === "1";

  const dataDir = resolve((cfg.data_dir as string | undefined) ?? (dev ? ".narad" : "narad-data"));
  try {
    // mkdir names the first directory it made: this start's own, removed if the start fails.
    made.dir = await mkdir(dataDir, { recursive: true });
    await access(dataDir, constants.W_OK | constants.R_OK);
  } catch (e) {
    throw new StartupError(`data directory ${dataDir} is not usable: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  // One process per data directory, for its whole life (the kernel lets go on any exit): a second
  // start on it would hand out the same offsets (src/platform/data-dir-lock.ts).
  let lock: DataDirLock;
  try {
    lock = await lockDataDir(dataDir);
  } catch (e) {
    if (e instanceof DataDirLockedError) throw new StartupError(e.message);
    throw new StartupError(`data directory ${dataDir} cannot be locked: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }

  // --dev on a terminal: lines for people (src/platform/dev-log.ts); JSON everywhere else.
  const logDestination = dev && process.stderr.isTTY ? devLogDestination(process.stderr) : pino.destination({ fd: 2, sync: false });
  const logger = pino({ level: String(cfg.log_level), base: undefined }, logDestination);
  let identity;
  try {
    identity = await loadIdentity(dataDir, nodeIdWanted, cfg.new_identity === true);
  } catch (e) {
    if (e instanceof IdentityError) throw new StartupError(e.message);
    throw new StartupError(`data directory ${dataDir} is not usable: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  const log = logger.child({ node: identity.nodeId, boot: identity.bootId });
  if (identity.bootSeqUnsaved !== undefined) {
    log.warn({ err: identity.bootSeqUnsaved, bootSeq: identity.bootSeq }, "the disk is full: node.json keeps the previous boot sequence; starting read-mostly (produces and creates answer the storage error until space is freed)");
  }
  if (powerLoss) log.warn("TEST-ONLY POWER-LOSS MODE IS ON (NARAD_TEST_POWER_LOSS=1): unsynced bytes are kept in process memory");
  for (const b of bugs) log.warn({ bug: b, what: SEEDED_BUGS[b] }, "TEST-ONLY SEEDED BUG IS ON (NARAD_TEST_BUGS)");

  // limits.partitions: from the descriptor budget unless set; a setting the budget cannot hold is
  // warned about (every partition busy at once would run the process out of descriptors).
  const fds = descriptorLimit();
  const partitionsDerived = Math.min(partitionsForDescriptors(fds.limit), 10_000_000);
  const partitionsMax = (cfg["limits.partitions"] as number | undefined) ?? partitionsDerived;
  if (fds.source === "fallback") log.warn({ assumedDescriptors: fds.limit }, "the descriptor limit cannot be read (no /proc/self/limits); limits.partitions assumes 1024");
  if (partitionsMax > partitionsDerived) {
    log.warn(
      { partitionsMax, descriptorLimit: fds.limit, descriptorsNeeded: partitionsMax * DESCRIPTORS_PER_PARTITION + descriptorsReserved(fds.limit) },
      "limits.partitions is above what the descriptor limit holds when every partition is busy; raise LimitNOFILE (ulimit -n)",
    );
  }
  /** /readyz: not ready while a log is stopped or descriptors run out (src/http/routes/ops.ts). */
  const notReady = (broker: Broker) => (): string | null => {
    const storage = broker.storageProblem();
    if (storage !== null) return storage;
    const open = openDescriptors();
    if (open === "exhausted") return "No file descriptor is free: new connections and partition files cannot be opened.";
    if (open !== null && fds.source !== "fallback" && open >= fds.limit * 0.95) {
      return `${open} of the process's ${fds.limit} file descriptors are open: new connections and partition files may fail.`;
    }
    return null;
  };

  const brokerOptions: BrokerOptions = {
    dataDir,
    clock: systemClock,
    scheduler: systemScheduler,
    logger: log,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    bootSeq: identity.bootSeq,
    nodeNum: 0,
    secret: identity.secret,
    segmentBytesMax: cfg["storage.segment_bytes"] as number,
    segmentAgeMaxMs: cfg["storage.segment_ms"] as number,
    ackFlushIntervalMs: cfg["storage.ack_flush_interval_ms"] as number,
    consumerOffsetCommitIntervalMs: cfg["storage.consumer_offset_commit_interval_ms"] as number,
    housekeepingIntervalMs: cfg["storage.housekeeping_interval_ms"] as number,
    powerLoss,
    pendingSyncBytesMax: cfg["limits.pending_sync_bytes"] as number,
    longPollsMax: cfg["limits.long_polls"] as number,
    consumeBytesMax: cfg["limits.consume_bytes"] as number,
    defaultPartitions: cfg["topic_defaults.partitions"] as number,
    defaultVisibilityTimeoutMs: cfg["topic_defaults.visibility_timeout_ms"] as number,
    defaultRetentionMs: cfg["topic_defaults.retention_ms"] as number,
    faults: seededFaults(bugs),
    partitionsMax,
    idleCloseMs: cfg["storage.idle_close_ms"] as number,
    inlineFdatasync: cfg["storage.inline_fdatasync"] as boolean,
    dedupe: {
      windowMs: cfg["producers.dedupe_window_ms"] as number,
      sequencesMax: cfg["producers.window_sequences"] as number,
      entriesMax: cfg["producers.dedupe_entries_max"] as number,
    },
  };
  const idleExpiryMs = cfg["producers.idle_expiry_ms"] as number;
  const idsMax = cfg["producers.ids_max"] as number;
  const httpCommon = {
    logger: log,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    headersTimeoutMs: cfg["http.headers_timeout_ms"] as number,
    requestTimeoutMs: cfg["http.request_timeout_ms"] as number,
    keepAliveTimeoutMs: cfg["http.keep_alive_timeout_ms"] as number,
    streamCreditBytes: streamCreditBytes(cfg["limits.pending_sync_bytes"] as number),
    streamConnectionsMax: (cfg["limits.stream_connections"] as number | undefined) ?? Math.max(1, Math.floor(descriptorsReserved(fds.limit) / 2)),
    streamIdleTimeoutMs: cfg["stream.idle_timeout_ms"] as number,
    nowMs: () => systemClock.nowMs(),
  };
  const urlOf = (server: Server) => {
    const addr = server.address();
    const actualPort = typeof addr === "object" && addr !== null ? addr.port : port;
    return `http://${host.includes(":") ? `[${host}]` : host}:${actualPort}`;
  };

  if (controlPlaneUrl === undefined) {
    let users: UserStore;
    try {
      users = await UserStore.open(dataDir);
    } catch (e) {
      throw new StartupError(`${(e as Error).message}; restore it from a backup or move it aside`);
    }
    if (!dev) await bootstrapAdmin(users, env, log);
    let producerFile: ProducerFile;
    try {
      producerFile = await ProducerFile.open(dataDir, idleExpiryMs, idsMax, log);
    } catch (e) {
      throw new StartupError((e as Error).message);
    }
    const broker = await Broker.open({ ...brokerOptions, remote: new SdkRemoteSink(), userIdOf: (name) => users.get(name)?.id });
    const http = createHttpServer({
      ...httpCommon,
      service: new LocalService(broker),
      producers: new ProducerIds(producerFile, systemClock, idleExpiryMs),
      users,
      authenticator: dev ? undefined : new Authenticator(users, systemClock),
      notReady: notReady(broker),
    });
    try {
      await listenOn(http.server, host, port, listen);
    } catch (e) {
      await broker.close();
      throw e;
    }
    http.setReady(true);
    return running(http, urlOf(http.server), identity, dataDir, lock, logger, log, cfg, async () => {
      await broker.close();
      await producerFile.close();
    });
  }

  // ---- cluster mode ------------------------------------------------------------------------------
  // Bound first, answering 503 until the node is ready, so the advertised URL can name the port.
  const bare = createHttpListener(httpCommon);
  bare.on("request", (_req, res) => {
    res.writeHead(503, { "content-type": "application/json", "retry-after": "1", "narad-node": identity.nodeId, "narad-boot": identity.bootId });
    res.end(JSON.stringify(new NaradError("shutting_down", "The node is starting; retry shortly.").toBody()));
  });
  await listenOn(bare, host, port, listen);
  const advertiseUrl = (advertiseWanted ?? urlOf(bare)).replace(/\/+$/, "");
  let cp: ControlPlane;
  try {
    cp = await ControlPlane.connect({
      url: controlPlaneUrl,
      nodeId: identity.nodeId,
      advertiseUrl,
      bootId: identity.bootId,
      clock: systemClock,
      logger: log,
      heartbeatIntervalMs: cfg["cluster.heartbeat_interval_ms"] as number,
      nodeLeaseMs: cfg["cluster.node_lease_ms"] as number,
      leaseSafetyMarginMs: cfg["cluster.lease_safety_margin_ms"] as number,
      resyncIntervalMs: cfg["cluster.resync_interval_ms"] as number,
      ownsWithoutLease: bugs.includes("fenced-leader-answers"),
    });
  } catch (e) {
    bare.close();
    const cause = (e as { cause?: unknown }).cause;
    throw new StartupError(`--control-plane: ${cause instanceof Error ? cause.message : (e as Error).message}`);
  }
  let broker: Broker | undefined;
  let ownership: Ownership | undefined;
  let peers: Peers | undefined;
  let service: ClusterService | undefined;
  let replication: Replication | undefined;
  try {
    const users: UserStoreApi = new ClusterUsers(cp, (t) => service?.barrier(t) ?? Promise.resolve());
    broker = await Broker.open({
      ...brokerOptions,
      remote: new SdkRemoteSink(),
      nodeNum: cp.nodeNumber,
      secret: cp.clusterSecret,
      cluster: {
        ownsPartition: (t, p, e) => cp.ownsPartition(t, p, e),
        copyToChild: (child, records, partition) => service!.copyToChild(child, records, partition),
        appendDeadLetters: (topic, items, sources) => service!.appendDeadLetters(topic, items, sources),
        replicate: {
          prepare: (t, p) => replication!.hook.prepare(t, p),
          wrap: (r) => replication!.hook.wrap(r),
        },
      },
    });
    ownership = new Ownership({
      cp,
      broker,
      nodeId: identity.nodeId,
      dataDir,
      clock: systemClock,
      logger: log,
      moveFreezeTimeoutMs: cfg["cluster.move_freeze_timeout_ms"] as number,
    });
    const token = clusterToken(cp.clusterSecret);
    peers = new Peers({
      cp,
      token,
      nodeId: identity.nodeId,
      clock: systemClock,
      logger: log,
      timeoutMs: cfg["cluster.forward_timeout_ms"] as number,
      connections: cfg["cluster.forward_connections"] as number,
    });
    replication = new Replication({
      cp,
      broker,
      peers,
      nodeId: identity.nodeId,
      clock: systemClock,
      logger: log,
      ackTimeoutMs: cfg["replication.ack_timeout_ms"] as number,
      ackShipIntervalMs: brokerOptions.ackFlushIntervalMs,
      faults: replicationFaults(bugs),
    });
    ownership.replicas = replication;
    replication.ownership = ownership;
    replication.registerMetrics(broker.metrics.registry);
    service = new ClusterService({
      cp,
      broker,
      ownership,
      peers,
      nodeId: identity.nodeId,
      bootId: identity.bootId,
      bootSeq: identity.bootSeq,
      clock: systemClock,
      logger: log,
      defaultPartitions: brokerOptions.defaultPartitions,
      defaultVisibilityTimeoutMs: brokerOptions.defaultVisibilityTimeoutMs,
      defaultRetentionMs: brokerOptions.defaultRetentionMs,
      syncTimeoutMs: cfg["cluster.sync_timeout_ms"] as number,
    });
    const mover = new Mover({
      cp,
      broker,
      ownership,
      peers,
      service,
      nodeId: identity.nodeId,
      dataDir,
      clock: systemClock,
      logger: log,
      moveTimeoutMs: cfg["cluster.move_timeout_ms"] as number,
    });
    if (!dev) await bootstrapAdmin(users, env, log);
    await ownership.start();
    replication.start();
    const http = createHttpServer({
      ...httpCommon,
      service,
      users,
      producers: new ProducerIds(new ClusterProducerIds(cp, idleExpiryMs, idsMax), systemClock, idleExpiryMs),
      authenticator: dev ? undefined : new Authenticator(users, systemClock),
      // The cluster as the HTTP layer sees it (src/http/cluster.ts): http imports no cluster code.
      cluster: { view: cp, moves: mover, removeNode: (id) => cpCall(() => cp.removeNode(id)), internal: internalRoutes({ token, service, mover, replication }) },
      server: bare,
      notReady: notReady(broker),
    });
    http.setReady(true);
    const b = broker;
    const o = ownership;
    const pe = peers;
    const rep = replication;
    const run = running(http, urlOf(bare), identity, dataDir, lock, logger, log, cfg, async () => {
      o.close();
      await rep.close();
      await b.close();
      await pe.close();
      await cp.close();
    });
    cp.onChange((e) => {
      if (e.kind !== "superseded") return;
      log.fatal("another process started with this node id; this one stops (exit 1)");
      void run.stop().finally(() => process.exit(1));
    });
    log.info({ advertise: advertiseUrl, nodeNumber: cp.nodeNumber, leaseLive: cp.isLeaseLive() }, "cluster node ready");
    return run;
  } catch (e) {
    ownership?.close();
    await replication?.close().catch(() => undefined);
    await broker?.close().catch(() => undefined);
    await peers?.close().catch(() => undefined);
    await cp.close().catch(() => undefined);
    bare.close();
    if (e instanceof StartupError) throw e;
    throw new StartupError(`cluster start failed: ${(e as Error).message}`);
  }
}

/** Security on with no users yet: admin from NARAD_ADMIN_PASSWORD (another node may have made it: fine). */
async function bootstrapAdmin(users: UserStoreApi, env: NodeJS.ProcessEnv, log: Logger): Promise<void> {
  if (users.userCount > 0) return;
  const password = env.NARAD_ADMIN_PASSWORD;
  if (password === undefined || password === "") {
    throw new StartupError("security is on and there are no users yet: set NARAD_ADMIN_PASSWORD to create the user admin, or start with --dev for a local node with security off");
  }
  try {
    await users.addUser("admin", password, systemClock.nowMs(), [{ action: "admin", pattern: null }]);
  } catch (e) {
    if (e instanceof NaradError && e.code === "user_exists") return; // another node of the cluster made it first
    if (e instanceof NaradError) throw new StartupError(`NARAD_ADMIN_PASSWORD: ${e.message}`);
    throw e;
  }
  log.warn("created the user admin from NARAD_ADMIN_PASSWORD (security is on)");
}

async function listenOn(server: Server, host: string, port: number, listen: string): Promise<void> {
  try {
    await new Promise<void>((res, rej) => {
      server.once("error", rej);
      server.listen(port, host, () => {
        server.off("error", rej);
        res();
      });
    });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE") throw new StartupError(`port ${port} on ${host} is in use; stop what holds it or pass --listen HOST:PORT`);
    throw new StartupError(`cannot listen on ${listen}: ${code ?? (e as Error).message}`);
  }
}

function running(
  http: NaradHttpServer,
  url: string,
  identity: { nodeId: string; bootId: string },
  dataDir: string,
  lock: DataDirLock,
  logger: Logger,
  log: Logger,
  cfg: ConfigValues,
  closeRest: () => Promise<void>,
): RunningServer {
  let stopping: Promise<void> | undefined;
  lock.setUrl(url);
  return {
    url,
    nodeId: identity.nodeId,
    bootId: identity.bootId,
    dataDir,
    logger: log,
    stop() {
      stopping ??= (async () => {
        log.info("stopping: finishing in-flight requests");
        await http.drain(cfg["http.shutdown_grace_ms"] as number);
        await closeRest();
        http.server.closeAllConnections();
        await lock.release();
        log.info("stopped: logs and acks flushed and synced");
        logger.flush();
      })();
      return stopping;
    },
  };
}
