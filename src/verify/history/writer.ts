// The history recorder: appends JSON lines with bounded memory.
//
// Design: `invoke` and `complete` are synchronous, so the timestamp is taken at the moment the
// caller saw the request go out or the answer come back, and no await can reorder two lines. The
// writer itself assigns `index` (counting from 0) and `time_ns` (the run clock, clamped so it never
// goes back), so a recorded history is well-formed by construction: it also refuses a second invoke
// on a process with one pending and a completion without one, which are driver bugs.
//
// Lines collect in a small buffer that is handed to the file stream in chunks of `chunkBytes`. The
// stream's queue is the only other place bytes wait. Limits:
//   - above `queuedBytesMax` queued, `needsDrain` is true and `drained()` waits for the stream:
//     drivers check it between operations (block, the documented answer to a slow disk);
//   - above `queuedBytesHardMax` the writer throws HistoryOverflowError rather than grow without
//     bound: a driver that never waits is a bug, and dropping lines would corrupt the history.

import { createWriteStream } from "node:fs";
import type { Writable } from "node:stream";
import { createRunClock, type RunClock } from "./clock.js";
import { OP_NAMES, type ConfigValue, type EventType, type OpName } from "./types.js";

export interface HistoryWriterOptions {
  /** Shared by every recorder of the run; a fresh one starts at 0 now. */
  clock?: RunClock;
  /** Bytes gathered before one write to the stream. */
  chunkBytes?: number;
  /** Queued bytes above which `needsDrain` turns true. */
  queuedBytesMax?: number;
  /** Queued bytes above which recording throws HistoryOverflowError. */
  queuedBytesHardMax?: number;
}

export class HistoryOverflowError extends Error {
  constructor(queuedBytes: number) {
    super(`history writer: ${queuedBytes} bytes queued; the driver must await drained() when needsDrain is set`);
    this.name = "HistoryOverflowError";
  }
}

export class HistoryMisuseError extends Error {
  constructor(message: string) {
    super(`history writer: ${message}`);
    this.name = "HistoryMisuseError";
  }
}

const RECORDED_OPS: ReadonlySet<string> = new Set(OP_NAMES.filter((f) => f !== "config"));

export class HistoryWriter {
  private readonly stream: Writable;
  private readonly clock: RunClock;
  private readonly chunkBytes: number;
  private readonly queuedBytesMax: number;
  private readonly queuedBytesHardMax: number;
  private parts: string[] = [];
  private partsBytes = 0;
  private nextIndex = 0;
  private lastTimeNs = 0;
  private readonly pendingByProcess = new Map<string, OpName>();
  private streamError: Error | null = null;
  private closed = false;
  private drainWaiters: Array<() => void> = [];

  /** Opens (truncates) a file and records the config line. */
  static open(path: string, config: ConfigValue, options: HistoryWriterOptions = {}): HistoryWriter {
    return new HistoryWriter(createWriteStream(path, { flags: "w", highWaterMark: 1 << 20 }), config, options);
  }

  /** Records onto any writable stream (tests use an in-memory one). */
  constructor(stream: Writable, config: ConfigValue, options: HistoryWriterOptions = {}) {
    this.stream = stream;
    this.clock = options.clock ?? createRunClock();
    this.chunkBytes = options.chunkBytes ?? 64 * 1024;
    this.queuedBytesMax = options.queuedBytesMax ?? 16 * 1024 * 1024;
    this.queuedBytesHardMax = options.queuedBytesHardMax ?? 4 * this.queuedBytesMax;
    stream.on("error", (err: Error) => {
      this.streamError ??= err;
      this.wakeDrainWaiters();
    });
    stream.on("drain", () => this.wakeDrainWaiters());
    this.append("driver", "ok", "config", config);
  }

  /** Records the start of an operation; returns its line index. */
  invoke(process: string, f: Exclude<OpName, "config">, value: object): number {
    if (!RECORDED_OPS.has(f)) throw new HistoryMisuseError(`unknown operation ${JSON.stringify(f)}`);
    const pending = this.pendingByProcess.get(process);
    if (pending !== undefined) {
      throw new HistoryMisuseError(`process ${JSON.stringify(process)} invoked ${f} with ${pending} still pending`);
    }
    this.pendingByProcess.set(process, f);
    return this.append(process, "invoke", f, value);
  }

  /** Records the end of the process's pending operation; returns its line index. */
  complete(process: string, type: Exclude<EventType, "invoke">, value: object): number {
    const f = this.pendingByProcess.get(process);
    if (f === undefined) throw new HistoryMisuseError(`process ${JSON.stringify(process)} completed with nothing pending`);
    this.pendingByProcess.delete(process);
    return this.append(process, type, f, value);
  }

  ok(process: string, value: object): number {
    return this.complete(process, "ok", value);
  }
  fail(process: string, value: object): number {
    return this.complete(process, "fail", value);
  }
  info(process: string, value: object): number {
    return this.complete(process, "info", value);
  }

  /** Lines recorded so far. */
  get events(): number {
    return this.nextIndex;
  }

  /** True while more than `queuedBytesMax` bytes wait; await `drained()` before recording more. */
  get needsDrain(): boolean {
    return this.queuedBytes() > this.queuedBytesMax;
  }

  /** Resolves once the queue is below `queuedBytesMax` (at once if it already is). */
  drained(): Promise<void> {
    if (this.streamError) return Promise.reject(this.streamError);
    if (!this.needsDrain) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.drainWaiters.push(() => (this.streamError ? reject(this.streamError) : resolve()));
    });
  }

  /** Flushes every line and closes the stream. Operations still pending stay open in the history. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.flushParts();
    await new Promise<void>((resolve, reject) => {
      if (this.streamError) return reject(this.streamError);
      this.stream.once("error", reject);
      this.stream.end(() => resolve());
    });
    if (this.streamError) throw this.streamError;
  }

  private append(process: string, type: EventType, f: OpName, value: object): number {
    if (this.streamError) throw this.streamError;
    if (this.closed) throw new HistoryMisuseError("recording after close");
    const timeNs = Math.max(this.clock.nowNs(), this.lastTimeNs);
    this.lastTimeNs = timeNs;
    const index = this.nextIndex++;
    // Field order is fixed so histories diff well; JSON.stringify escapes the strings.
    const line =
      `{"index":${index},"time_ns":${timeNs},"process":${JSON.stringify(process)},` +
      `"type":"${type}","f":"${f}","value":${JSON.stringify(value)}}\n`;
    this.parts.push(line);
    this.partsBytes += line.length;
    if (this.partsBytes >= this.chunkBytes) this.flushParts();
    const queued = this.queuedBytes();
    if (queued > this.queuedBytesHardMax) throw new HistoryOverflowError(queued);
    return index;
  }

  private flushParts(): void {
    if (this.parts.length === 0) return;
    const chunk = this.parts.join("");
    this.parts = [];
    this.partsBytes = 0;
    // The return value (false when the stream's buffer is full) is read through writableLength.
    this.stream.write(chunk);
  }

  private queuedBytes(): number {
    return this.stream.writableLength + this.partsBytes;
  }

  private wakeDrainWaiters(): void {
    if (this.drainWaiters.length === 0) return;
    if (!this.streamError && this.needsDrain) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const wake of waiters) wake();
  }
}
