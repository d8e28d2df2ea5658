// The checker's fast reader: history bytes straight into the Collector's columns.
//
// JSON.parse plus object validation costs about 2 µs a line, too slow for a million-line history
// checked in seconds. This scanner reads the common lines (invokes and completions of produce,
// consume, ack, extend and nack) byte by byte, without building objects or strings: message ids,
// topics, handles and process names are hashed as they are scanned and looked up in byte-keyed
// tables that map to the Collector's interned ids.
//
// It is deliberately conservative: any line it does not fully understand (the config, replays,
// faults, escapes or non-ASCII bytes in a string the checker uses, floats, a duplicate key, a field
// in an unusual place) goes to the slow path, the reader's JSON.parse and HistoryValidator, which
// accepts or rejects it with the usual message. Lines the scanner accepts are lines the validator
// accepts, with the same effect; the sequence rules (index, time, invoke/completion per process)
// are the validator's own methods, so both paths keep one state. A property test compares the two.

import { Collector, HASH_MASK, F_ACK, F_CONSUME, F_EXTEND, F_NACK, F_PRODUCE, F_REPLAY, fnv1a, type Interner, O_FAIL, O_INFO, O_OK } from "./collect.js";
import { open, type FileHandle } from "node:fs/promises";
import { acceptLine, HistoryReadError, LINE_BYTES_MAX, LineSplitter, sourceChunks, type HistorySource, type LineSink } from "../history/reader.js";
import { HistoryFormatError, HistoryValidator, LineProblem } from "../history/validate.js";
import type { EventType, OpName } from "../history/types.js";
import { lit, lit32, lit32At, litAt, uintAt, uintOut } from "./json-bytes.js";

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const LBRACE = 0x7b;
const RBRACE = 0x7d;
const LBRACKET = 0x5b;
const RBRACKET = 0x5d;
const COLON = 0x3a;
const COMMA = 0x2c;

/** The file is read through two buffers of this size, reused. */
const SCAN_BUFFER_BYTES = 1024 * 1024;

const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;

// Value kinds of a scanned field.
const V_ABSENT = 0;
const V_STRING = 1;
const V_INT = 2;
const V_NULL = 3;

// Value fields the scanner understands.
const K_TOPIC = 0;
const K_MSG = 1;
const K_KEY = 2;
const K_PARTITION = 3;
const K_OFFSET = 4;
const K_STATUS = 5;
const K_DELIVERY = 6;
const K_DELIVERY_COUNT = 7;
const K_NODE = 8;
const K_BOOT = 9;
/** A replay's answer: parsed into `replayOffsets`, its kind V_ARRAY. */
const K_MSGS = 10;
/** An idempotent produce's producer id and sequence (next wave). */
const K_PRODUCER = 11;
const K_SEQUENCE = 12;
const N_KEYS = 13;
/** Keys of next-wave fields the scanner leaves to the slow path: a produce ok's duplicate, a dead letter's origin. */
const K_SLOW = -2;
const V_ARRAY = 4;

const T_INVOKE = 0;
const T_OK = 1;
const T_FAIL = 2;
const T_INFO = 3;
const TYPE_NAMES: readonly EventType[] = ["invoke", "ok", "fail", "info"];
const F_NAME_OF: Record<number, OpName> = {
  [F_PRODUCE]: "produce",
  [F_CONSUME]: "consume",
  [F_ACK]: "ack",
  [F_EXTEND]: "extend",
  [F_NACK]: "nack",
  [F_REPLAY]: "replay",
};

// The writer's line layout, matched literally first: most lines of most histories take it.
const L_INDEX = lit32('{"index":');
const L_TIME = lit32(',"time_ns":');
const L_PROCESS = lit32(',"process":"');
const L_TYPE = lit32('","type":"');
const L_INVOKE = lit32('invoke","f":"');
const L_OK = lit32('ok","f":"');
const L_FAIL = lit32('fail","f":"');
const L_INFO = lit32('info","f":"');
const L_VALUE = lit32('","value":{');
const L_PRODUCE = lit("produce");
const L_CONSUME = lit("consume");
const L_EXTEND = lit("extend");
const L_REPLAY = lit("replay");
const L_NACK = lit("nack");

/** Whether the n bytes at p are the literal `l`. */
function isLit(b: Buffer, p: number, n: number, l: Uint8Array): boolean {
  if (n !== l.length) return false;
  for (let i = 0; i < n; i++) if (b[p + i] !== l[i]) return false;
  return true;
}

/** The FNV-1a hash of the last string strAt scanned (a scalar out-parameter: no allocation). */
let scratchHash = 0;

/** The closing quote of a string whose bytes start at p, if it has no escape, control or non-ASCII byte (its hash in scratchHash); -1 otherwise. */
function strAt(b: Buffer, p: number, end: number): number {
  let h = FNV_OFFSET;
  for (; p < end; p++) {
    const c = b[p]!;
    if (c === QUOTE) {
      scratchHash = h & HASH_MASK;
      return p;
    }
    if (c === BACKSLASH || c < 0x20 || c >= 0x80) return -1;
    h = Math.imul(h ^ c, FNV_PRIME);
  }
  return -1;
}

