// Reading a stream history into columns, fast.
//
// JSON.parse and an object per line cost about 2 µs a line on this class of machine, four times
// what the stream model's budget allows (500 000 events/s). The three lines that make up almost
// all of a stream history (a publish's invoke and ok, a delivery) are scanned here byte by byte
// in the recorder's layout, straight into typed arrays; every other line, and any of those three
// that deviates in the least (another key order, an escape, a float, a duplicate key), takes the
// slow path: JSON.parse and the StreamValidator, which accepts or rejects it with its own words.
// Both paths call the validator's sequence rules, so they keep one state and accept the same
// histories.

import { LineSplitter, sourceChunks, type HistorySource, type LineSink } from "../../history/reader.js";
import { HistoryFormatError, LineProblem } from "../../history/validate.js";
import { StreamValidator, type ProcessSlot, type StreamConfigValue, type StreamEvent } from "../../history/stream.js";
import type { EventType } from "../../history/types.js";
import { lit, litAt, uintAt, uintOut } from "../json-bytes.js";

/** A growable column of numbers. */
export class Column<T extends Int32Array | Float64Array> {
  data: T;
  length = 0;
  constructor(private readonly make: (n: number) => T, initial = 1024) {
    this.data = make(initial);
  }
  push(v: number): void {
    if (this.length === this.data.length) this.grow(this.length * 2);
    this.data[this.length++] = v;
  }
  /** Sets slot i, growing (new slots filled with `fill`). */
  set(i: number, v: number, fill: number): void {
    if (i >= this.data.length) this.grow(Math.max(i + 1, this.data.length * 2), fill);
    if (i >= this.length) {
      this.data.fill(fill, this.length, i);
      this.length = i + 1;
    }
    this.data[i] = v;
  }
  get(i: number, absent: number): number {
    return i < this.length ? this.data[i]! : absent;
  }
  private grow(n: number, fill = 0): void {
    const next = this.make(n);
    next.set(this.data.subarray(0, this.length));
    if (fill !== 0) next.fill(fill, this.length);
    this.data = next;
  }
}
const i32 = (n: number) => new Int32Array(n);
const f64 = (n: number) => new Float64Array(n);

// Publish states, a bit each (a message published twice may have several).
export const P_OK = 1;
export const P_FAIL = 2;
export const P_INFO = 4;
export const P_OPEN = 8;

export interface ConsumerColumns {
  process: string;
  op: Column<Int32Array>;
  ns: Column<Float64Array>;
  msg: Column<Int32Array>;
  seq: Column<Int32Array>;
}

export interface OpRecord {
  process: string;
  op: number;
  invokeNs: number;
  invokeValue: Record<string, unknown>;
  /** Null while open. */
  type: Exclude<EventType, "invoke"> | null;
  completeNs: number | null;
  completeValue: Record<string, unknown> | null;
}

export interface ClientEventRecord {
  op: number;
  timeNs: number;
  process: string;
  event: string;
  detail: unknown;
}

/** Client events listed in full; the count per event is always exact. */
export const CLIENT_EVENTS_LISTED_MAX = 1000;

/** Everything the stream judge needs, in columns. */
export interface StreamColumns {
  config: StreamConfigValue;
  events: number;
  lastNs: number;
  /** Message ids by interned id. */
  msgName: string[];
  /** Per message (interned id): its publishes. */
  pubState: Column<Int32Array>;
  pubFirstInvokeNs: Column<Float64Array>;
  pubFirstInvokeOp: Column<Int32Array>;
  pubCount: Column<Int32Array>;
  /** The first seq its publish was acknowledged with (0: none); more seqs in `pubMoreSeqs`. */
  pubSeq: Column<Int32Array>;
  pubMoreSeqs: Map<number, number[]>;
  /** Per acknowledged seq: the message (−1: none), the ok's time and its publish's invoke op. */
  seqMsg: Column<Int32Array>;
  seqOkNs: Column<Float64Array>;
  seqOp: Column<Int32Array>;
  /** Seqs acknowledged to two publishes (a broker bug in itself: reported as unexpected). */
  seqClashes: Array<{ seq: number; ops: number[] }>;
  consumers: ConsumerColumns[];
  faults: OpRecord[];
  drains: OpRecord[];
  clientEvents: ClientEventRecord[];
  clientEventCounts: Record<string, number>;
  publishCounts: { invoke: number; ok: number; fail: number; info: number; open: number };
  /** Lines that took the slow path. */
  slowLines: number;
}

