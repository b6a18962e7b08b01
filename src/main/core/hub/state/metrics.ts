/**
 * Prometheus text exposition for the hub, hand-rolled: a few counters and gauges need no client library.
 */
type Labels = Record<string, string>;

function key(labels: Labels): string {
  return Object.entries(labels)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}="${v.replace(/["\\\n]/g, '_')}"`)
    .join(',');
}

class Family {
  readonly values = new Map<string, number>();
  private readonly labelsOf = new Map<string, Labels>();
  constructor(
    readonly name: string,
    readonly type: 'counter' | 'gauge',
    readonly help: string,
  ) {}
  add(labels: Labels, v = 1): void {
    const k = key(labels);
    this.values.set(k, (this.values.get(k) ?? 0) + v);
    this.labelsOf.set(k, labels);
  }
  /** The values summed by one label's value, over the series `where` accepts. */
  sumBy(label: string, where: (l: Labels) => boolean = () => true): Map<string, number> {
    const out = new Map<string, number>();
    for (const [k, v] of this.values) {
      const l = this.labelsOf.get(k);
      if (l && where(l)) out.set(l[label] ?? '', (out.get(l[label] ?? '') ?? 0) + v);
    }
    return out;
  }
  set(labels: Labels, v: number): void {
    this.values.set(key(labels), v);
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} ${this.type}`];
    for (const [k, v] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ''} ${v}`);
    return lines.join('\n');
  }
}

export interface CounterTotals {
  readonly requests: number;
  readonly errors: number;
  readonly completion: Readonly<Record<string, number>>;
}

export class HubMetrics {
  readonly requests = new Family('relay_requests_total', 'counter', 'Requests to /v1 by endpoint and HTTP status.');
  readonly tokens = new Family('relay_tokens_total', 'counter', 'Tokens processed through /v1, by model and kind (prompt, completion).');
  readonly promptTokens = new Family('relay_prompt_tokens_total', 'counter', 'Prompt tokens by model and whether llama-server found them in its KV cache (cache: cached, evaluated).');
  readonly loadSeconds = new Family('relay_load_seconds_total', 'counter', 'Seconds spent loading placements (replicas and shards), by model.');
  readonly loads = new Family('relay_loads_total', 'counter', 'Placement loads (replicas and shards), by model.');
  readonly replicas = new Family('relay_replicas', 'gauge', 'Replicas (hub and node) by state.');
  readonly shards = new Family('relay_shards', 'gauge', 'Shards by state.');
  readonly moves = new Family('relay_moves_total', 'counter', 'Answers whose placement stopped mid-stream, by model and outcome (continued elsewhere, ended).');

  /** Running totals for the dashboard's charts: requests, the failed ones (HTTP ≥ 400), completion tokens by model. */
  totals(): CounterTotals {
    const byStatus = this.requests.sumBy('status');
    const sum = (pred: (status: number) => boolean): number => [...byStatus].filter(([st]) => pred(Number(st))).reduce((a, [, v]) => a + v, 0);
    return { requests: sum(() => true), errors: sum((st) => st >= 400), completion: Object.fromEntries(this.tokens.sumBy('model', (l) => l.kind === 'completion')) };
  }

  /** The text for /metrics; the gauges from the placements' states now. */
  render(states: { readonly replicas: readonly string[]; readonly shards: readonly string[] }): string {
    for (const [family, now] of [
      [this.replicas, states.replicas],
      [this.shards, states.shards],
    ] as const) {
      family.values.clear();
      for (const s of ['starting', 'ready', 'failed', 'stopping']) family.set({ state: s }, now.filter((x) => x === s).length);
    }
    return `${[this.requests, this.tokens, this.promptTokens, this.moves, this.loadSeconds, this.loads, this.replicas, this.shards].map((f) => f.render()).join('\n')}\n`;
  }
}
