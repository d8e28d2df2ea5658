// Moving a partition to another node: `narad partition move TOPIC/P --to NODE`, or
// POST /v1/topics/{topic}/partitions/{p}/move {"to"}. There is one copy of every partition, so a
// move copies the log and its ack state, then switches the owner under a new epoch. The new owner
// drives it (any node that receives the request forwards it there):
//
//   1. beginMove (control plane): the partition is "moving" to the new owner at epoch E. Both
//      nodes must be live: a down owner's log cannot be copied, and an empty copy is never
//      promoted (node_down, 503).
//   2. Pre-copy: the segment files (.log) are copied while the old owner still serves.
//   3. Freeze: the old owner stops serving the partition and closes it: every append in flight
//      finishes its fsync first, acks and copy cursors are flushed and synced, and a marker file
//      records the freeze, so a restart of the old owner does not serve it again by mistake.
//      From here produces route to other partitions, and acks and leases of this partition answer
//      503 not_owner (definite) until the move ends.
//   4. Final copy: the manifest (name, size, SHA-256 of every file) is read; the segments' new
//      tails are appended to the pre-copied files, every other file is copied whole, and each
//      file's hash is checked. The files are synced and installed in the partition's directory.
//   5. completeMove (control plane, compare-and-set on E): the new owner, at epoch E+1. It opens
//      the partition at E+1; the old owner, told by notification, removes its copy.
// Any failure before step 5 aborts the move (abortMove, CAS on E) and the old owner opens the
// partition again. A failure of step 5's answer itself (PostgreSQL gone during COMMIT) leaves the
// outcome unknown: the installed files are kept, the old owner stays frozen, and both follow the
// placement once it can be read. An old owner frozen longer than `cluster.move_freeze_timeout_ms`
// aborts the move itself (src/cluster/ownership.ts).
//
// What a move costs clients (docs/operations.md): leases live in memory on the owner, so every
// message leased at the old owner is available again at once on the new one (its old handles
// answer 410); an ack answered 204 before the freeze is in the copied ack log; during the freeze
// the partition does not take produces (they go to other partitions) nor acks (503).

import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, open, readdir, rename, rm, stat } from "node:fs/promises";
import { dirname, join } from "node:path";
import { pipeline } from "node:stream/promises";
import type { Logger } from "pino";
import type { Broker } from "../broker/broker.js";
import { NaradError } from "../protocol/errors.js";
import { fsyncDir } from "../platform/files.js";
import type { Clock } from "../platform/clock.js";
import type { ControlPlane } from "./control-plane.js";
import { ControlPlaneUnavailable } from "./errors.js";
import { FROZEN_MARKER, type Ownership } from "./ownership.js";
import { PeerError, type Peers } from "./peers.js";
import { cpCall, cpError, errorFromPeer, type ClusterService } from "./service.js";
import { INTERNAL_PREFIX } from "./wire.js";

const SEGMENT_RE = /^\d{20}\.log$/;
const FILE_NAME_RE = /^[A-Za-z0-9._-]{1,128}$/;

export interface MoveResult {
  topic: string;
  partition: number;
  from: string;
  to: string;
  epoch: number;
}

export interface ManifestFile {
  name: string;
  size: number;
  sha256?: string;
}

export class Mover {
  private readonly log: Logger;
  private readonly me: string;

  constructor(
    private readonly o: {
      cp: ControlPlane;
      broker: Broker;
      ownership: Ownership;
      peers: Peers;
      service: ClusterService;
      nodeId: string;
      dataDir: string;
      clock: Clock;
      logger: Logger;
      /** How long the whole move may take, for the node that forwards the request. */
      moveTimeoutMs: number;
    },
  ) {
    this.log = o.logger.child({ module: "moves" });
    this.me = o.nodeId;
  }

