// narad/client: the TypeScript SDK of Narad's HTTP API v1. See docs/client.md.
//
// The one public entry of the SDK. It depends on src/protocol only (wire types and the error
// table), never on server code, so it can be published and used on its own.

export {
  Narad,
  Message,
  type ConsumeOptions,
  type ConsumeBatchOptions,
  type MessagesOptions,
  type ProcessOptions,
  type AutoExtendOptions,
  type ReplayOptions,
} from "./narad.js";
export { IdempotentProducer, type IdempotentProducerOptions, type IdempotentProduced, type IdempotentBatchResult } from "./producer.js";
export type { IdempotentSend } from "./narad.js";
export { NaradClientError, NaradRequestError, NaradGoneError, NaradAmbiguousError, NaradPartialBatchError, NaradConnectionError } from "./errors.js";
export type {
  NaradOptions,
  Topic,
  TopicChild,
  TopicStats,
  PartitionStats,
  PartitionPlacement,
  CreateTopicOptions,
  UpdateTopicOptions,
  ProduceResult,
  Produced,
  ProduceMessage,
  ProduceOptions,
  MessageHeaders,
  AttachChildOptions,
  ReplayedMessage,
  MessageOrigin,
  RedriveOptions,
  RedriveResult,
  ReplayPage,
  AckStatus,
  User,
  Grant,
  GrantAction,
  ClusterNode,
  PartitionMove,
} from "./types.js";
export { ERRORS, type ErrorCode, type BatchItemResult } from "../protocol/errors.js";
export { LIMITS, DEFAULTS } from "../protocol/wire.js";
