// Cluster administration: GET /v1/nodes (each node, its state and the partitions it owns, as far
// as the asker may see the topics; a single node answers as a cluster of one owning everything)
// and moving a partition to another node (admin only; a single node refuses, having no other).
// The cluster is reached only through src/http/cluster.ts's interfaces.

import { canSee } from "../../auth/model.js";
import { NaradError } from "../../protocol/errors.js";
import { LIMITS } from "../../protocol/wire.js";
import { readJson } from "../body.js";
import type { HttpCluster } from "../cluster.js";
import { asObject, onlyFields, partitionParam, topicParam } from "../params.js";
import { sendEmpty, sendJson } from "../respond.js";
import type { RouteDeps } from "../router.js";

export function nodeRoutes({ on, svc, nodeId, bootId, audit }: RouteDeps, cluster: HttpCluster | undefined): void {
  on("GET", "/v1/nodes", "user", (_req, res, _p, _q, ctx) => {
    const visible = (topic: string) => ctx.principal === null || canSee(ctx.principal, topic, svc.listTopics().find((t) => t.name === topic)?.owner_id ?? null);
    if (cluster === undefined) {
      const partitions = svc.listTopics().filter((t) => visible(t.name)).flatMap((t) => Array.from({ length: t.partitions }, (_, i) => ({ topic: t.name, partition: i, epoch: 0 })));
      return sendJson(res, 200, { nodes: [{ id: nodeId, node_number: 0, advertise_url: null, boot: bootId, state: "live", partitions }] });
    }
    const view = cluster.view;
    sendJson(res, 200, {
      // In node_number order, the order nodes first joined (sorted by id, the numbers of nodes
      // started together ran backwards).
      nodes: [...view.nodes()].sort((a, b) => a.nodeNumber - b.nodeNumber).map((n) => ({
        id: n.id,
        node_number: n.nodeNumber,
        advertise_url: n.advertiseUrl,
        boot: n.bootId,
        state: n.state,
        partitions: view
          .ownedBy(n.id)
          .filter((x) => visible(x.topic))
          .map((x) => (x.state === "moving" ? { topic: x.topic, partition: x.partition, epoch: x.epoch, moving_to: x.moveTo } : { topic: x.topic, partition: x.partition, epoch: x.epoch })),
      })),
    });
  });
  on("DELETE", "/v1/nodes/:node", "admin", async (_req, res, p, _q, ctx) => {
    if (cluster === undefined) throw new NaradError("invalid_argument", "Removing a node needs a cluster (--control-plane); a single node is the whole deployment.");
    const id = p.node ?? "";
    await cluster.removeNode(id);
    audit(ctx, "node.remove", { node: id });
    sendEmpty(res, 204);
  });
  on("POST", "/v1/topics/:topic/partitions/:partition/move", "admin", async (req, res, p) => {
    const topic = topicParam(p);
    const partition = partitionParam(p);
    const body = asObject(await readJson(req, LIMITS.controlBodyBytesMax));
    onlyFields(body, ["to", "from", "accept_loss"]);
    if (typeof body.to !== "string" || body.to === "") throw new NaradError("invalid_argument", "Send {\"to\": NODE}, the id of the node to move the partition to.");
    if (body.from !== undefined && (typeof body.from !== "string" || body.from === "")) throw new NaradError("invalid_argument", "from, when given, is the id of the node whose replica moves.");
    if (cluster === undefined) throw new NaradError("invalid_argument", "Moving partitions needs a cluster (--control-plane); a single node owns every partition.");
    if (body.accept_loss !== undefined && body.accept_loss !== true && body.accept_loss !== false) throw new NaradError("invalid_argument", "accept_loss, when given, is true or false.");
    if (body.accept_loss === true) {
      if (body.from !== undefined) throw new NaradError("invalid_argument", "accept_loss places the whole partition: leave out from.");
      return sendJson(res, 200, await cluster.moves.reassignLost(topic, partition, body.to));
    }
    sendJson(res, 200, await cluster.moves.move(topic, partition, body.to, body.from as string | undefined));
  });
}
