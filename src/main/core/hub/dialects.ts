import { ErrorCode, httpError, RelayError } from '../../../shared/errors.js';

/**
 * The client dialects llama-server already speaks, and how the hub carries each through the pool: the route, the
 * llama-server path it goes to, which kind of model serves it, the few field checks that refuse nonsense with a
 * 400 before a replica is loaded for it, and the shape its errors take (OpenAI's, or Anthropic's on the Messages
 * routes). Everything else — the lease, the queue, failover before the first byte, usage, the request log, API
 * keys — is the same for every route (v1-door.ts).
 */
export type ErrorShape = 'openai' | 'anthropic' | 'ollama';
/** What a route needs of a model: a generating model, an embedding model, a reranker. */
export type ModelUse = 'generate' | 'embed' | 'rerank';

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

type Body = Record<string, unknown>;

function bad(msg: string): never {
  throw new RelayError(ErrorCode.INVALID_REQUEST, msg);
}

const model = (b: Body): string => {
  if (typeof b.model !== 'string' || b.model === '') bad('"model" must be a non-empty string naming a registered model');
  return b.model;
};
const stream = (b: Body): void => {
  if (b.stream !== undefined && typeof b.stream !== 'boolean') bad('"stream" must be a boolean');
};
const nonNegInt = (b: Body, key: string, required = false): void => {
  const v = b[key];
  if (v === undefined && !required) return;
  if (!(Number.isInteger(v) && (v as number) >= 0)) bad(`"${key}" must be a non-negative integer`);
};
const messages = (b: Body): void => {
  if (!Array.isArray(b.messages) || b.messages.length === 0) bad('"messages" must be a non-empty array');
  for (const m of b.messages as unknown[]) {
    if (typeof m !== 'object' || m === null || typeof (m as { role?: unknown }).role !== 'string') bad('each message must be an object with a string "role"');
  }
};
const text = (b: Body, key: string): void => {
  if (typeof b[key] !== 'string') bad(`"${key}" must be a string`);
};
const responsesInput = (b: Body): void => {
  if (!(typeof b.input === 'string' || (Array.isArray(b.input) && b.input.length > 0))) bad('"input" must be a string or a non-empty array of input items');
};

/** A prompt to complete (OpenAI's /v1/completions, llama-server's /completion): its token limit is `limit`. */
const completion = (b: Body, limit: 'max_tokens' | 'n_predict'): string => {
  const name = model(b);
  if (!(typeof b.prompt === 'string' || (Array.isArray(b.prompt) && b.prompt.length > 0))) bad('"prompt" must be a string or a non-empty array');
  stream(b);
  nonNegInt(b, limit);
  return name;
};

