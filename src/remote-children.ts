// The broker's RemoteSink (src/broker/children.ts) over the SDK: a push to a child topic on
// another Narad is a batch produce there, made with the link's URL and credentials. The broker
// may not import the SDK (test/layering.test.ts), so the wiring builds this and hands it in.
//
// One SDK client (one keep-alive pool) per URL and user, shared by every link open on it, and
// closed when the last of those links is released (detached, its topic deleted or dropped), so
// a node does not keep a pool to a cluster it no longer copies to. Limits: the number of clients
// is at most the number of remote links this node knows; each push waits at most
// REMOTE_PUSH_TIMEOUT_MS for its answer (then fails, and the copier retries with its back-off).

import { Narad, NaradPartialBatchError } from "./client/index.js";
import { CopyPartlyStored, REMOTE_PUSH_TIMEOUT_MS, type ChildLink, type RemoteChild, type RemoteSink } from "./broker/children.js";
import type { StoredRecord } from "./storage/types.js";

interface Shared {
  client: Narad;
  links: number;
}

export class SdkRemoteSink implements RemoteSink {
  private readonly clients = new Map<string, Shared>();

  open(link: ChildLink): RemoteChild {
    const id = `${link.url}|${link.credentials?.user ?? ""}`;
    let shared = this.clients.get(id);
    if (shared === undefined) {
      const client = new Narad({ url: link.url!, user: link.credentials?.user, password: link.credentials?.password, requestTimeoutMs: REMOTE_PUSH_TIMEOUT_MS });
      shared = { client, links: 0 };
      this.clients.set(id, shared);
    }
    shared.links++;
    const s = shared;
    let released = false;
    return {
      push: async (records: StoredRecord[]) => {
        if (released) throw new Error(`the link to ${link.topic} at ${link.url} was detached`);
        try {
          await s.client.produceBatch(
            link.topic,
            records.map((r) => ({ key: r.key === null ? undefined : r.key.toString("utf8"), payload: r.payload })),
          );
        } catch (e) {
          // Stored in part (its messages went to several owners there): the copier sends the rest again.
          if (e instanceof NaradPartialBatchError) throw new CopyPartlyStored(records.filter((_, i) => e.results[i]!.status === "stored").map((r) => r.offset), e);
          throw e;
        }
      },
      release: async () => {
        if (released) return;
        released = true;
        if (--s.links > 0 || this.clients.get(id) !== s) return; // others still use it, or the sink closed it
        this.clients.delete(id);
        await s.client.close();
      },
    };
  }

  /** Clients open now (one per URL and user with links). */
  get openClients(): number {
    return this.clients.size;
  }

  async close(): Promise<void> {
    const all = [...this.clients.values()];
    this.clients.clear();
    for (const s of all) await s.client.close();
  }
}
