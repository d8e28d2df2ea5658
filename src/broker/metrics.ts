// Prometheus metrics of one node. One registry per broker (no global default registry), so
// tests and several brokers in one process never share counters.
//
// Deliveries and settles are counted per message in plain numbers (PathCounts, one per topic)
// and handed to their counters when the counters are read (a scrape, through `collect`): a
// labelled inc hashes and checks its labels at every call, even through a child of labels(),
// which cost a single consume?ack= more than its lease (issue 17). HTTP answers are counted the
// same way, per route and status (RouteCounts), and so are the request latencies (KindHistogram:
// prom-client's observe through a child of labels() hashes and checks the labels every time, 2-3 µs
// of a single consume). What a scrape shows is the same as if every message, answer and latency had
// been counted at once.

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics, type RegistryContentType } from "prom-client";

export interface TopicGaugeSource {
  topicGauges(): { topic: string; backlog: number; inFlight: number; partitions: number }[];
  childGauges(): { parent: string; child: string; lagMessages: number; lagSeconds: number; heldPartitions: number }[];
  /** Per topic, the age of its oldest unacked message on this node's partitions (0 when none). */
  oldestUnackedAges(): Promise<{ topic: string; ageSeconds: number }[]>;
}

/** How a settle is counted: the settle actions and results, in this order (PathCounts.settled's index). */
export const SETTLE_ACTIONS = ["ack", "extend", "nack", "dead_letter"] as const;
export const SETTLE_RESULTS = ["ok", "gone", "unavailable", "invalid"] as const;

/** One topic's deliveries and settles not yet handed to the counters (see the top). */
export class PathCounts {
  delivered = 0;
  redelivered = 0;
  /** Settles by action and result: index action * SETTLE_RESULTS.length + result. */
  readonly settled = new Array<number>(SETTLE_ACTIONS.length * SETTLE_RESULTS.length).fill(0);
  /** Set when a flush dropped this object (nothing counted since): the next count takes a new one. */
  dropped = false;

  constructor(readonly topic: string) {}
}

/** One route's answers by status not yet handed to narad_http_requests_total (see the top). */
export class RouteCounts {
  readonly byStatus = new Map<number, number>();

  constructor(readonly route: string) {}

  count(status: number): void {
    this.byStatus.set(status, (this.byStatus.get(status) ?? 0) + 1);
  }
}

/** One kind's latencies of a KindHistogram, counted in plain numbers: observe() is the hot path's. */
export class LatencyCounts {
  /** Per bucket (the index of its upper bound; the last is +Inf): the observations above the bound before it and not above its own. */
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(private readonly bounds: Float64Array) {
    this.counts = new Float64Array(bounds.length + 1);
  }

  observe(seconds: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && seconds > b[i]!) i++;
    this.counts[i]!++;
    this.sum += seconds;
    this.count++;
  }
}

type HistogramData = Awaited<ReturnType<Histogram<"kind" | "le">["get"]>>;
type HistogramValue = HistogramData["values"][number];
/** The type prom-client's registry writes: its typings name it by an enum, its code by this string. */
const HISTOGRAM_TYPE = "histogram" as unknown as HistogramData["type"];

/**
 * A latency histogram labelled `kind` whose observations go to a LatencyCounts per kind (see the
 * top) and reach the registry as prom-client's own histogram shows them: cumulative buckets with
 * `le`, `+Inf`, then `_sum` and `_count`, for each kind observed at least once.
 */
export class KindHistogram extends Histogram<"kind" | "le"> {
  private readonly bounds: Float64Array;
  private readonly kinds = new Map<string, LatencyCounts>();
  private readonly metricName: string;
  private readonly metricHelp: string;

  constructor(cfg: { name: string; help: string; buckets: readonly number[]; registers: Registry<RegistryContentType>[] }) {
    super({ ...cfg, buckets: [...cfg.buckets], labelNames: ["kind"] });
    this.bounds = Float64Array.from(cfg.buckets);
    this.metricName = cfg.name;
    this.metricHelp = cfg.help;
  }

  /** The counts of one kind, to keep and observe into. */
  counts(kind: string): LatencyCounts {
    let c = this.kinds.get(kind);
    if (c === undefined) this.kinds.set(kind, (c = new LatencyCounts(this.bounds)));
    return c;
  }

