// Recovery of one segment at open (FilePartitionLog.recover runs these in order, then takes the
// last segment as the active one): a segment whose name disagrees with its records is set
// aside; each other segment's index is checked against its file (rebuilt when it does not
// match), its records are scanned from where the index ends, damaged records are reported and
// never served, and a torn tail is cut. Nothing here fails on file content.

import path from "node:path";
import type { Logger } from "pino";
import type { RecoveryReport } from "./types.js";
import { checkFrame, frameOffset, RECORD_BYTES_MAX } from "./record.js";
import { decodeIndex, encodeIndex, NO_RECORD, readProducedAtMs, scanSegment, Segment, validateIndex } from "./segment.js";
import { closeAsync, fdatasyncAsync, fstatSizeAsync, ftruncateAsync, openAsync, readFullyAt } from "./files.js";
import type { StorageFs } from "./fs.js";

/** The log's directory, filesystem, logger and the report recovery fills. */
export interface RecoveryContext {
  dir: string;
  fs: StorageFs;
  log: Logger;
  recovery: RecoveryReport;
}

/**
 * Checks a segment's name against its first record, whose offset is under the record's CRC:
 * a segment named lower than its records (renamed, or restored under the wrong name) would
 * make the segment before it end at that name, and recovery would cut that segment's valid
 * records as a torn tail; one named higher would hide them. Neither name nor content can be
 * preferred safely (the file may belong elsewhere), so a disagreeing segment is renamed to
 * NAME.corrupt, logged, reported and not served, and nothing of any other segment is cut.
 * Returns the end of the offsets its records hold (never handed out again), or null when the
 * name agrees (or the first record is unreadable: then the name is all there is to go by).
 */
export async function setAsideIfMisnamed(cx: RecoveryContext, baseOffset: number): Promise<number | null> {
  const seg = new Segment(cx.dir, baseOffset);
  const fd = await openAsync(cx.fs, seg.logPath, "r");
  let firstOffset: number;
  let endOffset: number;
  try {
    const sizeBytes = await fstatSizeAsync(cx.fs, fd);
    const head = Buffer.allocUnsafe(Math.min(RECORD_BYTES_MAX, sizeBytes));
    const n = await readFullyAt(cx.fs, fd, head, 0, head.length, 0);
    if (checkFrame(head, 0, n) <= 0 || frameOffset(head, 0) === baseOffset) return null;
    firstOffset = frameOffset(head, 0);
    // Where its records end, read as the content says: a scan of a segment named by them.
    const content = new Segment(cx.dir, firstOffset);
    await scanSegment(cx.fs, content, fd, sizeBytes, 0, Number.MAX_SAFE_INTEGER, () => {});
    endOffset = content.endOffset;
  } finally {
    await closeAsync(cx.fs, fd).catch(() => {});
  }
  const aside = `${seg.logPath}.corrupt`;
  await cx.fs.rename(seg.logPath, aside);
  await cx.fs.fsyncDir(cx.dir);
  (cx.recovery.setAsideSegments ??= []).push({ segment: seg.name, firstOffset, endOffset });
  cx.log.error(
    { segment: seg.name, firstOffset, endOffset, setAsideAs: path.basename(aside) },
    "a segment's name disagrees with the offsets of its records: set aside and not served, no other segment is cut (docs/operations.md)",
  );
  return endOffset;
}

export async function recoverSegment(cx: RecoveryContext, baseOffset: number, isLast: boolean, nextBase: number, hasIndex: boolean): Promise<Segment> {
  const seg = new Segment(cx.dir, baseOffset);
  const fd = await openAsync(cx.fs, seg.logPath, "r+");
  seg.fd = fd;
  try {
    await recoverSegmentFile(cx, seg, fd, isLast, nextBase, hasIndex);
  } catch (err) {
    seg.fd = -1;
    await closeAsync(cx.fs, fd).catch(() => {});
    throw err;
  }
  if (!isLast) {
    // Sealed segments are reopened on demand for reads; no need to hold every fd.
    seg.fd = -1;
    await closeAsync(cx.fs, fd);
  }
  return seg;
}

async function recoverSegmentFile(cx: RecoveryContext, seg: Segment, fd: number, isLast: boolean, nextBase: number, hasIndex: boolean): Promise<void> {
  const sizeBytes = await fstatSizeAsync(cx.fs, fd);
  const indexName = path.basename(seg.indexPath);

  let startPos = 0;
  let indexProblem: string | null = hasIndex ? null : "missing";
  if (hasIndex) {
    let raw: Buffer | null = null;
    try {
      raw = await cx.fs.readFile(seg.indexPath);
    } catch (err) {
      indexProblem = `unreadable: ${(err as Error).message}`;
    }
    if (raw !== null) {
      const decoded = decodeIndex(raw);
      if (typeof decoded === "string") indexProblem = decoded;
      else {
        const v = await validateIndex(cx.fs, seg, decoded, fd, sizeBytes, nextBase);
        if (typeof v === "string") indexProblem = v;
        else {
          seg.positions = decoded.positions;
          seg.count = v.lastIndex + 1;
          seg.maxProducedAtMs = seg.count > 0 ? Math.max(decoded.maxProducedAtMs, v.lastProducedAtMs) : -Infinity;
          startPos = v.endPosition;
          if (seg.count > 0) {
            let firstPos = -1;
            for (let i = 0; i < seg.count && firstPos < 0; i++) if (seg.positions[i] !== NO_RECORD) firstPos = seg.positions[i]!;
            seg.firstProducedAtMs = (await readProducedAtMs(cx.fs, fd, sizeBytes, firstPos)) ?? v.lastProducedAtMs;
          }
        }
      }
    }
    if (indexProblem !== null) {
      cx.log.warn({ index: indexName, problem: indexProblem }, "segment index does not match its segment; rebuilding it");
    }
  }

  const countBeforeScan = seg.count;
  const scan = await scanSegment(cx.fs, seg, fd, sizeBytes, startPos, nextBase, (position, reason, lostOffsets) => {
    cx.recovery.corruptRecords.push({ segment: seg.name, position, reason });
    cx.log.warn({ segment: seg.name, position, reason, lostOffsets }, "damaged record skipped; it is never served");
  });
  if (scan.tailBytes > 0) {
    cx.log.warn(
      { segment: seg.name, position: scan.validEndBytes, bytes: scan.tailBytes, reason: scan.tailReason },
      "truncating a torn or unreadable tail",
    );
    await ftruncateAsync(cx.fs, fd, scan.validEndBytes);
    await fdatasyncAsync(cx.fs, fd);
    cx.recovery.truncatedBytes += scan.tailBytes;
  }
  seg.writtenBytes = scan.validEndBytes;
  seg.appendBytes = scan.validEndBytes;

  const indexChanged = indexProblem !== null || seg.count !== countBeforeScan || scan.tailBytes > 0;
  if (!isLast && indexChanged) {
    cx.recovery.rebuiltIndexes.push(indexName);
    seg.trim();
    await cx.fs.writeFileAtomic(seg.indexPath, encodeIndex(seg)).catch((err: unknown) =>
      cx.log.warn({ err, index: indexName }, "could not write the rebuilt index"),
    );
  } else if (isLast && hasIndex && indexProblem !== null) {
    // The active segment's index is rewritten at close; say that the one on disk was wrong.
    cx.recovery.rebuiltIndexes.push(indexName);
  }
}
