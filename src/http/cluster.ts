// What the HTTP layer needs of a cluster, declared here so that src/http imports nothing of
// src/cluster: the wiring room (src/server.ts) passes the control plane, the mover and the
// cluster's internal routes (src/cluster/internal-routes.ts) in, and TypeScript checks there that
// they fit. Absent on a single node.
//
// The internal routes are the cluster's code (beside the forwarding that calls them), written
// against node:http and the helpers this layer lends them (internalRouteKit, below), so that every
// answer still carries the node's identity headers and every error the error table's body. This
// layer mounts them under their prefix behind the cluster's token check and the same
// authorization policy as the public routes (src/http/router.ts).

import type { IncomingMessage, ServerResponse } from "node:http";
import type { Delivery } from "../broker/broker.js";
import { readBatch, readBody, readJson } from "./body.js";
import { asObject, checkKey, partitionParam, queryInt, topicParam, type Params } from "./params.js";
import { abortOnClose, head, outcomeStatus, sendDeliveries, sendEmpty, sendJson, sendReplay } from "./respond.js";

export interface HttpCluster {
  /** The control plane's view: readiness and GET /v1/nodes. */
  view: ClusterView;
  /** POST /v1/topics/:topic/partitions/:partition/move. */
  moves: { move(topic: string, partition: number, to: string, from?: string): Promise<unknown>; reassignLost(topic: string, partition: number, to: string): Promise<unknown> };
  /** DELETE /v1/nodes/:node: retires a node that is down and holds nothing. */
  removeNode(id: string): Promise<void>;
  internal: InternalRoutes;
}

export interface ClusterView {
  /** False while this node's control-plane lease has lapsed: /readyz answers 503. */
  isLeaseLive(): boolean;
  nodes(): readonly ClusterNodeView[];
  /** The partitions a node owns. */
  ownedBy(nodeId: string): readonly OwnedPartitionView[];
}

export interface ClusterNodeView {
  id: string;
  nodeNumber: number;
  advertiseUrl: string;
  bootId: string;
  state: string;
}

export interface OwnedPartitionView {
  topic: string;
  partition: number;
  epoch: number;
  state: string;
  /** The node a move in progress copies to. */
  moveTo: string | null;
}

/** The routes other nodes of the cluster forward to. */
export interface InternalRoutes {
  /** Every path below is under it (/internal/v1). */
  prefix: string;
  /** True when the request carries this cluster's token (checked before anything else). */
  fromPeer(req: IncomingMessage): boolean;
  /** The routes, built once with the helpers this layer lends (a function property, so the
   *  wiring's type check is strict: the cluster may use only what the kit holds). */
  routes: (kit: InternalRouteKit) => readonly InternalRoute[];
}

export interface InternalRoute {
  method: "GET" | "POST";
  path: string;
  /** Checked against the forwarded client's credentials when the request carries any. */
  perm: "none" | "produce" | "consume" | "manage";
  handler: (req: IncomingMessage, res: ServerResponse, params: Params, query: URLSearchParams) => Promise<void> | void;
}

/**
 * The helpers an internal route is lent: this layer's own, answering as this node. The cluster
 * declares the part it uses (src/cluster/internal-routes.ts InternalHttp); the wiring checks it
 * against this type, which is the kit itself.
 */
export function internalRouteKit(nodeId: string, bootId: string) {
  return {
    readBody,
    readJson,
    readBatch,
    head,
    sendJson,
    sendEmpty,
    /** Leased messages in the binary encoding, naming this node as their owner. */
    sendDeliveries: (res: ServerResponse, ds: readonly Delivery[]) => sendDeliveries(res, ds, nodeId, bootId),
    sendReplay,
    abortOnClose,
    outcomeStatus,
    asObject,
    topicParam,
    partitionParam,
    queryInt,
    checkKey,
  };
}

export type InternalRouteKit = ReturnType<typeof internalRouteKit>;
