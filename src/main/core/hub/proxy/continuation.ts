/**
 * An answer that moves: the request that continues it on another placement — pure (stitch.ts and retell.ts make the
 * continuation's stream the rest of the first).
 *
 * Where the first placement's record of its tokens is at hand (exact.ts), the continuation is llama-server's own
 * /completion with those tokens as its prompt — the prompt as that placement tokenized it and the answer as it
 * generated it, cut where the client's text ends —, so at temperature 0 it goes on exactly as the answer would have,
 * whatever the tokenizer makes of the text (`exactBody`). That needs no parser of llama-server's: a request that
 * offers tools (a tool call the continuation began would need its grammar and parser) or asks for log-probabilities
 * continues the other way.
 *
 * The other way (`continuationBody`) is llama-server's route of the client's dialect: a chat's messages with the
 * partial answer as a final assistant message (its template renders it without the end of the turn), a Messages or
 * Responses request the same way, a completion's prompt with the partial text after it. The partial is then
 * tokenized again from its text, which gives the same tokens only where the model chose the tokenizer's own split.
 *
 * What cannot continue mid-way ends with the error as before: more than one choice, a grammar or a JSON format
 * (its constraint would start over), a tool call or a reasoning item begun, a Messages answer that had begun
 * thinking, a client's own assistant prefill, a prompt given as tokens, `echo`.
 */

import type { Json, Sent, WireFormat } from './sent.js';

const FORMATS: Readonly<Record<string, WireFormat>> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/messages': 'messages',
  '/v1/responses': 'responses',
  '/completion': 'native',
};

export function wireFormat(path: string): WireFormat | null {
  return FORMATS[path] ?? null;
}

/** Why a request cannot be continued mid-way whatever it streamed (checked before it starts); null: it can. */
export function cannotContinue(format: WireFormat, body: Json): string | null {
  if (body.stream !== true) return 'not streamed';
  if (typeof body.n === 'number' && body.n > 1) return 'several choices';
  if (body.grammar !== undefined || body.json_schema !== undefined) return 'a grammar';
  const rf = body.response_format as Json | undefined;
  if (rf && rf.type !== 'text') return 'a response format';
  if (format === 'completions' || format === 'native') {
    if (typeof body.prompt !== 'string') return 'a prompt that is not one string';
    if (body.echo === true) return 'echo';
    return null;
  }
  if (format === 'responses') {
    const tf = (body.text as Json | undefined)?.format as Json | undefined;
    if (tf && tf.type !== 'text') return 'a response format';
    const input = body.input;
    if (Array.isArray(input) && (input.at(-1) as Json | undefined)?.role === 'assistant') return "the client's own assistant prefill";
    return null;
  }
  const messages = body.messages;
  if (!Array.isArray(messages) || (messages.at(-1) as Json | undefined)?.role === 'assistant') return "the client's own assistant prefill";
  if (format === 'messages' && (body.thinking as Json | undefined)?.type === 'enabled') return 'thinking';
  return null;
}

const LIMITS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens', 'n_predict'] as const;

/** The token limit left after `generated` were sent: null when none was set (-1: llama.cpp's "no limit"), 0: none left. */
function limitLeft(body: Json, generated: number): number | null {
  let left: number | null = null;
  for (const k of LIMITS) {
    const v = body[k];
    if (typeof v !== 'number' || v < 0) continue;
    left = Math.min(left ?? Infinity, Math.max(0, v - generated));
  }
  return left;
}

/** Whether the exact continuation (llama-server's /completion, no parser of its) can carry this request's rest. */
export function exactPossible(body: Json): boolean {
  const tools = body.tools;
  if (Array.isArray(tools) ? tools.length > 0 : tools !== undefined && tools !== null) return false;
  return body.logprobs === undefined || body.logprobs === false || body.logprobs === null;
}

/** The dialect's fields that are its own structure, not sampling: none of them goes to /completion. */
const STRUCTURE = new Set([
  'model',
  'messages',
  'prompt',
  'input',
  'instructions',
  'system',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'stream',
  'stream_options',
  'response_format',
  'text',
  'thinking',
  'reasoning',
  'metadata',
  'store',
  'previous_response_id',
  'user',
  'n',
  'echo',
  'suffix',
  'logprobs',
  'top_logprobs',
  'chat_template_kwargs',
  'reasoning_format',
  'stop_sequences',
  ...LIMITS,
]);

/**
 * llama-server's /completion request that goes on from `ids` (the prompt's tokens and the answer's so far, exact.ts)
 * with the request's own sampling; a string when no tokens are left to generate.
 */
export function exactBody(body: Json, ids: readonly number[], generated: number): Json | string {
  const next: Json = {};
  for (const [k, v] of Object.entries(body)) if (!STRUCTURE.has(k)) next[k] = v;
  const left = limitLeft(body, generated);
  if (left === 0) return 'no tokens left';
  const stop = body.stop ?? body.stop_sequences;
  return { ...next, ...(stop !== undefined ? { stop: typeof stop === 'string' ? [stop] : stop } : {}), prompt: [...ids], n_predict: left ?? -1, stream: true };
}

/** The request that continues `body` after `sent`: the partial answer added, the token limit less what was sent. */
export function continuationBody(body: Json, sent: Sent): Json | string {
  const why = sent.stuck ?? cannotContinue(sent.format, body);
  if (why) return why;
  const next: Json = { ...body };
  for (const k of LIMITS) {
    if (typeof body[k] !== 'number' || body[k] < 0) continue; // -1: no limit (llama.cpp's own default)
    const left = body[k] - sent.tokens;
    if (left <= 0) return 'no tokens left';
    next[k] = left;
  }
  if (sent.format === 'completions') next.prompt = String(body.prompt) + sent.text;
  // llama-server's own completion takes token ids in its prompt: the tokens it chose, exactly.
  else if (sent.format === 'native') next.prompt = [String(body.prompt), ...sent.ids];
  else if (sent.format === 'responses') {
    const input = typeof body.input === 'string' ? [{ role: 'user', content: body.input }] : (body.input as unknown[]);
    next.input = [...input, { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: sent.text }] }];
  } else {
    const partial: Json = { role: 'assistant', content: sent.text };
    if (sent.reasoning) partial.reasoning_content = sent.reasoning;
    next.messages = [...(body.messages as unknown[]), partial];
  }
  return next;
}
