import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { ensureProjector, IMAGE_TOKENS, testPng } from '../fixtures/vision.js';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';

/**
 * The vision fixtures against the real llama-server: the generated projector loads with --mmproj beside the dense
 * fixture and an image reaches the model (its prompt grows by exactly the image's tokens, the oracle the pool's
 * vision tests compare with); a projector is refused as a model of its own.
 */
const GREEDY = { temperature: 0, top_k: 1, seed: 42 };

async function chatUsage(base: string, content: unknown): Promise<{ text: string; prompt: number; status: number }> {
  const res = await fetch(`${base}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content }], max_tokens: 12, ...GREEDY }),
  });
  const j = (await res.json()) as { choices?: { message: { content: string } }[]; usage?: { prompt_tokens: number } };
  return { status: res.status, text: j.choices?.[0]?.message.content ?? '', prompt: j.usage?.prompt_tokens ?? 0 };
}

describe('vision fixtures', { timeout: 300_000 }, () => {
  const started: RunningLlamaServer[] = [];
  let hub: HubProcess | null = null;
  after(async () => {
    for (const s of started) await s.child.terminate(5000);
    await hub?.stop();
  });

  it('llama-server --mmproj loads the projector and an image adds exactly its tokens to the prompt', async () => {
    const srv = await startLlamaServer(llama(), { model: fixture('dense'), mmproj: ensureProjector(), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    started.push(srv);
    assert.ok(
      srv.child.output().some((l) => /loaded multimodal model/.test(l)),
      'llama-server says it loaded the projector',
    );
    const text = await chatUsage(srv.baseUrl, 'What is this?');
    const image = { type: 'image_url', image_url: { url: `data:image/png;base64,${testPng()}` } };
    const seen = await chatUsage(srv.baseUrl, [{ type: 'text', text: 'What is this?' }, image]);
    assert.equal(seen.status, 200);
    assert.equal(seen.prompt, text.prompt + IMAGE_TOKENS);
    assert.ok(seen.text.length > 0);
    // Deterministic at temperature 0, and another image gives another answer: the pixels reach the model.
    assert.equal((await chatUsage(srv.baseUrl, [{ type: 'text', text: 'What is this?' }, image])).text, seen.text);
    const other = { type: 'image_url', image_url: { url: `data:image/png;base64,${testPng(24, 7)}` } };
    assert.notEqual((await chatUsage(srv.baseUrl, [{ type: 'text', text: 'What is this?' }, other])).text, seen.text);
  });

  it('a projector registered as a model is refused with gguf_is_projector, and nothing is registered', async () => {
    hub = await startHub();
    const r = await hub.api<{ error: { code: string; message: string } }>('/api/models', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: ensureProjector(), name: 'eyes' }),
    });
    assert.equal(r.status, 422);
    assert.equal(r.body.error.code, 'gguf_is_projector');
    assert.match(r.body.error.message, /vision projector/);
    assert.deepEqual((await hub.api<{ models: unknown[] }>('/api/models')).body.models, []);
  });
});
