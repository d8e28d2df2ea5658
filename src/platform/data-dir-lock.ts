// One process per data directory, for the process's whole life.
//
// Two nodes serving one data directory hand out the same offsets, and after a restart one node's
// 202s are gone. A lock file is not enough (a kill -9 leaves it behind, and a stale-lock check
// races), and Node has no flock(2). What the kernel does give us: a listening Unix socket is
// exclusive and is closed by the kernel on any exit, kill -9 included. So the lock is a socket
// in Linux's abstract namespace (no file, nothing left behind), named by the data directory's
// device and inode: the same directory reached through another path or a symlink is the same
// lock. A second process finds the name taken, connects, and reads the holder's pid and URL, so
// its refusal can say who holds the directory.
//
// Limits (docs/operations.md): abstract sockets are per network namespace, so two containers in
// different network namespaces sharing one volume are not stopped; on systems without abstract
// sockets (not Linux) the lock is a socket file in the data directory, removed when stale (a
// connect to it is refused).

import { stat, unlink } from "node:fs/promises";
import net from "node:net";
import { join } from "node:path";

/** What a lock holder tells a process that finds the directory taken (one line). */
interface Holder {
  pid: number;
  url: string;
}

export class DataDirLockedError extends Error {
  constructor(
    readonly dataDir: string,
    readonly holder: Holder | undefined,
  ) {
    super(
      holder === undefined
        ? `data directory ${dataDir} is in use by another narad process`
        : `data directory ${dataDir} is in use by narad pid ${holder.pid}${holder.url ? ` (serving ${holder.url})` : ""}; stop it first, or give this node another --data-dir`,
    );
  }
}

export interface DataDirLock {
  /** Tells later comers where this process serves (shown in their refusal). */
  setUrl(url: string): void;
  release(): Promise<void>;
}

const HOLDER_LINE_BYTES_MAX = 1024;

/** Takes the data directory's lock or throws DataDirLockedError. */
export async function lockDataDir(dataDir: string, platform: NodeJS.Platform = process.platform): Promise<DataDirLock> {
  const st = await stat(dataDir);
  const name = platform === "linux" ? `\0narad-data-dir-${st.dev}-${st.ino}` : join(dataDir, ".narad.lock.sock");
  let url = "";
  const server = net.createServer((socket) => {
    socket.on("error", () => {});
    socket.end(JSON.stringify({ pid: process.pid, url }) + "\n");
  });
  for (let attempt = 0; ; attempt++) {
    const taken = await listen(server, name);
    if (!taken) break;
    const holder = await askHolder(name);
    if (holder === "refused" && platform !== "linux" && attempt === 0) {
      await unlink(name).catch(() => {}); // a socket file left by a dead process
      continue;
    }
    throw new DataDirLockedError(dataDir, holder === "refused" ? undefined : holder);
  }
  // The lock never keeps the process alive on its own.
  server.unref();
  return {
    setUrl(u) {
      url = u;
    },
    release: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        if (platform !== "linux") void unlink(name).catch(() => {});
      }),
  };
}

/** Listens on `name`; true when the name is taken. */
function listen(server: net.Server, name: string): Promise<boolean> {
  return new Promise((resolve, reject) => {
    const onError = (err: NodeJS.ErrnoException): void => {
      server.off("listening", onListening);
      if (err.code === "EADDRINUSE") resolve(true);
      else reject(err);
    };
    const onListening = (): void => {
      server.off("error", onError);
      resolve(false);
    };
    server.once("error", onError);
    server.once("listening", onListening);
    server.listen({ path: name, exclusive: true });
  });
}

/** Reads the holder's line; "refused" when nobody answers (a stale socket file). */
function askHolder(name: string): Promise<Holder | "refused" | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect({ path: name });
    let text = "";
    const finish = (h: Holder | "refused" | undefined): void => {
      socket.destroy();
      resolve(h);
    };
    socket.setTimeout(2000, () => finish(undefined));
    socket.on("data", (b: Buffer) => {
      text += b.toString("utf8");
      if (text.length > HOLDER_LINE_BYTES_MAX) finish(undefined);
    });
    socket.on("end", () => {
      try {
        const j = JSON.parse(text) as Holder;
        finish(typeof j.pid === "number" && typeof j.url === "string" ? { pid: j.pid, url: j.url } : undefined);
      } catch {
        finish(undefined);
      }
    });
    socket.on("error", (err: NodeJS.ErrnoException) => finish(err.code === "ECONNREFUSED" || err.code === "ENOENT" ? "refused" : undefined));
  });
}
