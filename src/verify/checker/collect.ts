// One pass over the history into compact columns.
//
// The checker never keeps the parsed lines. Each operation (an invoke and its completion) becomes
// one row of typed arrays, and every string it names (topic, message id, receipt handle, process,
// node, boot) becomes a small integer through an interner. A million-line history is then about
// 30 MB of columns plus the interned strings, and the later stages (grouping by pair, the per-pair
// search, the measures) walk arrays instead of objects.
//
// Rows are numbered in invoke order, which is time order, so "sorted by op id" means "sorted by
// invoke time" everywhere in the checker.

import type { ConfigValue, FaultKind, HistoryEvent } from "../history/types.js";

export const F_PRODUCE = 1;
export const F_CONSUME = 2;
export const F_ACK = 3;
export const F_EXTEND = 4;
export const F_NACK = 5;
export const F_REPLAY = 6;
export const F_FAULT = 7;
/** An ack with dead_letter=true (next wave): settles the pair by moving it to the dead-letter topic. */
export const F_DEAD_LETTER = 8;

export const F_NAMES = ["", "produce", "consume", "ack", "extend", "nack", "replay", "fault", "dead-letter"] as const;

const F_CODE: Record<string, number> = {
  produce: F_PRODUCE,
  consume: F_CONSUME,
  ack: F_ACK,
  extend: F_EXTEND,
  nack: F_NACK,
  replay: F_REPLAY,
  fault: F_FAULT,
  "dead-letter": F_DEAD_LETTER,
};

/** Outcome of an operation. OPEN: the history ended before it completed (read as ambiguous). */
export const O_OPEN = 0;
export const O_OK = 1;
export const O_FAIL = 2;
export const O_INFO = 3;

export const OUTCOME_NAMES = ["open", "ok", "fail", "info"] as const;

const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;

/**
 * FNV-1a's hashes are cut to 30 bits, so that they are small integers to V8: a 32-bit one is a
 * heap number, an allocation each time one is passed or kept.
 */
export const HASH_MASK = 0x3fffffff;

/** FNV-1a over bytes (cut by HASH_MASK): the hash the interner and the fast scanner agree on. */
export function fnv1a(buf: Uint8Array, start: number, end: number): number {
  let h = FNV_OFFSET;
  for (let i = start; i < end; i++) h = Math.imul(h ^ buf[i]!, FNV_PRIME);
  return h & HASH_MASK;
}

/**
 * Names to dense integer ids, keyed by their UTF-8 bytes in an open-addressing table. The fast
 * scanner looks names up straight from the history's bytes, so a name seen before costs no string
 * and no Map; the JS string of a name is made only when someone asks for it.
 */
export class Interner {
  /** Open addressing, two ints a slot: the id (-1: empty) and its hash, so a probe that misses reads nothing else. */
  private slots: Int32Array<ArrayBuffer>;
  private mask: number;
  private arena: Buffer;
  private arenaLen = 0;
  /** Per id: its bytes' offset in the arena and their length, side by side. */
  private keys: Int32Array<ArrayBuffer>;
  private readonly strings: Array<string | undefined> = [];
  private scratch = Buffer.alloc(256);
  size = 0;

  /** `expected`: a guess of how many names it will hold, to skip rehashing on the way. */
  constructor(expected = 512) {
    // A whole number of names: a fractional guess (the Collector divides its own) would give
    // `keys` an odd length, which the growth test below never meets.
    const names = Math.max(1024, Math.ceil(expected));
    let slots = 1024;
    while (slots < names * 2) slots *= 2;
    this.slots = new Int32Array(slots * 2).fill(-1);
    this.mask = slots - 1;
    this.keys = new Int32Array(names * 2);
    this.arena = Buffer.alloc(Math.max(1 << 16, names * 8));
  }

  /** The id of a name, adding it if new. */
  id(name: string): number {
    const n = this.encode(name);
    return this.idBytes(this.scratch, 0, n, fnv1a(this.scratch, 0, n), name);
  }

  /** The id of a name, or -1. */
  find(name: string): number {
    const n = this.encode(name);
    return this.lookup(this.scratch, 0, n, fnv1a(this.scratch, 0, n));
  }

  /** The id of the name whose UTF-8 bytes are buf[start, end) with the given FNV-1a hash, or -1 (never adds it). */
  findBytes(buf: Uint8Array, start: number, end: number, hash: number): number {
    return this.lookup(buf, start, end, hash);
  }

