import type { Store } from '../../store/store.js';
import type { SpeedBook } from '../../scheduler/run/speeds.js';

/** How often measured speeds are written to the store (at most). */
const FLUSH_MS = 5000;

/**
 * The devices' measured speeds across hub restarts: read from the store when the hub starts, written with the next
 * store update at most every FLUSH_MS after a change (and at close), so an answer costs no disk write. A store that
 * cannot be written (a full disk) keeps them in memory and tries again with the next change.
 */
export function keepSpeeds(book: SpeedBook, store: Store): { close(): Promise<void> } {
  book.restore(store.data.device_speeds ?? []);
  let timer: NodeJS.Timeout | null = null;
  let dirty = false;
  const flush = async (): Promise<void> => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (!dirty) return;
    dirty = false;
    const entries = book.entries();
    await store
      .update((d) => {
        d.device_speeds = entries;
      })
      .catch(() => {
        dirty = true;
      });
  };
  book.onChange = () => {
    dirty = true;
    timer ??= setTimeout(() => void flush(), FLUSH_MS).unref();
  };
  return { close: flush };
}
