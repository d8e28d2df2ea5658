// Receipt handles: one per delivery, authenticated, opaque to clients.
//
// A handle names one delivery of one message: (node, boot, partition, offset, delivery tag). The tag
// counts deliveries per partition within one boot, so a redelivery gets a new handle and an older
// one stops matching the live lease (410). The node cannot keep every handle it ever issued, yet
// it must tell a handle it issued (lapsed or replaced: 410) from one it never issued (forged: 400).
// So every handle is authenticated, twice over:
//
// - a boot tag, keyed from the secret, the issuing (node number, boot sequence) and the issuing
//   process's boot id (random at every start, ./identity.ts): only the process that minted the
//   handle can check it, and only a handle whose boot tag checks can match a live lease. The boot
//   sequence alone did not do: it comes from node.json, and restoring an older node.json brought
//   back a boot sequence already used, whose handles (same partitions, offsets and delivery tags,
//   counted again from the start) then settled the new boot's leases. Now such a handle is from an
//   earlier process, whatever its boot sequence: 410.
// - a MAC over all the rest, the boot tag included, keyed from the secret (the node's own, or in
//   a cluster the cluster's, so any owner can verify a handle another owner issued before a move)
//   and the issuing (node number, boot sequence): any node holding the secret tells a handle some
//   process issued (410 unless it is the live lease) from a forged or edited one, or one of
//   another topic (400).
// Settling anything takes both (96 bits to guess); the MAC alone (48 bits) only turns a 400 into a
// 410. Handles of version 2 (before the boot tag: one 12-byte MAC) still verify, as an earlier
// process's.
//
// The primitive: AES-128 as a pseudo-random function (a PRF on fixed-length input is a secure
// MAC), truncated to 6 bytes; the MAC is the CBC-MAC of two blocks (fixed length, so also a PRF).
// AES rather than HMAC because a batch of 100 handles is a few cipher calls (~55 ns a handle and
// call here, against ~3 µs for an HMAC each). The block includes the topic's incarnation id, so a
// handle presented to another topic, or to a topic deleted and created again, fails (400).
//
// Byte layout of a handle (base64url, 42 characters):
//   0      u8   version (3)
//   1..2   u16  node number of the owner that issued it (0 on a single node)
//   3..6   u32  boot sequence of that owner
//   7..8   u16  partition
//   9..14  u48  offset
//   15..18 u32  delivery tag
//   19..24      boot tag: first 6 bytes of AES(kBoot, block)
//   25..30      MAC: first 6 bytes of AES(kMac, AES(kMac, block) XOR (boot tag | 10 zero bytes))
// where block = u32 topic incarnation | u16 partition | u48 offset | u32 delivery tag, and
// kBoot, kMac are derived from the secret by HMAC-SHA-256 over (node, boot sequence[, boot id]).
// Version 2: bytes 19..30 are the first 12 bytes of AES(kV2, block).
//
// One handle at a time (a single consume, a single ack: issue 17) has a path of its own, with the
// same bytes: the MAC's two AES calls are one call of AES-128-CBC under kMac (CBC with a zero IV
// over (block, boot tag | zeros) is that CBC-MAC), on a CBC cipher kept for the process whose
// chaining value is cancelled by XORing it into the first block; and the handles this process
// minted one at a time are remembered (at most RECENT_HANDLES_MAX), so checking one of them is a
// map lookup rather than two AES calls. Only the exact text minted finds its entry, with the topic
// incarnation it was minted for; anything else takes the full check.
//
// Runs computed ahead. Fresh messages are handed out in offset order, and a partition's delivery
// tags count up by one a lease, so single consumes of fresh messages mint (offset, tag),
// (offset + 1, tag + 1), ... on each partition. Once two mints of a partition follow each other
// so, the boot tags and MACs of its next MINT_RUN_HANDLES handles in that sequence are computed
// at once (three cipher calls for the run, where each handle alone costs two: a cipher call
// through node:crypto costs more than the AES in it), and the mints that follow the sequence take
// theirs from the run. A mint off the sequence (a redelivery) is minted alone; the next two in
// sequence start a new run. The bytes are the same either way: the run is the batch mint's
// arithmetic. At most MINT_RUNS_MAX partitions keep a run (all are dropped at the bound).

import assert from "node:assert/strict";
import { createCipheriv, createHmac, timingSafeEqual, type Cipher } from "node:crypto";

