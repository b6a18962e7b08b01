import assert from 'node:assert/strict';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { chromium } from 'playwright-core';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { chatConversation, type ChatTurn } from '../helpers/openai.js';
import { startLlamaServer } from '../../src/main/core/llama/processes.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { waitGone, until } from '../helpers/proc.js';

/**
 * A pause never cuts an answer: a household of two nodes (the hub runs nothing itself), an answer streaming from
 * one of them, its owner's `relay pause` after a hundred tokens. The client's stream — each dialect through its own
 * SDK — goes on from the other node without an error, and at temperature 0 its text and usage equal the answer of a
 * placement that never stopped. The fixture (`dense`) speaks in sub-words and bytes, random ones: its tokens are
 * often not what tokenizing their text gives back, so only a continuation from the first node's own tokens (the
 * record of its stopped slot: exact.ts) can equal it. Requests skip the prompt cache, so a slot's earlier contents
 * cannot tip a random-weight model's greedy choice.
 */
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const GREEDY = { temperature: 0, top_k: 1, seed: 42, cache_prompt: false };
const TOKENS = 300;
/** The chunk after which the serving node is paused. */
const PAUSE_AT = 100;
const PROMPT = 'Tell me a long story about the sea.';

/** A household: a hub that runs nothing and two nodes, kitchen and attic, `wordy` and `dense` registered. */
async function household(): Promise<{ hub: HubProcess; nodes: NodeProcess[] }> {
  const hub = await startHub({ env: ENV });
  const nodes = [await startNode(hub, { name: 'kitchen', cpuBudgetMb: 1000, env: ENV }), await startNode(hub, { name: 'attic', cpuBudgetMb: 1000, env: ENV })];
  await addModel(hub, { path: fixture('wordy'), name: 'wordy' });
  await addModel(hub, { path: fixture('dense'), name: 'dense' });
  return { hub, nodes };
}

async function leave(hub: HubProcess | undefined, nodes: NodeProcess[] | undefined): Promise<void> {
  for (const n of nodes ?? []) await n.stop();
  await hub?.stop();
}

