import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { ModelRecord } from '../../store/store.js';
import type { Lease } from './placement.js';
import type { PromptPrefix } from '../decide/prefix.js';
import { servingOrder, type Priority, type Who } from '../decide/turns.js';

/**
 * The per-model wait queue: requests that found no free slot wait here, bounded in length per class (a full queue
 * answers 429 pool_busy: a batch job's requests never crowd out a person's) and in time (503 pool_busy), and leave
 * when their client goes away. They are served interactive first and by turns between keys (decide/turns.ts), not in
 * arrival order. The scheduler hands them leases; the queue keeps them, their turns, timers and abort listeners.
 */

/**
 * One request's history across attempts: placements that failed it, the failures that count against it (its
 * own placement failing before its first byte, or a load it waited on failing with nothing else to serve it;
 * MAX_ATTEMPTS of them and the last one is its answer), and the last failure it saw at all (its answer when it
 * is stranded: a node it did not depend on may have gone too).
 */
export interface Attempts {
  readonly exclude: Set<string>;
  readonly errors: RelayError[];
  last: RelayError | null;
  /** It was stranded after a placement failed it, and given STRANDED_GRACE_MS once (strandedNow). */
  graced?: boolean;
}

export function newAttempts(): Attempts {
  return { exclude: new Set(), errors: [], last: null };
}

/** How long a request a placement just failed waits, when nothing else can serve it, before it is answered. */
export const STRANDED_GRACE_MS = 1000;

/**
 * Of the waiters nothing can serve now (every live placement failed them and no new one can be made), those to
 * answer now. One that a placement failed before its first byte waits once for STRANDED_GRACE_MS first, and
 * `again` runs after it: the placement may be dying — a process crashed whose exit the hub has not reaped yet —
 * and its end frees the room a new placement needs. One that no placement failed is answered at once.
 */
export function strandedNow(stranded: readonly Waiter[], again: () => void): Waiter[] {
  const fresh = stranded.filter((w) => w.attempts.errors.length > 0 && !w.attempts.graced);
  for (const w of fresh) w.attempts.graced = true;
  if (fresh.length > 0) setTimeout(again, STRANDED_GRACE_MS).unref();
  return stranded.filter((w) => !fresh.includes(w));
}

/** A placement failed: each waiter notes it; those it stranded (no other live placement may serve them) count an attempt. */
export function countStranding(waiting: readonly Waiter[], live: readonly { readonly id: string }[], err: RelayError, maxAttempts: number): void {
  for (const w of waiting) {
    w.attempts.last = err;
    if (live.some((p) => !w.attempts.exclude.has(p.id))) continue;
    w.attempts.errors.push(err);
    if (w.attempts.errors.length >= maxAttempts) w.reject(err);
  }
}

/** Whom a request is for, and whether its answer can yield its slot (a streamed answer the move path carries). */
export type Requester = Who & { readonly canYield: boolean };

/** A request with no key and no say: interactive (the hub's own loopback, the dashboard). */
export const ANYONE: Requester = { key: null, priority: 'interactive', canYield: false };

export interface Waiter {
  readonly model: ModelRecord;
  readonly who: Requester;
  readonly attempts: Attempts;
  /** Its prompt's prefix keys (prefix-aware routing) and when it began to wait (how long it may wait for them). */
  readonly prefix: PromptPrefix | null;
  readonly since: number;
  resolve(lease: Lease): void;
  reject(err: RelayError): void;
}

export class WaitQueue {
  private readonly byModel = new Map<string, Waiter[]>();
  /** Per model, each key's last turn (a counter: higher is more recent). */
  private readonly turns = new Map<string, Map<string | null, number>>();
  private tick = 0;

  constructor(
    private readonly limits: {
      readonly max: number;
      readonly timeoutMs: number;
      /**
       * Whether a placement of the model is still starting (pushed, filled, loaded: each with its own deadline or
       * stall check): a waiter's time is up only when none is, or a 40 GB load would outlast every waiter.
       */
      readonly starting?: (model: string) => boolean;
    },
  ) {}

  /** Waiting requests for a model in the order they are served (a copy: settling one changes the queue). */
  of(model: string): Waiter[] {
    return servingOrder(this.byModel.get(model) ?? [], this.turns.get(model) ?? new Map());
  }

  /** `key` was given a slot of `model`: its next request waits for the other keys' turns. */
  served(model: string, key: string | null): void {
    const t = this.turns.get(model) ?? new Map<string | null, number>();
    t.set(key, ++this.tick);
    this.turns.set(model, t);
  }

  size(model: string): number {
    return this.byModel.get(model)?.length ?? 0;
  }

  models(): string[] {
    return [...this.byModel.keys()];
  }

  counts(): { model: string; waiting: number }[] {
    return [...this.byModel].map(([model, q]) => ({ model, waiting: q.length }));
  }

  /** Throws 429 pool_busy when the model's queue is full for the request's class (each class has RELAY_QUEUE_MAX places). */
  checkRoom(model: string, priority: Priority = 'interactive'): void {
    const n = (this.byModel.get(model) ?? []).filter((w) => w.who.priority === priority).length;
    if (n >= this.limits.max) {
      throw new RelayError(ErrorCode.POOL_BUSY, `${n} ${priority} requests are already waiting for "${model}" (RELAY_QUEUE_MAX=${this.limits.max})`, { model, retry_after_s: 5 }, { status: 429 });
    }
  }

  /** Queue a request; the promise settles when the scheduler resolves it, it times out or `signal` aborts. */
  add(
    model: ModelRecord,
    attempts: Attempts,
    signal?: AbortSignal,
    route: { prefix: PromptPrefix | null; since: number } = { prefix: null, since: Date.now() },
    who: Requester = ANYONE,
  ): { waiter: Waiter; lease: Promise<Lease> } {
    let waiter!: Waiter;
    const lease = new Promise<Lease>((resolve, reject) => {
      const onAbort = (): void => waiter.reject(new RelayError(ErrorCode.INVALID_REQUEST, 'the client went away while waiting'));
      let timer: NodeJS.Timeout;
      const arm = (): void => {
        timer = setTimeout(() => {
          if (this.limits.starting?.(model.name)) return arm();
          waiter.reject(
            new RelayError(ErrorCode.POOL_BUSY, `no slot of "${model.name}" came free within ${this.limits.timeoutMs} ms (RELAY_QUEUE_TIMEOUT_MS)`, { model: model.name, retry_after_s: 10 }),
          );
        }, this.limits.timeoutMs);
      };
      arm();
      const settle = (): void => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        const q = this.byModel.get(model.name);
        const i = q?.indexOf(waiter) ?? -1;
        if (i >= 0) q!.splice(i, 1);
        if (q?.length === 0) this.byModel.delete(model.name);
      };
      waiter = {
        model,
        who,
        attempts,
        ...route,
        resolve: (l) => {
          settle();
          resolve(l);
        },
        reject: (err) => {
          settle();
          reject(err);
        },
      };
      this.byModel.set(model.name, [...(this.byModel.get(model.name) ?? []), waiter]);
      signal?.addEventListener('abort', onAbort, { once: true });
    });
    return { waiter, lease };
  }

  rejectAll(err: RelayError): void {
    for (const q of [...this.byModel.values()]) for (const w of [...q]) w.reject(err);
  }
}

/** A request's placement failed it before the first byte: counted, and that placement not offered again. */
export function failedOn(attempts: Attempts, placementId: string, err: RelayError): void {
  attempts.exclude.add(placementId);
  attempts.errors.push(err);
  attempts.last = err;
}