const VERSION = 3;
/** Minted before the boot tag existed; verified as an earlier process's. */
const VERSION_V2 = 2;
const HANDLE_BYTES = 31;
const HANDLE_CHARS = 42;
const TAG_BYTES = 6;
const EMPTY = Buffer.alloc(0);
const V2_MAC_BYTES = 12;
const OFFSET_MAX = 2 ** 48 - 1;
/** Handles minted one at a time and remembered for their check (see the top); the oldest go first. */
export const RECENT_HANDLES_MAX = 16_384;
/** Handles a run computed ahead holds (see the top), and the partitions that may keep one at once. */
export const MINT_RUN_HANDLES = 64;
export const MINT_RUNS_MAX = 1024;

export interface HandleFields {
  nodeNum: number;
  bootSeq: number;
  partition: number;
  offset: number;
  tag: number;
}

/** A verified handle's fields; `current` when this very process minted it (its boot tag checks). */
export interface VerifiedHandle extends HandleFields {
  current: boolean;
}

type Item = Omit<HandleFields, "bootSeq" | "nodeNum">;

interface Parsed {
  version: number;
  f: HandleFields;
  /** Bytes 19..30. */
  auth: Buffer;
}

/** One partition's run of handles computed ahead (see the top), and its last mint. */
interface MintRun {
  /** The first (offset, tag) of the run, and how many it holds (0: none yet). */
  offset: number;
  tag: number;
  count: number;
  /** Per handle of the run, 16 bytes each: AES(kBoot, block), and the MAC block. */
  boot: Buffer;
  mac: Buffer;
  /** The last (offset, tag) minted for the partition. */
  lastOffset: number;
  lastTag: number;
}

/** A remembered handle: what verify() would find in it. */
interface Recent {
  incarnation: number;
  partition: number;
  offset: number;
  tag: number;
}

export class HandleCodec {
  /** Per key label: an AES-128-ECB cipher under the derived key. */
  private readonly ciphers = new Map<string, Cipher>();
  /** This process's boot tag cipher. */
  private readonly bootCipher: Cipher;
  /** This process's MAC key (v3) as AES-128-CBC, and its chaining value: the last block it output. */
  private readonly macCbc: Cipher;
  private macChain = Buffer.alloc(16);
  /** The two blocks the CBC-MAC of one handle runs over. */
  private readonly pair = Buffer.alloc(32);
  /** The block of the one handle being minted or checked, 16 bytes. */
  private readonly block = Buffer.alloc(16);
  /** The handle being minted, 31 bytes. */
  private readonly one = Buffer.alloc(HANDLE_BYTES);
  /** Handles minted one at a time (see the top), and the same in a ring, the oldest at `recentAt`. */
  private readonly recent = new Map<string, Recent>();
  private readonly recentRing: (string | undefined)[] = new Array(RECENT_HANDLES_MAX);
  private recentAt = 0;
  /** Per partition (topic incarnation * 2^16 + partition), its run computed ahead (see the top). */
  private readonly runs = new Map<number, MintRun>();

  constructor(
    private readonly secret: Buffer,
    readonly currentNodeNum: number,
    readonly currentBootSeq: number,
    /** The boot id: random at every process start. */
    bootId: string,
  ) {
    assert.ok(bootId.length > 0, "the boot tag needs the process's boot id");
    this.bootCipher = this.makeCipher(`narad-handle-boot-key/${currentNodeNum}/${currentBootSeq}/${bootId}`);
    this.macCbc = this.makeCipher(`narad-handle-key-v3/${currentNodeNum}/${currentBootSeq}`, "aes-128-cbc");
  }

  private makeCipher(label: string, mode: "aes-128-ecb" | "aes-128-cbc" = "aes-128-ecb"): Cipher {
    const key = createHmac("sha256", this.secret).update(label).digest().subarray(0, 16);
    const c = createCipheriv(mode, key, mode === "aes-128-cbc" ? Buffer.alloc(16) : null);
    c.setAutoPadding(false);
    return c;
  }

  /**
   * This process's MAC of one block (16 bytes, to truncate) whose boot tag is `bootTag`: the
   * CBC-MAC of (block, bootTag | zeros) under kMac, in one call of the kept CBC cipher. Its
   * chaining value XORed into the first block cancels it, as a zero IV would.
   */
  private macOne(block: Buffer, bootTag: Buffer): Buffer {
    const pair = this.pair;
    const chain = this.macChain;
    for (let k = 0; k < 16; k++) pair[k] = block[k]! ^ chain[k]!;
    for (let k = 0; k < TAG_BYTES; k++) pair[16 + k] = bootTag[k]!;
    const out = this.macCbc.update(pair);
    assert.equal(out.length, 32); // CBC without padding holds nothing back
    const mac = out.subarray(16, 32);
    this.macChain = mac;
    return mac;
  }

