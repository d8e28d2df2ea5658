// The `narad` command. The only place (with the client commands) that prints for people.

import { Command, Option } from "commander";
import { formatReadyLine } from "../protocol/ready-line.js";
import { ConfigError, resolveConfig, SETTINGS } from "../config.js";
import { registerClientCommands } from "./client-commands.js";
import { registerVerifyCommands } from "./verify-commands.js";
import { registerClusterCommands } from "./cluster-commands.js";
import { usageExits } from "./client-support.js";
import { registerChildCommands } from "./child-commands.js";

const program = new Command();
program
  .name("narad")
  .description("Narad: a durable message broker with an explicit delivery contract")
  .version("0.1.0");

const server = program.command("server").description("run a broker node");
const start = server
  .command("start")
  .description("start a node (security on unless --dev)")
  .option("--config <file>", "JSON config file (NARAD_CONFIG)");
for (const s of SETTINGS) {
  if (s.flag === undefined) continue;
  const o = s.kind === "bool" ? new Option(s.flag, s.help) : new Option(`${s.flag} <value>`, s.help);
  start.addOption(o);
}
start.action(async (opts: Record<string, unknown>) => {
  const flags: Record<string, unknown> = {};
  for (const s of SETTINGS) {
    if (s.flag === undefined) continue;
    const attr = s.flag.replace(/^--/, "").replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    if (opts[attr] !== undefined) flags[s.key] = opts[attr];
  }
  let cfg;
  try {
    cfg = resolveConfig(flags, process.env, (opts.config as string | undefined) ?? process.env.NARAD_CONFIG);
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }
  // The signal handlers are in place before the node starts: a stop asked for while it starts
  // (a supervisor's SIGTERM right after launch) waits for the start, then stops gracefully,
  // rather than killing the process by the signal's default action.
  let running: Awaited<ReturnType<typeof startServer>> | undefined;
  let stopWanted: NodeJS.Signals | undefined;
  let signals = 0;
  const stop = (sig: NodeJS.Signals) => {
    running!.logger.info({ signal: sig }, "graceful stop requested");
    running!.stop().then(
      () => process.exit(0),
      (e: Error) => {
        process.stderr.write(`narad: graceful stop failed: ${e.message}\n`);
        process.exit(1);
      },
    );
  };
  const onSignal = (sig: NodeJS.Signals) => {
    if (++signals > 1) {
      running?.logger.warn({ signal: sig }, "second signal: exiting without a graceful stop");
      process.exit(1);
    }
    if (running === undefined) stopWanted = sig;
    else stop(sig);
  };
  process.on("SIGTERM", onSignal);
  process.on("SIGINT", onSignal);
  const { startServer, StartupError } = await import("../server.js");
  try {
    running = await startServer(cfg);
  } catch (e) {
    if (e instanceof StartupError) fail(e.message);
    throw e;
  }
  process.stdout.write(`${formatReadyLine(running)}\n`);
  if (stopWanted !== undefined) stop(stopWanted);
});

registerClientCommands(program);
registerClusterCommands(program);
registerChildCommands(program);
registerVerifyCommands(program);
// Every command's usage errors are one `narad: usage: …` line and exit 2, as docs/client.md says
// (commander's own exit 1 was left on server, verify and the program itself).
const everyCommand = (c: Command): Command[] => [c, ...c.commands.flatMap(everyCommand)];
for (const c of everyCommand(program)) usageExits(c);

// Output cut off by a closed pipe (`narad replay … | head`) is not an error: stop quietly, as
// cat does, rather than crash with an EPIPE stack trace.
process.stdout.on("error", (e: NodeJS.ErrnoException) => {
  if (e.code === "EPIPE") process.exit(0);
  throw e;
});

function fail(message: string): never {
  process.stderr.write(`narad: ${message}\n`);
  process.exit(1);
}

await program.parseAsync(process.argv);
