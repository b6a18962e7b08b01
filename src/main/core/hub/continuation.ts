/**
 * An answer that moves: what the client was sent before its placement stopped, the request that continues it on
 * another placement, and the continuation's stream rewritten to read as the rest of the first — pure.
 *
 * The continuation is llama-server's own: a chat's messages with the partial answer as a final assistant message
 * (llama-server continues that message: its template renders it without the end of the turn), a completion's
 * prompt with the partial text after it, a Messages request the same as a chat. Its prompt is then the original
 * prompt and the tokens already sent, re-tokenized from their text: where those come back as the same tokens, a
 * greedy continuation gives the text the placement that never stopped would have given (measured: the `wordy`
 * fixture, every cut; docs/how-it-works.md "A pause during an answer").
 *
 * What cannot continue mid-way ends with the error as before: more than one choice, a grammar or a JSON format
 * (its constraint would start over), a tool call begun, a Messages answer that had begun thinking, a client's own
 * assistant prefill, a prompt given as tokens, `echo`.
 */

/** llama-server's streams a move can continue (by upstream path). */
export type WireFormat = 'chat' | 'completions' | 'messages';

export function wireFormat(path: string): WireFormat | null {
  if (path === '/v1/chat/completions') return 'chat';
  if (path === '/v1/completions') return 'completions';
  if (path === '/v1/messages') return 'messages';
  return null;
}

type Json = Record<string, unknown>;

