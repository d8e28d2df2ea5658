// Child topic commands of `narad` (docs/api.md, "Child topics"): `narad child attach PARENT
// CHILD --kind K`, `narad child list PARENT`, `narad child detach PARENT CHILD`, through the SDK
// (Narad.attachChild, listChildren, detachChild) with the same connection options, error lines
// and exit codes as the client commands (client-support.ts). They were reachable by raw HTTP only.

import type { Command } from "commander";
import type { Narad, TopicChild } from "../client/index.js";
import { table } from "./client-format.js";
import { UsageError, clientAction, intArg, usageExits, withConnection } from "./client-support.js";

const KINDS: readonly TopicChild["kind"][] = ["fanout", "delay", "replica", "remote"];

function childJson(c: TopicChild): Record<string, unknown> {
  return c.delayMs === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delay_ms: c.delayMs };
}

export function registerChildCommands(program: Command): void {
  const child = usageExits(program.command("child").description("child topics: copies of every message committed to a parent"));
  usageExits(withConnection(child.command("attach <parent> <child>").description("attach CHILD to PARENT: it gets a copy of every message committed to the parent from now on")))
    .requiredOption("--kind <kind>", `${KINDS.join(", ")}`)
    .option("--delay-ms <ms>", "delay: how long after the parent committed a message its copy is made", intArg("--delay-ms", 0))
    .option("--remote-url <url>", "remote: a node of the other cluster")
    .option("--remote-user <name>", "remote: the user the copies are pushed as there")
    .option("--remote-password <password>", "remote: that user's password")
    .option("--json", "print the child as JSON")
    .action(
      clientAction(async (c: Narad, o, parent: string, name: string) => {
        const kind = o.kind as TopicChild["kind"];
        if (!KINDS.includes(kind)) throw new UsageError(`--kind must be one of ${KINDS.join(", ")}, not ${JSON.stringify(o.kind)}`);
        if ((o.remoteUser === undefined) !== (o.remotePassword === undefined)) throw new UsageError("--remote-user and --remote-password go together");
        const r = await c.attachChild(parent, {
          topic: name,
          kind,
          ...(o.delayMs !== undefined ? { delayMs: o.delayMs as number } : {}),
          ...(o.remoteUrl !== undefined ? { url: o.remoteUrl as string } : {}),
          ...(o.remoteUser !== undefined ? { credentials: { user: o.remoteUser as string, password: o.remotePassword as string } } : {}),
        });
        if (o.json) return void process.stdout.write(JSON.stringify(childJson(r)) + "\n");
        process.stdout.write(`attached ${r.topic} to ${parent} (${r.kind}${r.delayMs !== undefined ? `, ${r.delayMs} ms` : ""})\n`);
      }),
    );
  usageExits(withConnection(child.command("list <parent>").description("list the children of PARENT")))
    .option("--json", "print {\"children\": [...]} as JSON")
    .action(
      clientAction(async (c: Narad, o, parent: string) => {
        const children = await c.listChildren(parent);
        if (o.json) return void process.stdout.write(JSON.stringify({ children: children.map(childJson) }) + "\n");
        if (children.length === 0) return void process.stdout.write("no children\n");
        process.stdout.write(table(["CHILD", "KIND", "DELAY_MS"], children.map((x) => [x.topic, x.kind, x.delayMs === undefined ? "-" : String(x.delayMs)])));
      }),
    );
  usageExits(withConnection(child.command("detach <parent> <child>").description("detach CHILD from PARENT: copying stops")))
    .action(
      clientAction(async (c: Narad, _o, parent: string, name: string) => {
        await c.detachChild(parent, name);
        process.stdout.write(`detached ${name} from ${parent}\n`);
      }),
    );
}
