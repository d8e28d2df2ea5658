// Receipt handles: one per delivery, authenticated, opaque to clients.
//
// A handle names one delivery of one message: (node, boot, partition, offset, delivery tag). The tag
// counts deliveries per partition within one boot, so a redelivery gets a new handle and an older
// one stops matching the live lease (410). The node cannot keep every handle it ever issued, yet
// it must tell a handle it issued (lapsed or replaced: 410) from one it never issued (forged: 400).
// So every handle carries a MAC, in two halves of 6 bytes:
//
// - the issuer half, keyed from the secret (the node's own, or in a cluster the cluster's, so any
//   owner can verify a handle another owner issued before a move) and the issuing (node number,
//   boot sequence): any node holding the secret tells a handle some owner issued (410 when it is
//   not the live lease) from a forged one or one of another topic (400);
// - the boot half, keyed from the same and the issuing process's boot id (random at every start,
//   ./identity.ts): only the process that minted the handle can verify it, and only a handle whose
//   boot half verifies can match a live lease. The boot sequence alone did not do: it comes from
//   node.json, and restoring an older node.json brought back a boot sequence already used, whose
//   handles (same partitions, offsets and delivery tags counted from 1 again) then settled the new
//   boot's leases. Now such a handle is from an earlier process, whatever its boot sequence: 410.
//
// A forgery must guess both halves (96 bits) to settle anything; guessing the issuer half alone
// (48 bits) only turns its 400 into a 410. Handles minted before the boot half existed carried
// one 12-byte MAC whose first 6 bytes are this issuer half, so they still answer 410.
//
// MAC: AES-128 as a pseudo-random function over one 16-byte block (a PRF on fixed-length input is
// a secure MAC), truncated. AES rather than HMAC because a batch of 100 handles is one cipher call
// per half (~55 ns a handle each here, against ~3 µs for an HMAC). The block includes the topic's
// incarnation id, so a handle presented to another topic, or to a topic deleted and created
// again, fails (400).
//
// Byte layout of a handle (base64url, 42 characters):
//   0      u8   version (2)
//   1..2   u16  node number of the owner that issued it (0 on a single node)
//   3..6   u32  boot sequence of that owner
//   7..8   u16  partition
//   9..14  u48  offset
//   15..18 u32  delivery tag
//   19..24      issuer half: first 6 bytes of AES-128-ECB(key(node, boot sequence), block)
//   25..30      boot half: first 6 bytes of AES-128-ECB(key(node, boot sequence, boot id), block)
// where block = u32 topic incarnation | u16 partition | u48 offset | u32 delivery tag.

import assert from "node:assert/strict";
import { createCipheriv, createHmac, timingSafeEqual, type Cipher } from "node:crypto";

const VERSION = 2;
const HANDLE_BYTES = 31;
const HANDLE_CHARS = 42;
/** Each half of the MAC. */
const HALF_BYTES = 6;
const OFFSET_MAX = 2 ** 48 - 1;

export interface HandleFields {
  nodeNum: number;
  bootSeq: number;
  partition: number;
  offset: number;
  tag: number;
}

/** A verified handle's fields; `current` when this very process minted it (its boot half verifies). */
export interface VerifiedHandle extends HandleFields {
  current: boolean;
}

type Item = Omit<HandleFields, "bootSeq" | "nodeNum">;

export class HandleCodec {
  /** Per issuer (node number, boot sequence): an AES-128-ECB cipher under its derived key. */
  private readonly ciphers = new Map<string, Cipher>();
  /** This process's boot half cipher. */
  private readonly bootCipher: Cipher;

  constructor(
    private readonly secret: Buffer,
    readonly currentNodeNum: number,
    readonly currentBootSeq: number,
    /** The boot id: random at every process start. */
    bootId: string,
  ) {
    assert.ok(bootId.length > 0, "the boot half needs the process's boot id");
    this.bootCipher = this.makeCipher(`narad-handle-key/${currentNodeNum}/${currentBootSeq}/${bootId}`);
  }

  private makeCipher(label: string): Cipher {
    const key = createHmac("sha256", this.secret).update(label).digest().subarray(0, 16);
    const c = createCipheriv("aes-128-ecb", key, null);
    c.setAutoPadding(false);
    return c;
  }

