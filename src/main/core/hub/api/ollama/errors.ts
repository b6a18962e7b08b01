import { ErrorCode, httpError } from '../../../../../shared/errors.js';
import type { ErrorShape } from '../../http/errors.js';

/**
 * Ollama's error shape: `{"error": "…"}`, read as text by its clients, in its own words for a model it does not
 * have (which some of them match); a cut stream's last NDJSON line is the same object.
 */
export const OLLAMA_ERRORS: ErrorShape = {
  answer: (err) => ({ status: httpError(err).status, body: { error: err.code === ErrorCode.MODEL_NOT_FOUND ? `model '${String(err.details.model)}' not found` : err.message } }),
  event: (err) => `${JSON.stringify(OLLAMA_ERRORS.answer(err).body)}\n`,
};
