import { randomBytes } from 'node:crypto';
import type { RelayError } from '../../../../shared/errors.js';
import { writeEvent } from './sse.js';
import type { Json, Sent } from './sent.js';
import { ContinuationEvents } from './continuation-events.js';
import type { Continuing } from './proxy-types.js';

/**
 * A continuation that went to llama-server's own /completion (it takes the exact tokens: exact.ts) told in the
 * client's dialect, as the rest of the stream its first placement began: the same ids and blocks, text deltas as
 * llama-server's own route writes them, then that route's closing events (tools/server/server-task.cpp, the
 * `_stream` finals), with usage counted over both parts. A keep-alive goes on as one; a failure llama-server reports
 * ends it (`failed`: the proxy ends the client's stream with the dialect's error).
 */
export class Retell implements Continuing {
  private readonly events = new ContinuationEvents();
  private text = '';
  private opened: boolean;
  carried: number | null = null;

  /**
   * `generated`: the tokens the first part generated (the continuation's prompt ends with them); `prompt`: the
   * original prompt's tokens; `usage`: a chat stream asked for its usage chunk.
   */
  constructor(
    private readonly sent: Sent,
    private readonly o: { readonly generated: number; readonly prompt: number; readonly usage: boolean },
  ) {
    this.opened = sent.format === 'messages' ? sent.openBlock?.type === 'text' : sent.format === 'responses' ? sent.item !== null : true;
  }

  push(chunk: Buffer | string): string {
    return this.events.push(chunk, (j) => {
      if (!j) return '';
      const t = j.timings as Json | undefined;
      if (typeof t?.cache_n === 'number') this.carried = t.cache_n;
      if (j.prompt_progress !== undefined) return '';
      return (typeof j.content === 'string' && j.content !== '' ? this.delta(j, j.content) : '') + (j.stop === true ? this.finish(j) : '');
    });
  }

  get failed(): RelayError | null {
    return this.events.failed;
  }

  end(): string {
    return '';
  }

  private get id(): unknown {
    return this.sent.id;
  }

  /** One piece of text, as the dialect's delta (a block or item opened first where the first part had none). */
  private delta(j: Json, content: string): string {
    this.text += content;
    const s = this.sent;
    switch (s.format) {
      case 'chat':
        return writeEvent(null, this.chunk({ choices: [{ finish_reason: null, index: 0, delta: { content } }] }));
      case 'completions':
        return writeEvent(null, this.completion({ choices: [{ text: content, index: 0, logprobs: null, finish_reason: null }] }));
      case 'messages':
        return this.open() + writeEvent('content_block_delta', { type: 'content_block_delta', index: this.blockIndex, delta: { type: 'text_delta', text: content } });
      case 'responses':
        return this.open() + writeEvent('response.output_text.delta', { type: 'response.output_text.delta', item_id: this.item, delta: content });
      case 'native':
        return writeEvent(null, this.native(j));
    }
  }

