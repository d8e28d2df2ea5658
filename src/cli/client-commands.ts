// The client commands of `narad`: topic, produce, consume, replay, user, grant. Each is a thin
// shell over the SDK (src/client), so the CLI and programs see exactly the same behaviour and
// the same typed errors; this file only parses arguments and prints.
//
// Conventions (docs/client.md): output for people by default and `--json` for machines; every
// failure is one line `narad: <code>: <message>` on stderr with the exit code of EXIT in
// client-support.ts (1 definite, 2 usage, 3 ambiguous, 4 cannot connect). Message bodies go to
// stdout as raw bytes, so `narad consume t > file` stores exactly what was produced.

import { InvalidArgumentError, type Command } from "commander";
import type { GrantAction, Message, Narad, UpdateTopicOptions } from "../client/index.js";
import { LIMITS } from "../protocol/wire.js";
import { messageJson, replayedJson, replayedLine, table, topicDescription, topicJson, topicSummary } from "./client-format.js";
import { UsageError, clientAction, intArg, readLine, readPayload, reportError, usageExits, withConnection } from "./client-support.js";

const GRANT_ACTIONS: readonly GrantAction[] = ["produce", "consume", "create", "admin"];

type Opts = Record<string, unknown>;

function out(s: string | Uint8Array): void {
  process.stdout.write(s);
}

function json(v: unknown): void {
  out(JSON.stringify(v) + "\n");
}

/** A leaf command with the connection options and usage-error handling every client command has. */
function leaf(parent: Command, spec: string, description: string): Command {
  return usageExits(withConnection(parent.command(spec).description(description)));
}

export function registerClientCommands(program: Command): void {
  registerTopic(program);
  registerProduce(program);
  registerConsume(program);
  registerReplay(program);
  registerUser(program);
  registerGrant(program);
}

function topicOptions(cmd: Command): Command {
  return cmd
    .option("--partitions <n>", "number of partitions", intArg("--partitions", 1))
    .option("--visibility-timeout-ms <ms>", "lease length of a consumed message", intArg("--visibility-timeout-ms", 1))
    .option("--retention-ms <ms>", "how long messages are kept", intArg("--retention-ms", 1));
}

/**
 * --max-deliveries N (1..1000) or none; --dead-letter-topic T or none (clears it). Parsed here to
 * a number or the word "none" (commander reads a parser's null as no value); deadLetterChange
 * turns "none" into null.
 */
function deadLetterOptions(cmd: Command): Command {
  return cmd
    .option("--max-deliveries <n>", `deliveries of a message before it moves to the dead-letter topic (${LIMITS.maxDeliveriesMin}..${LIMITS.maxDeliveriesMax}, or none: unlimited)`, (v: string) => {
      if (v === "none") return v;
      const n = intArg("--max-deliveries", LIMITS.maxDeliveriesMin)(v);
      if (n > LIMITS.maxDeliveriesMax) throw new InvalidArgumentError(`--max-deliveries is at most ${LIMITS.maxDeliveriesMax} (or none).`);
      return n;
    })
    .option("--dead-letter-topic <topic>", "where messages go once their deliveries ran out (an existing topic, or none)");
}

function deadLetterChange(o: Opts): { maxDeliveries?: number | null; deadLetterTopic?: string | null } {
  const out: { maxDeliveries?: number | null; deadLetterTopic?: string | null } = {};
  if (o.maxDeliveries !== undefined) out.maxDeliveries = o.maxDeliveries === "none" ? null : (o.maxDeliveries as number);
  if (o.deadLetterTopic !== undefined) out.deadLetterTopic = o.deadLetterTopic === "none" ? null : (o.deadLetterTopic as string);
  return out;
}

function acksArg(v: unknown): "leader" | "quorum" | undefined {
  if (v === undefined) return undefined;
  if (v !== "leader" && v !== "quorum") throw new UsageError(`--acks must be leader or quorum, not ${JSON.stringify(v)}`);
  return v;
}