  /**
   * Any node: checks the request and hands it to the node that drives the move: the target for a
   * partition with one copy; the leader for a replicated one, whose replica on `from` moves
   * (src/cluster/replication/replication.ts, moveReplica).
   */
  async move(topic: string, partition: number, to: string, from?: string): Promise<MoveResult> {
    const t = this.o.cp.topic(topic);
    if (t === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist.`);
    if (partition >= t.partitions) throw new NaradError("partition_not_found", `Topic ${topic} has partitions 0..${t.partitions - 1}.`);
    if (this.o.cp.node(to) === undefined) throw new NaradError("invalid_argument", `No node ${JSON.stringify(to)} is registered; see GET /v1/nodes.`);
    if (t.replication_factor > 1) return this.moveReplica(topic, partition, to, from);
    if (from !== undefined && from !== this.o.cp.partitionPlacement(topic, partition)?.node) {
      throw new NaradError("invalid_argument", `${topic}/${partition} has one copy, on ${this.o.cp.partitionPlacement(topic, partition)?.node}; leave out from, or name that node.`);
    }
    if (to === this.me) return this.drive(topic, partition);
    if (!this.o.peers.live(to)) throw new NaradError("node_down", `Node ${to} is down; start it before moving partitions to it.`);
    const res = await this.o.service.forward(to, {
      method: "POST",
      path: `${INTERNAL_PREFIX}/moves`,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ topic, partition }),
      waitMs: this.o.moveTimeoutMs,
    });
    if (res.status !== 200) throw errorFromPeer(res);
    return JSON.parse(res.body.toString("utf8")) as MoveResult;
  }

  /**
   * `accept_loss`: places a partition whose owner is down on `to`, copying nothing (what only the
   * down owner held is lost). docs/operations.md, "Retiring a node".
   */
  async reassignLost(topic: string, partition: number, to: string): Promise<MoveResult> {
    const t = this.o.cp.topic(topic);
    if (t === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist.`);
    if (partition >= t.partitions) throw new NaradError("partition_not_found", `Topic ${topic} has partitions 0..${t.partitions - 1}.`);
    const r = await cpCall(() => this.o.cp.reassignLost(topic, partition, to));
    this.log.warn({ topic, partition, from: r.from, to, epoch: r.epoch }, "partition placed on another node with its data given up (accept_loss)");
    return { topic, partition, from: r.from, to, epoch: r.epoch };
  }

