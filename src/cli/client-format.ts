// Output of the client commands. People get short aligned text; `--json` gets one JSON value per
// line with the API's own snake_case names, so a script can switch between curl and the CLI.

import type { Message, MessageOrigin, ReplayedMessage, Topic } from "../client/index.js";

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** The payload as text when it is valid UTF-8, else undefined. */
export function asUtf8(payload: Uint8Array): string | undefined {
  try {
    return utf8.decode(payload);
  } catch {
    return undefined;
  }
}

/** A payload on one line for people: text with control characters escaped, or base64 for binary. */
export function printable(payload: Uint8Array): string {
  const s = asUtf8(payload);
  if (s === undefined) return `base64:${Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength).toString("base64")}`;
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u001f\u007f]/.test(s) ? JSON.stringify(s).slice(1, -1) : s;
}

export function topicJson(t: Topic): Record<string, unknown> {
  const out: Record<string, unknown> = {
    name: t.name,
    partitions: t.partitions,
    visibility_timeout_ms: t.visibilityTimeoutMs,
    retention_ms: t.retentionMs,
    replication_factor: t.replicationFactor,
    acks: t.acks,
    max_deliveries: t.maxDeliveries,
    dead_letter_topic: t.deadLetterTopic,
    owner: t.owner,
    children: t.children.map((c) => (c.delayMs === undefined ? { topic: c.topic, kind: c.kind } : { topic: c.topic, kind: c.kind, delay_ms: c.delayMs })),
    parent: t.parent,
  };
  if (t.createdAt !== undefined) out.created_at = t.createdAt;
  if (t.stats !== undefined) {
    const ps = (p: { partition: number; backlog: number; inFlight: number; oldestUnackedAgeMs: number }) => ({ partition: p.partition, backlog: p.backlog, in_flight: p.inFlight, oldest_unacked_age_ms: p.oldestUnackedAgeMs });
    out.stats = { backlog: t.stats.backlog, in_flight: t.stats.inFlight, oldest_unacked_age_ms: t.stats.oldestUnackedAgeMs, partitions: t.stats.partitions.map(ps) };
  }
  if (t.placement !== undefined) {
    out.placement = t.placement.map((p) => ({ partition: p.partition, node: p.node, epoch: p.epoch, replicas: p.replicas, in_sync: p.inSync }));
  }
  return out;
}

export function topicSummary(t: Topic): string {
  return `${t.partitions} partitions, visibility timeout ${t.visibilityTimeoutMs} ms, retention ${t.retentionMs} ms`;
}

export function topicDescription(t: Topic): string {
  const lines: [string, string][] = [
    ["name", t.name],
    ["partitions", String(t.partitions)],
    ["visibility timeout", `${t.visibilityTimeoutMs} ms`],
    ["retention", `${t.retentionMs} ms (${humanMs(t.retentionMs)})`],
    ["owner", t.owner ?? "-"],
  ];
  if (t.replicationFactor > 1) lines.push(["replication", `${t.replicationFactor} copies, acks ${t.acks}`]);
  if (t.maxDeliveries !== null || t.deadLetterTopic !== null) {
    lines.push(["dead letters", `${t.maxDeliveries === null ? "no delivery limit" : `after ${t.maxDeliveries} deliveries`}, to ${t.deadLetterTopic ?? "-"}`]);
  }
  if (t.createdAt !== undefined) lines.push(["created", new Date(t.createdAt).toISOString()]);
  if (t.parent !== null) lines.push(["parent", `${t.parent.topic} (${t.parent.kind})`]);
  lines.push([
    "children",
    t.children.length === 0 ? "-" : t.children.map((c) => `${c.topic} (${c.kind}${c.delayMs !== undefined ? `, ${c.delayMs} ms` : ""})`).join(", "),
  ]);
  if (t.stats !== undefined) {
    const line = (x: { backlog: number; inFlight: number; oldestUnackedAgeMs: number }) => `${x.backlog} unacked, ${x.inFlight} in flight, oldest ${ageText(x.oldestUnackedAgeMs)}`;
    lines.push(["backlog", line(t.stats)]);
    for (const p of t.stats.partitions) lines.push([`  partition ${p.partition}`, line(p)]);
  }
  if (t.placement !== undefined && t.replicationFactor > 1) {
    // One line a partition: its leader and epoch, its replicas, and which of them are in sync.
    for (const p of t.placement) {
      const behind = p.replicas.filter((n) => !p.inSync.includes(n));
      lines.push([`partition ${p.partition}`, `leader ${p.node} epoch ${p.epoch}, replicas ${p.replicas.join(",")}, in sync ${p.inSync.join(",")}${behind.length > 0 ? ` (behind: ${behind.join(",")})` : ""}`]);
    }
  } else if (t.placement !== undefined) {
    lines.push(["placement", t.placement.map((p) => `${p.partition}→${p.node}@${p.epoch}`).join(" ")]);
  }
  const w = Math.max(...lines.map(([k]) => k.length));
  return lines.map(([k, v]) => `${k.padEnd(w)}  ${v}`).join("\n") + "\n";
}

/** Rows as aligned columns, a header first. */
export function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const fmt = (r: string[]) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join("  ");
  return [fmt(header), ...rows.map(fmt)].join("\n") + "\n";
}

export function messageJson(m: Message, acked: boolean): string {
  const o: Record<string, unknown> = {
    topic: m.topic,
    partition: m.partition,
    offset: m.offset,
    key: m.key,
    delivery_count: m.deliveryCount,
    produced_at: m.producedAt,
    receipt_handle: m.receiptHandle,
    owner: m.owner,
    owner_boot: m.ownerBoot,
    acked,
    headers: m.headers,
    payload_base64: m.payload.toString("base64"),
  };
  if (m.origin !== null) o.origin = originJson(m.origin);
  const text = asUtf8(m.payload);
  if (text !== undefined) o.payload = text;
  return JSON.stringify(o) + "\n";
}

export function replayedJson(m: ReplayedMessage): string {
  const o: Record<string, unknown> = {
    partition: m.partition,
    offset: m.offset,
    key: m.key,
    produced_at: m.producedAt,
    headers: m.headers,
    ...(m.notBefore !== undefined ? { not_before: m.notBefore } : {}),
    payload_base64: m.payload.toString("base64"),
  };
  if (m.origin !== null) o.origin = originJson(m.origin);
  const text = asUtf8(m.payload);
  if (text !== undefined) o.payload = text;
  return JSON.stringify(o) + "\n";
}

/** A dead letter's origin with the API's names. */
function originJson(o: MessageOrigin): Record<string, unknown> {
  return { topic: o.topic, partition: o.partition, offset: o.offset, deliveries: o.deliveries, produced_at: o.producedAt };
}

export function replayedLine(m: ReplayedMessage): string {
  return `${m.offset}\t${m.key === null ? "-" : printable(Buffer.from(m.key))}\t${new Date(m.producedAt).toISOString()}\t${printable(m.payload)}\n`;
}

/** An age for people: ms, then seconds, then minutes, then hours. */
function ageText(ms: number): string {
  if (ms === 0) return "-";
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}

function humanMs(ms: number): string {
  const units: [number, string][] = [
    [86_400_000, "d"],
    [3_600_000, "h"],
    [60_000, "min"],
    [1000, "s"],
  ];
  for (const [size, name] of units) if (ms >= size && ms % size === 0) return `${ms / size} ${name}`;
  return `${ms} ms`;
}