function registerTopic(program: Command): void {
  const topic = usageExits(program.command("topic").description("create, list, describe, update and delete topics"));

  deadLetterOptions(topicOptions(leaf(topic, "create <name>", "create a topic")))
    .option("--replication-factor <n>", "copies of each partition, 1 to 5 (above 1 needs a cluster)", intArg("--replication-factor", 1))
    .option("--acks <mode>", "what a 202 waits for: leader or quorum (default quorum with more than one copy)")
    .option("--json", "print the topic as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        const t = await c.createTopic({
          name,
          partitions: o.partitions as number | undefined,
          visibilityTimeoutMs: o.visibilityTimeoutMs as number | undefined,
          retentionMs: o.retentionMs as number | undefined,
          replicationFactor: o.replicationFactor as number | undefined,
          acks: acksArg(o.acks),
          ...deadLetterChange(o),
        });
        if (o.json) json(topicJson(t));
        else out(`created topic ${t.name} (${topicSummary(t)})\n`);
      }),
    );

  leaf(topic, "list", "list topics")
    .option("--json", "print {\"topics\": [...]} as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts) => {
        const topics = await c.listTopics();
        if (o.json) return json({ topics: topics.map(topicJson) });
        if (topics.length === 0) return out("no topics\n");
        out(
          table(
            ["NAME", "PARTITIONS", "VISIBILITY_MS", "RETENTION_MS", "OWNER"],
            topics.map((t) => [t.name, String(t.partitions), String(t.visibilityTimeoutMs), String(t.retentionMs), t.owner ?? "-"]),
          ),
        );
      }),
    );

  leaf(topic, "describe <name>", "show a topic")
    .option("--json", "print the topic as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        const t = await c.getTopic(name);
        if (o.json) json(topicJson(t));
        else out(topicDescription(t));
      }),
    );

  leaf(topic, "purge <name>", "settle every message of the topic now, leased or not (admin or its owner)")
    .option("--json", "print {\"purged\": N} as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        const n = await c.purgeTopic(name);
        if (o.json) json({ purged: n });
        else out(`purged ${n} messages from ${name}\n`);
      }),
    );

  deadLetterOptions(topicOptions(leaf(topic, "update <name>", "raise partitions, change the visibility timeout, retention, acks mode or dead letters")))
    .option("--acks <mode>", "a replicated topic's acks mode: leader or quorum")
    .option("--json", "print the topic as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        const change: UpdateTopicOptions = {};
        if (o.partitions !== undefined) change.partitions = o.partitions as number;
        if (o.visibilityTimeoutMs !== undefined) change.visibilityTimeoutMs = o.visibilityTimeoutMs as number;
        if (o.retentionMs !== undefined) change.retentionMs = o.retentionMs as number;
        if (o.acks !== undefined) change.acks = acksArg(o.acks);
        Object.assign(change, deadLetterChange(o));
        if (Object.keys(change).length === 0) {
          throw new UsageError("nothing to change: give --partitions, --visibility-timeout-ms, --retention-ms, --acks, --max-deliveries or --dead-letter-topic");
        }
        const t = await c.updateTopic(name, change);
        if (o.json) json(topicJson(t));
        else out(`updated topic ${t.name} (${topicSummary(t)})\n`);
      }),
    );

  leaf(topic, "redrive <dlq>", "produce the messages of a dead-letter topic again to their origin topic (or --to), then ack them there")
    .option("--to <topic>", "produce them all to this topic instead of each one's origin")
    .option("--max-messages <n>", "stop after this many (default: until the dead-letter topic is empty)", intArg("--max-messages", 1))
    .option("--json", "print {\"moved\": N, \"skipped\": K} as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, dlq: string) => {
        // One request moves at most LIMITS.redriveMessagesDefault; a long run is many, with progress.
        const limit = o.maxMessages as number | undefined;
        let moved = 0;
        let skipped = 0;
        for (;;) {
          const want = Math.min(LIMITS.redriveMessagesDefault, limit === undefined ? LIMITS.redriveMessagesDefault : limit - moved);
          if (want <= 0) break;
          const r = await c.redrive(dlq, { maxMessages: want, ...(o.to !== undefined ? { to: o.to as string } : {}) });
          moved += r.moved;
          skipped = Math.max(skipped, r.skipped);
          if (r.moved + r.skipped < want || r.moved === 0) break;
          if (!o.json) process.stderr.write(`narad: ${moved} moved so far\n`);
        }
        if (o.json) json({ moved, skipped });
        else out(`moved ${moved} message${moved === 1 ? "" : "s"} from ${dlq}${o.to !== undefined ? ` to ${o.to as string}` : " to their origin topics"}${skipped > 0 ? `; ${skipped} without an origin left there (give --to)` : ""}\n`);
      }),
    );

  leaf(topic, "delete <name>", "delete a topic and its messages")
    .option("--json", "print {\"deleted\": NAME}")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        await c.deleteTopic(name);
        if (o.json) json({ deleted: name });
        else out(`deleted topic ${name}\n`);
      }),
    );
}

