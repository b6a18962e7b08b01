import type { RelayError } from '../../../../shared/errors.js';
import { parseSseError } from './sse-error.js';
import { KEEP_ALIVE, SseSplitter, type SseEvent } from './sse.js';
import { parseJson, type Json } from './sent.js';

/**
 * A continuation's stream read for the client (stitch.ts, retell.ts share it): whole events, a keep-alive passed on as
 * one, a failure llama-server reports — an `error:` line (newer servers), an `error` event or object (the pinned one)
 * — ends it (`failed`, which the proxy ends the client's stream with), and every other event with data given to
 * `each` with its JSON (null: `[DONE]`, or not JSON); what it returns is what the client gets for it.
 */
export class ContinuationEvents {
  private readonly sse = new SseSplitter();
  failed: RelayError | null = null;

  push(chunk: Buffer | string, each: (j: Json | null, ev: SseEvent) => string): string {
    let out = '';
    for (const ev of this.sse.push(chunk)) {
      if (this.failed) break;
      if (ev.comment) {
        out += KEEP_ALIVE;
        continue;
      }
      if (ev.error !== null || ev.event === 'error') {
        this.failed = parseSseError(ev.error ?? ev.data ?? '');
        break;
      }
      if (ev.data === null) continue;
      const j = parseJson(ev.data);
      if (j?.error !== undefined) {
        this.failed = parseSseError(ev.data);
        break;
      }
      out += each(j, ev);
    }
    return out;
  }

  /** llama-server ends every event it sends: an unfinished last one is not passed on. */
  end(): void {
    this.sse.end();
  }
}
