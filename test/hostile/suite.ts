// The hostile-input suite's runner. It starts real nodes through bin/narad (security on with
// NARAD_ADMIN_PASSWORD, and a dev node for the families that need one), then runs each family
// on each of its nodes while a bystander produces ordinary messages, and after each family
// checks what must hold whatever the input was:
//   - the process is alive and its log has no uncaught exception or fatal line;
//   - /healthz answers 200;
//   - every message answered 202 before and during the family is still there, with its bytes
//     (a replay of every partition of every topic the suite wrote to: 0 lost), and no payload
//     that must never be stored (partial, smuggled, refused) is.
// The result is a table per family and node: inputs tried, wrong answers (first examples:
// input, expected, got), answers that are known open items of issue 12, known items that now
// answer right ("fixed"), crashes and losses.

import { removeDir, startNode, waitFor, type RunningNode } from "../harness.js";
import { ADMIN_PASSWORD, basic, FamilyCtx, type Family, type NodeSettings, type Target } from "./context.js";
import { Tally } from "./judge.js";
import { Ledger } from "./ledger.js";
import { Rng } from "./rng.js";
import { garbage } from "./families/garbage.js";
import { smuggling } from "./families/smuggling.js";
import { paths } from "./families/paths.js";
import { json } from "./families/json.js";
import { partial } from "./families/partial.js";
import { pipelining } from "./families/pipelining.js";
import { handles } from "./families/handles.js";
import { auth } from "./families/auth.js";
import { floods } from "./families/floods.js";

export const FAMILIES: Family[] = [garbage, smuggling, paths, json, partial, pipelining, handles, auth, floods];

export interface SuiteOptions {
  seed: number;
  long: boolean;
  /** Only families whose name contains this. */
  only?: string;
  /** Progress lines (the runner prints them; the test keeps quiet). */
  log?: (line: string) => void;
}

export interface SuiteResult {
  seed: number;
  long: boolean;
  tallies: Tally[];
  wallMs: number;
  ledgerMessages: number;
}

const CRASH_RE = /uncaught|unhandled|"level":60|FATAL ERROR|Segmentation fault|JavaScript heap out of memory/i;

export async function runSuite(opts: SuiteOptions): Promise<SuiteResult> {
  const started = Date.now();
  const log = opts.log ?? (() => {});
  const settings: NodeSettings = opts.long
    ? { longPolls: 100, headersTimeoutMs: 2_000, requestTimeoutMs: 4_000 }
    : { longPolls: 8, headersTimeoutMs: 20_000, requestTimeoutMs: 60_000 };
  const env = {
    NARAD_LIMITS_LONG_POLLS: String(settings.longPolls),
    NARAD_HTTP_HEADERS_TIMEOUT_MS: String(settings.headersTimeoutMs),
    NARAD_HTTP_REQUEST_TIMEOUT_MS: String(settings.requestTimeoutMs),
  };
  const families = FAMILIES.filter((f) => opts.only === undefined || f.name.includes(opts.only));
  const wanted = new Set(families.flatMap((f) => nodesOf(f, opts.long)));
  const targets = new Map<Target["name"], Target>();
  const tallies: Tally[] = [];
  const ledgers = new Map<Target["name"], Ledger>();
  try {
    if (wanted.has("secure")) {
      const node = await startNode({ dev: false, env: { ...env, NARAD_ADMIN_PASSWORD: ADMIN_PASSWORD } });
      targets.set("secure", { name: "secure", node, auth: basic("admin", ADMIN_PASSWORD), settings });
    }
    if (wanted.has("dev")) targets.set("dev", { name: "dev", node: await startNode({ dev: true, env }), auth: undefined, settings });
    for (const t of targets.values()) {
      log(`node ${t.name}: ${t.node.url} (pid ${t.node.proc.pid}, data ${t.node.dataDir})`);
      const ledger = new Ledger(t.node.url, t.auth);
      ledgers.set(t.name, ledger);
      // Messages from before any family: they must survive all of them.
      const ctx = new FamilyCtx(t, Rng.forFamily(opts.seed, "baseline"), new Tally("baseline", t.name), ledger, opts.long);
      await ctx.topic("hostile-baseline", 3);
      for (let i = 0; i < 30; i++) await ctx.produce("hostile-baseline", `baseline-${i}-${"b".repeat(i * 37)}`);
    }
    for (const family of families) {
      for (const name of nodesOf(family, opts.long)) {
        const target = targets.get(name)!;
        const ledger = ledgers.get(name)!;
        const tally = new Tally(family.name, name);
        tallies.push(tally);
        if (!alive(target.node)) {
          tally.crashes.push("the node was not running when the family started");
          continue;
        }
        const familyStart = Date.now();
        const logFrom = target.node.output().length;
        const ctx = new FamilyCtx(target, Rng.forFamily(opts.seed, `${family.name}/${name}`), tally, ledger, opts.long);
        const bystander = startBystander(ctx);
        try {
          await family.run(ctx);
        } catch (e) {
          tally.notes.push(`the family stopped: ${e instanceof Error ? e.message : String(e)}`);
        }
        const by = await bystander.stop();
        if (by.wrong.length > 0) for (const w of by.wrong) tally.wrongFound({ input: "an ordinary produce during the family (bystander)", expected: "202, or an error of the table", got: w });
        if (by.refused > 0) tally.notes.push(`bystander: ${by.refused} of ${by.sent} produces refused`);
        await afterFamily(target, ledger, tally, logFrom);
        log(`${family.name} on ${name}: ${tally.inputs} inputs, ${tally.wrongCount} wrong, ${[...tally.known.values()].reduce((a, k) => a + k.count, 0)} known, ${tally.crashes.length} crashes, ${tally.losses.length} lost (${((Date.now() - familyStart) / 1000).toFixed(1)} s)`);
      }
    }
  } finally {
    for (const t of targets.values()) {
      await t.node.kill();
      await removeDir(t.node.dataDir);
    }
  }
  return { seed: opts.seed, long: opts.long, tallies, wallMs: Date.now() - started, ledgerMessages: [...ledgers.values()].reduce((a, l) => a + l.count, 0) };
}

