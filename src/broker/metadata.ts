// Where a node's topic metadata lives, behind one interface the broker is handed:
//   - a single node (`TopicFiles`): DATA/topics/NAME/topic.json, written atomically (temp file,
//     fsync, rename, directory fsync) as the last step of a create or change, after the
//     partitions it names exist (docs/architecture.md, "metadata last"); a directory without it
//     and no record in its partitions is an interrupted create, removed at start (one that holds
//     records stays offline, as a corrupt one does). A topic.json written before owner ids names
//     its owner only: at the first start that reads it, the owner becomes the user of that name
//     then (none if there is none), written back before the topic is served, so the mapping is
//     made once (docs/security.md, "Owners");
//   - a cluster (`ControlPlaneRows`): the control plane's rows, which src/cluster writes and
//     src/cluster/ownership.ts applies to the broker (./cluster-topics.ts). Nothing is read at
//     start and the broker never writes metadata itself; partitions live under
//     DATA/cluster/NAME/INCARNATION, so a topic created again never meets its old files.
// Both remove files the same way: renamed into DATA/trash at once (so a crash never leaves half
// a topic in place), then removed in the background; DATA/trash is emptied at start.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import { TOPIC_NAME_RE } from "../protocol/wire.js";
import { ACK_LOG_FILE } from "../storage/index.js";
import { writeFileAtomic } from "../platform/files.js";
import { hasOwnerId, parseMeta, type TopicMeta } from "./topic.js";

export interface MetadataStore {
  /** The topics to serve from the start (a cluster: none; the control plane's rows are applied later). */
  load(): Promise<TopicMeta[]>;
  /** The directory that holds a topic's partitions (DIR/partitions/P). */
  dirOf(name: string, incarnation: number): string;
  /** Makes an empty directory for a new topic, removing what an interrupted create left there. */
  create(meta: TopicMeta): Promise<void>;
  /** Makes a topic's metadata durable; called after the partitions it names exist. */
  save(meta: TopicMeta): Promise<void>;
  /** Removes a directory of a topic or partition (renamed into trash, then removed); ENOENT is fine. */
  discard(dir: string): Promise<void>;
}

/** Empties DATA/trash: what a delete renamed there before a crash or stop. */
export async function emptyTrash(dataDir: string): Promise<void> {
  await rm(join(dataDir, "trash"), { recursive: true, force: true });
}

async function discardDir(dataDir: string, dir: string, log: Logger): Promise<void> {
  const trash = join(dataDir, "trash");
  await mkdir(trash, { recursive: true });
  const dest = join(trash, randomBytes(6).toString("hex"));
  try {
    await rename(dir, dest);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return;
    throw e;
  }
  void rm(dest, { recursive: true, force: true }).catch((e: Error) => log.warn({ err: e.message }, "could not remove deleted topic files"));
}

/** True when a topic directory's partitions hold any record (a segment file that is not empty). */
async function holdsRecords(dir: string): Promise<boolean> {
  let partitions: string[];
  try {
    partitions = await readdir(join(dir, "partitions"));
  } catch {
    return false;
  }
  for (const p of partitions) {
    let files: string[];
    try {
      files = await readdir(join(dir, "partitions", p));
    } catch {
      continue;
    }
    for (const f of files) {
      if (!f.endsWith(".log") || f === ACK_LOG_FILE) continue;
      const st = await stat(join(dir, "partitions", p, f)).catch(() => undefined);
      if (st !== undefined && st.size > 0) return true;
    }
  }
  return false;
}

/** A single node's metadata: one topic.json per topic. */
export class TopicFiles implements MetadataStore {
  constructor(
    private readonly dataDir: string,
    private readonly log: Logger,
    /** The id of the user of a name now (BrokerOptions.userIdOf). */
    private readonly userIdOf?: (name: string) => string | undefined,
  ) {}

