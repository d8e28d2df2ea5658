// Histories of the stream model (SPEC.md "The stream model", seed 002): one consumer of one log
// stream, judged on whether every acknowledged publish reaches it, in stream order, once.
//
// The lines share the envelope of format v1 (index, time_ns, process, type, f, value) and the
// lease model's fault lines; the operations are their own: `publish` (invoke, then ok {seq},
// fail or info), `deliver` and `client-event` (single lines without an invoke: a pushed delivery
// and what the library told the application), and `drain` (invoke {until_seq}, then ok or info
// {seq}). A history is a stream history when its config line says `"model": "stream"`; the
// lease model's validator rejects these lines, so each model validates its own.
//
// This file holds the types, the validator (shape and sequence rules, the same rules as the lease
// model's where the two share them) and the recorder the stream drivers write with.

import { createWriteStream } from "node:fs";
import type { Writable } from "node:stream";
import { createRunClock, type RunClock } from "./clock.js";
import { FAULT_KINDS, type EventType, type FaultKind, type MsgId } from "./types.js";
import { describe, isObject, needMsg, needString, problem } from "./validate.js";

export type StreamOpName = "config" | "publish" | "deliver" | "client-event" | "drain" | "fault";
export const STREAM_OP_NAMES: readonly StreamOpName[] = ["config", "publish", "deliver", "client-event", "drain", "fault"];

/** The first line of a stream history. */
export interface StreamConfigValue {
  model: "stream";
  stream: string;
  /** The broker, e.g. "nats". */
  system: string;
  /** The library and its version, e.g. "nats@2.29.3". */
  client: string;
  /** The consumer API, e.g. "ordered". */
  api: string;
  /** Optional: the scenario the driver ran, and its written prediction. */
  scenario?: string;
  prediction?: string;
  [extra: string]: unknown;
}

export interface PublishInvoke {
  stream: string;
  msg: MsgId;
}
export interface PublishOk {
  seq: number;
}
export interface DeliverValue {
  msg: MsgId;
  seq: number;
}
export interface ClientEventValue {
  event: string;
  detail?: unknown;
}
export interface DrainInvoke {
  until_seq: number;
}
export interface DrainDone {
  seq: number;
}

/** One stream-history line as parsed. */
export interface StreamEvent {
  index: number;
  time_ns: number;
  process: string;
  type: EventType;
  f: StreamOpName;
  value: Record<string, unknown>;
}

/** One process's pending operation (f null when none), as the validator tracks it. */
export interface ProcessSlot {
  readonly name: string;
  f: StreamOpName | null;
  line: number;
  kind: string | undefined;
}

/** Operations that are a single line with no invoke. */
const SINGLE_LINE_OPS: ReadonlySet<string> = new Set(["deliver", "client-event"]);
const OP_SET: ReadonlySet<string> = new Set(STREAM_OP_NAMES);
const TYPE_SET: ReadonlySet<string> = new Set(["invoke", "ok", "fail", "info"]);
const FAULT_SET: ReadonlySet<string> = new Set(FAULT_KINDS);

/** Stream sequences start at 1 (NATS, Kafka offsets + 1): 0 is refused so a default never passes for one. */
function needSeq(obj: Record<string, unknown>, field: string, where: string): number {
  const v = obj[field];
  if (v === undefined) problem(`${where}: missing field ${field}`);
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 1) problem(`${where}: ${field} must be an integer ≥ 1, not ${describe(v)}`);
  return v;
}

function validateStreamValue(type: EventType, f: StreamOpName, value: Record<string, unknown>): void {
  const where = `${f} ${type}`;
  switch (f) {
    case "config":
      if (type !== "ok") problem(`config must be an ok line, not ${type}`);
      if (value["model"] !== "stream") problem(`config: model must be "stream", not ${describe(value["model"])}`);
      needString(value, "stream", "config");
      needString(value, "system", "config");
      needString(value, "client", "config");
      needString(value, "api", "config");
      return;
    case "publish":
      if (type === "invoke") {
        needString(value, "stream", where);
        needMsg(value, "msg", where);
      } else if (type === "ok") {
        needSeq(value, "seq", where);
      }
      return;
    case "deliver":
      if (type !== "ok") problem(`deliver is a single ok line, not ${type}`);
      needMsg(value, "msg", where);
      needSeq(value, "seq", where);
      return;
    case "client-event":
      if (type !== "info") problem(`client-event is a single info line, not ${type}`);
      needString(value, "event", where);
      return;
    case "drain":
      if (type === "invoke") {
        const u = value["until_seq"];
        if (u === undefined) problem(`${where}: missing field until_seq`);
        if (typeof u !== "number" || !Number.isSafeInteger(u) || u < 0) problem(`${where}: until_seq must be a nonnegative integer, not ${describe(u)}`);
      } else if (type === "fail") {
        problem("a drain ends ok (the seq arrived) or info (its deadline passed), never fail");
      } else {
        const s = value["seq"];
        if (s === undefined) problem(`${where}: missing field seq`);
        if (typeof s !== "number" || !Number.isSafeInteger(s) || s < 0) problem(`${where}: seq must be a nonnegative integer, not ${describe(s)}`);
      }
      return;
    case "fault": {
      const kind = value["kind"];
      if (type === "invoke" || kind !== undefined) {
        if (kind === undefined) problem(`${where}: missing field kind`);
        if (typeof kind !== "string" || !FAULT_SET.has(kind)) problem(`${where}: unknown fault kind ${describe(kind)}`);
      }
      return;
    }
  }
}

