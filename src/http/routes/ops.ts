// Probes and metrics: /healthz (the process answers; no credentials), /readyz (this node serves
// its partitions now: started, not stopping, and in a cluster its control-plane lease is live;
// no credentials, so a load balancer can ask) and /metrics (Prometheus text; any valid user).

import { NaradError } from "../../protocol/errors.js";
import { head, sendError, sendJson } from "../respond.js";
import type { RouteDeps } from "../router.js";

export function opsRoutes({ on, svc, nodeId, bootId }: RouteDeps, serving: () => boolean): void {
  on("GET", "/healthz", "none", (_req, res) => sendJson(res, 200, { status: "ok", node: nodeId, boot: bootId }));
  on("GET", "/readyz", "none", (_req, res) =>
    serving()
      ? sendJson(res, 200, { status: "ready" })
      : sendError(res, new NaradError("shutting_down", "The node is not serving its partitions now: it is starting, stopping, or its control-plane lease lapsed.")),
  );
  on("GET", "/metrics", "user", async (_req, res) => {
    const text = await svc.metrics.registry.metrics();
    head(res, 200, ["content-type", svc.metrics.registry.contentType]);
    res.end(text);
  });
}
