// Server configuration: one table of settings, each with its key (snake_case, dotted in the
// config file), its NARAD_* environment variable, its flag if it has one, its type, bounds and
// default. Precedence: flags > NARAD_* variables > the config file (JSON) > defaults.
// docs/operations.md lists the same table; test/config.test.ts keeps them in step.

import { readFileSync } from "node:fs";
import { DEFAULTS, LIMITS } from "./protocol/wire.js";

type Kind = "string" | "int" | "bool";

export interface Setting {
  key: string;
  kind: Kind;
  flag?: string;
  min?: number;
  max?: number;
  default?: string | number | boolean;
  /** A string setting's allowed values (anything else is one line at the start, not a stack trace later). */
  choices?: readonly string[];
  help: string;
}

const MiB = 1024 * 1024;

export const SETTINGS: Setting[] = [
  { key: "dev", kind: "bool", flag: "--dev", default: false, help: "security off, data in ./.narad unless --data-dir says otherwise (with --control-plane: a cluster node with security off)" },
  { key: "data_dir", kind: "string", flag: "--data-dir", help: "where the node keeps its data (default ./.narad with --dev, ./narad-data otherwise)" },
  { key: "listen", kind: "string", flag: "--listen", default: DEFAULTS.listen, help: "HOST:PORT to serve HTTP on (port 0 picks a free one)" },
  { key: "node_id", kind: "string", flag: "--node-id", help: "this node's id (default: generated once and kept in the data dir)" },
  { key: "new_identity", kind: "bool", flag: "--new-identity", default: false, help: "start although node.json is missing from a data dir that holds topics: a new node.json (a new id unless --node-id, a new handle secret)" },
  { key: "control_plane", kind: "string", flag: "--control-plane", help: "postgres:// URL of the cluster control plane" },
  { key: "advertise", kind: "string", flag: "--advertise", help: "URL other nodes use to reach this one (default: http://HOST:PORT of --listen, the port once bound)" },
  { key: "log_level", kind: "string", default: "info", choices: ["fatal", "error", "warn", "info", "debug", "trace", "silent"], help: "pino log level: fatal, error, warn, info, debug, trace, silent" },
  { key: "cluster.heartbeat_interval_ms", kind: "int", min: 50, max: 60_000, default: 1000, help: "cluster: heartbeat to the control plane this often" },
  { key: "cluster.node_lease_ms", kind: "int", min: 200, max: 600_000, default: 5000, help: "cluster: each heartbeat keeps the node live this long (database clock)" },
  { key: "cluster.lease_safety_margin_ms", kind: "int", min: 10, max: 60_000, default: 500, help: "cluster: the node stops acknowledging this long before others may see it down" },
  { key: "cluster.resync_interval_ms", kind: "int", min: 100, max: 600_000, default: 5000, help: "cluster: re-read the whole control-plane view this often" },
  { key: "cluster.forward_timeout_ms", kind: "int", min: 100, max: 600_000, default: 5000, help: "cluster: a forwarded request waits this long for the owner's answer (plus a long poll's wait)" },
  { key: "cluster.forward_connections", kind: "int", min: 1, max: 4096, default: 64, help: "cluster: keep-alive connections per peer for forwarded requests" },
  { key: "cluster.sync_timeout_ms", kind: "int", min: 0, max: 60_000, default: 1000, help: "cluster: a topic or user change waits this long for the other nodes to see it" },
  { key: "cluster.move_freeze_timeout_ms", kind: "int", min: 1000, max: 3_600_000, default: 60_000, help: "cluster: a partition frozen for a move this long by a move that did not finish is given back" },
  { key: "cluster.move_timeout_ms", kind: "int", min: 1000, max: 86_400_000, default: 600_000, help: "cluster: the longest a partition move may take" },
  { key: "replication.ack_timeout_ms", kind: "int", min: 10, max: 600_000, default: 5000, help: "cluster: a write to a replicated partition waits this long for its acks mode (a majority with quorum), then answers 503 no_quorum" },
  { key: "producers.idle_expiry_ms", kind: "int", min: 1000, max: 366 * 24 * 3600_000, default: 7 * 24 * 3600_000, help: "a producer id unused this long is forgotten (its produces answer 400 unknown_producer)" },
  { key: "producers.dedupe_window_ms", kind: "int", min: 100, max: 7 * 24 * 3600_000, default: 300_000, help: "an idempotent re-send is recognised for at least this long after its first store (or the producer's last producers.window_sequences sequences, whichever is less)" },
  { key: "producers.window_sequences", kind: "int", min: 1, max: 10_000_000, default: 100_000, help: "sequences of one producer a partition's dedupe window keeps at least" },
  { key: "producers.dedupe_entries_max", kind: "int", min: 1000, max: 1_000_000_000, default: 10_000_000, help: "entries of all dedupe windows of the node; at it, the window taking a new sequence lets go of its oldest (their re-sends answer 409 sequence_out_of_window)" },
  { key: "producers.ids_max", kind: "int", min: 1, max: 100_000_000, default: 100_000, help: "producer ids kept at once; a mint past it answers 429 too_many_producers" },
  { key: "storage.segment_bytes", kind: "int", min: 4096, max: 1024 * MiB, default: 64 * MiB, help: "roll a segment at this size" },
  { key: "storage.segment_ms", kind: "int", min: 100, max: 7 * 24 * 3600_000, default: 3600_000, help: "roll a segment when its first record is this old" },
  { key: "storage.ack_flush_interval_ms", kind: "int", min: 1, max: 60_000, default: DEFAULTS.ackFlushIntervalMs, help: "write buffered acks to the OS this often" },
  {
    key: "storage.consumer_offset_commit_interval_ms",
    kind: "int",
    min: 1,
    max: 600_000,
    default: DEFAULTS.ackSyncIntervalMs,
    help: "fsync the ack logs this often",
  },
  { key: "storage.housekeeping_interval_ms", kind: "int", min: 10, max: 600_000, default: 1000, help: "check segment roll and retention this often" },
  { key: "storage.inline_fdatasync", kind: "bool", default: true, help: "a commit may fdatasync on the event loop's thread while nobody else can be waiting on it (saves two thread wakeups a commit; false: always on the threadpool)" },
  { key: "storage.idle_close_ms", kind: "int", min: 100, max: 86_400_000, default: 60_000, help: "a partition with no append or read this long lets its file descriptors go (opened again on its next use)" },
  { key: "limits.pending_sync_bytes", kind: "int", min: MiB, max: 4096 * MiB, default: 64 * MiB, help: "answer 429 when this many bytes wait for fsync" },
  { key: "limits.long_polls", kind: "int", min: 1, max: 1_000_000, default: 10_000, help: "answer 429 when this many long polls wait" },
  { key: "limits.partitions", kind: "int", min: 1, max: 10_000_000, help: "most partitions this node holds; a create or grow past it answers 409 partitions_limit (default: from the descriptor limit, (RLIMIT_NOFILE - max(256, RLIMIT_NOFILE/4)) / 4)" },
  { key: "limits.stream_connections", kind: "int", min: 1, max: 1_000_000, help: "most streaming-protocol connections open at once; a handshake past it answers 429 too_many_streams (default: half the descriptors kept for connections, max(256, RLIMIT_NOFILE/4) / 2)" },
  { key: "limits.consume_bytes", kind: "int", min: LIMITS.messageBytesMax, max: 256 * MiB, default: 8 * MiB, help: "largest payload total of one consume batch answer" },
  { key: "http.headers_timeout_ms", kind: "int", min: 100, max: 600_000, default: 20_000, help: "headers must arrive within this time" },
  { key: "http.request_timeout_ms", kind: "int", min: 100, max: 3_600_000, default: 60_000, help: "a whole request must arrive within this time" },
  { key: "http.keep_alive_timeout_ms", kind: "int", min: 100, max: 3_600_000, default: 65_000, help: "idle keep-alive connections close after this" },
  { key: "stream.idle_timeout_ms", kind: "int", min: 1000, max: 86_400_000, default: 300_000, help: "a stream connection with no frame read and nothing in flight this long gets GOAWAY stream_idle and is closed" },
  { key: "http.shutdown_grace_ms", kind: "int", min: 0, max: 600_000, default: 10_000, help: "on SIGTERM, wait this long for in-flight requests" },
  { key: "topic_defaults.partitions", kind: "int", min: 1, max: LIMITS.partitionsMax, default: DEFAULTS.partitions, help: "partitions of a new topic" },
  {
    key: "topic_defaults.visibility_timeout_ms",
    kind: "int",
    min: LIMITS.visibilityTimeoutMsMin,
    max: LIMITS.visibilityTimeoutMsMax,
    default: DEFAULTS.visibilityTimeoutMs,
    help: "lease length of a new topic",
  },
  { key: "topic_defaults.retention_ms", kind: "int", min: LIMITS.retentionMsMin, max: LIMITS.retentionMsMax, default: DEFAULTS.retentionMs, help: "retention of a new topic" },
];

