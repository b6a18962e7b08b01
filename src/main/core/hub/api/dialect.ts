import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { ErrorShape } from '../http/errors.js';
import type { ModelUse } from '../proxy/pooled.js';

/**
 * A client route llama-server already speaks, and how the hub carries it through the pool: the route, the
 * llama-server path it goes to, which kind of model serves it, the few field checks that refuse nonsense with a 400
 * before a replica is loaded for it, and the shape its errors take. Each dialect's routes are in its own file
 * (openai.ts, responses.ts, anthropic.ts, llama.ts), listed once in dialects.ts; everything else — the lease, the
 * queue, failover before the first byte, moves, usage, the request log, API keys — is the same for every route
 * (v1-door.ts, then proxy/pooled.ts).
 */
export interface DialectRoute {
  /** The hub's path (llama-server's is the same, `upstream` when it differs). */
  readonly path: string;
  readonly upstream?: string;
  /** What the request log and /metrics call it. */
  readonly endpoint: string;
  readonly use: ModelUse;
  readonly errors: ErrorShape;
  /** Checks the body; the model's name. */
  validate(body: Record<string, unknown>): string;
}

/* The field checks the dialects share: each throws the 400 a client reads. */

export type Body = Record<string, unknown>;

export function bad(msg: string): never {
  throw new RelayError(ErrorCode.INVALID_REQUEST, msg);
}

export const model = (b: Body): string => {
  if (typeof b.model !== 'string' || b.model === '') bad('"model" must be a non-empty string naming a registered model');
  return b.model;
};
export const stream = (b: Body): void => {
  if (b.stream !== undefined && typeof b.stream !== 'boolean') bad('"stream" must be a boolean');
};
export const nonNegInt = (b: Body, key: string, required = false): void => {
  const v = b[key];
  if (v === undefined && !required) return;
  if (!(Number.isInteger(v) && (v as number) >= 0)) bad(`"${key}" must be a non-negative integer`);
};
export const messages = (b: Body): void => {
  if (!Array.isArray(b.messages) || b.messages.length === 0) bad('"messages" must be a non-empty array');
  for (const m of b.messages as unknown[]) {
    if (typeof m !== 'object' || m === null || typeof (m as { role?: unknown }).role !== 'string') bad('each message must be an object with a string "role"');
  }
};
export const text = (b: Body, key: string): void => {
  if (typeof b[key] !== 'string') bad(`"${key}" must be a string`);
};
export const responsesInput = (b: Body): void => {
  if (!(typeof b.input === 'string' || (Array.isArray(b.input) && b.input.length > 0))) bad('"input" must be a string or a non-empty array of input items');
};

/** A prompt to complete (OpenAI's /v1/completions, llama-server's /completion): its token limit is `limit`. */
export const completion = (b: Body, limit: 'max_tokens' | 'n_predict'): string => {
  const name = model(b);
  if (!(typeof b.prompt === 'string' || (Array.isArray(b.prompt) && b.prompt.length > 0))) bad('"prompt" must be a string or a non-empty array');
  stream(b);
  nonNegInt(b, limit);
  return name;
};