/** What the first placement streamed to the client, read from its SSE bytes (whole events only). */
export interface Sent {
  readonly format: WireFormat;
  /** The answer's text so far, and its reasoning (chat's reasoning_content). */
  text: string;
  reasoning: string;
  /** Generated tokens sent: one event each (llama-server streams each token as it is decoded). */
  tokens: number;
  id: unknown;
  created: unknown;
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

function parse(data: string): Json | null {
  try {
    const j: unknown = JSON.parse(data);
    return typeof j === 'object' && j !== null ? (j as Json) : null;
  } catch {
    return null;
  }
}

const firstChoice = (j: Json): Json | null => (Array.isArray(j.choices) && typeof j.choices[0] === 'object' ? (j.choices[0] as Json) : null);

/** Reads what the client got; null when the bytes do not end on an event boundary (a half event went out). */
export function readSent(format: WireFormat, sse: string): Sent | null {
  const { events, rest } = sseEvents(sse);
  if (rest.trim() !== '') return null;
  const s: Sent = { format, text: '', reasoning: '', tokens: 0, id: null, created: null, promptTokens: null, openBlock: null, blocks: 0, stuck: null };
  for (const ev of events) {
    const j = parse(ev.data);
    if (!j) continue;
    if (format === 'messages') readMessagesEvent(s, j);
    else {
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

/** Why a request cannot be continued mid-way whatever it streamed (checked before it starts); null: it can. */
export function cannotContinue(format: WireFormat, body: Json): string | null {
  if (body.stream !== true) return 'not streamed';
  if (typeof body.n === 'number' && body.n > 1) return 'several choices';
  if (body.grammar !== undefined || body.json_schema !== undefined) return 'a grammar';
  const rf = body.response_format as Json | undefined;
  if (rf && rf.type !== 'text') return 'a response format';
  if (format === 'completions') {
    if (typeof body.prompt !== 'string') return 'a prompt that is not one string';
    if (body.echo === true) return 'echo';
    return null;
  }
  const messages = body.messages;
  if (!Array.isArray(messages) || (messages.at(-1) as Json | undefined)?.role === 'assistant') return "the client's own assistant prefill";
  if (format === 'messages' && (body.thinking as Json | undefined)?.type === 'enabled') return 'thinking';
  return null;
}

const LIMITS = ['max_tokens', 'max_completion_tokens', 'n_predict'] as const;

/** The request that continues `body` after `sent`: the partial answer added, the token limit less what was sent. */
export function continuationBody(body: Json, sent: Sent): Json | string {
  const why = sent.stuck ?? cannotContinue(sent.format, body);
  if (why) return why;
  const next: Json = { ...body };
  for (const k of LIMITS) {
    if (typeof body[k] !== 'number') continue;
    const left = body[k] - sent.tokens;
    if (left <= 0) return 'no tokens left';
    next[k] = left;
  }
  if (sent.format === 'completions') next.prompt = String(body.prompt) + sent.text;
  else {
    const partial: Json = { role: 'assistant', content: sent.text };
    if (sent.reasoning) partial.reasoning_content = sent.reasoning;
    next.messages = [...(body.messages as unknown[]), partial];
  }
  return next;
}

/**
 * The continuation's stream as the rest of the first: its ids, no second start (a chat's role chunk, a Messages
 * stream's message_start and the text block it reopens), the partial answer llama-server repeats at the start of a
 * continued message taken off, and usage counted once over both parts.
 */
export class Stitcher {
  private buf = '';
  /** The repeated partial answer still to take off (llama-server sends it with the first new token), per field. */
  private echo: Record<string, string | null>;
  private contPrompt: number | null = null;
  private dropStart: boolean;

  constructor(private readonly sent: Sent) {
    // A completion's prompt is not repeated (llama-server never echoes a prompt unless asked).
    this.echo = { content: sent.text || null, reasoning_content: sent.reasoning || null, text: sent.format === 'messages' ? sent.text || null : null };
    this.dropStart = sent.openBlock?.type === 'text';
  }

  /** The continuation's bytes in; the client's (whole events) out. */
  push(chunk: Buffer | string): string {
    const { events, rest } = sseEvents(this.buf + chunk.toString());
    this.buf = rest;
    let out = '';
    for (const ev of events) {
      const j = ev.data === '[DONE]' ? null : parse(ev.data);
      const r = j ? (this.sent.format === 'messages' ? this.messages(j) : this.openai(j)) : ev.data;
      if (r === null) continue;
      out += `${ev.event ? `event: ${ev.event}\n` : ''}data: ${typeof r === 'string' ? r : JSON.stringify(r)}\n\n`;
    }
    return out;
  }

  /** What was left of an unfinished last event (none from llama-server). */
  end(): string {
    const rest = this.buf;
    this.buf = '';
    return rest;
  }

  private strip(field: string, s: string): string {
    const e = this.echo[field];
    if (!e) return s;
    this.echo[field] = null; // decided at the field's first text: llama-server repeats the partial there, or not at all
    return s.startsWith(e) ? s.slice(e.length) : s;
  }

  private openai(j: Json): Json | null {
    j.id = this.sent.id;
    j.created = this.sent.created;
    const c = firstChoice(j);
    if (c) {
      const d = (this.sent.format === 'chat' ? c.delta : c) as Json | undefined;
      if (d && this.sent.format === 'chat') {
        delete d.role;
        for (const f of ['content', 'reasoning_content']) {
          if (d[f] === null) delete d[f];
          else if (typeof d[f] === 'string') {
            d[f] = this.strip(f, d[f]);
            if (d[f] === '') delete d[f];
          }
        }
      } else if (d && typeof d.text === 'string') d.text = this.strip('text', d.text);
      const empty = this.sent.format === 'chat' && d && Object.keys(d).length === 0 && (c.finish_reason ?? null) === null;
      if (empty && j.usage === undefined && j.timings === undefined && (j.choices as unknown[]).length === 1) return null;
    }
    const u = j.usage as Json | undefined;
    if (u && typeof u.prompt_tokens === 'number' && typeof u.completion_tokens === 'number') {
      const prompt = Math.max(0, u.prompt_tokens - this.sent.tokens);
      u.prompt_tokens = prompt;
      u.completion_tokens += this.sent.tokens;
      const details = u.prompt_tokens_details as Json | undefined;
      if (details && typeof details.cached_tokens === 'number') details.cached_tokens = Math.min(details.cached_tokens, prompt);
    }
    // llama-server's counts (Ollama's clients read these): the sent tokens as generated, not as the prompt.
    const t = j.timings as Json | undefined;
    if (t && typeof t.predicted_n === 'number' && typeof t.prompt_n === 'number') {
      const fromEvaluated = Math.min(t.prompt_n, this.sent.tokens);
      t.prompt_n -= fromEvaluated;
      if (typeof t.cache_n === 'number') t.cache_n = Math.max(0, t.cache_n - (this.sent.tokens - fromEvaluated));
      t.predicted_n += this.sent.tokens;
    }
    return j;
  }

  private messages(j: Json): Json | null {
    const offset = this.sent.openBlock ? this.sent.openBlock.index : this.sent.blocks;
    switch (j.type) {
      case 'message_start': {
        const u = (j.message as Json | undefined)?.usage as Json | undefined;
        if (typeof u?.input_tokens === 'number') this.contPrompt = u.input_tokens + (typeof u.cache_read_input_tokens === 'number' ? u.cache_read_input_tokens : 0);
        return null;
      }
      case 'content_block_start':
        if (this.dropStart && (j.content_block as Json | undefined)?.type === 'text') {
          this.dropStart = false;
          return null;
        }
        j.index = Number(j.index) + offset;
        return j;
      case 'content_block_delta': {
        j.index = Number(j.index) + offset;
        const d = j.delta as Json | undefined;
        if (d?.type === 'text_delta' && typeof d.text === 'string') {
          d.text = this.strip('text', d.text);
          if (d.text === '') return null;
        }
        return j;
      }
      case 'content_block_stop':
        j.index = Number(j.index) + offset;
        return j;
      case 'message_delta': {
        const u = j.usage as Json | undefined;
        if (u && typeof u.output_tokens === 'number') {
          const sentTokens = this.contPrompt !== null && this.sent.promptTokens !== null ? this.contPrompt - this.sent.promptTokens : this.sent.tokens;
          u.output_tokens += Math.max(0, sentTokens);
        }
        return j;
      }
      default:
        return j;
    }
  }
}