export const DIALECT_ROUTES: readonly DialectRoute[] = [
  {
    path: '/v1/chat/completions',
    endpoint: 'chat/completions',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      messages(b);
      stream(b);
      nonNegInt(b, 'max_tokens');
      return name;
    },
  },
  {
    path: '/v1/completions',
    endpoint: 'completions',
    use: 'generate',
    errors: 'openai',
    validate: (b) => completion(b, 'max_tokens'),
  },
  {
    path: '/v1/embeddings',
    endpoint: 'embeddings',
    use: 'embed',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      if (!(typeof b.input === 'string' || (Array.isArray(b.input) && b.input.length > 0))) bad('"input" must be a string or a non-empty array');
      return name;
    },
  },
  // OpenAI's Responses API (Codex CLI): llama-server converts it to a chat completion and back.
  {
    path: '/v1/responses',
    endpoint: 'responses',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      responsesInput(b);
      stream(b);
      nonNegInt(b, 'max_output_tokens');
      return name;
    },
  },
  {
    path: '/v1/responses/input_tokens',
    endpoint: 'responses/input_tokens',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      responsesInput(b);
      return name;
    },
  },
  // Anthropic's Messages API (Claude Code, the anthropic SDK): its own error shape on these routes.
  {
    path: '/v1/messages',
    endpoint: 'messages',
    use: 'generate',
    errors: 'anthropic',
    validate: (b) => {
      const name = model(b);
      messages(b);
      stream(b);
      nonNegInt(b, 'max_tokens', true);
      return name;
    },
  },
  {
    path: '/v1/messages/count_tokens',
    endpoint: 'messages/count_tokens',
    use: 'generate',
    errors: 'anthropic',
    validate: (b) => {
      const name = model(b);
      messages(b);
      return name;
    },
  },
  // Reranking, for models registered as rerankers (their replicas run with --reranking).
  ...['/v1/rerank', '/v1/reranking'].map((path): DialectRoute => ({
    path,
    upstream: '/v1/rerank',
    endpoint: 'rerank',
    use: 'rerank',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      text(b, 'query');
      if (!Array.isArray(b.documents) || b.documents.length === 0 || !b.documents.every((d) => typeof d === 'string')) bad('"documents" must be a non-empty array of strings');
      return name;
    },
  })),
  // llama-server's own completion (Continue's "llama.cpp" provider), the prompt as it is.
  {
    path: '/completion',
    endpoint: 'completion',
    use: 'generate',
    errors: 'openai',
    validate: (b) => completion(b, 'n_predict'),
  },
  // Code completion in editors (llama.vscode, Continue's autocomplete): fill in the middle.
  {
    path: '/infill',
    endpoint: 'infill',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      if (b.input_prefix !== undefined) text(b, 'input_prefix');
      if (b.input_suffix !== undefined) text(b, 'input_suffix');
      if (b.input_prefix === undefined && b.input_suffix === undefined && b.prompt === undefined) bad('"input_prefix" and "input_suffix" (or "prompt") are what to fill between');
      stream(b);
      nonNegInt(b, 'n_predict');
      return name;
    },
  },
  // llama-server's own helpers, with a "model" field to say whose tokenizer.
  {
    path: '/tokenize',
    endpoint: 'tokenize',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      text(b, 'content');
      return name;
    },
  },
  {
    path: '/detokenize',
    endpoint: 'detokenize',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      if (!Array.isArray(b.tokens) || !b.tokens.every((t) => Number.isInteger(t))) bad('"tokens" must be an array of token ids');
      return name;
    },
  },
  {
    path: '/apply-template',
    endpoint: 'apply-template',
    use: 'generate',
    errors: 'openai',
    validate: (b) => {
      const name = model(b);
      messages(b);
      return name;
    },
  },
];

/** Anthropic's error `type` for an HTTP status (its API's table; 5xx that is the pool's is `overloaded_error`). */
function anthropicType(status: number): string {
  if (status === 400 || status === 409 || status === 415 || status === 422) return 'invalid_request_error';
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 503) return 'overloaded_error';
  return 'api_error';
}

/** An error as a route's dialect answers it: the same status everywhere, the body in its clients' shape. */
export function errorIn(shape: ErrorShape, err: RelayError): { status: number; body: unknown } {
  const { status, body } = httpError(err);
  if (shape === 'openai') return { status, body };
  // Ollama's clients read `error` as text; its own words for a model it does not have (which some of them match).
  if (shape === 'ollama') return { status, body: { error: err.code === ErrorCode.MODEL_NOT_FOUND ? `model '${String(err.details.model)}' not found` : err.message } };
  return { status, body: { type: 'error', error: { type: anthropicType(status), message: err.message } } };
}

/** The last event of a stream cut by an error, as the dialect's clients read it (their SDKs raise it). */
export function streamErrorIn(shape: ErrorShape, err: RelayError): string {
  const { body } = errorIn(shape, err);
  if (shape === 'ollama') return `${JSON.stringify(body)}\n`; // NDJSON: the line ollama's clients raise
  return shape === 'anthropic' ? `event: error\ndata: ${JSON.stringify(body)}\n\n` : `data: ${JSON.stringify(body)}\n\n`;
}
