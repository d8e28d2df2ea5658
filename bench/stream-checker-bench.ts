// The stream model checker's speed (SPEC.md "The stream model": as fast as the lease model,
// ≥ 500 000 events/s): a generated history of a correct run, a publisher and one consumer with a
// cut in the middle, judged in a fresh process so that nothing warmed up before counts.
//   node dist/bench/stream-checker-bench.js [lines]

import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { generateStreamHistory } from "../src/verify/checker/stream/generate.js";

export async function benchStreamChecker(lines: number): Promise<{ events: number; seconds: number; cpuSeconds: number; eventsPerSecond: number; eventsPerCpuSecond: number; verdict: string }> {
  const dir = await mkdtemp(join(tmpdir(), "narad-stream-bench-"));
  try {
    const path = join(dir, "history.jsonl");
    await writeFile(path, generateStreamHistory(lines));
    const url = new URL("../src/verify/checker/stream/index.js", import.meta.url).href;
    const script = `const m = await import(${JSON.stringify(url)}); const c0 = process.cpuUsage(); const t = process.hrtime.bigint(); const r = await m.checkStream(${JSON.stringify(path)}); const s = Number(process.hrtime.bigint() - t) / 1e9; const c = process.cpuUsage(c0); process.stdout.write(JSON.stringify({ events: r.history.events, seconds: s, cpuSeconds: (c.user + c.system) / 1e6, verdict: r.verdict, reason: r.reason, slow: r.history.slowLines }));`;
    const child = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" });
    if (child.status !== 0) throw new Error(`stream checker bench: the check failed: ${child.stderr}`);
    const r = JSON.parse(child.stdout) as { events: number; seconds: number; cpuSeconds: number; verdict: string; reason: string };
    if (r.verdict !== "valid") throw new Error(`stream checker bench: the generated history was judged ${r.verdict}: ${r.reason}`);
    return { events: r.events, seconds: r.seconds, cpuSeconds: r.cpuSeconds, eventsPerSecond: Math.round(r.events / r.seconds), eventsPerCpuSecond: Math.round(r.events / r.cpuSeconds), verdict: r.verdict };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const lines = Number(process.argv[2] ?? 900_000);
  const r = await benchStreamChecker(lines);
  process.stdout.write(`stream checker: ${r.events} events in ${r.seconds.toFixed(2)} s = ${r.eventsPerSecond.toLocaleString("en-US")} events/s; ${r.cpuSeconds.toFixed(2)} s of CPU = ${r.eventsPerCpuSecond.toLocaleString("en-US")} events per CPU second (${r.verdict})\n`);
}
