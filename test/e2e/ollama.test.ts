import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Ollama, type ChatResponse, type Tool } from 'ollama';
import { humanCount, readGgufFile, readModelCard } from '../../src/main/core/gguf/index.js';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { addModel, type HubProcess, pauseHubDevices, startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';

/**
 * The Ollama API on the hub, driven by the `ollama` npm package (what Ollama-speaking apps use) against bare
 * llama-servers of relay's own build on the same models in the same run: chat and generate (streamed and not),
 * raw generate, fill in the middle, embeddings, tool calls; the model list and cards from the GGUF headers; load,
 * unload and /api/ps; errors in Ollama's shape; the API key; Ollama's own port; a replica that dies mid-answer.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';
const GREEDY = { temperature: 0, top_k: 1, seed: 42 };
const TOKENS = 24;

async function post(base: string, path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const j = (await res.json()) as Record<string, unknown>;
  assert.equal(res.status, 200, `${path}: ${JSON.stringify(j)}`);
  return j;
}

interface Oracle {
  text: string;
  promptTokens: number;
  completionTokens: number;
  finish: string;
}

type ToolCall = { function: { name: string; arguments: string } };

/** A bare llama-server's chat answer at temperature 0, and the tool calls it parsed. */
async function directAnswer(base: string, messages: unknown[], extra: Record<string, unknown> = {}): Promise<{ oracle: Oracle; toolCalls: ToolCall[] }> {
  const j = await post(base, '/v1/chat/completions', { messages, max_tokens: TOKENS, ...GREEDY, ...extra });
  const c = (j.choices as { message: { content: string | null; tool_calls?: ToolCall[] }; finish_reason: string }[])[0]!;
  const u = j.usage as { prompt_tokens: number; completion_tokens: number };
  return { oracle: { text: c.message.content ?? '', promptTokens: u.prompt_tokens, completionTokens: u.completion_tokens, finish: c.finish_reason }, toolCalls: c.message.tool_calls ?? [] };
}
const directChat = async (base: string, messages: unknown[]): Promise<Oracle> => (await directAnswer(base, messages)).oracle;

/** What Ollama's answer says, to compare with the oracle. */
const chatOf = (r: ChatResponse): Oracle => ({ text: r.message.content, promptTokens: r.prompt_eval_count, completionTokens: r.eval_count, finish: r.done_reason });

const TOOLS: Tool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get weather',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Tokyo'] } }, required: ['city'] },
    },
  },
];
// The tools fixture's template leaves the assistant's turn open: a "{" put there is where the call's JSON starts.
const TOOL_MESSAGES = [
  { role: 'user', content: 'What is the weather in Paris?' },
  { role: 'assistant', content: '{' },
];

