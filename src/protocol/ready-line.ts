// The one line `narad server start` prints once it serves, and the reader that whatever starts
// nodes (local clusters, the nemesis, the tests) uses to wait for it: one format, one parser.

export interface ReadyLine {
  url: string;
  port: number;
  nodeId: string;
  dataDir: string;
}

const READY_RE = /^narad listening on (http:\/\/\S+) \(node (\S+), data (.+)\)$/;
/** A partial line this long is not the ready line: dropped, so memory stays bounded. */
const PARTIAL_LINE_CHARS_MAX = 64 * 1024;

export function formatReadyLine(r: { url: string; nodeId: string; dataDir: string }): string {
  return `narad listening on ${r.url} (node ${r.nodeId}, data ${r.dataDir})`;
}

export function parseReadyLine(line: string): ReadyLine | null {
  const m = READY_RE.exec(line.trim());
  if (m === null) return null;
  const port = Number(new URL(m[1]!).port);
  return Number.isInteger(port) && port > 0 ? { url: m[1]!, port, nodeId: m[2]!, dataDir: m[3]! } : null;
}

/**
 * A scanner for a process's output, fed text as it arrives (chunks split lines anywhere): calls
 * `found` on the first ready line, and ignores everything after it.
 */
export function readyLineScanner(found: (r: ReadyLine) => void): (text: string) => void {
  let partial = "";
  let done = false;
  return (text) => {
    if (done) return;
    partial += text;
    let nl: number;
    while ((nl = partial.indexOf("\n")) >= 0) {
      const r = parseReadyLine(partial.slice(0, nl));
      partial = partial.slice(nl + 1);
      if (r !== null) {
        done = true;
        partial = "";
        found(r);
        return;
      }
    }
    if (partial.length > PARTIAL_LINE_CHARS_MAX) partial = "";
  };
}
