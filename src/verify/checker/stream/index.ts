// The stream model's checker (SPEC.md "The stream model"): a stream history → a StreamReport.
// `historyModel` tells which model a history's config line names, so `narad verify check` can
// send each history to its own checker; a lease-model history has no `model` field.

import { open } from "node:fs/promises";
import type { HistorySource } from "../../history/reader.js";
import { isStreamConfigLine } from "../../history/stream.js";
import { judgeStream } from "./judge.js";
import { readStreamHistory, readStreamText } from "./read.js";
import type { StreamCheckOptions, StreamReport } from "./types.js";

export type * from "./types.js";
export { STREAM_ANOMALY_NAMES } from "./types.js";
export { judgeStream } from "./judge.js";
export { readStreamHistory, readStreamText, StreamCollector, type StreamColumns } from "./read.js";

/** How far into a file the first line is looked for. */
const FIRST_LINE_BYTES_MAX = 64 * 1024;

export async function checkStream(source: HistorySource, options: StreamCheckOptions = {}): Promise<StreamReport> {
  return judgeStream(await readStreamHistory(source), options);
}

export function checkStreamText(text: string, options: StreamCheckOptions = {}): StreamReport {
  return judgeStream(readStreamText(text), options);
}

function modelOfFirstLine(line: string): "stream" | "lease" {
  try {
    return isStreamConfigLine(JSON.parse(line)) ? "stream" : "lease";
  } catch {
    return "lease"; // the lease model's reader names the bad line
  }
}

/**
 * Which model a history names: "stream" when its config line says `"model": "stream"`, else
 * "lease" (which also gets every history it cannot read, to report with its usual words).
 */
export async function historyModel(source: HistorySource): Promise<"stream" | "lease"> {
  const path = typeof source === "string" ? source : "path" in source && typeof source.path === "string" ? source.path : null;
  if (path !== null) {
    let fh;
    try {
      fh = await open(path, "r");
    } catch {
      return "lease";
    }
    try {
      const buf = Buffer.alloc(FIRST_LINE_BYTES_MAX);
      const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
      const text = buf.toString("utf8", 0, bytesRead);
      const nl = text.indexOf("\n");
      return modelOfFirstLine(nl < 0 ? text : text.slice(0, nl));
    } finally {
      await fh.close();
    }
  }
  if (typeof source === "object" && "text" in source && typeof source.text === "string") {
    const nl = source.text.indexOf("\n");
    return modelOfFirstLine(nl < 0 ? source.text : source.text.slice(0, nl));
  }
  // A stream of chunks cannot be peeked without consuming it: it is judged as the lease model.
  return "lease";
}
