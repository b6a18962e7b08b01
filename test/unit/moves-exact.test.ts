import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AnswerRecords } from '../../src/main/core/scheduler/slots/answer-records.js';
import { stateTokens } from '../../src/main/core/llama/slot-state.js';
import { piecesOf, type Pieces } from '../../src/main/core/gguf/pieces.js';
import { alignSent } from '../../src/main/core/hub/proxy/exact.js';
import { exactBody, exactPossible } from '../../src/main/core/hub/proxy/continuation.js';
import { Retell } from '../../src/main/core/hub/proxy/retell.js';
import { SentReader, type Sent, type WireFormat } from '../../src/main/core/hub/proxy/sent.js';
import { sseEvents } from '../../src/main/core/hub/proxy/sse.js';
import { Stitcher } from '../../src/main/core/hub/proxy/stitch.js';
import { ClientEvents } from '../../src/main/core/hub/proxy/client-events.js';

/**
 * A moved answer continued from its first placement's own tokens (issue #53, item 1): the record read from a slot's
 * state file, the cut found where the client's text ends, the /completion request that goes on from it, and its
 * stream told in the client's dialect. The e2e test (moves.test.ts) runs it on real nodes and llama-server.
 */

/** A state file's head as llama-server v0.4.0 writes it: magic, version 3, the packed server token list. */
function stateFile(tokens: number[], media = 0): Buffer {
  const words = [-1, 1, tokens.length, ...tokens, media];
  const b = Buffer.alloc(12 + 4 * words.length + 64);
  b.writeUInt32LE(0x67677371, 0);
  b.writeUInt32LE(3, 4);
  b.writeUInt32LE(words.length, 8);
  words.forEach((w, i) => b.writeInt32LE(w, 12 + 4 * i));
  return b;
}

/** A SentencePiece vocabulary: control tokens, a few words, and byte tokens for every byte. */
function spm(): { pieces: Pieces; id: (t: string) => number } {
  const tokens = ['<unk>', '<s>', '</s>', '<|im_start|>', 'assistant', '▁the', '▁sea', '▁was', '▁calm', 'a', '▁', '中', 'é', 'the'];
  const types: number[] = [2, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1];
  for (let b = 0; b < 256; b++) {
    tokens.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    types.push(6);
  }
  const pieces = piecesOf({ model: 'llama', tokens, types, bos: 1, eos: 2, addBos: true, addEos: false, pre: undefined })!;
  return { pieces, id: (t) => tokens.indexOf(t) };
}

const utf8 = (s: string): number[] => [...Buffer.from(s)];