describe('an answer in flight moves when its node is paused', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let nodes: NodeProcess[];
  let openai: OpenAI;

  before(async () => {
    ({ hub, nodes } = await household());
    openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  after(() => leave(hub, nodes));

  /**
   * Reads `chunks` (text pieces as the SDK gives them) and pauses the node serving the answer after the fifth; resumes
   * it once the answer is done. The node's llama-server is gone within 30 s of the pause (its card is the owner's).
   */
  async function pausedMidway(chunks: AsyncIterable<string>): Promise<{ text: string; paused: string }> {
    let text = '';
    let n = 0;
    let paused: NodeProcess | null = null;
    let pid = 0;
    for await (const piece of chunks) {
      text += piece;
      if (piece === '' || ++n !== PAUSE_AT) continue;
      const rep = (await hub.status()).replicas.find((r) => r.state === 'ready' && r.model === 'dense')!;
      paused = nodes.find((x) => x.name === rep.node)!;
      pid = rep.pid!;
      await paused.local('/pause', 'POST');
    }
    assert.ok(paused, 'the answer was paused midway');
    assert.ok(await waitGone(pid, 30_000), "the paused node's llama-server exited");
    await paused.local('/resume', 'POST');
    await until(
      async () => (await hub.status()).nodes,
      (ns) => ns.every((x) => x.state === 'idle' || x.state === 'busy'),
    );
    return { text, paused: paused.name };
  }

  async function lastMove(): Promise<{ from: string; to: string | null; outcome: string; sent_tokens: number; endpoint: string; cached_tokens: number | null; exact?: boolean; detail?: string }> {
    const m = (await hub.status()).moves[0]!;
    console.log(
      `${m.endpoint}: moved ${m.from} → ${m.to} after ${m.sent_tokens} tokens; the client waited ${m.gap_ms} ms between two tokens; ${m.cached_tokens} of the continuation's prompt cached there`,
    );
    return m;
  }

  it('OpenAI chat: the stream completes from the other node, the same text and usage as an answer never paused', async () => {
    const body = { model: 'dense', messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: TOKENS, ...GREEDY };
    const want = await openai.chat.completions.create(body);
    const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | undefined;
    const ids = new Set<string>();
    const got = await pausedMidway(
      (async function* () {
        for await (const c of stream) {
          ids.add(c.id);
          usage = c.usage ?? usage;
          yield c.choices[0]?.delta?.content ?? '';
        }
      })(),
    );
    assert.equal(got.text, want.choices[0]!.message.content);
    assert.equal(ids.size, 1, 'one response id over both parts');
    assert.equal(usage?.completion_tokens, want.usage?.completion_tokens);
    assert.equal(usage?.prompt_tokens, want.usage?.prompt_tokens);
    const m = await lastMove();
    assert.equal(m.outcome, 'continued');
    assert.equal(m.from, got.paused);
    assert.notEqual(m.to, got.paused);
    assert.ok(m.sent_tokens >= PAUSE_AT);
    assert.equal(m.exact, true, 'it went on from the tokens the first node generated');
    const logged = (await hub.status()).recent.find((r) => r.endpoint === 'chat/completions' && r.moves === 1);
    assert.ok(logged, 'the request log marks the request as moved');
    assert.equal(logged.completion_tokens, want.usage?.completion_tokens);
  });

  it('OpenAI completions', async () => {
    const body = { model: 'dense', prompt: PROMPT, max_tokens: TOKENS, ...GREEDY };
    const want = await openai.completions.create(body);
    const stream = await openai.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let usage: OpenAI.CompletionUsage | undefined;
    const got = await pausedMidway(
      (async function* () {
        for await (const c of stream) {
          usage = c.usage ?? usage;
          yield c.choices[0]?.text ?? '';
        }
      })(),
    );
    assert.equal(got.text, want.choices[0]!.text);
    assert.equal(usage?.completion_tokens, want.usage?.completion_tokens);
    assert.equal(usage?.prompt_tokens, want.usage?.prompt_tokens);
    assert.equal((await lastMove()).endpoint, 'completions');
  });

  it('Anthropic Messages', async () => {
    const anthropic = new Anthropic({ baseURL: hub.url, apiKey: 'x', maxRetries: 0 });
    const body = { model: 'dense', max_tokens: TOKENS, messages: [{ role: 'user' as const, content: PROMPT }], temperature: 0, top_k: 1 };
    const extra = { cache_prompt: false, seed: 42 };
    const want = await anthropic.messages.create({ ...body, ...({ ...extra } as object) });
    const stream = anthropic.messages.stream({ ...body, ...({ ...extra } as object) });
    const got = await pausedMidway(
      (async function* () {
        for await (const ev of stream) if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') yield ev.delta.text;
      })(),
    );
    const final = await stream.finalMessage();
    const wantText = want.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
    assert.equal(got.text, wantText);
    assert.equal(final.content.length, 1, 'one text block over both parts');
    assert.equal(final.usage.output_tokens, want.usage.output_tokens);
    assert.equal((await lastMove()).endpoint, 'messages');
  });

  it('OpenAI Responses: one response and one message item over both parts', async () => {
    const body = { model: 'dense', input: PROMPT, max_output_tokens: TOKENS, temperature: 0, ...({ top_k: 1, seed: 42, cache_prompt: false } as object) };
    const want = await openai.responses.create(body);
    const items = new Set<string>();
    let created = '';
    let completed: OpenAI.Responses.Response | undefined;
    const got = await pausedMidway(
      (async function* () {
        for await (const ev of await openai.responses.create({ ...body, stream: true })) {
          if (ev.type === 'response.created') created = ev.response.id;
          if (ev.type === 'response.completed') completed = ev.response;
          if (ev.type === 'response.output_text.delta') {
            items.add(ev.item_id);
            yield ev.delta;
          }
        }
      })(),
    );
    assert.equal(got.text, want.output_text);
    assert.equal(items.size, 1);
    assert.equal(completed?.id, created);
    assert.equal(
      completed?.output_text ?? completed?.output.map((o) => (o.type === 'message' ? o.content.map((c) => (c.type === 'output_text' ? c.text : '')).join('') : '')).join(''),
      want.output_text,
    );
    assert.equal(completed?.usage?.output_tokens, want.usage?.output_tokens);
    assert.equal(completed?.usage?.input_tokens, want.usage?.input_tokens);
    assert.equal((await lastMove()).endpoint, 'responses');
  });

  it("llama-server's own /completion: the continuation carries the sent token ids", async () => {
    const body = { model: 'dense', prompt: PROMPT, n_predict: TOKENS, ...GREEDY };
    const post = (b: object) => fetch(`${hub.url}/completion`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(b) });
    const want = (await (await post(body)).json()) as { content: string; tokens_predicted: number; tokens_evaluated: number };
    const res = await post({ ...body, stream: true });
    let last: { tokens_predicted?: number; tokens_evaluated?: number } = {};
    const got = await pausedMidway(
      (async function* () {
        let buf = '';
        for await (const bytes of res.body!) {
          buf += Buffer.from(bytes).toString();
          const events = buf.split('\n\n');
          buf = events.pop()!;
          for (const e of events) {
            const j = JSON.parse(e.slice('data: '.length)) as { content: string; stop: boolean; tokens_predicted: number; tokens_evaluated: number };
            if (j.stop) last = j;
            yield j.content;
          }
        }
      })(),
    );
    assert.equal(got.text, want.content);
    assert.equal(last.tokens_predicted, want.tokens_predicted);
    assert.equal(last.tokens_evaluated, want.tokens_evaluated);
    assert.equal((await lastMove()).endpoint, 'completion');
  });

  it('Ollama chat', async () => {
    const ollama = new Ollama({ host: hub.url });
    const body = { model: 'dense', messages: [{ role: 'user', content: PROMPT }], options: { temperature: 0, top_k: 1, seed: 42, num_predict: TOKENS } };
    const want = await ollama.chat({ ...body, stream: false });
    const stream = await ollama.chat({ ...body, stream: true });
    let evalCount = 0;
    const got = await pausedMidway(
      (async function* () {
        for await (const c of stream) {
          if (c.done) evalCount = c.eval_count;
          yield c.message.content;
        }
      })(),
    );
    assert.equal(got.text, want.message.content);
    assert.equal(evalCount, want.eval_count);
  });

  it("Ollama generate (raw: llama-server's own completion underneath)", async () => {
    const ollama = new Ollama({ host: hub.url });
    const body = { model: 'dense', prompt: PROMPT, raw: true, options: { temperature: 0, top_k: 1, seed: 42, num_predict: TOKENS } };
    const want = await ollama.generate({ ...body, stream: false });
    let evalCount = 0;
    let promptCount = 0;
    const got = await pausedMidway(
      (async function* () {
        for await (const c of await ollama.generate({ ...body, stream: true })) {
          if (c.done) [evalCount, promptCount] = [c.eval_count, c.prompt_eval_count];
          yield c.response ?? '';
        }
      })(),
    );
    assert.equal(got.text, want.response);
    assert.equal(evalCount, want.eval_count);
    assert.equal(promptCount, want.prompt_eval_count);
    const metrics = await (await fetch(`${hub.url}/metrics`)).text();
    assert.match(metrics, /relay_moves_total\{model="dense",outcome="continued"\} 7/);
  });

  it('the dashboard lists the moves (from, to, tokens, the wait) and marks the moved requests', async () => {
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--no-first-run'] });
    try {
      const page = await browser.newPage();
      await page.goto(hub.url);
      const rows = page.locator('#moves tr');
      await rows.nth(6).waitFor();
      const texts = await rows.allInnerTexts();
      assert.equal(texts.length, 7);
      for (const t of texts) assert.match(t, /dense\s+(kitchen → attic|attic → kitchen)\s+\d+\s+(—|[\d.]+ MB)\s+\d+ ms\s+continued from its own tokens/);
      assert.equal(await page.locator('#recent tr', { hasText: 'moved' }).count(), 7);
    } finally {
      await browser.close();
    }
  });

  it('a request asking for log-probabilities goes on from its text (the chat route gives them), and /status says why', async () => {
    const body = { model: 'dense', messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: TOKENS, logprobs: true, ...GREEDY };
    const stream = await openai.chat.completions.create({ ...body, stream: true });
    let logprobs = 0;
    const got = await pausedMidway(
      (async function* () {
        for await (const c of stream) {
          logprobs += c.choices[0]?.logprobs?.content?.length ?? 0;
          yield c.choices[0]?.delta?.content ?? '';
        }
      })(),
    );
    const m = await lastMove();
    assert.deepEqual([m.outcome, m.exact, m.detail], ['continued', false, "it offers tools or asks for log-probabilities (llama-server's chat route parses those)"]);
    assert.ok(got.text.length > 0 && logprobs > m.sent_tokens, `${logprobs} log-probabilities over both parts, ${m.sent_tokens} before the move`);
  });
});

