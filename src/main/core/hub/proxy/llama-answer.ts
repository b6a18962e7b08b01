import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/** What llama-server's answer says beyond its bytes: the token counts at its end, and its refusal of a request. */

/** A request's token counts and speeds as llama-server reported them. */
export interface Usage {
  promptTokens: number;
  completionTokens: number;
  tokensPerSecond: number | null;
  /** Of the prompt's tokens, those llama-server found in its KV cache (null: not reported). */
  cachedTokens: number | null;
  /** llama-server's time on the prompt and the tokens it evaluated (timings.prompt_ms / prompt_n), for its prompt speed. */
  promptMs: number | null;
  promptEvaluated: number | null;
  /** Speculative decoding: tokens the draft model proposed, and how many the model accepted (null: no draft). */
  drafted: number | null;
  draftAccepted: number | null;
}

/**
 * Token counts from the end of a response (and its start, `head`): `usage` in JSON bodies (OpenAI's
 * prompt/completion tokens, the Responses and Messages APIs' input/output tokens — a Messages stream's input
 * tokens in its first event, its cache reads counted in), `timings` in llama-server's last SSE chunk (the
 * prompt's cached tokens counted in).
 */
export function usageFromTail(tail: string, head = ''): Usage | null {
  const text = `${head}\n${tail}`;
  const num = (re: RegExp): number | null => {
    const all = [...text.matchAll(re)];
    const last = all[all.length - 1];
    return last ? Number(last[1]) : null;
  };
  const input = num(/"input_tokens":(\d+)/g);
  const anthropicPrompt = input === null ? null : input + (num(/"cache_read_input_tokens":(\d+)/g) ?? 0);
  const evaluated = num(/"prompt_n":(\d+)/g);
  const timedPrompt = evaluated === null ? null : evaluated + (num(/"cache_n":(\d+)/g) ?? 0); // cache_n: the prompt's cached part
  const prompt = num(/"prompt_tokens":(\d+)/g) ?? anthropicPrompt ?? timedPrompt;
  const completion = num(/"completion_tokens":(\d+)/g) ?? num(/"output_tokens":(\d+)/g) ?? num(/"predicted_n":(\d+)/g);
  if (prompt === null && completion === null) return null;
  const cached = num(/"cached_tokens":(\d+)/g) ?? num(/"cache_n":(\d+)/g) ?? num(/"cache_read_input_tokens":(\d+)/g);
  return {
    promptTokens: prompt ?? 0,
    completionTokens: completion ?? 0,
    tokensPerSecond: num(/"predicted_per_second":([\d.]+)/g),
    cachedTokens: cached,
    promptMs: num(/"prompt_ms":([\d.]+)/g),
    promptEvaluated: evaluated,
    drafted: num(/"draft_n":(\d+)/g),
    draftAccepted: num(/"draft_n_accepted":(\d+)/g),
  };
}

/** llama-server's error `type` (tools/server's format_error_response) → relay's stable code. */
const LLAMA_ERROR_TYPES: Readonly<Record<string, ErrorCode>> = {
  invalid_request_error: ErrorCode.INVALID_REQUEST,
  exceed_context_size_error: ErrorCode.CONTEXT_LENGTH_EXCEEDED,
  not_supported_error: ErrorCode.NOT_SUPPORTED,
  not_found_error: ErrorCode.NOT_FOUND,
  server_error: ErrorCode.LLAMA_SERVER_ERROR,
};

/**
 * Pure: llama-server's refusal of a request, from its status and body — `{"error": {"code", "message", "type",
 * …}}` — as a RelayError with llama-server's status and message and a stable code (its other fields, such as
 * n_prompt_tokens and n_ctx, as details). Null when the answer is not one: not JSON, no message, or the 503 it
 * gives while its model loads (that is the placement's state, not the request's fault).
 */
export function llamaRefusal(status: number, body: string): RelayError | null {
  let e: unknown;
  try {
    e = (JSON.parse(body) as { error?: unknown }).error;
  } catch {
    return null;
  }
  if (typeof e !== 'object' || e === null) return null;
  const { message, type, code: _code, ...rest } = e as Record<string, unknown>;
  if (typeof message !== 'string') return null;
  if (status === 503 || type === 'unavailable_error') return null;
  const code = (typeof type === 'string' ? LLAMA_ERROR_TYPES[type] : undefined) ?? (status >= 500 ? ErrorCode.LLAMA_SERVER_ERROR : ErrorCode.INVALID_REQUEST);
  return new RelayError(code, message, rest, { status });
}