  private async moveReplica(topic: string, partition: number, to: string, from: string | undefined): Promise<MoveResult> {
    const p = this.o.cp.partitionPlacement(topic, partition);
    if (p === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist.`);
    if (from === undefined) {
      throw new NaradError("invalid_argument", `${topic}/${partition} is replicated on ${p.replicas.join(", ")}: name the replica to move with "from".`);
    }
    if (!this.o.peers.live(p.node)) throw new NaradError("node_down", `The leader of ${topic}/${partition}, ${p.node}, is down; retry once a leader serves it.`);
    const res = await this.o.service.forward(p.node, {
      method: "POST",
      path: `${INTERNAL_PREFIX}/replica-moves`,
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ topic, partition, from, to, timeout_ms: this.o.moveTimeoutMs }),
      waitMs: this.o.moveTimeoutMs,
    });
    if (res.status !== 200) throw errorFromPeer(res);
    return JSON.parse(res.body.toString("utf8")) as MoveResult;
  }

  /** The new owner: runs the move (see the design note at the top). */
  async drive(topic: string, partition: number): Promise<MoveResult> {
    const t = this.o.cp.topic(topic);
    if (t === undefined) throw new NaradError("topic_not_found", `Topic ${JSON.stringify(topic)} does not exist.`);
    let begun: { owner: string; epoch: number };
    try {
      begun = await this.o.cp.beginMove(topic, partition, this.me);
    } catch (e) {
      throw cpError(e);
    }
    const { owner: from, epoch } = begun;
    if (!this.o.peers.live(from)) {
      await this.o.cp.abortMove(topic, partition, epoch).catch(() => undefined);
      throw new NaradError("node_down", `Node ${from}, the owner of ${topic}/${partition}, is down: its log is only there; start it again, then move.`);
    }
    await this.o.service.barrier([`topic:${topic}`]);
    const started = this.o.clock.monoMs();
    const staging = join(this.o.dataDir, "staging", `${randomBytes(6).toString("hex")}`);
    const finalDir = this.o.broker.placement.partitionDir(topic, t.incarnation, partition);
    let installed = false;
    this.log.info({ topic, partition, from, epoch }, "move started");
    try {
      await mkdir(staging, { recursive: true });
      // 2. Pre-copy the segments while the old owner serves.
      const pre = await this.manifest(from, topic, partition, epoch, false);
      let preBytes = 0;
      for (const f of pre) {
        if (!SEGMENT_RE.test(f.name)) continue;
        await this.fetch(from, topic, partition, epoch, f.name, 0, join(staging, f.name), false);
        preBytes += f.size;
      }
      // 3. Freeze.
      const fr = await this.o.service.forward(from, {
        method: "POST",
        path: `${INTERNAL_PREFIX}/partitions/${encodeURIComponent(topic)}/${partition}/freeze?epoch=${epoch}&to=${encodeURIComponent(this.me)}`,
      });
      if (fr.status !== 204) throw errorFromPeer(fr);
      const frozenAt = this.o.clock.monoMs();
      // 4. Final copy, checked.
      const fin = await this.manifest(from, topic, partition, epoch, true);
      let tailBytes = 0;
      for (const f of fin) {
        const dest = join(staging, f.name);
        const have = await sizeOf(dest);
        if (SEGMENT_RE.test(f.name) && have >= 0 && have <= f.size) {
          if (have < f.size) await this.fetch(from, topic, partition, epoch, f.name, have, dest, true);
          tailBytes += f.size - have;
        } else {
          await this.fetch(from, topic, partition, epoch, f.name, 0, dest, true);
          tailBytes += f.size;
        }
        if ((await sha256File(dest)) !== f.sha256) {
          await this.fetch(from, topic, partition, epoch, f.name, 0, dest, true);
          if ((await sha256File(dest)) !== f.sha256) throw new NaradError("forward_failed", `The copy of ${f.name} does not match the old owner's; the move was aborted.`);
        }
      }
      const wanted = new Set(fin.map((f) => f.name));
      for (const name of await readdir(staging)) if (!wanted.has(name)) await rm(join(staging, name), { force: true });
      for (const name of wanted) await syncFile(join(staging, name));
      await fsyncDir(staging);
      // Install where the partition lives, protected from reconcile until the switch.
      this.o.ownership.beginIncoming(topic, partition);
      await this.o.broker.placement.closePartition(topic, partition, false); // (never open here: the placement names the old owner)
      await rm(finalDir, { recursive: true, force: true });
      await mkdir(dirname(finalDir), { recursive: true });
      await rename(staging, finalDir);
      await fsyncDir(dirname(finalDir));
      installed = true;
      // 5. Switch.
      const placed = await this.o.cp.completeMove(topic, partition, this.me, epoch);
      this.o.ownership.endIncoming(topic, partition);
      await this.o.ownership.schedule(topic);
      // Every node (the old owner first of all) learns the new owner before the answer.
      await this.o.service.barrier([`topic:${topic}`]);
      this.log.info(
        { topic, partition, from, epoch: placed.epoch, preCopiedBytes: preBytes, frozenBytes: tailBytes, frozenMs: Math.round(this.o.clock.monoMs() - frozenAt), totalMs: Math.round(this.o.clock.monoMs() - started) },
        "move completed",
      );
      return { topic, partition, from, to: this.me, epoch: placed.epoch };
    } catch (e) {
      await rm(staging, { recursive: true, force: true }).catch(() => undefined);
      if (installed && e instanceof ControlPlaneUnavailable && e.mayHaveHappened) {
        // Unknown whether the switch happened: keep the files and follow the placement once known.
        void this.settleUncertain(topic, partition);
        throw new NaradError("timeout", `The control plane went away while the move of ${topic}/${partition} was committed; it may or may not have completed: check GET /v1/topics/${topic}.`);
      }
      this.o.ownership.endIncoming(topic, partition);
      if (installed) await rm(finalDir, { recursive: true, force: true }).catch(() => undefined);
      await this.o.cp.abortMove(topic, partition, epoch).catch((x: Error) => this.log.warn({ err: x.message }, "aborting the move failed; the old owner aborts it after its freeze timeout"));
      await this.o.service.barrier([`topic:${topic}`]);
      this.log.warn({ topic, partition, from, epoch, err: (e as Error).message }, "move aborted");
      if (e instanceof PeerError) throw new NaradError("owner_unreachable", `The old owner ${from} stopped answering during the copy (${e.message}); the move was aborted.`);
      throw cpError(e);
    }
  }

  private async settleUncertain(topic: string, partition: number): Promise<void> {
    for (let i = 0; i < 600; i++) {
      await new Promise((r) => setTimeout(r, 1000));
      try {
        await this.o.cp.refresh([`topic:${topic}`]);
      } catch {
        continue;
      }
      const p = this.o.cp.partitionPlacement(topic, partition);
      if (p?.state === "moving") continue;
      this.o.ownership.endIncoming(topic, partition);
      await this.o.ownership.schedule(topic);
      return;
    }
  }

  private async manifest(from: string, topic: string, partition: number, epoch: number, final: boolean): Promise<ManifestFile[]> {
    const res = await this.o.service.forward(from, {
      method: "GET",
      path: `${INTERNAL_PREFIX}/partitions/${encodeURIComponent(topic)}/${partition}/files?epoch=${epoch}&final=${final ? 1 : 0}`,
    });
    if (res.status !== 200) throw errorFromPeer(res);
    const files = (JSON.parse(res.body.toString("utf8")) as { files: ManifestFile[] }).files;
    for (const f of files) if (!FILE_NAME_RE.test(f.name) || f.name === FROZEN_MARKER) throw new NaradError("forward_failed", `The old owner listed a file with a bad name: ${JSON.stringify(f.name)}.`);
    return files;
  }

  /** Copies bytes [from, end) of a file of the old owner into dest (appending when from > 0). */
  private async fetch(node: string, topic: string, partition: number, epoch: number, name: string, from: number, dest: string, final: boolean): Promise<void> {
    const res = await this.o.peers.stream(node, {
      method: "GET",
      path: `${INTERNAL_PREFIX}/partitions/${encodeURIComponent(topic)}/${partition}/files/${encodeURIComponent(name)}?epoch=${epoch}&final=${final ? 1 : 0}&from=${from}`,
    });
    if (res.statusCode !== 200) {
      const chunks: Buffer[] = [];
      for await (const c of res.body) chunks.push(c as Buffer);
      throw errorFromPeer({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks) });
    }
    await pipeline(res.body, createWriteStream(dest, { flags: from === 0 ? "w" : "r+", start: from }));
  }

  // ---- the old owner's side -------------------------------------------------------------------

  private async checkSource(topic: string, partition: number, epoch: number, final: boolean): Promise<string> {
    const matches = () => {
      const p = this.o.cp.partitionPlacement(topic, partition);
      return p !== undefined && p.node === this.me && p.epoch === epoch && p.state === "moving";
    };
    // The driver's beginMove may not have reached this node's view yet.
    if (!matches()) await this.o.cp.refresh([`topic:${topic}`]).catch(() => undefined);
    const t = this.o.cp.topic(topic);
    if (t === undefined || !matches()) {
      throw new NaradError("move_conflict", `${topic}/${partition} is not moving from ${this.me} at epoch ${epoch}.`);
    }
    if (final && !this.o.ownership.isFrozen(topic, partition)) throw new NaradError("move_conflict", `${topic}/${partition} is not frozen here (this node restarted?); the move must start again.`);
    return this.o.broker.placement.partitionDir(topic, t.incarnation, partition);
  }

  /** The files of a partition being moved away; with hashes once it is frozen. */
  async localManifest(topic: string, partition: number, epoch: number, final: boolean): Promise<ManifestFile[]> {
    const dir = await this.checkSource(topic, partition, epoch, final);
    const out: ManifestFile[] = [];
    for (const name of (await readdir(dir)).sort()) {
      if (name === FROZEN_MARKER || name.endsWith(".tmp") || !FILE_NAME_RE.test(name)) continue;
      const st = await stat(join(dir, name));
      if (!st.isFile()) continue;
      out.push(final ? { name, size: st.size, sha256: await sha256File(join(dir, name)) } : { name, size: st.size });
    }
    return out;
  }

  /** A file of a partition being moved away, for the copy; checked like the manifest. */
  async localFile(topic: string, partition: number, epoch: number, name: string, final: boolean): Promise<string> {
    if (!FILE_NAME_RE.test(name) || name === FROZEN_MARKER) throw new NaradError("invalid_argument", `No file ${JSON.stringify(name)} in a partition.`);
    return join(await this.checkSource(topic, partition, epoch, final), name);
  }
}

async function sizeOf(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch {
    return -1;
  }
}

async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return h.digest("hex");
}

async function syncFile(path: string): Promise<void> {
  const fh = await open(path, "r+");
  try {
    await fh.sync();
  } finally {
    await fh.close();
  }
}
