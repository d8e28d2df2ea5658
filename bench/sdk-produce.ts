// What most users write: `await narad.produce(topic, msg)` from many concurrent tasks
// (BENCH_ONLY=sdk). The SDK's produce() from 64 and from 256 concurrent callers (closed loop, one
// 1 KiB message a call, the default 3-partition topic), with batching on (the default:
// src/client/batcher.ts) and off (`batching: false`, one request a call), beside nats.js
// `js.publish` at the same concurrency on a live nats-server (bench/peers.ts starts it; when it
// is not installed the reason is printed and the Narad rows are measured alone). The three loads
// of a concurrency run interleaved, medians of BENCH_ROUNDS runs; each row gives p50, p99 and the
// server's CPU a message. Issue 17's goal: batching on >= 3x nats.js at 64 callers, with a p99 no
// higher than NATS's.

import { Narad } from "../src/client/index.js";
import type { LoadResult } from "./main.js";
import { withNatsPublish, type Harness } from "./peers.js";

export interface SdkHarness extends Pick<Harness, "closedLoop" | "interleaved" | "row" | "fmt" | "payload"> {
  /** The node main.ts started, and its pid. */
  url: string;
  pid: number;
  createTopic(name: string, partitions: number): Promise<void>;
}

const TOPIC = "bench-sdk-produce";
const CALLERS = [64, 256] as const;

export async function benchSdkProduce(h: SdkHarness): Promise<void> {
  await h.createTopic(TOPIC, 3);
  const on = new Narad({ url: h.url });
  const off = new Narad({ url: h.url, batching: false });
  const produceOp = (c: Narad) => async () => {
    await c.produce(TOPIC, h.payload);
    return 1;
  };
  const np = { narad: h.pid };
  const about = (r: LoadResult, server: string) => `p50 ${r.p50Ms.toFixed(2)} ms, p99 ${r.p99Ms.toFixed(2)} ms, ${(r.cpuUsPerMsg[server] ?? NaN).toFixed(1)} µs server CPU a message`;
  const measure = async (nats: { pid: number; publish: () => Promise<number>; purge: () => Promise<void> } | undefined) => {
    for (const callers of CALLERS) {
      const loads = [(s: number) => h.closedLoop(callers, s, produceOp(on), np), (s: number) => h.closedLoop(callers, s, produceOp(off), np)];
      if (nats !== undefined) {
        loads.push(async (s: number) => {
          await nats.purge(); // not timed: the stream stays small
          return h.closedLoop(callers, s, nats.publish, { "nats-server": nats.pid });
        });
      }
      const [b, u, n] = (await h.interleaved(...loads)) as [LoadResult, LoadResult, LoadResult | undefined];
      const figure = `SDK produce(), ${callers} callers, 1 KiB, 3 partitions`;
      if (n !== undefined) {
        const goal = callers === 64 ? `>= 3x nats.js, p99 <= NATS p99 (${n.p99Ms.toFixed(2)} ms)` : `p99 <= NATS p99 (${n.p99Ms.toFixed(2)} ms)`;
        h.row(`${figure}, batching on (msgs/s; ${about(b, "narad")})`, h.fmt(b.perS), `nats.js js.publish ${h.fmt(n.perS)} (live; ${about(n, "nats-server")})`, b.perS / n.perS, goal);
        h.row(`${figure}, batching off (msgs/s; ${about(u, "narad")})`, h.fmt(u.perS), `nats.js js.publish ${h.fmt(n.perS)} (live)`, u.perS / n.perS, "(one request a call)");
      }
      h.row(`${figure}, batching on vs off (msgs/s)`, h.fmt(b.perS), `off ${h.fmt(u.perS)} (${about(u, "narad")})`, b.perS / u.perS, "");
    }
  };
  try {
    let measured = false;
    await withNatsPublish(h.payload, async (nats) => {
      measured = true;
      await measure(nats);
    });
    if (!measured) await measure(undefined);
  } finally {
    await Promise.all([on.close(), off.close()]);
  }
}