describe('a moved answer from its own tokens', () => {
  it("reads a slot state's token list (the server's packed form, a plain one), and refuses what is not one", () => {
    assert.deepEqual(stateTokens(stateFile([1, 5, 9])), [1, 5, 9]);
    const plain = Buffer.alloc(24);
    plain.writeUInt32LE(0x67677371, 0);
    plain.writeUInt32LE(3, 4);
    plain.writeUInt32LE(3, 8);
    [1, 5, 9].forEach((t, i) => plain.writeInt32LE(t, 12 + 4 * i));
    assert.deepEqual(stateTokens(plain), [1, 5, 9]);
    assert.equal(stateTokens(stateFile([1, 5], 1)), null, 'with an image in it');
    const other = stateFile([1]);
    other.writeUInt32LE(2, 4);
    assert.equal(stateTokens(other), null, 'another version');
    assert.equal(stateTokens(stateFile([1, 2, 3]).subarray(0, 20)), null, 'cut short');
    assert.equal(stateTokens(Buffer.from('not a state file at all')), null);
  });

  it("decodes a vocabulary's tokens as llama-server streams them: ▁ as a space, byte tokens, control tokens as nothing", () => {
    const { pieces, id } = spm();
    assert.deepEqual([...pieces.piece(id('▁the'))!], utf8(' the'));
    assert.deepEqual([...pieces.piece(id('<0xE4>'))!], [0xe4]);
    assert.deepEqual([...pieces.piece(id('<|im_start|>'))!], []);
    assert.equal(pieces.piece(10_000), null);
    // 'a' and <0x61> both stream as "a": no one token is "a"; ' the' is ▁the alone.
    assert.equal(pieces.onlyToken(Uint8Array.from(utf8('a'))), null);
    assert.equal(pieces.onlyToken(Uint8Array.from(utf8(' the'))), id('▁the'));
    const bpe = piecesOf({ model: 'gpt2', tokens: ['Ġthe', 'Ċ', 'Ã©', '<|endoftext|>'], types: [1, 1, 1, 3], bos: 0, eos: 3, addBos: false, addEos: false, pre: 'qwen2' })!;
    assert.deepEqual([...bpe.piece(0)!], utf8(' the'));
    assert.deepEqual([...bpe.piece(1)!], utf8('\n'));
    assert.deepEqual([...bpe.piece(2)!], utf8('é'));
    assert.deepEqual([...bpe.piece(3)!], []);
    assert.equal(piecesOf({ model: 'bert', tokens: ['a'], types: [1], bos: 0, eos: 0, addBos: false, addEos: false, pre: undefined }), null);
  });

  it('cuts the record where the text the client got ends, whatever more the slot evaluated', () => {
    const { pieces, id } = spm();
    const prompt = [id('<s>'), id('<|im_start|>'), id('assistant'), id('▁')];
    const answer = [id('▁the'), id('▁sea'), id('▁was'), id('▁calm')];
    const record = [...prompt, ...answer];
    // The client got three tokens; the slot had evaluated four.
    const a = alignSent(record, ' the sea was', pieces, { promptTokens: null, events: 3 })!;
    assert.deepEqual(a, { ids: [...prompt, ...answer.slice(0, 3)], generated: 3 });
    // The stream said how long the prompt is: the same cut.
    assert.deepEqual(alignSent(record, ' the sea was', pieces, { promptTokens: prompt.length, events: 3 }), a);
    // Text the record does not spell: no cut (another slot's, another answer).
    assert.equal(alignSent(record, ' the sea is', pieces, { promptTokens: null, events: 3 }), null);
    assert.equal(alignSent(record, '', pieces, { promptTokens: null, events: 0 }), null);
  });

  it("takes the model's own split, not the tokenizer's: byte tokens, a character over three tokens", () => {
    const { pieces, id } = spm();
    const prompt = [id('<s>'), id('assistant')];
    // "the" written as t-h-e byte tokens, then 中 as three byte tokens (released together with the last).
    const answer = [...utf8('the').map((b) => id(`<0x${b.toString(16).toUpperCase()}>`)), ...utf8('中').map((b) => id(`<0x${b.toString(16).toUpperCase()}>`)), id('▁sea')];
    const a = alignSent([...prompt, ...answer], 'the中 sea', pieces, { promptTokens: null, events: 5 })!;
    assert.deepEqual(a.ids, [...prompt, ...answer]);
    assert.equal(a.generated, answer.length);
    // Cut inside the character: the client has only "the"; the held bytes are evaluated again.
    assert.deepEqual(alignSent([...prompt, ...answer.slice(0, 5)], 'the', pieces, { promptTokens: null, events: 3 })!.ids, [...prompt, ...answer.slice(0, 3)]);
  });

  it('adds the last token sent but not yet evaluated when it stopped, where only one token streams as it', () => {
    const { pieces, id } = spm();
    const prompt = [id('<s>'), id('assistant')];
    const a = alignSent([...prompt, id('▁the')], ' the sea', pieces, { promptTokens: null, events: 2 })!;
    assert.deepEqual(a, { ids: [...prompt, id('▁the'), id('▁sea')], generated: 2 });
    // "a" is a word and a byte token: which one the model chose cannot be known.
    assert.equal(alignSent([...prompt, id('▁the')], ' thea', pieces, { promptTokens: null, events: 2 }), null);
    // With speculation the record may go on with a draft that was being verified (never sent): cut before it.
    const drafted = [...prompt, id('▁the'), id('▁was'), id('▁the')];
    assert.deepEqual(alignSent(drafted, ' the sea', pieces, { promptTokens: null, events: 2 }), a);
    assert.equal(alignSent(drafted, ' the sea was', pieces, { promptTokens: null, events: 3 }), null, 'more than one token missing');
  });

  it('reads a byte that is not UTF-8 as llama-server sends it: U+FFFD', () => {
    const { pieces, id } = spm();
    const prompt = [id('<s>'), id('assistant')];
    const answer = [id('▁the'), id('<0x85>'), id('<0x9F>'), id('▁sea')];
    const a = alignSent([...prompt, ...answer], ' the\uFFFD sea', pieces, { promptTokens: null, events: 3 })!;
    assert.deepEqual(a.ids, [...prompt, ...answer]);
  });

  it('asks /completion to go on from the ids with the request’s own sampling; refuses where no tokens are left', () => {
    const chat = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true }, max_tokens: 10, temperature: 0, seed: 4, stop: '\n\n' };
    assert.deepEqual(exactBody(chat, [1, 2, 3], 2), { temperature: 0, seed: 4, stop: ['\n\n'], prompt: [1, 2, 3], n_predict: 8, stream: true });
    assert.equal(exactBody({ ...chat, max_tokens: 2 }, [1, 2, 3], 2), 'no tokens left');
    const messages = { model: 'm', system: 'be brief', messages: [], max_tokens: 5, stop_sequences: ['END'], top_k: 1, stream: true };
    assert.deepEqual(exactBody(messages, [7], 1), { top_k: 1, stop: ['END'], prompt: [7], n_predict: 4, stream: true });
    assert.deepEqual(exactBody({ input: 'x', stream: true }, [7], 1), { prompt: [7], n_predict: -1, stream: true });
    assert.equal(exactPossible({ messages: [], tools: [{ type: 'function' }] }), false, 'a tool call would need its parser');
    assert.equal(exactPossible({ messages: [], logprobs: true }), false);
    assert.equal(exactPossible({ messages: [], tools: [] }), true);
  });

  it('a stop’s record waits for its slots to be read, bounded, and serves only that stop', async () => {
    const records = new AnswerRecords();
    let arrive!: (v: { slot: number; tokens: number[] }[]) => void;
    records.expect('p1', new Promise((r) => (arrive = r)));
    setTimeout(() => arrive([{ slot: 0, tokens: [1, 2] }]), 5);
    assert.deepEqual(await records.wait('p1', 5000), [{ slot: 0, tokens: [1, 2] }]);
    assert.deepEqual(await records.wait('p2', 5000), []);
    records.expect('p3', new Promise(() => undefined));
    assert.deepEqual(await records.wait('p3', 10), [], 'late: the continuation goes the other way');
    records.expect('p4', Promise.reject(new Error('save failed')));
    assert.deepEqual(await records.wait('p4', 1000), []);
  });
});

