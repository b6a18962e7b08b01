import { StringDecoder } from 'node:string_decoder';
import { ErrorCode, RelayError } from '../../../shared/errors.js';

/**
 * llama-server's failure in the middle of a stream, in the form newer servers send it: a line `error: {json}`
 * (tools/server's `server_sent_event(sink, "error", …)`), where the pinned one sends `data: {"error": …}`. An SSE
 * client ignores a field it does not know, so passed on as it is the answer would simply end, cut short, as if
 * finished. This watches the bytes relay passes on (cheaply: only the starts of lines are looked at) and keeps the
 * error, which the proxy then sends in the client's dialect before the stream ends.
 */
export class SseErrorWatch {
  private decoder = new StringDecoder('utf8');
  /** At the start of a line (the stream's first byte is one). */
  private atLineStart = true;
  /** A line that began with `e`, while it may still be an `error:` line (cut by chunks). */
  private candidate: string | null = null;
  error: RelayError | null = null;

  push(b: Buffer): void {
    let i = 0;
    while (i < b.byteLength && !this.error) {
      if (this.candidate !== null) {
        const nl = b.indexOf(0x0a, i);
        this.candidate += this.decoder.write(b.subarray(i, nl < 0 ? b.byteLength : nl));
        if (nl < 0) {
          if (!mayBeError(this.candidate)) this.drop();
          return;
        }
        this.take(this.candidate);
        this.drop();
        this.atLineStart = true;
        i = nl + 1;
      } else if (this.atLineStart && b[i] === 0x65 /* e */) {
        this.candidate = '';
      } else {
        const nl = b.indexOf(0x0a, i);
        this.atLineStart = nl >= 0;
        i = nl < 0 ? b.byteLength : nl + 1;
      }
    }
  }

  /** Not an error line after all: the rest of it is skipped like any other line. */
  private drop(): void {
    this.candidate = null;
    this.atLineStart = false;
    this.decoder = new StringDecoder('utf8');
  }

  private take(line: string): void {
    if (!line.startsWith('error:')) return;
    const json = line.slice(6).trim();
    let message = 'llama-server reported an error mid-stream';
    try {
      const e = (JSON.parse(json) as { error?: { message?: unknown } | string; message?: unknown }) ?? {};
      const inner = typeof e.error === 'object' ? e.error : e;
      if (typeof e.error === 'string') message = e.error;
      else if (typeof inner?.message === 'string') message = inner.message;
    } catch {
      message = `${message}: ${json.slice(0, 200)}`;
    }
    this.error = new RelayError(ErrorCode.LLAMA_SERVER_ERROR, message);
  }
}

const mayBeError = (s: string): boolean => s.startsWith('error:') || 'error:'.startsWith(s);

/** The `error:` line of a stream as a JSON event (what the pinned server sends as `data:`), or null for any other line. */
export function errorLine(line: string): unknown {
  if (!line.startsWith('error:')) return null;
  const w = new SseErrorWatch();
  w.push(Buffer.from(`${line}\n`));
  return { error: { message: w.error?.message } };
}
