// The SQL of producer ids (migration 4, narad.producers). Nothing here is in the cached view:
// ids are checked one at a time, and each node caches its own checks (src/broker/producer-ids.ts
// records a use at most once a minute per id), so the produce path does not reach PostgreSQL per
// message. Expiry is judged by the database clock, as leases are.

import { tooManyProducers } from "../../broker/producer-ids.js";
import type { Connections } from "./connections.js";

/** Inserts a new id unless `idsMax` ids are live; expired ones are removed first. */
export async function insertProducer(db: Connections, id: string, idleExpiryMs: number, idsMax: number): Promise<void> {
  const ok = await db.tx(async (c) => {
    await c.query("DELETE FROM narad.producers WHERE last_used_at < now() - make_interval(secs => $1::double precision / 1000)", [idleExpiryMs]);
    const r = await c.query<{ n: string }>("SELECT count(*) AS n FROM narad.producers");
    if (Number(r.rows[0]!.n) >= idsMax) return false;
    await c.query("INSERT INTO narad.producers (id, created_at, last_used_at) VALUES ($1, now(), now())", [id]);
    return true;
  });
  if (!ok) throw tooManyProducers(idsMax);
}

/** Records a use of a live id; false when it is unknown or expired (an expired one is removed). */
export async function touchProducer(db: Connections, id: string, idleExpiryMs: number): Promise<boolean> {
  return db.tx(async (c) => {
    const r = await c.query("UPDATE narad.producers SET last_used_at = now() WHERE id = $1 AND last_used_at >= now() - make_interval(secs => $2::double precision / 1000) RETURNING id", [id, idleExpiryMs]);
    if (r.rowCount === 1) return true;
    await c.query("DELETE FROM narad.producers WHERE id = $1", [id]);
    return false;
  });
}
