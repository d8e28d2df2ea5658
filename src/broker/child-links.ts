// A topic's links to its children, and where each copy goes (the copier, ./children.ts, decides
// when). On a single node, attach and detach change both topics' metadata here (through the
// MetadataStore); in a cluster they are control-plane changes (src/cluster/service.ts) that reach
// the broker as applied metadata. Either way the copy goes:
//   - to a local child on a single node: appended to the child's partitions, durable before the
//     copy counts (the same append and fsync as a produce);
//   - to a local child in a cluster: to the owners of the child's partitions (BrokerCluster);
//   - to a remote child: through the RemoteSink the wiring hands in (src/remote-children.ts, the
//     SDK), with one handle per remote link this node knows, opened when the link appears and
//     released when it goes, so the sink closes a URL's pool with its last link.
//
// Ordering (docs/architecture.md, "cursors before links"): an attach makes the child's copy
// cursors durable at the parent's current end before the link is written, so no message produced
// before the attach is copied and none after it is missed.

import type { Logger } from "pino";
import { NaradError } from "../protocol/errors.js";
import type { ChildJson } from "../protocol/wire.js";
import type { StoredRecord } from "../storage/types.js";
import type { BrokerCluster } from "./broker.js";
import type { ChildLink, CopySink, RemoteChild, RemoteSink } from "./children.js";
import type { MetadataStore } from "./metadata.js";
import type { BrokerMetrics } from "./metrics.js";
import type { Topic, TopicMeta } from "./topic.js";

export interface ChildLinksOptions {
  topics: Map<string, Topic>;
  store: MetadataStore;
  remote: RemoteSink;
  cluster: BrokerCluster | undefined;
  metrics: BrokerMetrics;
  logger: Logger;
  /** A topic by name; NaradError topic_not_found unless it exists. */
  topic: (name: string) => Topic;
  /** Appends copies to a local child's partitions; resolves once durable. */
  appendTo: (t: Topic, items: { key: Buffer | null; payload: Buffer }[]) => Promise<unknown>;
}

export class ChildLinks {
  /** The remote links this node knows, by parent and child: their sink handles. */
  private readonly remotes = new Map<string, { link: ChildLink; child: RemoteChild }>();

  constructor(private readonly o: ChildLinksOptions) {}

  /**
   * Attaches a child (single node). Its copy cursors start at the parent's current end, and are
   * made durable before the link is, so no message produced before the attach is ever copied.
   */
  async attach(parentName: string, link: ChildLink): Promise<ChildJson> {
    const parent = this.o.topic(parentName);
    const bad = (m: string) => new NaradError("invalid_child", m);
    if (link.kind === "replica") throw bad("Replica children keep a copy on other nodes and need a cluster (--control-plane); use a fanout child on one node.");
    if (parent.meta.parent !== null) throw bad(`${parentName} is a child of ${parent.meta.parent.topic}; a child cannot have children.`);
    if (parent.meta.children.some((c) => c.topic === link.topic && (c.kind === "remote") === (link.kind === "remote"))) {
      throw new NaradError("child_exists", `${link.topic} is attached to ${parentName} already.`);
    }
    let child: Topic | undefined;
    if (link.kind !== "remote") {
      if (link.topic === parentName) throw bad("A topic cannot be its own child.");
      child = this.o.topic(link.topic);
      if (child.meta.parent !== null) throw bad(`${link.topic} is a child of ${child.meta.parent.topic} already; a child has one parent.`);
      if (child.meta.children.length > 0) throw bad(`${link.topic} has children of its own; a child cannot have children.`);
    }
    return parent.serially(async () => {
      for (const c of parent.copiers) if (c !== undefined) await c.cursors.setNow(link.topic, c.partition.log.endOffset);
      if (child !== undefined) await this.save(child, { ...child.meta, parent: { topic: parentName, kind: link.kind } });
      await this.save(parent, { ...parent.meta, children: [...parent.meta.children, link] });
      this.o.logger.info({ parent: parentName, child: link.topic, kind: link.kind }, "child attached");
      return parent.toJson().children.find((c) => c.topic === link.topic)!;
    });
  }

