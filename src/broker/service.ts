// What the HTTP layer asks of a node, whatever the deployment. On a single node it is the local
// broker itself (LocalService, below); in a cluster it is src/cluster/service.ts, which routes
// each request to the partitions' owners and serves its own partitions through the same broker.
//
// Settling answers one outcome per handle: a status (204, 400, 410) or, in a cluster, the error
// that kept the handle from being settled (its owner unreachable, no answer from it), which a
// single ack answers as that error and a batch ack as that error's status.

import type { ChildJson, CreateTopicRequest, TopicStatsJson, UpdateTopicRequest } from "../protocol/wire.js";
import { NaradError } from "../protocol/errors.js";
import type { Broker, Delivery, ProduceItem, ProduceOneDone, ReplayResult, SettleAction, SettleStatus } from "./broker.js";
import type { ChildLink } from "./children.js";
import type { ProducerRef } from "./producers.js";
import type { BrokerMetrics } from "./metrics.js";
import type { TopicInfo, TopicOwner } from "./topic.js";

export type { TopicInfo, TopicOwner };

/** What a request carries that an owner elsewhere needs to see: the client's credentials. */
export interface RequestContext {
  authorization: string | undefined;
  /** The authenticated user (null with security off): owns what the request creates. */
  user?: TopicOwner | null;
}

export type SettleOutcome = 204 | 400 | 410 | NaradError;

/** A create's settings (protocol's CreateTopicRequest: the one declaration of a topic's fields). */
export type TopicSettings = CreateTopicRequest;

/**
 * Where a produced message went. `owner` and `ownerBoot` name the partition's owner that stored it
 * when that is another node (a forwarded produce); absent, it is the node that answered.
 */
export interface Produced {
  partition: number;
  offset: number;
  owner?: string;
  ownerBoot?: string;
  /** An idempotent produce's (producer, sequence) was stored before: this is the original. */
  duplicate?: true;
}

/** The single node's synchronous produce of one message (Broker.produceOne). */
export interface DirectProduce {
  /** NaradError topic_not_found when there is none, at once. */
  assertTopic(name: string): void;
  /** What produce() would refuse before storing is thrown; `done` hears the rest. */
  produceOne(topic: string, key: string | null, payload: Buffer, done: ProduceOneDone): void;
  /** produceOne for an idempotent message (its producer id known live); a duplicate's answer comes through produce(). */
  produceOneIdempotent(topic: string, key: string | null, payload: Buffer, producer: ProducerRef, done: ProduceOneDone): void;
}

/** The single node's synchronous consume and settle of one message (Broker.consumeOne, settleOne). */
export interface DirectConsume {
  /**
   * One handle settled now: 204, 400, 410 (503 only in a cluster). Throws what settle() refuses
   * for a whole request (topic_not_found, shutting_down, no_dead_letter_topic).
   */
  settleOne(topic: string, handle: string, action: SettleAction): SettleStatus;
  /**
   * One message leased now, a Promise only when its record is read from the log; null when none
   * is available now (or long polls wait already): a consume that may wait goes through consume().
   */
  consumeOne(topic: string): Delivery | null | Promise<Delivery | null>;
}

