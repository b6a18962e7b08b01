import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { addModel, type HubProcess, pauseHubDevices, startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * Every dialect llama-server speaks, through the pool, against a bare llama-server of relay's own build on the
 * same model in the same run (the oracle): Anthropic's Messages (and count_tokens) with the anthropic SDK,
 * OpenAI's Responses (and input_tokens) with the openai SDK, infill, rerank, tokenize / detokenize /
 * apply-template — streamed and not, on a host replica and on a node replica; failover before the first byte;
 * each dialect's own error shape; Anthropic's x-api-key.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';

async function post(base: string, path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

/** What the oracle compares of each dialect's answer (ids, times and the model's echo are the server's own). */
/** The prompt's tokens whether the KV cache held some (a node may hold a conversation the hub's paused replica kept). */
const messageOf = (m: Anthropic.Message) => ({
  text: m.content.map((c) => (c.type === 'text' ? c.text : '')).join(''),
  stop: m.stop_reason,
  usage: [m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), m.usage.output_tokens],
});
const responseOf = (r: OpenAI.Responses.Response) => ({ text: r.output_text, usage: [r.usage?.input_tokens, r.usage?.output_tokens] });

describe('client dialects through the pool', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let n1: NodeProcess;
  let n2: NodeProcess | null = null;
  const direct: Record<string, RunningLlamaServer> = {};
  let want: Record<string, unknown>;

  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2400'] });
    await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
    await addModel(hub, { path: fixture('infill'), name: 'code', required_vram_mb: 300 });
    const rr = await fetch(`${hub.url}/api/models`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: fixture('rerank'), name: 'rank', reranker: true }),
    });
    assert.equal(rr.status, 201, await rr.text());
    n1 = await startNode(hub, { name: 'n1', cpuBudgetMb: 2400, env: ENV });
    const opts = { ctx: 512, slots: 1, cacheType: 'f16' as const, threads: 1 };
    direct.m = await startLlamaServer(llama(), { ...opts, model: fixture('dense') });
    direct.code = await startLlamaServer(llama(), { ...opts, model: fixture('infill') });
    direct.rank = await startLlamaServer(llama(), { ...opts, model: fixture('rerank'), reranking: true });
    want = await answers(direct.m.baseUrl, direct.code.baseUrl, direct.rank.baseUrl);
    // The oracle answers for real (two failures would otherwise be equal).
    const w = want as { messages: { text: string; usage: number[] }; responses: { text: string }; countTokens: number; infill: unknown[]; tokenize: { tokens: unknown[] }; rerank: unknown[] };
    assert.ok(w.messages.text.length > 0 && w.messages.usage[1]! > 0);
    assert.ok(w.responses.text.length > 0);
    assert.ok(w.countTokens > 0);
    assert.equal(w.infill[0], 200);
    assert.ok(w.tokenize.tokens.length > 0);
    assert.equal(w.rerank.length, 3);
  });
  after(async () => {
    for (const s of Object.values(direct)) await s.child.terminate(5000);
    await n2?.stop();
    await n1?.stop();
    await hub?.stop();
  });

  /** One of everything, asked of `base` (the hub, or the bare servers for the oracle). */
  async function answers(base: string, codeBase = base, rankBase = base): Promise<Record<string, unknown>> {
    const anthropic = new Anthropic({ baseURL: base, apiKey: 'x', maxRetries: 0 });
    const openai = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'x', maxRetries: 0 });
    const ask = { model: 'm', max_tokens: 24, temperature: 0, top_k: 1, messages: [{ role: 'user' as const, content: PROMPT }] };
    const out: Record<string, unknown> = {};
    out.messages = messageOf(await anthropic.messages.create(ask));
    out.messagesStream = messageOf(await anthropic.messages.stream(ask).finalMessage());
    out.countTokens = (await anthropic.messages.countTokens({ model: 'm', messages: ask.messages })).input_tokens;
    const r = { model: 'm', input: PROMPT, max_output_tokens: 24, temperature: 0 };
    out.responses = responseOf(await openai.responses.create(r));
    let streamed = '';
    let completed: OpenAI.Responses.Response | null = null;
    for await (const ev of await openai.responses.create({ ...r, stream: true })) {
      if (ev.type === 'response.output_text.delta') streamed += ev.delta;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    out.responsesStream = { text: streamed, usage: completed ? responseOf(completed).usage : null };
    out.inputTokens = (await post(base, '/v1/responses/input_tokens', { model: 'm', input: PROMPT })).json.input_tokens;
    const infill = await post(codeBase, '/infill', { model: 'code', input_prefix: 'def add(a, b):\n    ', input_suffix: '\n    return c\n', n_predict: 12, temperature: 0 });
    out.infill = [infill.status, infill.json.content, infill.json.tokens_predicted];
    const tok = await post(base, '/tokenize', { model: 'm', content: PROMPT });
    out.tokenize = tok.json;
    out.detokenize = (await post(base, '/detokenize', { model: 'm', tokens: tok.json.tokens })).json;
    out.applyTemplate = (await post(base, '/apply-template', { model: 'm', messages: ask.messages })).json;
    const rank = await post(rankBase, '/v1/rerank', {
      model: 'rank',
      query: 'What is the capital of France?',
      documents: ['Paris is the capital of France.', 'Bananas are yellow.', 'The Eiffel tower is in Paris.'],
    });
    // Scores are floats of one computation: the same to 1e-5 (they drift by ~1e-7 between identical calls).
    out.rerank = (rank.json.results as { index: number; relevance_score: number }[]).map((x) => [x.index, Math.round(x.relevance_score * 1e5)]);
    return out;
  }

  it("through a host replica: every answer equals the bare llama-server's (text, usage, tokens, scores)", async () => {
    assert.deepEqual(await answers(hub.url), want);
    const st = await hub.status();
    assert.deepEqual(
      st.replicas
        .filter((r) => r.state === 'ready')
        .map((r) => [r.model, r.node])
        .sort(),
      [
        ['code', null],
        ['m', null],
        ['rank', null],
      ],
      'served on the hub',
    );
    const argv = st.replicas.find((r) => r.model === 'rank')!;
    assert.ok(argv.pid);
    const { readFileSync } = await import('node:fs');
    assert.ok(readFileSync(`/proc/${argv.pid}/cmdline`, 'utf8').split('\0').includes('--reranking'), "the reranker's replica runs with --reranking");
  });

  it("each dialect's token counts reach the request log: a Messages stream's input tokens come first, cache reads counted", async () => {
    const anthropic = new Anthropic({ baseURL: hub.url, apiKey: 'x', maxRetries: 0 });
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const ask = { model: 'm', max_tokens: 12, temperature: 0, messages: [{ role: 'user' as const, content: 'Count the tokens' }] };
    const prompt = (u: Anthropic.Usage): number => u.input_tokens + (u.cache_read_input_tokens ?? 0);
    const one = await anthropic.messages.create(ask);
    // Long enough (over 8 KiB of events) that its first event is not in the tail the proxy keeps.
    const streamed = await anthropic.messages.stream({ ...ask, max_tokens: 300 }).finalMessage();
    assert.equal(streamed.usage.output_tokens, 300);
    const resp = await openai.responses.create({ model: 'm', input: 'Count the tokens', max_output_tokens: 12, temperature: 0 });
    const recent = (await hub.status()).recent.slice(0, 3).reverse(); // newest first
    assert.deepEqual(
      recent.map((r) => [r.endpoint, r.status, r.prompt_tokens, r.completion_tokens]),
      [
        ['messages', 200, prompt(one.usage), one.usage.output_tokens],
        ['messages', 200, prompt(streamed.usage), streamed.usage.output_tokens],
        ['responses', 200, resp.usage!.input_tokens, resp.usage!.output_tokens],
      ],
    );
    assert.ok(recent.every((r) => r.prompt_tokens! > 0 && r.completion_tokens! > 0));
  });

  it("a model's own base URL (/model/NAME): llama.vscode's /infill with no model, Continue's llama.cpp /completion", async () => {
    // llama.vscode's request as it sends it: no "model", its own sampler chain.
    const fim = { input_prefix: 'def add(a, b):\n    ', input_suffix: '\n    return c\n', input_extra: [], n_predict: 16, samplers: ['top_k', 'top_p', 'infill'], top_k: 1, cache_prompt: true };
    const want = await post(direct.code!.baseUrl, '/infill', fim);
    const got = await post(hub.url, '/model/code/infill', fim);
    assert.equal(got.status, 200, JSON.stringify(got.json));
    assert.equal(got.json.content, want.json.content);
    assert.ok(typeof want.json.content === 'string' && want.json.content.length > 0);
    const bare = await post(hub.url, '/infill', fim);
    assert.equal(bare.status, 400, 'without the prefix a model must be named');
    // Continue's "llama.cpp" provider: /completion, no model; the path's model wins over a body's.
    const c = { prompt: PROMPT, n_predict: 12, temperature: 0, top_k: 1 };
    const wantC = await post(direct.m!.baseUrl, '/completion', c);
    const gotC = await post(hub.url, '/model/m/completion', { ...c, model: 'GPT-4' });
    assert.equal(gotC.status, 200, JSON.stringify(gotC.json));
    assert.equal(gotC.json.content, wantC.json.content);
    assert.equal((await post(hub.url, '/model/nope/completion', c)).status, 404);
  });

  it('through a node replica (the hub paused): the same answers', async () => {
    await pauseHubDevices(hub);
    assert.deepEqual(await answers(hub.url), want);
    assert.ok(
      (await hub.status()).replicas.filter((r) => r.state === 'ready').every((r) => r.node === 'n1'),
      'served on n1',
    );
  });

  it('failover before the first byte on the new routes: the node that holds the request dies, another node answers', async () => {
    n2 = await startNode(hub, { name: 'n2', cpuBudgetMb: 2400, env: ENV });
    const anthropic = new Anthropic({ baseURL: hub.url, apiKey: 'x', maxRetries: 0 });
    // No byte until the whole answer: a long non-streamed generation on n1's ready replica.
    // (temperature and top_k are sampling fields llama-server reads; this SDK's types no longer list them)
    const long = { model: 'm', max_tokens: 400, temperature: 0, top_k: 1, messages: [{ role: 'user' as const, content: 'Tell a long tale' }] };
    const req = anthropic.messages.create(long);
    await until(
      async () => (await hub.status()).replicas.find((r) => r.model === 'm' && r.node === 'n1')?.in_flight,
      (n) => n === 1,
    );
    await n1.kill9();
    const m = await req;
    assert.ok(m.content.length > 0 && m.usage.output_tokens > 0);
    assert.ok(
      (await hub.status()).replicas.some((r) => r.model === 'm' && r.node === 'n2' && r.state === 'ready'),
      'answered by n2',
    );
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const r = await openai.responses.create({ model: 'm', input: PROMPT, max_output_tokens: 24, temperature: 0 });
    assert.deepEqual(responseOf(r), want.responses);
  });

  it("each dialect's own error shape: an unknown model, a malformed body, the wrong kind of model", async () => {
    const anthropic = new Anthropic({ baseURL: hub.url, apiKey: 'x', maxRetries: 0 });
    const notFound = await anthropic.messages.create({ model: 'nope', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(notFound instanceof Anthropic.NotFoundError, String(notFound));
    assert.deepEqual((notFound.error as { type: string; error: { type: string } }).error.type, 'not_found_error');
    const malformed = await post(hub.url, '/v1/messages', { model: 'm', max_tokens: 8, messages: [] });
    assert.equal(malformed.status, 400);
    assert.deepEqual(Object.keys(malformed.json).sort(), ['error', 'type']);
    assert.equal((malformed.json.error as { type: string }).type, 'invalid_request_error');
    assert.match((malformed.json.error as { message: string }).message, /"messages" must be a non-empty array/);
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const noModel = await openai.responses.create({ model: 'nope', input: 'hi' }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(noModel instanceof OpenAI.NotFoundError);
    assert.equal((noModel.error as { code: string }).code, 'model_not_found');
    const rerankChat = await post(hub.url, '/v1/rerank', { model: 'm', query: 'q', documents: ['d'] });
    assert.deepEqual([rerankChat.status, (rerankChat.json.error as { code: string }).code], [400, 'model_not_reranker']);
    const chatRank = await post(hub.url, '/v1/messages', { model: 'rank', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(chatRank.status, 400);
    assert.match((chatRank.json.error as { message: string }).message, /is a reranker: use \/v1\/rerank/);
  });
});

describe('Anthropic clients on a hub that requires a key', { timeout: 120_000 }, () => {
  it("the key as x-api-key works; a missing key is a 401 in Anthropic's shape", async () => {
    const hub = await startHub({ env: { ...ENV, RELAY_API_KEY: 'sekrit' }, args: ['--cpu-budget-mb', '800'] });
    try {
      await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
      const ok = new Anthropic({ baseURL: hub.url, apiKey: 'sekrit', maxRetries: 0 }); // sends x-api-key
      const m = await ok.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] });
      assert.ok(m.usage.output_tokens > 0);
      const wrong = new Anthropic({ baseURL: hub.url, apiKey: 'guess', maxRetries: 0 });
      const err = await wrong.messages.create({ model: 'm', max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] }).then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err instanceof Anthropic.AuthenticationError, String(err));
      assert.equal((err.error as { error: { type: string } }).error.type, 'authentication_error');
    } finally {
      await hub.stop();
    }
  });
});
