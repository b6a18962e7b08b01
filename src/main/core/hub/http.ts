import type { MemorySummary } from '../gguf/memory.js';
import { timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Express, RequestHandler } from 'express';
import type { Logger } from 'pino';
import { ErrorCode, isRelayError, RelayError } from '../../../shared/errors.js';
import { errorIn, type ErrorShape } from './dialects.js';
import type { HubConfig } from '../config.js';
import type { Pulls } from '../models/hf/pulls.js';
import type { ModelRegistry } from '../models/registry.js';
import type { Scheduler } from '../scheduler/scheduler.js';
import type { ModelRecord } from '../store/store.js';
import type { HubMetrics } from './metrics.js';
import type { NodeManager } from '../pool/manager.js';
import type { HubAvailability } from './availability.js';
import type { History } from './history.js';
import type { SpareSockets } from '../llama/spare-sockets.js';
import type { ApiKeys } from './keys.js';
import type { HubAuth } from './auth.js';
import type { ModelStatus, MoveDto, RecentRequest } from '../../../shared/status.js';
import type { Recent } from './routes-v1.js';

/** What the hub's HTTP surface is built from (hub/index.ts assembles it). */
export interface AppDeps {
  readonly config: HubConfig;
  readonly registry: ModelRegistry;
  /** Downloads from Hugging Face (`relay models pull`). */
  readonly pulls: Pulls;
  readonly scheduler: Scheduler;
  readonly nodes: NodeManager;
  readonly metrics: HubMetrics;
  readonly log: Logger;
  readonly version: string;
  readonly llama: { tag: string; version: string; backend: string; backend_reason: string };
  readonly availability: HubAvailability;
  readonly keys: ApiKeys;
  /** Joining is refused on plain HTTP: the token and the credential only cross over TLS. */
  readonly nodesOverTlsOnly?: boolean;
  /** Ready connections to this machine's llama-servers (see spare-sockets.ts); none: a fresh connect each. */
  readonly spares?: SpareSockets;
  /** The CPU budget now (it can change while the hub runs); absent: the config's. */
  readonly cpuBudgetMb?: () => number;
  /** The charts' last minutes (history.ts), for a dashboard opened now. */
  readonly history?: History;
}

/** What every group of routes shares: the deps, the JSON body reader, the auth checks, the request log, the model view. */
export interface HubHttp {
  readonly deps: AppDeps;
  /** A JSON body: application/json only (415 otherwise), read up to the size limit. */
  readonly raw: RequestHandler;
  readonly auth: HubAuth;
  readonly recent: Recent<RecentRequest>;
  /** Answers moved mid-stream (pooled.ts). */
  readonly moves: Recent<MoveDto>;
  /** A model as the admin API and /status show it: the record, its need and whether it can run now. */
  readonly modelView: (m: ModelRecord) => ModelView;
}

/** A model on the admin API: the stored record in snake_case (mtime_ms), with its need and whether it runs now. */
export type ModelView = Omit<ModelRecord, 'mtimeMs' | 'parts' | 'memory' | 'draft'> & {
  mtime_ms: number;
  /** The cache layout in counts (gguf/memory.ts memorySummary), not the per-layer record. */
  memory?: MemorySummary | null;
  draft?: Omit<NonNullable<ModelRecord['draft']>, 'memory'>;
  parts?: { path: string; sha256: string; size: number; mtime_ms: number }[];
} & ModelViewExtra;

/** What the admin API adds to a model record: the same fields /status shows for it. */
export type ModelViewExtra = Pick<ModelStatus, 'file' | 'need_mb' | 'need' | 'fits_now' | 'shortfall' | 'why_not'>;

/** A group of routes, mounted on the app in the order app.ts gives. */
export type Mount = (app: Express, h: HubHttp) => void;

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
  sendIn('openai', res, isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error'));
}

/** Answer `err` in a dialect's shape (Retry-After for pool_busy); a response already under way is cut. */
export function sendIn(shape: ErrorShape, res: ServerResponse, err: RelayError): void {
  if (res.headersSent) return void res.destroy();
  const { status, body } = errorIn(shape, err);
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
