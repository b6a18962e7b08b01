import { StringDecoder } from 'node:string_decoder';

/**
 * Server-sent events as llama-server writes them, read as they arrive: bytes cut anywhere (a character split
 * between two reads is decoded once whole: one decoder over the whole stream), events cut at their blank line.
 * An event is its `event:` name, its `data:` lines joined, an `error:` line (a newer llama-server's mid-stream
 * failure) and whether it was only a comment (`:` — llama-server's keep-alive while a long prompt is read).
 */
export interface SseEvent {
  readonly event: string | null;
  /** The data lines joined with "\n"; null when the event has none. */
  readonly data: string | null;
  /** An `error:` line's value (a newer llama-server's failure), or null. */
  readonly error: string | null;
  /** Only comment lines: a keep-alive, to be passed on as one and never read as data. */
  readonly comment: boolean;
  /** The event as it came, its blank line included. */
  readonly raw: string;
}

/** Pure: one event's text (without its blank line) as an SseEvent. */
export function parseEvent(text: string): SseEvent {
  let event: string | null = null;
  let error: string | null = null;
  const data: string[] = [];
  let fields = 0;
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith(':')) continue;
    fields++;
    const colon = line.indexOf(':');
    const name = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (name === 'event') event = value.trim();
    else if (name === 'data') data.push(value);
    else if (name === 'error') error = value.trim();
  }
  return { event, data: data.length > 0 ? data.join('\n') : null, error, comment: fields === 0, raw: `${text}\n\n` };
}

/** Pure: the whole events in `text` and what is left of an unfinished one. */
export function sseEvents(text: string): { events: SseEvent[]; rest: string } {
  const parts = text.split('\n\n');
  const rest = parts.pop() ?? '';
  return { events: parts.filter((p) => p.trim() !== '').map(parseEvent), rest };
}

/** An SSE stream read as it arrives: whole events out, the rest held until its blank line comes. */
export class SseSplitter {
  private readonly decoder = new StringDecoder('utf8');
  private buf = '';

  push(b: Buffer | string): SseEvent[] {
    const { events, rest } = sseEvents(this.buf + (typeof b === 'string' ? b : this.decoder.write(b)));
    this.buf = rest;
    return events;
  }

  /** What was left of an unfinished last event (llama-server ends every event it sends). */
  end(): string {
    const rest = this.buf + this.decoder.end();
    this.buf = '';
    return rest;
  }
}

/** An event written back: its name, one data line (an object is serialized). */
export function writeEvent(event: string | null, data: unknown): string {
  return `${event ? `event: ${event}\n` : ''}data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;
}

/** A keep-alive as llama-server writes one. */
export const KEEP_ALIVE = ':\n\n';