function registerProduce(program: Command): void {
  leaf(program, "produce <topic> [message]", "produce one message: the argument, --file, or stdin; prints partition and offset")
    .option("--key <key>", "message key: the same key goes to the same partition")
    .option("--file <path>", "read the message bytes from a file (- is stdin)")
    .option("--delay-ms <ms>", "not delivered before this many ms after it is stored (0..7 days)", intArg("--delay-ms"))
    .option("--header <name=value>", "a header stored with the message (repeat for more)", (v: string, prev: string[] = []) => [...prev, v])
    .option("--json", "print {\"partition\", \"offset\"} as JSON")
    .option("--idempotent", "produce idempotently: re-send an ambiguous answer with the same sequence until it is definite (stored once); prints the producer id and sequence")
    .option("--producer-id <id>", "with --idempotent: the producer id to use (default: a new one), e.g. to send again what an earlier run could not confirm")
    .option("--sequence <n>", "with --producer-id: the message's sequence (default 0)", intArg("--sequence"))
    .action(
      clientAction(async (c: Narad, o: Opts, topic: string, message: string | undefined) => {
        if (message !== undefined && o.file !== undefined) throw new UsageError("give either MESSAGE or --file, not both");
        if ((o.producerId !== undefined || o.sequence !== undefined) && o.idempotent !== true) throw new UsageError("--producer-id and --sequence go with --idempotent");
        if (o.sequence !== undefined && o.producerId === undefined) throw new UsageError("--sequence needs --producer-id");
        let headers: Record<string, string> | undefined;
        for (const h of (o.header as string[] | undefined) ?? []) {
          const eq = h.indexOf("=");
          if (eq <= 0) throw new UsageError(`--header ${JSON.stringify(h)} is not NAME=VALUE`);
          (headers ??= {})[h.slice(0, eq)] = h.slice(eq + 1);
        }
        if (o.idempotent === true && (headers !== undefined || o.delayMs !== undefined)) throw new UsageError("--header and --delay-ms do not go with --idempotent yet");
        const payload = message !== undefined ? Buffer.from(message, "utf8") : await readPayload(o.file as string | undefined);
        const key = o.key as string | undefined;
        if (o.idempotent === true) {
          const p = c.producer({ idempotent: true, producerId: o.producerId as string | undefined, nextSequence: o.sequence as number | undefined });
          const r = await p.produce(topic, payload, { key });
          const producerId = await p.id();
          if (o.json) json({ partition: r.partition, offset: r.offset, producer_id: producerId, sequence: r.sequence, duplicate: r.duplicate });
          else out(`partition ${r.partition} offset ${r.offset}${r.duplicate ? " (duplicate: stored before)" : ""} producer ${producerId} sequence ${r.sequence}\n`);
          return;
        }
        const r = await c.produce(topic, payload, {
          key,
          ...(headers !== undefined ? { headers } : {}),
          ...(o.delayMs !== undefined ? { delayMs: o.delayMs as number } : {}),
        });
        if (o.json) json({ partition: r.partition, offset: r.offset });
        else out(`partition ${r.partition} offset ${r.offset}\n`);
      }),
    );
}

