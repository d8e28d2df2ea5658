// Schema migrations of the control plane.
//
// Everything lives in the PostgreSQL schema `narad`, so the database can be shared. Migrations are
// numbered, applied in order, each in its own transaction, and recorded in
// narad.schema_migrations. Several nodes may start at once: each takes a session-level advisory
// lock before looking at what is applied, so exactly one applies a migration and the others see
// it recorded. A database whose schema is newer than this build knows is refused: an old node
// must not write rows whose meaning it does not know.
//
// Append new migrations at the end; never edit one that has shipped.

import type pg from "pg";

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** pg_advisory_lock key of migrations ("narad-mg"). */
export const MIGRATION_LOCK_KEY = 0x6e61726164_6d67n;
/** pg_advisory_xact_lock key that serialises placement decisions ("narad-pl"). */
export const PLACEMENT_LOCK_KEY = 0x6e61726164_706cn;
/** pg_advisory_xact_lock key that serialises node number allocation ("narad-nn"). */
export const NODE_NUMBER_LOCK_KEY = 0x6e61726164_6e6en;

export const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    name: "nodes, topics, partitions, users, cluster secret",
    sql: `
-- Every change to a row takes a fresh value of this sequence as its version, so a version
-- never repeats (a user deleted and created again gets a new one).
CREATE SEQUENCE narad.change_seq;

CREATE TABLE narad.cluster (
  id          boolean PRIMARY KEY DEFAULT true CHECK (id),
  secret      bytea NOT NULL CHECK (length(secret) = 32),
  created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE narad.nodes (
  id               text PRIMARY KEY,
  -- small integer for receipt handles, kept across restarts
  node_number      integer NOT NULL UNIQUE CHECK (node_number BETWEEN 1 AND 65535),
  advertise_url    text NOT NULL,
  boot_id          text NOT NULL,
  registered_at    timestamptz NOT NULL DEFAULT now(),
  booted_at        timestamptz NOT NULL DEFAULT now(),
  -- timed by the database clock: live while lease_expires_at > now()
  lease_expires_at timestamptz NOT NULL,
  -- 'up' while running, 'stopped' after a graceful stop (lease released)
  state            text NOT NULL CHECK (state IN ('up', 'stopped')),
  version          bigint NOT NULL
);

CREATE TABLE narad.topics (
  name                  text PRIMARY KEY,
  incarnation           bigint NOT NULL CHECK (incarnation BETWEEN 1 AND 4294967295),
  partitions            integer NOT NULL CHECK (partitions >= 1),
  visibility_timeout_ms bigint NOT NULL CHECK (visibility_timeout_ms >= 0),
  retention_ms          bigint NOT NULL CHECK (retention_ms >= 0),
  owner                 text,
  children              jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(children) = 'array'),
  created_at            bigint NOT NULL,
  version               bigint NOT NULL
);

CREATE TABLE narad.partitions (
  topic      text NOT NULL REFERENCES narad.topics (name) ON DELETE CASCADE,
  partition  integer NOT NULL CHECK (partition >= 0),
  node_id    text NOT NULL REFERENCES narad.nodes (id),
  epoch      bigint NOT NULL CHECK (epoch >= 1),
  state      text NOT NULL CHECK (state IN ('serving', 'moving')),
  move_to    text REFERENCES narad.nodes (id),
  version    bigint NOT NULL,
  PRIMARY KEY (topic, partition),
  CHECK ((state = 'moving') = (move_to IS NOT NULL))
);
CREATE INDEX partitions_node_id ON narad.partitions (node_id);

CREATE TABLE narad.users (
  name        text PRIMARY KEY,
  password    jsonb NOT NULL,
  grants      jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(grants) = 'array'),
  created_at  bigint NOT NULL,
  version     bigint NOT NULL
);
`,
  },
  {
    version: 2,
    name: "replicated partitions: replication factor and acks per topic, replica sets and in-sync replicas per partition",
    sql: `
ALTER TABLE narad.topics
  ADD COLUMN replication_factor integer NOT NULL DEFAULT 1 CHECK (replication_factor BETWEEN 1 AND 5),
  ADD COLUMN acks text NOT NULL DEFAULT 'leader' CHECK (acks IN ('leader', 'quorum'));
-- replicas: node ids, the leader (node_id) first; in_sync: the replicas holding every record
-- the leader acknowledged. Rows of migration 1 hold one copy: replicas = in_sync = {node_id}.
ALTER TABLE narad.partitions
  ADD COLUMN replicas text[] NOT NULL DEFAULT '{}',
  ADD COLUMN in_sync text[] NOT NULL DEFAULT '{}';
UPDATE narad.partitions SET replicas = ARRAY[node_id], in_sync = ARRAY[node_id];
ALTER TABLE narad.partitions
  ADD CONSTRAINT partitions_leader_first CHECK (replicas[1] = node_id),
  ADD CONSTRAINT partitions_in_sync_replicas CHECK (in_sync <@ replicas);
`,
  },
  {
    version: 3,
    name: "user ids; topics owned by user id",
    sql: `
-- Ownership was keyed by user name, so a user created with a deleted user's name owned (and
-- could delete) that user's topics. Every user gets an id that is never reused, and a topic
-- records its owner's id; owner stays as the owner's name, for showing. gen_random_uuid() is
-- PostgreSQL 13's; the nodes give their own ids (16 random bytes, hex), the default serves a
-- row inserted otherwise.
ALTER TABLE narad.users ADD COLUMN id text;
UPDATE narad.users SET id = replace(gen_random_uuid()::text, '-', '');
ALTER TABLE narad.users
  ALTER COLUMN id SET NOT NULL,
  ALTER COLUMN id SET DEFAULT replace(gen_random_uuid()::text, '-', ''),
  ADD CONSTRAINT users_id_unique UNIQUE (id);

ALTER TABLE narad.topics ADD COLUMN owner_id text;
-- Existing topics: the user of the owner's name now, at the upgrade, once. A topic whose owner
-- name has no user now has no owner (admins manage it), so a user given that name later does
-- not inherit it.
UPDATE narad.topics t SET owner_id = u.id FROM narad.users u WHERE u.name = t.owner;
UPDATE narad.topics SET owner = NULL WHERE owner_id IS NULL;
`,
  },
  {
    version: 4,
    name: "producer ids of idempotent producers",
    sql: `
-- Producer ids (SPEC "Idempotent producers"): minted by the nodes (16 random bytes, hex), kept
-- until unused for producers.idle_expiry_ms. last_used_at is recorded coarsely (at most about
-- once a minute per id and node), by the database clock. The dedupe state itself is not here:
-- each partition rebuilds it from its log.
CREATE TABLE narad.producers (
  id            text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{32}$'),
  created_at    timestamptz NOT NULL DEFAULT now(),
  last_used_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX producers_last_used_at ON narad.producers (last_used_at);
`,
  },
];

