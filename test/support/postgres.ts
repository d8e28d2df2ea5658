// A real PostgreSQL for tests: the embedded one of src/verify/workloads/embedded-postgres.ts, with fsync
// off (tests need speed, not durability). Nothing is mocked.
//
//   const pg = await startPostgres();
//   const url = await pg.newDatabase();   // a fresh database per test keeps tests apart
//   await pg.down(); ...; await pg.up();  // an outage: same port, same data, so `url` stays valid
//   await pg.restart();                   // down + up
//   await pg.stop();                      // stop for good and remove the directory

import { after, before } from "node:test";
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "../../src/verify/workloads/embedded-postgres.js";

export { freePort } from "../../src/verify/workloads/embedded-postgres.js";

export type TestPostgres = EmbeddedPostgresHandle;

export function startPostgres(): Promise<TestPostgres> {
  return startEmbeddedPostgres({ durable: false, password: "narad-test" });
}

/**
 * One PostgreSQL for a test file's tests, started in `before` and stopped in `after`, and the
 * file's clean-ups (clusters, proxies, clients), run newest first before it stops.
 *
 *   const fx = postgresForFile();
 *   ... startCluster({ controlPlaneUrl: await fx.pg().newDatabase() }); fx.cleanups.push(() => c.stop());
 */
export function postgresForFile(): { pg: () => TestPostgres; cleanups: (() => Promise<unknown>)[] } {
  let server: TestPostgres | undefined;
  const cleanups: (() => Promise<unknown>)[] = [];
  before(async () => {
    server = await startPostgres();
  });
  after(async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await server?.stop();
  });
  return {
    pg: () => {
      if (server === undefined) throw new Error("PostgreSQL is not started yet (use it inside a test)");
      return server;
    },
    cleanups,
  };
}
