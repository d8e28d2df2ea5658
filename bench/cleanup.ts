// What the bench started and must undo on every path: server processes (Narad, the baselines,
// the peer brokers) and temp directories. The normal path stops them in `finally` blocks; this
// registry covers the others. On SIGINT/SIGTERM every tracked entry is stopped (processes first,
// each given STOP_GRACE_MS before SIGKILL), the directories removed, and the signal raised again
// so the bench still dies of it. On an exit that skipped the `finally` blocks (an uncaught
// exception), the processes are SIGKILLed and the directories removed synchronously.

import { rmSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

export interface Tracked {
  /** SIGKILLs the process (ChildProcess.kill: a no-op once it has exited, so a reused pid is safe). */
  kill?(): void;
  /** A directory to remove on a bare exit. */
  dir?: string;
  /** The orderly stop (idempotent): the process stopped, the directory removed. */
  stop(): Promise<void>;
}

export const STOP_GRACE_MS = 10_000;

const tracked = new Set<Tracked>();
let signalled = false;

/** Tracks `t` until the returned function is called (after `t` is stopped on the normal path). */
export function track(t: Tracked): () => void {
  tracked.add(t);
  if (tracked.size === 1 && !signalled) {
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    process.on("exit", onExit);
  }
  return () => {
    tracked.delete(t);
    if (tracked.size === 0 && !signalled) removeHandlers();
  };
}

function removeHandlers(): void {
  process.removeListener("SIGINT", onSignal);
  process.removeListener("SIGTERM", onSignal);
  process.removeListener("exit", onExit);
}

function onSignal(signal: NodeJS.Signals): void {
  if (signalled) return;
  signalled = true;
  process.stdout.write(`\n${signal}: stopping the servers this bench started\n`);
  const all = [...tracked];
  const stopAll = async (entries: Tracked[]) => {
    // A stop that hangs past the grace period is cut short; onExit then SIGKILLs what is left.
    await Promise.race([Promise.allSettled(entries.map((t) => t.stop())), sleep(STOP_GRACE_MS + 2000, undefined, { ref: false })]);
  };
  void (async () => {
    await stopAll(all.filter((t) => t.kill !== undefined));
    await stopAll(all.filter((t) => t.kill === undefined));
    onExit();
    tracked.clear();
    removeHandlers();
    process.kill(process.pid, signal);
  })();
}

function onExit(): void {
  for (const t of tracked) t.kill?.();
  for (const t of tracked) if (t.dir !== undefined) rmSync(t.dir, { recursive: true, force: true });
}
