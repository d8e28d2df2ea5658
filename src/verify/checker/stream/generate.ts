// A generated stream history of a correct run, for the checker's benchmark and its tests.

/**
 * A valid stream history of about `lines` lines in the recorder's layout: publishes (invoke, ok)
 * and deliveries a few seqs behind, a cut and its heal with evidence, then the drain.
 */
export function generateStreamHistory(lines: number): string {
  const out: string[] = [];
  let index = 0;
  let t = 0;
  const line = (process: string, type: string, f: string, value: string) => {
    t += 1000 + (index % 7) * 100;
    out.push(`{"index":${index++},"time_ns":${t},"process":"${process}","type":"${type}","f":"${f}","value":${value}}`);
  };
  line("driver", "ok", "config", `{"model":"stream","stream":"BENCH","system":"nats","client":"generated","api":"ordered"}`);
  const publishes = Math.floor((lines - 8) / 3);
  const behind = 5;
  let delivered = 0;
  for (let seq = 1; seq <= publishes; seq++) {
    line("p0", "invoke", "publish", `{"stream":"BENCH","msg":${seq}}`);
    line("p0", "ok", "publish", `{"seq":${seq}}`);
    if (seq === Math.floor(publishes / 2)) {
      line("nemesis", "invoke", "fault", `{"kind":"cut","mode":"reset"}`);
      line("nemesis", "ok", "fault", `{"kind":"cut","mode":"reset"}`);
      line("nemesis", "invoke", "fault", `{"kind":"heal"}`);
      line("nemesis", "ok", "fault", `{"kind":"heal","stopped":{"connections_reset":1}}`);
    }
    if (seq > behind) {
      delivered++;
      line("c0", "ok", "deliver", `{"msg":${delivered},"seq":${delivered}}`);
    }
  }
  line("c0", "invoke", "drain", `{"until_seq":${publishes}}`);
  while (delivered < publishes) {
    delivered++;
    line("c0", "ok", "deliver", `{"msg":${delivered},"seq":${delivered}}`);
  }
  line("c0", "ok", "drain", `{"seq":${publishes}}`);
  return out.join("\n") + "\n";
}
