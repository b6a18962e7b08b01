import type { Launcher } from '../launch/launcher.js';
import type { Placement } from '../placements/placement.js';

/**
 * A placement's keep-alive ran out. A host replica's slots are saved for the model's next one (slot-keep.ts) while
 * it stays ready: a request in the meantime is served at once (its slots moved on: the save is dropped, and it
 * idles again). Only a replica still idle after the save stops (`stop(parked)`: parked when its slots were kept).
 * Its memory stays reserved while it saves: the KV being written lives there.
 */
export function expireIdle(p: Placement, launcher: Pick<Launcher, 'keep'>, stop: (parked: boolean) => Promise<void>): Promise<void> {
  // Served during a save and idle again before it ends: this expiry waits its turn (two saves of one replica would
  // write the same files).
  const mine = (expiring.get(p) ?? Promise.resolve()).then(() => expireOnce(p, launcher, stop));
  expiring.set(
    p,
    mine.catch(() => undefined),
  );
  return mine;
}

const expiring = new WeakMap<Placement, Promise<void>>();

async function expireOnce(p: Placement, launcher: Pick<Launcher, 'keep'>, stop: (parked: boolean) => Promise<void>): Promise<void> {
  if (p.state !== 'ready' || p.inFlight > 0) return;
  const since = p.lastUsedAt;
  const kept = await launcher.keep(p);
  if (p.state !== 'ready' || p.inFlight > 0 || p.lastUsedAt !== since) {
    kept?.discard();
    return;
  }
  await stop(kept !== null);
}
