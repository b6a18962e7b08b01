/**
 * Routing and scale-out, pure: which placement of a model takes the next request, and whether the requests
 * waiting for the model need another placement. No I/O, no timers; the scheduler acts on the answers.
 */
import { CHARS_PER_TOKEN } from './prefix.js';

export interface RouteView {
  readonly id: string;
  /** null = the hub (a host replica, or a shard, whose head runs on the hub). */
  readonly node: string | null;
  readonly state: 'starting' | 'ready' | 'failed' | 'stopping';
  readonly slots: number;
  readonly inFlight: number;
  /** Recent milliseconds per generated token; null when not measured yet. */
  readonly msPerToken: number | null;
  /** Recent milliseconds per prompt token evaluated; null when not measured yet. */
  readonly promptMsPerToken?: number | null;
  /** Characters of the request's prompt this placement's KV cache holds (prefix.ts); 0 or absent: none. */
  readonly matched?: number;
}

export function freeSlots(p: RouteView): number {
  return Math.max(0, p.slots - p.inFlight);
}

/**
 * The ready placement with the most free slots; ties go to the hub, then to the node with the lowest recent
 * time-per-token (an unmeasured placement counts as fastest, so a new one gets tried), then by id so the
 * choice is stable. Null when every placement is saturated (or none is ready).
 */
export function pickPlacement<T extends RouteView>(placements: readonly T[], exclude: ReadonlySet<string> = new Set()): T | null {
  let best: T | null = null;
  for (const p of placements) {
    if (p.state !== 'ready' || exclude.has(p.id) || freeSlots(p) === 0) continue;
    if (best === null || better(p, best)) best = p;
  }
  return best;
}

function better(a: RouteView, b: RouteView): boolean {
  if (freeSlots(a) !== freeSlots(b)) return freeSlots(a) > freeSlots(b);
  if ((a.node === null) !== (b.node === null)) return a.node === null;
  const ta = a.msPerToken ?? 0;
  const tb = b.msPerToken ?? 0;
  if (ta !== tb) return ta < tb;
  return a.id < b.id;
}

/**
 * Prefix-aware routing: the ready placement holding the longest prefix of the request's prompt takes it when it
 * has a free slot. When that one is saturated and another is free, the request waits for it — but no longer than
 * evaluating the prefix elsewhere would take (the characters it would have to evaluate again, as tokens, at the
 * warm placement's measured prompt speed), then goes to the free one: never more than twice the best choice's
 * cost, whatever the wait turns out to be. No placement holds any of it: least loaded (pickPlacement).
 * `waitedMs`: how long the request has waited already. `holdMs` > 0: ask again after that long.
 */
export function routeRequest<T extends RouteView>(placements: readonly T[], exclude: ReadonlySet<string>, waitedMs: number): { pick: T | null; holdMs: number } {
  const least = pickPlacement(placements, exclude);
  let warm: T | null = null;
  for (const p of placements) {
    if (p.state !== 'ready' || exclude.has(p.id) || (p.matched ?? 0) === 0) continue;
    if (warm === null || warmer(p, warm)) warm = p;
  }
  if (warm === null) return { pick: least, holdMs: 0 };
  if (freeSlots(warm) > 0) return { pick: warm, holdMs: 0 };
  if (least === null) return { pick: null, holdMs: 0 };
  const again = (warm.matched ?? 0) - (least.matched ?? 0);
  const msPerToken = warm.promptMsPerToken ?? least.promptMsPerToken ?? 0;
  const costMs = (again / CHARS_PER_TOKEN) * msPerToken;
  if (waitedMs < costMs) return { pick: null, holdMs: Math.ceil(costMs - waitedMs) };
  return { pick: least, holdMs: 0 };
}

function warmer(a: RouteView, b: RouteView): boolean {
  if ((a.matched ?? 0) !== (b.matched ?? 0)) return (a.matched ?? 0) > (b.matched ?? 0);
  return better(a, b);
}

/**
 * Whether the waiting requests need one more placement: more are waiting than the free slots of ready
 * placements plus the slots that placements still loading will bring, and `maxPlacements` (0 = no bound but
 * the devices) allows another. The caller adds one at a time and asks again.
 */
export function wantsAnother(placements: readonly RouteView[], waiting: number, maxPlacements: number): boolean {
  const live = placements.filter((p) => p.state === 'starting' || p.state === 'ready');
  const coming = live.filter((p) => p.state === 'starting').reduce((s, p) => s + p.slots, 0);
  const free = live.filter((p) => p.state === 'ready').reduce((s, p) => s + freeSlots(p), 0);
  if (waiting <= coming + free) return false;
  return maxPlacements <= 0 || live.length < maxPlacements;
}

/**
 * A moving average of prompt time per token, from llama-server's report of a request (prompt_ms over prompt_n):
 * prompts of fewer than 16 evaluated tokens say more of a request's fixed cost than of prompt speed, and are left out.
 */
export function nextPromptMsPerToken(prev: number | null, promptMs: number | null | undefined, promptEvaluated: number | null | undefined): number | null {
  if (!promptMs || !promptEvaluated || promptEvaluated < 16 || !Number.isFinite(promptMs) || promptMs <= 0) return prev;
  const ms = promptMs / promptEvaluated;
  return prev === null ? ms : prev * 0.7 + ms * 0.3;
}

/** A moving average of time-per-token: recent requests weigh most. */
export function nextMsPerToken(prev: number | null, tokensPerSecond: number | null | undefined): number | null {
  if (!tokensPerSecond || !Number.isFinite(tokensPerSecond) || tokensPerSecond <= 0) return prev;
  const ms = 1000 / tokensPerSecond;
  return prev === null ? ms : prev * 0.7 + ms * 0.3;
}

/**
 * How long a request may hear nothing from its placement before the hub checks on it: ten of its recent token
 * times (a generation that stops is obvious long before a keep-alive would notice), at least 1 s, at most 2.5 s
 * so that a silently dropped node — 2 s more for its ping — ends a stream within 5 s. Unknown speed: the most.
 * A check that finds all well costs a ping, so a long prompt being read (silent too) is only looked at, not cut.
 */
export function stallMs(msPerToken: number | null): number {
  if (msPerToken === null) return 2500;
  return Math.min(2500, Math.max(1000, Math.round(10 * msPerToken)));
}
