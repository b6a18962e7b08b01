import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { RelayError } from '../../../../shared/errors.js';
import type { ErrorShape } from '../http/errors.js';
import type { Lease } from '../../scheduler/placements/placement.js';
import type { SpareSockets } from '../../llama/spare-sockets.js';
import type { Usage } from './llama-answer.js';
import type { SentReader } from './sent.js';

/** What proxyToPlacement (proxy.ts) is given and gives back. */

/**
 * An answer rewritten on its way to the client, for a dialect llama-server does not speak (Ollama's NDJSON): it
 * is given llama-server's bytes as they come and returns what the client gets for them ('' for nothing yet).
 */
export interface Translator {
  readonly contentType: string;
  /** Whether the client's answer is a stream of lines (cut by `broken`'s last line) or one body. */
  readonly streams: boolean;
  chunk(b: Buffer): string;
  /** llama-server's answer is complete: the rest (a RelayError thrown here is the client's answer if nothing went yet). */
  end(): string;
  /** The last line of a stream cut by `err`. */
  broken(err: RelayError): string;
}

/**
 * `retry`: nothing was sent, another placement may take it; `halted`: because its placement was stopped, not failed;
 * `yielded` (with `retry` or `moved`): only this answer was stopped, to give its slot to an interactive request.
 * `moved`: its placement was stopped mid-answer and the request said it can continue elsewhere (`reader`): the
 * client's response is still open, the reader holds what it was given, `head` is the stream's start (its usage).
 */
export type ProxyOutcome =
  | { readonly kind: 'done' }
  | { readonly kind: 'retry'; readonly error: RelayError; readonly halted?: boolean; readonly yielded?: boolean }
  | { readonly kind: 'moved'; readonly error: RelayError; readonly head: Buffer; readonly yielded?: boolean };

/**
 * A continuation's stream made the rest of the first part's (stitch.ts: through the dialect's route; retell.ts: from
 * llama-server's own /completion): llama-server's bytes in, whole events in the first part's dialect out.
 */
export interface Continuing {
  push(chunk: Buffer | string): string;
  /** llama-server's answer is complete: anything left. */
  end(): string;
  /** A failure llama-server reported mid-stream: nothing more comes, the client's stream ends with its error. */
  readonly failed: RelayError | null;
  /** Of the continuation's prompt, the tokens llama-server found in its cache, as it said (null: not yet). */
  readonly carried: number | null;
}

export interface ProxyOptions {
  lease: Lease;
  path: string;
  body: Buffer;
  req: IncomingMessage;
  res: ServerResponse;
  log: Logger;
  /** Ready sockets to this machine's llama-servers; without, a fresh connection per request. */
  spares?: SpareSockets;
  /** The route's dialect: the shape of the errors it answers (OpenAI's unless said). */
  errors?: ErrorShape;
  /** The answer rewritten for a dialect llama-server does not speak (see Translator). */
  translate?: Translator;
  /**
   * A continuable answer: whole events only go to the client, each read into what it was given, and a stop
   * mid-answer gives the request back (`moved`) instead of ending the client's stream with an error.
   */
  reader?: SentReader;
  /**
   * A continuation: the response is already under way (`head`: its start); llama-server's bytes pass through
   * `stream` on their way (stitch.ts, retell.ts).
   */
  continuing?: { readonly stream: Continuing; readonly head: Buffer };
  onDone: (status: number, usage: Usage | null) => void;
  /** llama-server's first byte of the answer arrived. */
  onStart?: () => void;
}
