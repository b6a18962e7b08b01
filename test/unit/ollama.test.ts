import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { humanCount, readGgufFile, readModelCard } from '../../src/main/core/gguf/index.js';
import { chatUpstream, embedUpstream, generateUpstream, isLoadOnly, ollamaName, registeredName, samplers, unloadsNow, wantsStream } from '../../src/main/core/hub/api/ollama/request.js';
import { ollamaEmbedding, ollamaGeneration, type AnswerShape } from '../../src/main/core/hub/api/ollama/response.js';
import { capabilities, listed, psEntries, showBody } from '../../src/main/core/hub/api/ollama/models.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';
import { isRelayError, RelayError, ErrorCode } from '../../src/shared/errors.js';
import { FIXTURES } from '../fixtures/models.js';
import { unitFixture as fixture } from '../fixtures/synthetic-vocab.js';

/**
 * Ollama's API as llama-server requests and answers (the pure half of hub/api/ollama): what each request becomes, the
 * NDJSON a streamed answer becomes however its bytes are split, tool calls gathered whole, the model cards read
 * from the suite's own GGUFs against what their specs say.
 */

function code(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    assert.ok(isRelayError(err), String(err));
    return err.code;
  }
  return assert.fail('expected a RelayError');
}

/** SSE as llama-server writes it: one `data:` line per event, a blank line after each. */
const sse = (events: unknown[]): Buffer => Buffer.from(events.map((e) => `data: ${typeof e === 'string' ? e : JSON.stringify(e)}\n\n`).join(''));

/** Feed `bytes` to a translator in the pieces `cuts` makes (byte offsets), then end it: every line it wrote. */
function run(shape: Partial<AnswerShape>, bytes: Buffer, cuts: number[] = []): string {
  const t = ollamaGeneration({ kind: 'chat', model: 'm:latest', stream: true, upstream: 'chat', startedAt: 1000, leasedAt: 1500, now: () => 4000, ...shape });
  let out = '';
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    out += t.chunk(bytes.subarray(at, c));
    at = c;
  }
  return out + t.end();
}
const lines = (s: string): Record<string, unknown>[] =>
  s
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) => ({ choices: [{ index: 0, delta, finish_reason: finish }], ...extra });
const TIMINGS = { cache_n: 2, prompt_n: 5, prompt_ms: 1.5, predicted_n: 3, predicted_ms: 12.25 };

