import type { IncomingMessage } from 'node:http';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { Who } from '../../scheduler/decide/turns.js';
import type { ApiKeys } from './keys.js';
import { msToMidnight, type KeyUsage } from '../state/usage.js';

/** A request may lower its own class with this header, never raise it. */
export const PRIORITY_HEADER = 'x-relay-priority';

/** A request admitted: whom it is for, and its place among its key's requests in flight (`done` once, at its end). */
export interface Ticket {
  readonly who: Who;
  done(): void;
}

/**
 * Whether a request may go to the pool, by its key's rules (issue #54): its class — the key's, or lower when the
 * request asks (`X-Relay-Priority: background`; asking for more than the key's is refused) —, its requests at once
 * (`max_concurrent`: 429 key_busy) and its tokens today (`max_tokens_per_day`: 429 key_quota_exceeded until the hub's
 * next local midnight, which Retry-After says). Requests without a key are interactive, without quotas. The answer
 * that crosses a quota finishes; the next is refused.
 */
export class Admission {
  private readonly inFlight = new Map<string | null, number>();

  constructor(private readonly d: { readonly keys: ApiKeys; readonly usage: KeyUsage; readonly now?: () => number }) {}

  admit(key: string | null, req: IncomingMessage): Ticket {
    const rules = this.d.keys.rules(key);
    const asked = req.headers[PRIORITY_HEADER];
    const header = Array.isArray(asked) ? asked[0] : asked;
    let priority = rules.priority;
    if (header !== undefined) {
      const v = header.trim().toLowerCase();
      if (v !== 'interactive' && v !== 'background') throw new RelayError(ErrorCode.INVALID_REQUEST, `${PRIORITY_HEADER} is interactive or background, got ${JSON.stringify(header.slice(0, 40))}`);
      if (v === 'interactive' && priority === 'background') {
        throw new RelayError(ErrorCode.PRIORITY_NOT_ALLOWED, `the key "${key}" is a background key: a request may lower its class (${PRIORITY_HEADER}: background), never raise it`, { key });
      }
      priority = v;
    }
    const now = this.d.now?.() ?? Date.now();
    if (rules.max_tokens_per_day !== null) {
      const t = this.d.usage.today(key);
      const used = t.prompt_tokens + t.completion_tokens;
      if (used >= rules.max_tokens_per_day) {
        throw new RelayError(ErrorCode.KEY_QUOTA_EXCEEDED, `the key "${key}" used its ${rules.max_tokens_per_day} tokens for today (${used}); more after midnight`, {
          key,
          retry_after_s: Math.ceil(msToMidnight(now) / 1000),
        });
      }
    }
    const n = this.inFlight.get(key) ?? 0;
    if (rules.max_concurrent !== null && n >= rules.max_concurrent) {
      throw new RelayError(ErrorCode.KEY_BUSY, `the key "${key}" has ${n} requests in flight, its most at once (max_concurrent ${rules.max_concurrent})`, { key, retry_after_s: 1 });
    }
    this.inFlight.set(key, n + 1);
    let done = false;
    return {
      who: { key, priority },
      done: () => {
        if (done) return;
        done = true;
        const left = (this.inFlight.get(key) ?? 1) - 1;
        if (left > 0) this.inFlight.set(key, left);
        else this.inFlight.delete(key);
      },
    };
  }

  /** Requests in flight per key now. */
  inFlightOf(key: string | null): number {
    return this.inFlight.get(key) ?? 0;
  }
}
