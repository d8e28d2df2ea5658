// A V8 CPU profile of a process Node started with `--import` of this file (NODE_OPTIONS), for the
// cluster nodes of bench/replication.ts: Node 20 does not allow --cpu-prof in NODE_OPTIONS, and
// the nodes are started through bin/narad. Profiling starts at once; the profile is written to
// $NARAD_CPU_PROFILE_DIR/PID.cpuprofile at exit (an orderly stop; a SIGKILLed node writes none).
// The in-thread inspector session answers synchronously, so the write finishes inside 'exit'.
import { Session } from "node:inspector";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const dir = process.env.NARAD_CPU_PROFILE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  session.post("Profiler.enable");
  session.post("Profiler.start");
  process.on("exit", () => {
    session.post("Profiler.stop", (err, r) => {
      if (!err) writeFileSync(join(dir, `${process.pid}.cpuprofile`), JSON.stringify(r.profile));
    });
  });
}
