// The systems a run drives, and how it sets them up: the system under test (one node, or a
// cluster of nodes coordinated through a PostgreSQL control plane) and, for a remote child, a
// second, separate Narad (security on) that plays "another cluster": one node when the system
// under test is one node, a cluster of two (r1, r2) when it is a cluster.
//
// Design note.
// - Every node is a NodeProcess of the nemesis (src/verify/nemesis/process.ts): a real
//   `bin/narad server start` process whose faults carry their evidence (exit signal, new pid and
//   boot id). Node ids are given, never generated, so they are distinct across both systems: the
//   checker attributes a fault of node N to the deliveries whose owner is N, and a remote node that
//   shared an id with a local one would make it explain the wrong deliveries. Main nodes are
//   n1..nN, the remote nodes r1 (and r2).
// - A cluster's control plane is a fresh database on a PostgreSQL server: an embedded one started
//   for the run (src/verify/workloads/embedded-postgres.ts, loaded only when a cluster is asked for), or an
//   existing one given by URL (NARAD_VERIFY_CONTROL_PLANE). A remote child's other cluster, when
//   it has more than one node, gets a database of its own on the same server: two clusters that
//   share nothing but the PostgreSQL process. The first node of a cluster starts alone (it runs
//   the schema migrations and creates the admin user), the others together after it.
// - Security on: nodes start without --dev, with NARAD_ADMIN_PASSWORD; the driver sets up as
//   admin and creates the user the workers use, `verify`, with grants `produce` and `consume` on
//   `*` (so a forwarded request is authorized at the node it reached and again at the owner, as
//   any client's would be). On the remote system a second user, `copier`, may only produce to the
//   remote child's topic: the parent's node pushes the copies with its credentials.
// - Setup waits on conditions with deadlines, never on fixed sleeps: a cluster's nodes learn of
//   topics and grants through the control plane, so the run starts only once every node answers
//   for every topic with the workers' credentials.
// - Nothing here imports server code: setup goes through the SDK's admin methods (src/client),
//   like any client's; a refusal throws the SDK's error, whose message says what failed.

import { Narad } from "../../client/index.js";
import type { NodeProcess } from "../nemesis/index.js";
import type { Proxy } from "../proxy/index.js";
import type { AttachChildOptions, GrantAction } from "../../client/index.js";
import type { Credentials, TopicSpec } from "./protocol.js";
import { checkDeadLetterTopic, deadLetterCreateError } from "./next-wave.js";

export const SYSTEM_LIMITS = {
  /** For every node to see every topic and grant (cluster: through the control plane). */
  setupVisibleTimeoutMs: 30_000,
  /** One setup request. */
  setupRequestTimeoutMs: 10_000,
  /** After the load, for every child to have caught up with its parent. */
  childCatchUpTimeoutMs: 60_000,
  /** Poll interval of the waits above. */
  pollMs: 100,
} as const;

/** The admin password of the nodes a run starts with security on (test-only nodes, temp dirs). */
export const ADMIN_PASSWORD = "verify-admin-password";
/** The user the workload's clients are. */
export const CLIENT_USER: Credentials = { user: "verify", password: "verify-client-password" };
/** The user a remote child's copies are pushed as. */
export const COPIER_USER: Credentials = { user: "copier", password: "verify-copier-password" };

export interface RunSystem {
  /** "main": the system under test; "remote": the other Narad a remote child copies to. */
  role: "main" | "remote";
  nodes: NodeProcess[];
  /** Fault proxies in front of the nodes (clients go through them), or none. */
  proxies: Proxy[];
  /** Credentials of the setup requests (admin), or null with security off. */
  admin: Credentials | null;
  /** Credentials of the workers, or null with security off. */
  client: Credentials | null;
}

/** Where a system's clients connect: its proxies when it has them, else its nodes. */
export function clientUrls(s: RunSystem): string[] {
  return s.proxies.length > 0 ? s.proxies.map((p) => `http://127.0.0.1:${p.address.port}`) : s.nodes.map((n) => n.url);
}

/** An SDK client of `url` for setup (one request at a time, the setup timeout), as `auth`. */
function setupClient(url: string, auth: Credentials | null): Narad {
  return new Narad({
    url,
    connections: 1,
    requestTimeoutMs: SYSTEM_LIMITS.setupRequestTimeoutMs,
    ...(auth !== null ? { user: auth.user, password: auth.password } : {}),
  });
}

/** Runs `fn` with setup clients of `urls`, closed afterwards whatever happens. */
async function withClients<T>(urls: string[], auth: Credentials | null, fn: (clients: Narad[]) => Promise<T>): Promise<T> {
  const clients = urls.map((u) => setupClient(u, auth));
  try {
    return await fn(clients);
  } finally {
    await Promise.all(clients.map((c) => c.destroy().catch(() => undefined)));
  }
}

