import { SseSplitter, type SseEvent } from './sse.js';

/** llama-server's streams a move can continue (by upstream path); `native` is its own /completion. */
export type WireFormat = 'chat' | 'completions' | 'messages' | 'responses' | 'native';

export type Json = Record<string, unknown>;

/**
 * What the client of a continuable answer was given, read event by event as the events go out (whole events only:
 * the proxy passes nothing else on). It is what a continuation needs and nothing more — the answer's text, its ids
 * and where its blocks stand —, so it stays the size of the text whatever the stream carried (log-probabilities,
 * timings), and it reads the same whether the client's dialect is llama-server's or one it is translated into.
 */
export interface Sent {
  readonly format: WireFormat;
  /** The answer's text so far, and its reasoning (chat's reasoning_content). */
  text: string;
  reasoning: string;
  /** Events that carried generated text (one token each, or more where llama-server held some back). */
  tokens: number;
  /** The native stream's token ids, as reported (a token held back mid-character is reported by none). */
  ids: number[];
  /** The native stream's own count of generated tokens (held ones included), and of the prompt's. */
  predicted: number | null;
  /** The prompt's tokens, where the stream said (a Messages stream's input and cache-read tokens, the native's). */
  promptTokens: number | null;
  /** The first part's own names and times, which the rest keeps: a chunk's id, created, model and fingerprint. */
  id: unknown;
  created: unknown;
  model: unknown;
  fingerprint: unknown;
  /** A Responses stream's message item. */
  item: unknown;
  /** Messages: the block still open at the cut (the continuation's first block joins it), and how many began. */
  openBlock: { index: number; type: string } | null;
  blocks: number;
  /** Why it cannot continue (a tool call begun, thinking, the answer already finished), null when it can. */
  stuck: string | null;
}

export function emptySent(format: WireFormat): Sent {
  return {
    format,
    text: '',
    reasoning: '',
    tokens: 0,
    ids: [],
    predicted: null,
    promptTokens: null,
    id: null,
    created: null,
    model: null,
    fingerprint: null,
    item: null,
    openBlock: null,
    blocks: 0,
    stuck: null,
  };
}

export function parseJson(data: string): Json | null {
  try {
    const j: unknown = JSON.parse(data);
    return typeof j === 'object' && j !== null && !Array.isArray(j) ? (j as Json) : null;
  } catch {
    return null;
  }
}

export const firstChoice = (j: Json): Json | null => (Array.isArray(j.choices) && typeof j.choices[0] === 'object' ? (j.choices[0] as Json) : null);

/** Reads each event the client was given into its Sent. */
export class SentReader {
  readonly sent: Sent;
  private readonly sse = new SseSplitter();

  constructor(format: WireFormat) {
    this.sent = emptySent(format);
  }

  /** Whole events the client was given (their bytes, or their text). */
  push(b: Buffer | string): void {
    for (const ev of this.sse.push(b)) this.take(ev);
  }

  take(ev: SseEvent): void {
    const s = this.sent;
    if (ev.comment) return;
    if (ev.error !== null) {
      s.stuck = 'llama-server reported an error';
      return;
    }
    if (ev.data === null || ev.data === '[DONE]') return;
    const j = parseJson(ev.data);
    if (!j) return;
    if (j.error !== undefined) s.stuck = 'llama-server reported an error';
    else if (s.format === 'messages') readMessages(s, j);
    else if (s.format === 'responses') readResponses(s, j);
    else if (s.format === 'native') readNative(s, j);
    else readOpenAi(s, j);
  }
}

function readNative(s: Sent, j: Json): void {
  if (typeof j.tokens_evaluated === 'number') s.promptTokens = j.tokens_evaluated;
  // A prompt-progress event is not a token (its `tokens` holds a placeholder id).
  if (j.prompt_progress !== undefined) return;
  if (typeof j.tokens_predicted === 'number') s.predicted = j.tokens_predicted;
  if (typeof j.content === 'string' && j.content !== '') s.text += j.content;
  if (Array.isArray(j.tokens) && j.tokens.length > 0) {
    s.ids.push(...j.tokens.map(Number));
    s.tokens += j.tokens.length;
  }
  if (j.stop === true) s.stuck = 'the answer had finished';
}

function readOpenAi(s: Sent, j: Json): void {
  s.id ??= j.id;
  s.created ??= j.created;
  s.model ??= j.model;
  s.fingerprint ??= j.system_fingerprint;
  const c = firstChoice(j);
  if (!c) return;
  const d = (s.format === 'chat' ? c.delta : { content: c.text }) as Json | undefined;
  const content = typeof d?.content === 'string' ? d.content : '';
  const reasoning = typeof d?.reasoning_content === 'string' ? d.reasoning_content : '';
  s.text += content;
  s.reasoning += reasoning;
  if (Array.isArray(d?.tool_calls)) s.stuck = 'a tool call had begun';
  if (content !== '' || reasoning !== '') s.tokens++;
  if (c.finish_reason !== null && c.finish_reason !== undefined) s.stuck = 'the answer had finished';
}

function readMessages(s: Sent, j: Json): void {
  const block = j.content_block as Json | undefined;
  const delta = j.delta as Json | undefined;
  switch (j.type) {
    case 'message_start': {
      const m = j.message as Json | undefined;
      const u = m?.usage as Json | undefined;
      s.id = m?.id;
      s.model = m?.model;
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
      if (delta?.type === 'text_delta' && typeof delta.text === 'string' && delta.text !== '') {
        s.tokens++;
        s.text += delta.text;
      }
      return;
    case 'message_delta':
      s.stuck = 'the answer had finished';
  }
}

function readResponses(s: Sent, j: Json): void {
  const item = j.item as Json | undefined;
  switch (j.type) {
    case 'response.created': {
      const r = j.response as Json | undefined;
      s.id = r?.id;
      s.model = r?.model;
      return;
    }
    case 'response.output_item.added':
      if (item?.type === 'message' && s.item === null) s.item = item.id;
      else s.stuck = `a ${String(item?.type)} item had begun`;
      return;
    case 'response.output_text.delta':
      if (typeof j.delta === 'string' && j.delta !== '') {
        s.tokens++;
        s.text += j.delta;
      }
      return;
    case 'response.output_text.done':
    case 'response.completed':
      s.stuck = 'the answer had finished';
  }
}
