// Probes and metrics: /healthz (the process answers; no credentials), /readyz (this node serves
// its partitions now: started, not stopping, in a cluster its control-plane lease is live, and
// its storage takes writes: no partition's log stopped by a failed write, descriptors left; no
// credentials, so a load balancer can ask) and /metrics (Prometheus text; any valid user).
//
// Metrics name topics in their labels (topic, parent, child), so a user sees only the series of
// the topics it may see, as everywhere else: grants do not reveal names (docs/security.md). An
// admin, or anyone with security off, sees every series.

import { canSee, isAdmin, type Principal } from "../../auth/model.js";
import type { Service } from "../../broker/service.js";
import { NaradError } from "../../protocol/errors.js";
import { head, sendError, sendJson } from "../respond.js";
import type { RouteDeps } from "../router.js";

export function opsRoutes({ on, svc, nodeId, bootId }: RouteDeps, serving: () => boolean, notReady: () => string | null): void {
  on("GET", "/healthz", "none", (_req, res) => sendJson(res, 200, { status: "ok", node: nodeId, boot: bootId }));
  on("GET", "/readyz", "none", (_req, res) => {
    if (!serving()) {
      return sendError(res, new NaradError("shutting_down", "The node is not serving its partitions now: it is starting, stopping, or its control-plane lease lapsed."));
    }
    const why = notReady();
    return why === null ? sendJson(res, 200, { status: "ready" }) : sendError(res, new NaradError("storage_unavailable", why));
  });
  on("GET", "/metrics", "user", async (_req, res, _p, _q, ctx) => {
    const all = await svc.metrics.registry.metrics();
    const text = ctx.principal === null || isAdmin(ctx.principal) ? all : visibleSeries(all, svc, ctx.principal);
    head(res, 200, ["content-type", svc.metrics.registry.contentType]);
    res.end(text);
  });
}

const TOPIC_LABEL = /\b(?:topic|parent|child)="((?:[^"\\]|\\.)*)"/g;

/** The Prometheus text without the series that name a topic `p` may not see. */
function visibleSeries(text: string, svc: Service, p: Principal): string {
  const owners = new Map(svc.listTopics().map((t) => [t.name, t.owner_id]));
  const lines = text.split("\n");
  const kept: string[] = [];
  for (const line of lines) {
    if (line.startsWith("#") || !line.includes('"')) {
      kept.push(line);
      continue;
    }
    let visible = true;
    for (const m of line.matchAll(TOPIC_LABEL)) {
      const topic = m[1]!;
      if (!canSee(p, topic, owners.get(topic) ?? null)) visible = false;
    }
    if (visible) kept.push(line);
  }
  return kept.join("\n");
}