/** Runs `p`; a failure says what was being done (`what`) before the SDK's own message. */
async function must<T>(what: string, p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    const status = (e as { status?: unknown }).status;
    throw new Error(`${what}: ${typeof status === "number" ? `${status} ` : ""}${(e as Error).message}`, { cause: e });
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `probe` until it answers true, or throws `what` after the deadline. */
async function waitUntil(what: string, timeoutMs: number, probe: () => Promise<boolean>, signal?: AbortSignal): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let last = "";
  for (;;) {
    if (signal?.aborted) return;
    try {
      if (await probe()) return;
    } catch (e) {
      last = `: ${(e as Error).message}`;
    }
    if (performance.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms${last}`);
    await sleep(SYSTEM_LIMITS.pollMs);
  }
}

/** Security on: creates the workers' user (and, on a remote system, the copier) with their grants. */
export async function createUsers(s: RunSystem, remoteTopics: string[]): Promise<void> {
  if (s.admin === null || s.client === null) return;
  const client = s.client;
  await withClients([s.nodes[0]!.url], s.admin, async ([admin]) => {
    const add = async (c: Credentials, grants: [GrantAction, string][]) => {
      await must(`creating user ${c.user}`, admin!.createUser({ name: c.user, password: c.password }));
      for (const [action, pattern] of grants) await must(`granting ${action} on ${pattern} to ${c.user}`, admin!.addGrant(c.user, { action, pattern }));
    };
    await add(client, [
      ["produce", "*"],
      ["consume", "*"],
    ]);
    if (s.role === "remote") await add(COPIER_USER, remoteTopics.map((t) => ["produce", t] as [GrantAction, string]));
  });
}

/** Creates the topics (as admin, on the first node) and waits until every node serves them to the workers. */
export async function createTopics(s: RunSystem, topics: TopicSpec[], signal?: AbortSignal): Promise<void> {
  await withClients([s.nodes[0]!.url], s.admin, async ([admin]) => {
    // A dead-letter topic exists before the topic that names it (next wave).
    const ordered = [...topics.filter((t) => t.deadLetterTopic === undefined), ...topics.filter((t) => t.deadLetterTopic !== undefined)];
    for (const t of ordered) {
      const options = {
        name: t.name,
        partitions: t.partitions,
        visibilityTimeoutMs: t.visibilityTimeoutMs,
        ...(t.replicationFactor !== undefined && t.replicationFactor > 1 ? { replicationFactor: t.replicationFactor, ...(t.acks !== undefined ? { acks: t.acks } : {}) } : {}),
        // Fields of the next wave's SDK (next-wave.ts), checked in the answer below.
        ...(t.deadLetterTopic !== undefined ? { maxDeliveries: t.maxDeliveries ?? null, deadLetterTopic: t.deadLetterTopic } : {}),
      };
      if (t.deadLetterTopic === undefined) {
        await must(`creating topic ${t.name}`, admin!.createTopic(options));
        continue;
      }
      const want = { maxDeliveries: t.maxDeliveries ?? null, deadLetterTopic: t.deadLetterTopic };
      const created = await admin!.createTopic(options).catch((e: unknown) => {
        throw deadLetterCreateError(e);
      });
      checkDeadLetterTopic(created, want);
    }
  });
  await waitTopicsServed(s, topics.map((t) => t.name), signal);
}

/** Waits until every node of `s` serves every topic to the workers' user (topic and grants reached it). */
async function waitTopicsServed(s: RunSystem, topics: string[], signal?: AbortSignal): Promise<void> {
  await withClients(s.nodes.map((n) => n.url), s.client, async (clients) => {
    for (const [i, n] of s.nodes.entries()) {
      for (const t of topics) {
        await waitUntil(
          `node ${n.name} did not serve topic ${t} to the workers' user`,
          SYSTEM_LIMITS.setupVisibleTimeoutMs,
          async () => {
            await clients[i]!.replay(t, 0, { offset: 0, limit: 1 });
            return true;
          },
          signal,
        );
      }
    }
  });
}

export interface ChildLinkSpec {
  topic: string;
  kind: "fanout" | "delay" | "replica" | "remote";
  delayMs?: number;
}

/**
 * Attaches the children to `parent` on the system under test; a remote child points at the first
 * node of `remote` (its pushes enter the other cluster there). A replica child is created by its
 * attach: the run waits until every node serves it to the workers.
 */