  /** The id of the name whose UTF-8 bytes are buf[start, end) with the given FNV-1a hash. */
  idBytes(buf: Uint8Array, start: number, end: number, hash: number, known?: string): number {
    const found = this.lookup(buf, start, end, hash);
    return found >= 0 ? found : this.insert(buf, start, end - start, hash, known);
  }

  name(id: number): string {
    let s = this.strings[id];
    if (s === undefined) {
      const off = this.keys[2 * id]!;
      s = this.arena.toString("utf8", off, off + this.keys[2 * id + 1]!);
      this.strings[id] = s;
    }
    return s;
  }

  private encode(name: string): number {
    if (name.length * 3 > this.scratch.length) this.scratch = Buffer.alloc(name.length * 3 + 16);
    return this.scratch.write(name, 0, "utf8");
  }

  private lookup(buf: Uint8Array, start: number, end: number, hash: number): number {
    const len = end - start;
    const slots = this.slots;
    const mask = this.mask;
    let i = hash & mask;
    for (;;) {
      const k = slots[2 * i]!;
      if (k < 0) return -1;
      if (slots[2 * i + 1] === hash && this.keys[2 * k + 1] === len) {
        const arena = this.arena;
        const off = this.keys[2 * k]!;
        let j = 0;
        while (j < len && arena[off + j] === buf[start + j]) j++;
        if (j === len) return k;
      }
      i = (i + 1) & mask;
    }
  }

  private insert(buf: Uint8Array, start: number, len: number, hash: number, known: string | undefined): number {
    const k = this.size;
    if (2 * k >= this.keys.length) {
      const keys = new Int32Array(this.keys.length * 2);
      keys.set(this.keys);
      this.keys = keys;
    }
    if (this.arenaLen + len > this.arena.length) {
      const a = Buffer.alloc(Math.max(this.arena.length * 2, this.arenaLen + len));
      this.arena.copy(a, 0, 0, this.arenaLen);
      this.arena = a;
    }
    const arena = this.arena;
    const off = this.arenaLen;
    for (let j = 0; j < len; j++) arena[off + j] = buf[start + j]!;
    this.arenaLen += len;
    this.keys[2 * k] = off;
    this.keys[2 * k + 1] = len;
    this.strings.push(known);
    this.size++;
    if (this.size * 2 > this.mask + 1) this.rehash();
    this.place(k, hash);
    return k;
  }

  private place(k: number, hash: number): void {
    let i = hash & this.mask;
    while (this.slots[2 * i]! >= 0) i = (i + 1) & this.mask;
    this.slots[2 * i] = k;
    this.slots[2 * i + 1] = hash;
  }

  private rehash(): void {
    const old = this.slots;
    this.slots = new Int32Array(old.length * 2).fill(-1);
    this.mask = old.length - 1;
    for (let i = 0; i < old.length; i += 2) if (old[i]! >= 0) this.place(old[i]!, old[i + 1]!);
  }
}

/** Growable columns of operations. */
export class OpTable {
  length = 0;
  f: Uint8Array<ArrayBuffer>;
  outcome: Uint8Array<ArrayBuffer>;
  proc: Int32Array<ArrayBuffer>;
  invIdx: Int32Array<ArrayBuffer>;
  invNs: Float64Array<ArrayBuffer>;
  compNs: Float64Array<ArrayBuffer>;
  topic: Int32Array<ArrayBuffer>;
  msg: Int32Array<ArrayBuffer>;
  delivery: Int32Array<ArrayBuffer>;
  partition: Int32Array<ArrayBuffer>;
  offset: Float64Array<ArrayBuffer>;
  node: Int32Array<ArrayBuffer>;
  status: Int16Array<ArrayBuffer>;
  /** An idempotent produce's producer id (interned; -1: a plain produce) and sequence. */
  producer: Int32Array<ArrayBuffer>;
  sequence: Float64Array<ArrayBuffer>;

  /** `capacity`: expected operations; a good guess saves the copies of growing. */
  constructor(capacity = 1024) {
    const n = Math.max(1024, capacity);
    this.f = new Uint8Array(n);
    this.outcome = new Uint8Array(n);
    this.proc = new Int32Array(n);
    this.invIdx = new Int32Array(n);
    this.invNs = new Float64Array(n);
    this.compNs = new Float64Array(n);
    this.topic = new Int32Array(n);
    this.msg = new Int32Array(n);
    this.delivery = new Int32Array(n);
    this.partition = new Int32Array(n);
    this.offset = new Float64Array(n);
    this.node = new Int32Array(n);
    this.status = new Int16Array(n);
    this.producer = new Int32Array(n);
    this.sequence = new Float64Array(n);
    this.fillDefaults(0);
  }