function isWs(c: number): boolean {
  return c === 0x20 || c === 0x09 || c === 0x0d || c === 0x0a;
}

function bytesAre(b: Buffer, start: number, len: number, text: string): boolean {
  if (len !== text.length) return false;
  for (let i = 0; i < len; i++) if (b[start + i] !== text.charCodeAt(i)) return false;
  return true;
}

// The value keys of the writer's lines, each with its closing quote and colon.
const KL_TOPIC = lit('topic":');
const KL_MSG = lit('msg":');
const KL_MSGS = lit('msgs":');
const KL_PARTITION = lit('partition":');
const KL_PRODUCER = lit('producer":');
const KL_OFFSET = lit('offset":');
const KL_STATUS = lit('status":');
const KL_SEQUENCE = lit('sequence":');
const KL_DELIVERY = lit('delivery":');
const KL_DELIVERY_COUNT = lit('delivery_count":');
const KL_NODE = lit('node":');
const KL_BOOT = lit('boot":');
const KL_KEY = lit('key":');

/** The field tightKey matched. */
let tightKeyFound = -1;

/**
 * A value key the scanner reads (its bytes from ks, then `":`), matched by its first bytes: past
 * the colon, the field in tightKeyFound; -1 for any other key (scanned the general way then).
 */
function tightKey(b: Buffer, ks: number, end: number): number {
  let k = -1;
  let l: Uint8Array;
  switch (b[ks]) {
    case 0x74: // t
      k = K_TOPIC;
      l = KL_TOPIC;
      break;
    case 0x6d: // m
      if (b[ks + 3] === 0x73) {
        k = K_MSGS;
        l = KL_MSGS;
      } else {
        k = K_MSG;
        l = KL_MSG;
      }
      break;
    case 0x70: // p
      if (b[ks + 1] === 0x61) {
        k = K_PARTITION;
        l = KL_PARTITION;
      } else {
        k = K_PRODUCER;
        l = KL_PRODUCER;
      }
      break;
    case 0x6f: // o
      k = K_OFFSET;
      l = KL_OFFSET;
      break;
    case 0x73: // s
      if (b[ks + 1] === 0x74) {
        k = K_STATUS;
        l = KL_STATUS;
      } else {
        k = K_SEQUENCE;
        l = KL_SEQUENCE;
      }
      break;
    case 0x64: // d
      if (b[ks + 8] === 0x5f) {
        k = K_DELIVERY_COUNT;
        l = KL_DELIVERY_COUNT;
      } else {
        k = K_DELIVERY;
        l = KL_DELIVERY;
      }
      break;
    case 0x6e: // n
      k = K_NODE;
      l = KL_NODE;
      break;
    case 0x62: // b
      k = K_BOOT;
      l = KL_BOOT;
      break;
    case 0x6b: // k
      k = K_KEY;
      l = KL_KEY;
      break;
    default:
      return -1;
  }
  const p = litAt(b, ks, end, l);
  if (p >= 0) tightKeyFound = k;
  return p;
}

export class FastScanner implements LineSink {
  private readonly collector: Collector;
  private readonly validator: HistoryValidator;
  private readonly processes: Interner;
  private readonly topics: Interner;
  private readonly msgs: Interner;
  private readonly deliveries: Interner;
  private readonly nodes: Interner;
  private readonly boots: Interner;
  private readonly producers: Interner;
  /** The validator's slot of each process id (-1: not asked yet). */
  private slotOfProcess = new Int32Array(64).fill(-1);
  /** Lines that took the slow path, for the benchmark's curiosity. */
  slowLines = 0;

  // The last scanned string or number: its bytes and hash (scalar scratch, no allocation).
  private sStart = 0;
  private sEnd = 0;
  private sHash = 0;
  private num = 0;

  // Top-level fields of the current line.
  private index = -1;
  private timeNs = -1;
  private procStart = 0;
  private procEnd = 0;
  private procHash = 0;
  private type = -1;
  private f = -1;

  // Value fields of the current line.
  /** Bit k set: value field k was given (its kind in kind[k]). */
  private present = 0;
  private readonly kind = new Int8Array(N_KEYS);
  private readonly vStart = new Int32Array(N_KEYS);
  private readonly vEnd = new Int32Array(N_KEYS);
  private readonly vHash = new Int32Array(N_KEYS);
  private readonly vNum = new Float64Array(N_KEYS);
  /** The offsets of a replay's answer. */
  private replayOffsets: number[] = [];
  /** Their messages (interned ids, -1 when unknown so far). */
  private replayMsgs: number[] = [];

  constructor(collector: Collector, validator: HistoryValidator) {
    this.collector = collector;
    this.validator = validator;
    this.processes = collector.processes;
    this.topics = collector.topics;
    this.msgs = collector.msgs;
    this.deliveries = collector.deliveries;
    this.nodes = collector.nodes;
    this.boots = collector.boots;
    this.producers = collector.producers;
  }

