// Helpers for the storage tests: a temp directory per test, a clock the test moves by hand, and a
// logger that keeps what it was told so tests can check that damage is reported.

import fsp from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { pino, type Logger } from "pino";
import type { Clock } from "../../src/platform/clock.js";
import type { StorageOptions } from "../../src/storage/types.js";

export class TestClock implements Clock {
  wallMs = 1_700_000_000_000;
  mono = 0;
  nowMs(): number {
    return this.wallMs;
  }
  monoMs(): number {
    return this.mono;
  }
  advance(ms: number): void {
    this.wallMs += ms;
    this.mono += ms;
  }
}

export interface CapturedLog {
  logger: Logger;
  lines: Record<string, unknown>[];
  /** Lines at warn (40) or above whose msg contains `text`. */
  warnings(text: string): Record<string, unknown>[];
}

export function captureLogger(): CapturedLog {
  const lines: Record<string, unknown>[] = [];
  const logger = pino(
    { level: "debug" },
    {
      write(line: string) {
        lines.push(JSON.parse(line) as Record<string, unknown>);
      },
    },
  );
  return {
    logger,
    lines,
    warnings: (text) =>
      lines.filter((l) => (l["level"] as number) >= 40 && String(l["msg"] ?? "").includes(text)),
  };
}

export async function withTempDir<T>(fn: (dir: string) => Promise<T>): Promise<T> {
  const dir = await fsp.mkdtemp(path.join(os.tmpdir(), "narad-storage-"));
  try {
    return await fn(dir);
  } finally {
    await fsp.rm(dir, { recursive: true, force: true });
  }
}

export function logOptions(clock: Clock, logger: Logger, overrides: Partial<StorageOptions> = {}): StorageOptions {
  return {
    clock,
    logger,
    segmentBytesMax: 64 * 1024 * 1024,
    segmentAgeMaxMs: 24 * 3600 * 1000,
    powerLoss: false,
    ...overrides,
  };
}

/** Deterministic bytes for payloads (seeded xorshift), so a failure reproduces. */
export function seededBytes(seed: number, length: number): Buffer {
  const b = Buffer.allocUnsafe(length);
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < length; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

export function segmentFile(dir: string, baseOffset: number, ext: "log" | "index"): string {
  return path.join(dir, `${String(baseOffset).padStart(20, "0")}.${ext}`);
}