const data = (j: unknown): string => `data: ${JSON.stringify(j)}\n\n`;
const ev = (type: string, j: Record<string, unknown>): string => `event: ${type}\ndata: ${JSON.stringify({ type, ...j })}\n\n`;

function read(format: WireFormat, text: string): Sent {
  const r = new SentReader(format);
  r.push(text);
  return structuredClone(r.sent);
}

/** llama-server's /completion stream of a continuation: two pieces, then its last event. */
const NATIVE =
  data({ content: ' calm', tokens: [8], stop: false, tokens_predicted: 1, tokens_evaluated: 7 }) +
  ':\n\n' +
  data({ content: ' today', tokens: [9], stop: false, tokens_predicted: 2, tokens_evaluated: 7 }) +
  data({ content: '', tokens: [], stop: true, stop_type: 'limit', stopping_word: '', tokens_predicted: 2, tokens_evaluated: 7, timings: { cache_n: 6, prompt_n: 1, predicted_n: 2 } });

describe('a continuation from /completion told in the client’s dialect (retell.ts)', () => {
  const retell = (s: Sent, usage = true): { out: string; r: Retell } => {
    const r = new Retell(s, { generated: 3, prompt: 4, usage });
    let out = '';
    const bytes = Buffer.from(NATIVE);
    for (let i = 0; i < bytes.length; i += 5) out += r.push(bytes.subarray(i, i + 5));
    return { out: out + r.end(), r };
  };

  it('chat: the first chunk’s id and times, a keep-alive kept as one, the finish and usage chunks over both parts, [DONE]', () => {
    const s = read(
      'chat',
      data({ choices: [{ index: 0, delta: { content: ' the sea was' } }], id: 'chatcmpl-1', created: 100, model: 'm', system_fingerprint: 'b1', object: 'chat.completion.chunk' }),
    );
    const { out, r } = retell(s);
    const events = sseEvents(out).events;
    assert.equal(events[1]!.comment, true, 'the keep-alive goes on as a comment');
    const json = events.filter((e) => e.data && e.data !== '[DONE]').map((e) => JSON.parse(e.data!) as Record<string, unknown>);
    assert.ok(json.every((j) => j.id === 'chatcmpl-1' && j.created === 100 && j.model === 'm' && j.object === 'chat.completion.chunk'));
    assert.deepEqual(
      json.map((j) => (j.choices as { delta?: { content?: string }; finish_reason?: string }[])[0]?.delta?.content ?? (j.choices as { finish_reason?: string }[])[0]?.finish_reason ?? 'usage'),
      [' calm', ' today', 'length', 'usage'],
    );
    assert.deepEqual(json.at(-1)!.usage, { completion_tokens: 5, prompt_tokens: 4, total_tokens: 9, prompt_tokens_details: { cached_tokens: 4 } });
    assert.deepEqual(json.at(-1)!.timings, { cache_n: 4, prompt_n: 0, predicted_n: 5 });
    assert.equal(events.at(-1)!.data, '[DONE]');
    assert.equal(r.carried, 6);
    assert.equal(sseEvents(retell(s, false).out).events.filter((e) => e.data?.includes('"usage"')).length, 0, 'no usage chunk unless asked');
  });

  it('Messages: deltas into the open text block, then its stop, the message delta with output tokens over both parts', () => {
    const s = read(
      'messages',
      ev('message_start', { message: { id: 'msg_1', model: 'm', usage: { input_tokens: 4, output_tokens: 0 } } }) +
        ev('content_block_start', { index: 0, content_block: { type: 'text', text: '' } }) +
        ev('content_block_delta', { index: 0, delta: { type: 'text_delta', text: ' the sea was' } }),
    );
    const events = sseEvents(retell(s).out).events.filter((e) => !e.comment);
    assert.deepEqual(
      events.map((e) => e.event),
      ['content_block_delta', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
    );
    assert.deepEqual(JSON.parse(events[0]!.data!), { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: ' calm' } });
    assert.deepEqual(JSON.parse(events[3]!.data!), { type: 'message_delta', delta: { stop_reason: 'max_tokens', stop_sequence: null }, usage: { output_tokens: 5 } });
  });

  it('Responses: deltas under the first message item, its done events with the whole text, one completed response', () => {
    const s = read(
      'responses',
      ev('response.created', { response: { id: 'resp_1' } }) +
        ev('response.output_item.added', { item: { id: 'msg_1', type: 'message', content: [] } }) +
        ev('response.output_text.delta', { item_id: 'msg_1', delta: ' the sea was' }),
    );
    const events = sseEvents(retell(s).out)
      .events.filter((e) => !e.comment)
      .map((e) => JSON.parse(e.data!) as Record<string, unknown>);
    assert.deepEqual(
      events.map((e) => e.type),
      ['response.output_text.delta', 'response.output_text.delta', 'response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed'],
    );
    assert.ok(events.slice(0, 4).every((e) => e.item_id === 'msg_1'));
    assert.equal(events[2]!.text, ' the sea was calm today');
    const done = events[5]!.response as { id: string; output: { id: string }[]; usage: Record<string, unknown> };
    assert.equal(done.id, 'resp_1');
    assert.equal(done.output[0]!.id, 'msg_1');
    assert.deepEqual(done.usage, { input_tokens: 4, output_tokens: 5, total_tokens: 9, input_tokens_details: { cached_tokens: 4 } });
  });

  it('llama-server’s own stream: its counts over both parts', () => {
    const s = read('native', data({ content: ' the sea was', tokens: [5, 6, 7], stop: false, tokens_predicted: 3, tokens_evaluated: 4 }));
    const last = sseEvents(retell(s).out)
      .events.filter((e) => !e.comment)
      .map((e) => JSON.parse(e.data!) as Record<string, unknown>)
      .at(-1)!;
    assert.deepEqual([last.tokens_predicted, last.tokens_evaluated, last.timings], [5, 4, { cache_n: 4, prompt_n: 0, predicted_n: 5 }]);
  });

  it('a failure llama-server reports ends it: nothing after, `failed` says what', () => {
    const s = read('chat', data({ choices: [{ index: 0, delta: { content: ' x' } }], id: 'c' }));
    const r = new Retell(s, { generated: 1, prompt: 2, usage: false });
    assert.equal(r.push(`error: {"code":500,"message":"boom"}\n\n${data({ content: ' y', stop: false })}`), '');
    assert.equal(r.failed?.message, 'boom');
    const pinned = new Retell(s, { generated: 1, prompt: 2, usage: false });
    pinned.push(data({ error: { code: 500, message: 'peg-native' } }));
    assert.equal(pinned.failed?.message, 'peg-native');
  });
});

