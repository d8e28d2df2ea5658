// Validation of history lines, one at a time, in order.
//
// Two kinds of rules: the shape of one line (fields, types, known `f` and `type`, the value each
// operation carries) and the sequence (index counts from 0, time never goes back, the config comes
// first, each process alternates invoke and completion, a completion matches its invoke). The
// checker can only be exact about a history that obeys both, so a violation is not judged: it is
// reported with the line number and the rule, and the verdict is "cannot judge".
//
// Rules are strict about what the checker uses and lenient about the rest: extra fields are
// allowed everywhere (forward compatibility), `delivery_count` and statuses are checked only when
// present, and the values of `fail` and `info` lines are free-form apart from a status's type.

import {
  FAULT_KINDS,
  OP_NAMES,
  type ConfigValue,
  type EventType,
  type FaultKind,
  type HistoryEvent,
  type OpName,
} from "./types.js";

/** A malformed history: the 1-based line number and what is wrong with it. */
export class HistoryFormatError extends Error {
  readonly line: number;
  readonly reason: string;
  constructor(line: number, reason: string) {
    super(`line ${line}: ${reason}`);
    this.name = "HistoryFormatError";
    this.line = line;
    this.reason = reason;
  }
}

/** Thrown by the validator with the reason only; the reader adds the line number. */
export class LineProblem extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "LineProblem";
  }
}

const TYPE_SET: ReadonlySet<string> = new Set(["invoke", "ok", "fail", "info"]);
const OP_SET: ReadonlySet<string> = new Set(OP_NAMES);
const FAULT_SET: ReadonlySet<string> = new Set(FAULT_KINDS);
const CHILD_KINDS: ReadonlySet<string> = new Set(["fanout", "delay", "replica", "remote"]);

export function problem(reason: string): never {
  throw new LineProblem(reason);
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

export function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (typeof v === "string") return `the string ${JSON.stringify(v.length > 40 ? v.slice(0, 40) + "…" : v)}`;
  if (typeof v === "number") return `the number ${v}`;
  return `a ${typeof v}`;
}

export function needString(obj: Record<string, unknown>, field: string, where: string): string {
  const v = obj[field];
  if (v === undefined) problem(`${where}: missing field ${field}`);
  if (typeof v !== "string" || v.length === 0) problem(`${where}: ${field} must be a nonempty string, not ${describe(v)}`);
  return v;
}

function needUint(obj: Record<string, unknown>, field: string, where: string): number {
  const v = obj[field];
  if (v === undefined) problem(`${where}: missing field ${field}`);
  if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) {
    problem(`${where}: ${field} must be a nonnegative integer, not ${describe(v)}`);
  }
  return v;
}

export function needMsg(obj: Record<string, unknown>, field: string, where: string): void {
  const v = obj[field];
  if (v === undefined) problem(`${where}: missing field ${field}`);
  if (!((typeof v === "string" && v.length > 0) || (typeof v === "number" && Number.isFinite(v)))) {
    problem(`${where}: ${field} must be a nonempty string or a number, not ${describe(v)}`);
  }
}

function optNumber(obj: Record<string, unknown>, field: string, where: string, min = -Infinity): void {
  const v = obj[field];
  if (v === undefined) return;
  if (typeof v !== "number" || !Number.isFinite(v) || v < min) {
    problem(`${where}: ${field} must be a number${min === 0 ? " ≥ 0" : ""}, not ${describe(v)}`);
  }
}

function needNonnegNumber(obj: Record<string, unknown>, field: string, where: string): number {
  const v = obj[field];
  if (v === undefined) problem(`${where}: missing field ${field}`);
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) problem(`${where}: ${field} must be a number ≥ 0, not ${describe(v)}`);
  return v;
}

