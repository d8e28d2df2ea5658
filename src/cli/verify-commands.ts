// `narad verify …`: the verification toolkit's commands. Each loads its module on use, so the
// server and client commands start without loading the toolkit.

import type { Command } from "commander";

export function registerVerifyCommands(program: Command): void {
  const verify = program.command("verify").description("the verification toolkit: check histories, run workloads, inject faults");
  void verify;
}
