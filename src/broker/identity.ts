// The node's identity in its data directory (node.json): its id, the secret that authenticates
// receipt handles, and a boot sequence counted up at every start. The boot id (random, per
// process) is what clients and the verification toolkit see change at a restart; the boot
// sequence keys receipt handles so that a handle from an earlier boot still verifies and answers
// 410 rather than 400.
//
// A missing node.json is made anew only in a data directory that holds no topics: beside topics
// it means the file was lost, and a new one would silently give the node another id (in a
// cluster: another member, which does not own the partitions on its disk) and another secret
// (every receipt handle out there would answer 400 instead of 410). So the start is refused,
// unless the operator says so (`newIdentity`, the --new-identity flag); restoring the file from a
// backup is the other way on. A corrupt node.json is always refused.

import { randomBytes } from "node:crypto";
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { readFileIfExists, writeFileAtomic } from "../platform/files.js";

/** Node ids travel in headers, URLs and the binary consume answer (one length byte). */
export const NODE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export interface NodeIdentity {
  nodeId: string;
  bootId: string;
  bootSeq: number;
  secret: Buffer;
  /** The disk was full: this boot's sequence is in memory only (the server warns; see below). */
  bootSeqUnsaved?: string;
}

/** Errnos of a disk with no room left: a start goes on read-mostly (docs/operations.md). */
const DISK_FULL = new Set(["ENOSPC", "EDQUOT"]);

interface NodeFile {
  node_id: string;
  secret_hex: string;
  boot_seq: number;
}

export class IdentityError extends Error {}

/** Directories of a data dir that hold topics (single node, cluster node). */
const TOPIC_DIRS = ["topics", "cluster"];

export async function loadIdentity(dataDir: string, nodeIdWanted: string | undefined, newIdentity = false): Promise<NodeIdentity> {
  const path = join(dataDir, "node.json");
  let file: NodeFile | undefined;
  const text = await readFileIfExists(path);
  if (text !== undefined) {
    try {
      const j = JSON.parse(text) as Partial<NodeFile>;
      if (typeof j.node_id !== "string" || !NODE_ID_RE.test(j.node_id) || typeof j.secret_hex !== "string" || !/^[0-9a-f]{64}$/.test(j.secret_hex) || !Number.isSafeInteger(j.boot_seq)) {
        throw new Error("missing or malformed fields");
      }
      file = j as NodeFile;
    } catch (e) {
      throw new IdentityError(`${path} is corrupt (${(e as Error).message}); restore it from a backup or move the data directory aside`);
    }
  }
  if (file === undefined && !newIdentity) {
    const held = await topicDirsIn(dataDir);
    if (held.length > 0) {
      throw new IdentityError(
        `${path} is missing but the data directory holds topics (${held.join(", ")}): restore node.json from a backup, or start with --new-identity to give this node a new id and handle secret (earlier receipt handles then answer 400)`,
      );
    }
  }
  if (file !== undefined && nodeIdWanted !== undefined && nodeIdWanted !== file.node_id) {
    throw new IdentityError(`data directory belongs to node ${file.node_id}, not ${nodeIdWanted}; use another --data-dir or drop --node-id`);
  }
  const next: NodeFile = {
    node_id: file?.node_id ?? nodeIdWanted ?? `node-${randomBytes(3).toString("hex")}`,
    secret_hex: file?.secret_hex ?? randomBytes(32).toString("hex"),
    boot_seq: (file?.boot_seq ?? 0) + 1,
  };
  if (next.boot_seq > 0xffffffff) throw new IdentityError(`${path}: boot sequence exhausted`);
  // A full disk must not keep the node from starting: the API that frees space (a topic delete)
  // is reached only through it. The boot sequence is then this boot's in memory only, and the
  // next boot may count to the same number; a receipt handle of this boot still never settles a
  // lease of that one, since handles carry a tag keyed with the random boot id (./handles.ts). The
  // server logs this at start.
  let bootSeqUnsaved: string | undefined;
  try {
    await writeFileAtomic(path, JSON.stringify(next, null, 2) + "\n");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (file === undefined || code === undefined || !DISK_FULL.has(code)) throw e;
    bootSeqUnsaved = code;
  }
  return {
    nodeId: next.node_id,
    bootId: randomBytes(8).toString("hex"),
    bootSeq: next.boot_seq,
    secret: Buffer.from(next.secret_hex, "hex"),
    ...(bootSeqUnsaved === undefined ? {} : { bootSeqUnsaved }),
  };
}

/** The topic directories of dataDir that are not empty (their names relative to it). */
async function topicDirsIn(dataDir: string): Promise<string[]> {
  const out: string[] = [];
  for (const d of TOPIC_DIRS) {
    try {
      if ((await readdir(join(dataDir, d))).length > 0) out.push(`${d}/`);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
  }
  return out;
}
