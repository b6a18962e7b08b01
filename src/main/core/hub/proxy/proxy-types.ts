import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import type { RelayError } from '../../../../shared/errors.js';
import type { ErrorShape } from '../http/errors.js';
import type { Lease } from '../../scheduler/placements/placement.js';
import type { SpareSockets } from '../../llama/spare-sockets.js';
import type { Usage } from './llama-answer.js';
import type { Stitcher } from './stitch.js';

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
 * `retry`: nothing was sent, another placement may take it; `halted`: because its placement was stopped, not failed.
 * `moved`: its placement was stopped mid-answer and the request said it can continue elsewhere (`continuable`): the
 * client's response is still open, `sent` is every byte of llama-server's stream it was given (whole events).
 */
export type ProxyOutcome =
  | { readonly kind: 'done' }
  | { readonly kind: 'retry'; readonly error: RelayError; readonly halted?: boolean }
  | { readonly kind: 'moved'; readonly error: RelayError; readonly sent: Buffer; readonly head: Buffer };

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
  /** A stop mid-answer gives the request back (`moved`) instead of ending the client's stream with an error. */
  continuable?: boolean;
  /**
   * A continuation: the response is already under way (`sent`: what it was given, `head`: its start); llama-server's
   * bytes pass through the stitcher on their way (continuation.ts).
   */
  continuing?: { readonly stitch: Stitcher; readonly sent: Buffer; readonly head: Buffer };
  onDone: (status: number, usage: Usage | null) => void;
  /** llama-server's first byte of the answer arrived. */
  onStart?: () => void;
}