function validateConfig(value: Record<string, unknown>): void {
  const where = "config";
  needNonnegNumber(value, "ack_flush_ms", where);
  needNonnegNumber(value, "ack_sync_ms", where);
  const vt = needNonnegNumber(value, "visibility_timeout_ms", where);
  optNumber(value, "copy_timeout_ms", where, 0);
  optNumber(value, "replication_lag_ms", where, 0);
  optNumber(value, "replication_rejoin_ms", where, 0);
  optNumber(value, "node_lease_ms", where, 0);
  if (vt === 0) problem("config: visibility_timeout_ms must be above 0");
  const topics = value["topics"];
  if (topics === undefined) problem("config: missing field topics");
  if (!isObject(topics)) problem(`config: topics must be an object, not ${describe(topics)}`);
  for (const [name, t] of Object.entries(topics)) {
    const w = `config: topic ${JSON.stringify(name)}`;
    if (!isObject(t)) problem(`${w} must be an object, not ${describe(t)}`);
    const partitions = needUint(t, "partitions", w);
    if (partitions === 0) problem(`${w}: partitions must be at least 1`);
    optNumber(t, "visibility_timeout_ms", w, 0);
    optNumber(t, "replication_factor", w, 1);
    const acks = t["acks"];
    if (acks !== undefined && acks !== "leader" && acks !== "quorum") problem(`${w}: acks must be "leader" or "quorum", not ${describe(acks)}`);
    validateDeadLetterConfig(name, t, topics, w);
  }
  const children = value["children"];
  if (children === undefined) return;
  if (!isObject(children)) problem(`config: children must be an object, not ${describe(children)}`);
  const parentOf = new Map<string, string>();
  for (const [parent, list] of Object.entries(children)) {
    const w = `config: children of ${JSON.stringify(parent)}`;
    if (!Array.isArray(list)) problem(`${w} must be an array, not ${describe(list)}`);
    for (const c of list) {
      if (!isObject(c)) problem(`${w}: each child must be an object, not ${describe(c)}`);
      const topic = needString(c, "topic", w);
      const kind = c["kind"];
      if (typeof kind !== "string" || !CHILD_KINDS.has(kind)) problem(`${w}: unknown child kind ${describe(kind)}`);
      optNumber(c, "delay_ms", w, 0);
      optNumber(c, "copy_timeout_ms", w, 0);
      if (kind === "delay" && c["delay_ms"] === undefined) problem(`${w}: delay child ${JSON.stringify(topic)} has no delay_ms`);
      const nodes = c["nodes"];
      if (nodes !== undefined && !(Array.isArray(nodes) && nodes.every((n) => typeof n === "string" && n.length > 0))) {
        problem(`${w}: nodes of ${JSON.stringify(topic)} must be an array of nonempty strings, not ${describe(nodes)}`);
      }
      if (nodes !== undefined && kind !== "remote") problem(`${w}: only a remote child lists nodes (of the other cluster), not ${JSON.stringify(topic)}`);
      if (topic === parent) problem(`${w}: a topic cannot be its own child`);
      const other = parentOf.get(topic);
      if (other !== undefined) problem(`${w}: ${JSON.stringify(topic)} already has the parent ${JSON.stringify(other)}`);
      parentOf.set(topic, parent);
    }
  }
}

/** The largest max_deliveries a topic takes (SPEC "Dead letters": 1..1000, or null). */
export const MAX_DELIVERIES_MAX = 1000;

/**
 * A topic's dead-letter fields (next wave): max_deliveries an integer 1..1000 or null,
 * dead_letter_topic a topic of this config other than itself, and required with max_deliveries.
 */
function validateDeadLetterConfig(name: string, t: Record<string, unknown>, topics: Record<string, unknown>, w: string): void {
  const max = t["max_deliveries"];
  const dlq = t["dead_letter_topic"];
  if (max !== undefined && max !== null && !(typeof max === "number" && Number.isSafeInteger(max) && max >= 1 && max <= MAX_DELIVERIES_MAX)) {
    problem(`${w}: max_deliveries must be an integer 1..${MAX_DELIVERIES_MAX} or null, not ${describe(max)}`);
  }
  if (dlq !== undefined && dlq !== null) {
    if (typeof dlq !== "string" || dlq.length === 0) problem(`${w}: dead_letter_topic must be a nonempty string or null, not ${describe(dlq)}`);
    if (dlq === name) problem(`${w}: dead_letter_topic cannot be the topic itself`);
    if (!Object.prototype.hasOwnProperty.call(topics, dlq)) problem(`${w}: dead_letter_topic ${JSON.stringify(dlq)} is not a topic of the config`);
  }
  if (typeof max === "number" && (dlq === undefined || dlq === null)) problem(`${w}: max_deliveries needs a dead_letter_topic`);
}

