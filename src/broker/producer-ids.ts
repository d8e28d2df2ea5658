// Producer ids (SPEC "Idempotent producers"): minted by the broker (16 random bytes, 32 hex
// digits on the wire), kept where the node keeps its other state (one node: DATA/producers.json,
// ProducerFile below; a cluster: the control plane's narad.producers, src/cluster/producers.ts),
// and forgotten after `producers.idle_expiry_ms` without use.
//
// Use is recorded coarsely: a node remembers when it last recorded each id's use and records it
// again (a write to the file or PostgreSQL) at most once per `touchIntervalMs` per id, so the
// produce path costs a map lookup, not a write, per message. An id's expiry may therefore be
// judged up to one touch interval late, never early.
//
// Limits: `producers.ids_max` ids kept at once (expired ones are dropped first; then a mint
// answers 429 too_many_producers); ids cached per node: CACHE_MAX (the least recently checked
// ones are looked up again).

import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import type { Clock } from "../platform/clock.js";
import { readFileIfExists, writeFileAtomic } from "../platform/files.js";
import { PRODUCER_ID_RE } from "./producers.js";

/** Default of producers.ids_max. */
export const PRODUCER_IDS_MAX_DEFAULT = 100_000;
/** Use of an id is recorded at most this often (or a quarter of the idle expiry, if shorter). */
export const TOUCH_INTERVAL_MS = 60_000;
/** Ids whose last check a node caches. */
const CACHE_MAX = 100_000;

/** Where ids are kept. */
export interface ProducerIdStore {
  /** Keeps a new id, durably, before it is answered; NaradError too_many_producers at the limit. */
  insert(id: string, nowMs: number): Promise<void>;
  /** Records a use; false (and the id is dropped) when it is unknown or expired. */
  touch(id: string, nowMs: number): Promise<boolean>;
}

/** What the HTTP layer asks: mint an id, and check one before an idempotent produce. */
export interface ProducerIdsApi {
  mint(): Promise<string>;
  /** NaradError unknown_producer when the id is unknown or expired. */
  use(id: string): Promise<void>;
  /** True when use(id) would return at once (a live id checked within the touch interval); false: call use. */
  usedRecently(id: string): boolean;
}

export class ProducerIds implements ProducerIdsApi {
  private readonly checked = new Map<string, number>();
  private readonly inFlight = new Map<string, Promise<boolean>>();
  private readonly touchMs: number;

  constructor(
    private readonly store: ProducerIdStore,
    private readonly clock: Clock,
    private readonly idleExpiryMs: number,
  ) {
    this.touchMs = Math.max(1, Math.min(TOUCH_INTERVAL_MS, Math.floor(idleExpiryMs / 4)));
  }

  async mint(): Promise<string> {
    const id = randomBytes(16).toString("hex");
    await this.store.insert(id, this.clock.nowMs());
    this.remember(id);
    return id;
  }

  usedRecently(id: string): boolean {
    const at = this.checked.get(id);
    return at !== undefined && this.clock.monoMs() - at < this.touchMs;
  }

  async use(id: string): Promise<void> {
    if (!PRODUCER_ID_RE.test(id)) throw unknownProducer(id);
    const at = this.checked.get(id);
    if (at !== undefined && this.clock.monoMs() - at < this.touchMs) return;
    let p = this.inFlight.get(id);
    if (p === undefined) {
      p = this.store.touch(id, this.clock.nowMs()).finally(() => this.inFlight.delete(id));
      this.inFlight.set(id, p);
    }
    let live: boolean;
    try {
      live = await p;
    } catch (e) {
      // The store cannot answer now (a cluster's PostgreSQL is away): an id this node saw live
      // within the idle expiry still is, and its use is recorded at the next check that works,
      // so idempotent produces do not stop with the control plane.
      if (at !== undefined && this.clock.monoMs() - at < this.idleExpiryMs) return;
      throw e;
    }
    if (!live) {
      this.checked.delete(id);
      throw unknownProducer(id);
    }
    this.remember(id);
  }

  private remember(id: string): void {
    this.checked.delete(id);
    if (this.checked.size >= CACHE_MAX) this.checked.delete(this.checked.keys().next().value as string);
    this.checked.set(id, this.clock.monoMs());
  }
}