/**
 * Conversations between turns stay on their node (slot-carry.ts, docs/security.md): turns 1–3 on one node, its owner
 * pauses it, and the slot it saved as it stopped is kept in the hub's store. The next replica of the model on that
 * node reads it back and evaluates only the new tokens; a replica on another node never does — a node's KV is its
 * own word, which nothing checks short of evaluating it again, so it answers nothing that node did not serve — and
 * starts cold, the state left for its node. A damaged state means a cold start. Every answer equals one
 * llama-server's that never stopped.
 */
describe("a conversation's history stays on its node when that node is paused", { timeout: 300_000 }, () => {
  const SYSTEM = 'You are the household assistant. Answer briefly, in plain words, and say when you do not know. '.repeat(4);
  const QUESTIONS = ['what grows in the garden in May', 'and next to the tomatoes', 'how often do they need water', 'and in August', 'what about the roses', 'and the apple tree', 'and the hedge'];
  let hub: HubProcess;
  let nodes: NodeProcess[];
  let oracle: ChatTurn[];

  before(async () => {
    const direct = await startLlamaServer(llama(), { model: fixture('wordy'), ctx: 1024, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      const c = chatConversation(direct.baseUrl, SYSTEM, 'wordy');
      oracle = [];
      for (const q of QUESTIONS) oracle.push(await c.say(q));
    } finally {
      await direct.child.terminate(5000);
    }
    ({ hub, nodes } = await household());
  });
  after(() => leave(hub, nodes));

  const node = (name: string): NodeProcess => nodes.find((n) => n.name === name)!;
  /** Pause a node; resolves once the hub runs nothing there (and, with `keeps`, its slot is in the hub's store). */
  async function pause(name: string, keeps = false): Promise<void> {
    const before = kept();
    await node(name).local('/pause', 'POST');
    await until(
      async () => (await hub.status()).replicas,
      (rs) => !rs.some((r) => r.node === name),
    );
    if (keeps)
      await until(
        async () => kept(),
        (now) => now.length === 1 && !before.includes(now[0]!),
      );
  }
  const resume = async (name: string): Promise<void> => {
    await node(name).local('/resume', 'POST');
    await until(
      async () => (await hub.status()).nodes.find((x) => x.name === name)?.state,
      (st) => st === 'idle' || st === 'busy',
    );
  };
  const ranOn = async (): Promise<string | null> => (await hub.status()).replicas.find((r) => r.model === 'wordy')?.node ?? null;
  const kept = (): string[] => readdirSync(join(hub.home, 'slots')).filter((f) => f.endsWith('.bin'));

  it('on its own node it goes on warm; on another it starts cold and stays kept; a damaged one starts cold', async () => {
    const c = chatConversation(hub.url, SYSTEM, 'wordy');
    const turns: ChatTurn[] = [];
    await pause('attic');
    for (let t = 0; t < 3; t++) turns.push(await c.say(QUESTIONS[t]!));
    assert.equal(await ranOn(), 'kitchen');
    await pause('kitchen', true);
    await resume('kitchen');
    turns.push(await c.say(QUESTIONS[3]!)); // a new replica on kitchen: its own conversation read back
    console.log(`turn 4 on kitchen again: ${turns[3]!.cached} of ${turns[3]!.prompt} prompt tokens cached`);
    assert.ok(turns[3]!.cached >= turns[2]!.prompt, `turn 4: ${turns[3]!.cached} of ${turns[3]!.prompt} prompt tokens cached; turn 3's prompt was ${turns[2]!.prompt}`);
    assert.deepEqual(kept(), [], 'a restored state is removed');

    turns.push(await c.say(QUESTIONS[4]!));
    await pause('kitchen', true);
    await resume('attic');
    turns.push(await c.say(QUESTIONS[5]!)); // attic: kitchen's state is not read into it
    assert.equal(await ranOn(), 'attic');
    assert.ok(turns[5]!.cached <= 2, `another node's state is not used: ${turns[5]!.cached} cached`);
    assert.equal(kept().length, 1, "kitchen's state stays kept for kitchen");

    // attic's own state, damaged: its next replica there starts cold.
    await pause('attic', true);
    for (const f of kept()) writeFileSync(join(hub.home, 'slots', f), Buffer.alloc(4096, 7));
    await resume('attic');
    turns.push(await c.say(QUESTIONS[6]!));
    assert.ok(turns[6]!.cached <= 2, `a damaged state is not used: ${turns[6]!.cached} cached`);
    assert.ok(hub.logs.some((l) => l.includes('could not restore kept slots')));
    assert.deepEqual(
      turns.map((t) => t.text),
      oracle.map((t) => t.text),
    );
    await resume('kitchen');
  });
});

/**
 * The answer's own KV goes with it from the hub's own replica (slot-carry.ts): the hub paused under a streamed
 * answer saves the answer's slot as it stops its replica — the prompt and every token decoded so far —, and the
 * node's new replica reads it back before the continuation runs (its restore waits for the state on its way), or a
 * replica already running there reads it into its one slot. The continuation finds the prompt and the sent answer in
 * its cache and evaluates only what is new; the text is the answer that never stopped. (A node's state goes back to
 * that node only: the test above.)
 */
describe("a moved answer's KV goes with it from the hub's own replica", { timeout: 300_000 }, () => {
  let hub: HubProcess;
  let kitchen: NodeProcess;

  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    kitchen = await startNode(hub, { name: 'kitchen', cpuBudgetMb: 1000, env: ENV });
    await addModel(hub, { path: fixture('wordy'), name: 'wordy' });
  });
  after(async () => {
    await kitchen?.stop();
    await hub?.stop();
  });

  const hubPause = async (paused: boolean): Promise<void> => {
    const r: { status: number } = await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused }) });
    assert.equal(r.status, 200);
  };

  /** A streamed answer on the hub's replica, the hub paused after its 5th token; the move, once the answer is whole and equal to `want`. */
  async function movedAnswer(openai: OpenAI, body: OpenAI.ChatCompletionCreateParamsNonStreaming, want: OpenAI.ChatCompletion) {
    const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
    let text = '';
    let n = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const c of stream) {
      usage = c.usage ?? usage;
      const piece = c.choices[0]?.delta?.content ?? '';
      text += piece;
      if (piece === '' || ++n !== 5) continue;
      const rep = (await hub.status()).replicas.find((r) => r.state === 'ready' && r.model === 'wordy' && r.in_flight > 0)!;
      assert.equal(rep.node, null, "the answer streams from the hub's own replica");
      await hubPause(true);
    }
    assert.equal(text, want.choices[0]!.message.content);
    assert.equal(usage?.completion_tokens, want.usage?.completion_tokens);
    await hubPause(false);
    const m = (await hub.status()).moves[0]!;
    console.log(
      `moved ${m.from} → ${m.to} after ${m.sent_tokens} tokens: ${m.cached_tokens} of ${want.usage!.prompt_tokens} + ${m.sent_tokens} tokens found cached, ${m.state_bytes} bytes of KV carried; the client waited ${m.gap_ms} ms`,
    );
    assert.equal(m.outcome, 'continued');
    assert.equal(m.to, 'kitchen');
    assert.equal(m.exact, true, m.detail);
    assert.ok(m.cached_tokens! >= want.usage!.prompt_tokens + m.sent_tokens - 1, `the continuation found ${m.cached_tokens} tokens cached`);
    assert.ok(m.state_bytes > 0, 'the move says how much KV went with it');
    return m;
  }

  it("to a new replica on the node: the continuation's cached tokens are the prompt and the sent answer; the same text", async () => {
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const body = { model: 'wordy', messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: TOKENS, temperature: 0, ...({ top_k: 1, seed: 42 } as object) };
    await movedAnswer(openai, body, await openai.chat.completions.create(body));
    assert.ok(hub.logs.some((l) => l.includes('restored the slots kept from the last replica')));
  });

  it('to a replica already running on the node: its one slot reads the state in', async () => {
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const body = { model: 'wordy', messages: [{ role: 'user' as const, content: `${PROMPT} Again.` }], max_tokens: TOKENS, temperature: 0, ...({ top_k: 1, seed: 42 } as object) };
    // Two answers at once with one slot each: the model runs on the hub and the node.
    const busy = Promise.all([openai.chat.completions.create(body), openai.chat.completions.create(body)]);
    await until(
      async () => (await hub.status()).replicas.filter((r) => r.model === 'wordy' && r.state === 'ready').length,
      (n) => n === 2,
    );
    const [want] = await busy;
    const running = (await hub.status()).replicas.find((r) => r.model === 'wordy' && r.node === 'kitchen')!.id;
    await movedAnswer(openai, body, want);
    assert.ok(
      (await hub.status()).replicas.some((r) => r.id === running),
      'the continuation ran on the replica that was running before',
    );
  });
});

