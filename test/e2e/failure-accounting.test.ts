import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';

/**
 * Failures are counted where they belong, with a real hub, a node and llama-server: llama-server's own refusal
 * of a request reaches the client with its message under a stable code and starts nothing (before, a 5xx made
 * the hub fail over to new placements and pushes, and the client got a generic upstream_error); a `touch` of
 * the model file re-hashes it once and cuts no stream.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPT = 'The quick brown fox';

describe('failures counted where they belong', { timeout: 300_000 }, () => {
  let hub: HubProcess;
  let node: NodeProcess;
  let c: OpenAI;
  let path: string;
  const post = (path: string, body: unknown) => fetch(`${hub.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const placements = async () => (await hub.status()).replicas.filter((r) => r.state !== 'failed');

  before(async () => {
    // The model's own copy: the test touches it.
    path = join(mkdtempSync(join(tmpdir(), 'relay-touch-')), 'm.gguf');
    copyFileSync(fixture('dense'), path);
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] }); // room for one replica of m on the hub
    node = await startNode(hub, { name: 'n1', cpuBudgetMb: 800, env: ENV }); // and one on the node
    await addModel(hub, { path, name: 'm', required_vram_mb: 300 });
    c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
    const r = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA });
    assert.ok(r.choices[0]!.text.length > 0);
    assert.deepEqual(
      (await placements()).map((p) => [p.node, p.state]),
      [[null, 'ready']],
    );
  });
  after(async () => {
    await node?.stop();
    await hub?.stop();
  });

  const nothingStarted = async (): Promise<void> => {
    assert.deepEqual(
      (await placements()).map((p) => [p.node, p.state]),
      [[null, 'ready']],
      'the one placement, no other',
    );
    const st = await hub.status();
    assert.deepEqual(st.backoffs, [], 'nobody backed off');
    assert.deepEqual(st.pushes, [], 'nothing pushed to the node');
    assert.deepEqual((await node.local('/status')).cache, [], "the node's cache is empty");
  };

  it("a prompt over the context: llama-server's 400 reaches the client as context_length_exceeded, with its message; nothing starts", async () => {
    const res = await post('/v1/completions', { model: 'm', prompt: 'word '.repeat(700), max_tokens: 4 });
    assert.equal(res.status, 400);
    const j = (await res.json()) as { error: { code: string; message: string; details?: { n_ctx?: number } } };
    assert.equal(j.error.code, 'context_length_exceeded');
    assert.match(j.error.message, /exceeds the available context size \(512 tokens\)/);
    assert.equal(j.error.details?.n_ctx, 512);
    await nothingStarted();
  });

  it('an image for a text-only model: 400 model_not_vision naming the model, before anything is placed; nothing starts', async () => {
    for (const stream of [false, true]) {
      const res = await post('/v1/chat/completions', {
        model: 'm',
        stream,
        messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] }],
        max_tokens: 4,
      });
      assert.equal(res.status, 400);
      const j = (await res.json()) as { error: { code: string; message: string } };
      assert.equal(j.error.code, 'model_not_vision');
      assert.match(j.error.message, /"m" is a text-only model/);
      await nothingStarted();
    }
  });

  it('`touch` on the model file mid-stream: the stream completes, requests keep the same replica, one re-hash', async () => {
    const [want] = await directTexts(path, [PROMPT], 200);
    const pid = (await placements())[0]!.pid;
    const stream = await c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 200, stream: true, ...GREEDY_EXTRA });
    let text = '';
    let chunks = 0;
    const during: Promise<string>[] = [];
    for await (const ch of stream) {
      text += ch.choices[0]?.text ?? '';
      if (++chunks === 3) {
        const later = new Date(Date.now() + 5000);
        utimesSync(path, later, later); // what `touch`, a backup restore or `cp -p` does
        // Three requests while the file is being re-hashed: each waits for the one shared hash, then is served.
        for (let i = 0; i < 3; i++) during.push(c.completions.create({ model: 'm', prompt: PROMPT, max_tokens: 8, ...GREEDY_EXTRA }).then((r) => r.choices[0]!.text));
      }
    }
    assert.equal(text, want, 'the stream was not cut');
    assert.equal((await Promise.all(during)).length, 3);
    // (The waiting requests may have made the pool add a placement on the node: that is scale-out, not a restart.)
    const st = await hub.status();
    assert.ok(
      st.replicas.some((p) => p.node === null && p.pid === pid && p.state === 'ready'),
      "the hub's replica is the same process",
    );
    assert.ok(!st.replicas.some((p) => p.state === 'failed'));
    assert.ok(!hub.logs.some((l) => l.includes('stopping placement')), 'nothing was stopped');
    assert.equal(hub.logs.filter((l) => l.includes('re-hashing')).length, 1, 'hashed once for every request');
    assert.ok(hub.logs.some((l) => l.includes('the same bytes')));
    const models = (await hub.api<{ models: { name: string; file: string }[] }>('/api/models')).body.models;
    assert.equal(models.find((x) => x.name === 'm')?.file, 'ok', 'the record has the new modification time');
  });
});