export function envName(key: string): string {
  return "NARAD_" + key.replace(/\./g, "_").toUpperCase();
}

export type ConfigValues = Record<string, string | number | boolean | undefined>;

export class ConfigError extends Error {}

function coerce(s: Setting, raw: unknown, where: string): string | number | boolean {
  switch (s.kind) {
    case "bool":
      if (typeof raw === "boolean") return raw;
      if (raw === "1" || raw === "true") return true;
      if (raw === "0" || raw === "false" || raw === "") return false;
      throw new ConfigError(`${where}: ${s.key} must be true or false, not ${JSON.stringify(raw)}`);
    case "int": {
      const n = typeof raw === "number" ? raw : typeof raw === "string" && /^-?\d+$/.test(raw.trim()) ? Number(raw) : NaN;
      if (!Number.isSafeInteger(n)) throw new ConfigError(`${where}: ${s.key} must be an integer, not ${JSON.stringify(raw)}`);
      if ((s.min !== undefined && n < s.min) || (s.max !== undefined && n > s.max)) {
        throw new ConfigError(`${where}: ${s.key} must be from ${s.min} to ${s.max}, not ${n}`);
      }
      return n;
    }
    case "string":
      if (typeof raw !== "string" || raw === "") throw new ConfigError(`${where}: ${s.key} must be a non-empty string`);
      if (s.choices !== undefined && !s.choices.includes(raw)) throw new ConfigError(`${where}: ${s.key} must be one of ${s.choices.join(", ")}, not ${JSON.stringify(raw)}`);
      return raw;
  }
}

