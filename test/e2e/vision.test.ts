import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { sha256File } from '../fixtures/models.js';
import { ensureProjector, IMAGE_TOKENS, testPng } from '../fixtures/vision.js';
import Anthropic from '@anthropic-ai/sdk';
import { Ollama } from 'ollama';
import { addModel, type HubProcess, pauseHubDevices, startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';
import { until } from '../helpers/proc.js';

/**
 * Vision: the generated projector against the real llama-server (an image grows the prompt by exactly its tokens,
 * the oracle), then a vision model registered with its projector and asked about an image through the hub from
 * OpenAI's, Anthropic's and Ollama's clients, each answer equal to the bare `llama-server --mmproj`'s at
 * temperature 0; the fit counts the projector; images to a text-only model and remote image URLs are refused.
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

/** Anthropic's Messages API asked about one image (its `source`) at temperature 0: the answer's text. */
async function anthropicAbout(hubUrl: string, source: Anthropic.ImageBlockParam['source']): Promise<string> {
  const anthropic = new Anthropic({ baseURL: hubUrl, apiKey: 'x', maxRetries: 0 });
  const ask = {
    model: 'eyes',
    max_tokens: 12,
    temperature: 0,
    top_k: 1,
    messages: [
      {
        role: 'user' as const,
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image', source },
        ] satisfies Anthropic.ContentBlockParam[],
      },
    ],
  };
  const m = await anthropic.messages.create(ask);
  return m.content.map((c) => (c.type === 'text' ? c.text : '')).join('');
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

  it('a vision model through the hub: the image reaches it from every client, as the bare server answers', async () => {
    const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
    const h = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2400'] });
    try {
      const res = await h.api<{ model: { name: string; mmproj?: { sha256: string; size: number }; need_mb: number; need: { projector_mb: number } } }>('/api/models', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: fixture('dense'), name: 'eyes', mmproj: ensureProjector() }),
      });
      assert.equal(res.status, 201, JSON.stringify(res.body));
      const text = await addModel(h, { path: fixture('dense'), name: 'm' });
      const eyes = res.body.model;
      assert.equal(eyes.mmproj?.size, statSync(ensureProjector()).size);
      assert.equal(eyes.mmproj?.sha256, sha256File(ensureProjector()));
      // The fit: the same model's need grows by the projector's weights × 1.25 + 32 MB.
      const projMb = (statSync(ensureProjector()).size / 2 ** 20) * 1.25 + 32;
      assert.equal(eyes.need.projector_mb, Math.ceil(projMb));
      assert.ok(Math.abs(eyes.need_mb - text.need_mb - projMb) <= 1, `${eyes.need_mb} vs ${text.need_mb} + ${projMb}`);

      const png = testPng();
      const ask = [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${png}` } },
      ];
      const want = await chatUsage(started[0]!.baseUrl, ask);
      const unnamed = await chatUsage(h.url, ask);
      // The hub's request names the model; the bare server ignores the field.
      const viaHub = await fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'eyes', messages: [{ role: 'user', content: ask }], max_tokens: 12, ...GREEDY }),
      });
      const j = (await viaHub.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
      assert.equal(unnamed.status, 400, 'a request to the hub must name its model');
      assert.equal(j.choices[0]!.message.content, want.text);
      assert.equal(j.usage.prompt_tokens, want.prompt);
      const pid = (await h.status()).replicas.find((r) => r.model === 'eyes')!.pid!;
      const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      assert.equal(argv[argv.indexOf('--mmproj') + 1], ensureProjector(), 'the replica runs with its projector');
      assert.ok(argv.includes('--no-mmproj-offload'), 'a CPU placement keeps its projector on the CPU');
      // llama-server answers a slot save 501 with --mmproj: a vision replica keeps no slots (no save is tried, no warning).
      assert.ok(!argv.includes('--slot-save-path'), 'no slot save path for a vision replica');

      // Anthropic's image block and Ollama's images: the same image, the same answer.
      assert.equal(await anthropicAbout(h.url, { type: 'base64', media_type: 'image/png', data: png }), want.text);
      const ollama = new Ollama({ host: h.url });
      const o = await ollama.chat({ model: 'eyes', messages: [{ role: 'user', content: 'What is this?', images: [png] }], options: { ...GREEDY, num_predict: 12 } });
      assert.equal(o.message.content, want.text);
      assert.equal(o.prompt_eval_count, want.prompt);
      const shown = await ollama.show({ model: 'eyes' });
      assert.ok(shown.capabilities.includes('vision'));
      assert.equal((shown as unknown as { projector_info: Record<string, unknown> }).projector_info['clip.projector_type'], 'mlp', "the projector's own header");
      // /status and /v1/models say it sees images; the text model does not.
      const st = await h.status();
      assert.equal(st.models.find((x) => x.name === 'eyes')!.mmproj?.sha256, eyes.mmproj.sha256);
      assert.equal(st.models.find((x) => x.name === 'm')!.mmproj, null);
      const listed = ((await (await fetch(`${h.url}/v1/models`)).json()) as { data: { id: string; input_modalities: string[] }[] }).data;
      assert.deepEqual(Object.fromEntries(listed.map((x) => [x.id, x.input_modalities])), { eyes: ['text', 'image'], m: ['text'] });
      assert.ok(!(await ollama.show({ model: 'm' })).capabilities.includes('vision'));

      // A text-only model and a remote image: refused with the reason, in each client's shape.
      const textOnly = await fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: ask }] }),
      });
      assert.equal(textOnly.status, 400);
      assert.equal(((await textOnly.json()) as { error: { code: string } }).error.code, 'model_not_vision');
      await assert.rejects(
        ollama.chat({ model: 'm', messages: [{ role: 'user', content: 'x', images: [png] }] }),
        (e: { status_code?: number; error?: string }) => e.status_code === 400 && /text-only/.test(e.error ?? ''),
      );
      const remote = await fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'eyes', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'http://192.168.1.1/admin.png' } }] }] }),
      });
      assert.equal(remote.status, 400);
      assert.equal(((await remote.json()) as { error: { code: string } }).error.code, 'image_url_not_allowed');
      // PATCH takes the projector away (the running replica stops: it ran with --mmproj) and gives it back.
      const patch = (mmproj: string | null) =>
        h.api<{ model: { mmproj?: unknown } }>('/api/models/eyes', { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ mmproj }) });
      assert.equal((await patch(null)).body.model.mmproj, undefined);
      assert.equal((await h.status()).replicas.filter((x) => x.model === 'eyes').length, 0, 'its replica stopped');
      const blind = await fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'eyes', messages: [{ role: 'user', content: ask }] }),
      });
      assert.equal(((await blind.json()) as { error: { code: string } }).error.code, 'model_not_vision');
      assert.ok((await patch(ensureProjector())).body.model.mmproj);
      // Ollama's generate takes images too.
      const g = await ollama.generate({ model: 'eyes', prompt: 'What is this?', images: [png], stream: false, options: { ...GREEDY, num_predict: 12 } });
      assert.equal(g.response, want.text);

      // On a node: the hub pushes model and projector (each verified by its hash on the node), the replica runs
      // with the cached projector, and the answer is the same.
      const node = await startNode(h, { name: 'n1', cpuBudgetMb: 2400, env: ENV });
      try {
        await pauseHubDevices(h);
        const onNode = await fetch(`${h.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'eyes', messages: [{ role: 'user', content: ask }], max_tokens: 12, ...GREEDY }),
        });
        const nj = (await onNode.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
        assert.equal(nj.choices[0]!.message.content, want.text);
        assert.equal(nj.usage.prompt_tokens, want.prompt);
        const rep = (await h.status()).replicas.find((r) => r.model === 'eyes')!;
        assert.equal(rep.node, 'n1');
        const nodeArgv = readFileSync(`/proc/${rep.pid}/cmdline`, 'utf8').split('\0');
        const cachedProjector = join(node.home, 'cache', 'models', `${eyes.mmproj.sha256}.gguf`);
        assert.equal(nodeArgv[nodeArgv.indexOf('--mmproj') + 1], cachedProjector, "the node's replica reads its cached projector");
        assert.equal(sha256File(cachedProjector), eyes.mmproj.sha256);
        const cache = async () => (((await node.local('/status')) as { cache?: { sha256: string }[] }).cache ?? []).map((c) => c.sha256).sort();
        assert.deepEqual(await cache(), [eyes.mmproj.sha256, sha256File(fixture('dense'))].sort());
        // Removing the vision model takes its projector from the node; the model file stays ("m" uses it).
        assert.equal((await h.api('/api/models/eyes', { method: 'DELETE' })).status, 200);
        await until(cache, (c) => !c.includes(eyes.mmproj!.sha256));
        assert.ok(!existsSync(cachedProjector));
      } finally {
        await node.stop();
      }

      // A model file given as a projector is refused.
      const wrong = await h.api<{ error: { code: string } }>('/api/models', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: fixture('dense'), name: 'bad', mmproj: fixture('dense') }),
      });
      assert.equal(wrong.status, 422);
      assert.equal(wrong.body.error.code, 'mmproj_not_a_projector');
    } finally {
      await h.stop();
    }
  });

  it('a vision model as a shard: the projector runs beside the head on the hub, its fit counted in the hub stage', async () => {
    const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
    // 800 MB of weights (registered) need 1241 MB with the projector: no device holds it; the hub's 700 take one
    // layer and the projector (622 MB), each node's 800 at most two layers.
    const h = await startHub({ env: ENV, args: ['--cpu-budget-mb', '700'] });
    const nodes = [await startNode(h, { name: 'north', cpuBudgetMb: 800, env: ENV }), await startNode(h, { name: 'south', cpuBudgetMb: 800, env: ENV })];
    try {
      const r = await h.api('/api/models', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ path: fixture('dense'), name: 'eyes', mmproj: ensureProjector(), required_vram_mb: 800 }),
      });
      assert.equal(r.status, 201, JSON.stringify(r.body));
      const ask = [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${testPng()}` } },
      ];
      const want = await chatUsage(started[0]!.baseUrl, ask);
      const res = await fetch(`${h.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'eyes', messages: [{ role: 'user', content: ask }], max_tokens: 12, ...GREEDY }),
      });
      const j = (await res.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
      assert.equal(res.status, 200, JSON.stringify(j));
      assert.equal(j.choices[0]!.message.content, want.text, "the shard's answer is one process's");
      assert.equal(j.usage.prompt_tokens, want.prompt);
      const [sh] = (await h.status()).shards;
      assert.ok(sh && sh.pid);
      const argv = readFileSync(`/proc/${sh.pid}/cmdline`, 'utf8').split('\0');
      assert.equal(argv[argv.indexOf('--mmproj') + 1], ensureProjector(), 'the head runs with the projector');
      const hubStage = sh.stages.find((st) => st.node === null)!;
      const projMb = (statSync(ensureProjector()).size / 2 ** 20) * 1.25 + 32;
      const layerMb = 800 / 4;
      assert.ok(Math.abs(hubStage.need_mb - ((hubStage.layers[1] - hubStage.layers[0]) * layerMb * 1.03 + 384 + projMb)) < 2, `hub stage ${hubStage.need_mb} MB`);
    } finally {
      for (const n of nodes) await n.stop();
      await h.stop();
    }
  });

  it('RELAY_FETCH_IMAGES=1: the hub fetches image links and sends them inline; a link that is no image is refused', async () => {
    const png = Buffer.from(testPng(), 'base64');
    const site = createServer((req, res) => {
      if (req.url === '/photo.png') res.writeHead(200, { 'content-type': 'image/png' }).end(png);
      else if (req.url === '/moved.png') res.writeHead(302, { location: '/photo.png' }).end();
      else if (req.url === '/router') res.writeHead(302, { location: `http://127.0.0.2:${(router.address() as AddressInfo).port}/admin.png` }).end();
      else if (req.url === '/page') res.writeHead(200, { 'content-type': 'text/html' }).end('<html></html>');
      else res.writeHead(404).end();
    });
    // A device of the home network (another local address): its "image" must never be fetched through a redirect.
    const router = createServer((_req, res) => res.writeHead(200, { 'content-type': 'image/png' }).end(png));
    await new Promise<void>((r) => router.listen(0, '127.0.0.2', () => r()));
    await new Promise<void>((r) => site.listen(0, '127.0.0.1', () => r()));
    const base = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    const h = await startHub({ env: { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_FETCH_IMAGES: '1' }, args: ['--cpu-budget-mb', '1200'] });
    try {
      await h.api('/api/models', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: fixture('dense'), name: 'eyes', mmproj: ensureProjector() }) });
      const want = await chatUsage(started[0]!.baseUrl, [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: `data:image/png;base64,${testPng()}` } },
      ]);
      const ask = (url: string) =>
        fetch(`${h.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'eyes',
            messages: [
              {
                role: 'user',
                content: [
                  { type: 'text', text: 'What is this?' },
                  { type: 'image_url', image_url: { url } },
                ],
              },
            ],
            max_tokens: 12,
            ...GREEDY,
          }),
        });
      const ok = await ask(`${base}/photo.png`);
      const j = (await ok.json()) as { choices: { message: { content: string } }[]; usage: { prompt_tokens: number } };
      assert.equal(ok.status, 200, JSON.stringify(j));
      assert.equal(j.choices[0]!.message.content, want.text, 'the fetched image is the inline one');
      assert.equal(j.usage.prompt_tokens, want.prompt);
      // Anthropic's url source too.
      assert.equal(await anthropicAbout(h.url, { type: 'url', url: `${base}/photo.png` }), want.text);
      // A redirect on the same site is followed.
      const moved = await ask(`${base}/moved.png`);
      assert.equal(moved.status, 200);
      assert.equal(((await moved.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, want.text);
      for (const [path, why] of [
        ['/missing.png', /answered 404/],
        ['/page', /text\/html, not an image/],
        ['/router', /redirects to 127\.0\.0\.2:\d+, an address of the local network/],
      ] as const) {
        const bad = await ask(`${base}${path}`);
        assert.equal(bad.status, 400);
        const e = ((await bad.json()) as { error: { code: string; message: string } }).error;
        assert.equal(e.code, 'image_fetch_failed');
        assert.match(e.message, why);
      }
    } finally {
      await h.stop();
      site.close();
      router.close();
    }
  });
});
