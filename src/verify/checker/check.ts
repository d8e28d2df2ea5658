// The checker's entry points. `check` reads a history (file, text or stream) once through the
// fast scanner (scan.ts), validating each line and collecting it into columns, then judges the
// columns; nothing else touches I/O. checkText and checkEvents take the plain JSON.parse path.
// A malformed history rejects with HistoryFormatError (line number and rule), an unreadable one
// with HistoryReadError.

import { stat } from "node:fs/promises";
import { Collector } from "./collect.js";
import { judge } from "./judge.js";
import { scanHistory } from "./scan.js";
import { HistoryParser, type HistorySource } from "../history/reader.js";
import { HistoryFormatError, HistoryValidator, LineProblem } from "../history/validate.js";
import type { CheckOptions, Report } from "./types.js";

export async function check(source: HistorySource, options: CheckOptions = {}): Promise<Report> {
  // Lines average well over 100 bytes and an operation takes two: size the columns once.
  const path = typeof source === "string" ? source : "path" in source && typeof source.path === "string" ? source.path : null;
  let bytes = 0;
  if (path !== null) {
    try {
      bytes = (await stat(path)).size;
    } catch {
      bytes = 0; // the reader reports the problem with its own words
    }
  }
  const collector = new Collector(Math.ceil(bytes / 220));
  await scanHistory(source, collector);
  return judge(collector.finish(), options);
}

/** Judges a history held in memory as text (JSON lines). */
export function checkText(text: string, options: CheckOptions = {}): Report {
  const collector = new Collector();
  const parser = new HistoryParser((ev) => collector.add(ev));
  parser.push(text);
  parser.end();
  return judge(collector.finish(), options);
}

/** Judges parsed history lines (plain objects), validating them exactly as the reader would. */
export function checkEvents(events: Iterable<unknown>, options: CheckOptions = {}): Report {
  const collector = new Collector();
  const validator = new HistoryValidator();
  let line = 0;
  for (const raw of events) {
    line++;
    try {
      collector.add(validator.accept(raw));
    } catch (err) {
      if (err instanceof LineProblem) throw new HistoryFormatError(line, err.message);
      throw err;
    }
  }
  if (line === 0) throw new HistoryFormatError(1, "empty history: the first line must be the config");
  return judge(collector.finish(), options);
}