export const SCHEMA_VERSION = MIGRATIONS[MIGRATIONS.length - 1]!.version;

export class SchemaTooNew extends Error {}

/**
 * Applies every migration not yet recorded. Uses one connection of the pool for the whole run
 * (the advisory lock is held by the session). Returns the versions it applied.
 */
export async function migrate(pool: pg.Pool): Promise<number[]> {
  const c = await pool.connect();
  let broken: Error | undefined;
  // A checked-out client that loses its connection emits 'error'; unheard, it would crash.
  const onError = (e: Error): void => {
    broken = e;
  };
  c.on("error", onError);
  try {
    await c.query("SELECT pg_advisory_lock($1)", [MIGRATION_LOCK_KEY.toString()]);
    try {
      await c.query("CREATE SCHEMA IF NOT EXISTS narad");
      await c.query(
        "CREATE TABLE IF NOT EXISTS narad.schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
      );
      const r = await c.query<{ version: number }>("SELECT version FROM narad.schema_migrations ORDER BY version");
      const applied = new Set(r.rows.map((x) => x.version));
      const newest = r.rows.length > 0 ? r.rows[r.rows.length - 1]!.version : 0;
      if (newest > SCHEMA_VERSION) {
        throw new SchemaTooNew(`the control plane's schema is at version ${newest}, newer than this build knows (${SCHEMA_VERSION}); upgrade this node`);
      }
      const done: number[] = [];
      for (const m of MIGRATIONS) {
        if (applied.has(m.version)) continue;
        await c.query("BEGIN");
        try {
          await c.query(m.sql);
          await c.query("INSERT INTO narad.schema_migrations (version, name) VALUES ($1, $2)", [m.version, m.name]);
          await c.query("COMMIT");
        } catch (e) {
          await c.query("ROLLBACK").catch(() => undefined);
          throw e;
        }
        done.push(m.version);
      }
      return done;
    } finally {
      await c.query("SELECT pg_advisory_unlock($1)", [MIGRATION_LOCK_KEY.toString()]).catch((e: Error) => {
        broken = e;
      });
    }
  } catch (e) {
    broken = e as Error;
    throw e;
  } finally {
    // A connection whose session may still hold the lock is not returned to the pool.
    c.removeListener("error", onError);
    c.release(broken);
  }
}