describe('the Ollama API through the pool', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let ollama: Ollama;
  const direct: Record<string, RunningLlamaServer> = {};
  let node: NodeProcess | null = null;

  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2400', '--ollama-port', '0'] });
    await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
    await addModel(hub, { path: fixture('infill'), name: 'code', required_vram_mb: 300 });
    await addModel(hub, { path: fixture('tools'), name: 'tools:small', required_vram_mb: 300 });
    await addModel(hub, { path: fixture('dense', 2), name: 'emb', required_vram_mb: 300, embedding: true });
    // No --reranker: its header's rank pooling makes it one (and rerankers have no Ollama route).
    const rank = await addModel(hub, { path: fixture('rerank'), name: 'rank' });
    assert.equal(rank.reranker, true);
    ollama = new Ollama({ host: hub.url });
    const opts = { ctx: 512, slots: 1, cacheType: 'f16' as const, threads: 1 };
    direct.m = await startLlamaServer(llama(), { ...opts, model: fixture('dense') });
    direct.code = await startLlamaServer(llama(), { ...opts, model: fixture('infill') });
    direct.tools = await startLlamaServer(llama(), { ...opts, model: fixture('tools') });
    direct.emb = await startLlamaServer(llama(), { ...opts, model: fixture('dense', 2), embedding: true, pooling: 'mean' });
  });
  after(async () => {
    for (const s of Object.values(direct)) await s.child.terminate(5000);
    await node?.stop();
    await hub?.stop();
  });

  it("chat, streamed and not, equals the bare llama-server's chat at temperature 0: text, token counts, done reason", async () => {
    const messages = [{ role: 'user', content: PROMPT }];
    const want = await directChat(direct.m!.baseUrl, messages);
    assert.ok(want.text.length > 0 && want.completionTokens > 0);
    const ask = { model: 'm', messages, options: { ...GREEDY, num_predict: TOKENS } };
    const one = await ollama.chat({ ...ask, stream: false });
    assert.deepEqual(chatOf(one), want);
    assert.equal(one.model, 'm', 'the model as the client named it');
    assert.equal(one.message.role, 'assistant');
    assert.ok(one.total_duration > 0 && one.eval_duration > 0 && one.prompt_eval_duration > 0);

    let text = '';
    let pieces = 0;
    let last: ChatResponse | null = null;
    for await (const part of await ollama.chat({ ...ask, model: 'm:latest', stream: true })) {
      if (!part.done) {
        text += part.message.content;
        pieces++;
      } else last = part;
    }
    assert.ok(pieces > 1, 'streamed in pieces');
    assert.ok(last);
    assert.deepEqual({ ...chatOf(last), text }, want);
    assert.equal(last.model, 'm:latest');

    // On the wire: NDJSON, each line a whole JSON object, done: true on the last line only.
    const wire = await fetch(`${hub.url}/api/chat`, { method: 'POST', body: JSON.stringify({ ...ask, stream: true }) });
    assert.equal(wire.headers.get('content-type'), 'application/x-ndjson');
    const ndjson = (await wire.text()).split('\n');
    assert.equal(ndjson.pop(), '', 'every line ends with a newline');
    const parsed = ndjson.map((l) => JSON.parse(l) as { done: boolean; message: { content: string } });
    assert.deepEqual(
      parsed.map((p) => p.done),
      [...parsed.slice(1).map(() => false), true],
    );
    assert.equal(parsed.map((p) => p.message.content).join(''), want.text);

    // With a system prompt: the same as the bare server given it.
    const sys = [{ role: 'system', content: 'Answer briefly.' }, ...messages];
    const withSystem = await ollama.chat({ ...ask, messages: sys, stream: false });
    assert.deepEqual(chatOf(withSystem), await directChat(direct.m!.baseUrl, sys));
    const logged = (await hub.status()).recent[0]!;
    assert.deepEqual([logged.endpoint, logged.model, logged.prompt_tokens, logged.completion_tokens], ['ollama/chat', 'm', withSystem.prompt_eval_count, withSystem.eval_count], 'in the request log');
  });

  it('generate is a chat of system + prompt; raw is /completion; a suffix is fill-in-the-middle (/infill)', async () => {
    const want = await directChat(direct.m!.baseUrl, [
      { role: 'system', content: 'Answer briefly.' },
      { role: 'user', content: PROMPT },
    ]);
    const g = await ollama.generate({ model: 'm', prompt: PROMPT, system: 'Answer briefly.', options: { ...GREEDY, num_predict: TOKENS } });
    assert.deepEqual({ text: g.response, promptTokens: g.prompt_eval_count, completionTokens: g.eval_count, finish: g.done_reason }, want);

    const raw = await post(direct.m!.baseUrl, '/completion', { prompt: PROMPT, n_predict: TOKENS, ...GREEDY });
    let streamed = '';
    let done = '';
    for await (const part of await ollama.generate({ model: 'm', prompt: PROMPT, raw: true, stream: true, options: { ...GREEDY, num_predict: TOKENS } })) {
      streamed += part.response;
      if (part.done) done = part.done_reason;
    }
    assert.equal(streamed, raw.content);
    assert.ok(streamed.length > 0);
    assert.equal(done, 'length');

    const fim = { input_prefix: 'def add(a, b):\n    ', input_suffix: '\n    return c\n' };
    const infill = await post(direct.code!.baseUrl, '/infill', { ...fim, n_predict: 16, ...GREEDY });
    const f = await ollama.generate({ model: 'code', prompt: fim.input_prefix, suffix: fim.input_suffix, stream: false, options: { ...GREEDY, num_predict: 16 } });
    assert.equal(f.response, infill.content);
    assert.ok(typeof infill.content === 'string' && infill.content.length > 0);
    assert.equal(f.eval_count, (infill.timings as { predicted_n: number }).predicted_n);
  });

  it('embed and the older embeddings equal the bare embedding server (normalized, and raw)', async () => {
    const input = ['hello world', 'goodbye'];
    const want = (await post(direct.emb!.baseUrl, '/v1/embeddings', { input })).data as { embedding: number[] }[];
    const e = await ollama.embed({ model: 'emb', input });
    assert.deepEqual(e.embeddings, [want[0]!.embedding, want[1]!.embedding]);
    assert.ok(Math.abs(Math.hypot(...e.embeddings[0]!) - 1) < 1e-4, '/api/embed vectors have unit length');
    assert.ok(e.prompt_eval_count > 0);
    const rawWant = (await post(direct.emb!.baseUrl, '/v1/embeddings', { input: 'hello world', embd_normalize: -1 })).data as { embedding: number[] }[];
    const legacy = await ollama.embeddings({ model: 'emb', prompt: 'hello world' });
    assert.deepEqual(legacy.embedding, rawWant[0]!.embedding);
    assert.ok(Math.abs(Math.hypot(...legacy.embedding) - 1) > 1e-3, 'the older route gives the vector as the model makes it');
  });

  it("tool calls: the model's call comes whole, its arguments an object, as the bare server parsed it", async () => {
    const want = await directAnswer(direct.tools!.baseUrl, TOOL_MESSAGES, { tools: TOOLS, tool_choice: 'required', max_tokens: 128 });
    assert.equal(want.toolCalls.length, 1, 'the oracle calls the tool');
    const ask = { model: 'tools:small', messages: TOOL_MESSAGES, tools: TOOLS, tool_choice: 'required', options: { ...GREEDY, num_predict: 128 } };
    const one = await ollama.chat({ ...ask, stream: false } as Parameters<Ollama['chat']>[0] & { stream: false });
    const calls = one.message.tool_calls ?? [];
    assert.equal(calls.length, 1, JSON.stringify(one.message));
    assert.equal(calls[0]!.function.name, want.toolCalls[0]!.function.name);
    assert.deepEqual(calls[0]!.function.arguments, JSON.parse(want.toolCalls[0]!.function.arguments));
    assert.deepEqual(calls[0]!.function.arguments, { city: 'Paris' });
    const streamed: ChatResponse[] = [];
    for await (const part of await ollama.chat({ ...ask, stream: true } as Parameters<Ollama['chat']>[0] & { stream: true })) streamed.push(part);
    assert.deepEqual(
      streamed.flatMap((p) => p.message.tool_calls ?? []).map((c) => c.function),
      calls.map((c) => c.function),
    );
  });

  it('structured output: a JSON schema, and "json", constrain the answer as they do on the bare server', async () => {
    const schema = { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Tokyo'] } }, required: ['city'], additionalProperties: false };
    const messages = [{ role: 'user', content: 'Where?' }];
    const want = await directAnswer(direct.tools!.baseUrl, messages, { max_tokens: 64, response_format: { type: 'json_schema', json_schema: { name: 's', schema } } });
    const r = await ollama.chat({ model: 'tools:small', messages, format: schema, stream: false, options: { ...GREEDY, num_predict: 64 } });
    assert.equal(r.message.content, want.oracle.text);
    assert.deepEqual(Object.keys(JSON.parse(r.message.content) as object), ['city'], "the answer is the schema's object");
    const anyObject = await directAnswer(direct.tools!.baseUrl, messages, { response_format: { type: 'json_schema', json_schema: { name: 'j', schema: { type: 'object' } } } });
    const j = await ollama.chat({ model: 'tools:small', messages, format: 'json', stream: false, options: { ...GREEDY, num_predict: TOKENS } });
    assert.equal(j.message.content, anyObject.oracle.text);
    assert.ok(j.message.content.startsWith('{'), 'an object, cut at num_predict');
  });

  it('tags and show: every servable model with its family, size, quantization and digest from its GGUF; capabilities', async () => {
    const registered = (await hub.api<{ models: { name: string; sha256: string; size: number }[] }>('/api/models')).body.models;
    const { models } = await ollama.list();
    assert.deepEqual(models.map((m) => m.name).sort(), ['code:latest', 'emb:latest', 'm:latest', 'tools:small'], 'the reranker has no Ollama route: not listed');
    const m = models.find((x) => x.name === 'm:latest')!;
    const reg = registered.find((x) => x.name === 'm')!;
    const card = readModelCard([fixture('dense')], 5);
    assert.equal(m.digest, reg.sha256);
    assert.equal(m.size, reg.size);
    assert.deepEqual(m.details, { parent_model: '', format: 'gguf', family: 'llama', families: ['llama'], parameter_size: humanCount(card.parameterCount), quantization_level: 'F32' });

    const show = await ollama.show({ model: 'm' });
    assert.deepEqual(show.capabilities, ['completion']);
    assert.equal((show.model_info as unknown as Record<string, unknown>)['llama.block_count'], 4);
    assert.deepEqual((show.model_info as unknown as Record<string, unknown>)['tokenizer.ggml.tokens'], []);
    assert.match(show.parameters, /^num_ctx\s+512$/);
    assert.equal((show as unknown as { tensors: unknown[] }).tensors.length, card.tensors.length);
    const verbose = await ollama.show({ model: 'm', verbose: true } as Parameters<Ollama['show']>[0]);
    const vocab = readGgufFile(fixture('dense')).metadata.get('tokenizer.ggml.tokens')!.value as unknown[];
    assert.equal(((verbose.model_info as unknown as Record<string, unknown>)['tokenizer.ggml.tokens'] as unknown[]).length, vocab.length);
    assert.deepEqual((await ollama.show({ model: 'code' })).capabilities, ['completion', 'insert']);
    const tools = await ollama.show({ model: 'tools:small' });
    assert.deepEqual(tools.capabilities, ['completion', 'tools']);
    assert.ok(tools.template.includes('tools'), "the GGUF's chat template");
    assert.deepEqual((await ollama.show({ model: 'emb' })).capabilities, ['embedding']);
    assert.equal((await ollama.version()).version, '0.12.0');
  });

  it('load and unload (an empty request, keep_alive 0) and /api/ps', async () => {
    const ps = async () => (await ollama.ps()).models;
    const loaded = await ollama.chat({ model: 'm', messages: [] });
    assert.equal(loaded.done_reason, 'load');
    const m = (await ps()).find((x) => x.name === 'm:latest');
    assert.ok(m, 'm is loaded');
    assert.equal(m.size_vram, 0, 'on the CPU: no VRAM');
    assert.ok(m.size > 0);
    assert.ok(new Date(m.expires_at).getTime() > Date.now(), 'expires a keep-alive after its last use');
    assert.equal((m as unknown as { context_length: number }).context_length, 512);

    const unloaded = await ollama.generate({ model: 'm', prompt: '', keep_alive: 0 });
    assert.equal(unloaded.done_reason, 'unload');
    assert.equal((await hub.status()).replicas.filter((r) => r.model === 'm').length, 0, 'its replica stopped');
    assert.equal(
      (await ps()).find((x) => x.name === 'm:latest'),
      undefined,
    );
    assert.equal((await ollama.generate({ model: 'm', prompt: '' })).done_reason, 'load');
    assert.ok((await ps()).some((x) => x.name === 'm:latest'));
  });

  it("errors in Ollama's shape: an unknown model, a refused route, a wrong kind of model, bad JSON; curl's -d is JSON", async () => {
    const fails = async (p: Promise<unknown>): Promise<{ error: string; status_code: number }> => {
      try {
        await p;
      } catch (err) {
        return err as { error: string; status_code: number };
      }
      return assert.fail('expected an error');
    };
    const nope = await fails(ollama.chat({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }));
    assert.equal(nope.status_code, 404);
    assert.equal(nope.error, "model 'nope' not found");
    const pull = await fails(ollama.pull({ model: 'llama3.2' }));
    assert.equal(pull.status_code, 501);
    assert.match(pull.error, /relay models add/);
    const wrong = await fails(ollama.embed({ model: 'm', input: 'x' }));
    assert.equal(wrong.status_code, 400);
    assert.match(wrong.error, /embedding/);
    const bad = await fetch(`${hub.url}/api/chat`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"model":' });
    assert.equal(bad.status, 400);
    assert.equal(typeof ((await bad.json()) as { error: unknown }).error, 'string');
    // `curl -d '{…}'` labels JSON as a form: Ollama's own examples do it.
    const curl = await fetch(`${hub.url}/api/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: JSON.stringify({ model: 'm', prompt: PROMPT, stream: false, options: { ...GREEDY, num_predict: 4 } }),
    });
    assert.equal(curl.status, 200);
    assert.equal(((await curl.json()) as { done: boolean }).done, true);
  });

  it("Ollama's own port: 'Ollama is running' at /, the same API", async () => {
    assert.ok(hub.ollamaUrl, 'the banner names the Ollama port');
    const root = await fetch(`${hub.ollamaUrl}/`);
    assert.equal(root.status, 200);
    assert.equal(await root.text(), 'Ollama is running');
    const there = new Ollama({ host: hub.ollamaUrl });
    assert.deepEqual((await there.list()).models.map((m) => m.name).sort(), (await ollama.list()).models.map((m) => m.name).sort());
    const r = await there.chat({ model: 'm', messages: [{ role: 'user', content: PROMPT }], options: { ...GREEDY, num_predict: TOKENS } });
    assert.deepEqual(chatOf(r), await directChat(direct.m!.baseUrl, [{ role: 'user', content: PROMPT }]));
  });

  it('through a node replica (the hub paused): the same chat', async () => {
    node = await startNode(hub, { name: 'n1', cpuBudgetMb: 2400, env: ENV });
    await pauseHubDevices(hub);
    const messages = [{ role: 'user', content: PROMPT }];
    let text = '';
    let last: ChatResponse | null = null;
    for await (const part of await ollama.chat({ model: 'm', messages, stream: true, options: { ...GREEDY, num_predict: TOKENS } })) {
      text += part.message.content;
      if (part.done) last = part;
    }
    assert.ok(last);
    assert.deepEqual({ ...chatOf(last), text }, await directChat(direct.m!.baseUrl, messages));
    assert.ok(
      (await hub.status()).replicas.some((r) => r.model === 'm' && r.node === 'n1' && r.state === 'ready'),
      'served on n1',
    );
  });

  it('a replica that dies mid-answer ends the stream with an error line, which the client raises', async () => {
    const messages = [{ role: 'user', content: PROMPT }];
    let got = 0;
    let raised: Error | null = null;
    try {
      for await (const part of await ollama.chat({ model: 'm', messages, stream: true, options: { ...GREEDY, num_predict: 400 } })) {
        if (part.message.content && ++got === 2) await node!.kill9();
      }
    } catch (err) {
      raised = err as Error;
    }
    assert.ok(raised, 'the iterator threw');
    assert.ok(got >= 2);
    assert.match(raised.message, /the replica of "m" stopped mid-response/, 'a whole error line saying what happened');
  });
});

describe('the Ollama API: key and port', { timeout: 300_000 }, () => {
  it('the API key guards it; a missing key is a 401 in its shape', async () => {
    const hub = await startHub({ env: { ...ENV, RELAY_API_KEY: 'sekrit' } });
    try {
      const res = await fetch(`${hub.url}/api/tags`);
      assert.equal(res.status, 401);
      assert.equal(typeof ((await res.json()) as { error: unknown }).error, 'string');
      const keyed = new Ollama({ host: hub.url, headers: { Authorization: 'Bearer sekrit' } });
      assert.deepEqual((await keyed.list()).models, []);
    } finally {
      await hub.stop();
    }
  });

  it('a taken Ollama port stops the hub with a reason', async () => {
    const taken: Server = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', () => r()));
    const port = (taken.address() as { port: number }).port;
    try {
      await assert.rejects(startHub({ env: ENV, args: ['--ollama-port', String(port)] }), (err: Error) => new RegExp(`port ${port} on 127.0.0.1 is taken`).test(err.message));
    } finally {
      taken.close();
    }
  });
});
