import { ErrorCode, type RelayError } from '../../../../shared/errors.js';

/**
 * Failure memory, pure: a (node, model) whose placement failed to load or crashed is skipped for that model
 * for a while, 30 s doubling to 10 min, forgotten on the next success. Without it the planner, which prefers
 * a node that already holds the file, picks the broken node again on the very next request.
 */
/** The hub's name in failure memory: a host placement that fails keeps the model off the hub for a while too. */
export const HUB = 'hub';

export interface Backoff {
  readonly node: string;
  readonly model: string;
  readonly failures: number;
  readonly reason: string;
  /** ms since the epoch */
  readonly at: number;
  readonly until: number;
}

export class FailureMemory {
  private readonly entries = new Map<string, Backoff>();

  constructor(
    private readonly now: () => number = Date.now,
    private readonly baseMs = 30_000,
    private readonly maxMs = 600_000,
  ) {}

  private static key(node: string, model: string): string {
    return `${node}\u0000${model}`;
  }

  failed(node: string, model: string, reason: string): Backoff {
    const prev = this.entries.get(FailureMemory.key(node, model));
    const failures = (prev?.failures ?? 0) + 1;
    const delay = Math.min(this.baseMs * 2 ** (failures - 1), this.maxMs);
    const at = this.now();
    const b: Backoff = { node, model, failures, reason, at, until: at + delay };
    this.entries.set(FailureMemory.key(node, model), b);
    return b;
  }

  succeeded(node: string, model: string): void {
    this.entries.delete(FailureMemory.key(node, model));
  }

  /** The backoff in force for (node, model), or null. An expired one is kept (its count doubles the next delay). */
  blocked(node: string, model: string): Backoff | null {
    const b = this.entries.get(FailureMemory.key(node, model));
    return b && this.now() < b.until ? b : null;
  }

  /** Backoffs in force now, for /status and the dashboard. */
  active(): Backoff[] {
    const t = this.now();
    return [...this.entries.values()].filter((b) => t < b.until);
  }
}

/**
 * Whose failure a failed load is, to keep the model off that machine a while — or null when it is nobody's:
 * the machine's own failure counts (a damaged copy, a crash, a deadline overrun, a push that stalled), its owner
 * pausing it or its link dropping does not. A host replica names the hub, a node replica its node, a shard the
 * node whose stage failed (`details.node`); a shard head that fails (a lost RPC link aborts it) names nobody.
 */
export function blamedMachine(
  p: { readonly kind: 'host' | 'node' | 'shard'; readonly node: { readonly name: string; readonly alive: boolean; readonly availability: string } | null },
  e: RelayError,
  nodeNamed: (name: string) => { readonly alive: boolean; readonly availability: string } | undefined,
): string | null {
  const machine = p.kind === 'node' ? p.node!.name : p.kind === 'host' ? HUB : typeof e.details.node === 'string' ? e.details.node : null;
  if (machine === null || e.code === ErrorCode.MODEL_UNAVAILABLE || e.code === ErrorCode.NODE_LOST) return null;
  const conn = p.node ?? (machine !== HUB ? nodeNamed(machine) : undefined);
  return conn && (!conn.alive || conn.availability === 'paused') ? null : machine;
}
