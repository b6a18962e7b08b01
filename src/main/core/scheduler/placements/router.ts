import type { Placement } from './placement.js';
import { PrefixIndex, type PromptPrefix } from '../decide/prefix.js';
import { routeRequest, type RouteView } from '../decide/routing.js';

/**
 * Which placement of a model takes a request, with prefix-aware routing: the scheduler's table seen through
 * routing.ts's pure rule and prefix.ts's memory of the prompts each placement served. A request that chose to
 * wait for the placement holding its prefix is asked about again when its patience runs out (`repump`), so
 * nothing waits on a timer that no release would end.
 */
export class Router {
  private readonly index = new PrefixIndex();
  /** Per model, the next look at its waiters that a hold asked for, and when. */
  private readonly holds = new Map<string, { timer: NodeJS.Timeout; at: number }>();
  /** Per model, the stopped placement whose slots are kept on disk. */
  private readonly parked = new Map<string, string>();

  constructor(private readonly d: { readonly enabled: boolean; now(): number; repump(model: string): void }) {}

  /** The placements as routing sees them, with how much of `prefix` each holds. */
  views(placements: readonly Placement[], prefix: PromptPrefix | null = null): (RouteView & { readonly p: Placement })[] {
    return placements.map((p) => ({
      id: p.id,
      node: p.node?.name ?? null,
      state: p.state,
      slots: p.fit.slots,
      inFlight: p.inFlight,
      msPerToken: p.msPerToken,
      promptMsPerToken: p.promptMsPerToken,
      matched: prefix && this.d.enabled ? this.index.matched(p.id, prefix) : 0,
      p,
    }));
  }

  /**
   * The placement for a request that has waited since `since` (now: it just came), or null to keep waiting —
   * for any slot, or for the warm placement, in which case the model is pumped again when waiting stops paying.
   */
  choose(model: string, placements: readonly Placement[], exclude: ReadonlySet<string>, prefix: PromptPrefix | null, since: number): { p: Placement; warm: boolean } | null {
    const { pick, holdMs } = routeRequest(this.views(placements, prefix), exclude, this.d.now() - since);
    if (holdMs > 0) this.hold(model, holdMs);
    return pick ? { p: pick.p, warm: (pick.matched ?? 0) > 0 } : null;
  }

  /** A request leased `p`: its prompt is in that KV cache from now on. */
  leased(p: Placement, prefix: PromptPrefix | null, warm: boolean): void {
    if (!prefix || !this.d.enabled) return;
    if (warm) p.prefixHits++;
    this.index.record(p.id, prefix);
  }

  /** The placement stopped or failed: what it held is gone. */
  forget(id: string): void {
    this.index.forget(id);
  }

  /** A placement stopped: parked when its slots were kept on disk, else forgotten. */
  stopped(model: string, id: string, parked: boolean): void {
    if (parked) this.park(model, id);
    else this.forget(id);
  }

  /**
   * The placement stopped, its slots kept on disk (slot-keep.ts): what it held is remembered until `model`'s next
   * replica restores them (`adopt`); one parked placement per model, an older one is forgotten.
   */
  park(model: string, id: string): void {
    const before = this.parked.get(model);
    if (before && before !== id) this.index.forget(before);
    this.parked.set(model, id);
  }

  /** `to` restored the slots `from` kept: it holds what `from` held. */
  adopt(model: string, from: string, to: string): void {
    if (this.parked.get(model) === from) this.parked.delete(model);
    this.index.rename(from, to);
  }

  private hold(model: string, ms: number): void {
    const at = this.d.now() + ms;
    const had = this.holds.get(model);
    if (had && had.at <= at) return;
    if (had) clearTimeout(had.timer);
    const timer = setTimeout(() => {
      this.holds.delete(model);
      this.d.repump(model);
    }, ms);
    timer.unref();
    this.holds.set(model, { timer, at });
  }

  close(): void {
    for (const h of this.holds.values()) clearTimeout(h.timer);
    this.holds.clear();
  }
}
