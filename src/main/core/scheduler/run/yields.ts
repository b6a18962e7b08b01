import type { Launcher } from '../launch/launcher.js';
import { chooseYields } from '../decide/turns.js';
import type { Placement } from '../placements/placement.js';
import type { Waiter } from '../placements/queue.js';

/**
 * A person waits for a model whose every slot holds background answers (issue #54): some of those answers yield
 * (decide/turns.ts says which): each stops on its slot and goes on afterwards through the move path, the same
 * stream. Before its slot goes to the waiter, the slot's tokens are read into the answer's record (what it goes on
 * from exactly: answer-records.ts) while nothing else can take that slot.
 */
export function yieldFor(placements: readonly Placement[], waiting: readonly Waiter[]): number {
  const interactive = waiting.filter((w) => w.who.priority === 'interactive').length;
  if (interactive === 0) return 0;
  const ready = placements.filter((p) => p.state === 'ready');
  // A yielded answer's slot held for its record is on its way to the person too: no second answer yields for it.
  const free = ready.reduce((n, p) => n + Math.max(0, p.fit.slots - p.inFlight) + p.recording, 0);
  const yielding = chooseYields(
    ready.flatMap((p) => [...p.leases.values()]),
    interactive,
    free,
  );
  for (const r of yielding)
    ready
      .find((p) => p.id === r.placementId)
      ?.leases.get(r.id)
      ?.yield();
  return yielding.length;
}

/** Slots that answers asked to yield are freeing: on their way to waiters (no new placement is made for those). */
export function slotsYielding(placements: readonly Placement[]): number {
  return placements.reduce((n, p) => n + [...p.leases.values()].filter((l) => l.yielding).length + p.recording, 0);
}

/** Which idle placements a new placement for `waiting` may evict: any for a person; for background ones only, none people use. */
export function mayEvictFor(waiting: readonly Waiter[], now: number, keepAliveMs: number): ((p: Placement) => boolean) | undefined {
  if (waiting.some((w) => w.who.priority === 'interactive')) return undefined;
  return (p) => !heldForPeople(p, now, keepAliveMs);
}

/** A yielded answer's slot is held (counted in flight) until its tokens are recorded, then `then` runs. */
export function holdForRecord(p: Placement, launcher: Launcher, then: () => void): void {
  if (!launcher.recordSlots) return then();
  p.inFlight++;
  p.recording++;
  void launcher
    .recordSlots(p)
    .catch(() => undefined)
    .finally(() => {
      p.inFlight--;
      p.recording--;
      then();
    });
}

/** A placement people use now: it took an interactive request within its keep-alive (a background request never evicts it). */
export function heldForPeople(p: Placement, now: number, keepAliveMs: number): boolean {
  return p.lastInteractiveAt > 0 && now - p.lastInteractiveAt < keepAliveMs;
}
