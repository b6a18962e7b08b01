import type { RelayError } from '../../../../shared/errors.js';
import { firstChoice, type Json, type Sent } from './sent.js';
import { writeEvent } from './sse.js';
import { ContinuationEvents } from './continuation-events.js';
import type { Continuing } from './proxy-types.js';

/**
 * A continuation through llama-server's route of the client's own dialect (where the tokens could not be had:
 * exact.ts) as the rest of the first part's stream: its ids, no second start (a chat's role chunk, a Messages
 * stream's message_start and the text block it reopens), the partial answer llama-server repeats at the start of a
 * continued message taken off, and usage counted once over both parts. Bytes are decoded across reads, a
 * keep-alive goes on as one, and a failure llama-server reports ends it (`failed`).
 */
export class Stitcher implements Continuing {
  private readonly events = new ContinuationEvents();
  /** The repeated partial answer still to take off (llama-server sends it with the first new token), per field. */
  private echo: Record<string, string | null>;
  private contPrompt: number | null = null;
  /**
   * Of the continuation's prompt (the original prompt and the sent answer), the tokens llama-server found in its
   * cache, as it said (null: not yet): the KV the answer brought along, or that placement held already.
   */
  carried: number | null = null;
  private dropStart: boolean;

  constructor(private readonly sent: Sent) {
    // A completion's prompt is not repeated (llama-server never echoes a prompt unless asked).
    const continued = sent.format === 'messages' || sent.format === 'responses';
    this.echo = { content: sent.text || null, reasoning_content: sent.reasoning || null, text: continued ? sent.text || null : null };
    this.dropStart = sent.openBlock?.type === 'text';
  }

  /** The continuation's bytes in; the client's (whole events) out. */
  push(chunk: Buffer | string): string {
    return this.events.push(chunk, (j, ev) => {
      if (!j) return ev.data === '[DONE]' ? writeEvent(ev.event, ev.data) : '';
      const r = this.event(j);
      return r === null ? '' : writeEvent(ev.event, r);
    });
  }

  /** llama-server ends every event it sends: an unfinished last one is not passed on. */
  end(): string {
    this.events.end();
    return '';
  }

  get failed(): RelayError | null {
    return this.events.failed;
  }

  private strip(field: string, s: string): string {
    const e = this.echo[field];
    if (!e) return s;
    this.echo[field] = null; // decided at the field's first text: llama-server repeats the partial there, or not at all
    return s.startsWith(e) ? s.slice(e.length) : s;
  }

  private event(j: Json): Json | null {
    switch (this.sent.format) {
      case 'messages':
        return this.messages(j);
      case 'responses':
        return this.responses(j);
      case 'native':
        if (typeof j.tokens_predicted === 'number') j.tokens_predicted += this.sent.tokens;
        if (typeof j.tokens_evaluated === 'number') j.tokens_evaluated = Math.max(0, j.tokens_evaluated - this.sent.tokens);
        this.timings(j);
        return j;
      default:
        return this.openai(j);
    }
  }

  /** llama-server's counts (Ollama's clients read these): the sent tokens as generated, not as the prompt. */
  private timings(j: Json): void {
    const t = j.timings as Json | undefined;
    if (typeof t?.cache_n === 'number') this.carried = t.cache_n;
    if (t && typeof t.predicted_n === 'number' && typeof t.prompt_n === 'number') {
      const fromEvaluated = Math.min(t.prompt_n, this.sent.tokens);
      t.prompt_n -= fromEvaluated;
      if (typeof t.cache_n === 'number') t.cache_n = Math.max(0, t.cache_n - (this.sent.tokens - fromEvaluated));
      t.predicted_n += this.sent.tokens;
    }
  }

  /** A Responses stream: the first response and message ids; its item and part began with the first part. */
  private responses(j: Json): Json | null {
    const item = j.item as Json | undefined;
    switch (j.type) {
      case 'response.created':
      case 'response.in_progress':
        return null;
      case 'response.content_part.added':
        return this.sent.item !== null ? null : j; // the first part had opened its message and part, or not yet
      case 'response.output_item.added':
        if (item?.type === 'message' && this.sent.item !== null) return null;
        return j;
      case 'response.output_text.delta':
        j.item_id = this.sent.item ?? j.item_id;
        if (typeof j.delta === 'string') j.delta = this.strip('text', j.delta);
        return j.delta === '' ? null : j;
      case 'response.completed': {
        const r = j.response as Json | undefined;
        if (r) {
          r.id = this.sent.id;
          if (Array.isArray(r.output)) for (const o of r.output as Json[]) if (o.type === 'message') o.id = this.sent.item ?? o.id;
          const u = r.usage as Json | undefined;
          if (u && typeof u.input_tokens === 'number' && typeof u.output_tokens === 'number') {
            u.input_tokens = Math.max(0, u.input_tokens - this.sent.tokens);
            u.output_tokens += this.sent.tokens;
            const d = u.input_tokens_details as Json | undefined;
            if (d && typeof d.cached_tokens === 'number') d.cached_tokens = Math.min(d.cached_tokens, u.input_tokens as number);
          }
        }
        this.timings(j);
        return j;
      }
      default:
        // The done events: their item is the first part's (their text is the whole answer: llama-server's includes the partial).
        if ('item_id' in j) j.item_id = this.sent.item ?? j.item_id;
        if (item && item.type === 'message') item.id = this.sent.item ?? item.id;
        return j;
    }
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
    this.timings(j);
    return j;
  }

  private messages(j: Json): Json | null {
    const offset = this.sent.openBlock ? this.sent.openBlock.index : this.sent.blocks;
    switch (j.type) {
      case 'message_start': {
        const u = (j.message as Json | undefined)?.usage as Json | undefined;
        if (typeof u?.input_tokens === 'number') this.contPrompt = u.input_tokens + (typeof u.cache_read_input_tokens === 'number' ? u.cache_read_input_tokens : 0);
        if (typeof u?.cache_read_input_tokens === 'number') this.carried = u.cache_read_input_tokens;
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