describe('a continuation llama-server refuses', { timeout: 300_000 }, () => {
  let hub: HubProcess | undefined;
  after(() => hub?.stop());

  it("ends the client's stream with llama-server's error; /status lists the move as ended, and why", async () => {
    // One hub serving from its CPU: the owner shrinks the model's context while an answer streams. The placement
    // stops for its new settings, and the answer so far (prompt and sent tokens) no longer fits the new one's.
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    await addModel(hub, { path: fixture('wordy'), name: 'wordy' });
    const prompt = `${PROMPT} `.repeat(40);
    const tokens = (await hub.api('/tokenize', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'wordy', content: prompt }) })).body as {
      tokens: number[];
    };
    assert.ok(tokens.tokens.length > 256 && tokens.tokens.length < 600, `${tokens.tokens.length} prompt tokens: more than the smallest context, less than the first`);
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const stream = await openai.completions.create({ model: 'wordy', prompt, max_tokens: 200, stream: true, ...GREEDY } as unknown as OpenAI.CompletionCreateParamsStreaming);
    let chunks = 0;
    let error: Error | null = null;
    try {
      for await (const _ of stream) {
        if (++chunks !== 5) continue;
        const r: { status: number } = await hub.api('/api/models/wordy', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ context_size: 256 }) });
        assert.equal(r.status, 200);
      }
    } catch (err) {
      error = err as Error;
    }
    assert.ok(error, 'the stream ended with an error');
    assert.match(error.message, /context/i, "llama-server's reason reaches the client");
    const m = (await hub.status()).moves[0]!;
    assert.equal(m.outcome, 'ended');
    assert.equal(m.to, null);
    assert.match(m.detail ?? '', /refused the continuation \(400\)/);
    assert.ok(m.sent_tokens >= 5, `${m.sent_tokens} tokens sent before the stop`);
    assert.match(m.why, /settings changed/);
  });
});