describe('Ollama requests as llama-server requests', () => {
  it('names: untagged models are :latest to Ollama, and :latest finds them again', () => {
    assert.equal(ollamaName('m'), 'm:latest');
    assert.equal(ollamaName('qwen:7b'), 'qwen:7b');
    const has = (n: string) => n === 'm' || n === 'qwen:7b';
    assert.equal(registeredName('m:latest', has), 'm');
    assert.equal(registeredName('m', has), 'm');
    assert.equal(registeredName('qwen:7b', has), 'qwen:7b');
    assert.equal(registeredName('nope:latest', has), 'nope:latest'); // not found: the name as asked, for the error
  });

  it('options map to llama-server samplers; the pool-owned ones are ignored; bad values are refused', () => {
    const o = samplers({ temperature: 0, top_k: 1, seed: 42, num_predict: 16, stop: '\n', num_keep: 4, num_ctx: 8192, num_gpu: 99, num_thread: 8 }, 'max_tokens');
    assert.deepEqual(o, { temperature: 0, top_k: 1, seed: 42, max_tokens: 16, stop: ['\n'], n_keep: 4 });
    assert.deepEqual(samplers({ num_predict: -1 }, 'n_predict'), {}); // -1: until the model stops (llama-server's default)
    assert.deepEqual(samplers({ num_predict: 8, stop: ['a', 'b'] }, 'n_predict'), { n_predict: 8, stop: ['a', 'b'] });
    assert.deepEqual(samplers(undefined, 'max_tokens'), {});
    assert.equal(
      code(() => samplers({ temperature: 'hot' }, 'max_tokens')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => samplers({ num_predict: 1.5 }, 'max_tokens')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => samplers([], 'max_tokens')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => samplers({ stop: [1] }, 'max_tokens')),
      ErrorCode.INVALID_REQUEST,
    );
  });

  it('a chat: OpenAI messages, images as data URLs, tool calls with string arguments, think and format as llama-server takes them', () => {
    const png = Buffer.from('\x89PNG\r\n').toString('base64');
    const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0]).toString('base64');
    const u = chatUpstream(
      {
        messages: [
          { role: 'system', content: 'be brief' },
          { role: 'user', content: 'what is this?', images: [png, jpeg] },
          { role: 'assistant', content: '', tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }], thinking: 'hmm' },
          { role: 'tool', content: '21 C', tool_name: 'get_weather' },
        ],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object' } } }],
        think: 'high',
        format: 'json',
        options: { temperature: 0, num_predict: 8 },
        stream: false,
      },
      'm',
    );
    assert.equal(u.path, '/v1/chat/completions');
    assert.equal(u.format, 'chat');
    const b = u.body as Record<string, unknown> & { messages: Record<string, unknown>[] };
    assert.equal(b.stream, true, 'always streamed upstream: one parser, and the stall watch hears every token');
    assert.equal(b.max_tokens, 8);
    assert.deepEqual(b.response_format, { type: 'json_schema', json_schema: { name: 'json', schema: { type: 'object' } } }, 'a grammar for any object');
    assert.deepEqual(b.chat_template_kwargs, { enable_thinking: true });
    assert.equal(b.reasoning_effort, 'high');
    assert.equal((b.tools as unknown[]).length, 1);
    assert.deepEqual(b.messages[1]!.content, [
      { type: 'text', text: 'what is this?' },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
      { type: 'image_url', image_url: { url: `data:image/jpeg;base64,${jpeg}` } },
    ]);
    assert.deepEqual(b.messages[2]!.tool_calls, [{ id: 'call_2_0', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }]);
    assert.equal(b.messages[2]!.reasoning_content, 'hmm');
    assert.equal(b.messages[3]!.name, 'get_weather');
    // A schema is json_schema; think false turns thinking off.
    const s = chatUpstream({ messages: [], format: { type: 'object', properties: { a: { type: 'string' } } }, think: false }, 'm').body;
    assert.deepEqual(s.response_format, { type: 'json_schema', json_schema: { name: 'schema', schema: { type: 'object', properties: { a: { type: 'string' } } } } });
    assert.deepEqual(s.chat_template_kwargs, { enable_thinking: false });
    assert.equal(
      code(() => chatUpstream({ messages: 'hi' }, 'm')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => chatUpstream({ messages: [{ role: 'user', content: 3 }] }, 'm')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => chatUpstream({ messages: [], think: 'lots' }, 'm')),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => chatUpstream({ messages: [], format: 'yaml' }, 'm')),
      ErrorCode.INVALID_REQUEST,
    );
  });

  it('a generate: a chat of system + prompt; raw is /completion; a suffix is /infill; template and context are refused', () => {
    const g = generateUpstream({ prompt: 'hi', system: 'sys', options: { seed: 1 } }, 'm');
    assert.equal(g.path, '/v1/chat/completions');
    assert.deepEqual((g.body.messages as unknown[]).slice(0, 2), [
      { role: 'system', content: 'sys' },
      { role: 'user', content: 'hi' },
    ]);
    const raw = generateUpstream({ prompt: '<s>[INST] hi', raw: true, options: { num_predict: 4 }, format: 'json' }, 'm');
    assert.deepEqual(raw, { path: '/completion', body: { prompt: '<s>[INST] hi', stream: true, n_predict: 4, json_schema: { type: 'object' } }, format: 'native' });
    const fim = generateUpstream({ prompt: 'def add(a, b):\n', suffix: '\n  return c', options: { num_predict: 4 } }, 'm');
    assert.deepEqual(fim, { path: '/infill', body: { input_prefix: 'def add(a, b):\n', input_suffix: '\n  return c', stream: true, n_predict: 4 }, format: 'native' });
    assert.equal(
      code(() => generateUpstream({ prompt: 'x', template: '{{ .Prompt }}' }, 'm')),
      ErrorCode.NOT_SUPPORTED,
    );
    assert.equal(
      code(() => generateUpstream({ prompt: 'x', context: [1, 2, 3] }, 'm')),
      ErrorCode.NOT_SUPPORTED,
    );
    assert.equal(
      code(() => generateUpstream({ prompt: 'x', raw: true, images: ['iVBO'] }, 'm')),
      ErrorCode.NOT_SUPPORTED,
    );
    assert.equal(generateUpstream({ prompt: 'x', context: [] }, 'm').path, '/v1/chat/completions'); // an empty context is no context
  });

  it('load and unload requests; stream defaults to true; embeddings', () => {
    assert.equal(isLoadOnly({ model: 'm' }, 'chat'), true);
    assert.equal(isLoadOnly({ model: 'm', messages: [] }, 'chat'), true);
    assert.equal(isLoadOnly({ model: 'm', messages: [{ role: 'user', content: 'x' }] }, 'chat'), false);
    assert.equal(isLoadOnly({ model: 'm' }, 'generate'), true);
    assert.equal(isLoadOnly({ model: 'm', prompt: '', suffix: 'x' }, 'generate'), false);
    for (const k of [0, '0', '0s', '0m']) assert.equal(unloadsNow(k), true, String(k));
    for (const k of [undefined, '5m', 300, -1, '-1']) assert.equal(unloadsNow(k), false, String(k));
    assert.equal(wantsStream({}), true);
    assert.equal(wantsStream({ stream: false }), false);
    assert.equal(
      code(() => wantsStream({ stream: 'no' })),
      ErrorCode.INVALID_REQUEST,
    );
    assert.deepEqual(embedUpstream({ input: ['a', 'b'] }, 'e', false), { path: '/v1/embeddings', body: { model: 'e', input: ['a', 'b'] }, format: 'native' });
    assert.deepEqual(embedUpstream({ prompt: 'a' }, 'e', true).body, { model: 'e', input: 'a', embd_normalize: -1 });
    assert.equal(
      code(() => embedUpstream({ input: [] }, 'e', false)),
      ErrorCode.INVALID_REQUEST,
    );
    assert.equal(
      code(() => embedUpstream({ input: 'a' }, 'e', true)),
      ErrorCode.INVALID_REQUEST,
    );
  });
});