  /**
   * Rows get their defaults when the columns are made (outcome O_OPEN and status 0 are the zeroes
   * of a new array), so `add` writes only what every operation has.
   */
  private fillDefaults(from: number): void {
    this.compNs.fill(Infinity, from);
    this.topic.fill(-1, from);
    this.msg.fill(-1, from);
    this.delivery.fill(-1, from);
    this.partition.fill(-1, from);
    this.offset.fill(-1, from);
    this.node.fill(-1, from);
    this.producer.fill(-1, from);
    this.sequence.fill(-1, from);
  }

  add(f: number, proc: number, invIdx: number, invNs: number): number {
    if (this.length === this.f.length) this.grow();
    const i = this.length++;
    this.f[i] = f;
    this.proc[i] = proc;
    this.invIdx[i] = invIdx;
    this.invNs[i] = invNs;
    return i;
  }

  private grow(): void {
    const old = this.f.length;
    const n = old * 2;
    const g = <T extends Uint8Array<ArrayBuffer> | Int32Array<ArrayBuffer> | Float64Array<ArrayBuffer> | Int16Array<ArrayBuffer>>(
      a: T,
      ctor: new (n: number) => T,
    ): T => {
      const b = new ctor(n);
      b.set(a);
      return b;
    };
    this.f = g(this.f, Uint8Array);
    this.outcome = g(this.outcome, Uint8Array);
    this.proc = g(this.proc, Int32Array);
    this.invIdx = g(this.invIdx, Int32Array);
    this.invNs = g(this.invNs, Float64Array);
    this.compNs = g(this.compNs, Float64Array);
    this.topic = g(this.topic, Int32Array);
    this.msg = g(this.msg, Int32Array);
    this.delivery = g(this.delivery, Int32Array);
    this.partition = g(this.partition, Int32Array);
    this.offset = g(this.offset, Float64Array);
    this.node = g(this.node, Int32Array);
    this.status = g(this.status, Int16Array);
    this.producer = g(this.producer, Int32Array);
    this.sequence = g(this.sequence, Float64Array);
    this.fillDefaults(old);
  }
}

export interface FaultRec {
  op: number;
  kind: FaultKind;
  /** -1: the fault named no node, so it may concern any. */
  node: number;
  /** For a move: the topic and partition it names, -1 when it names none. */
  topic: number;
  partition: number;
  /** A start's new boot id, from its ok value. */
  boot: number;
  /**
   * A kill whose ok value says `power_loss_mode: true` (the node kept its unsynced writes in
   * memory, so the kill lost what a power loss would), or a power loss.
   */
  lossy: boolean;
}

/** Where a delivery on a dead-letter topic came from (its consume ok's `origin`). */
export interface OriginRec {
  /** The origin topic, interned. */
  topic: number;
  partition: number;
  offset: number;
  /** Deliveries there when it moved. */
  deliveries: number;
}

export interface ReplayRec {
  op: number;
  offsets: number[];
  /** The message of each offset, interned; -1 for a message no operation named before the replay. */
  msgs: number[];
}

/** Boot ids reported by one node, as the times where the reported boot changed. */
export interface BootTrack {
  timesNs: number[];
  boots: number[];
  /** The op that reported each change. */
  ops: number[];
}

export interface RunData {
  config: ConfigValue;
  events: number;
  lastTimeNs: number;
  ops: OpTable;
  topics: Interner;
  msgs: Interner;
  processes: Interner;
  deliveries: Interner;
  nodes: Interner;
  boots: Interner;
  faults: FaultRec[];
  replays: ReplayRec[];
  bootTracks: Map<number, BootTrack>;
  /** Producer ids of idempotent produces. */
  producers: Interner;
  /** Per delivery (op row) on a dead-letter topic that named one: its origin. */
  origins: Map<number, OriginRec>;
}

export function msgKey(v: unknown): string {
  return typeof v === "string" ? v : String(v);
}

/**
 * Builds RunData from validated events. Assumes the HistoryValidator accepted each event (the
 * reader guarantees it), so it does not re-check shapes.
 */
export class Collector {
  readonly ops: OpTable;
  readonly topics = new Interner();
  readonly msgs: Interner;
  readonly processes = new Interner();
  readonly deliveries: Interner;
  readonly nodes = new Interner();
  readonly boots = new Interner();
  readonly faults: FaultRec[] = [];
  readonly replays: ReplayRec[] = [];
  readonly bootTracks = new Map<number, BootTrack>();
  readonly producers = new Interner();
  readonly origins = new Map<number, OriginRec>();
  private pendingByProc: number[] = [];
  /** bootTracks by node id, for the delivery path (a Map lookup per delivery adds up). */
  private readonly trackOfNode: Array<BootTrack | undefined> = [];
  /** Fault rows to their index in `faults` (faults are few; no column for them). */
  private readonly faultOfOp = new Map<number, number>();
  private config: ConfigValue | null = null;
  private events = 0;
  private lastTimeNs = 0;

