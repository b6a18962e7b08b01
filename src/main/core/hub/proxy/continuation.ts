/**
 * An answer that moves: what the client was sent before its placement stopped, and the request that continues it
 * on another placement — pure (stitch.ts rewrites the continuation's stream as the rest of the first).
 *
 * The continuation is llama-server's own: a chat's messages with the partial answer as a final assistant message
 * (llama-server continues that message: its template renders it without the end of the turn), a Messages or
 * Responses request the same way, a completion's prompt with the partial text after it. Its prompt is then the
 * original prompt and the tokens already sent, re-tokenized from their text: where those come back as the same
 * tokens, a greedy continuation gives the text the placement that never stopped would have given (measured: the
 * `wordy` fixture, every cut; docs/how-it-works.md "A pause during an answer"). llama-server's own /completion
 * streams its token ids: its continuation's prompt carries them as they are, exact whatever the tokenizer.
 *
 * What cannot continue mid-way ends with the error as before: more than one choice, a grammar or a JSON format
 * (its constraint would start over), a tool call or a reasoning item begun, a Messages answer that had begun
 * thinking, a client's own assistant prefill, a prompt given as tokens, `echo`.
 */

/** llama-server's streams a move can continue (by upstream path); `native` is its own /completion. */
export type WireFormat = 'chat' | 'completions' | 'messages' | 'responses' | 'native';

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

export type Json = Record<string, unknown>;

/** What the first placement streamed to the client, read from its SSE bytes (whole events only). */
export interface Sent {
  readonly format: WireFormat;
  /** The answer's text so far, and its reasoning (chat's reasoning_content). */
  text: string;
  reasoning: string;
  /** Generated tokens sent: one event each (llama-server streams each token as it is decoded). */
  tokens: number;
  /** The native stream's token ids, as decoded (its continuation's prompt takes them as they are). */
  ids: number[];
  id: unknown;
  created: unknown;
  /** A Responses stream's message item. */
  item: unknown;
  /** A Messages stream's prompt (its input and cache-read tokens). */
  promptTokens: number | null;
  /** Messages: the block still open at the cut (the continuation's first block joins it), and how many began. */
  openBlock: { index: number; type: string } | null;
  blocks: number;
  /** Why it cannot continue (a tool call begun, thinking, the answer already finished), null when it can. */
  stuck: string | null;
}

/** The SSE events in `text`: each event's `event:` name and `data:` line; `rest` is an unfinished event. */
export function sseEvents(text: string): { events: { event: string | null; data: string }[]; rest: string } {
  const parts = text.split('\n\n');
  const rest = parts.pop() ?? '';
  const events = parts
    .filter((p) => p.trim() !== '')
    .map((p) => {
      let event: string | null = null;
      const data: string[] = [];
      for (const line of p.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      return { event, data: data.join('\n') };
    });
  return { events, rest };
}

export function parse(data: string): Json | null {
  try {
    const j: unknown = JSON.parse(data);
    return typeof j === 'object' && j !== null ? (j as Json) : null;
  } catch {
    return null;
  }
}

export const firstChoice = (j: Json): Json | null => (Array.isArray(j.choices) && typeof j.choices[0] === 'object' ? (j.choices[0] as Json) : null);

/** Reads what the client got; null when the bytes do not end on an event boundary (a half event went out). */
export function readSent(format: WireFormat, sse: string): Sent | null {
  const { events, rest } = sseEvents(sse);
  if (rest.trim() !== '') return null;
  const s: Sent = { format, text: '', reasoning: '', tokens: 0, ids: [], id: null, created: null, item: null, promptTokens: null, openBlock: null, blocks: 0, stuck: null };
  for (const ev of events) {
    const j = parse(ev.data);
    if (!j) continue;
    if (format === 'messages') readMessagesEvent(s, j);
    else if (format === 'responses') readResponsesEvent(s, j);
    else if (format === 'native') {
      if (typeof j.content === 'string' && j.content !== '') s.text += j.content;
      if (Array.isArray(j.tokens) && j.tokens.length > 0) {
        s.ids.push(...j.tokens.map(Number));
        s.tokens += j.tokens.length;
      }
      if (j.stop === true) s.stuck = 'the answer had finished';
    } else {
      s.id ??= j.id;
      s.created ??= j.created;
      const c = firstChoice(j);
      if (!c) continue;
      const d = (format === 'chat' ? c.delta : { content: c.text }) as Json | undefined;
      if (typeof d?.content === 'string' && d.content !== '') s.text += d.content;
      if (typeof d?.reasoning_content === 'string' && d.reasoning_content !== '') s.reasoning += d.reasoning_content;
      if (Array.isArray(d?.tool_calls)) s.stuck = 'a tool call had begun';
      if ((typeof d?.content === 'string' && d.content !== '') || typeof d?.reasoning_content === 'string' || d?.tool_calls) s.tokens++;
      if (c.finish_reason !== null && c.finish_reason !== undefined) s.stuck = 'the answer had finished';
    }
  }
  return s;
}

function readMessagesEvent(s: Sent, j: Json): void {
  const block = j.content_block as Json | undefined;
  const delta = j.delta as Json | undefined;
  switch (j.type) {
    case 'message_start': {
      const m = j.message as Json | undefined;
      const u = m?.usage as Json | undefined;
      s.id = m?.id;
      if (typeof u?.input_tokens === 'number') s.promptTokens = u.input_tokens + (typeof u.cache_read_input_tokens === 'number' ? u.cache_read_input_tokens : 0);
      return;
    }
    case 'content_block_start':
      s.blocks++;
      s.openBlock = { index: Number(j.index), type: String(block?.type) };
      if (block?.type !== 'text') s.stuck = `a ${String(block?.type)} block had begun`;
      return;
    case 'content_block_stop':
      s.openBlock = null;
      return;
    case 'content_block_delta':
      s.tokens++;
      if (delta?.type === 'text_delta' && typeof delta.text === 'string') s.text += delta.text;
      return;
    case 'message_delta':
      s.stuck = 'the answer had finished';
  }
}

function readResponsesEvent(s: Sent, j: Json): void {
  const item = j.item as Json | undefined;
  switch (j.type) {
    case 'response.created':
      s.id = (j.response as Json | undefined)?.id;
      return;
    case 'response.output_item.added':
      if (item?.type === 'message' && s.item === null) s.item = item.id;
      else s.stuck = `a ${String(item?.type)} item had begun`;
      return;
    case 'response.output_text.delta':
      s.tokens++;
      if (typeof j.delta === 'string') s.text += j.delta;
      return;
    case 'response.output_text.done':
    case 'response.completed':
      s.stuck = 'the answer had finished';
  }
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
