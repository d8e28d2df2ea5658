// What this process is serving right now: HTTP requests not yet answered, and open stream
// connections. The storage reads it to decide whether a commit's fdatasync may run on the event
// loop's own thread (src/storage/partition-log.ts, "Inline fdatasync"): only when nobody but the
// commit's own requests can be waiting, so blocking the loop keeps nobody else waiting.
//
// One per process, shared by every server and broker in it (tests run several in one process):
// it is a hint for a choice of speed, never a bound or a count anyone is billed by. A wrong value
// can only make a commit take the threadpool when it could have run inline, or the other way.

let requests = 0;
let streams = 0;

export const inFlight = {
  /** An HTTP request arrived (once per request). */
  requestStarted(): void {
    requests++;
  },
  /** Its answer was written or its connection is gone (once per request). */
  requestEnded(): void {
    requests--;
  },
  /** A stream connection opened / closed: while one is open, no fdatasync blocks the loop. */
  streamOpened(): void {
    streams++;
  },
  streamClosed(): void {
    streams--;
  },
  /**
   * A commit is about to sync: whether it may block the loop. Yes when nobody else can be waiting
   * on the loop meanwhile: no stream is open, every request being served is one of this commit's
   * appends, and the commit has as many as the one before it (of any log of the process), so the
   * clients answered then are all back. A load of many connections fails the last test right
   * after a commit (the others' answers just left, their next requests are on the way: blocking
   * would keep them unread while the disk flushes). Called once per commit.
   */
  quietCommit(appends: number): boolean {
    const quiet = streams === 0 && requests <= appends && appends >= lastAppends;
    lastAppends = appends;
    return quiet;
  },
};

let lastAppends = 0;