/** The nodes a family runs on in this form of the suite. */
export function nodesOf(f: Family, long: boolean): Target["name"][] {
  return long ? f.nodes : (f.shortNodes ?? f.nodes);
}

function alive(node: RunningNode): boolean {
  return node.proc.exitCode === null && node.proc.signalCode === null;
}

async function afterFamily(target: Target, ledger: Ledger, tally: Tally, logFrom: number): Promise<void> {
  const node = target.node;
  const out = node.output().slice(logFrom);
  const bad = out.split("\n").find((l) => CRASH_RE.test(l));
  if (bad !== undefined) tally.crashes.push(`log: ${bad.slice(0, 300)}`);
  if (!alive(node)) {
    tally.crashes.push(`the process exited (code ${node.proc.exitCode}, signal ${node.proc.signalCode}); last output: ${node.output().slice(-400)}`);
    return;
  }
  try {
    await waitFor(async () => (await fetch(`${node.url}/healthz`).catch(() => undefined))?.status === 200, { timeoutMs: 30_000, intervalMs: 100, what: "/healthz 200" });
  } catch {
    tally.crashes.push("/healthz did not answer 200 within 30 s");
    return;
  }
  const v = await ledger.verify();
  tally.losses.push(...v.lost);
  for (const p of v.phantoms.slice(0, 5)) tally.wrongFound({ input: "an input that must not be stored", expected: "not in the replay", got: `stored: ${p}` });
  if (v.phantoms.length > 5) tally.wrongCount += v.phantoms.length - 5;
  tally.notes.push(`checked ${v.checked} accepted messages by replay`);
}

/** Ordinary produces, one at a time, for as long as the family runs: their 202s join the ledger. */
function startBystander(ctx: FamilyCtx): { stop(): Promise<{ sent: number; refused: number; wrong: string[] }> } {
  let running = true;
  let sent = 0;
  let refused = 0;
  const wrong: string[] = [];
  const topic = "hostile-baseline";
  const loop = (async () => {
    while (running) {
      const payload = Buffer.from(`bystander-${ctx.target.name}-${ctx.tally.family}-${sent}`);
      sent++;
      try {
        const r = await ctx.api("POST", `/v1/topics/${topic}/messages`, payload);
        const body = Buffer.from(await r.arrayBuffer());
        if (r.status === 202) ctx.ledger.record202(topic, body, [payload]);
        else {
          refused++;
          let code: unknown;
          try {
            code = (JSON.parse(body.toString()) as { error?: { code?: unknown } }).error?.code;
          } catch {
            code = undefined;
          }
          if (typeof code !== "string" && wrong.length < 3) wrong.push(`${r.status} ${body.toString().slice(0, 80)}`);
        }
      } catch (e) {
        refused++;
        if (wrong.length < 3) wrong.push(`no answer: ${(e as Error).message}`);
      }
      // One at a time; a short pause keeps it a bystander on a shared machine, not a load.
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    async stop() {
      running = false;
      await loop;
      return { sent, refused, wrong };
    },
  };
}
