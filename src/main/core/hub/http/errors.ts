import { httpError, type RelayError } from '../../../../shared/errors.js';

/**
 * How a dialect's clients read an error: the same HTTP status everywhere, the body — and the last event of a stream
 * an error cuts — in the shape their SDKs raise. Each dialect that has its own gives it (api/anthropic.ts,
 * api/ollama/errors.ts); OpenAI's is the hub's own, for the admin API and every route that names no other.
 */
export interface ErrorShape {
  answer(err: RelayError): { status: number; body: unknown };
  /** The last event of a stream cut by `err`. */
  event(err: RelayError): string;
}

export const OPENAI_ERRORS: ErrorShape = {
  answer: (err) => httpError(err),
  event: (err) => `data: ${JSON.stringify(httpError(err).body)}\n\n`,
};
