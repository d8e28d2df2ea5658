// The checker's speed on a generated history: a simulated run of a correct broker with faults,
// about 900 000 lines (the drain adds a few thousand to the main phase's target), written to a temp file, then checked from the file (reading, validation
// and judgement all timed) in a child process, whose peak RSS is the memory figure. The history
// must be judged valid. `npm run bench` calls it.

import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { simulateToFile, type SimOptions } from "../src/verify/checker/simulate.js";

/** The bench's run: consumers keep up with three paths per message, slow handlers are few. */
export const BENCH_SHAPE: Omit<SimOptions, "seed"> = {
  producers: 3,
  consumers: 24,
  nodes: 2,
  partitions: 4,
  durationMs: Number.MAX_SAFE_INTEGER / 1e6,
  visibilityTimeoutMs: 500,
  faultEveryMs: 3000,
  // Slow handlers sleep through whole leases; a few keep consumers from falling behind.
  lapseRate: 0.002,
  extendRate: 0.002,
  nackRate: 0.02,
  slowAckRate: 0.002,
};

export interface CheckerBenchResult {
  events: number;
  seconds: number;
  eventsPerSecond: number;
  rssMiB: number;
  /** The whole process (`narad verify check FILE`, start to verdict): wall, CPU (user + system), peak RSS. */
  processSeconds: number;
  processCpuSeconds: number;
  processEventsPerSecond: number;
  processEventsPerCpuSecond: number;
  processRssMiB: number;
}

/** Checks the generated history `rounds` times (each in a fresh process); the median time counts. */
export async function benchChecker(eventsTarget = 896_600, seed = 1, rounds = 1): Promise<CheckerBenchResult> {
  const dir = await mkdtemp(join(tmpdir(), "narad-checker-bench-"));
  try {
    const path = join(dir, "history.jsonl");
    await simulateToFile({ ...BENCH_SHAPE, seed, mainPhaseEventsMax: eventsTarget }, path);
    // The check runs in a child process, so its peak memory is its own, not the generator's.
    const checkUrl = new URL("../src/verify/checker/check.js", import.meta.url).href;
    const code = `
      const { check } = await import(${JSON.stringify(checkUrl)});
      const t0 = process.hrtime.bigint();
      const report = await check(${JSON.stringify(path)});
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      process.stdout.write(JSON.stringify({ seconds, events: report.history.events, verdict: report.verdict,
        reason: report.reason, maxRssKiB: process.resourceUsage().maxRSS }));`;
    const runs: { seconds: number; events: number; maxRssKiB: number }[] = [];
    for (let i = 0; i < Math.max(1, rounds); i++) {
      const child = spawnSync(process.execPath, ["--input-type=module", "-e", code], { encoding: "utf8", maxBuffer: 1 << 20 });
      if (child.status !== 0) throw new Error(`checker bench: the check failed: ${child.stderr}`);
      const r = JSON.parse(child.stdout) as { seconds: number; events: number; verdict: string; reason: string; maxRssKiB: number };
      if (r.verdict !== "valid") throw new Error(`checker bench: the generated history was judged ${r.verdict}: ${r.reason}`);
      runs.push(r);
    }
    runs.sort((a, b) => a.seconds - b.seconds);
    const r = runs[(runs.length - 1) >> 1]!;
    const rss = Math.max(...runs.map((x) => x.maxRssKiB));
    // The whole command, as a user runs it: node's start, the CLI, the check and the summary. A
    // hook loaded first prints the process's own CPU time and peak RSS at exit, on stderr.
    const bin = new URL("../../bin/narad", import.meta.url).pathname;
    const hook = "data:text/javascript," + encodeURIComponent(
      `process.on("exit", () => { const u = process.resourceUsage(); process.stderr.write(" RUSAGE " + JSON.stringify({ cpu: (u.userCPUTime + u.systemCPUTime) / 1e6, rss: u.maxRSS })); });`,
    );
    const whole: { seconds: number; cpu: number; rss: number }[] = [];
    for (let i = 0; i < Math.max(1, rounds); i++) {
      const t0 = process.hrtime.bigint();
      const child = spawnSync(process.execPath, ["--import", hook, bin, "verify", "check", path], { encoding: "utf8", maxBuffer: 1 << 20 });
      const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
      if (child.status !== 0) throw new Error(`checker bench: narad verify check exited ${child.status}: ${child.stdout}${child.stderr}`);
      const u = JSON.parse(/RUSAGE (\{.*\})/.exec(child.stderr)![1]!) as { cpu: number; rss: number };
      whole.push({ seconds, cpu: u.cpu, rss: u.rss });
    }
    whole.sort((a, b) => a.seconds - b.seconds);
    const w = whole[(whole.length - 1) >> 1]!;
    const cpu = Math.min(...whole.map((x) => x.cpu));
    return {
      events: r.events,
      seconds: r.seconds,
      eventsPerSecond: Math.round(r.events / r.seconds),
      rssMiB: Math.round(rss / 1024),
      processSeconds: w.seconds,
      processCpuSeconds: cpu,
      processEventsPerSecond: Math.round(r.events / w.seconds),
      processEventsPerCpuSecond: Math.round(r.events / cpu),
      processRssMiB: Math.round(Math.max(...whole.map((x) => x.rss)) / 1024),
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