export interface Service {
  readonly metrics: BrokerMetrics;
  /** Topics carry their owner's user id, which the HTTP layer decides on and does not show. */
  listTopics(): TopicInfo[];
  /** NaradError topic_not_found. */
  getTopic(name: string): Promise<TopicInfo>;
  /** Cheaper than getTopic: only NaradError topic_not_found when there is none. */
  checkTopic(name: string): Promise<void>;
  createTopic(req: TopicSettings, owner: TopicOwner | null): Promise<TopicInfo>;
  updateTopic(name: string, req: UpdateTopicRequest): Promise<TopicInfo>;
  deleteTopic(name: string): Promise<void>;
  listChildren(parent: string): Promise<ChildJson[]>;
  attachChild(parent: string, link: ChildLink, ctx: RequestContext): Promise<ChildJson>;
  detachChild(parent: string, child: string, ctx: RequestContext): Promise<void>;
  produce(topic: string, items: ProduceItem[], ctx: RequestContext): Promise<Produced[]>;
  /**
   * One plain message (no producer id, headers or delay) without an await, where the deployment
   * has such a path: the single node's broker. Absent in a cluster, which routes with produce().
   */
  readonly direct?: DirectProduce;
  consume(topic: string, max: number, waitMs: number, signal: AbortSignal, ctx: RequestContext): Promise<Delivery[]>;
  /**
   * A single consume and a single settle without an await, where the deployment has such a
   * path: the single node's broker. Absent in a cluster, which routes with consume() and settle().
   */
  readonly directConsume?: DirectConsume;
  settle(topic: string, handles: string[], action: SettleAction, ctx: RequestContext): Promise<SettleOutcome[]>;
  /** A replay page, or (from another owner) its JSON answer as is. */
  replay(topic: string, partition: number, offset: number, limit: number, ctx: RequestContext): Promise<ReplayResult | { json: Buffer }>;
  /** Answers waiting long polls now (a graceful stop). */
  releaseWaiters(): void;
  /**
   * GET /v1/topics/{t}'s `stats` and POST /v1/topics/{t}/purge. A single node only for now: a
   * cluster would gather them from every owner (absent there: no stats, purge 501).
   */
  topicStats?(name: string): Promise<TopicStatsJson>;
  purgeTopic?(name: string): Promise<number>;
}

/** The single node: every partition is here. */
export class LocalService implements Service {
  constructor(private readonly broker: Broker) {}

  get metrics(): BrokerMetrics {
    return this.broker.metrics;
  }

  listTopics(): TopicInfo[] {
    return this.broker.listTopics();
  }

  async getTopic(name: string): Promise<TopicInfo> {
    return this.broker.getTopic(name);
  }

  topicStats(name: string): Promise<TopicStatsJson> {
    return this.broker.topicStats(name);
  }

  purgeTopic(name: string): Promise<number> {
    return this.broker.purgeTopic(name);
  }

  async checkTopic(name: string): Promise<void> {
    this.broker.assertTopic(name);
  }

  createTopic(req: TopicSettings, owner: TopicOwner | null): Promise<TopicInfo> {
    return this.broker.createTopic(req, owner);
  }

  updateTopic(name: string, req: UpdateTopicRequest): Promise<TopicInfo> {
    return this.broker.updateTopic(name, req);
  }

  deleteTopic(name: string): Promise<void> {
    return this.broker.deleteTopic(name);
  }

  async listChildren(parent: string): Promise<ChildJson[]> {
    return this.broker.listChildren(parent);
  }

  attachChild(parent: string, link: ChildLink): Promise<ChildJson> {
    return this.broker.attachChild(parent, link);
  }

  detachChild(parent: string, child: string): Promise<void> {
    return this.broker.detachChild(parent, child);
  }

  produce(topic: string, items: ProduceItem[]): Promise<Produced[]> {
    return this.broker.produce(topic, items);
  }

  get direct(): DirectProduce {
    return this.broker;
  }

  consume(topic: string, max: number, waitMs: number, signal: AbortSignal): Promise<Delivery[]> {
    return this.broker.consume(topic, max, waitMs, signal);
  }

  get directConsume(): DirectConsume {
    return this.broker;
  }

  async settle(topic: string, handles: string[], action: SettleAction): Promise<SettleOutcome[]> {
    return (await this.broker.settleDurable(topic, handles, action)).map((s) => (s === 503 ? new NaradError("not_owner") : s));
  }

  replay(topic: string, partition: number, offset: number, limit: number): Promise<ReplayResult> {
    return this.broker.replay(topic, partition, offset, limit);
  }

  releaseWaiters(): void {
    this.broker.releaseWaiters();
  }
}
