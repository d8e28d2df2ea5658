// The history reader: a chunked JSON-lines parser that validates as it goes.
//
// The file is read in 1 MiB chunks and split on newlines by hand, as bytes (readline's per-line
// events cost more than the parsing); the checker's fast scanner uses the same splitter. Each line
// is decoded and goes through JSON.parse and the HistoryValidator, and the first bad line stops
// the read with a HistoryFormatError naming the line and the rule. Memory is one chunk, one
// partial line (at most LINE_BYTES_MAX) and the validator's per-process state.
//
// The checker has its own faster path (src/verify/checker/scan.ts) that reads the same bytes into
// compact columns; it falls back to this validator for any line it does not handle, so both paths
// accept and reject exactly the same histories, with the same messages.

import { createReadStream } from "node:fs";
import { HistoryFormatError, HistoryValidator, LineProblem } from "./validate.js";
import type { HistoryEvent } from "./types.js";

/** A history: a file path, text in memory, or a stream of chunks. */
export type HistorySource = string | { path: string } | { text: string } | AsyncIterable<Buffer | string>;

/** The longest line accepted; a replay of 1000 messages is far below it. */
export const LINE_BYTES_MAX = 16 * 1024 * 1024;

export const READ_CHUNK_BYTES = 1 << 20;

/** An I/O failure reading the history (missing file, permissions), as opposed to a bad line. */
export class HistoryReadError extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "HistoryReadError";
  }
}

export function sourceChunks(source: HistorySource): AsyncIterable<Buffer | string> {
  if (typeof source === "string") return fileChunks(source);
  if ("path" in source && typeof source.path === "string") return fileChunks(source.path);
  if ("text" in source && typeof source.text === "string") {
    const text = source.text;
    return (async function* () {
      yield text;
    })();
  }
  return source as AsyncIterable<Buffer | string>;
}

async function* fileChunks(path: string): AsyncGenerator<Buffer> {
  const stream = createReadStream(path, { highWaterMark: READ_CHUNK_BYTES });
  try {
    for await (const chunk of stream) yield chunk as Buffer;
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new HistoryReadError(`cannot read ${path}: ${e.code ?? e.message}`, err);
  } finally {
    stream.destroy();
  }
}

/** Receives the lines of a history, without their newline; the bytes are only valid during the call. */
export interface LineSink {
  line(bytes: Buffer, start: number, end: number, lineNo: number): void;
}

/**
 * The one JSON-lines splitter, for the reader and the checker's fast scanner: chunks of bytes in,
 * lines out (numbered from 1). Only the line that straddles two chunks is copied, so a caller may
 * reuse its chunk buffers once `push` returns. A partial line longer than LINE_BYTES_MAX stops the
 * read; a last line without a newline is a line.
 */
export class LineSplitter {
  private carry: Buffer | null = null;
  private lineNo = 0;
  private readonly sink: LineSink;

  constructor(sink: LineSink) {
    this.sink = sink;
  }

  push(chunk: Buffer): void {
    let pos = 0;
    if (this.carry !== null) {
      const nl = chunk.indexOf(0x0a);
      if (nl < 0) {
        this.carry = Buffer.concat([this.carry, chunk]);
        this.checkCarry();
        return;
      }
      const joined = Buffer.concat([this.carry, chunk.subarray(0, nl)]);
      this.carry = null;
      this.sink.line(joined, 0, joined.length, ++this.lineNo);
      pos = nl + 1;
    }
    for (;;) {
      const nl = chunk.indexOf(0x0a, pos);
      if (nl < 0) break;
      this.sink.line(chunk, pos, nl, ++this.lineNo);
      pos = nl + 1;
    }
    if (pos < chunk.length) {
      this.carry = Buffer.from(chunk.subarray(pos));
      this.checkCarry();
    }
  }

  /** Ends the input; returns the number of lines. */
  end(): number {
    // A last line without a newline is accepted: a recorder killed mid-run leaves one.
    if (this.carry !== null && this.carry.length > 0) this.sink.line(this.carry, 0, this.carry.length, ++this.lineNo);
    this.carry = null;
    return this.lineNo;
  }

  private checkCarry(): void {
    if (this.carry!.length > LINE_BYTES_MAX) throw new HistoryFormatError(this.lineNo + 1, `line longer than ${LINE_BYTES_MAX} bytes`);
  }
}

/**
 * Parses and validates a history fed in chunks, line by line (JSON.parse and the validator), and
 * hands each event on in order. Synchronous, so tests and the async reader share it; the caller
 * feeds chunks with `push` and calls `end` once.
 */
export class HistoryParser implements LineSink {
  readonly validator = new HistoryValidator();
  private readonly lines = new LineSplitter(this);
  private readonly onEvent: (ev: HistoryEvent) => void;

  constructor(onEvent: (ev: HistoryEvent) => void) {
    this.onEvent = onEvent;
  }

  push(chunk: Buffer | string): void {
    this.lines.push(typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk);
  }

  /** Ends the input; returns the number of lines. An empty history has no config and is malformed. */
  end(): number {
    this.lines.end();
    if (this.validator.lines === 0) throw new HistoryFormatError(1, "empty history: the first line must be the config");
    return this.validator.lines;
  }

  line(bytes: Buffer, start: number, end: number, lineNo: number): void {
    this.onEvent(acceptLine(this.validator, bytes.toString("utf8", start, end), lineNo));
  }
}

/**
 * Parses and validates one line (without its newline; a trailing CR is dropped). Throws
 * HistoryFormatError naming `lineNo`.
 */
export function acceptLine(validator: HistoryValidator, raw: string, lineNo: number): HistoryEvent {
  const text = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
  if (text.length === 0) throw new HistoryFormatError(lineNo, "empty line");
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new HistoryFormatError(lineNo, `bad JSON: ${(err as Error).message}`);
  }
  try {
    return validator.accept(parsed);
  } catch (err) {
    if (err instanceof LineProblem) throw new HistoryFormatError(lineNo, err.message);
    throw err;
  }
}

/**
 * Reads and validates a whole history, calling `onEvent` for each line in order. Rejects with a
 * HistoryFormatError for the first malformed line and a HistoryReadError when it cannot read.
 */
export async function readHistory(source: HistorySource, onEvent: (ev: HistoryEvent) => void): Promise<number> {
  const parser = new HistoryParser(onEvent);
  for await (const chunk of sourceChunks(source)) parser.push(chunk);
  return parser.end();
}

/** Parses a history held in memory; for tests and small tools. */
export function parseHistoryText(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = [];
  const parser = new HistoryParser((ev) => events.push(ev));
  parser.push(text);
  parser.end();
  return events;
}
