// `npm run test:hostile`: the long form of the hostile-input suite (test/hostile/), minutes.
// Passes its arguments on: --seed N (reproduce a run), --short (the npm test subset),
// --only SUBSTRING (one family). Exits non-zero on any crash, loss or wrong answer outside the
// known items of issue 12.
import { spawnSync } from "node:child_process";

const r = spawnSync(process.execPath, ["dist/test/hostile/main.js", ...process.argv.slice(2)], { stdio: "inherit" });
process.exit(r.status ?? 1);