  override async get(): Promise<HistogramData> {
    const name = this.metricName;
    const values: HistogramValue[] = [];
    for (const [kind, c] of this.kinds) {
      if (c.count === 0) continue;
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += c.counts[i]!;
        values.push({ value: acc, metricName: `${name}_bucket`, exemplar: null, labels: { le: this.bounds[i]!, kind } } as HistogramValue);
      }
      values.push({ value: c.count, metricName: `${name}_bucket`, exemplar: null, labels: { le: "+Inf", kind } } as HistogramValue);
      values.push({ labels: { kind }, value: c.sum, metricName: `${name}_sum` });
      values.push({ labels: { kind }, value: c.count, metricName: `${name}_count` });
    }
    // No `collect`: prom-client's typings list it, its get() leaves it out.
    return { name, help: this.metricHelp, type: HISTOGRAM_TYPE, values, aggregator: "sum" } as HistogramData;
  }

  /** What the registry reads for its text format (prom-client's Histogram has it too, unlisted in its types). */
  async getForPromString(): Promise<HistogramData> {
    return this.get();
  }

  override reset(): void {
    super.reset();
    // super's constructor calls reset() before this class's fields exist.
    for (const c of this.kinds?.values() ?? []) {
      c.counts.fill(0);
      c.sum = 0;
      c.count = 0;
    }
  }
}

/** Latency buckets of the request histograms (seconds). */
const REQUEST_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

export class BrokerMetrics {
  readonly registry = new Registry();
  readonly produced: Counter<"topic">;
  readonly produceLatency: KindHistogram;
  readonly consumed: Counter<"topic">;
  readonly redelivered: Counter<"topic">;
  readonly settled: Counter<"topic" | "action" | "result">;
  readonly refusals: Counter<"status" | "code">;
  readonly commitLatency: Histogram;
  readonly waiters: Gauge;
  readonly requests: Counter<"route" | "status">;
  readonly consumeLatency: KindHistogram;
  readonly ackLatency: KindHistogram;
  readonly childCopied: Counter<"parent" | "child">;
  readonly forwarded: Counter<"peer" | "result">;
  readonly deadLettered: Counter<"topic">;
  readonly deadLetterFailures: Counter<"topic">;
  readonly redriven: Counter<"topic">;
  /** Per topic name: what was counted since the counters were last read (see the top). */
  private readonly pending = new Map<string, PathCounts>();
  /** Per route (the registered patterns, "unmatched", "internal": a bounded set): its answers not yet counted. */
  private readonly routes = new Map<string, RouteCounts>();

  /** The answers of a route, to count in plain numbers (see the top); one object per route, kept. */
  routeCounts(route: string): RouteCounts {
    let c = this.routes.get(route);
    if (c === undefined) this.routes.set(route, (c = new RouteCounts(route)));
    return c;
  }

  private flushRouteCounts(): void {
    for (const c of this.routes.values()) {
      for (const [status, n] of c.byStatus) {
        if (n > 0) this.requests.inc({ route: c.route, status: String(status) }, n);
      }
      c.byStatus.clear();
    }
  }

  /**
   * The counts of a topic's deliveries and settles, to add to in plain numbers. A holder keeps it
   * until `dropped` says a flush let it go (see flushPathCounts).
   */
  pathCounts(topic: string): PathCounts {
    let c = this.pending.get(topic);
    if (c === undefined) this.pending.set(topic, (c = new PathCounts(topic)));
    return c;
  }

  /**
   * Hands what was counted to the counters, from their collect() (each read of any of them). An
   * entry that counted nothing since the last flush is dropped, so topics deleted long ago do not
   * stay in the map: bounded by the topics in use between two scrapes.
   */
  private flushPathCounts(): void {
    for (const [topic, c] of this.pending) {
      let any = false;
      if (c.delivered > 0) {
        this.consumed.inc({ topic }, c.delivered);
        c.delivered = 0;
        any = true;
      }
      if (c.redelivered > 0) {
        this.redelivered.inc({ topic }, c.redelivered);
        c.redelivered = 0;
        any = true;
      }
      for (let i = 0; i < c.settled.length; i++) {
        const n = c.settled[i]!;
        if (n === 0) continue;
        const action = SETTLE_ACTIONS[Math.floor(i / SETTLE_RESULTS.length)]!;
        const result = SETTLE_RESULTS[i % SETTLE_RESULTS.length]!;
        this.settled.inc({ topic, action, result }, n);
        c.settled[i] = 0;
        any = true;
      }
      if (!any) {
        c.dropped = true;
        this.pending.delete(topic);
      }
    }
  }

