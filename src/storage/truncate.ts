// Cutting a closed partition log back to an offset: what a replica does when it rejoins a leader
// whose log diverged from its own (src/cluster/replication: a returning old leader drops what it
// holds beyond the new leader's log for its old epoch), and what a replica that fell behind the
// leader's retention does to start again at the leader's earliest offset.
//
// It works on the directory while no FilePartitionLog has it open, through the same framing
// (record.ts) and scanner (segment.ts) recovery uses, so a log cut here opens as any recovered
// log does: the segment holding the cut offset is truncated at that record's first byte (its index
// removed, rebuilt at open), later segments are removed, and when nothing is left below the cut an
// empty segment named by the cut offset is created, so the log's next offset is exactly the cut.
// The directory is fsynced last. Records below the cut are never touched.

import path from "node:path";
import type { StorageFs } from "./fs.js";
import { closeAsync, fdatasyncAsync, fstatSizeAsync, ftruncateAsync, openAsync } from "./files.js";
import { parseSegmentFileName, scanSegment, Segment } from "./segment.js";

export interface TruncateReport {
  /** Segment files removed whole. */
  removedSegments: number;
  /** Bytes cut from the segment that held the cut offset. */
  truncatedBytes: number;
  /** The log's next offset after the cut (== the cut offset). */
  endOffset: number;
}

/**
 * Makes `offset` the next offset of the log in `dir` (closed): drops every record at or above it.
 * When every segment starts above `offset` (a replica behind the leader's retention), the log is
 * emptied and starts at `offset`.
 */
export async function truncateLogDir(fs: StorageFs, dir: string, offset: number): Promise<TruncateReport> {
  if (!Number.isSafeInteger(offset) || offset < 0) throw new Error(`truncateLogDir: bad offset ${offset}`);
  await fs.mkdirp(dir);
  const bases: number[] = [];
  for (const e of await fs.readdir(dir)) {
    const p = parseSegmentFileName(e.name);
    if (p !== null && p.kind === "log" && e.isFile()) bases.push(p.baseOffset);
  }
  bases.sort((a, b) => a - b);
  const report: TruncateReport = { removedSegments: 0, truncatedBytes: 0, endOffset: offset };
  // A segment whose base is at or above the cut holds nothing to keep; nor does any segment when
  // the first one keeps nothing (the cut is below the log's start: a reset).
  const keepFrom = bases.findIndex((b) => b >= offset);
  const kept = keepFrom < 0 ? bases : bases.slice(0, keepFrom);
  const holder = kept.length > 0 ? kept[kept.length - 1]! : undefined;
  const resetting = holder === undefined;
  for (const b of resetting ? bases : bases.slice(kept.length)) {
    const seg = new Segment(dir, b);
    await fs.unlink(seg.indexPath).catch(() => undefined);
    await fs.unlink(seg.logPath);
    report.removedSegments++;
  }
  if (holder !== undefined) {
    const seg = new Segment(dir, holder);
    const fd = await openAsync(fs, seg.logPath, "r+");
    try {
      const size = await fstatSizeAsync(fs, fd);
      const scan = await scanSegment(fs, seg, fd, size, 0, offset, () => undefined);
      if (scan.validEndBytes < size) {
        await ftruncateAsync(fs, fd, scan.validEndBytes);
        await fdatasyncAsync(fs, fd);
        report.truncatedBytes = size - scan.validEndBytes;
      }
      // The scan stops at the cut or at damage below it; a log whose records below the cut are
      // not all there ends lower, and the caller reads the log's real end after opening it.
      report.endOffset = seg.endOffset;
    } finally {
      await closeAsync(fs, fd);
    }
    await fs.unlink(seg.indexPath).catch(() => undefined);
  } else {
    const seg = new Segment(dir, offset);
    const fd = await openAsync(fs, seg.logPath, "w");
    await fdatasyncAsync(fs, fd);
    await closeAsync(fs, fd);
  }
  await fs.fsyncDir(dir);
  return report;
}

/**
 * Empties the log in `dir` (closed) and makes `baseOffset` its next offset: a replica whose log
 * ends below the leader's earliest retained offset cannot catch up record by record.
 */
export async function resetLogDir(fs: StorageFs, dir: string, baseOffset: number): Promise<void> {
  await fs.mkdirp(dir);
  for (const e of await fs.readdir(dir)) {
    if (parseSegmentFileName(e.name) !== null && e.isFile()) await fs.unlink(path.join(dir, e.name));
  }
  await truncateLogDir(fs, dir, baseOffset);
}