/**
 * Validates stream-history lines in order: the envelope (index from 0, time never back, config
 * first), each line's value, and, per process, invoke then exactly one completion (single-line
 * operations stand outside that rule: a consumer's deliveries go on while its drain is pending).
 */
export class StreamValidator {
  private expectedIndex = 0;
  private lastTimeNs = 0;
  private readonly slots = new Map<string, ProcessSlot>();
  config: StreamConfigValue | null = null;

  accept(raw: unknown): StreamEvent {
    if (!isObject(raw)) problem(`a line must be a JSON object, not ${describe(raw)}`);
    const index = raw["index"];
    if (index === undefined) problem("missing field index");
    if (typeof index !== "number" || !Number.isSafeInteger(index)) problem(`index must be an integer, not ${describe(index)}`);
    this.checkIndex(index);
    const timeNs = raw["time_ns"];
    if (timeNs === undefined) problem("missing field time_ns");
    if (typeof timeNs !== "number" || !Number.isSafeInteger(timeNs) || timeNs < 0) problem(`time_ns must be a nonnegative integer, not ${describe(timeNs)}`);
    this.checkTime(timeNs);
    const proc = raw["process"];
    if (proc === undefined) problem("missing field process");
    if (typeof proc !== "string" || proc.length === 0) problem(`process must be a nonempty string, not ${describe(proc)}`);
    const type = raw["type"];
    if (type === undefined) problem("missing field type");
    if (typeof type !== "string" || !TYPE_SET.has(type)) problem(`unknown type ${describe(type)}`);
    const f = raw["f"];
    if (f === undefined) problem("missing field f");
    if (typeof f !== "string" || !OP_SET.has(f)) problem(`unknown f ${describe(f)} (a stream history has config, publish, deliver, client-event, drain and fault)`);
    const value = raw["value"];
    if (value === undefined) problem("missing field value");
    if (!isObject(value)) problem(`value must be an object, not ${describe(value)}`);
    const t = type as EventType;
    const op = f as StreamOpName;
    if (index === 0 && op !== "config") problem("the first line must be the config (f \"config\", type \"ok\")");
    if (index > 0 && op === "config") problem("a config line after the first line");
    validateStreamValue(t, op, value);
    if (op === "config") this.config = value as StreamConfigValue;
    else this.sequence(index, proc, t, op, op === "fault" ? (value["kind"] as string | undefined) : undefined);
    this.commit(index, timeNs);
    return raw as unknown as StreamEvent;
  }

  checkIndex(index: number): void {
    if (index !== this.expectedIndex) problem(`index is ${index}, expected ${this.expectedIndex} (indexes count the lines from 0)`);
  }

  checkTime(timeNs: number): void {
    if (timeNs < this.lastTimeNs) problem(`time_ns ${timeNs} goes back (the previous line has ${this.lastTimeNs})`);
  }

  /** The per-process rules; throws before changing state. */
  sequence(index: number, proc: string, t: EventType, op: StreamOpName, kind: string | undefined): void {
    if (SINGLE_LINE_OPS.has(op)) return;
    this.sequenceOn(this.slot(proc), index, t, op, kind);
  }

  /** A process's state, for callers that look it up once and keep it (the fast reader). */
  slot(proc: string): ProcessSlot {
    let s = this.slots.get(proc);
    if (s === undefined) {
      s = { name: proc, f: null, line: 0, kind: undefined };
      this.slots.set(proc, s);
    }
    return s;
  }

