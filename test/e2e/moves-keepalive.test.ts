import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { Ollama } from 'ollama';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * A moved answer whose continuation is silent for a while (issue #53): the other node reads the whole history again
 * (a long prompt on a CPU, ~4 s here) and llama-server writes its keep-alive, the SSE comment `:`, every second of
 * silence (`sse_ping_interval` 1 on the request; Ollama's API has no such field: the nodes' llama-servers take it
 * from LLAMA_ARG_SSE_PING_INTERVAL). A keep-alive must reach the client as one — an empty `data:` event instead
 * makes the official openai SDK throw mid-answer and Ollama's translation stop at "not JSON". Both SDKs read the
 * whole answer: what they had at the move, then the rest, to its last token. (Not compared with an answer that
 * never stopped: the other node evaluates this long history and the answer so far in one batch, and llama.cpp's
 * batched sums differ from one-token steps in the last bits — on this random-weight model a near-tie flips at a few
 * cut points. The exact-text oracle runs on `dense` in moves.test.ts, where every cut point holds.)
 */
const ENV = { RELAY_CONTEXT_SIZE: '8192', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', LLAMA_ARG_SSE_PING_INTERVAL: '1' };
const GREEDY = { temperature: 0, top_k: 1, seed: 42, cache_prompt: false };
/** ~6,800 tokens: ~4 s of reading on this CPU; the pinned llama-server writes its first keep-alive ~2 s into a silence (it looks at its results once a second), then one a second or two. */
const PROMPT = 'Tell me a long story about the sea and the ships. '.repeat(560);
const TOKENS = 40;
const PAUSE_AT = 8;

describe('a moved answer whose continuation is silent longer than the keep-alive interval', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let nodes: NodeProcess[];

  before(async () => {
    hub = await startHub({ env: ENV });
    nodes = [await startNode(hub, { name: 'kitchen', cpuBudgetMb: 2000, env: ENV }), await startNode(hub, { name: 'attic', cpuBudgetMb: 2000, env: ENV })];
    await addModel(hub, { path: fixture('longwide'), name: 'longwide' });
  });
  after(async () => {
    for (const n of nodes ?? []) await n.stop();
    await hub?.stop();
  });

  /** Reads `pieces`, pausing the serving node after PAUSE_AT of them; resumes it once the answer is whole. */
  async function pausedMidway(pieces: AsyncIterable<string>): Promise<{ text: string; atMove: string }> {
    let text = '';
    let atMove = '';
    let n = 0;
    let paused: NodeProcess | null = null;
    for await (const piece of pieces) {
      text += piece;
      if (piece === '' || ++n !== PAUSE_AT) continue;
      const rep = (await hub.status()).replicas.find((r) => r.state === 'ready' && r.model === 'longwide' && r.in_flight > 0)!;
      paused = nodes.find((x) => x.name === rep.node)!;
      atMove = text;
      await paused.local('/pause', 'POST');
    }
    assert.ok(paused, 'the answer was paused midway');
    await paused.local('/resume', 'POST');
    await until(
      async () => (await hub.status()).nodes,
      (ns) => ns.every((x) => x.state === 'idle' || x.state === 'busy'),
    );
    const m = (await hub.status()).moves[0]!;
    console.log(`moved ${m.from} → ${m.to} after ${m.sent_tokens} tokens, exact: ${m.exact}; the client waited ${m.gap_ms} ms`);
    assert.equal(m.outcome, 'continued');
    assert.equal(m.exact, true, m.detail);
    assert.ok(text.startsWith(atMove) && text.length > atMove.length, 'what the client had, then the rest');
    return { text, atMove };
  }

  it('the openai SDK reads it through: the keep-alives reach it as comments, the answer to its last token', async () => {
    // The client's own bytes, teed: how many keep-alives came after the move.
    let comments = 0;
    let moved = false;
    const teeing: typeof fetch = async (url, init) => {
      const res = await fetch(url, init);
      if (!res.body) return res;
      const [mine, sdk] = res.body.tee();
      void (async () => {
        let buf = '';
        for await (const b of mine) {
          buf += Buffer.from(b).toString();
          const events = buf.split('\n\n');
          buf = events.pop()!;
          for (const e of events) if (e === ':' && moved) comments++;
        }
      })();
      return new Response(sdk, { status: res.status, headers: res.headers });
    };
    const openai = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0, fetch: teeing });
    const body = { model: 'longwide', messages: [{ role: 'user' as const, content: PROMPT }], max_tokens: TOKENS, ...GREEDY, sse_ping_interval: 1 };
    const stream = await openai.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } } as OpenAI.ChatCompletionCreateParamsStreaming);
    let usage: OpenAI.CompletionUsage | undefined;
    let finish: string | null = null;
    await pausedMidway(
      (async function* () {
        let n = 0;
        for await (const c of stream) {
          usage = c.usage ?? usage;
          finish = c.choices[0]?.finish_reason ?? finish;
          const piece = c.choices[0]?.delta?.content ?? '';
          if (piece !== '' && ++n === PAUSE_AT) moved = true;
          yield piece;
        }
      })(),
    );
    assert.equal(finish, 'length');
    assert.equal(usage?.completion_tokens, TOKENS, 'to its last token');
    assert.ok(comments >= 1, `${comments} keep-alives reached the client while the continuation read its history`);
  });

  it('the Ollama SDK reads it through: no line that is not JSON, to its last line', async () => {
    const ollama = new Ollama({ host: hub.url });
    const body = { model: 'longwide', messages: [{ role: 'user', content: `${PROMPT} Again.` }], options: { temperature: 0, top_k: 1, seed: 42, num_predict: TOKENS } };
    const stream = await ollama.chat({ ...body, stream: true });
    const end: { last?: { done: boolean; eval_count?: number; done_reason?: string } } = {};
    await pausedMidway(
      (async function* () {
        for await (const c of stream) {
          if (c.done) end.last = c;
          yield c.message.content;
        }
      })(),
    );
    assert.deepEqual([end.last?.done, end.last?.done_reason, end.last?.eval_count], [true, 'length', TOKENS], 'to its last line');
  });
});