  constructor(source: TopicGaugeSource) {
    const r = this.registry;
    // prom-client's names start with process_ and nodejs_ already: "narad_" keeps them single
    // (the prefix "narad_process_" made narad_process_process_cpu_user_seconds_total).
    collectDefaultMetrics({ register: r, prefix: "narad_" });
    this.produced = new Counter({ name: "narad_produced_messages_total", help: "Messages accepted with a 202", labelNames: ["topic"], registers: [r] });
    this.produceLatency = new KindHistogram({
      name: "narad_produce_seconds",
      help: "Produce latency: the request's arrival to its 202 (kind single or batch)",
      buckets: REQUEST_BUCKETS,
      registers: [r],
    });
    this.consumeLatency = new KindHistogram({
      name: "narad_consume_seconds",
      help: "Consume latency: the request's arrival to an answer with messages, a long poll's wait included (kind single or batch)",
      buckets: [...REQUEST_BUCKETS, 5, 20],
      registers: [r],
    });
    this.ackLatency = new KindHistogram({
      name: "narad_ack_seconds",
      help: "Ack, extend and nack latency: the request's arrival to its answer (kind single or batch)",
      buckets: REQUEST_BUCKETS,
      registers: [r],
    });
    // Read through collect(): what PathCounts holds is handed over first (see the top).
    const flush = () => this.flushPathCounts();
    this.consumed = new Counter({ name: "narad_delivered_messages_total", help: "Deliveries (leases handed out), first and repeated", labelNames: ["topic"], registers: [r], collect: flush });
    this.redelivered = new Counter({ name: "narad_redelivered_messages_total", help: "Deliveries with a delivery count above 1", labelNames: ["topic"], registers: [r], collect: flush });
    this.settled = new Counter({
      name: "narad_settle_total",
      help: "Ack, extend and nack requests per receipt handle, by result (ok, gone, invalid)",
      labelNames: ["topic", "action", "result"],
      registers: [r],
      collect: flush,
    });
    this.refusals = new Counter({ name: "narad_refusals_total", help: "Error answers by HTTP status and error code", labelNames: ["status", "code"], registers: [r] });
    this.commitLatency = new Histogram({
      name: "narad_commit_seconds",
      help: "Append to durable: the group commit (write + fdatasync) a produce waited for",
      buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5],
      registers: [r],
    });
    this.deadLettered = new Counter({ name: "narad_dead_lettered_messages_total", help: "Messages moved to their topic's dead-letter topic (durable there, then settled here), by source topic", labelNames: ["topic"], registers: [r] });
    this.deadLetterFailures = new Counter({ name: "narad_dead_letter_move_failures_total", help: "Dead-letter moves that failed and wait for a retry, by source topic", labelNames: ["topic"], registers: [r] });
    this.redriven = new Counter({ name: "narad_redriven_messages_total", help: "Messages of a dead-letter topic produced again by a redrive and acked there, by dead-letter topic", labelNames: ["topic"], registers: [r] });
    this.waiters = new Gauge({ name: "narad_long_polls_waiting", help: "Consume requests waiting in a long poll", registers: [r] });
    this.requests = new Counter({
      name: "narad_http_requests_total",
      help: "HTTP requests answered, by route (method and path pattern) and status",
      labelNames: ["route", "status"],
      registers: [r],
      collect: () => this.flushRouteCounts(),
    });
    new Gauge({
      name: "narad_topic_oldest_unacked_age_seconds",
      help: "Age of the oldest unacked message per topic (0 when every message is acked); in a cluster, of the partitions this node owns",
      labelNames: ["topic"],
      registers: [r],
      async collect() {
        const ages = await source.oldestUnackedAges();
        this.reset();
        for (const a of ages) this.set({ topic: a.topic }, a.ageSeconds);
      },
    });
    const perTopic = (name: string, help: string, pick: (t: ReturnType<TopicGaugeSource["topicGauges"]>[number]) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["topic"],
        registers: [r],
        collect() {
          this.reset();
          for (const t of source.topicGauges()) this.set({ topic: t.topic }, pick(t));
        },
      });
    perTopic("narad_topic_backlog_messages", "Unacked durable messages per topic", (t) => t.backlog);
    perTopic("narad_topic_inflight_leases", "Live leases per topic", (t) => t.inFlight);
    perTopic("narad_topic_partitions", "Partitions per topic", (t) => t.partitions);
    this.forwarded = new Counter({
      name: "narad_forwarded_requests_total",
      help: "Cluster: requests forwarded to other nodes, by peer and result (ok, unreachable: not sent, failed: no answer)",
      labelNames: ["peer", "result"],
      registers: [r],
    });
    this.childCopied = new Counter({ name: "narad_child_copied_messages_total", help: "Messages copied from a parent into a child topic (local children)", labelNames: ["parent", "child"], registers: [r] });
    const perChild = (name: string, help: string, pick: (c: ReturnType<TopicGaugeSource["childGauges"]>[number]) => number) =>
      new Gauge({
        name,
        help,
        labelNames: ["parent", "child"],
        registers: [r],
        collect() {
          this.reset();
          for (const c of source.childGauges()) this.set({ parent: c.parent, child: c.child }, pick(c));
        },
      });
    perChild("narad_child_lag_messages", "Parent messages not yet copied into the child", (c) => c.lagMessages);
    perChild("narad_child_lag_seconds", "Age of the oldest parent message not yet copied into the child", (c) => c.lagSeconds);
    perChild("narad_child_copy_held_partitions", "Parent partitions whose copy into the child is held: the copy cursor is unknown (a damaged children.cursors) until an operator acts", (c) => c.heldPartitions);
  }
}
