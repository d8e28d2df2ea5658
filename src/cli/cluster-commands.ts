// Cluster commands of `narad`: `narad node list` and `narad partition move TOPIC/P --to NODE`.
// They speak the HTTP API directly (GET /v1/nodes, POST /v1/topics/{t}/partitions/{p}/move),
// with the same connection options, error lines and exit codes as the client commands
// (client-support.ts).

import type { Command } from "commander";
import { request } from "undici";
import { errorFromResponse, errorFromTransport } from "../client/errors.js";
import { table } from "./client-format.js";
import { UsageError, reportError, usageExits, withConnection } from "./client-support.js";

interface ConnOpts {
  url: string;
  user?: string;
  password?: string;
  json?: boolean;
}

async function call(o: ConnOpts, method: "GET" | "POST", path: string, body: unknown, what: string, timeoutMs: number): Promise<unknown> {
  let base: URL;
  try {
    base = new URL(o.url);
  } catch (e) {
    throw new UsageError(`bad --url ${JSON.stringify(o.url)}: ${(e as Error).message}`);
  }
  const headers: Record<string, string> = {};
  if (o.user !== undefined) headers.authorization = `Basic ${Buffer.from(`${o.user}:${o.password ?? ""}`).toString("base64")}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await request(new URL(base.pathname.replace(/\/+$/, "") + path, base.origin), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
    });
  } catch (e) {
    throw errorFromTransport(e, what, false);
  }
  const text = await res.body.text();
  if (res.statusCode < 200 || res.statusCode >= 300) throw errorFromResponse(res.statusCode, text, res.headers["retry-after"]);
  return text === "" ? null : (JSON.parse(text) as unknown);
}

function action<A extends unknown[]>(body: (o: ConnOpts, ...args: A) => Promise<void>): (...commanderArgs: unknown[]) => Promise<void> {
  return async (...commanderArgs: unknown[]) => {
    const cmd = commanderArgs[commanderArgs.length - 1] as Command;
    const opts = cmd.optsWithGlobals() as ConnOpts & Record<string, unknown>;
    try {
      await body(opts, ...(commanderArgs.slice(0, -2) as A));
    } catch (e) {
      reportError(e);
    }
  };
}

interface NodeJson {
  id: string;
  advertise_url: string | null;
  state: string;
  partitions: { topic: string; partition: number; epoch: number; moving_to?: string }[];
}

export function registerClusterCommands(program: Command): void {
  const node = usageExits(program.command("node").description("the nodes of a cluster"));
  usageExits(withConnection(node.command("list").description("list the nodes: advertised URL, state (live, down) and the partitions each owns")))
    .option("--json", "print {\"nodes\": [...]} as JSON")
    .action(
      action(async (o) => {
        const r = (await call(o, "GET", "/v1/nodes", undefined, "node list", 30_000)) as { nodes: NodeJson[] };
        if (o.json) return void process.stdout.write(JSON.stringify(r) + "\n");
        process.stdout.write(
          table(
            ["NODE", "STATE", "URL", "PARTITIONS"],
            r.nodes.map((n) => [
              n.id,
              n.state,
              n.advertise_url ?? "-",
              n.partitions.length === 0 ? "-" : n.partitions.map((p) => `${p.topic}/${p.partition}${p.moving_to ? `→${p.moving_to}` : ""}`).join(" "),
            ]),
          ),
        );
      }),
    );

  const partition = usageExits(program.command("partition").description("partitions of a cluster"));
  usageExits(withConnection(partition.command("move <topic/partition>").description("move a partition to another node: copy its log and acks, then switch the owner (admin)")))
    .requiredOption("--to <node>", "the node to move it to")
    .option("--json", "print the result as JSON")
    .action(
      action(async (o, spec: string) => {
        const m = /^(.+)\/(\d{1,5})$/.exec(spec);
        if (!m) throw new UsageError(`${JSON.stringify(spec)} is not TOPIC/PARTITION (for example orders/2)`);
        const to = (o as ConnOpts & { to: string }).to;
        const r = (await call(o, "POST", `/v1/topics/${encodeURIComponent(m[1]!)}/partitions/${m[2]}/move`, { to }, "partition move", 15 * 60_000)) as {
          from: string;
          to: string;
          epoch: number;
        };
        if (o.json) return void process.stdout.write(JSON.stringify(r) + "\n");
        process.stdout.write(`moved ${m[1]}/${m[2]} from ${r.from} to ${r.to} (epoch ${r.epoch})\n`);
      }),
    );
}