describe('llama-server answers as Ollama answers', () => {
  const stream = sse([chunk({ role: 'assistant', content: null }), chunk({ content: 'Héllo' }), chunk({ content: ' 世界' }), chunk({}, 'length', { timings: TIMINGS }), '[DONE]']);

  it('a streamed chat: one line per piece, then done with the reason, counts and durations — however the bytes are cut', () => {
    const whole = run({}, stream);
    const ls = lines(whole);
    assert.deepEqual(
      ls.map((l) => (l.message as { content: string }).content),
      ['Héllo', ' 世界', ''],
    );
    assert.ok(ls.slice(0, -1).every((l) => l.done === false && l.model === 'm:latest' && typeof l.created_at === 'string'));
    const last = ls.at(-1)!;
    assert.equal(last.done, true);
    assert.equal(last.done_reason, 'length');
    assert.equal(last.prompt_eval_count, 7, 'the cached prompt tokens count: Ollama counts the whole prompt');
    assert.equal(last.eval_count, 3);
    assert.equal(last.eval_duration, 12_250_000);
    assert.equal(last.prompt_eval_duration, 1_500_000);
    assert.equal(last.total_duration, 3_000_000_000);
    assert.equal(last.load_duration, 500_000_000);
    // Every cut, inside a line and inside a multi-byte character, reads the same.
    const at = stream.indexOf(Buffer.from('世')) + 1;
    for (const cuts of [[1], [at], [5, at, at + 1], Array.from({ length: stream.length - 1 }, (_, i) => i + 1)]) {
      assert.equal(run({}, stream, cuts), whole, `cut at ${cuts.slice(0, 4).join(',')}…`);
    }
  });

  it('stream false: one body with the whole text; a generate answers `response`', () => {
    const one = JSON.parse(run({ stream: false }, stream)) as Record<string, unknown>;
    assert.deepEqual(one.message, { role: 'assistant', content: 'Héllo 世界' });
    assert.equal(one.done, true);
    const gen = lines(run({ kind: 'generate' }, stream));
    assert.deepEqual(
      gen.map((l) => l.response),
      ['Héllo', ' 世界', ''],
    );
    assert.equal(gen[0]!.message, undefined);
  });

  it('thinking comes as message.thinking; native /completion chunks read content and stop_type', () => {
    const think = lines(run({}, sse([chunk({ reasoning_content: 'let me see' }), chunk({ content: 'ok' }), chunk({}, 'stop')])));
    assert.deepEqual(think[0]!.message, { role: 'assistant', content: '', thinking: 'let me see' });
    assert.equal(think.at(-1)!.done_reason, 'stop');
    const native = sse([
      { content: 'a', stop: false },
      { content: 'b', stop: false },
      { content: '', stop: true, stop_type: 'limit', timings: TIMINGS },
    ]);
    const ls = lines(run({ kind: 'generate', upstream: 'native' }, native));
    assert.deepEqual(
      ls.map((l) => l.response),
      ['a', 'b', ''],
    );
    assert.equal(ls.at(-1)!.done_reason, 'length');
    assert.equal(lines(run({ kind: 'generate', upstream: 'native' }, sse([{ content: 'a', stop: true, stop_type: 'eos' }]))).at(-1)!.done_reason, 'stop');
  });

  it('tool calls are gathered across chunks and given whole, arguments as objects', () => {
    const calls = sse([
      chunk({ tool_calls: [{ index: 0, id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"ci' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty":"Paris"}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'c2', function: { name: 'now', arguments: '' } }] }),
      chunk({}, 'tool_calls', { timings: TIMINGS }),
    ]);
    const ls = lines(run({}, calls));
    assert.equal(ls.length, 2);
    assert.deepEqual((ls[0]!.message as { tool_calls: unknown }).tool_calls, [
      { id: 'c1', function: { index: 0, name: 'get_weather', arguments: { city: 'Paris' } } },
      { id: 'c2', function: { index: 1, name: 'now', arguments: {} } },
    ]);
    assert.equal(ls[1]!.done_reason, 'stop');
    const one = JSON.parse(run({ stream: false }, calls)) as { message: { tool_calls: unknown[] } };
    assert.equal(one.message.tool_calls.length, 2);
    // Arguments that are not JSON are the model's fault, said so, not passed on as a string.
    const bad = sse([chunk({ tool_calls: [{ index: 0, function: { name: 'f', arguments: '{city: Paris' } }] }), chunk({}, 'tool_calls')]);
    assert.throws(
      () => run({}, bad),
      (e: unknown) => e instanceof RelayError && e.code === ErrorCode.LLAMA_SERVER_ERROR && /not JSON/.test(e.message),
    );
  });

  it("llama-server's error event: an error line in a stream, a thrown LLAMA_SERVER_ERROR for one body", () => {
    const broken = sse([chunk({ content: 'a' }), { error: { code: 500, message: 'context full' } }, chunk({ content: 'never' })]);
    const ls = lines(run({}, broken));
    assert.equal(ls.length, 2);
    assert.deepEqual(ls[1], { error: 'context full' });
    assert.throws(
      () => run({ stream: false }, broken),
      (e: unknown) => e instanceof RelayError && e.code === ErrorCode.LLAMA_SERVER_ERROR,
    );
    const t = ollamaGeneration({ kind: 'chat', model: 'm', stream: true, upstream: 'chat', startedAt: 0, leasedAt: 0 });
    assert.deepEqual(JSON.parse(t.broken(new RelayError(ErrorCode.NODE_LOST, 'the node went away'))), { error: 'the node went away' });
  });

  it('embeddings: /api/embed gives every vector in order, /api/embeddings the one', () => {
    const body = Buffer.from(
      JSON.stringify({
        data: [
          { index: 1, embedding: [3, 4] },
          { index: 0, embedding: [1, 2] },
        ],
        usage: { prompt_tokens: 6 },
      }),
    );
    const e = ollamaEmbedding({ model: 'e:latest', legacy: false, startedAt: 0, leasedAt: 10, now: () => 20 });
    e.chunk(body.subarray(0, 7));
    e.chunk(body.subarray(7));
    assert.deepEqual(JSON.parse(e.end()), {
      model: 'e:latest',
      embeddings: [
        [1, 2],
        [3, 4],
      ],
      total_duration: 20_000_000,
      load_duration: 10_000_000,
      prompt_eval_count: 6,
    });
    const legacy = ollamaEmbedding({ model: 'e', legacy: true, startedAt: 0, leasedAt: 0 });
    legacy.chunk(body);
    assert.deepEqual(JSON.parse(legacy.end()), { embedding: [1, 2] });
    const junk = ollamaEmbedding({ model: 'e', legacy: false, startedAt: 0, leasedAt: 0 });
    junk.chunk(Buffer.from('<html>'));
    assert.throws(
      () => junk.end(),
      (err: unknown) => err instanceof RelayError && err.code === ErrorCode.LLAMA_SERVER_ERROR,
    );
  });
});

