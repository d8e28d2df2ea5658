// The one error table. Every error Narad answers over HTTP has a row here: its code (the
// `error.code` of the JSON body), its HTTP status, whether it is *definite* (the operation
// certainly did not take effect) or *indefinite* (it may have), and a default message that says
// what went wrong and what to do. The HTTP layer, the SDK's typed errors and docs/api.md all come
// from this table; test/error-table.test.ts keeps docs/api.md in step with it.
//
// Definite vs indefinite follows Maelstrom's error codes: a client may retry a definite failure
// freely, but must treat an indefinite one as "it may have happened".

export interface ErrorSpec {
  readonly status: number;
  readonly definite: boolean;
  readonly message: string;
}

export const ERRORS = {
  bad_request: { status: 400, definite: true, message: "The request is malformed; fix it and send it again." },
  invalid_json: { status: 400, definite: true, message: "The body is not valid JSON." },
  invalid_topic_name: {
    status: 400,
    definite: true,
    message: "Topic names match ^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$.",
  },
  invalid_argument: { status: 400, definite: true, message: "A field or query parameter has a bad value." },
  partitions_decrease: {
    status: 400,
    definite: true,
    message: "Partitions can only grow; send a number at least as large as the current one.",
  },
  invalid_child: {
    status: 400,
    definite: true,
    message: "This child cannot be attached: a child has one parent and no children of its own.",
  },
  invalid_dead_letter_topic: {
    status: 400,
    definite: true,
    message: "dead_letter_topic must name an existing topic other than this one, and max_deliveries needs one.",
  },
  invalid_headers: {
    status: 400,
    definite: true,
    message: "Message headers are a JSON object of strings: at most 16, names matching ^[A-Za-z0-9][A-Za-z0-9._-]*$ up to 64 bytes, values up to 1024 bytes, 4096 bytes in all.",
  },
  invalid_delay: { status: 400, definite: true, message: "delay_ms is an integer from 0 to 604800000 (7 days)." },
  invalid_receipt_handle: {
    status: 400,
    definite: true,
    message: "The receipt handle is malformed, forged, or belongs to another topic.",
  },
  unknown_producer: {
    status: 400,
    definite: true,
    message: "The producer id is unknown or expired (unused for producers.idle_expiry_ms); get a new one with POST /v1/producers.",
  },
  unauthorized: { status: 401, definite: true, message: "Credentials are missing or wrong." },
  forbidden: { status: 403, definite: true, message: "These credentials do not allow this action." },
  topic_not_found: { status: 404, definite: true, message: "No topic has this name; create it first." },
  partition_not_found: { status: 404, definite: true, message: "The topic has no partition with this number." },
  child_not_found: { status: 404, definite: true, message: "The topic has no such child." },
  user_not_found: { status: 404, definite: true, message: "No user has this name." },
  grant_not_found: { status: 404, definite: true, message: "The user has no such grant." },
  not_found: { status: 404, definite: true, message: "No such resource." },
  method_not_allowed: { status: 405, definite: true, message: "This path does not take this method." },
  node_not_found: { status: 404, definite: true, message: "The cluster has no node with this id." },
  node_in_use: {
    status: 409,
    definite: true,
    message: "The node is live, or still holds partitions: stop it, and move its partitions off, before removing it.",
  },
  topic_exists: { status: 409, definite: true, message: "A topic with this name exists already." },
  child_exists: { status: 409, definite: true, message: "This child is attached to the topic already." },
  user_exists: { status: 409, definite: true, message: "A user with this name exists already." },
  no_dead_letter_topic: {
    status: 409,
    definite: true,
    message: "The topic has no dead_letter_topic, so nothing can be dead-lettered; set one with PATCH first.",
  },
  partitions_limit: {
    status: 409,
    definite: true,
    message: "The node holds as many partitions as limits.partitions allows; delete topics or raise the limit (and the process's descriptor limit).",
  },
  sequence_out_of_window: {
    status: 409,
    definite: true,
    message: "The sequence is older than the partition's dedupe window; nothing was stored, and whether an earlier send of it landed is not known.",
  },
  receipt_handle_gone: {
    status: 410,
    definite: false,
    message:
      "The receipt handle is not the live lease: it lapsed, was settled already, or a later delivery replaced it.",
  },
  payload_too_large: {
    status: 413,
    definite: true,
    message: "The message is over 1 MiB (1048576 bytes); split it or store it elsewhere and send a reference.",
  },
  batch_too_large: {
    status: 413,
    definite: true,
    message: "The batch is over the batch limit; send fewer or smaller messages per request.",
  },
  request_timeout: {
    status: 408,
    definite: true,
    message: "The request's headers or body did not arrive within the node's timeout; nothing was done. Send it again.",
  },
  stream_idle: {
    status: 408,
    definite: true,
    message: "The stream connection carried no frame for stream.idle_timeout_ms and had nothing in flight, so the node closed it; connect again (the SDK does so by itself).",
  },
  expectation_failed: { status: 417, definite: true, message: "Only the Expect: 100-continue expectation is supported." },
  header_fields_too_large: {
    status: 431,
    definite: true,
    message: "The request's headers are over the node's limit (16 KiB); send fewer or shorter headers.",
  },
  unsupported_media_type: { status: 415, definite: true, message: "This content type is not accepted here." },
  overloaded: {
    status: 429,
    definite: true,
    message: "The node has too many bytes waiting for fsync; retry after the Retry-After seconds.",
  },
  too_many_auth_attempts: {
    status: 429,
    definite: true,
    message: "Too many failed logins for this user are waiting; retry after the Retry-After seconds.",
  },
  too_many_password_checks: {
    status: 429,
    definite: true,
    message: "Too many password checks are in flight on this node; retry after the Retry-After seconds.",
  },
  too_many_waiters: {
    status: 429,
    definite: true,
    message: "Too many long polls are waiting on this node; retry after the Retry-After seconds.",
  },
  credit_exceeded: {
    status: 429,
    definite: true,
    message: "The stream connection sent more bytes than the credit the node gave it; wait for CREDIT frames before sending more (docs/api.md, \"Streaming protocol\").",
  },
  too_many_streams: {
    status: 429,
    definite: true,
    message: "As many stream connections are open on this node as limits.stream_connections allows; retry after the Retry-After seconds, or produce over HTTP.",
  },
  too_many_producers: {
    status: 429,
    definite: true,
    message: "As many producer ids are live as producers.ids_max allows; reuse producers or wait for idle ones to expire.",
  },
  internal: { status: 500, definite: false, message: "An internal error; the operation may or may not have happened." },
  unavailable: {
    status: 503,
    definite: true,
    message: "No partition of the topic can take this message now; retry shortly.",
  },
  shutting_down: { status: 503, definite: true, message: "The node is stopping; send the request to another node or retry." },
  storage_failed: {
    status: 500,
    definite: false,
    message: "The write could not be made durable; the message may or may not be stored.",
  },
  storage_unavailable: {
    status: 503,
    definite: true,
    message: "The node's storage cannot take this now (the disk is full, or no file descriptor is free); nothing was done. Free space or descriptors and retry.",
  },
  not_implemented: { status: 501, definite: true, message: "This is not built for this deployment yet; nothing was done." },
  timeout: { status: 504, definite: false, message: "The request took too long; it may or may not have happened." },
  // ---- cluster mode (docs/operations.md, "Cluster") ----
  move_conflict: {
    status: 409,
    definite: true,
    message: "The partition is being moved already, or another change won; read its placement and retry.",
  },
  not_owner: {
    status: 503,
    definite: true,
    message: "No node serves this partition now (its owner's lease lapsed, or it is frozen for a move); retry shortly.",
  },
  owner_unreachable: {
    status: 503,
    definite: true,
    message: "The node that owns the partition could not be reached, and nothing was sent to it; retry shortly.",
  },
  node_down: { status: 503, definite: true, message: "A node the operation needs is down; start it again, then retry." },
  control_plane_unavailable: {
    status: 503,
    definite: true,
    message: "The cluster's control plane (PostgreSQL) is unreachable: topics, users, grants and moves cannot change now; retry shortly.",
  },
  ownership_lost: {
    status: 503,
    definite: false,
    message: "The owner lost its lease on the partition while the write was in flight; the message may or may not be stored.",
  },
  no_quorum: {
    status: 503,
    definite: false,
    message: "A majority of the partition's replicas did not confirm the write in time; it may be stored on the leader. Retry (an idempotent producer re-sends it safely).",
  },
  not_enough_nodes: {
    status: 503,
    definite: true,
    message: "Fewer nodes are live than the replication factor asks for; start more nodes or ask for fewer copies.",
  },
  forward_failed: {
    status: 502,
    definite: false,
    message: "The request was sent to the partition's owner but no answer came back; it may or may not have happened.",
  },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof ERRORS;

/**
 * What a batch produce that failed in part knows of one of its messages (the `results` of a 502
 * `forward_failed` body, in request order): stored at this partition and offset; certainly not
 * stored (its part was refused definitely, with that code); or unknown (its part failed in a way
 * that may have stored it).
 */
export type BatchItemResult =
  | { status: "stored"; partition: number; offset: number }
  | { status: "not_stored"; code: string }
  | { status: "unknown"; code: string };

export interface ErrorBody {
  error: { code: string; message: string; results?: BatchItemResult[] };
}

/** An operating error with a row in the table: bad input, a missing topic, overload. */
export class NaradError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly definite: boolean;
  readonly retryAfterS: number | undefined;
  /** A batch that failed in part: what is known of each message, in request order. */
  readonly results: BatchItemResult[] | undefined;

  constructor(code: ErrorCode, message?: string, opts: { retryAfterS?: number; results?: BatchItemResult[] } = {}) {
    const spec: ErrorSpec = ERRORS[code];
    super(message ?? spec.message);
    this.name = "NaradError";
    this.code = code;
    this.status = spec.status;
    this.definite = spec.definite;
    this.retryAfterS = opts.retryAfterS;
    this.results = opts.results;
  }

  toBody(): ErrorBody {
    const error: ErrorBody["error"] = { code: this.code, message: this.message };
    if (this.results !== undefined) error.results = this.results;
    return { error };
  }
}

export function isErrorCode(code: string): code is ErrorCode {
  return Object.prototype.hasOwnProperty.call(ERRORS, code);
}
