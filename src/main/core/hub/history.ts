/**
 * The dashboard's charts, kept by the hub: a few series (tok/s per placement, memory used per device) sampled
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

/** Sample every HISTORY_INTERVAL_MS until closed. */
export function startHistory(src: HistorySources, history = new History()): { history: History; close(): void } {
  const tick = (): void => history.record(samples(src), Date.now());
  tick();
  const timer = setInterval(tick, HISTORY_INTERVAL_MS);
  timer.unref();
  return { history, close: () => clearInterval(timer) };
}