  /** One line, without its newline. Throws HistoryFormatError for a malformed line. */
  line(b: Buffer, start: number, end: number, lineNo: number): void {
    if (end - start > LINE_BYTES_MAX) throw new HistoryFormatError(lineNo, `line longer than ${LINE_BYTES_MAX} bytes`);
    // CR before the newline is whitespace to the scanner; the slow path drops it itself.
    if (this.fast(b, start, end, lineNo)) return;
    this.slowLines++;
    this.collector.add(acceptLine(this.validator, b.toString("utf8", start, end), lineNo));
  }

  private ws(b: Buffer, p: number, end: number): number {
    while (p < end && isWs(b[p]!)) p++;
    return p;
  }

  /** A string without escapes, control or non-ASCII bytes: sets sStart/sEnd/sHash. -1 to bail. */
  private str(b: Buffer, p: number, end: number): number {
    if (b[p] !== QUOTE) return -1;
    let h = FNV_OFFSET;
    const s = ++p;
    while (p < end) {
      const c = b[p]!;
      if (c === QUOTE) {
        this.sStart = s;
        this.sEnd = p;
        this.sHash = h & HASH_MASK;
        return p + 1;
      }
      if (c === BACKSLASH || c < 0x20 || c >= 0x80) return -1;
      h = Math.imul(h ^ c, FNV_PRIME);
      p++;
    }
    return -1;
  }

  /** An object key: like str, without the hash (keys are matched, never interned). */
  private key(b: Buffer, p: number, end: number): number {
    if (b[p] !== QUOTE) return -1;
    const s = ++p;
    while (p < end) {
      const c = b[p]!;
      if (c === QUOTE) {
        this.sStart = s;
        this.sEnd = p;
        return p + 1;
      }
      if (c === BACKSLASH || c < 0x20 || c >= 0x80) return -1;
      p++;
    }
    return -1;
  }

  /** A nonnegative integer (uintAt's rules): sets num, sStart and sEnd. -1 to bail. */
  private int(b: Buffer, p: number, end: number): number {
    const e = uintAt(b, p, end);
    if (e < 0) return -1;
    this.num = uintOut[0]!;
    this.sStart = p;
    this.sEnd = e;
    // No hash: most numbers are never interned; an id given as a number is hashed when it is.
    this.sHash = 0;
    return e;
  }

  /** Skips any JSON value, checking its grammar. -1 on anything wrong or too deep. */
  private skip(b: Buffer, p: number, end: number, depth: number): number {
    if (p >= end || depth > 32) return -1;
    const c = b[p]!;
    if (c === QUOTE) {
      p++;
      while (p < end) {
        const d = b[p]!;
        if (d === QUOTE) return p + 1;
        if (d < 0x20) return -1;
        if (d === BACKSLASH) {
          const e = b[p + 1];
          if (e === 0x75) {
            for (let k = 2; k < 6; k++) {
              const x = b[p + k];
              if (x === undefined || !((x >= 0x30 && x <= 0x39) || (x >= 0x41 && x <= 0x46) || (x >= 0x61 && x <= 0x66))) return -1;
            }
            p += 6;
            continue;
          }
          if (e !== QUOTE && e !== BACKSLASH && e !== 0x2f && e !== 0x62 && e !== 0x66 && e !== 0x6e && e !== 0x72 && e !== 0x74) return -1;
          p += 2;
          continue;
        }
        p++;
      }
      return -1;
    }
    if (c === LBRACE || c === LBRACKET) {
      const close = c === LBRACE ? RBRACE : RBRACKET;
      p = this.ws(b, p + 1, end);
      if (b[p] === close) return p + 1;
      for (;;) {
        if (c === LBRACE) {
          if (b[p] !== QUOTE) return -1;
          p = this.skip(b, p, end, depth + 1);
          if (p < 0) return -1;
          p = this.ws(b, p, end);
          if (b[p] !== COLON) return -1;
          p = this.ws(b, p + 1, end);
        }
        p = this.skip(b, p, end, depth + 1);
        if (p < 0) return -1;
        p = this.ws(b, p, end);
        if (b[p] === COMMA) {
          p = this.ws(b, p + 1, end);
          continue;
        }
        if (b[p] === close) return p + 1;
        return -1;
      }
    }
    if (c === 0x74) return bytesAre(b, p, Math.min(4, end - p), "true") ? p + 4 : -1;
    if (c === 0x66) return bytesAre(b, p, Math.min(5, end - p), "false") ? p + 5 : -1;
    if (c === 0x6e) return bytesAre(b, p, Math.min(4, end - p), "null") ? p + 4 : -1;
    // A number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    if (c === 0x2d) p++;
    if (p >= end) return -1;
    if (b[p] === 0x30) p++;
    else if (b[p]! >= 0x31 && b[p]! <= 0x39) while (p < end && b[p]! >= 0x30 && b[p]! <= 0x39) p++;
    else return -1;
    if (b[p] === 0x2e) {
      p++;
      const s = p;
      while (p < end && b[p]! >= 0x30 && b[p]! <= 0x39) p++;
      if (p === s) return -1;
    }
    if (b[p] === 0x65 || b[p] === 0x45) {
      p++;
      if (b[p] === 0x2b || b[p] === 0x2d) p++;
      const s = p;
      while (p < end && b[p]! >= 0x30 && b[p]! <= 0x39) p++;
      if (p === s) return -1;
    }
    return p;
  }