function registerConsume(program: Command): void {
  leaf(program, "consume <topic>", "lease messages, print them and ack them")
    .option("--wait-ms <ms>", `long poll: wait up to this long for a message (0..${LIMITS.waitMsMax})`, intArg("--wait-ms"), 0)
    .option("--no-ack", "leave the message leased: it comes back after the visibility timeout")
    .option("--count <n>", "consume up to this many messages (stops at the first empty wait)", intArg("--count", 1), 1)
    .option("--json", "one JSON line per message with its metadata and payload_base64")
    .action(
      clientAction(async (c: Narad, o: Opts, topic: string) => {
        const waitMs = o.waitMs as number;
        if (waitMs > LIMITS.waitMsMax) throw new UsageError(`--wait-ms is at most ${LIMITS.waitMsMax}`);
        const count = o.count as number;
        const ack = o.ack !== false;
        let got = 0;
        while (got < count) {
          const m = await c.consume(topic, { waitMs });
          if (m === null) break;
          got++;
          // Print before acking: a message that was acked but never shown would be lost to the
          // user; one shown but not acked only comes back.
          if (!o.json) printRaw(m, count > 1);
          if (ack) {
            try {
              await m.ack();
            } catch (err) {
              if (o.json) out(messageJson(m, false));
              reportError(err, `message at partition ${m.partition} offset ${m.offset} was printed but not acked; it may be delivered again`);
              return;
            }
          }
          if (o.json) out(messageJson(m, ack));
        }
        if (got === 0 && process.stderr.isTTY) process.stderr.write(`narad: no message available on ${topic}\n`);
      }),
    );
}

/** Raw bytes, so a redirect gets exactly what was produced; separators only where needed. */
function printRaw(m: Message, many: boolean): void {
  out(m.payload);
  const endsWithNewline = m.payload.length > 0 && m.payload[m.payload.length - 1] === 0x0a;
  if (many || (process.stdout.isTTY && !endsWithNewline)) out("\n");
}

function registerReplay(program: Command): void {
  leaf(program, "replay <topic>", "read a partition in offset order, acked or not, without leasing")
    .requiredOption("--partition <p>", "partition number", intArg("--partition"))
    .option("--offset <n>", "first offset (default: the earliest retained)", intArg("--offset"), 0)
    .option("--limit <n>", "most messages to print (default: up to the end of the partition)", intArg("--limit", 1))
    .option("--json", "one JSON line per message")
    .action(
      clientAction(async (c: Narad, o: Opts, topic: string) => {
        const limit = o.limit as number | undefined;
        let n = 0;
        if (!o.json && process.stdout.isTTY) out("OFFSET\tKEY\tPRODUCED_AT\tPAYLOAD\n");
        const pageSize = Math.min(limit ?? LIMITS.replayLimitMax, LIMITS.replayLimitMax);
        for await (const m of c.replayAll(topic, o.partition as number, o.offset as number, { pageSize })) {
          out(o.json ? replayedJson(m) : replayedLine(m));
          if (limit !== undefined && ++n >= limit) break;
        }
      }),
    );
}

