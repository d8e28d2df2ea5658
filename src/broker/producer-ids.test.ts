// Unit tests of producer ids on one node (./producer-ids.ts): a real producers.json, written
// atomically, read back after a reopen; expiry by the clock handed in; the ids_max bound; a
// damaged file refusing the start.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { NaradError } from "../protocol/errors.js";
import { captureLogger, TestClock, withTempDir } from "../../test/support/storage.js";
import { ProducerFile, ProducerIds, PRODUCERS_FILE } from "./producer-ids.js";

const IDLE = 10_000;

test("a minted id is kept across a reopen, is unknown once idle past producers.idle_expiry_ms, and use keeps it alive", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const { logger } = captureLogger();
    let file = await ProducerFile.open(dir, IDLE, 100, logger);
    let ids = new ProducerIds(file, clock, IDLE);
    const a = await ids.mint();
    const b = await ids.mint();
    assert.match(a, /^[0-9a-f]{32}$/);
    await ids.use(a);
    await file.close();
    file = await ProducerFile.open(dir, IDLE, 100, logger);
    ids = new ProducerIds(file, clock, IDLE);
    await ids.use(a);
    await ids.use(b);
    // a is used every 6 s (more often than the expiry), b never again.
    for (let i = 0; i < 3; i++) {
      clock.advance(6_000);
      await ids.use(a);
    }
    await assert.rejects(ids.use(b), (e: unknown) => e instanceof NaradError && e.code === "unknown_producer");
    await assert.rejects(ids.use("f".repeat(32)), (e: unknown) => e instanceof NaradError && e.code === "unknown_producer");
    await assert.rejects(ids.use("not hex"), (e: unknown) => e instanceof NaradError && e.code === "unknown_producer");
    await file.close();
    // What a use recorded is on disk: a reopen keeps a, and b is gone.
    file = await ProducerFile.open(dir, IDLE, 100, logger);
    ids = new ProducerIds(file, clock, IDLE);
    await ids.use(a);
    assert.equal(file.size, 1);
    await file.close();
  });
});

test("producers.ids_max: a mint past it is 429 too_many_producers, unless expired ids make room", async () => {
  await withTempDir(async (dir) => {
    const clock = new TestClock();
    const file = await ProducerFile.open(dir, IDLE, 2, captureLogger().logger);
    const ids = new ProducerIds(file, clock, IDLE);
    await ids.mint();
    await ids.mint();
    await assert.rejects(ids.mint(), (e: unknown) => e instanceof NaradError && e.code === "too_many_producers" && e.status === 429);
    clock.advance(IDLE + 1);
    await ids.mint();
    assert.equal(file.size, 1);
    await file.close();
  });
});

test("a damaged producers.json refuses the start with what to do", async () => {
  await withTempDir(async (dir) => {
    await writeFile(join(dir, PRODUCERS_FILE), "{not json");
    await assert.rejects(ProducerFile.open(dir, IDLE, 10, captureLogger().logger), /producers\.json is damaged .*restore it from a backup, or move it aside/);
  });
});

test("a store that cannot answer (the control plane away) does not refuse an id seen live within the idle expiry", async () => {
  const clock = new TestClock();
  let up = true;
  const known = new Set<string>();
  const store = {
    insert: async (id: string) => void known.add(id),
    touch: async (id: string) => {
      if (!up) throw new NaradError("control_plane_unavailable");
      return known.has(id);
    },
  };
  const ids = new ProducerIds(store, clock, IDLE);
  const a = await ids.mint();
  const b = await ids.mint();
  await ids.use(a);
  up = false;
  clock.advance(5_000); // past the touch interval (2.5 s), within the expiry
  await ids.use(a);
  await ids.use(b);
  clock.advance(6_000); // past the expiry since the last check that worked
  await assert.rejects(ids.use(a), (e: unknown) => e instanceof NaradError && e.code === "control_plane_unavailable");
  await assert.rejects(ids.use("c".repeat(32)), (e: unknown) => e instanceof NaradError && e.code === "control_plane_unavailable");
  up = true;
  await ids.use(a);
});
