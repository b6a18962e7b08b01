import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { startLlamaServer } from '../../src/main/core/llama/index.js';
import { fixture, llama } from '../helpers/llama.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { waitGone } from '../helpers/proc.js';
import type { ReplicaStatus, V1ModelDto } from '../../src/shared/status.js';

/**
 * The hub as a household runs it: a separate `relay hub` process with its own data dir, an opted-in CPU
 * budget, the real llama-server behind it, and the official openai client in front.
 */
const CTX = 512;
const SLOTS = 2;
const ENV = { RELAY_CONTEXT_SIZE: String(CTX), RELAY_PARALLEL_SLOTS: String(SLOTS), RELAY_THREADS: '1' };

let hub: HubProcess;
let client: OpenAI;

before(async () => {
  hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'] });
  client = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  await addModel(hub, { path: fixture('dense'), name: 'dense' });
  await addModel(hub, { path: fixture('dense'), name: 'dense-embed', embedding: true });
  await addModel(hub, { path: fixture('moe'), name: 'moe' });
});
after(async () => {
  await hub?.stop();
});

async function chatText(model: string, content: string, max = 24): Promise<string> {
  const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content }], max_tokens: max, ...GREEDY_EXTRA });
  return r.choices[0]!.message.content ?? '';
}

describe('hub /v1 with the openai client', { timeout: 300_000 }, () => {
  it('lists the registered models, each with whether the pool can host it now', async () => {
    const list = await client.models.list();
    const ids = list.data.map((m) => m.id).sort();
    assert.deepEqual(ids, ['dense', 'dense-embed', 'moe']);
    for (const m of list.data) assert.equal((m as V1ModelDto).available, true);
  });

  it('chat without and with streaming gives the same text, and equals direct llama-server at temperature 0', async () => {
    const plain = await chatText('dense', 'Tell me about the sea.');
    const stream = await client.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 24, stream: true, ...GREEDY_EXTRA });
    let streamed = '';
    let chunks = 0;
    for await (const c of stream) {
      streamed += c.choices[0]?.delta?.content ?? '';
      chunks++;
    }
    assert.ok(chunks > 2, 'the answer arrived as a stream of chunks');
    assert.equal(streamed, plain);

    const direct = await startLlamaServer(llama(), { model: fixture('dense'), ctx: CTX, slots: SLOTS, cacheType: 'f16', threads: 1 });
    try {
      const d = new OpenAI({ baseURL: `${direct.baseUrl}/v1`, apiKey: 'x', maxRetries: 0 });
      const r = await d.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'Tell me about the sea.' }], max_tokens: 24, ...GREEDY_EXTRA });
      assert.equal(plain, r.choices[0]!.message.content);
      assert.ok(plain.length > 0);
      const c1 = await client.completions.create({ model: 'dense', prompt: 'Once upon a time', max_tokens: 24, ...GREEDY_EXTRA });
      const c2 = await d.completions.create({ model: 'x', prompt: 'Once upon a time', max_tokens: 24, ...GREEDY_EXTRA });
      assert.equal(c1.choices[0]!.text, c2.choices[0]!.text);
      assert.equal(c1.usage?.completion_tokens, 24);
    } finally {
      await direct.child.terminate(5000);
    }
  });

  it('serves a MoE model too', async () => {
    assert.ok((await chatText('moe', 'Hello there')).length > 0);
  });

  it('embeddings for a model registered as an embedding model; refused for a chat model', async () => {
    const e = await client.embeddings.create({ model: 'dense-embed', input: ['hello world', 'goodbye'] });
    assert.equal(e.data.length, 2);
    assert.equal(e.data[0]!.embedding.length, 128);
    assert.notDeepEqual(e.data[0]!.embedding, e.data[1]!.embedding);
    await assert.rejects(
      client.embeddings.create({ model: 'dense', input: 'x' }),
      (err: InstanceType<typeof OpenAI.APIError>) => err.status === 400 && (err.error as { code: string }).code === 'model_not_embedding',
    );
  });

  it('answers 4 concurrent clients', async () => {
    const answers = await Promise.all([0, 1, 2, 3].map((i) => chatText('dense', `Client ${i} says hi`, 16)));
    assert.equal(answers.length, 4);
    for (const a of answers) assert.ok(a.length > 0);
  });

  it('refuses bad requests with OpenAI-shaped 4xx errors and keeps serving', async () => {
    const post = (path: string, body: string, headers: Record<string, string> = {}) =>
      hub.api<{ error: { code: string; message: string; type: string } }>(path, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    const cases: [string, string, number, string][] = [
      ['/v1/chat/completions', '{"model": "dense", "messages": [', 400, 'invalid_json'],
      ['/v1/chat/completions', '[]', 400, 'invalid_request'],
      ['/v1/chat/completions', '{"model": "dense"}', 400, 'invalid_request'],
      ['/v1/chat/completions', '{"model": "dense", "messages": [{"role": "user", "content": "x"}], "max_tokens": -3}', 400, 'invalid_request'],
      ['/v1/chat/completions', '{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, 'model_not_found'],
      ['/v1/completions', JSON.stringify({ model: 'dense', prompt: 'x'.repeat(33 * 1024 * 1024) }), 413, 'payload_too_large'],
      ['/v1/nothing', '{}', 404, 'not_found'],
    ];
    for (const [path, body, status, code] of cases) {
      const r = await post(path, body);
      assert.equal(r.status, status, `${path} ${body.slice(0, 60)}`);
      assert.equal(r.body.error.code, code);
      assert.ok(r.body.error.message.length > 0 && r.body.error.type.length > 0);
    }
    assert.ok((await chatText('dense', 'still there?', 8)).length > 0);
  });

  it('/status shows devices, models with need, replicas with ctx, slots and kv_cache_type; /metrics counts', async () => {
    const s = await hub.status();
    assert.equal(s.kv_cache_type, 'f16');
    assert.deepEqual(
      s.devices.map((d) => [d.id, d.total_mb]),
      [['CPU', 2000]],
    );
    const r = s.replicas.find((x) => x.model === 'dense')!;
    assert.deepEqual([r.state, r.ctx, r.slots, r.kv_cache_type], ['ready', CTX, SLOTS, 'f16']);
    assert.deepEqual([s.shards, s.nodes], [[], []]);
    const metrics = await (await fetch(`${hub.url}/metrics`)).text();
    assert.match(metrics, /relay_requests_total\{endpoint="chat\/completions",status="200"\} \d+/);
    assert.match(metrics, /relay_tokens_total\{key="",kind="completion",model="dense"\} \d+/);
    assert.match(metrics, /relay_replicas\{state="ready"\} [1-9]/);
  });

  it('a replica killed with SIGKILL mid-stream: the client gets an error event, the next request restarts it', async () => {
    const stream = await client.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Write a long story.' }], max_tokens: 400, stream: true, ...GREEDY_EXTRA });
    let got = 0;
    let victim: ReplicaStatus | undefined;
    await assert.rejects(
      (async () => {
        for await (const c of stream) {
          if (c.choices[0]?.delta?.content) got++;
          if (got === 3 && !victim) {
            // The placement serving this stream (the model may have several): the one with a request in flight.
            victim = (await hub.status()).replicas.find((x) => x.model === 'dense' && x.state === 'ready' && x.in_flight > 0)!;
            process.kill(victim.pid!, 'SIGKILL');
          }
        }
      })(),
      (err: Error & { error?: { code?: string } }) => /replica/.test(err.message) || err.error?.code === 'replica_failed',
    );
    const killed = victim!;
    assert.ok(await waitGone(killed.pid!, 10_000));
    // The hub notices the exit when it reaps the child; poll its view (bounded).
    let failed = (await hub.status()).replicas.find((x) => x.id === killed.id);
    for (let i = 0; i < 100 && failed?.state !== 'failed'; i++) {
      await new Promise((r) => setTimeout(r, 50));
      failed = (await hub.status()).replicas.find((x) => x.id === killed.id);
    }
    assert.equal(failed?.state, 'failed');
    assert.match(failed.failure!.message, /SIGKILL/);
    assert.ok((await chatText('dense', 'are you back?', 8)).length > 0);
    const after = (await hub.status()).replicas.find((x) => x.model === 'dense' && x.state === 'ready')!;
    assert.notEqual(after.pid, killed.pid);
  });

  it("registry: adding the same file again is idempotent; a non-GGUF or truncated file is refused with the reader's code", async () => {
    const again = await hub.api<{ created: boolean; model: { sha256: string } }>('/api/models', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: fixture('dense'), name: 'dense' }),
    });
    assert.equal(again.status, 200);
    assert.equal(again.body.created, false);
    const { mkdtempSync, writeFileSync, openSync, readSync, closeSync } = await import('node:fs');
    const { join } = await import('node:path');
    const { tmpdir } = await import('node:os');
    const dir = mkdtempSync(join(tmpdir(), 'relay-bad-'));
    writeFileSync(join(dir, 'notes.gguf'), 'this is not a model');
    const head = Buffer.alloc(4096);
    const fd = openSync(fixture('dense'), 'r');
    readSync(fd, head, 0, head.length, 0);
    closeSync(fd);
    writeFileSync(join(dir, 'cut.gguf'), head);
    for (const [file, code] of [
      ['notes.gguf', 'gguf_bad_magic'],
      ['cut.gguf', 'gguf_truncated'],
    ] as const) {
      const r = await hub.api<{ error: { code: string; message: string } }>('/api/models', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: join(dir, file) }),
      });
      assert.equal(r.status, 422);
      assert.equal(r.body.error.code, code);
      assert.match(r.body.error.message, /byte offset \d+/);
    }
    const other = await hub.api<{ error: { code: string } }>('/api/models', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: fixture('moe'), name: 'dense' }),
    });
    assert.equal(other.status, 409);
    assert.equal(other.body.error.code, 'model_exists');
  });
});

describe('hub store survives a kill -9', { timeout: 120_000 }, () => {
  it('a hub killed and restarted keeps its registry', async () => {
    const h = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'] });
    const m = await addModel(h, { path: fixture('dense'), name: 'keep-me' });
    await h.kill9();
    JSON.parse(readFileSync(`${h.home}/relay.json`, 'utf8')); // whole JSON, not torn
    const h2 = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'], home: h.home });
    try {
      const list = await h2.api<{ models: { name: string; sha256: string }[] }>('/api/models');
      assert.deepEqual(
        list.body.models.map((x) => [x.name, x.sha256]),
        [['keep-me', m.sha256]],
      );
      const c = new OpenAI({ baseURL: `${h2.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const r = await c.completions.create({ model: 'keep-me', prompt: 'hi', max_tokens: 4, ...GREEDY_EXTRA });
      assert.equal(r.usage?.completion_tokens, 4);
    } finally {
      await h2.stop();
    }
  });
});