  /** A replay's `[[offset, msg], ...]`, offsets into replayOffsets. -1 to bail. */
  private msgsArray(b: Buffer, p: number, end: number): number {
    const offsets: number[] = [];
    const msgs: number[] = [];
    p = this.ws(b, p + 1, end);
    if (b[p] === RBRACKET) {
      this.replayOffsets = offsets;
      this.replayMsgs = msgs;
      return p + 1;
    }
    for (;;) {
      if (b[p] !== LBRACKET) return -1;
      p = this.int(b, this.ws(b, p + 1, end), end);
      if (p < 0) return -1;
      offsets.push(this.num);
      p = this.ws(b, p, end);
      if (b[p] !== COMMA) return -1;
      p = this.ws(b, p + 1, end);
      if (b[p] === QUOTE) {
        p = this.str(b, p, end);
        if (p < 0 || this.sEnd === this.sStart) return -1;
        msgs.push(this.msgs.findBytes(b, this.sStart, this.sEnd, this.sHash));
      } else {
        p = this.int(b, p, end);
        if (p < 0) return -1;
        msgs.push(this.msgs.findBytes(b, this.sStart, this.sEnd, fnv1a(b, this.sStart, this.sEnd)));
      }
      p = this.ws(b, p, end);
      if (b[p] !== RBRACKET) return -1;
      p = this.ws(b, p + 1, end);
      if (b[p] === COMMA) {
        p = this.ws(b, p + 1, end);
        continue;
      }
      if (b[p] === RBRACKET) {
        this.replayOffsets = offsets;
        this.replayMsgs = msgs;
        return p + 1;
      }
      return -1;
    }
  }

  /** Which value field a key names, or -1. */
  private valueKey(b: Buffer, s: number, len: number): number {
    // Most keys differ in length or first byte: compare the rest only for a candidate.
    switch (len) {
      case 3:
        if (bytesAre(b, s, 3, "msg")) return K_MSG;
        if (bytesAre(b, s, 3, "key")) return K_KEY;
        return -1;
      case 4:
        if (bytesAre(b, s, 4, "node")) return K_NODE;
        if (bytesAre(b, s, 4, "boot")) return K_BOOT;
        if (bytesAre(b, s, 4, "msgs")) return K_MSGS;
        return -1;
      case 5:
        return bytesAre(b, s, 5, "topic") ? K_TOPIC : -1;
      case 6:
        if (bytesAre(b, s, 6, "offset")) return K_OFFSET;
        if (bytesAre(b, s, 6, "status")) return K_STATUS;
        if (bytesAre(b, s, 6, "origin")) return K_SLOW;
        return -1;
      case 8:
        if (bytesAre(b, s, 8, "delivery")) return K_DELIVERY;
        if (bytesAre(b, s, 8, "producer")) return K_PRODUCER;
        if (bytesAre(b, s, 8, "sequence")) return K_SEQUENCE;
        return -1;
      case 9:
        if (bytesAre(b, s, 9, "partition")) return K_PARTITION;
        if (bytesAre(b, s, 9, "duplicate")) return K_SLOW;
        return -1;
      case 14:
        return bytesAre(b, s, 14, "delivery_count") ? K_DELIVERY_COUNT : -1;
      default:
        return -1;
    }
  }

  /** The value object; fills the value fields. -1 to bail. */
  private value(b: Buffer, p: number, end: number): number {
    const kind = this.kind;
    this.present = 0;
    if (b[p] !== LBRACE) return -1;
    p = this.ws(b, p + 1, end);
    if (b[p] === RBRACE) return p + 1;
    for (;;) {
      p = this.key(b, p, end);
      if (p < 0) return -1;
      const k = this.valueKey(b, this.sStart, this.sEnd - this.sStart);
      if (k === K_SLOW) return -1;
      p = this.ws(b, p, end);
      if (b[p] !== COLON) return -1;
      p = this.ws(b, p + 1, end);
      if (k < 0) {
        p = this.skip(b, p, end, 1);
        if (p < 0) return -1;
      } else {
        if (this.present & (1 << k)) return -1; // a repeated key: JSON.parse keeps the last; let it decide
        this.present |= 1 << k;
        const c = b[p]!;
        if (c === QUOTE) {
          p = this.str(b, p, end);
          if (p < 0) return -1;
          kind[k] = V_STRING;
        } else if (c >= 0x30 && c <= 0x39) {
          p = this.int(b, p, end);
          if (p < 0) return -1;
          kind[k] = V_INT;
          this.vNum[k] = this.num;
        } else if (c === 0x6e && bytesAre(b, p, Math.min(4, end - p), "null")) {
          p += 4;
          kind[k] = V_NULL;
        } else if (c === LBRACKET && k === K_MSGS) {
          p = this.msgsArray(b, p, end);
          if (p < 0) return -1;
          kind[k] = V_ARRAY;
        } else {
          return -1;
        }
        this.vStart[k] = this.sStart;
        this.vEnd[k] = this.sEnd;
        this.vHash[k] = this.sHash;
      }
      p = this.ws(b, p, end);
      if (b[p] === COMMA) {
        p = this.ws(b, p + 1, end);
        continue;
      }
      if (b[p] === RBRACE) return p + 1;
      return -1;
    }
  }