  /** Detaches a child (single node). */
  async detach(parentName: string, childName: string): Promise<void> {
    const parent = this.o.topic(parentName);
    if (!parent.meta.children.some((c) => c.topic === childName)) {
      throw new NaradError("child_not_found", `${childName} is not a child of ${parentName}.`);
    }
    return parent.serially(() => this.unlink(parent, childName));
  }

  /** A deleted topic leaves its parent's children and frees its own children (single node). */
  async detachAll(t: Topic): Promise<void> {
    const parentName = t.meta.parent?.topic;
    const parent = parentName === undefined ? undefined : this.o.topics.get(parentName);
    if (parent !== undefined && !parent.deleted) await this.unlink(parent, t.meta.name);
    for (const l of t.meta.children) {
      const child = this.o.topics.get(l.topic);
      if (l.kind !== "remote" && child !== undefined && child.meta.parent?.topic === t.meta.name) await this.save(child, { ...child.meta, parent: null });
    }
  }

  private async unlink(parent: Topic, childName: string): Promise<void> {
    await this.save(parent, { ...parent.meta, children: parent.meta.children.filter((c) => c.topic !== childName) });
    for (const c of parent.copiers) if (c !== undefined) await c.cursors.setNow(childName, undefined);
    const child = this.o.topics.get(childName);
    if (child !== undefined && child.meta.parent?.topic === parent.meta.name) await this.save(child, { ...child.meta, parent: null });
    this.o.logger.info({ parent: parent.meta.name, child: childName }, "child detached");
  }

  private async save(t: Topic, next: TopicMeta): Promise<void> {
    await this.o.store.save(next);
    t.meta = next;
    this.syncRemotes(t);
  }

  /**
   * Opens a sink handle for each remote link of t not open yet, and releases those it no longer
   * has (all of them when t is deleted). Called whenever t's metadata changes, before its
   * partitions are opened (so a copier never meets a link without its handle).
   */
  syncRemotes(t: Topic): void {
    const prefix = `${t.meta.name}\0`;
    const want = new Map<string, ChildLink>();
    if (!t.deleted) for (const l of t.meta.children) if (l.kind === "remote") want.set(prefix + l.topic, l);
    for (const [key, h] of this.remotes) {
      if (!key.startsWith(prefix)) continue;
      const l = want.get(key);
      if (l !== undefined && l.url === h.link.url && l.credentials?.user === h.link.credentials?.user && l.credentials?.password === h.link.credentials?.password) continue;
      this.remotes.delete(key);
      void h.child.release().catch((e: Error) => this.o.logger.warn({ err: e.message }, "closing a remote child's client failed"));
    }
    for (const [key, l] of want) if (!this.remotes.has(key)) this.remotes.set(key, { link: l, child: this.o.remote.open(l) });
  }

  /** The copy sink of partition i of parent t. */
  sinkFor(parent: Topic, partition: number): CopySink {
    return (link, records) => this.copyTo(parent, link, records, partition);
  }

  /** Copies records into one child; resolves once they are durable there. */
  private async copyTo(parent: Topic, link: ChildLink, records: StoredRecord[], partition: number): Promise<void> {
    if (link.kind === "remote") {
      const h = this.remotes.get(`${parent.meta.name}\0${link.topic}`);
      if (h === undefined) throw new Error(`the remote child ${link.topic} of ${parent.meta.name} is detached`);
      await h.child.push(records);
      return;
    }
    if (this.o.cluster !== undefined) {
      await this.o.cluster.copyToChild(link.topic, records, link.kind === "replica" ? partition : undefined);
      this.o.metrics.childCopied.inc({ parent: parent.meta.name, child: link.topic }, records.length);
      return;
    }
    const child = this.o.topics.get(link.topic);
    if (child === undefined || child.deleted) throw new Error(`child topic ${link.topic} of ${parent.meta.name} is gone`);
    await this.o.appendTo(child, records.map((r) => ({ key: r.key, payload: r.payload })));
    this.o.metrics.childCopied.inc({ parent: parent.meta.name, child: link.topic }, records.length);
  }

  /** Releases every remote handle and closes the sink (the broker is closing). */
  async close(): Promise<void> {
    this.remotes.clear();
    await this.o.remote.close();
  }
}