function unknownProducer(id: string): NaradError {
  return new NaradError("unknown_producer", `Producer id ${JSON.stringify(id.slice(0, 64))} is unknown or expired (unused for producers.idle_expiry_ms); get a new one with POST /v1/producers.`);
}

export function tooManyProducers(max: number): NaradError {
  return new NaradError("too_many_producers", `${max} producer ids are live (producers.ids_max); reuse producers, wait for idle ones to expire, or raise the limit.`, { retryAfterS: 60 });
}

export const PRODUCERS_FILE = "producers.json";

interface FileShape {
  version: 1;
  /** id → ms since the epoch of its last recorded use. */
  producers: Record<string, number>;
}

/**
 * One node's ids in DATA/producers.json, written atomically (temp file, fsync, rename, directory
 * fsync). A mint is answered after its write; a recorded use is written in the background, one
 * write at a time with the later uses of the meantime folded into the next (a crash may forget
 * the last uses: an id then expires up to a touch interval early from its real last use, which
 * the touch interval already allows for).
 */
export class ProducerFile implements ProducerIdStore {
  private writing: Promise<void> | undefined;
  private next: Promise<void> | undefined;

  private constructor(
    private readonly path: string,
    private readonly ids: Map<string, number>,
    private readonly idleExpiryMs: number,
    private readonly idsMax: number,
    private readonly log: Logger,
  ) {}

  static async open(dataDir: string, idleExpiryMs: number, idsMax: number, logger: Logger): Promise<ProducerFile> {
    const path = join(dataDir, PRODUCERS_FILE);
    const ids = new Map<string, number>();
    const text = await readFileIfExists(path);
    if (text !== undefined) {
      let j: FileShape;
      try {
        j = JSON.parse(text) as FileShape;
        if (j.version !== 1 || typeof j.producers !== "object" || j.producers === null) throw new Error("not a producers file of version 1");
      } catch (e) {
        throw new Error(`${path} is damaged (${(e as Error).message}); restore it from a backup, or move it aside (its producers then get unknown_producer and take new ids)`);
      }
      for (const [id, at] of Object.entries(j.producers)) if (PRODUCER_ID_RE.test(id) && Number.isSafeInteger(at)) ids.set(id, at);
    }
    return new ProducerFile(path, ids, idleExpiryMs, idsMax, logger.child({ module: "producers" }));
  }

  get size(): number {
    return this.ids.size;
  }

  async insert(id: string, nowMs: number): Promise<void> {
    if (this.ids.size >= this.idsMax) this.dropExpired(nowMs);
    if (this.ids.size >= this.idsMax) throw tooManyProducers(this.idsMax);
    this.ids.set(id, nowMs);
    await this.persist();
  }

  async touch(id: string, nowMs: number): Promise<boolean> {
    const at = this.ids.get(id);
    if (at === undefined) return false;
    if (nowMs - at > this.idleExpiryMs) {
      this.ids.delete(id);
      this.background();
      return false;
    }
    this.ids.set(id, nowMs);
    this.background();
    return true;
  }

  /** Writes what is in memory; resolves once a write that started after this call is durable. */
  persist(): Promise<void> {
    if (this.writing === undefined) return this.startWrite();
    // One write at a time; every change of the meantime goes in the one queued after it.
    this.next ??= this.writing.catch(() => undefined).then(() => {
      this.next = undefined;
      return this.startWrite();
    });
    return this.next;
  }

  private startWrite(): Promise<void> {
    const body: FileShape = { version: 1, producers: Object.fromEntries(this.ids) };
    const w: Promise<void> = writeFileAtomic(this.path, JSON.stringify(body)).finally(() => {
      if (this.writing === w) this.writing = undefined;
    });
    this.writing = w;
    return w;
  }

  private background(): void {
    void this.persist().catch((e: unknown) => this.log.warn({ err: (e as Error).message }, "recording producer ids' use failed; retried at the next use"));
  }

  private dropExpired(nowMs: number): void {
    for (const [id, at] of this.ids) if (nowMs - at > this.idleExpiryMs) this.ids.delete(id);
  }

  /** Waits for a background write (a graceful stop). */
  async close(): Promise<void> {
    await (this.next ?? this.writing)?.catch(() => undefined);
  }
}