  async load(): Promise<TopicMeta[]> {
    const root = join(this.dataDir, "topics");
    await mkdir(root, { recursive: true });
    const out: TopicMeta[] = [];
    for (const name of await readdir(root)) {
      const dir = join(root, name);
      if (!TOPIC_NAME_RE.test(name)) {
        this.log.warn({ dir }, "ignoring a directory under topics/ whose name is not a topic name");
        continue;
      }
      try {
        const j: unknown = JSON.parse(await readFile(join(dir, "topic.json"), "utf8"));
        const meta = parseMeta(j, name);
        out.push(hasOwnerId(j) ? meta : await this.adoptOwner(meta));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ENOENT") {
          // A create that crashed before its last step never answered 201, and holds nothing:
          // finish removing it. One whose partitions hold records lost its topic.json some other
          // way (it once deleted 100 acknowledged messages): keep it offline, as a corrupt one.
          if (await holdsRecords(dir)) {
            this.log.error({ dir }, "topic.json is missing but the partitions hold records; the topic is not served until topic.json is restored");
            continue;
          }
          this.log.warn({ dir }, "removing a topic directory without topic.json (an interrupted create)");
          await rm(dir, { recursive: true, force: true });
          continue;
        }
        this.log.error({ dir, err: (e as Error).message }, "topic.json is corrupt; the topic is not served until it is repaired");
      }
    }
    return out;
  }

  /**
   * A topic.json from before owner ids: its owner is the user of its owner name now, written
   * back at once. Keyed by name, a user created with a deleted owner's name inherited the topic;
   * the id fixes who the owner is from here on. An owner name with no user now: no owner.
   */
  private async adoptOwner(meta: TopicMeta): Promise<TopicMeta> {
    if (this.userIdOf === undefined) return meta;
    const id = meta.owner === null ? undefined : this.userIdOf(meta.owner);
    const next: TopicMeta = { ...meta, owner: id === undefined ? null : meta.owner, owner_id: id ?? null };
    try {
      await this.save(next);
      this.log.info({ topic: meta.name, owner: meta.owner, owned: id !== undefined }, "topic.json from before owner ids: owner recorded by user id");
    } catch (e) {
      // Served as mapped; the next start maps it again (e.g. once a full disk has room).
      this.log.warn({ topic: meta.name, err: (e as Error).message }, "could not record a topic's owner by user id; it is mapped again at the next start");
    }
    return next;
  }

  dirOf(name: string): string {
    return join(this.dataDir, "topics", name);
  }

  async create(meta: TopicMeta): Promise<void> {
    const dir = this.dirOf(meta.name);
    if (await holdsRecords(dir)) {
      throw new NaradError("topic_exists", `Topic ${JSON.stringify(meta.name)} is offline (its topic.json is missing or corrupt) and its partitions hold records; restore its topic.json, or remove ${dir} to create it anew.`);
    }
    await rm(dir, { recursive: true, force: true });
    await mkdir(join(dir, "partitions"), { recursive: true });
  }

  async save(meta: TopicMeta): Promise<void> {
    await writeFileAtomic(join(this.dirOf(meta.name), "topic.json"), JSON.stringify(meta, null, 2) + "\n");
  }

  discard(dir: string): Promise<void> {
    return discardDir(this.dataDir, dir, this.log);
  }
}

/** A cluster node's metadata: the control plane's rows, applied by src/cluster/ownership.ts. */
export class ControlPlaneRows implements MetadataStore {
  constructor(
    private readonly dataDir: string,
    private readonly log: Logger,
  ) {}

  async load(): Promise<TopicMeta[]> {
    await mkdir(join(this.dataDir, "cluster"), { recursive: true });
    await mkdir(join(this.dataDir, "topics"), { recursive: true });
    const single = await readdir(join(this.dataDir, "topics"));
    if (single.length > 0) this.log.warn({ topics: single.length }, "this data directory holds single-node topics; a cluster node does not serve them");
    return [];
  }

  /** One directory per incarnation: a topic deleted and created again never meets its old files. */
  dirOf(name: string, incarnation: number): string {
    return join(this.dataDir, "cluster", name, String(incarnation));
  }

  create(): Promise<void> {
    assert.fail("a cluster topic is created in the control plane (src/cluster), not by the broker");
  }

  save(): Promise<void> {
    assert.fail("a cluster topic's metadata is written to the control plane (src/cluster), not by the broker");
  }

  discard(dir: string): Promise<void> {
    return discardDir(this.dataDir, dir, this.log);
  }
}
