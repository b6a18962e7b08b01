import type { Store } from '../../store/store.js';
import type { SpeedBook } from '../../scheduler/run/speeds.js';
import { deferredWrite } from './deferred-write.js';

/** The devices' measured speeds across hub restarts: read from the store at start, written a few seconds after each change and at close. */
export function keepSpeeds(book: SpeedBook, store: Store): { close(): Promise<void> } {
  book.restore(store.data.device_speeds ?? []);
  const w = deferredWrite(store, (d) => {
    d.device_speeds = book.entries();
  });
  book.onChange = w.changed;
  return { close: w.flush };
}