function registerUser(program: Command): void {
  const user = usageExits(program.command("user").description("manage users (admin only)"));

  leaf(user, "add <name>", "create a user; the password comes from --new-password or the first line of stdin")
    .option("--new-password <password>", "the new user's password (visible to other local users in the process list; prefer stdin)")
    .option("--json", "print the user as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        if (o.newPassword === undefined && process.stdin.isTTY) process.stderr.write(`password for ${name}: `);
        const password = (o.newPassword as string | undefined) ?? (await readLine());
        if (password.length === 0) throw new UsageError("empty password: give --new-password or write it on stdin");
        const u = await c.createUser({ name, password });
        if (o.json) json({ name: u.name, created_at: u.createdAt });
        else out(`created user ${u.name}\n`);
      }),
    );

  leaf(user, "passwd <name>", "change a password (your own, or anyone's as admin); the new one from --new-password or stdin")
    .option("--new-password <password>", "the new password (visible to other local users in the process list; prefer stdin)")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        if (o.newPassword === undefined && process.stdin.isTTY) process.stderr.write(`new password for ${name}: `);
        const password = (o.newPassword as string | undefined) ?? (await readLine());
        if (password.length === 0) throw new UsageError("empty password: give --new-password or write it on stdin");
        await c.setUserPassword(name, password);
        out(`changed the password of ${name}\n`);
      }),
    );

  leaf(user, "list", "list users")
    .option("--json", "print {\"users\": [...]} as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts) => {
        const users = await c.listUsers();
        if (o.json) json({ users: users.map((u) => ({ name: u.name, created_at: u.createdAt })) });
        else out(users.length === 0 ? "no users\n" : users.map((u) => `${u.name}\n`).join(""));
      }),
    );

  leaf(user, "delete <name>", "delete a user")
    .option("--json", "print {\"deleted\": NAME}")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        await c.deleteUser(name);
        if (o.json) json({ deleted: name });
        else out(`deleted user ${name}\n`);
      }),
    );
}

function grantArgs(action: string, pattern: string | undefined): { action: GrantAction; pattern?: string } {
  if (!(GRANT_ACTIONS as readonly string[]).includes(action)) {
    throw new UsageError(`unknown action ${JSON.stringify(action)}: use one of ${GRANT_ACTIONS.join(", ")}`);
  }
  if (action === "admin" && pattern !== undefined) throw new UsageError("admin takes no pattern");
  if (action !== "admin" && pattern === undefined) throw new UsageError(`${action} needs a PATTERN: a topic name or a prefix like orders-*`);
  return pattern === undefined ? { action: action as GrantAction } : { action: action as GrantAction, pattern };
}

function registerGrant(program: Command): void {
  const grant = usageExits(program.command("grant").description("manage what users may do (admin only)"));
  const actionHelp = `one of ${GRANT_ACTIONS.join(", ")}`;

  leaf(grant, "add <user> <action> [pattern]", `allow USER to ACTION (${actionHelp}) on topics matching PATTERN`)
    .option("--json", "print the grant as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string, action: string, pattern: string | undefined) => {
        const g = await c.addGrant(name, grantArgs(action, pattern));
        if (o.json) json(g);
        else out(`granted ${g.action}${g.pattern !== null ? ` on ${g.pattern}` : ""} to ${name}\n`);
      }),
    );

  leaf(grant, "list <user>", "list a user's grants")
    .option("--json", "print {\"grants\": [...]} as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string) => {
        const grants = await c.listGrants(name);
        if (o.json) return json({ grants });
        if (grants.length === 0) return out(`no grants for ${name}\n`);
        out(table(["ACTION", "PATTERN"], grants.map((g) => [g.action, g.pattern ?? "-"])));
      }),
    );

  leaf(grant, "revoke <user> <action> [pattern]", "take a grant away")
    .option("--json", "print the revoked grant as JSON")
    .action(
      clientAction(async (c: Narad, o: Opts, name: string, action: string, pattern: string | undefined) => {
        const g = grantArgs(action, pattern);
        await c.revokeGrant(name, g);
        if (o.json) json({ revoked: { action: g.action, pattern: g.pattern ?? null }, user: name });
        else out(`revoked ${g.action}${g.pattern !== undefined ? ` on ${g.pattern}` : ""} from ${name}\n`);
      }),
    );
}

// The exit-code table, for main.ts and for tests.
export { EXIT } from "./client-support.js";
