import { fmtMb, largestPart, type FitBreakdown } from './fit.js';

/**
 * Pure placement decisions for one machine's devices. No I/O, no timers: devices and what placements reserve
 * on them in, a plan out. placer.ts acts on the plan; tests table-test this file.
 */

export interface DeviceView {
  readonly id: string;
  readonly kind: 'gpu' | 'cpu';
  readonly totalMb: number;
  /** Free after what relay has reserved on it (see freeAfterReservations). */
  readonly freeMb: number;
}

/** What one placement holds on one device: a replica's whole need, or one stage of a shard. */
export interface Reservation {
  readonly id: string;
  readonly model: string;
  readonly device: string;
  readonly needMb: number;
  readonly state: 'starting' | 'ready' | 'failed' | 'stopping';
  readonly inFlight: number;
  readonly lastUsedAt: number;
  /** When it became ready; 0 or absent while it loads. */
  readonly readyAt?: number;
  /** Planning "what if": this placement would be stopped first, so its room counts as free. */
  readonly evict?: boolean;
}

export type HostPlan =
  | { readonly kind: 'host'; readonly device: string; readonly evict: readonly string[] }
  | { readonly kind: 'none'; readonly need: FitBreakdown; readonly perDevice: readonly { id: string; freeMb: number; totalMb: number }[] };

/**
 * What each device has free for a new placement. A CPU budget is pure bookkeeping: budget minus what relay's
 * placements reserved. A GPU reports its own free memory, which already counts loaded placements; those still
 * loading are subtracted (their memory is not allocated yet), and so are those that became ready after the
 * reading was taken (`readAt`; a device list refreshed every few seconds has not seen them yet).
 */
export function freeAfterReservations(
  devices: readonly { id: string; kind: 'gpu' | 'cpu'; totalMb: number; reportedFreeMb: number; readAt?: number }[],
  reservations: readonly Reservation[],
): DeviceView[] {
  return devices.map((d) => {
    const mine = reservations.filter((r) => r.device === d.id && r.state !== 'failed');
    const unseen = (r: Reservation): boolean => r.state === 'starting' || (d.readAt !== undefined && (r.readyAt ?? 0) >= d.readAt);
    const kept = mine.filter((r) => !r.evict);
    const reserved = d.kind === 'cpu' ? kept.reduce((s, r) => s + r.needMb, 0) : kept.filter(unseen).reduce((s, r) => s + r.needMb, 0);
    // An evicted placement the GPU's reading already counts gives its room back.
    const freed = d.kind === 'cpu' ? 0 : mine.filter((r) => r.evict && !unseen(r)).reduce((s, r) => s + r.needMb, 0);
    return { id: d.id, kind: d.kind, totalMb: d.totalMb, freeMb: Math.max(0, d.reportedFreeMb - reserved + freed) };
  });
}

/**
 * The fewest idle placements to stop so that `fits(evicting)` holds: least recently used first, then any that
 * turn out not to be needed are kept. Null when even stopping every idle placement would not make room, so
 * a request that cannot be placed stops nothing. Pure; `fits` is the caller's planner.
 */
export function chooseEvictions<T extends { id: string; lastUsedAt: number }>(idle: readonly T[], fits: (evicting: ReadonlySet<string>) => boolean): T[] | null {
  const lru = [...idle].sort((a, b) => a.lastUsedAt - b.lastUsedAt);
  let k = 0;
  while (k <= lru.length && !fits(new Set(lru.slice(0, k).map((r) => r.id)))) k++;
  if (k > lru.length) return null;
  const chosen = lru.slice(0, k);
  // The k-th was needed; an earlier one may not have been (it held room on another machine).
  for (let i = chosen.length - 2; i >= 0; i--) {
    const without = chosen.filter((_, j) => j !== i);
    if (fits(new Set(without.map((r) => r.id)))) chosen.splice(i, 1);
  }
  return chosen;
}

/**
 * A device for a new replica needing `need.needMb`: the device with the most free memory that fits; else the
 * device where evicting the fewest least-recently-used idle placements makes room; else none.
 */
export function planHostReplica(need: FitBreakdown, devices: readonly DeviceView[], reservations: readonly Reservation[]): HostPlan {
  const byFree = [...devices].sort((a, b) => b.freeMb - a.freeMb);
  const fits = byFree.find((d) => d.freeMb >= need.needMb);
  if (fits) return { kind: 'host', device: fits.id, evict: [] };

  let best: { device: string; evict: string[] } | null = null;
  for (const d of byFree) {
    const idle = reservations.filter((r) => r.device === d.id && r.state === 'ready' && r.inFlight === 0).sort((a, b) => a.lastUsedAt - b.lastUsedAt);
    let free = d.freeMb;
    const evict: string[] = [];
    for (const r of idle) {
      if (free >= need.needMb) break;
      evict.push(r.id);
      free += r.needMb;
    }
    if (free >= need.needMb && (best === null || evict.length < best.evict.length)) best = { device: d.id, evict };
  }
  if (best) return { kind: 'host', ...best };
  return { kind: 'none', need, perDevice: devices.map((d) => ({ id: d.id, freeMb: d.freeMb, totalMb: d.totalMb })) };
}

/**
 * "model "m" needs 21000 MB (weights … + KV … + overhead …; ctx 131072 × 1 slots, f16 cache; the largest part: the KV
 * cache …)": every part of the need that is not zero, and which part dominates, so a refusal says what to change.
 */
export function describeNeed(model: string, n: FitBreakdown): string {
  const extra = (label: string, mb: number): string => (mb > 0.5 ? ` + ${label} ${fmtMb(mb)}` : '');
  const window = n.kvWindowMb > 0.5 ? ` (sliding layers ${fmtMb(n.kvWindowMb)})` : '';
  const parts =
    `weights ${fmtMb(n.weightsMb)} + KV ${fmtMb(n.kvMb)}${window}` +
    extra('recurrent state', n.stateMb) +
    extra(`${n.kvCacheType} block scales`, n.blocksMb) +
    ` + overhead ${fmtMb(n.overheadMb)}` +
    extra(n.flashAttn ? 'compute' : 'compute without flash attention', n.computeMb) +
    extra('projector', n.projectorMb) +
    extra('draft', n.draftMb);
  const top = largestPart(n);
  return `model "${model}" needs ${fmtMb(n.needMb)} (${parts}; ctx ${n.ctx} × ${n.slots} slots, ${n.kvCacheType} cache; the largest part: ${top.part}, ${fmtMb(top.mb)})`;
}

/** The 503 message: need vs free per device, and what the pool lacks. */
export function shortfallMessage(model: string, plan: Extract<HostPlan, { kind: 'none' }>): string {
  const devices =
    plan.perDevice.length === 0
      ? 'this hub has no GPU and no CPU budget (start it with --cpu-budget-mb N to let it serve on CPU)'
      : `free: ${plan.perDevice.map((d) => `${d.id} ${fmtMb(d.freeMb)} of ${fmtMb(d.totalMb)}`).join(', ')}`;
  return `${describeNeed(model, plan.need)}; ${devices}; no connected node can host it`;
}