describe("model cards from the suite's GGUFs", () => {
  it("the parameter count is the spec's (counted independently), shown as Ollama shows it; F32; arrays cut unless verbose", () => {
    const s = FIXTURES.dense;
    const vocab = (readGgufFile(fixture('dense')).metadata.get('tokenizer.ggml.tokens')!.value as unknown[]).length;
    const hd = s.embd / s.heads;
    const perLayer = 2 * s.embd + s.embd * s.heads * hd * 2 + 2 * s.embd * s.kvHeads * hd + 3 * s.embd * s.ff;
    const want = 2 * s.embd * vocab + s.embd + s.layers * perLayer;
    const card = readModelCard([fixture('dense')], 5);
    assert.equal(card.parameterCount, want);
    assert.equal(humanCount(card.parameterCount), `${(want / 1e6).toFixed(2)}M`);
    assert.equal(card.architecture, 'llama');
    assert.equal(card.quantization, 'F32');
    assert.equal(card.contextLength, s.ctx);
    assert.equal(card.metadata['general.parameter_count'], want);
    assert.equal(card.metadata['llama.block_count'], s.layers);
    assert.deepEqual(card.metadata['tokenizer.ggml.tokens'], []);
    assert.equal(card.metadata['general.name'], undefined);
    assert.equal(card.tensors.length, 3 + 9 * s.layers);
    assert.deepEqual(
      card.tensors.find((t) => t.name === 'blk.0.ffn_up.weight'),
      { name: 'blk.0.ffn_up.weight', type: 'F32', shape: [s.embd, s.ff] },
    );
    const verbose = readModelCard([fixture('dense')], Infinity);
    assert.equal((verbose.metadata['tokenizer.ggml.tokens'] as unknown[]).length, vocab);
    assert.deepEqual(capabilities({ name: 'm' } as ModelRecord, card), ['completion']);
  });

  it('what a model can do: insert (FIM tokens), tools (a template that renders them), embedding', () => {
    const infill = readModelCard([fixture('infill')], 5);
    assert.equal(infill.fim, true);
    assert.equal(infill.tools, false);
    assert.deepEqual(capabilities({ name: 'code' } as ModelRecord, infill), ['completion', 'insert']);
    const tools = readModelCard([fixture('tools')], 5);
    assert.equal(tools.tools, true);
    assert.equal(tools.fim, false);
    assert.ok(tools.chatTemplate?.includes('tools'));
    assert.deepEqual(capabilities({ name: 't' } as ModelRecord, tools), ['completion', 'tools']);
    assert.deepEqual(capabilities({ name: 'e', embedding: true } as ModelRecord, tools), ['embedding']);
    const rank = readModelCard([fixture('rerank')], 5);
    assert.equal(rank.architecture, 'qwen3');
    assert.equal(rank.metadata['qwen3.pooling_type'], 4);
    assert.deepEqual(
      listed([{ name: 'a' }, { name: 'r', reranker: true }] as ModelRecord[]).map((m) => m.name),
      ['a'],
      'rerankers have no Ollama route',
    );
  });

  it("humanCount follows Ollama's format.HumanNumber", () => {
    assert.equal(humanCount(8_030_261_248), '8.0B');
    assert.equal(humanCount(7_615_616_512), '7.6B');
    assert.equal(humanCount(494_032_768), '494.03M');
    assert.equal(humanCount(135_000_000), '135M');
    assert.equal(humanCount(12_345), '12K');
    assert.equal(humanCount(999), '999');
  });

  it('/api/show and /api/ps bodies', () => {
    const m = { name: 'm', sha256: 'ab'.repeat(32), size: 1234, mtimeMs: Date.UTC(2026, 0, 2) } as ModelRecord;
    const card = readModelCard([fixture('dense')], 5);
    const show = showBody(m, card, 4096);
    assert.match(show.modelfile, /^FROM m:latest$/m);
    assert.equal(show.parameters, `num_ctx${' '.repeat(24)}4096`);
    assert.equal(show.details.parameter_size, humanCount(card.parameterCount));
    assert.equal(show.modified_at, '2026-01-02T00:00:00.000Z');
    const now = Date.UTC(2026, 0, 3);
    const ready = [
      { model: 'm', needMb: 100, ctx: 512, lastUsedAt: now - 60_000, inFlight: 0, onCpu: false },
      { model: 'm', needMb: 50, ctx: 1024, lastUsedAt: now - 120_000, inFlight: 0, onCpu: true },
      { model: 'gone', needMb: 10, ctx: 512, lastUsedAt: now, inFlight: 0, onCpu: false },
    ];
    const ps = psEntries(
      ready,
      (n) => (n === 'm' ? m : undefined),
      () => card,
      300_000,
      now,
    );
    assert.equal(ps.length, 1);
    assert.equal(ps[0]!.name, 'm:latest');
    assert.equal(ps[0]!.size, 150 * 2 ** 20);
    assert.equal(ps[0]!.size_vram, 100 * 2 ** 20, 'a placement on the CPU holds no VRAM');
    assert.equal(ps[0]!.context_length, 1024);
    assert.equal(ps[0]!.expires_at, new Date(now - 60_000 + 300_000).toISOString());
    const busy = psEntries(
      [{ ...ready[1]!, inFlight: 1 }],
      () => m,
      () => card,
      300_000,
      now,
    );
    assert.equal(busy[0]!.expires_at, new Date(now + 300_000).toISOString(), 'a model answering now expires a keep-alive from now');
  });
});