/** A consume ok's `origin` on a dead-letter topic (next wave): {topic, partition, offset, deliveries, produced_at?}. */
function validateOrigin(v: unknown, where: string): void {
  if (!isObject(v)) problem(`${where}: origin must be an object, not ${describe(v)}`);
  const w = `${where}: origin`;
  needString(v, "topic", w);
  needUint(v, "partition", w);
  needUint(v, "offset", w);
  needUint(v, "deliveries", w);
  optNumber(v, "produced_at", w, 0);
}

/** The handle of an ack, extend, nack or dead-letter invoke. */
function needHandle(value: Record<string, unknown>, where: string): void {
  const d = value["delivery"];
  if (d === undefined) problem(`${where}: missing field delivery`);
  if (!((typeof d === "string" && d.length > 0) || (typeof d === "number" && Number.isFinite(d)))) {
    problem(`${where}: delivery must be a nonempty string or a number, not ${describe(d)}`);
  }
}

function validateValue(type: EventType, f: OpName, value: Record<string, unknown>): void {
  const where = `${f} ${type}`;
  switch (f) {
    case "config":
      if (type !== "ok") problem(`config must be an ok line, not ${type}`);
      validateConfig(value);
      return;
    case "produce":
      if (type === "invoke") {
        needString(value, "topic", where);
        needMsg(value, "msg", where);
        const key = value["key"];
        if (key !== undefined && key !== null && typeof key !== "string") problem(`${where}: key must be a string or null, not ${describe(key)}`);
        // An idempotent produce (next wave): its producer id and sequence, both or neither.
        if (value["producer"] !== undefined || value["sequence"] !== undefined) {
          needString(value, "producer", where);
          needUint(value, "sequence", where);
        }
      } else if (type === "ok") {
        needUint(value, "partition", where);
        needUint(value, "offset", where);
        const status = value["status"];
        if (status !== undefined && status !== 202) problem(`${where}: status must be 202, not ${describe(status)}`);
        // The owner that stored it: optional, both or neither.
        if (value["node"] !== undefined || value["boot"] !== undefined) {
          needString(value, "node", where);
          needString(value, "boot", where);
        }
        const duplicate = value["duplicate"];
        if (duplicate !== undefined && typeof duplicate !== "boolean") problem(`${where}: duplicate must be true or false, not ${describe(duplicate)}`);
      } else {
        optNumber(value, "status", where);
      }
      return;
    case "consume":
      if (type === "invoke") {
        needString(value, "topic", where);
      } else if (type === "ok") {
        needString(value, "topic", where);
        if (value["msg"] === undefined) problem(`${where}: missing field msg (null when the topic was empty)`);
        if (value["msg"] === null) return;
        needMsg(value, "msg", where);
        needUint(value, "partition", where);
        needUint(value, "offset", where);
        needHandle(value, where);
        needString(value, "node", where);
        needString(value, "boot", where);
        const dc = value["delivery_count"];
        if (dc !== undefined && (typeof dc !== "number" || !Number.isSafeInteger(dc) || dc < 1)) {
          problem(`${where}: delivery_count must be an integer ≥ 1, not ${describe(dc)}`);
        }
        if (value["origin"] !== undefined) validateOrigin(value["origin"], where);
      } else {
        optNumber(value, "status", where);
      }
      return;
    case "ack":
    case "extend":
    case "nack":
    case "dead-letter":
      if (type === "invoke") {
        needString(value, "topic", where);
        needMsg(value, "msg", where);
        needHandle(value, where);
      } else if (type === "ok") {
        const status = value["status"];
        if (status !== undefined && status !== 204) problem(`${where}: status must be 204, not ${describe(status)} (410 is an info line)`);
      } else {
        optNumber(value, "status", where);
      }
      return;
    case "replay":
      if (type === "invoke") {
        needString(value, "topic", where);
        needUint(value, "partition", where);
        needUint(value, "offset", where);
      } else if (type === "ok") {
        const msgs = value["msgs"];
        if (msgs === undefined) problem(`${where}: missing field msgs`);
        if (!Array.isArray(msgs)) problem(`${where}: msgs must be an array, not ${describe(msgs)}`);
        for (let i = 0; i < msgs.length; i++) {
          const e: unknown = msgs[i];
          if (!Array.isArray(e) || e.length !== 2) problem(`${where}: msgs[${i}] must be [offset, msg], not ${describe(e)}`);
          const [o, m] = e as [unknown, unknown];
          if (typeof o !== "number" || !Number.isSafeInteger(o) || o < 0) problem(`${where}: msgs[${i}] offset must be a nonnegative integer, not ${describe(o)}`);
          if (!((typeof m === "string" && m.length > 0) || (typeof m === "number" && Number.isFinite(m)))) {
            problem(`${where}: msgs[${i}] msg must be a nonempty string or a number, not ${describe(m)}`);
          }
        }
      } else {
        optNumber(value, "status", where);
      }
      return;
    case "fault": {
      const kind = value["kind"];
      if (type === "invoke" || kind !== undefined) {
        if (kind === undefined) problem(`${where}: missing field kind`);
        if (typeof kind !== "string" || !FAULT_SET.has(kind)) problem(`${where}: unknown fault kind ${describe(kind)}`);
      }
      const node = value["node"];
      if (node !== undefined && (typeof node !== "string" || node.length === 0)) problem(`${where}: node must be a nonempty string, not ${describe(node)}`);
      const boot = value["boot"];
      if (type !== "invoke" && boot !== undefined && (typeof boot !== "string" || boot.length === 0)) {
        problem(`${where}: boot must be a nonempty string, not ${describe(boot)}`);
      }
      const p = value["partition"];
      if (p !== undefined && !(typeof p === "string" || (typeof p === "number" && Number.isSafeInteger(p) && p >= 0))) {
        problem(`${where}: partition must be a nonnegative integer or "TOPIC/P", not ${describe(p)}`);
      }
      const topic = value["topic"];
      if (topic !== undefined && typeof topic !== "string") problem(`${where}: topic must be a string, not ${describe(topic)}`);
      return;
    }
  }
}