  private typeCode(b: Buffer, s: number, n: number): number {
    return bytesAre(b, s, n, "invoke") ? T_INVOKE : bytesAre(b, s, n, "ok") ? T_OK : bytesAre(b, s, n, "fail") ? T_FAIL : bytesAre(b, s, n, "info") ? T_INFO : -2;
  }

  private fCode(b: Buffer, s: number, n: number): number {
    switch (n) {
      case 3:
        return bytesAre(b, s, 3, "ack") ? F_ACK : -2;
      case 4:
        return bytesAre(b, s, 4, "nack") ? F_NACK : -2;
      case 6:
        return bytesAre(b, s, 6, "extend") ? F_EXTEND : bytesAre(b, s, 6, "replay") ? F_REPLAY : -2;
      case 7:
        return bytesAre(b, s, 7, "produce") ? F_PRODUCE : bytesAre(b, s, 7, "consume") ? F_CONSUME : -2;
      default:
        return -2;
    }
  }

  /** The buffer `dv` views: lines of one chunk share one view. */
  private dvOf: Buffer | null = null;
  private dv: DataView = new DataView(new ArrayBuffer(8));

  private viewOf(b: Buffer): DataView {
    if (b !== this.dvOf) {
      this.dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
      this.dvOf = b;
    }
    return this.dv;
  }

  /**
   * The writer's exact layout, with no whitespace: false when the line has another layout (then
   * the general scan runs). One pass with the keys and names matched as literals in place.
   */
  private template(b: Buffer, start: number, end: number): boolean {
    const dv = this.viewOf(b);
    let p = lit32At(dv, b, start, end, L_INDEX);
    if (p < 0) return false;
    p = uintAt(b, p, end);
    if (p < 0) return false;
    this.index = uintOut[0]!;
    p = lit32At(dv, b, p, end, L_TIME);
    if (p < 0) return false;
    p = uintAt(b, p, end);
    if (p < 0) return false;
    this.timeNs = uintOut[0]!;
    p = lit32At(dv, b, p, end, L_PROCESS);
    if (p < 0) return false;
    const pe = strAt(b, p, end);
    if (pe <= p) return false;
    this.procStart = p;
    this.procEnd = pe;
    this.procHash = scratchHash;
    p = lit32At(dv, b, pe, end, L_TYPE);
    if (p < 0) return false;
    const c = b[p];
    if (c === 0x6f) {
      this.type = T_OK;
      p = lit32At(dv, b, p, end, L_OK);
    } else if (c === 0x69) {
      this.type = b[p + 2] === 0x76 ? T_INVOKE : T_INFO;
      p = lit32At(dv, b, p, end, this.type === T_INVOKE ? L_INVOKE : L_INFO);
    } else if (c === 0x66) {
      this.type = T_FAIL;
      p = lit32At(dv, b, p, end, L_FAIL);
    } else return false;
    if (p < 0) return false;
    const fe = strAt(b, p, end);
    if (fe < 0) return false;
    const n = fe - p;
    const f0 = b[p];
    if (n === 7) this.f = f0 === 0x70 && isLit(b, p, 7, L_PRODUCE) ? F_PRODUCE : f0 === 0x63 && isLit(b, p, 7, L_CONSUME) ? F_CONSUME : -1;
    else if (n === 3) this.f = f0 === 0x61 && b[p + 1] === 0x63 && b[p + 2] === 0x6b ? F_ACK : -1;
    else if (n === 6) this.f = f0 === 0x65 && isLit(b, p, 6, L_EXTEND) ? F_EXTEND : f0 === 0x72 && isLit(b, p, 6, L_REPLAY) ? F_REPLAY : -1;
    else if (n === 4) this.f = isLit(b, p, 4, L_NACK) ? F_NACK : -1;
    else return false;
    if (this.f < 0) return false;
    p = lit32At(dv, b, fe, end, L_VALUE);
    if (p < 0) return false;
    p = this.valueTight(b, p, end);
    return p >= 0 && p + 1 === end && b[p] === RBRACE;
  }