  /** `opsCapacity`: a guess of the number of operations (about a line in two). */
  constructor(opsCapacity = 1024) {
    this.ops = new OpTable(opsCapacity);
    // In a typical run about one operation in three is a delivery and one in eight a produce.
    this.deliveries = new Interner(Math.ceil(opsCapacity / 3));
    this.msgs = new Interner(Math.ceil(opsCapacity / 8));
  }

  add(ev: HistoryEvent): void {
    const v = ev.value;
    if (ev.f === "config") {
      this.events++;
      this.lastTimeNs = ev.time_ns;
      this.config = v as ConfigValue;
      return;
    }
    const proc = this.processes.id(ev.process);
    const ops = this.ops;
    if (ev.type === "invoke") {
      const op = this.openOp(F_CODE[ev.f]!, proc, ev.index, ev.time_ns);
      switch (ev.f) {
        case "produce":
          ops.topic[op] = this.topics.id(v["topic"] as string);
          ops.msg[op] = this.msgs.id(msgKey(v["msg"]));
          if (typeof v["producer"] === "string") this.idempotent(op, this.producers.id(v["producer"]), v["sequence"] as number);
          break;
        case "consume":
          ops.topic[op] = this.topics.id(v["topic"] as string);
          break;
        case "ack":
        case "extend":
        case "nack":
        case "dead-letter":
          ops.topic[op] = this.topics.id(v["topic"] as string);
          ops.msg[op] = this.msgs.id(msgKey(v["msg"]));
          ops.delivery[op] = this.deliveries.id(msgKey(v["delivery"]));
          break;
        case "replay":
          ops.topic[op] = this.topics.id(v["topic"] as string);
          ops.partition[op] = v["partition"] as number;
          ops.offset[op] = v["offset"] as number;
          break;
        case "fault":
          this.addFault(op, v);
          break;
      }
      return;
    }
    const status = v["status"];
    const op = this.closeOp(
      proc,
      ev.type === "ok" ? O_OK : ev.type === "fail" ? O_FAIL : O_INFO,
      ev.index,
      ev.time_ns,
      typeof status === "number" && Number.isInteger(status) && status >= 0 && status < 32768 ? status : 0,
    );
    if (ev.type !== "ok") return;
    switch (ev.f) {
      case "produce":
        ops.partition[op] = v["partition"] as number;
        ops.offset[op] = v["offset"] as number;
        if (typeof v["node"] === "string") this.producedBy(op, this.nodes.id(v["node"]), this.boots.id(v["boot"] as string), ev.time_ns);
        break;
      case "consume": {
        if (v["msg"] === null) break;
        this.delivered(
          op,
          this.msgs.id(msgKey(v["msg"])),
          v["partition"] as number,
          v["offset"] as number,
          this.deliveries.id(msgKey(v["delivery"])),
          this.nodes.id(v["node"] as string),
          this.boots.id(v["boot"] as string),
          ev.time_ns,
        );
        const origin = v["origin"] as Record<string, unknown> | undefined;
        if (origin !== undefined) {
          this.origins.set(op, {
            topic: this.topics.id(origin["topic"] as string),
            partition: origin["partition"] as number,
            offset: origin["offset"] as number,
            deliveries: origin["deliveries"] as number,
          });
        }
        break;
      }
      case "replay": {
        const msgs = v["msgs"] as Array<[number, unknown]>;
        const offsets = new Array<number>(msgs.length);
        const ids = new Array<number>(msgs.length);
        for (let i = 0; i < msgs.length; i++) {
          offsets[i] = msgs[i]![0];
          ids[i] = this.msgs.find(msgKey(msgs[i]![1]));
        }
        this.replayed(op, offsets, ids);
        break;
      }
      case "fault": {
        const fr = this.faults[this.faultOfOp.get(op)!]!;
        if (fr.kind === "kill" && v["power_loss_mode"] === true) fr.lossy = true;
        const boot = v["boot"];
        if (typeof boot === "string" && boot.length > 0) {
          fr.boot = this.boots.id(boot);
          // A start's ok names the node's new boot: evidence for the start and the fault before it.
          const nodeName = typeof v["node"] === "string" ? (v["node"] as string) : null;
          const node = nodeName !== null ? this.nodes.id(nodeName) : fr.node;
          if (node >= 0) this.reportBoot(node, fr.boot, ev.time_ns, op);
        }
        break;
      }
    }
  }

