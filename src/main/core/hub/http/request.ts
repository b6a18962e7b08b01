import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/** A /v1 request as the pool serves it: node's request, its body read into `body` (body.ts) — express's or not. */
export type V1Request = IncomingMessage & { body?: unknown };

export function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export function bearer(req: IncomingMessage): string | undefined {
  const h = req.headers.authorization;
  const m = h ? /^Bearer\s+(.+)$/i.exec(h) : null;
  return m?.[1];
}

/** A JSON field read as text: a string as it is, a number as its digits, anything else (an object, null) as ''. */
export function textField(v: unknown): string {
  return typeof v === 'string' ? v : typeof v === 'number' ? String(v) : '';
}

/** Parse a raw JSON body; the caller has already enforced the size limit. */
export function parseJson(req: V1Request): Record<string, unknown> {
  const raw = req.body as Buffer | undefined;
  if (!raw || raw.byteLength === 0) throw new RelayError(ErrorCode.INVALID_REQUEST, 'the request body is empty; send a JSON object');
  let v: unknown;
  try {
    v = JSON.parse(raw.toString('utf8'));
  } catch (err) {
    throw new RelayError(ErrorCode.INVALID_JSON, `the request body is not valid JSON: ${(err as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new RelayError(ErrorCode.INVALID_REQUEST, 'the request body must be a JSON object');
  return v as Record<string, unknown>;
}
