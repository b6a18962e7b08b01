import { httpError } from '../../../../shared/errors.js';
import type { ErrorShape } from '../http/errors.js';
import { type DialectRoute, messages, model, nonNegInt, stream } from './dialect.js';

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

/** Anthropic's error body (`{type: "error", error: {type, message}}`) and its stream's `event: error`, which its SDKs raise. */
export const ANTHROPIC_ERRORS: ErrorShape = {
  answer: (err) => {
    const { status } = httpError(err);
    return { status, body: { type: 'error', error: { type: anthropicType(status), message: err.message } } };
  },
  event: (err) => `event: error\ndata: ${JSON.stringify(ANTHROPIC_ERRORS.answer(err).body)}\n\n`,
};

/** Anthropic's Messages API (Claude Code, the anthropic SDK), in its own error shape. */
export const ANTHROPIC_ROUTES: readonly DialectRoute[] = [
  {
    path: '/v1/messages',
    endpoint: 'messages',
    use: 'generate',
    errors: ANTHROPIC_ERRORS,
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
    errors: ANTHROPIC_ERRORS,
    validate: (b) => {
      const name = model(b);
      messages(b);
      return name;
    },
  },
];