const Q = 0x22;
const BS = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const RBRACE = 0x7d;

const L_INDEX = lit('{"index":');
const L_TIME = lit(',"time_ns":');
const L_PROCESS = lit(',"process":"');
const L_TYPE = lit('","type":"');
const L_F = lit('","f":"');
const L_VALUE = lit('","value":{');

/** Whether the bytes at `at` spell `text` (ASCII). */
function eq(b: Buffer, at: number, text: string): boolean {
  for (let i = 0; i < text.length; i++) if (b[at + i] !== text.charCodeAt(i)) return false;
  return true;
}

/** The closing quote of a string starting at p if it has no escape and only printable ASCII; −1 otherwise. */
function strEndAt(b: Buffer, p: number, end: number): number {
  for (; p < end; p++) {
    const c = b[p]!;
    if (c === Q) return p;
    if (c === BS || c >= 0x80 || c < 0x20) return -1;
  }
  return -1;
}

const CANONICAL_INT = /^(0|[1-9][0-9]{0,14})$/;

/** Numeric message ids below this are looked up in a flat column, the rest in a map. */
const DENSE_MSG_MAX = 1 << 26;

/** What the reader keeps per process: the validator's slot, its open publish, its deliveries. */
interface Proc {
  name: string;
  bytes: Buffer;
  slot: ProcessSlot;
  openMsg: number;
  openOp: number;
  consumer: ConsumerColumns | null;
}

/** Processes matched by their bytes before a string is made; a history has a handful. */
const PROCS_SCANNED_MAX = 16;

export class StreamCollector implements LineSink {
  private readonly validator = new StreamValidator();
  private readonly splitter = new LineSplitter(this);
  private readonly msgByNumber = new Map<number, number>();
  /** Interned id + 1 of small numeric message ids (0: none yet). */
  private readonly msgByDense = new Column(i32);
  private readonly procs: Proc[] = [];
  private readonly procByName = new Map<string, Proc>();
  private readonly msgByString = new Map<string, number>();
  private readonly msgName: string[] = [];
  private readonly pubState = new Column(i32);
  private readonly pubFirstInvokeNs = new Column(f64);
  private readonly pubFirstInvokeOp = new Column(i32);
  private readonly pubCount = new Column(i32);
  private readonly pubSeq = new Column(i32);
  private readonly pubMoreSeqs = new Map<number, number[]>();
  private readonly seqMsg = new Column(i32);
  private readonly seqOkNs = new Column(f64);
  private readonly seqOp = new Column(i32);
  private readonly seqClashes: Array<{ seq: number; ops: number[] }> = [];
  private readonly consumers: ConsumerColumns[] = [];
  private readonly openOther = new Map<string, OpRecord>();
  private readonly faults: OpRecord[] = [];
  private readonly drains: OpRecord[] = [];
  private readonly clientEvents: ClientEventRecord[] = [];
  private readonly clientEventCounts: Record<string, number> = {};
  private readonly publishCounts = { invoke: 0, ok: 0, fail: 0, info: 0, open: 0 };
  private lastNs = 0;
  private slowLines = 0;


  push(chunk: Buffer | string): void {
    this.splitter.push(typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk);
  }