  /**
   * One handle of the current boot (see the top): from its partition's run computed ahead when it
   * follows the run, else two cipher calls; remembered for its check.
   */
  mintOne(topicIncarnation: number, partition: number, offset: number, tag: number): string {
    tag >>>= 0;
    const key = topicIncarnation * 65536 + partition;
    let run = this.runs.get(key);
    if (run === undefined) {
      if (this.runs.size >= MINT_RUNS_MAX) this.runs.clear();
      run = { offset: 0, tag: 0, count: 0, boot: EMPTY, mac: EMPTY, lastOffset: -2, lastTag: 0 };
      this.runs.set(key, run);
    }
    let i = offset - run.offset;
    if (!(i >= 0 && i < run.count && ((tag - run.tag) >>> 0) === i)) {
      i = -1;
      // The second of two in sequence: the run starts here.
      if (offset === run.lastOffset + 1 && tag === ((run.lastTag + 1) >>> 0) && offset + MINT_RUN_HANDLES - 1 <= OFFSET_MAX) {
        this.computeRun(run, topicIncarnation, partition, offset, tag);
        i = 0;
      }
    }
    run.lastOffset = offset;
    run.lastTag = tag;
    let boot: Buffer;
    let mac: Buffer;
    let at = 0;
    if (i >= 0) {
      boot = run.boot;
      mac = run.mac;
      at = i * 16;
    } else {
      const block = this.oneBlock(topicIncarnation, partition, offset, tag);
      boot = HandleCodec.encrypt(this.bootCipher, block);
      mac = this.macOne(block, boot);
    }
    const buf = this.one;
    buf.writeUInt8(VERSION, 0);
    buf.writeUInt16BE(this.currentNodeNum, 1);
    buf.writeUInt32BE(this.currentBootSeq, 3);
    buf.writeUInt16BE(partition, 7);
    buf.writeUIntBE(offset, 9, 6);
    buf.writeUInt32BE(tag >>> 0, 15);
    for (let k = 0; k < TAG_BYTES; k++) {
      buf[19 + k] = boot[at + k]!; // byte by byte: Buffer#copy's checks cost more for 6 bytes
      buf[19 + TAG_BYTES + k] = mac[at + k]!;
    }
    const h = buf.toString("base64url");
    // A ring rather than the map's own order: taking a map's first key walks past every entry
    // deleted before it (~10 µs here once full).
    const oldest = this.recentRing[this.recentAt];
    if (oldest !== undefined) this.recent.delete(oldest);
    this.recentRing[this.recentAt] = h;
    this.recentAt = (this.recentAt + 1) % RECENT_HANDLES_MAX;
    this.recent.set(h, { incarnation: topicIncarnation, partition, offset, tag });
    return h;
  }

  /** Fills `run` with the boot tags and MACs of (offset + k, tag + k), k < MINT_RUN_HANDLES: the batch mint's three cipher calls. */
  private computeRun(run: MintRun, topicIncarnation: number, partition: number, offset: number, tag: number): void {
    const blocks = Buffer.allocUnsafe(MINT_RUN_HANDLES * 16);
    for (let k = 0; k < MINT_RUN_HANDLES; k++) {
      const at = k * 16;
      blocks.writeUInt32BE(topicIncarnation >>> 0, at);
      blocks.writeUInt16BE(partition, at + 4);
      blocks.writeUIntBE(offset + k, at + 6, 6);
      blocks.writeUInt32BE((tag + k) >>> 0, at + 12);
    }
    const boot = HandleCodec.encrypt(this.bootCipher, blocks);
    const kMac = this.cipher(VERSION, this.currentNodeNum, this.currentBootSeq);
    const chained = HandleCodec.encrypt(kMac, blocks);
    for (let k = 0; k < MINT_RUN_HANDLES; k++) for (let j = 0; j < TAG_BYTES; j++) chained[k * 16 + j]! ^= boot[k * 16 + j]!;
    run.offset = offset;
    run.tag = tag;
    run.count = MINT_RUN_HANDLES;
    run.boot = boot;
    run.mac = HandleCodec.encrypt(kMac, chained);
  }

