// What a family gets to work with: the node under attack (a real process, security on or a dev
// node), raw-request helpers carrying the admin's credentials, the ledger of 202s, its own
// seeded random stream, its tally, and the size of the run (the short form in `npm test`, the
// long form in `npm run test:hostile`).

import type { RunningNode } from "../harness.js";
import type { Ledger } from "./ledger.js";
import type { Rng } from "./rng.js";
import type { Tally } from "./judge.js";
import { request, send, type Exchange, type SendOptions } from "./wire.js";

export const ADMIN_PASSWORD = "hostile-Admin-Secret-1";
export const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

export interface NodeSettings {
  /** limits.long_polls of the node, so the flood family can reach it. */
  longPolls: number;
  /** http.headers_timeout_ms and http.request_timeout_ms (the long form's timeout inputs). */
  headersTimeoutMs: number;
  requestTimeoutMs: number;
}

export interface Target {
  name: "secure" | "dev";
  node: RunningNode;
  /** The admin's Authorization value; undefined on the dev node. */
  auth: string | undefined;
  settings: NodeSettings;
}

export class FamilyCtx {
  constructor(
    readonly target: Target,
    readonly rng: Rng,
    readonly tally: Tally,
    readonly ledger: Ledger,
    readonly long: boolean,
  ) {}

  get port(): number {
    return this.target.node.port;
  }
  get secure(): boolean {
    return this.target.auth !== undefined;
  }
  /** A count for the short form or the long one. */
  n(short: number, long: number): number {
    return this.long ? long : short;
  }
  /** Host and (on a secure node) the admin's credentials, as raw header pairs. */
  headers(extra: [string, string][] = []): [string, string][] {
    return [["Host", "127.0.0.1"], ...(this.target.auth === undefined ? [] : [["Authorization", this.target.auth] as [string, string]]), ...extra];
  }
  /**
   * One well-formed raw request with the admin's headers and Connection: close, read to its
   * answer. Not half-closed, though it could be: a request that arrived whole before the client's
   * FIN is answered (src/http/server.ts, httpAllowHalfOpen; test/hardening.test.ts checks it).
   */
  raw(method: string, path: string, body?: Buffer | string, extra: [string, string][] = [], opts: SendOptions = {}): Promise<Exchange> {
    return send(this.port, request(method, path, this.headers([["Connection", "close"], ...extra]), body), { responses: 1, methods: [method], ...opts });
  }
  send(data: Buffer | string | (Buffer | string)[], opts: SendOptions = {}): Promise<Exchange> {
    return send(this.port, data, opts);
  }
  /** An ordinary request as the admin (setup and follow-up checks, not the inputs under test). */
  api(method: string, path: string, body?: unknown, headers: Record<string, string> = {}): Promise<Response> {
    return fetch(this.target.node.url + path, {
      method,
      body: body === undefined ? undefined : typeof body === "string" || Buffer.isBuffer(body) ? body : JSON.stringify(body),
      headers: { ...(this.target.auth === undefined ? {} : { authorization: this.target.auth }), ...headers },
    });
  }
  /** Creates a topic for the family (an existing one is fine) and watches it in the ledger. */
  async topic(name: string, partitions = 1, extra: Record<string, unknown> = {}): Promise<string> {
    const r = await this.api("POST", "/v1/topics", { name, partitions, ...extra });
    if (r.status !== 201 && r.status !== 409) throw new Error(`setup: creating topic ${name} answered ${r.status} ${await r.text()}`);
    this.ledger.watch(name);
    return name;
  }
  /** Produces one message as the admin and records its 202. */
  async produce(topic: string, payload: Buffer | string): Promise<boolean> {
    const p = Buffer.from(payload);
    const r = await this.api("POST", `/v1/topics/${topic}/messages`, p);
    const body = Buffer.from(await r.arrayBuffer());
    if (r.status === 202) this.ledger.record202(topic, body, [p]);
    return r.status === 202;
  }
  /** Records every 202 in an exchange of produces to `topic` whose payloads are known in order. */
  record(topic: string, ex: Exchange, payloads?: (Buffer | undefined)[]): void {
    ex.responses.forEach((r, i) => {
      if (r.status === 202) {
        const p = payloads?.[i];
        this.ledger.record202(topic, r.body, p === undefined ? undefined : [p]);
      }
    });
  }
}

export interface Family {
  name: string;
  /** The nodes it runs on: security on, and the dev node where the family needs it too. */
  nodes: Target["name"][];
  /** The nodes of the short form, when fewer (the long form runs on all of `nodes`). */
  shortNodes?: Target["name"][];
  run(ctx: FamilyCtx): Promise<void>;
}
