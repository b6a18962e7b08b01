import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * llama-server's failure in the middle of a stream, in the form newer servers send it: a line `error: {json}`
 * (tools/server's `server_sent_event(sink, "error", …)`), where the pinned one sends `data: {"error": …}`. An SSE
 * client ignores a field it does not know, so passed on as it is the answer would simply end, cut short, as if
 * finished. The server ends its stream right after that line, so the proxy looks for it once, in the tail of the
 * stream it keeps anyway (nothing per chunk), and ends the client's stream with its dialect's error.
 */

/** The error an `error:` line's JSON carries (`{"error": {…}}`, `{"message": …}` or a string). */
export function parseSseError(json: string): RelayError {
  let message = 'llama-server reported an error mid-stream';
  try {
    const e = (JSON.parse(json) as { error?: { message?: unknown } | string; message?: unknown }) ?? {};
    if (typeof e.error === 'string') message = e.error;
    else if (typeof (e.error ?? e).message === 'string') message = (e.error ?? e).message as string;
  } catch {
    message = `${message}: ${json.slice(0, 200)}`;
  }
  return new RelayError(ErrorCode.LLAMA_SERVER_ERROR, message);
}

/** The error a stream's tail ends with, when its last line is an `error:` one; else null. */
export function endingError(tail: string): RelayError | null {
  const last = tail.trimEnd().split('\n').at(-1)?.trim() ?? '';
  return last.startsWith('error:') ? parseSseError(last.slice(6).trim()) : null;
}
