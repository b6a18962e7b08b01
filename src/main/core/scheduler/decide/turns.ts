/**
 * Whose turn it is, pure: how a model's waiting requests are served when slots free up, and which running answer
 * gives its slot to a person who waits. Interactive requests (a person, a voice assistant) go before background ones
 * (agents, batch jobs); among equals, keys take turns — the key served longest ago first, its oldest request — so a
 * key with twenty requests waiting does not hold back another key's one. No I/O, no timers: the scheduler acts on it.
 */

export type Priority = 'interactive' | 'background';

export const PRIORITIES: readonly Priority[] = ['interactive', 'background'];

/** Who a request is for: its key's name (null: none, the hub's own loopback or a hub without keys) and its class. */
export interface Who {
  readonly key: string | null;
  readonly priority: Priority;
}

export interface WaitingView {
  readonly who: Who;
  /** When it began to wait (its order among one key's requests). */
  readonly since: number;
}

/** Keys' last turns on a model: a counter value per key (higher: served more recently); absent: never served. */
export type Turns = ReadonlyMap<string | null, number>;

/**
 * The order in which `waiting` (any order) is served: interactive first; within a class, round by round over the
 * keys — each round one request per key, keys in the order of their last turn (never served first, then longest
 * ago; ties by their oldest request), each key's requests oldest first.
 */
export function servingOrder<T extends WaitingView>(waiting: readonly T[], turns: Turns): T[] {
  const out: T[] = [];
  for (const priority of PRIORITIES) {
    const byKey = new Map<string | null, T[]>();
    for (const w of waiting.filter((x) => x.who.priority === priority).sort((a, b) => a.since - b.since)) {
      const q = byKey.get(w.who.key) ?? [];
      q.push(w);
      byKey.set(w.who.key, q);
    }
    const keys = [...byKey.keys()].sort((a, b) => (turns.get(a) ?? -1) - (turns.get(b) ?? -1) || byKey.get(a)![0]!.since - byKey.get(b)![0]!.since);
    for (let round = 0; out.length < waiting.length; round++) {
      let any = false;
      for (const k of keys) {
        const w = byKey.get(k)![round];
        if (w) {
          out.push(w);
          any = true;
        }
      }
      if (!any) break;
    }
  }
  return out;
}

/** A running answer as the yield rule sees it. */
export interface RunningView {
  readonly id: string;
  readonly placementId: string;
  readonly priority: Priority;
  /** It can stop on its slot and go on afterwards, the same stream (a streamed answer the move path carries). */
  readonly canYield: boolean;
  /** Asked to yield already (its slot is on its way to a waiter). */
  readonly yielding: boolean;
  readonly since: number;
}

/**
 * The background answers that give their slots to interactive requests waiting for the same model: one per
 * interactive waiter beyond the slots already on their way (free ones, yields under way), the most recently begun
 * first (it has the least to evaluate again). None while a slot is free or no background answer can yield.
 */
export function chooseYields(running: readonly RunningView[], interactiveWaiting: number, freeSlots: number): RunningView[] {
  const coming = freeSlots + running.filter((r) => r.yielding).length;
  const need = interactiveWaiting - coming;
  if (need <= 0) return [];
  return running
    .filter((r) => r.priority === 'background' && r.canYield && !r.yielding)
    .sort((a, b) => b.since - a.since)
    .slice(0, need);
}
