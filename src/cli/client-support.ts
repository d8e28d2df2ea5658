// Plumbing shared by the client commands: connection options, the action wrapper that turns
// every failure into one stderr line and an exit code, and reading message bytes from a file or
// stdin.
//
// Exit codes are part of the interface (scripts branch on them), so they live in one table:
//   0 success
//   1 definite failure: the server refused and nothing happened (404, 409, 400, 413, 429, 503 …)
//   2 usage error: bad flags or arguments; nothing was sent
//   3 ambiguous: the request may have happened (connection broke, timeout, 5xx, 410 on ack)
//   4 cannot connect: the node could not be reached; nothing was sent

import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { open } from "node:fs/promises";
// The client (and undici under it) loads when a client command runs, not for every command.
import type { Narad } from "../client/index.js";
import { NaradClientError, NaradConnectionError } from "../client/errors.js";
import { DEFAULTS, LIMITS } from "../protocol/wire.js";

export const EXIT = { ok: 0, failed: 1, usage: 2, ambiguous: 3, unreachable: 4 } as const;

export const DEFAULT_URL = `http://${DEFAULTS.listen}`;

/** A mistake in how the command was called; reported as `narad: usage: …`, exit 2. */
export class UsageError extends Error {}

/** A local failure with its own code (a file that cannot be read, a payload over the limit). */
export class LocalError extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

interface ConnOpts {
  url: string;
  user?: string;
  password?: string;
}

/** Adds --url, --user, --password (with NARAD_URL, NARAD_USER, NARAD_PASSWORD; flags win). */
export function withConnection(cmd: Command): Command {
  return cmd
    .addOption(new Option("--url <url>", "node URL").env("NARAD_URL").default(DEFAULT_URL))
    .addOption(new Option("--user <name>", "user for HTTP Basic auth").env("NARAD_USER"))
    .addOption(new Option("--password <password>", "password for HTTP Basic auth").env("NARAD_PASSWORD"));
}

/**
 * Makes usage errors of `cmd` print one `narad: usage: …` line (no help screen after it) and exit
 * 2 (commander's own default is exit 1, which scripts would read as "the server refused").
 */
export function usageExits(cmd: Command): Command {
  return cmd
    .showHelpAfterError(false)
    .configureOutput({
      outputError: (str, write) => write(`narad: usage: ${str.replace(/^error: /, "").trimEnd()}\n`),
    })
    .exitOverride((err: CommanderError) => {
      process.exit(err.exitCode === 0 ? 0 : EXIT.usage);
    });
}

/** Parses a non-negative integer flag. */
export function intArg(name: string, min = 0): (value: string) => number {
  return (value: string) => {
    if (!/^-?\d+$/.test(value)) throw new InvalidArgumentError(`${name} must be an integer.`);
    const n = Number(value);
    if (!Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`${name} must be an integer >= ${min}.`);
    return n;
  };
}

/**
 * Wraps a command body: builds the client from the connection options, runs the body, and maps
 * any failure to one stderr line and an exit code. The client is always closed so the process
 * ends as soon as output is flushed (exit code via process.exitCode, never process.exit, so a
 * large stdout write is not cut short).
 */
export function clientAction<A extends unknown[]>(
  body: (client: Narad, opts: Record<string, unknown>, ...args: A) => Promise<void>,
): (...commanderArgs: unknown[]) => Promise<void> {
  return async (...commanderArgs: unknown[]) => {
    const cmd = commanderArgs[commanderArgs.length - 1] as Command;
    const opts = cmd.optsWithGlobals() as Record<string, unknown> & ConnOpts;
    const args = commanderArgs.slice(0, -2) as A;
    let client: Narad | undefined;
    try {
      const { Narad } = await import("../client/index.js");
      try {
        client = new Narad({ url: opts.url, user: opts.user, password: opts.password });
      } catch (err) {
        throw new UsageError(`bad --url ${JSON.stringify(opts.url)}: ${(err as Error).message}`);
      }
      await body(client, opts, ...args);
    } catch (err) {
      reportError(err);
    } finally {
      await client?.destroy().catch(() => undefined);
    }
  };
}

/** Prints `narad: <code>: <message>` and sets the exit code for a failure. */
export function reportError(err: unknown, extra?: string): void {
  let code: string;
  let exit: number;
  let message: string;
  if (err instanceof UsageError) {
    [code, exit, message] = ["usage", EXIT.usage, err.message];
  } else if (err instanceof LocalError) {
    [code, exit, message] = [err.code, EXIT.failed, err.message];
  } else if (err instanceof NaradConnectionError) {
    [code, exit, message] = [err.code, EXIT.unreachable, err.message];
  } else if (err instanceof NaradClientError) {
    [code, exit, message] = [err.code, err.definite ? EXIT.failed : EXIT.ambiguous, err.message];
    // Say how credentials are given: the server's message cannot know it was a command line.
    if (err.status === 401) message += " Give them with --user and --password, or NARAD_USER and NARAD_PASSWORD.";
  } else {
    // A bug of ours or something unforeseen: say so, and do not claim it did not happen.
    [code, exit, message] = ["internal", EXIT.ambiguous, err instanceof Error ? err.message : String(err)];
  }
  process.stderr.write(`narad: ${code}: ${oneLine(message)}${extra ? ` (${extra})` : ""}\n`);
  process.exitCode = exit;
}

function oneLine(s: string): string {
  return s.replace(/\s*\n\s*/g, " ").trim();
}

/**
 * Reads message bytes from a file (`-` is stdin) or from stdin. Stops reading one byte past the
 * message limit so a huge input cannot exhaust memory; a payload over the limit is refused here
 * with the server's own code.
 */
export async function readPayload(file: string | undefined): Promise<Buffer> {
  const limit = LIMITS.messageBytesMax;
  const chunks: Buffer[] = [];
  let total = 0;
  const take = (b: Buffer) => {
    chunks.push(b);
    total += b.length;
    if (total > limit) {
      throw new LocalError("payload_too_large", `the message is over ${limit} bytes (1 MiB); split it or store it elsewhere and send a reference`);
    }
  };
  if (file === undefined || file === "-") {
    for await (const chunk of process.stdin) take(chunk as Buffer);
    return Buffer.concat(chunks, total);
  }
  let fh;
  try {
    fh = await open(file, "r");
  } catch (err) {
    throw new LocalError("file_unreadable", `cannot open ${file}: ${(err as Error).message}`);
  }
  try {
    for await (const chunk of fh.createReadStream({ highWaterMark: 256 * 1024, autoClose: false })) take(chunk as Buffer);
  } finally {
    await fh.close();
  }
  return Buffer.concat(chunks, total);
}

/** Reads one line from stdin (a password), without the line ending. */
export async function readLine(): Promise<string> {
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of process.stdin) {
    chunks.push(chunk as Buffer);
    total += (chunk as Buffer).length;
    // Stop at the first line end: on a terminal, waiting for end of input would need a Ctrl-D.
    if (total > 64 * 1024 || (chunk as Buffer).includes(0x0a)) break;
  }
  const s = Buffer.concat(chunks).toString("utf8");
  const nl = s.search(/\r?\n/);
  return nl < 0 ? s : s.slice(0, nl);
}
