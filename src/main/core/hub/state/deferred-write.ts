import type { Store, StoreData } from '../../store/store.js';

/** How often counted or measured state is written to the store, at most. */
export const FLUSH_MS = 5000;

/**
 * State kept in memory and written to the store with `write` at most every FLUSH_MS after a change (`changed()`) and
 * at close (`flush()`), so the hot path that changes it costs no disk write. A write that fails (a full disk) keeps
 * the state marked changed: it goes with the next try. Key usage and device speeds use it.
 */
export function deferredWrite(store: Store, write: (d: StoreData) => void): { changed(): void; flush(): Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  let dirty = false;
  const flush = async (): Promise<void> => {
    if (timer) clearTimeout(timer);
    timer = null;
    if (!dirty) return;
    dirty = false;
    await store.update(write).catch(() => {
      dirty = true;
    });
  };
  return {
    changed: () => {
      dirty = true;
      timer ??= setTimeout(() => void flush(), FLUSH_MS).unref();
    },
    flush,
  };
}
