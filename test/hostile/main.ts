// `npm run test:hostile`: the long form of the hostile-input suite (minutes). Prints the seed,
// the progress of each family and the table; exits 1 on any wrong answer outside the known
// items of issue 12, any crash or any loss.
//   node dist/test/hostile/main.js [--seed N] [--short] [--only FAMILY-SUBSTRING]

import { formatReport, verdict } from "./report.js";
import { runSuite } from "./suite.js";

const args = process.argv.slice(2);
const arg = (name: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : undefined;
};
const seed = arg("--seed") !== undefined ? Number(arg("--seed")) : Math.floor(Math.random() * 2 ** 31);
if (!Number.isSafeInteger(seed)) {
  console.error("--seed takes an integer");
  process.exit(2);
}
const long = !args.includes("--short");
console.log(`hostile-input suite: seed ${seed}, ${long ? "long" : "short"} form`);
const result = await runSuite({ seed, long, only: arg("--only"), log: (l) => console.log(l) });
console.log(formatReport(result));
process.exit(verdict(result).failed ? 1 : 0);
