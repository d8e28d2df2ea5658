// `narad verify check HISTORY [--json FILE] [--html FILE]`: the command's body, for the CLI to
// call: it reads and judges the history (the checker), then prints the terminal summary to `out`
// and writes the reports asked for. It lives with the reports because it prints them: the report
// room imports the checker, never the reverse. It returns the exit code:
//   0 valid · 1 invalid · 2 unknown, or a malformed history (the line and the rule are printed)
//   3 the history cannot be read, or a report cannot be written.

import { writeFile } from "node:fs/promises";
import { check } from "../checker/check.js";
import type { CheckOptions } from "../checker/types.js";
import { HistoryReadError } from "../history/reader.js";
import { HistoryFormatError } from "../history/validate.js";
import { formatSummary } from "./terminal.js";
import { renderJson } from "./json.js";
import { renderHtml } from "./html.js";
import { checkStream, historyModel } from "../checker/stream/index.js";
import { formatStreamSummary, renderStreamHtml, renderStreamJson } from "./stream.js";

export const EXIT_VALID = 0;
export const EXIT_INVALID = 1;
export const EXIT_UNKNOWN = 2;
export const EXIT_CANNOT_READ = 3;

export interface CheckCommandArgs {
  history: string;
  json?: string;
  html?: string;
  options?: CheckOptions;
}

/** What the command needs of a model: judge a history, render its reports, summarise it. */
interface Model<R extends { verdict: string }> {
  judge(history: string): Promise<R>;
  json(r: R): string;
  html(r: R): string;
  summary(r: R, written: { jsonPath?: string; htmlPath?: string }): string;
}

export async function runCheckCommand(args: CheckCommandArgs, out: NodeJS.WritableStream): Promise<number> {
  // The config line names the model; a stream history (the stream model of docs/verification-clients.md) has its own checker.
  if ((await historyModel(args.history)) === "stream") {
    return runModel(args, out, { judge: checkStream, json: renderStreamJson, html: renderStreamHtml, summary: formatStreamSummary });
  }
  return runModel(args, out, { judge: (h) => check(h, args.options), json: renderJson, html: renderHtml, summary: formatSummary });
}

async function runModel<R extends { verdict: string }>(args: CheckCommandArgs, out: NodeJS.WritableStream, m: Model<R>): Promise<number> {
  let report: R;
  try {
    report = await m.judge(args.history);
  } catch (err) {
    if (err instanceof HistoryFormatError) {
      out.write(`narad verify check: UNKNOWN — malformed history ${args.history}, line ${err.line}: ${err.reason}\n`);
      return EXIT_UNKNOWN;
    }
    if (err instanceof HistoryReadError) {
      out.write(`narad verify check: ${err.message}\n`);
      return EXIT_CANNOT_READ;
    }
    throw err;
  }
  let failed = false;
  const written: { jsonPath?: string; htmlPath?: string } = {};
  for (const [path, render, key] of [
    [args.json, m.json, "jsonPath"],
    [args.html, m.html, "htmlPath"],
  ] as const) {
    if (path === undefined) continue;
    try {
      await writeFile(path, render(report));
      written[key] = path;
    } catch (err) {
      failed = true;
      out.write(`narad verify check: cannot write ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}\n`);
    }
  }
  out.write(m.summary(report, written));
  if (failed) return EXIT_CANNOT_READ;
  return report.verdict === "valid" ? EXIT_VALID : report.verdict === "invalid" ? EXIT_INVALID : EXIT_UNKNOWN;
}
