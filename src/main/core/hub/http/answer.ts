import type { ServerResponse } from 'node:http';
import type { Logger } from 'pino';
import { ErrorCode, isRelayError, RelayError } from '../../../../shared/errors.js';
import { OPENAI_ERRORS, type ErrorShape } from './errors.js';

/**
 * Whatever a middleware threw, as a coded error: the body reader's own (too large) get theirs, anything that is
 * not a RelayError is INTERNAL.
 */
export function asRelayError(err: unknown, maxBodyBytes: number): RelayError {
  if (isRelayError(err)) return err;
  const e = err as { type?: string };
  if (e?.type === 'entity.too.large') return new RelayError(ErrorCode.PAYLOAD_TOO_LARGE, `the request body is larger than ${(maxBodyBytes / 1048576).toFixed(1)} MB (${maxBodyBytes} bytes)`);
  return new RelayError(ErrorCode.INTERNAL, 'internal error');
}

/** Answer with the error's HTTP status and OpenAI-shaped body (a non-relay error is logged and is a 500). */
export function sendError(res: ServerResponse, err: unknown, log: Logger): void {
  if (!isRelayError(err)) log.error({ err }, 'unhandled error');
  sendIn(OPENAI_ERRORS, res, isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error'));
}

/** Answer `err` in a dialect's shape (Retry-After for pool_busy); a response already under way is cut. */
export function sendIn(shape: ErrorShape, res: ServerResponse, err: RelayError): void {
  if (res.headersSent) return void res.destroy();
  const { status, body } = shape.answer(err);
  if (typeof err.details.retry_after_s === 'number') res.setHeader('retry-after', String(err.details.retry_after_s));
  sendJson(res, status, body);
}

/**
 * A JSON answer on node's own response (what express's res.status(s).json(b) sends, less its ETag): the /v1
 * routes answer ahead of express (v1-door.ts).
 */
export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('content-type', 'application/json; charset=utf-8');
  res.setHeader('content-length', Buffer.byteLength(text));
  res.end(text);
}