describe('the stitched continuation (stitch.ts): what a keep-alive, a failure and a split character become', () => {
  const first = data({ choices: [{ index: 0, delta: { content: ' the' } }], id: 'first', created: 1 });

  it('a keep-alive stays a comment (never an empty data event), bytes of one character split over reads are decoded once', () => {
    const st = new Stitcher(read('chat', first));
    const cont = ':\n\n' + data({ choices: [{ index: 0, delta: { content: ' the 海' } }], id: 'c', created: 2 });
    const bytes = Buffer.from(cont);
    const cut = bytes.indexOf(Buffer.from('海')) + 1; // inside the character
    const out = st.push(bytes.subarray(0, cut)) + st.push(bytes.subarray(cut));
    assert.ok(!out.includes('data: \n'), 'no empty data line');
    const events = sseEvents(out).events;
    assert.equal(events[0]!.comment, true);
    assert.equal((JSON.parse(events[1]!.data!) as { choices: { delta: { content: string } }[] }).choices[0]!.delta.content, ' 海');
  });

  it('an error line or an error object ends it with `failed` (the proxy sends the dialect’s error event)', () => {
    const st = new Stitcher(read('chat', first));
    assert.equal(st.push('error: {"message":"the model broke"}\n\n'), '');
    assert.equal(st.failed?.message, 'the model broke');
    const m = new Stitcher(read('messages', ev('message_start', { message: { id: 'm' } })));
    m.push(ev('error', { error: { type: 'api_error', message: 'overloaded' } }));
    assert.equal(m.failed?.message, 'overloaded');
  });

  it('never counts a native progress event as a token (its `tokens` holds a placeholder)', () => {
    const s = read('native', data({ content: '', tokens: [0], stop: false, prompt_progress: { total: 9, processed: 4 } }) + data({ content: ' a', tokens: [11], stop: false, tokens_predicted: 1 }));
    assert.deepEqual([s.ids, s.tokens], [[11], 1]);
  });
});