  /** The value object's members (after its `{`) in the writer's layout, no whitespace: past its `}`, or -1. */
  private valueTight(b: Buffer, p: number, end: number): number {
    this.present = 0;
    if (b[p] === RBRACE) return p + 1;
    for (;;) {
      if (b[p] !== QUOTE) return -1;
      const ks = p + 1;
      // The key with its closing quote and colon, matched as a literal; any other key is scanned.
      let k = -1;
      const q = tightKey(b, ks, end);
      if (q >= 0) {
        k = tightKeyFound;
        p = q;
      } else {
        const ke = strAt(b, ks, end);
        if (ke < 0 || b[ke + 1] !== COLON) return -1;
        k = this.valueKey(b, ks, ke - ks);
        p = ke + 2;
      }
      if (k < 0) {
        if (k === K_SLOW) return -1;
        p = this.skip(b, p, end, 1);
        if (p < 0) return -1;
      } else {
        const bit = 1 << k;
        if (this.present & bit) return -1; // a repeated key: JSON.parse keeps the last; let it decide
        this.present |= bit;
        const c = b[p]!;
        if (c === QUOTE) {
          const se = strAt(b, p + 1, end);
          if (se < 0) return -1;
          this.kind[k] = V_STRING;
          this.vStart[k] = p + 1;
          this.vEnd[k] = se;
          this.vHash[k] = scratchHash;
          p = se + 1;
        } else if (c >= 0x30 && c <= 0x39) {
          const ne = uintAt(b, p, end);
          if (ne < 0) return -1;
          this.kind[k] = V_INT;
          this.vStart[k] = p;
          this.vEnd[k] = ne;
          this.vNum[k] = uintOut[0]!;
          p = ne;
        } else if (c === 0x6e && b[p + 1] === 0x75 && b[p + 2] === 0x6c && b[p + 3] === 0x6c) {
          this.kind[k] = V_NULL;
          p += 4;
        } else if (c === LBRACKET && k === K_MSGS) {
          p = this.msgsArray(b, p, end);
          if (p < 0) return -1;
          this.kind[k] = V_ARRAY;
        } else {
          return -1;
        }
      }
      const d = b[p];
      if (d === COMMA) p++;
      else if (d === RBRACE) return p + 1;
      else return -1;
    }
  }

  /** True when the line was understood and recorded; false sends it to the slow path. */
  private fast(b: Buffer, start: number, end: number, lineNo: number): boolean {
    if (this.template(b, start, end)) return this.index > 0 && this.record(b, lineNo);
    let p = this.ws(b, start, end);
    if (b[p] !== LBRACE) return false;
    this.index = -1;
    this.timeNs = -1;
    this.type = -1;
    this.f = -1;
    let haveProc = false;
    let haveValue = false;
    p = this.ws(b, p + 1, end);
    for (;;) {
      p = this.key(b, p, end);
      if (p < 0) return false;
      const ks = this.sStart;
      const kl = this.sEnd - ks;
      p = this.ws(b, p, end);
      if (b[p] !== COLON) return false;
      p = this.ws(b, p + 1, end);
      if (kl === 5 && bytesAre(b, ks, 5, "index")) {
        if (this.index >= 0) return false;
        p = this.int(b, p, end);
        if (p < 0) return false;
        this.index = this.num;
      } else if (kl === 7 && bytesAre(b, ks, 7, "time_ns")) {
        if (this.timeNs >= 0) return false;
        p = this.int(b, p, end);
        if (p < 0) return false;
        this.timeNs = this.num;
      } else if (kl === 7 && bytesAre(b, ks, 7, "process")) {
        if (haveProc) return false;
        p = this.str(b, p, end);
        if (p < 0 || this.sEnd === this.sStart) return false;
        this.procStart = this.sStart;
        this.procEnd = this.sEnd;
        this.procHash = this.sHash;
        haveProc = true;
      } else if (kl === 4 && bytesAre(b, ks, 4, "type")) {
        if (this.type >= 0) return false;
        p = this.str(b, p, end);
        if (p < 0) return false;
        this.type = this.typeCode(b, this.sStart, this.sEnd - this.sStart);
        if (this.type < 0) return false;
      } else if (kl === 1 && b[ks] === 0x66) {
        if (this.f >= 0) return false;
        p = this.str(b, p, end);
        if (p < 0) return false;
        this.f = this.fCode(b, this.sStart, this.sEnd - this.sStart);
        if (this.f < 0) return false;
      } else if (kl === 5 && bytesAre(b, ks, 5, "value")) {
        if (haveValue) return false;
        p = this.value(b, p, end);
        if (p < 0) return false;
        haveValue = true;
      } else {
        p = this.skip(b, p, end, 1);
        if (p < 0) return false;
      }
      p = this.ws(b, p, end);
      if (b[p] === COMMA) {
        p = this.ws(b, p + 1, end);
        continue;
      }
      if (b[p] === RBRACE) break;
      return false;
    }
    if (this.ws(b, p + 1, end) !== end) return false;
    if (this.index <= 0 || this.timeNs < 0 || !haveProc || this.type < 0 || this.f < 0 || !haveValue) return false;
    return this.record(b, lineNo);
  }

  private slot(procId: number): number {
    if (procId >= this.slotOfProcess.length) {
      const a = new Int32Array(Math.max(procId + 1, this.slotOfProcess.length * 2)).fill(-1);
      a.set(this.slotOfProcess);
      this.slotOfProcess = a;
    }
    let slot = this.slotOfProcess[procId]!;
    if (slot < 0) {
      slot = this.validator.processSlot(this.processes.name(procId));
      this.slotOfProcess[procId] = slot;
    }
    return slot;
  }

