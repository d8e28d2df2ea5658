// A workload worker: one child process of the driver, running one role on one or more lanes,
// each lane a logical client with its own HTTP connection and its own history process name.
//
// Design note. The worker never writes the history and never reads a clock for it: before each
// request it asks the driver to record the invoke and waits for `go`, and after the answer it
// tells the driver, which records the completion (protocol.ts explains why this is sound). If the
// driver goes away (the IPC channel closes) nothing can record this worker's operations any more,
// so it exits at once rather than act unrecorded.

import { Prng } from "../nemesis/index.js";
import { Lane, type OpRecorder } from "./ops.js";
import type { CompletionType, DriverMessage, OpF, WorkerMessage, WorkerSpec } from "./protocol.js";
import { Gate, Stopper, runConsumer, runProber, runProducer, runReplayer, deriveSeed } from "./roles.js";

/** Operations of one lane at most (a safety bound far above any run's). */
const LANE_OPS_MAX = 10_000_000;

function send(m: WorkerMessage): void {
  if (!process.connected) process.exit(3);
  process.send!(m);
}

class IpcRecorder implements OpRecorder {
  private readonly waiting = new Map<string, () => void>();

  invoke(p: string, f: OpF, value: Record<string, unknown>): Promise<void> {
    if (this.waiting.has(p)) throw new Error(`lane ${p} invoked with an operation pending`);
    return new Promise((resolve) => {
      this.waiting.set(p, resolve);
      send({ t: "inv", p, f, value });
    });
  }

  complete(p: string, type: CompletionType, value: Record<string, unknown>): void {
    send({ t: "done", p, type, value });
  }

  go(p: string): void {
    const w = this.waiting.get(p);
    this.waiting.delete(p);
    w?.();
  }
}

const recorder = new IpcRecorder();
const stopper = new Stopper();
const gate = new Gate();
let started = false;

async function runLane(spec: WorkerSpec, lane: Lane, laneIndex: number): Promise<void> {
  const prng = new Prng(deriveSeed(spec.seed, lane.process));
  const role = spec.role;
  switch (role.role) {
    case "producer":
      await runProducer(lane, role, prng, stopper, LANE_OPS_MAX, gate);
      return;
    case "consumer":
      await runConsumer(lane, role, prng, stopper, LANE_OPS_MAX);
      return;
    case "prober":
      if (laneIndex === 0) await runProber(lane, role, stopper);
      return;
    case "replayer":
      await runReplayer(lane, role, prng, stopper, LANE_OPS_MAX);
      return;
  }
}

async function run(spec: WorkerSpec): Promise<void> {
  const lanes = spec.processes.map(
    (p, i) =>
      new Lane(p, spec.urls, recorder, { requestTimeoutMs: spec.requestTimeoutMs, firstUrl: spec.worker + i, ...(spec.auth ? { auth: spec.auth } : {}), ...(spec.transport ? { transport: spec.transport } : {}) }),
  );
  let error: string | undefined;
  try {
    const results = await Promise.allSettled(lanes.map((l, i) => runLane(spec, l, i)));
    for (const r of results) if (r.status === "rejected") error ??= String((r.reason as Error)?.stack ?? r.reason);
  } finally {
    await Promise.all(lanes.map((l) => l.close()));
  }
  finish(error);
}

/** Reports `stopped`, then closes the channel once the message is handed to the OS. */
function finish(error: string | undefined): void {
  if (!process.connected) process.exit(3);
  process.send!(error !== undefined ? { t: "stopped", error } : { t: "stopped" }, undefined, {}, () => process.disconnect());
}

process.on("message", (m: DriverMessage) => {
  switch (m.t) {
    case "init":
      if (started) return;
      started = true;
      if (m.spec.gateClosed === true) gate.set(false);
      send({ t: "ready" });
      void run(m.spec).catch((e: Error) => finish(e.stack ?? e.message));
      return;
    case "go":
      recorder.go(m.p);
      return;
    case "stop":
      stopper.stop();
      return;
    case "gate":
      gate.set(m.open);
      // Every invoke a lane sent before it saw the gate closed is already on the channel, ahead of this.
      if (!m.open) send({ t: "gated" });
      return;
  }
});
// Without the driver nothing records what this worker does: stop at once.
process.on("disconnect", () => process.exit(0));