export async function attachChildren(main: RunSystem, parent: string, children: ChildLinkSpec[], remote: RunSystem | null, signal?: AbortSignal): Promise<void> {
  await withClients([main.nodes[0]!.url], main.admin, async ([admin]) => {
    for (const c of children) {
      let child: AttachChildOptions;
      if (c.kind === "remote") {
        if (remote === null) throw new Error(`remote child ${c.topic} without a remote system`);
        // Straight to the remote node (never through a proxy of the system under test).
        child = { topic: c.topic, kind: "remote", url: remote.nodes[0]!.url, ...(remote.admin !== null ? { credentials: COPIER_USER } : {}) };
      } else {
        child = { topic: c.topic, kind: c.kind, ...(c.kind === "delay" && c.delayMs !== undefined ? { delayMs: c.delayMs } : {}) };
      }
      await must(`attaching child ${c.topic} (${c.kind}) to ${parent}`, admin!.attachChild(parent, child));
    }
  });
  const replicas = children.filter((c) => c.kind === "replica").map((c) => c.topic);
  if (replicas.length > 0) await waitTopicsServed(main, replicas, signal);
}

const LAG_RE = /^narad_child_lag_messages\{([^}]*)\}\s+(\S+)/gm;

/** Messages of `parent` not yet copied to each child, summed over the nodes (each reports what it owns). */
export async function childLag(s: RunSystem, parent: string, children: string[]): Promise<Map<string, number>> {
  const lag = new Map<string, number>(children.map((c) => [c, 0]));
  const seen = new Set<string>();
  const texts = await withClients(s.nodes.map((n) => n.url), s.admin, async (clients) => {
    const out: string[] = [];
    for (const [i, c] of clients.entries()) out.push(await must(`GET /metrics of ${s.nodes[i]!.name}`, c.metrics()));
    return out;
  });
  for (const text of texts) {
    for (const m of text.matchAll(LAG_RE)) {
      const labels = Object.fromEntries([...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1]!, x[2]!]));
      if (labels["parent"] !== parent || !lag.has(labels["child"]!)) continue;
      seen.add(labels["child"]!);
      lag.set(labels["child"]!, lag.get(labels["child"]!)! + Number(m[2]));
    }
  }
  // A child no node reports on cannot be shown caught up.
  for (const c of children) if (!seen.has(c)) lag.set(c, Number.NaN);
  return lag;
}

/**
 * Waits until every child has caught up with its parent (no parent message left to copy), so the
 * final drain of a child path begins after every copy it is owed was made: the checker judges a
 * copy `lost` when the path's final drain began after its produce completed (plus a delay
 * child's delay) and the copy never came. Returns the children still behind at the deadline.
 */
export async function waitChildrenCaughtUp(s: RunSystem, parent: string, children: string[], signal?: AbortSignal): Promise<Map<string, number>> {
  const deadline = performance.now() + SYSTEM_LIMITS.childCatchUpTimeoutMs;
  let lag = new Map<string, number>();
  for (;;) {
    if (signal?.aborted) return new Map();
    try {
      lag = await childLag(s, parent, children);
      if ([...lag.values()].every((n) => n === 0)) return new Map();
    } catch {
      // A node that does not answer now may later; the deadline bounds it.
    }
    if (performance.now() > deadline) return new Map([...lag].filter(([, n]) => n !== 0));
    await sleep(SYSTEM_LIMITS.pollMs);
  }
}

/**
 * The PostgreSQL server of a run's control planes: an embedded one started for the run, or an
 * existing one given by URL. Each cluster of the run (the system under test, and the other
 * cluster of a remote child) gets a fresh database of its own on it, so runs and clusters that
 * share a server never see each other's topics or nodes.
 */
export interface ControlPlaneServer {
  /** Creates a fresh database and returns its URL. */
  database(label: string): Promise<string>;
  /** Drops the databases made (existing server) or stops the embedded server. */
  stop(): Promise<void>;
}

export async function startControlPlaneServer(existingUrl: string | undefined): Promise<ControlPlaneServer> {
  if (existingUrl !== undefined && existingUrl !== "") {
    const pg = (await import("pg")).default;
    const made: string[] = [];
    const onServer = async (sql: string): Promise<void> => {
      const c = new pg.Client({ connectionString: existingUrl });
      c.on("error", () => undefined);
      await c.connect();
      try {
        await c.query(sql);
      } finally {
        await c.end().catch(() => undefined);
      }
    };
    return {
      async database(label) {
        const name = `narad_verify_${process.pid}_${Date.now()}_${label.replace(/[^a-z0-9_]/gi, "_")}`;
        await onServer(`CREATE DATABASE ${name}`);
        made.push(name);
        const u = new URL(existingUrl);
        u.pathname = `/${name}`;
        return u.toString();
      },
      async stop() {
        for (const name of made.splice(0)) await onServer(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).catch(() => undefined);
      },
    };
  }
  const { startEmbeddedPostgres } = await import("./embedded-postgres.js");
  const pg = await startEmbeddedPostgres();
  return { database: (label) => pg.newDatabase(`narad_verify_${label}`), stop: () => pg.stop() };
}