describe('what a move keeps of the answer (sent.ts, client-events.ts)', () => {
  it('is what the continuation needs: the text, not the bytes (log-probabilities and timings are not kept)', () => {
    const r = new SentReader('chat');
    const top = Array.from({ length: 20 }, (_, i) => ({ id: i, token: `t${i}`, bytes: [116, 48 + (i % 10)], logprob: -i }));
    let streamed = 0;
    for (let i = 0; i < 2000; i++) {
      const ev = data({
        choices: [{ index: 0, delta: { content: 'ab' }, logprobs: { content: [{ id: 7, token: 'ab', bytes: [97, 98], logprob: -0.1, top_logprobs: top }] } }],
        id: 'c',
        timings: { predicted_n: i },
      });
      streamed += ev.length;
      r.push(ev);
    }
    const kept = JSON.stringify(r.sent).length;
    assert.equal(r.sent.text.length, 4000);
    assert.ok(kept < 5000 && kept * 100 < streamed, `${kept} bytes kept of ${streamed} streamed`);
  });

  it('the client is given whole events only, however the reads are cut: what it has is what the move reads', () => {
    const r = new SentReader('chat');
    const gate = new ClientEvents({ reader: r });
    const stream = Buffer.from(data({ choices: [{ index: 0, delta: { content: ' é' } }], id: 'c' }) + data({ choices: [{ index: 0, delta: { content: '海' } }], id: 'c' }));
    // Cut inside the second event, inside its character.
    const cut = stream.indexOf(Buffer.from('海')) + 1;
    const given = String(gate.take([stream.subarray(0, 10), stream.subarray(10, cut)]));
    assert.equal(given, data({ choices: [{ index: 0, delta: { content: ' é' } }], id: 'c' }), 'only the whole first event went out');
    assert.equal(r.sent.text, ' é');
    const rest = String(gate.take([stream.subarray(cut)]));
    assert.equal(given + rest, stream.toString());
    assert.equal(r.sent.text, ' é海');
  });
});