  /** The block of one handle (see the top), in a buffer kept for it: a single handle's mint or check allocates none. */
  private oneBlock(topicIncarnation: number, partition: number, offset: number, tag: number): Buffer {
    const b = this.block;
    b.writeUInt32BE(topicIncarnation >>> 0, 0);
    b.writeUInt16BE(partition, 4);
    b.writeUIntBE(offset, 6, 6);
    b.writeUInt32BE(tag >>> 0, 12);
    return b;
  }

  /** One handle's check (verify() of one): a remembered one at once, any other through the full check. */
  verifyOne(topicIncarnation: number, h: string): VerifiedHandle | null {
    const r = this.recent.get(h);
    if (r !== undefined && r.incarnation === topicIncarnation) {
      return { nodeNum: this.currentNodeNum, bootSeq: this.currentBootSeq, partition: r.partition, offset: r.offset, tag: r.tag, current: true };
    }
    const p = parse(h);
    if (p === null || p.version !== VERSION || p.f.nodeNum !== this.currentNodeNum || p.f.bootSeq !== this.currentBootSeq) return this.verifyAll(topicIncarnation, [h])[0]!;
    const block = this.oneBlock(topicIncarnation, p.f.partition, p.f.offset, p.f.tag);
    if (!timingSafeEqual(p.auth.subarray(TAG_BYTES), this.macOne(block, p.auth).subarray(0, TAG_BYTES))) return null;
    const boot = HandleCodec.encrypt(this.bootCipher, block);
    return { ...p.f, current: timingSafeEqual(p.auth.subarray(0, TAG_BYTES), boot.subarray(0, TAG_BYTES)) };
  }

  /**
   * An issuer's cipher, made once and kept: ECB without padding turns each whole 16-byte block
   * into its output at once, so one cipher object serves every update() and is never finished.
   */
  private cipher(version: number, nodeNum: number, bootSeq: number): Cipher {
    const label = version === VERSION_V2 ? `narad-handle-key/${nodeNum}/${bootSeq}` : `narad-handle-key-v3/${nodeNum}/${bootSeq}`;
    let c = this.ciphers.get(label);
    if (c === undefined) {
      c = this.makeCipher(label);
      if (this.ciphers.size > 256) this.ciphers.clear(); // a bound; ciphers are cheap to make again
      this.ciphers.set(label, c);
    }
    return c;
  }

