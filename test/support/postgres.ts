// A real PostgreSQL for tests: the embedded one of src/cluster/embedded-postgres.ts, with fsync
// off (tests need speed, not durability). Nothing is mocked.
//
//   const pg = await startPostgres();
//   const url = await pg.newDatabase();   // a fresh database per test keeps tests apart
//   await pg.down(); ...; await pg.up();  // an outage: same port, same data, so `url` stays valid
//   await pg.restart();                   // down + up
//   await pg.stop();                      // stop for good and remove the directory

import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from "../../src/cluster/embedded-postgres.js";

export { freePort } from "../../src/cluster/embedded-postgres.js";

export type TestPostgres = EmbeddedPostgresHandle;

export function startPostgres(): Promise<TestPostgres> {
  return startEmbeddedPostgres({ durable: false, password: "narad-test" });
}