function flatten(obj: unknown, prefix: string, out: Record<string, unknown>, where: string): void {
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) throw new ConfigError(`${where}: expected a JSON object${prefix ? ` at ${prefix}` : ""}`);
  for (const [k, v] of Object.entries(obj)) {
    const key = prefix ? `${prefix}.${k}` : k;
    if (typeof v === "object" && v !== null && !Array.isArray(v)) flatten(v, key, out, where);
    else out[key] = v;
  }
}

/** Resolves every setting. `flags` holds values given on the command line, by key. */
export function resolveConfig(flags: Record<string, unknown>, env: NodeJS.ProcessEnv, configPath: string | undefined): ConfigValues {
  let file: Record<string, unknown> = {};
  if (configPath !== undefined) {
    let text: string;
    try {
      text = readFileSync(configPath, "utf8");
    } catch (e) {
      throw new ConfigError(`cannot read config file ${configPath}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (e) {
      throw new ConfigError(`config file ${configPath} is not valid JSON: ${(e as Error).message}`);
    }
    flatten(parsed, "", file, `config file ${configPath}`);
    for (const k of Object.keys(file)) {
      if (!SETTINGS.some((s) => s.key === k)) throw new ConfigError(`config file ${configPath}: unknown setting ${JSON.stringify(k)}`);
    }
  }
  const out: ConfigValues = {};
  for (const s of SETTINGS) {
    const e = env[envName(s.key)];
    if (flags[s.key] !== undefined) out[s.key] = coerce(s, flags[s.key], `flag ${s.flag ?? s.key}`);
    else if (e !== undefined) out[s.key] = coerce(s, e, `environment variable ${envName(s.key)}`);
    else if (file[s.key] !== undefined) out[s.key] = coerce(s, file[s.key], `config file ${configPath}`);
    else out[s.key] = s.default;
  }
  return out;
}