  private static blocks(topicIncarnation: number, items: readonly Item[]): Buffer {
    const blocks = Buffer.allocUnsafe(items.length * 16);
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      const at = i * 16;
      blocks.writeUInt32BE(topicIncarnation >>> 0, at);
      blocks.writeUInt16BE(it.partition, at + 4);
      blocks.writeUIntBE(it.offset, at + 6, 6);
      blocks.writeUInt32BE(it.tag >>> 0, at + 12);
    }
    return blocks;
  }

  private static encrypt(c: Cipher, blocks: Buffer): Buffer {
    const out = c.update(blocks);
    assert.equal(out.length, blocks.length); // ECB without padding holds nothing back
    return out;
  }

  /** The MACs (16 bytes each, to truncate) of blocks whose boot tags are `bootTag(i)`. */
  private static macs(c: Cipher, blocks: Buffer, bootTag: (i: number) => Buffer): Buffer {
    const chained = HandleCodec.encrypt(c, blocks);
    for (let i = 0; i < chained.length / 16; i++) {
      const t = bootTag(i);
      for (let k = 0; k < TAG_BYTES; k++) chained[i * 16 + k]! ^= t[k]!;
    }
    return HandleCodec.encrypt(c, chained);
  }

  /** Mints handles for deliveries of the current boot, three cipher calls for the lot (two for one). */
  mint(topicIncarnation: number, items: readonly Item[]): string[] {
    if (items.length === 1) return [this.mintOne(topicIncarnation, items[0]!.partition, items[0]!.offset, items[0]!.tag)];
    const blocks = HandleCodec.blocks(topicIncarnation, items);
    const boot = HandleCodec.encrypt(this.bootCipher, blocks);
    const macs = HandleCodec.macs(this.cipher(VERSION, this.currentNodeNum, this.currentBootSeq), blocks, (i) => boot.subarray(i * 16, i * 16 + TAG_BYTES));
    const out: string[] = new Array(items.length);
    const buf = Buffer.allocUnsafe(HANDLE_BYTES);
    buf.writeUInt8(VERSION, 0);
    buf.writeUInt16BE(this.currentNodeNum, 1);
    buf.writeUInt32BE(this.currentBootSeq, 3);
    for (let i = 0; i < items.length; i++) {
      const it = items[i]!;
      buf.writeUInt16BE(it.partition, 7);
      buf.writeUIntBE(it.offset, 9, 6);
      buf.writeUInt32BE(it.tag >>> 0, 15);
      boot.copy(buf, 19, i * 16, i * 16 + TAG_BYTES);
      macs.copy(buf, 19 + TAG_BYTES, i * 16, i * 16 + TAG_BYTES);
      out[i] = buf.toString("base64url");
    }
    return out;
  }

  /**
   * Parses and authenticates handles presented to a topic. Returns, per handle, its fields or
   * null when it is malformed, forged, edited, or of another topic; `current` says whether this
   * process minted it (only such a handle can be a live lease).
   */
  verify(topicIncarnation: number, handles: readonly string[]): (VerifiedHandle | null)[] {
    if (handles.length === 1) return [this.verifyOne(topicIncarnation, handles[0]!)];
    return this.verifyAll(topicIncarnation, handles);
  }

  /** verify() for any number of handles, grouped by issuer: a few cipher calls per issuer. */
  private verifyAll(topicIncarnation: number, handles: readonly string[]): (VerifiedHandle | null)[] {
    const parsed = handles.map((h) => parse(h));
    const out: (VerifiedHandle | null)[] = new Array(handles.length).fill(null);
    // Group by issuer (and version) so each key is a few cipher calls for the lot.
    const byIssuer = new Map<string, number[]>();
    parsed.forEach((p, i) => {
      if (p === null) return;
      const id = `${p.version}/${p.f.nodeNum}/${p.f.bootSeq}`;
      const list = byIssuer.get(id);
      if (list) list.push(i);
      else byIssuer.set(id, [i]);
    });
    for (const idxs of byIssuer.values()) {
      const first = parsed[idxs[0]!]!;
      const blocks = HandleCodec.blocks(
        topicIncarnation,
        idxs.map((i) => parsed[i]!.f),
      );
      const c = this.cipher(first.version, first.f.nodeNum, first.f.bootSeq);
      if (first.version === VERSION_V2) {
        const macs = HandleCodec.encrypt(c, blocks);
        idxs.forEach((i, j) => {
          const p = parsed[i]!;
          if (timingSafeEqual(p.auth, macs.subarray(j * 16, j * 16 + V2_MAC_BYTES))) out[i] = { ...p.f, current: false };
        });
        continue;
      }
      const macs = HandleCodec.macs(c, blocks, (j) => parsed[idxs[j]!]!.auth.subarray(0, TAG_BYTES));
      const mine = first.f.nodeNum === this.currentNodeNum && first.f.bootSeq === this.currentBootSeq;
      const boot = mine ? HandleCodec.encrypt(this.bootCipher, blocks) : undefined;
      idxs.forEach((i, j) => {
        const p = parsed[i]!;
        if (!timingSafeEqual(p.auth.subarray(TAG_BYTES), macs.subarray(j * 16, j * 16 + TAG_BYTES))) return;
        const current = boot !== undefined && timingSafeEqual(p.auth.subarray(0, TAG_BYTES), boot.subarray(j * 16, j * 16 + TAG_BYTES));
        out[i] = { ...p.f, current };
      });
    }
    return out;
  }
}

function parse(h: string): Parsed | null {
  if (typeof h !== "string" || h.length !== HANDLE_CHARS || !/^[A-Za-z0-9_-]+$/.test(h)) return null;
  const b = Buffer.from(h, "base64url");
  if (b.length !== HANDLE_BYTES || (b[0] !== VERSION && b[0] !== VERSION_V2)) return null;
  // 31 bytes leave 4 unused bits in the last character, which Buffer.from ignores: only the one
  // text the node minted is the handle (a variant would act on its lease as if it were it).
  if (b.toString("base64url") !== h) return null;
  const nodeNum = b.readUInt16BE(1);
  const bootSeq = b.readUInt32BE(3);
  // A boot sequence above ours is not refused as forged: restoring an older node.json lowers
  // ours, and the handles of the boots it forgot are stale (410), not forged. The boot tag keeps
  // them from any live lease.
  if (bootSeq === 0) return null;
  const offset = b.readUIntBE(9, 6);
  if (offset > OFFSET_MAX) return null;
  return {
    version: b[0]!,
    f: { nodeNum, bootSeq, partition: b.readUInt16BE(7), offset, tag: b.readUInt32BE(15) },
    auth: b.subarray(19, HANDLE_BYTES),
  };
}
