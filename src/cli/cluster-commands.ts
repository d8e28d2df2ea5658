// Cluster commands of `narad`: `narad node list` and `narad partition move TOPIC/P --to NODE`,
// through the SDK (Narad.nodes, Narad.movePartition) with the same connection options, error
// lines and exit codes as the client commands (client-support.ts).

import type { Command } from "commander";
import type { Narad } from "../client/index.js";
import { table } from "./client-format.js";
import { UsageError, clientAction, usageExits, withConnection } from "./client-support.js";

export function registerClusterCommands(program: Command): void {
  const node = usageExits(program.command("node").description("the nodes of a cluster"));
  usageExits(withConnection(node.command("list").description("list the nodes: advertised URL, state (live, down) and the partitions each owns")))
    .option("--json", "print {\"nodes\": [...]} as JSON")
    .action(
      clientAction(async (c: Narad, o) => {
        const nodes = await c.nodes();
        if (o.json) {
          // The wire's names, as GET /v1/nodes answers them.
          const wire = nodes.map((n) => ({
            id: n.id,
            node_number: n.nodeNumber,
            advertise_url: n.advertiseUrl,
            boot: n.boot,
            state: n.state,
            partitions: n.partitions.map((p) => (p.movingTo !== undefined ? { topic: p.topic, partition: p.partition, epoch: p.epoch, moving_to: p.movingTo } : { topic: p.topic, partition: p.partition, epoch: p.epoch })),
          }));
          return void process.stdout.write(JSON.stringify({ nodes: wire }) + "\n");
        }
        process.stdout.write(
          table(
            ["NODE", "STATE", "URL", "PARTITIONS"],
            nodes.map((n) => [
              n.id,
              n.state,
              n.advertiseUrl ?? "-",
              n.partitions.length === 0 ? "-" : n.partitions.map((p) => `${p.topic}/${p.partition}${p.movingTo ? `→${p.movingTo}` : ""}`).join(" "),
            ]),
          ),
        );
      }),
    );

  usageExits(withConnection(node.command("remove <node>").description("retire a node that is down and holds no partition (admin): it is no longer listed")))
    .action(
      clientAction(async (c: Narad, _o, id: string) => {
        await c.removeNode(id);
        process.stdout.write(`removed node ${id}\n`);
      }),
    );

  const partition = usageExits(program.command("partition").description("partitions of a cluster"));
  usageExits(withConnection(partition.command("move <topic/partition>").description("move a partition to another node: copy its log and acks, then switch the owner (admin)")))
    .requiredOption("--to <node>", "the node to move it to")
    .option("--from <node>", "a replicated partition: the node whose replica moves")
    .option("--accept-loss", "the owner is down for good: place the partition on --to with nothing copied (what only it held is lost)")
    .option("--json", "print the result as JSON")
    .action(
      clientAction(async (c: Narad, o, spec: string) => {
        const m = /^(.+)\/(\d{1,5})$/.exec(spec);
        if (!m) throw new UsageError(`${JSON.stringify(spec)} is not TOPIC/PARTITION (for example orders/2)`);
        const r = await c.movePartition(m[1]!, Number(m[2]), o.to as string, { ...(o.from === undefined ? {} : { from: o.from as string }), ...(o.acceptLoss === true ? { acceptLoss: true } : {}) });
        if (o.json) return void process.stdout.write(JSON.stringify(r) + "\n");
        process.stdout.write(`moved ${m[1]}/${m[2]} from ${r.from} to ${r.to} (epoch ${r.epoch})\n`);
      }),
    );
}