  finish(): StreamColumns {
    this.splitter.end();
    if (this.validator.lines === 0) throw new HistoryFormatError(1, "empty history: the first line must be the config");
    for (const p of this.procByName.values()) {
      if (p.openMsg < 0) continue;
      this.publishCounts.open++;
      this.pubState.data[p.openMsg]! |= P_OPEN;
    }
    return {
      config: this.validator.config!,
      events: this.validator.lines,
      lastNs: this.lastNs,
      msgName: this.msgName,
      pubState: this.pubState,
      pubFirstInvokeNs: this.pubFirstInvokeNs,
      pubFirstInvokeOp: this.pubFirstInvokeOp,
      pubCount: this.pubCount,
      pubSeq: this.pubSeq,
      pubMoreSeqs: this.pubMoreSeqs,
      seqMsg: this.seqMsg,
      seqOkNs: this.seqOkNs,
      seqOp: this.seqOp,
      seqClashes: this.seqClashes,
      consumers: this.consumers,
      faults: this.faults,
      drains: this.drains,
      clientEvents: this.clientEvents,
      clientEventCounts: this.clientEventCounts,
      publishCounts: this.publishCounts,
      slowLines: this.slowLines,
    };
  }

  line(bytes: Buffer, start: number, end: number, lineNo: number): void {
    if (end > start && bytes[end - 1] === 0x0d) end--;
    try {
      if (!this.fast(bytes, start, end)) this.slow(bytes, start, end);
    } catch (err) {
      if (err instanceof LineProblem) throw new HistoryFormatError(lineNo, err.message);
      throw err;
    }
  }

  // ---- the fast path ----

  private fast(b: Buffer, start: number, end: number): boolean {
    let p = litAt(b, start, end, L_INDEX);
    if (p < 0) return false;
    p = uintAt(b, p, end);
    const index = uintOut[0]!;
    if (p < 0 || index <= 0) return false;
    p = litAt(b, p, end, L_TIME);
    if (p < 0) return false;
    p = uintAt(b, p, end);
    const timeNs = uintOut[0]!;
    if (p < 0) return false;
    p = litAt(b, p, end, L_PROCESS);
    if (p < 0) return false;
    const procStart = p;
    const pe = strEndAt(b, p, end);
    if (pe <= p) return false;
    p = litAt(b, pe, end, L_TYPE);
    if (p < 0) return false;
    // type and f
    let te = strEndAt(b, p, end);
    if (te < 0) return false;
    let type: number; // 0 invoke, 1 ok
    if (te - p === 6 && eq(b, p, "invoke")) type = 0;
    else if (te - p === 2 && eq(b, p, "ok")) type = 1;
    else return false;
    p = litAt(b, te, end, L_F);
    if (p < 0) return false;
    te = strEndAt(b, p, end);
    if (te - p !== 7) return false;
    let f: number; // 0 publish, 1 deliver
    if (eq(b, p, "publish")) f = 0;
    else if (eq(b, p, "deliver")) f = 1;
    else return false;
    if (f === 1 && type !== 1) return false;
    p = litAt(b, te, end, L_VALUE);
    if (p < 0) return false;
    // The value: "stream":"S","msg":M for a publish invoke; "seq":N for its ok; "msg":M,"seq":N for a delivery.
    let msgNum = -1;
    let msgStr: string | null = null;
    let seq = -1;
    let haveStream = false;
    let haveMsg = false;
    for (let first = true; ; first = false) {
      if (p < end && b[p] === RBRACE) {
        if (first) return false;
        p++;
        break;
      }
      if (!first) {
        if (b[p] !== COMMA) return false;
        p++;
      }
      if (b[p] !== Q) return false;
      p++;
      const ke = strEndAt(b, p, end);
      if (ke < 0 || b[ke + 1] !== COLON) return false;
      const kLen = ke - p;
      const k = p;
      p = ke + 2;
      if (kLen === 3 && eq(b, k, "msg")) {
        if (haveMsg) return false;
        haveMsg = true;
        if (b[p] === Q) {
          const se = strEndAt(b, p + 1, end);
          if (se <= p + 1) return false;
          msgStr = b.toString("latin1", p + 1, se);
          p = se + 1;
        } else {
          p = uintAt(b, p, end);
          if (p < 0) return false;
          msgNum = uintOut[0]!;
        }
      } else if (kLen === 3 && eq(b, k, "seq")) {
        if (seq >= 0) return false;
        p = uintAt(b, p, end);
        if (p < 0 || uintOut[0]! < 1) return false;
        seq = uintOut[0]!;
      } else if (kLen === 6 && eq(b, k, "stream")) {
        if (haveStream || b[p] !== Q) return false;
        const se = strEndAt(b, p + 1, end);
        if (se <= p + 1) return false;
        p = se + 1;
        haveStream = true;
      } else return false;
    }
    if (p !== end - 1 || b[p] !== RBRACE) return false;
    // The shape each of the three lines must have; anything else is the validator's to name.
    if (f === 0 && type === 0 && !(haveStream && haveMsg && seq < 0)) return false;
    if (f === 0 && type === 1 && !(seq >= 1 && !haveMsg && !haveStream)) return false;
    if (f === 1 && !(haveMsg && seq >= 1 && !haveStream)) return false;
    const v = this.validator;
    v.checkIndex(index);
    v.checkTime(timeNs);
    const proc = this.procOfBytes(b, procStart, pe);
    if (f === 0) v.sequenceOn(proc.slot, index, type === 0 ? "invoke" : "ok", "publish", undefined);
    v.commit(index, timeNs);
    this.lastNs = timeNs;
    const msg = f === 0 && type === 1 ? -1 : msgStr !== null ? this.internString(msgStr) : this.internNumber(msgNum);
    if (f === 1) this.deliver(proc, index, timeNs, msg, seq);
    else if (type === 0) this.publishInvoke(proc, index, timeNs, msg);
    else this.publishDone(proc, "ok", timeNs, seq);
    return true;
  }