/**
 * Validates lines in order. `accept` returns the line as a typed event or throws LineProblem.
 * It keeps one small record per process with an operation pending: memory is bounded by the
 * number of processes, not the history's length.
 */
export class HistoryValidator {
  private expectedIndex = 0;
  private lastTimeNs = 0;
  // Per process slot: the pending operation (null when none), the line that invoked it, and the
  // topic of a consume (its ok must name the same one) or the kind of a fault.
  private readonly slotOf = new Map<string, number>();
  private readonly slotName: string[] = [];
  private readonly pendingF: Array<OpName | null> = [];
  private readonly pendingLine: number[] = [];
  private readonly pendingDetail: Array<string | undefined> = [];
  config: ConfigValue | null = null;

  accept(raw: unknown): HistoryEvent {
    if (!isObject(raw)) problem(`a line must be a JSON object, not ${describe(raw)}`);
    const index = raw["index"];
    if (index === undefined) problem("missing field index");
    if (typeof index !== "number" || !Number.isSafeInteger(index)) problem(`index must be an integer, not ${describe(index)}`);
    this.checkIndex(index);
    const timeNs = raw["time_ns"];
    if (timeNs === undefined) problem("missing field time_ns");
    if (typeof timeNs !== "number" || !Number.isSafeInteger(timeNs) || timeNs < 0) {
      problem(`time_ns must be a nonnegative integer, not ${describe(timeNs)}`);
    }
    this.checkTime(timeNs);
    const proc = raw["process"];
    if (proc === undefined) problem("missing field process");
    if (typeof proc !== "string" || proc.length === 0) problem(`process must be a nonempty string, not ${describe(proc)}`);
    const type = raw["type"];
    if (type === undefined) problem("missing field type");
    if (typeof type !== "string" || !TYPE_SET.has(type)) problem(`unknown type ${describe(type)}`);
    const f = raw["f"];
    if (f === undefined) problem("missing field f");
    if (typeof f !== "string" || !OP_SET.has(f)) problem(`unknown f ${describe(f)}`);
    const value = raw["value"];
    if (value === undefined) problem("missing field value");
    if (!isObject(value)) problem(`value must be an object, not ${describe(value)}`);
    const t = type as EventType;
    const op = f as OpName;

    if (index === 0 && op !== "config") problem("the first line must be the config (f \"config\", type \"ok\")");
    if (index > 0 && op === "config") problem("a config line after the first line");
    validateValue(t, op, value);

    if (op === "config") {
      this.config = value as ConfigValue;
    } else {
      const detail = t === "invoke" ? (op === "consume" ? (value["topic"] as string) : op === "fault" ? (value["kind"] as string) : undefined) : undefined;
      const closing = op === "consume" && t === "ok" ? (value["topic"] as string) : op === "fault" ? (value["kind"] as string | undefined) : undefined;
      this.sequence(index, proc, t, op, detail ?? closing);
    }
    this.commit(index, timeNs);
    return raw as unknown as HistoryEvent;
  }