  /** llama-server's last event: the dialect's closing events. */
  private finish(j: Json): string {
    const s = this.sent;
    const stop = typeof j.stop_type === 'string' ? j.stop_type : 'eos';
    const predicted = this.o.generated + (typeof j.tokens_predicted === 'number' ? j.tokens_predicted : 0);
    const cached = Math.min(this.carried ?? 0, this.o.prompt);
    const timings = this.timings(j.timings as Json | undefined);
    const usage = { completion_tokens: predicted, prompt_tokens: this.o.prompt, total_tokens: predicted + this.o.prompt, prompt_tokens_details: { cached_tokens: cached } };
    const reason = stop === 'limit' ? 'length' : 'stop';
    switch (s.format) {
      case 'chat': {
        const last = [this.chunk({ choices: [{ finish_reason: reason, index: 0, delta: {} }] })];
        if (this.o.usage) last.push(this.chunk({ choices: [], usage }));
        if (timings) last.at(-1)!.timings = timings;
        return last.map((c) => writeEvent(null, c)).join('') + 'data: [DONE]\n\n';
      }
      case 'completions':
        return writeEvent(null, this.completion({ choices: [{ text: '', index: 0, logprobs: null, finish_reason: reason }], usage, ...(timings ? { timings } : {}) })) + 'data: [DONE]\n\n';
      case 'messages': {
        const word = typeof j.stopping_word === 'string' && j.stopping_word !== '' ? j.stopping_word : null;
        return (
          (this.opened ? writeEvent('content_block_stop', { type: 'content_block_stop', index: this.blockIndex }) : '') +
          writeEvent('message_delta', { type: 'message_delta', delta: { stop_reason: stop === 'limit' ? 'max_tokens' : 'end_turn', stop_sequence: word }, usage: { output_tokens: predicted } }) +
          writeEvent('message_stop', { type: 'message_stop' })
        );
      }
      case 'responses': {
        const text = s.text + this.text;
        const part = { type: 'output_text', annotations: [], logprobs: [], text };
        const item = { type: 'message', status: 'completed', id: this.item, content: [part], role: 'assistant' };
        const completed: Json = {
          type: 'response.completed',
          response: {
            id: this.id,
            object: 'response',
            created_at: Math.floor(Date.now() / 1000),
            status: 'completed',
            model: s.model ?? j.model,
            output: [item],
            usage: { input_tokens: this.o.prompt, output_tokens: predicted, total_tokens: predicted + this.o.prompt, input_tokens_details: { cached_tokens: cached } },
          },
          ...(timings ? { timings } : {}),
        };
        return (
          writeEvent('response.output_text.done', { type: 'response.output_text.done', item_id: this.item, text }) +
          writeEvent('response.content_part.done', { type: 'response.content_part.done', item_id: this.item, part }) +
          writeEvent('response.output_item.done', { type: 'response.output_item.done', item }) +
          writeEvent('response.completed', completed)
        );
      }
      case 'native':
        return writeEvent(null, this.native(j));
    }
  }

  /** The first part's chat chunk fields around `body`. */
  private chunk(body: Json): Json {
    const s = this.sent;
    return { ...body, created: s.created, id: this.id, model: s.model, system_fingerprint: s.fingerprint, object: 'chat.completion.chunk' };
  }

  private completion(body: Json): Json {
    const s = this.sent;
    return { ...body, created: s.created, model: s.model, system_fingerprint: s.fingerprint, object: 'text_completion', id: this.id };
  }

  /** A native event with its counts over both parts: the sent tokens as generated, not as the prompt. */
  private native(j: Json): Json {
    if (typeof j.tokens_predicted === 'number') j.tokens_predicted += this.o.generated;
    if (typeof j.tokens_evaluated === 'number') j.tokens_evaluated = this.o.prompt;
    const t = this.timings(j.timings as Json | undefined);
    if (t) j.timings = t;
    return j;
  }

  /** llama-server's timings, its counts over both parts (Ollama's clients read these). */
  private timings(t: Json | undefined): Json | null {
    if (!t) return null;
    const out = { ...t };
    if (typeof out.predicted_n === 'number') out.predicted_n += this.o.generated;
    if (typeof out.prompt_n === 'number' && typeof out.cache_n === 'number') {
      // The continuation's prompt is the original's and the sent tokens: what it evaluated or found cached, less them.
      const all = out.prompt_n + out.cache_n - this.o.generated;
      out.cache_n = Math.min(out.cache_n, Math.max(0, all));
      out.prompt_n = Math.max(0, all - (out.cache_n as number));
    }
    return out;
  }

  /** Messages: the text block the continuation writes into (the first part's open one, or the next). */
  private get blockIndex(): number {
    const s = this.sent;
    return s.openBlock?.type === 'text' ? s.openBlock.index : s.blocks;
  }

  private itemId: unknown = null;
  private get item(): unknown {
    this.itemId ??= this.sent.item ?? `msg_${randomBytes(16).toString('hex')}`;
    return this.itemId;
  }

  /** The block or item the first part had not opened yet. */
  private open(): string {
    if (this.opened) return '';
    this.opened = true;
    if (this.sent.format === 'messages') return writeEvent('content_block_start', { type: 'content_block_start', index: this.blockIndex, content_block: { type: 'text', text: '' } });
    return (
      writeEvent('response.output_item.added', { type: 'response.output_item.added', item: { content: [], id: this.item, role: 'assistant', status: 'in_progress', type: 'message' } }) +
      writeEvent('response.content_part.added', { type: 'response.content_part.added', item_id: this.item, part: { type: 'output_text', text: '' } })
    );
  }
}