  // ---- the slow path ----

  private slow(b: Buffer, start: number, end: number): void {
    this.slowLines++;
    const text = b.toString("utf8", start, end);
    if (text.length === 0) throw new LineProblem("empty line");
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw new LineProblem(`bad JSON: ${(err as Error).message}`);
    }
    const ev = this.validator.accept(parsed);
    this.lastNs = ev.time_ns;
    this.apply(ev);
  }

  private apply(ev: StreamEvent): void {
    const v = ev.value;
    switch (ev.f) {
      case "config":
        return;
      case "publish":
        if (ev.type === "invoke") this.publishInvoke(this.procOf(ev.process), ev.index, ev.time_ns, this.internValue(v["msg"]));
        else this.publishDone(this.procOf(ev.process), ev.type, ev.time_ns, ev.type === "ok" ? (v["seq"] as number) : 0);
        return;
      case "deliver":
        this.deliver(this.procOf(ev.process), ev.index, ev.time_ns, this.internValue(v["msg"]), v["seq"] as number);
        return;
      case "client-event": {
        const event = v["event"] as string;
        this.clientEventCounts[event] = (this.clientEventCounts[event] ?? 0) + 1;
        if (this.clientEvents.length < CLIENT_EVENTS_LISTED_MAX) {
          this.clientEvents.push({ op: ev.index, timeNs: ev.time_ns, process: ev.process, event, detail: v["detail"] ?? null });
        }
        return;
      }
      case "drain":
      case "fault": {
        if (ev.type === "invoke") {
          const rec: OpRecord = { process: ev.process, op: ev.index, invokeNs: ev.time_ns, invokeValue: v, type: null, completeNs: null, completeValue: null };
          this.openOther.set(ev.process, rec);
          (ev.f === "drain" ? this.drains : this.faults).push(rec);
        } else {
          const rec = this.openOther.get(ev.process)!;
          this.openOther.delete(ev.process);
          rec.type = ev.type;
          rec.completeNs = ev.time_ns;
          rec.completeValue = v;
        }
        return;
      }
    }
  }

  // ---- columns ----

  private procOfBytes(b: Buffer, start: number, end: number): Proc {
    const len = end - start;
    const procs = this.procs;
    for (let i = 0; i < procs.length; i++) {
      const pb = procs[i]!.bytes;
      if (pb.length !== len) continue;
      let k = 0;
      while (k < len && pb[k] === b[start + k]) k++;
      if (k === len) return procs[i]!;
    }
    return this.procOf(b.toString("latin1", start, end));
  }

  private procOf(name: string): Proc {
    let p = this.procByName.get(name);
    if (p === undefined) {
      p = { name, bytes: Buffer.from(name, "utf8"), slot: this.validator.slot(name), openMsg: -1, openOp: -1, consumer: null };
      this.procByName.set(name, p);
      if (this.procs.length < PROCS_SCANNED_MAX) this.procs.push(p);
    }
    return p;
  }

  private internNumber(n: number): number {
    if (n < DENSE_MSG_MAX) {
      const known = this.msgByDense.get(n, 0);
      if (known !== 0) return known - 1;
      const id = this.msgName.length;
      this.msgByDense.set(n, id + 1, 0);
      this.msgName.push(String(n));
      return id;
    }
    let id = this.msgByNumber.get(n);
    if (id === undefined) {
      id = this.msgName.length;
      this.msgByNumber.set(n, id);
      this.msgName.push(String(n));
    }
    return id;
  }

  private internString(s: string): number {
    if (CANONICAL_INT.test(s)) return this.internNumber(Number(s));
    let id = this.msgByString.get(s);
    if (id === undefined) {
      id = this.msgName.length;
      this.msgByString.set(s, id);
      this.msgName.push(s);
    }
    return id;
  }

  /** Numbers and strings name the same id when they print alike (the history format's rule). */
  private internValue(v: unknown): number {
    if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return this.internNumber(v);
    return this.internString(String(v));
  }

  private publishInvoke(proc: Proc, op: number, ns: number, msg: number): void {
    this.publishCounts.invoke++;
    proc.openMsg = msg;
    proc.openOp = op;
    const n = this.pubCount.get(msg, 0);
    if (n === 0) {
      this.pubFirstInvokeNs.set(msg, ns, 0);
      this.pubFirstInvokeOp.set(msg, op, -1);
      this.pubState.set(msg, 0, 0);
      this.pubSeq.set(msg, 0, 0);
    }
    this.pubCount.set(msg, n + 1, 0);
  }

  private publishDone(proc: Proc, type: Exclude<EventType, "invoke">, ns: number, seq: number): void {
    const msg = proc.openMsg;
    const op = proc.openOp;
    proc.openMsg = -1;
    if (type === "ok") {
      this.publishCounts.ok++;
      this.pubState.data[msg]! |= P_OK;
      const had = this.pubSeq.data[msg]!;
      if (had === 0) this.pubSeq.data[msg] = seq;
      else if (had !== seq) {
        const more = this.pubMoreSeqs.get(msg) ?? [];
        if (!more.includes(seq)) more.push(seq);
        this.pubMoreSeqs.set(msg, more);
      }
      const other = this.seqMsg.get(seq, -1);
      if (other === -1) {
        this.seqMsg.set(seq, msg, -1);
        this.seqOkNs.set(seq, ns, 0);
        this.seqOp.set(seq, op, -1);
      } else if (other !== msg || this.seqOp.data[seq] !== op) {
        this.seqClashes.push({ seq, ops: [this.seqOp.data[seq]!, op] });
      }
    } else if (type === "fail") {
      this.publishCounts.fail++;
      this.pubState.data[msg]! |= P_FAIL;
    } else {
      this.publishCounts.info++;
      this.pubState.data[msg]! |= P_INFO;
    }
  }

  private deliver(proc: Proc, op: number, ns: number, msg: number, seq: number): void {
    let c = proc.consumer;
    if (c === null) {
      c = { process: proc.name, op: new Column(i32), ns: new Column(f64), msg: new Column(i32), seq: new Column(i32) };
      proc.consumer = c;
      this.consumers.push(c);
    }
    c.op.push(op);
    c.ns.push(ns);
    c.msg.push(msg);
    c.seq.push(seq);
  }
}

/** Reads a stream history (file, text or chunks) into columns; a bad line rejects with HistoryFormatError. */
export async function readStreamHistory(source: HistorySource): Promise<StreamColumns> {
  const c = new StreamCollector();
  for await (const chunk of sourceChunks(source)) c.push(chunk);
  return c.finish();
}

/** The same, for text in memory. */
export function readStreamText(text: string): StreamColumns {
  const c = new StreamCollector();
  c.push(text);
  return c.finish();
}
