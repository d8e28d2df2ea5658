// The process's file-descriptor budget, for limits.partitions and /readyz.
//
// Node has no getrlimit(2). On Linux the soft RLIMIT_NOFILE is in /proc/self/limits ("Max open
// files") and the open descriptors are the entries of /proc/self/fd; elsewhere neither is known,
// and the budget falls back to 1 024 (systemd's default LimitNOFILE, and the lowest common soft
// limit), which keeps the derived partition limit safe rather than large. Node raises its soft
// limit to the hard one at start, so what /proc shows is what this process may open.

import { readdirSync, readFileSync } from "node:fs";

/** Assumed when /proc/self/limits cannot be read (docs/operations.md, "File descriptors"). */
export const DESCRIPTOR_LIMIT_FALLBACK = 1024;

/** The soft RLIMIT_NOFILE, and where it came from. */
export function descriptorLimit(limitsFile = "/proc/self/limits"): { limit: number; source: string } {
  try {
    const m = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(limitsFile, "utf8"));
    if (m !== null) return { limit: m[1] === "unlimited" ? Number.MAX_SAFE_INTEGER : Number(m[1]), source: limitsFile };
  } catch {
    // Not Linux, or /proc not mounted: the fallback below.
  }
  return { limit: DESCRIPTOR_LIMIT_FALLBACK, source: "fallback" };
}

/**
 * Descriptors open now: the entries of /proc/self/fd (less the one listing them), or null where
 * that is not known. "exhausted" when even the listing could not get a descriptor.
 */
export function openDescriptors(fdDir = "/proc/self/fd"): number | "exhausted" | null {
  try {
    return readdirSync(fdDir).length - 1;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return code === "EMFILE" || code === "ENFILE" ? "exhausted" : null;
  }
}

/**
 * Descriptors one busy partition may hold at once: its active segment, its ack log, its copy
 * cursors, and a sealed segment or its directory while it rolls or reads old data. Idle
 * partitions hold none (storage.idle_close_ms).
 */
export const DESCRIPTORS_PER_PARTITION = 4;

/** Descriptors kept for everything else: connections, the users file, node.json, PostgreSQL. */
export function descriptorsReserved(limit: number): number {
  return Math.max(256, Math.floor(limit / 4));
}

/** The default of limits.partitions: every partition busy at once still fits the budget (at least 1). */
export function partitionsForDescriptors(limit: number): number {
  return Math.max(1, Math.floor((limit - descriptorsReserved(limit)) / DESCRIPTORS_PER_PARTITION));
}
