import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cannotContinue, continuationBody } from '../../src/main/core/hub/proxy/continuation.js';
import { SentReader, type Sent, type WireFormat } from '../../src/main/core/hub/proxy/sent.js';
import { sseEvents as splitEvents } from '../../src/main/core/hub/proxy/sse.js';
import { Stitcher } from '../../src/main/core/hub/proxy/stitch.js';

/** What a client given `text` (whole events) has. */
function readSent(format: WireFormat, text: string): Sent {
  const r = new SentReader(format);
  r.push(text);
  return r.sent;
}

/** The events of `text`, each with its data (the tests only write events with one). */
const sseEvents = (text: string): { events: { event: string | null; data: string }[] } => ({ events: splitEvents(text).events.map((e) => ({ event: e.event, data: e.data ?? '' })) });

/**
 * An answer that moves (continuation.ts) on llama-server's streams as the pinned build writes them: what the client
 * had, the request that continues it, and the continuation rewritten as the rest of the first stream. The e2e test
 * (moves.test.ts) runs it on real nodes; these pin the shapes, the refusals and the counts.
 */
const data = (j: unknown): string => `data: ${JSON.stringify(j)}\n\n`;
const ev = (type: string, j: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...j })}\n\n`;
const chunk = (id: string, delta: Record<string, unknown>, extra: Record<string, unknown> = {}): string =>
  data({ choices: [{ finish_reason: null, index: 0, delta }], created: id === 'first' ? 100 : 200, id, object: 'chat.completion.chunk', ...extra });

/** The first placement's stream, cut after three tokens. */
const FIRST_CHAT = chunk('first', { role: 'assistant', content: null }) + chunk('first', { content: ' the' }) + chunk('first', { content: ' sea' }) + chunk('first', { content: ' was' });

/** The continuation as llama-server streams it: its role chunk, then the partial answer repeated with the first new token. */
const CONT_CHAT =
  chunk('cont', { role: 'assistant', content: null }) +
  chunk('cont', { content: ' the sea was calm' }) +
  chunk('cont', { content: ' today' }) +
  data({ choices: [{ finish_reason: 'length', index: 0, delta: {} }], created: 200, id: 'cont', object: 'chat.completion.chunk' }) +
  data({
    choices: [],
    created: 200,
    id: 'cont',
    usage: { completion_tokens: 2, prompt_tokens: 33, total_tokens: 35, prompt_tokens_details: { cached_tokens: 32 } },
    timings: { cache_n: 32, prompt_n: 1, predicted_n: 2 },
  }) +
  'data: [DONE]\n\n';

describe('an answer that moves (continuation.ts)', () => {
  it('reads what the client was sent: text, tokens, ids; a half event only once whole', () => {
    const s = readSent('chat', FIRST_CHAT);
    assert.equal(s.text, ' the sea was');
    assert.equal(s.tokens, 3);
    assert.equal(s.id, 'first');
    assert.equal(s.stuck, null);
    const r = new SentReader('chat');
    r.push(`${FIRST_CHAT}data: {"choi`);
    assert.equal(r.sent.text, ' the sea was');
    r.push(`ces":[{"index":0,"delta":{"content":" calm"}}]}\n\n`);
    assert.equal(r.sent.text, ' the sea was calm');
    assert.equal(readSent('chat', FIRST_CHAT + chunk('first', { tool_calls: [{ index: 0 }] })).stuck, 'a tool call had begun');
  });

  it('continues a chat from its partial answer, the token limit less what was sent', () => {
    const s = readSent('chat', FIRST_CHAT);
    const body = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10, stream: true };
    assert.deepEqual(continuationBody(body, s), { ...body, max_tokens: 7, messages: [...body.messages, { role: 'assistant', content: ' the sea was' }] });
    assert.equal(continuationBody({ ...body, max_tokens: 3 }, s), 'no tokens left');
    // -1 is "no limit" (llama.cpp's web UI, /completion's default): it stays.
    assert.equal((continuationBody({ ...body, max_tokens: -1 }, s) as { max_tokens: number }).max_tokens, -1);
    const completion = readSent('completions', data({ choices: [{ text: ' once', index: 0, finish_reason: null }], id: 'c' }));
    assert.deepEqual(continuationBody({ prompt: 'Tell', stream: true, max_tokens: 5 }, completion), { prompt: 'Tell once', stream: true, max_tokens: 4 });
  });

  it('refuses what cannot go on mid-way, before it starts', () => {
    const chat = { messages: [{ role: 'user', content: 'hi' }], stream: true };
    assert.equal(cannotContinue('chat', chat), null);
    assert.equal(cannotContinue('chat', { ...chat, stream: false }), 'not streamed');
    assert.equal(cannotContinue('chat', { ...chat, n: 2 }), 'several choices');
    assert.equal(cannotContinue('chat', { ...chat, grammar: 'root ::= "a"' }), 'a grammar');
    assert.equal(cannotContinue('chat', { ...chat, response_format: { type: 'json_object' } }), 'a response format');
    assert.equal(cannotContinue('chat', { ...chat, response_format: { type: 'text' } }), null);
    assert.equal(cannotContinue('chat', { ...chat, messages: [...chat.messages, { role: 'assistant', content: 'Sure' }] }), "the client's own assistant prefill");
    assert.equal(cannotContinue('completions', { prompt: [1, 2], stream: true }), 'a prompt that is not one string');
    assert.equal(cannotContinue('completions', { prompt: 'x', echo: true, stream: true }), 'echo');
    assert.equal(cannotContinue('messages', { ...chat, thinking: { type: 'enabled', budget_tokens: 100 } }), 'thinking');
  });

  it('stitches a chat: the first id, no second role chunk, the repeated partial taken off, usage once over both parts', () => {
    const s = readSent('chat', FIRST_CHAT);
    const st = new Stitcher(s);
    // Cut anywhere on the way in: whole events out.
    const bytes = Buffer.from(CONT_CHAT);
    let out = '';
    for (let i = 0; i < bytes.length; i += 7) out += st.push(bytes.subarray(i, i + 7));
    out += st.end();
    const events = sseEvents(out).events.map((e) => (e.data === '[DONE]' ? e.data : JSON.parse(e.data)));
    assert.equal(events.at(-1), '[DONE]');
    const json = events.slice(0, -1) as { id: string; created: number; choices: { delta: Record<string, unknown> }[]; usage?: Record<string, unknown>; timings?: Record<string, number> }[];
    assert.ok(json.every((j) => j.id === 'first' && j.created === 100));
    assert.deepEqual(
      json.map((j) => j.choices[0]?.delta.content ?? null),
      [' calm', ' today', null, null],
    );
    assert.ok(!json.some((j) => j.choices[0]?.delta.role), 'no second role chunk');
    assert.deepEqual(json.at(-1)!.usage, { completion_tokens: 5, prompt_tokens: 30, total_tokens: 35, prompt_tokens_details: { cached_tokens: 30 } });
    assert.deepEqual(json.at(-1)!.timings, { cache_n: 30, prompt_n: 0, predicted_n: 5 });
    // The whole answer reads as one: the first part's text and the continuation's.
    const text = [...sseEvents(FIRST_CHAT + out).events]
      .map((e) => (e.data === '[DONE]' ? '' : ((JSON.parse(e.data) as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')))
      .join('');
    assert.equal(text, ' the sea was calm today');
  });

  it('stitches a Messages stream: one message, its open text block joined, output tokens counted once', () => {
    const first =
      ev('message_start', { message: { id: 'msg_first', usage: { input_tokens: 10, cache_read_input_tokens: 9, output_tokens: 0 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' the' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' sea' } });
    const s = readSent('messages', first);
    assert.deepEqual([s.text, s.tokens, s.promptTokens, s.openBlock], [' the sea', 2, 19, { index: 0, type: 'text' }]);
    const cont =
      ev('message_start', { message: { id: 'msg_cont', usage: { input_tokens: 2, cache_read_input_tokens: 19, output_tokens: 0 } } }) +
      ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
      ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' the sea rose' } }) +
      ev('content_block_stop', { index: 0 }) +
      ev('message_delta', { delta: { stop_reason: 'max_tokens' }, usage: { output_tokens: 1 } }) +
      ev('message_stop', {});
    const out = sseEvents(new Stitcher(s).push(cont)).events.map((e) => [e.event, JSON.parse(e.data) as Record<string, unknown>] as const);
    assert.deepEqual(
      out.map(([e]) => e),
      ['content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.deepEqual(out[0]![1].delta, { type: 'text_delta', text: ' rose' });
    assert.deepEqual(out[2]![1].usage, { output_tokens: 3 });
    assert.equal(readSent('messages', first + ev('content_block_start', { index: 1, content_block: { type: 'tool_use' } })).stuck, 'a tool_use block had begun');
  });

  it('stitches a Responses stream: the first response and message ids, no second item, usage once', () => {
    const first =
      ev('response.created', { response: { id: 'resp_1' } }) +
      ev('response.output_item.added', { item: { id: 'msg_1', type: 'message', content: [] } }) +
      ev('response.content_part.added', { item_id: 'msg_1', part: { type: 'output_text', text: '' } }) +
      ev('response.output_text.delta', { item_id: 'msg_1', delta: ' the' });
    const s = readSent('responses', first);
    assert.deepEqual([s.text, s.tokens, s.id, s.item], [' the', 1, 'resp_1', 'msg_1']);
    const body = continuationBody({ input: 'hi', stream: true, max_output_tokens: 4 }, s);
    assert.deepEqual(body, {
      input: [
        { role: 'user', content: 'hi' },
        { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: ' the' }] },
      ],
      stream: true,
      max_output_tokens: 3,
    });
    const cont =
      ev('response.created', { response: { id: 'resp_2' } }) +
      ev('response.in_progress', { response: { id: 'resp_2' } }) +
      ev('response.output_item.added', { item: { id: 'msg_2', type: 'message', content: [] } }) +
      ev('response.content_part.added', { item_id: 'msg_2', part: { type: 'output_text', text: '' } }) +
      ev('response.output_text.delta', { item_id: 'msg_2', delta: ' the sea' }) +
      ev('response.output_text.done', { item_id: 'msg_2', text: ' the sea' }) +
      ev('response.completed', { response: { id: 'resp_2', output: [{ type: 'message', id: 'msg_2' }], usage: { input_tokens: 11, output_tokens: 1, input_tokens_details: { cached_tokens: 11 } } } });
    const out = sseEvents(new Stitcher(s).push(cont)).events.map((e) => JSON.parse(e.data) as Record<string, unknown>);
    assert.deepEqual(
      out.map((e) => e.type),
      ['response.output_text.delta', 'response.output_text.done', 'response.completed'],
    );
    assert.deepEqual(out[0], { type: 'response.output_text.delta', item_id: 'msg_1', delta: ' sea' });
    assert.equal(out[1]!.item_id, 'msg_1');
    assert.deepEqual(out[2]!.response, { id: 'resp_1', output: [{ type: 'message', id: 'msg_1' }], usage: { input_tokens: 10, output_tokens: 2, input_tokens_details: { cached_tokens: 10 } } });
    assert.equal(cannotContinue('responses', { input: 'x', stream: true, text: { format: { type: 'json_schema' } } }), 'a response format');
    // Cut before its message item began: the continuation's own item and part go through, under their own id.
    const early = readSent('responses', ev('response.created', { response: { id: 'resp_1' } }));
    const opened = sseEvents(new Stitcher(early).push(cont)).events.map((e) => (JSON.parse(e.data) as { type: string }).type);
    assert.deepEqual(opened.slice(0, 2), ['response.output_item.added', 'response.content_part.added']);
  });

  it("continues llama-server's own completion from the token ids it streamed", () => {
    const s = readSent('native', data({ content: ' the', tokens: [7], stop: false }) + data({ content: ' sea', tokens: [9], stop: false }));
    assert.deepEqual(continuationBody({ prompt: 'Tell', n_predict: 5, stream: true }, s), { prompt: ['Tell', 7, 9], n_predict: 3, stream: true });
    const out = new Stitcher(s).push(data({ content: '', tokens: [], stop: true, tokens_predicted: 1, tokens_evaluated: 4, timings: { prompt_n: 4, cache_n: 0, predicted_n: 1 } }));
    assert.deepEqual(JSON.parse(sseEvents(out).events[0]!.data), {
      content: '',
      tokens: [],
      stop: true,
      tokens_predicted: 3,
      tokens_evaluated: 2,
      timings: { prompt_n: 2, cache_n: 0, predicted_n: 3 },
    });
  });

  it("passes a continuation that does not repeat the partial as it comes (a completion's prompt is never echoed)", () => {
    const s = readSent('completions', data({ choices: [{ text: ' the', index: 0, finish_reason: null }], id: 'c1', created: 1 }));
    const out = new Stitcher(s).push(data({ choices: [{ text: ' theatre', index: 0, finish_reason: null }], id: 'c2', created: 2 }));
    assert.deepEqual(JSON.parse(sseEvents(out).events[0]!.data), { choices: [{ text: ' theatre', index: 0, finish_reason: null }], id: 'c1', created: 1 });
  });
});
