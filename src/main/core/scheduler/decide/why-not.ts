import { fmtMb } from './fit.js';

/**
 * A model the pool cannot place now, in one line a person reads at a glance (the dashboard's "why not", the
 * 503's `details.why_not`): what it needs against the largest free room on a machine that counts now, then the
 * first thing that would change the answer. Pure: the placer works out each fact with its what-if planner.
 */
export interface WhyNotFacts {
  readonly needMb: number;
  /** The largest free room on a device of a machine that may take work now (connected, not paused). */
  readonly largest: { readonly machine: string; readonly device: string; readonly freeMb: number } | null;
  /** Paused machines that, resumed alone, would make room, with why each is paused. */
  readonly resumeOne: readonly { readonly machine: string; readonly reason: string | null }[];
  /** Resuming every paused machine together would make room (none alone does). */
  readonly resumeAll: boolean;
  /** Machines kept off this model after a failure whose backoff, once over, would make room. */
  readonly backedOff: readonly { readonly machine: string; readonly until: number }[];
  /** It fits once the placements running now (busy or idle) are gone. */
  readonly onceIdle: boolean;
}

const hhmm = (t: number): string => new Date(t).toISOString().slice(11, 16);

export function whyNotLine(f: WhyNotFacts): string {
  const room = f.largest ? `largest free room ${fmtMb(f.largest.freeMb)} (${f.largest.machine} ${f.largest.device})` : 'no machine takes work now';
  const head = `needs ${fmtMb(f.needMb)}; ${room}`;
  if (f.resumeOne.length > 0) return `${head}; resuming ${f.resumeOne.map((m) => `${m.machine}${m.reason ? ` (${m.reason})` : ''}`).join(' or ')} would make room`;
  if (f.resumeAll) return `${head}; resuming the paused machines together would make room`;
  if (f.backedOff.length > 0) return `${head}; ${f.backedOff.map((b) => `${b.machine} is kept off it after a failure until ${hhmm(b.until)} UTC`).join(', ')}`;
  if (f.onceIdle) return `${head}; it fits once the placements running now finish`;
  return `${head}; no machine of this pool can hold it (a smaller quantization, context or slot count would need less)`;
}