  /** The hash of a value field's bytes (computed now for a number: int() skips it). */
  private hashOf(b: Buffer, k: number): number {
    return this.kindOf(k) === V_INT ? fnv1a(b, this.vStart[k]!, this.vEnd[k]!) : this.vHash[k]!;
  }

  /** The kind of value field k on this line (V_ABSENT when not given). */
  private kindOf(k: number): number {
    return (this.present >> k) & 1 ? this.kind[k]! : V_ABSENT;
  }
  private isStr(k: number): boolean {
    return this.kindOf(k) === V_STRING && this.vEnd[k]! > this.vStart[k]!;
  }
  private isId(k: number): boolean {
    return this.isStr(k) || this.kindOf(k) === V_INT;
  }
  private isInt(k: number): boolean {
    return this.kindOf(k) === V_INT;
  }

  /** The value's shape as validateValue would check it, then the sequence rules, then the columns. */
  private record(b: Buffer, lineNo: number): boolean {
    const t = this.type;
    const f = this.f;
    let empty = false;
    if (t === T_INVOKE) {
      if (!this.isStr(K_TOPIC)) return false;
      if (f === F_REPLAY) {
        if (!this.isInt(K_PARTITION) || !this.isInt(K_OFFSET)) return false;
      } else if (f === F_PRODUCE) {
        if (!this.isId(K_MSG)) return false;
        if (this.kindOf(K_KEY) === V_INT) return false;
        if ((this.kindOf(K_PRODUCER) !== V_ABSENT || this.kindOf(K_SEQUENCE) !== V_ABSENT) && !(this.isStr(K_PRODUCER) && this.isInt(K_SEQUENCE))) return false;
      } else if (f !== F_CONSUME) {
        if (!this.isId(K_MSG) || !this.isId(K_DELIVERY)) return false;
      }
    } else if (t === T_OK) {
      if (f === F_REPLAY) {
        if (this.kindOf(K_MSGS) !== V_ARRAY) return false;
      } else if (f === F_PRODUCE) {
        if (!this.isInt(K_PARTITION) || !this.isInt(K_OFFSET)) return false;
        if (this.kindOf(K_STATUS) !== V_ABSENT && !(this.isInt(K_STATUS) && this.vNum[K_STATUS] === 202)) return false;
        if ((this.kindOf(K_NODE) !== V_ABSENT || this.kindOf(K_BOOT) !== V_ABSENT) && !(this.isStr(K_NODE) && this.isStr(K_BOOT))) return false;
      } else if (f === F_CONSUME) {
        if (!this.isStr(K_TOPIC)) return false;
        if (this.kindOf(K_MSG) === V_NULL) empty = true;
        else {
          if (!this.isId(K_MSG) || !this.isInt(K_PARTITION) || !this.isInt(K_OFFSET) || !this.isId(K_DELIVERY)) return false;
          if (!this.isStr(K_NODE) || !this.isStr(K_BOOT)) return false;
          if (this.kindOf(K_DELIVERY_COUNT) !== V_ABSENT && !(this.isInt(K_DELIVERY_COUNT) && this.vNum[K_DELIVERY_COUNT]! >= 1)) return false;
        }
      } else if (this.kindOf(K_STATUS) !== V_ABSENT && !(this.isInt(K_STATUS) && this.vNum[K_STATUS] === 204)) {
        return false;
      }
    } else if (this.kindOf(K_STATUS) !== V_ABSENT && this.kindOf(K_STATUS) !== V_INT) {
      return false;
    }

    // The shape is valid: intern, then apply the sequence rules (which may reject the line).
    const procId = this.processes.idBytes(b, this.procStart, this.procEnd, this.procHash);
    const needsTopic = t === T_INVOKE || (t === T_OK && f === F_CONSUME);
    const topicId = needsTopic ? this.topics.idBytes(b, this.vStart[K_TOPIC]!, this.vEnd[K_TOPIC]!, this.vHash[K_TOPIC]!) : -1;
    const c = this.collector;
    const v = this.validator;
    try {
      v.checkIndex(this.index);
      v.checkTime(this.timeNs);
      const detail = f === F_CONSUME && needsTopic ? c.topics.name(topicId) : undefined;
      v.sequenceSlot(this.slot(procId), this.index, TYPE_NAMES[t]!, F_NAME_OF[f]!, detail);
      v.commit(this.index, this.timeNs);
    } catch (err) {
      if (err instanceof LineProblem) throw new HistoryFormatError(lineNo, err.message);
      throw err;
    }

