import type { CounterTotals } from './metrics.js';

/**
 * The dashboard's charts, kept by the hub: a few series (tok/s per placement and per model, memory used per device, requests per minute and error rate) sampled
 * every few seconds over the last five minutes, so a page opened now draws the recent past at once (it then
 * appends what /events brings). Pure ring logic here; the sampler's sources are given by the hub.
 */
export const HISTORY_MS = 5 * 60_000;
export const HISTORY_INTERVAL_MS = 5_000;

export class History {
  private readonly series = new Map<string, [number, number][]>();

  constructor(private readonly windowMs = HISTORY_MS) {}

  /** One sample per key at time `t`; keys not sampled for a whole window are dropped. */
  record(samples: Iterable<readonly [string, number | null]>, t: number): void {
    for (const [key, v] of samples) {
      if (v === null || !Number.isFinite(v)) continue;
      const s = this.series.get(key) ?? [];
      s.push([t, v]);
      this.series.set(key, s);
    }
    for (const [key, s] of this.series) {
      while (s.length > 0 && s[0]![0] < t - this.windowMs) s.shift();
      if (s.length === 0) this.series.delete(key);
    }
  }

  snapshot(): { window_ms: number; interval_ms: number; series: Record<string, [number, number][]> } {
    return { window_ms: this.windowMs, interval_ms: HISTORY_INTERVAL_MS, series: Object.fromEntries([...this.series].map(([k, s]) => [k, s.map((p) => [p[0], p[1]] as [number, number])])) };
  }
}

/** What the hub samples, named as the dashboard names its charts. */
export interface HistorySources {
  /** Running totals (HubMetrics.totals): turned into rates between two samples. */
  readonly counters?: () => CounterTotals;
  readonly placements: () => readonly { id: string; ms_per_token: number | null }[];
  readonly hubDevices: () => readonly { id: string; total_mb: number; free_mb: number }[];
  readonly nodeDevices: () => readonly { node: string; id: string; totalMb: number; freeMb: number }[];
}

export function samples(src: HistorySources): [string, number | null][] {
  return [
    ...src.placements().map((p): [string, number | null] => [`tps:${p.id}`, p.ms_per_token ? 1000 / p.ms_per_token : null]),
    ...src.hubDevices().map((d): [string, number] => [`mem:hub:${d.id}`, d.total_mb - d.free_mb]),
    ...src.nodeDevices().map((d): [string, number] => [`mem:${d.node}:${d.id}`, d.totalMb - d.freeMb]),
  ];
}

/**
 * Rates between two readings of the totals, `dtMs` apart: `gen:MODEL` completion tokens per second, `req`
 * requests per minute, `err` the share of those requests that failed (%; 0 when there were none).
 */
export function rates(prev: CounterTotals, now: CounterTotals, dtMs: number): [string, number][] {
  if (dtMs <= 0) return [];
  const requests = Math.max(0, now.requests - prev.requests);
  const errors = Math.max(0, now.errors - prev.errors);
  return [
    ...Object.entries(now.completion).map(([model, n]): [string, number] => [`gen:${model}`, (Math.max(0, n - (prev.completion[model] ?? 0)) * 1000) / dtMs]),
    ['req', (requests * 60_000) / dtMs],
    ['err', requests > 0 ? (100 * errors) / requests : 0],
  ];
}

/** Sample every HISTORY_INTERVAL_MS until closed. */
export function startHistory(src: HistorySources, history = new History()): { history: History; close(): void } {
  let prev = src.counters ? { t: Date.now(), totals: src.counters() } : null;
  const tick = (): void => {
    const t = Date.now();
    const extra = prev && src.counters ? rates(prev.totals, src.counters(), t - prev.t) : [];
    if (prev && src.counters) prev = { t, totals: src.counters() };
    history.record([...samples(src), ...extra], t);
  };
  tick();
  const timer = setInterval(tick, HISTORY_INTERVAL_MS);
  timer.unref();
  return { history, close: () => clearInterval(timer) };
}