  /** Starts an operation row (an invoke line); the caller fills its columns. */
  openOp(f: number, proc: number, index: number, timeNs: number): number {
    this.events++;
    this.lastTimeNs = timeNs;
    const op = this.ops.add(f, proc, index, timeNs);
    this.pendingByProc[proc] = op;
    return op;
  }

  /** Closes the process's pending operation (a completion line); returns its row. */
  closeOp(proc: number, outcome: number, index: number, timeNs: number, status: number): number {
    void index; // the completion's own line is not needed: operations are named by their invoke
    this.events++;
    this.lastTimeNs = timeNs;
    const ops = this.ops;
    const op = this.pendingByProc[proc]!;
    this.pendingByProc[proc] = -1;
    ops.outcome[op] = outcome;
    ops.compNs[op] = timeNs;
    ops.status[op] = status;
    return op;
  }

  /** Records the offsets a replay answered and their messages. */
  replayed(op: number, offsets: number[], msgs: number[]): void {
    this.replays.push({ op, offsets, msgs });
  }

  /** Records what a consume ok delivered. */
  delivered(op: number, msg: number, partition: number, offset: number, delivery: number, node: number, boot: number, timeNs: number): void {
    const ops = this.ops;
    ops.msg[op] = msg;
    ops.partition[op] = partition;
    ops.offset[op] = offset;
    ops.delivery[op] = delivery;
    ops.node[op] = node;
    this.reportBoot(node, boot, timeNs, op);
  }

  /** Records an idempotent produce's producer id and sequence (its invoke). */
  idempotent(op: number, producer: number, sequence: number): void {
    this.ops.producer[op] = producer;
    this.ops.sequence[op] = sequence;
  }

  /** Records the owner a produce ok names (the node whose copier copies it to the children). */
  producedBy(op: number, node: number, boot: number, timeNs: number): void {
    this.ops.node[op] = node;
    this.reportBoot(node, boot, timeNs, op);
  }

  private addFault(op: number, v: Record<string, unknown>): void {
    const kind = v["kind"] as FaultKind;
    const node = typeof v["node"] === "string" ? this.nodes.id(v["node"] as string) : -1;
    let topic = -1;
    let partition = -1;
    const p = v["partition"];
    if (typeof p === "number") {
      partition = p;
      if (typeof v["topic"] === "string") topic = this.topics.id(v["topic"] as string);
    } else if (typeof p === "string") {
      // "TOPIC/P", as `narad partition move` names a partition.
      const slash = p.lastIndexOf("/");
      const n = Number(p.slice(slash + 1));
      if (slash > 0 && Number.isSafeInteger(n) && n >= 0) {
        topic = this.topics.id(p.slice(0, slash));
        partition = n;
      }
    } else if (typeof v["topic"] === "string") {
      topic = this.topics.id(v["topic"] as string);
    }
    this.faultOfOp.set(op, this.faults.length);
    this.faults.push({ op, kind, node, topic, partition, boot: -1, lossy: kind === "power-loss" });
  }

  private reportBoot(node: number, boot: number, timeNs: number, op: number): void {
    let track = this.trackOfNode[node];
    if (track === undefined) {
      track = { timesNs: [], boots: [], ops: [] };
      this.bootTracks.set(node, track);
      this.trackOfNode[node] = track;
    }
    const n = track.boots.length;
    if (n > 0 && track.boots[n - 1] === boot) return;
    track.timesNs.push(timeNs);
    track.boots.push(boot);
    track.ops.push(op);
  }

  finish(): RunData {
    if (this.config === null) throw new Error("collector: no config line (the reader should have refused the history)");
    // Topics the config names get ids too, so the judge can look children up without adding any.
    for (const [name, tc] of Object.entries(this.config.topics)) {
      this.topics.id(name);
      if (typeof tc.dead_letter_topic === "string") this.topics.id(tc.dead_letter_topic);
    }
    for (const [parent, list] of Object.entries(this.config.children ?? {})) {
      this.topics.id(parent);
      for (const c of list) this.topics.id(c.topic);
    }
    return {
      config: this.config,
      events: this.events,
      lastTimeNs: this.lastTimeNs,
      ops: this.ops,
      topics: this.topics,
      msgs: this.msgs,
      processes: this.processes,
      deliveries: this.deliveries,
      nodes: this.nodes,
      boots: this.boots,
      faults: this.faults,
      replays: this.replays,
      bootTracks: this.bootTracks,
      producers: this.producers,
      origins: this.origins,
    };
  }
}
