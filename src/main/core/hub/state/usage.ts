import type { DayUsage, Store } from '../../store/store.js';
import { deferredWrite } from './deferred-write.js';

/**
 * Who used what (issue #54): tokens in and out, requests and yields per key and day — the hub's local day, which is
 * a household's —, read for quotas, `relay keys ls`, /status, /metrics and the dashboard. Kept in the store across
 * restarts: counted in memory and written with the next store update at most every FLUSH_MS (deferred-write.ts) and at close, so a
 * request costs no disk write. The last KEPT_DAYS days are kept. Requests without a key count under "" ("no key").
 */

/** Days of usage kept per key (this month's and the last one's). */
const KEPT_DAYS = 62;

export const NO_KEY = '';

/** The hub's local date of `t`, as YYYY-MM-DD. */
export function localDay(t: number): string {
  const d = new Date(t);
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, '0')}-${String(d.getDate()).padStart(2, '0')}`;
}

/** Milliseconds from `t` to the next local midnight (when a day's quota is whole again). */
export function msToMidnight(t: number): number {
  const d = new Date(t);
  const next = new Date(d.getFullYear(), d.getMonth(), d.getDate() + 1);
  return next.getTime() - t;
}

const zero = (): DayUsage => ({ prompt_tokens: 0, completion_tokens: 0, requests: 0, yields: 0 });

function addInto(a: DayUsage, b: Partial<DayUsage>): void {
  a.prompt_tokens += b.prompt_tokens ?? 0;
  a.completion_tokens += b.completion_tokens ?? 0;
  a.requests += b.requests ?? 0;
  a.yields += b.yields ?? 0;
}

export class KeyUsage {
  /** Key → day → usage: everything, the store's and what came since. */
  private readonly days = new Map<string, Map<string, DayUsage>>();
  private readonly writes: { changed(): void; flush(): Promise<void> };

  constructor(
    store: Store,
    private readonly now: () => number = Date.now,
  ) {
    for (const [key, byDay] of Object.entries(store.data.key_usage ?? {})) this.days.set(key, new Map(Object.entries(byDay).map(([d, u]) => [d, { ...zero(), ...u }])));
    this.writes = deferredWrite(store, (d) => {
      d.key_usage = this.snapshot();
    });
  }

  /** Count what `key` (null: none) used now. */
  add(key: string | null, u: Partial<DayUsage>): void {
    const k = key ?? NO_KEY;
    const day = localDay(this.now());
    const byDay = this.days.get(k) ?? new Map<string, DayUsage>();
    this.days.set(k, byDay);
    const today = byDay.get(day) ?? zero();
    byDay.set(day, today);
    addInto(today, u);
    this.writes.changed();
  }

  /** What `key` used today. */
  today(key: string | null): DayUsage {
    return { ...zero(), ...this.days.get(key ?? NO_KEY)?.get(localDay(this.now())) };
  }

  /** What `key` used this month (the hub's local calendar month). */
  month(key: string | null): DayUsage {
    const prefix = localDay(this.now()).slice(0, 8);
    const out = zero();
    for (const [day, u] of this.days.get(key ?? NO_KEY) ?? []) if (day.startsWith(prefix)) addInto(out, u);
    return out;
  }

  /** Every key that used something (its name; "" for none). */
  keys(): string[] {
    return [...this.days.keys()];
  }

  /** What was counted, the last KEPT_DAYS days (older days are dropped here). */
  private snapshot(): Record<string, Record<string, DayUsage>> {
    const oldest = localDay(this.now() - KEPT_DAYS * 86_400_000);
    const snapshot: Record<string, Record<string, DayUsage>> = {};
    for (const [key, byDay] of this.days) {
      for (const day of [...byDay.keys()]) if (day < oldest) byDay.delete(day);
      if (byDay.size > 0) snapshot[key] = Object.fromEntries([...byDay].map(([d, u]) => [d, { ...u }]));
    }
    return snapshot;
  }

  /** Write what was counted since the last write (also a few seconds after each count). */
  close(): Promise<void> {
    return this.writes.flush();
  }
}
