// The history reader: a chunked JSON-lines parser that validates as it goes.
//
// The file is read in 1 MiB chunks and split on newlines by hand (readline's per-line events cost
// more than the parsing). Each line goes through JSON.parse and the HistoryValidator, and the first
// bad line stops the read with a HistoryFormatError naming the line and the rule. Memory is one
// chunk, one partial line (at most `lineBytesMax`) and the validator's per-process state.
//
// The checker has its own faster path (src/verify/checker/scan.ts) that reads the same bytes into
// compact columns; it falls back to this validator for any line it does not handle, so both paths
// accept and reject exactly the same histories, with the same messages.

import { createReadStream } from "node:fs";
import { StringDecoder } from "node:string_decoder";
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

/**
 * Splits text into lines and validates each one. Synchronous, so tests and the async reader share
 * it; the caller feeds chunks with `push` and calls `end` once.
 */
export class LineSplitter {
  readonly validator = new HistoryValidator();
  private carry = "";
  private lineNo = 0;
  private readonly onEvent: (ev: HistoryEvent) => void;

  constructor(onEvent: (ev: HistoryEvent) => void) {
    this.onEvent = onEvent;
  }

  push(text: string): void {
    let start = 0;
    let nl = text.indexOf("\n");
    if (nl < 0) {
      this.carry += text;
      if (this.carry.length > LINE_BYTES_MAX) throw new HistoryFormatError(this.lineNo + 1, `line longer than ${LINE_BYTES_MAX} bytes`);
      return;
    }
    if (this.carry.length > 0) {
      this.line(this.carry + text.slice(0, nl));
      this.carry = "";
      start = nl + 1;
      nl = text.indexOf("\n", start);
    }
    while (nl >= 0) {
      this.line(text.slice(start, nl));
      start = nl + 1;
      nl = text.indexOf("\n", start);
    }
    this.carry = text.slice(start);
    if (this.carry.length > LINE_BYTES_MAX) throw new HistoryFormatError(this.lineNo + 1, `line longer than ${LINE_BYTES_MAX} bytes`);
  }

  /** Ends the input; returns the number of lines. An empty history has no config and is malformed. */
  end(): number {
    if (this.carry.length > 0) {
      // A last line without a newline is accepted: a recorder killed mid-run leaves one.
      this.line(this.carry);
      this.carry = "";
    }
    if (this.validator.lines === 0) throw new HistoryFormatError(1, "empty history: the first line must be the config");
    return this.validator.lines;
  }

  private line(raw: string): void {
    this.lineNo++;
    this.onEvent(acceptLine(this.validator, raw, this.lineNo));
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
  const splitter = new LineSplitter(onEvent);
  const decoder = new StringDecoder("utf8");
  for await (const chunk of sourceChunks(source)) {
    splitter.push(typeof chunk === "string" ? chunk : decoder.write(chunk));
  }
  const rest = decoder.end();
  if (rest.length > 0) splitter.push(rest);
  return splitter.end();
}

/** Parses a history held in memory; for tests and small tools. */
export function parseHistoryText(text: string): HistoryEvent[] {
  const events: HistoryEvent[] = [];
  const splitter = new LineSplitter((ev) => events.push(ev));
  splitter.push(text);
  splitter.end();
  return events;
}