    const ops = c.ops;
    if (t === T_INVOKE) {
      const op = c.openOp(f, procId, this.index, this.timeNs);
      ops.topic[op] = topicId;
      if (f === F_REPLAY) {
        ops.partition[op] = this.vNum[K_PARTITION]!;
        ops.offset[op] = this.vNum[K_OFFSET]!;
        return true;
      }
      if (f !== F_CONSUME) ops.msg[op] = this.msgs.idBytes(b, this.vStart[K_MSG]!, this.vEnd[K_MSG]!, this.hashOf(b, K_MSG));
      if (f === F_PRODUCE && this.kindOf(K_PRODUCER) === V_STRING) {
        c.idempotent(op, this.producers.idBytes(b, this.vStart[K_PRODUCER]!, this.vEnd[K_PRODUCER]!, this.vHash[K_PRODUCER]!), this.vNum[K_SEQUENCE]!);
      }
      if (f === F_ACK || f === F_EXTEND || f === F_NACK) {
        ops.delivery[op] = this.deliveries.idBytes(b, this.vStart[K_DELIVERY]!, this.vEnd[K_DELIVERY]!, this.hashOf(b, K_DELIVERY));
      }
      return true;
    }
    const statusNum = this.kindOf(K_STATUS) === V_INT ? this.vNum[K_STATUS]! : 0;
    const op = c.closeOp(procId, t === T_OK ? O_OK : t === T_FAIL ? O_FAIL : O_INFO, this.index, this.timeNs, statusNum < 32768 ? statusNum : 0);
    if (t !== T_OK) return true;
    if (f === F_PRODUCE) {
      ops.partition[op] = this.vNum[K_PARTITION]!;
      ops.offset[op] = this.vNum[K_OFFSET]!;
      if (this.kindOf(K_NODE) === V_STRING) {
        c.producedBy(
          op,
          this.nodes.idBytes(b, this.vStart[K_NODE]!, this.vEnd[K_NODE]!, this.vHash[K_NODE]!),
          this.boots.idBytes(b, this.vStart[K_BOOT]!, this.vEnd[K_BOOT]!, this.vHash[K_BOOT]!),
          this.timeNs,
        );
      }
    } else if (f === F_REPLAY) {
      c.replayed(op, this.replayOffsets, this.replayMsgs);
    } else if (f === F_CONSUME && !empty) {
      c.delivered(
        op,
        this.msgs.idBytes(b, this.vStart[K_MSG]!, this.vEnd[K_MSG]!, this.hashOf(b, K_MSG)),
        this.vNum[K_PARTITION]!,
        this.vNum[K_OFFSET]!,
        this.deliveries.idBytes(b, this.vStart[K_DELIVERY]!, this.vEnd[K_DELIVERY]!, this.hashOf(b, K_DELIVERY)),
        this.nodes.idBytes(b, this.vStart[K_NODE]!, this.vEnd[K_NODE]!, this.vHash[K_NODE]!),
        this.boots.idBytes(b, this.vStart[K_BOOT]!, this.vEnd[K_BOOT]!, this.vHash[K_BOOT]!),
        this.timeNs,
      );
    }
    return true;
  }
}

/**
 * Reads a history into a Collector through the fast scanner (the slow path for the lines it does
 * not take). Rejects with HistoryFormatError or HistoryReadError like the reader.
 */
export async function scanHistory(source: HistorySource, collector: Collector): Promise<{ lines: number; slowLines: number }> {
  const validator = new HistoryValidator();
  const scanner = new FastScanner(collector, validator);
  const lines = new LineSplitter(scanner);
  const path = typeof source === "string" ? source : "path" in source && typeof source.path === "string" ? source.path : null;
  if (path !== null) await scanFile(path, lines);
  else for await (const piece of sourceChunks(source)) lines.push(typeof piece === "string" ? Buffer.from(piece, "utf8") : piece);
  lines.end();
  if (validator.lines === 0) throw new HistoryFormatError(1, "empty history: the first line must be the config");
  return { lines: validator.lines, slowLines: scanner.slowLines };
}

/**
 * A file through two reused buffers: one is split and scanned while the next read fills the other
 * (fresh memory per chunk costs more than the parsing, and waiting on each read adds up).
 */
async function scanFile(path: string, lines: LineSplitter): Promise<void> {
  let fh: FileHandle;
  try {
    fh = await open(path, "r");
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new HistoryReadError(`cannot read ${path}: ${e.code ?? e.message}`, err);
  }
  const read = (buf: Buffer, position: number): Promise<number> =>
    fh.read(buf, 0, buf.length, position).then(
      (r) => r.bytesRead,
      (err: NodeJS.ErrnoException) => {
        throw new HistoryReadError(`cannot read ${path}: ${err.code ?? err.message}`, err);
      },
    );
  const bufs = [Buffer.allocUnsafeSlow(SCAN_BUFFER_BYTES), Buffer.allocUnsafeSlow(SCAN_BUFFER_BYTES)];
  let position = 0;
  let cur = 0;
  let pending = read(bufs[0]!, 0);
  try {
    for (;;) {
      const n = await pending;
      if (n === 0) break;
      position += n;
      const chunk = bufs[cur]!.subarray(0, n);
      cur = 1 - cur;
      pending = read(bufs[cur]!, position);
      // The splitter copies the line left over at the end, so this buffer may be reused next.
      lines.push(chunk);
    }
  } finally {
    await pending.catch(() => 0);
    await fh.close();
  }
}