  /** The index rule, alone (the checker's fast reader calls the rules one by one). */
  checkIndex(index: number): void {
    if (index !== this.expectedIndex) {
      problem(`index is ${index}, expected ${this.expectedIndex} (indexes count the lines from 0)`);
    }
  }

  checkTime(timeNs: number): void {
    if (timeNs < this.lastTimeNs) problem(`time_ns ${timeNs} goes back (the previous line has ${this.lastTimeNs})`);
  }

  /**
   * The process rules for an operation line (not the config). `detail` is, for an invoke, the
   * topic of a consume or the kind of a fault; for an ok of a consume, its topic; for a fault
   * completion, its kind if it names one. Throws before changing any state.
   */
  sequence(index: number, proc: string, t: EventType, op: OpName, detail: string | undefined): void {
    this.sequenceSlot(this.processSlot(proc), index, t, op, detail);
  }

  /** A small integer for a process name, stable for the life of the validator. */
  processSlot(proc: string): number {
    let slot = this.slotOf.get(proc);
    if (slot === undefined) {
      slot = this.slotName.length;
      this.slotOf.set(proc, slot);
      this.slotName.push(proc);
      this.pendingF.push(null);
      this.pendingLine.push(0);
      this.pendingDetail.push(undefined);
    }
    return slot;
  }

  /** `sequence` for a process known by its slot. */
  sequenceSlot(slot: number, index: number, t: EventType, op: OpName, detail: string | undefined): void {
    const open = this.pendingF[slot]!;
    if (t === "invoke") {
      if (open !== null) {
        problem(
          `second invoke on process ${JSON.stringify(this.slotName[slot])}, whose ${open} invoked at line ${this.pendingLine[slot]} is still pending`,
        );
      }
      this.pendingF[slot] = op;
      this.pendingLine[slot] = index + 1;
      this.pendingDetail[slot] = detail;
      return;
    }
    const proc = this.slotName[slot]!;
    if (open === null) problem(`${t} on process ${JSON.stringify(proc)} without a pending invoke`);
    const line = this.pendingLine[slot];
    if (open !== op) problem(`${t} for ${op} on process ${JSON.stringify(proc)}, whose pending invoke (line ${line}) is ${open}`);
    const openDetail = this.pendingDetail[slot];
    if (op === "consume" && t === "ok" && detail !== openDetail) {
      problem(`consume ok names topic ${JSON.stringify(detail)}, its invoke (line ${line}) ${JSON.stringify(openDetail)}`);
    }
    if (op === "fault" && detail !== undefined && detail !== openDetail) {
      problem(`fault ${t} of kind ${JSON.stringify(detail)} closes a ${JSON.stringify(openDetail)} invoked at line ${line}`);
    }
    this.pendingF[slot] = null;
    this.pendingDetail[slot] = undefined;
  }

  commit(index: number, timeNs: number): void {
    this.expectedIndex = index + 1;
    this.lastTimeNs = timeNs;
  }

  /** Lines accepted so far. */
  get lines(): number {
    return this.expectedIndex;
  }
}

export type { FaultKind };