  /** `sequence` for an operation that takes an invoke (not deliver or client-event). */
  sequenceOn(s: ProcessSlot, index: number, t: EventType, op: StreamOpName, kind: string | undefined): void {
    const proc = s.name;
    if (t === "invoke") {
      if (s.f !== null) problem(`second invoke on process ${JSON.stringify(proc)}, whose ${s.f} invoked at line ${s.line} is still pending`);
      s.f = op;
      s.line = index + 1;
      s.kind = kind;
      return;
    }
    if (s.f === null) problem(`${t} on process ${JSON.stringify(proc)} without a pending invoke`);
    if (s.f !== op) problem(`${t} for ${op} on process ${JSON.stringify(proc)}, whose pending invoke (line ${s.line}) is ${s.f}`);
    if (op === "fault" && kind !== undefined && kind !== s.kind) {
      problem(`fault ${t} of kind ${JSON.stringify(kind)} closes a ${JSON.stringify(s.kind)} invoked at line ${s.line}`);
    }
    s.f = null;
    s.kind = undefined;
  }

  commit(index: number, timeNs: number): void {
    this.expectedIndex = index + 1;
    this.lastTimeNs = timeNs;
  }

  get lines(): number {
    return this.expectedIndex;
  }
}

/** Whether a parsed first line is a stream history's config. */
export function isStreamConfigLine(first: unknown): boolean {
  return isObject(first) && first["f"] === "config" && isObject(first["value"]) && first["value"]["model"] === "stream";
}

export interface StreamWriterOptions {
  clock?: RunClock;
  /** Bytes gathered before one write to the stream. */
  chunkBytes?: number;
}

/**
 * The stream drivers' recorder: the same line layout as HistoryWriter (the fast scanners match it
 * literally), with the stream operations. Lines queue in memory and go out in chunks; a driver
 * records a few thousand lines a second, far below what a file takes, so there is no back-pressure
 * beyond the stream's own buffer.
 */
export class StreamHistoryWriter {
  private readonly out: Writable;
  private readonly clock: RunClock;
  private readonly chunkBytes: number;
  private parts: string[] = [];
  private partsBytes = 0;
  private nextIndex = 0;
  private lastTimeNs = 0;
  private readonly pending = new Map<string, StreamOpName>();
  private error: Error | null = null;
  private closed = false;

  static open(path: string, config: StreamConfigValue, options: StreamWriterOptions = {}): StreamHistoryWriter {
    return new StreamHistoryWriter(createWriteStream(path, { flags: "w" }), config, options);
  }

  constructor(out: Writable, config: StreamConfigValue, options: StreamWriterOptions = {}) {
    this.out = out;
    this.clock = options.clock ?? createRunClock();
    this.chunkBytes = options.chunkBytes ?? 64 * 1024;
    out.on("error", (e: Error) => (this.error ??= e));
    this.append("driver", "ok", "config", config);
  }

  /** Nanoseconds of the run clock now (what the next line would carry at the earliest). */
  nowNs(): number {
    return Math.max(this.clock.nowNs(), this.lastTimeNs);
  }

  get events(): number {
    return this.nextIndex;
  }

  invoke(process: string, f: "publish" | "drain" | "fault", value: object): number {
    const open = this.pending.get(process);
    if (open !== undefined) throw new Error(`stream history: process ${JSON.stringify(process)} invoked ${f} with ${open} still pending`);
    this.pending.set(process, f);
    return this.append(process, "invoke", f, value);
  }

  complete(process: string, type: "ok" | "fail" | "info", value: object): number {
    const f = this.pending.get(process);
    if (f === undefined) throw new Error(`stream history: process ${JSON.stringify(process)} completed with nothing pending`);
    this.pending.delete(process);
    return this.append(process, type, f, value);
  }

  deliver(process: string, msg: MsgId, seq: number): number {
    return this.append(process, "ok", "deliver", { msg, seq });
  }

  clientEvent(process: string, event: string, detail?: unknown): number {
    return this.append(process, "info", "client-event", detail === undefined ? { event } : { event, detail });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.flush();
    await new Promise<void>((resolve, reject) => {
      if (this.error) return reject(this.error);
      this.out.once("error", reject);
      this.out.end(() => resolve());
    });
  }

  private append(process: string, type: EventType, f: StreamOpName, value: object): number {
    if (this.error) throw this.error;
    if (this.closed) throw new Error("stream history: recording after close");
    const timeNs = this.nowNs();
    this.lastTimeNs = timeNs;
    const index = this.nextIndex++;
    const line = `{"index":${index},"time_ns":${timeNs},"process":${JSON.stringify(process)},"type":"${type}","f":"${f}","value":${JSON.stringify(value)}}\n`;
    this.parts.push(line);
    this.partsBytes += line.length;
    if (this.partsBytes >= this.chunkBytes) this.flush();
    return index;
  }

  private flush(): void {
    if (this.parts.length === 0) return;
    this.out.write(this.parts.join(""));
    this.parts = [];
    this.partsBytes = 0;
  }
}

export type { FaultKind };
