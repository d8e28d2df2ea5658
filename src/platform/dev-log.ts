// Log lines for people: what `narad server start --dev` prints on a terminal instead of pino's
// JSON (raw numeric levels and epoch times are for machines). Off a terminal, and without --dev,
// the node logs JSON as always (docs/operations.md, "Logs"). No dependency: one line of pino JSON
// in, one line of text out.

const LEVELS: Record<number, string> = { 10: "TRACE", 20: "DEBUG", 30: "INFO ", 40: "WARN ", 50: "ERROR", 60: "FATAL" };

/** One pino JSON line as `HH:MM:SS.mmm LEVEL module: msg key=value …`; a line that is not JSON passes as is. */
export function formatDevLine(line: string): string {
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith("\n") ? line : `${line}\n`;
  }
  const { level, time, msg, module, ...rest } = o;
  const t = typeof time === "number" ? new Date(time).toISOString().slice(11, 23) : "--:--:--.---";
  const lv = typeof level === "number" ? (LEVELS[level] ?? String(level)) : "?";
  const fields = Object.entries(rest)
    .map(([k, v]) => `${k}=${typeof v === "string" && !/\s/.test(v) ? v : JSON.stringify(v)}`)
    .join(" ");
  return `${t} ${lv} ${typeof module === "string" ? `${module}: ` : ""}${String(msg ?? "")}${fields ? `  ${fields}` : ""}\n`;
}

/** A pino destination that writes formatDevLine's text to `out` (a terminal). */
export function devLogDestination(out: NodeJS.WritableStream): { write(line: string): void } {
  return { write: (line: string) => void out.write(formatDevLine(line.trimEnd())) };
}