  /**
   * The issuer's cipher, made once and kept: ECB without padding turns each whole 16-byte block
   * into its output at once, so one cipher object serves every update() and is never finished.
   */
  private cipher(nodeNum: number, bootSeq: number): Cipher {
    const id = `${nodeNum}/${bootSeq}`;
    let c = this.ciphers.get(id);
    if (c === undefined) {
      c = this.makeCipher(`narad-handle-key/${id}`);
      if (this.ciphers.size > 256) this.ciphers.clear(); // a bound; ciphers are cheap to make again
      this.ciphers.set(id, c);
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

  /** Mints handles for deliveries of the current boot, one cipher call per MAC half for the lot. */
  mint(topicIncarnation: number, items: readonly Item[]): string[] {
    const blocks = HandleCodec.blocks(topicIncarnation, items);
    const issuer = HandleCodec.encrypt(this.cipher(this.currentNodeNum, this.currentBootSeq), blocks);
    const boot = HandleCodec.encrypt(this.bootCipher, blocks);
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
      issuer.copy(buf, 19, i * 16, i * 16 + HALF_BYTES);
      boot.copy(buf, 19 + HALF_BYTES, i * 16, i * 16 + HALF_BYTES);
      out[i] = buf.toString("base64url");
    }
    return out;
  }

  /**
   * Parses and authenticates handles presented to a topic. Returns, per handle, its fields or
   * null when it is malformed, forged, or of another topic; `current` says whether this process
   * minted it (only such a handle can be a live lease).
   */
  verify(topicIncarnation: number, handles: readonly string[]): (VerifiedHandle | null)[] {
    const parsed: ({ f: HandleFields; mac: Buffer } | null)[] = handles.map((h) => parse(h));
    const out: (VerifiedHandle | null)[] = new Array(handles.length).fill(null);
    // Group by issuer so each issuer's key is one cipher call.
    const byIssuer = new Map<string, number[]>();
    parsed.forEach((p, i) => {
      if (p === null) return;
      const id = `${p.f.nodeNum}/${p.f.bootSeq}`;
      const list = byIssuer.get(id);
      if (list) list.push(i);
      else byIssuer.set(id, [i]);
    });
    for (const idxs of byIssuer.values()) {
      const first = parsed[idxs[0]!]!.f;
      const blocks = HandleCodec.blocks(
        topicIncarnation,
        idxs.map((i) => parsed[i]!.f),
      );
      const issuer = HandleCodec.encrypt(this.cipher(first.nodeNum, first.bootSeq), blocks);
      const mine = first.nodeNum === this.currentNodeNum && first.bootSeq === this.currentBootSeq;
      const boot = mine ? HandleCodec.encrypt(this.bootCipher, blocks) : undefined;
      idxs.forEach((i, j) => {
        const p = parsed[i]!;
        if (!timingSafeEqual(p.mac.subarray(0, HALF_BYTES), issuer.subarray(j * 16, j * 16 + HALF_BYTES))) return;
        const current = boot !== undefined && timingSafeEqual(p.mac.subarray(HALF_BYTES), boot.subarray(j * 16, j * 16 + HALF_BYTES));
        out[i] = { ...p.f, current };
      });
    }
    return out;
  }
}

function parse(h: string): { f: HandleFields; mac: Buffer } | null {
  if (typeof h !== "string" || h.length !== HANDLE_CHARS || !/^[A-Za-z0-9_-]+$/.test(h)) return null;
  const b = Buffer.from(h, "base64url");
  if (b.length !== HANDLE_BYTES || b[0] !== VERSION) return null;
  const nodeNum = b.readUInt16BE(1);
  const bootSeq = b.readUInt32BE(3);
  // A boot sequence above ours is not refused as forged: restoring an older node.json lowers
  // ours, and the handles of the boots it forgot are stale (410), not forged. The boot half
  // keeps them from any live lease.
  if (bootSeq === 0) return null;
  const offset = b.readUIntBE(9, 6);
  if (offset > OFFSET_MAX) return null;
  return {
    f: { nodeNum, bootSeq, partition: b.readUInt16BE(7), offset, tag: b.readUInt32BE(15) },
    mac: b.subarray(19, 19 + 2 * HALF_BYTES),
  };
}
