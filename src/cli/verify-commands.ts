// `narad verify …`: the verification toolkit's commands. Each loads its module on use, so the
// server and client commands start without loading the toolkit.

import type { Command } from "commander";
import { registerRunCommands } from "./verify-run.js";

export function registerVerifyCommands(program: Command): Command {
  const verify = program.command("verify").description("the verification toolkit: check histories, run workloads, inject faults");

  verify
    .command("check")
    .description("judge a history against the delivery contract (exit 0 valid, 1 invalid, 2 unknown)")
    .argument("<history>", "history file (JSON lines, format v1)")
    .option("--json <file>", "write the JSON report here")
    .option("--html <file>", "write the self-contained HTML report here")
    .action(async (history: string, opts: { json?: string; html?: string }) => {
      const mod = (await import("../verify/report/command.js")) as {
        runCheckCommand(args: { history: string; json?: string; html?: string }, out: NodeJS.WritableStream): Promise<number>;
      };
      process.exitCode = await mod.runCheckCommand({ history, json: opts.json, html: opts.html }, process.stdout);
    });

  verify
    .command("proxy")
    .description("run the TCP fault proxy in front of a node, with an HTTP control API for toxics")
    .requiredOption("--listen <host:port>", "where clients connect")
    .requiredOption("--target <host:port>", "the node behind the proxy")
    .option("--control <host:port>", "where the control API listens")
    .action(async (opts: { listen: string; target: string; control?: string }) => {
      const { runProxyCommand } = await import("../verify/proxy/index.js");
      try {
        await runProxyCommand(opts);
      } catch (e) {
        process.stderr.write(`narad: ${(e as Error).message}\n`);
        process.exitCode = 1;
      }
    });

  registerRunCommands(verify);

  return verify;
}
