import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { adminAllowed } from '../../src/main/core/hub/http/auth.js';
import { fixture } from '../helpers/llama.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { waitGone, until } from '../helpers/proc.js';
import type { V1ModelDto } from '../../src/shared/status.js';

const BASE_ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

async function withHub(opts: Parameters<typeof startHub>[0], fn: (h: HubProcess, c: OpenAI) => Promise<void>): Promise<void> {
  const h = await startHub(opts);
  try {
    await fn(h, new OpenAI({ baseURL: `${h.url}/v1`, apiKey: opts?.env?.RELAY_API_KEY ?? 'x', maxRetries: 0 }));
  } finally {
    await h.stop();
  }
}

function cmdline(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : argv[i + 1];
}

describe('hub lifecycle with real llama-server', { timeout: 600_000 }, () => {
  for (const kv of ['f16', 'q8_0', 'q4_0'] as const) {
    it(`RELAY_KV_CACHE_TYPE=${kv}: the spawned llama-server carries --cache-type-k/-v ${kv}${kv === 'f16' ? '' : ' and --flash-attn on'}`, async () => {
      await withHub({ env: { ...BASE_ENV, RELAY_KV_CACHE_TYPE: kv }, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
        await addModel(h, { path: fixture('dense'), name: 'dense' });
        const r = await c.completions.create({ model: 'dense', prompt: 'hi', max_tokens: 4, ...GREEDY_EXTRA });
        assert.equal(r.usage?.completion_tokens, 4);
        const s = await h.status();
        assert.equal(s.kv_cache_type, kv);
        const rep = s.replicas[0]!;
        assert.equal(rep.kv_cache_type, kv);
        const argv = cmdline(rep.pid!);
        assert.equal(flag(argv, '--cache-type-k'), kv);
        assert.equal(flag(argv, '--cache-type-v'), kv);
        assert.equal(flag(argv, '--flash-attn'), kv === 'f16' ? 'auto' : 'on');
        assert.equal(flag(argv, '--host'), '127.0.0.1');
        assert.equal(flag(argv, '--ctx-size'), '512');
        assert.equal(flag(argv, '--parallel'), '1');
      });
    });
  }

  it('a client aborting mid-stream frees the slot: the next request on a 1-slot replica is answered and the first stopped early', async () => {
    await withHub({ env: { ...BASE_ENV, RELAY_CONTEXT_SIZE: '4096' }, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      const ac = new AbortController();
      const stream = await c.chat.completions.create(
        { model: 'dense', messages: [{ role: 'user', content: 'Go on forever.' }], max_tokens: 3000, stream: true, ...GREEDY_EXTRA },
        { signal: ac.signal },
      );
      let n = 0;
      try {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta?.content && ++n === 5) ac.abort();
        }
      } catch {
        /* the openai client may end the iteration or throw on abort */
      }
      assert.equal(n, 5);
      const r = await c.completions.create({ model: 'dense', prompt: 'next', max_tokens: 8, ...GREEDY_EXTRA });
      assert.equal(r.usage?.completion_tokens, 8);
      // llama-server's own counter: had the aborted generation run on, it alone would be 3000 tokens.
      const port = (await h.status()).replicas[0]!.port;
      const m = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      const predicted = Number(/llamacpp:tokens_predicted_total\s+(\d+)/.exec(m)?.[1]);
      assert.ok(predicted < 3000, `tokens predicted in total: ${predicted}`);
      const metrics = await (await fetch(`${h.url}/metrics`)).text();
      assert.match(metrics, /relay_requests_total\{endpoint="chat\/completions",status="499"\} 1/);
    });
  });

  it("the hub's own pause mid-stream: the stream ends at once naming it, and the host replica exits on its SIGTERM", async () => {
    await withHub({ env: BASE_ENV, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      const stream = await c.chat.completions.create({ model: 'dense', messages: [{ role: 'user', content: 'Go on forever.' }], max_tokens: 3000, stream: true, ...GREEDY_EXTRA }, { maxRetries: 0 });
      let n = 0;
      const ended = await (async () => {
        try {
          for await (const chunk of stream) {
            if (chunk.choices[0]?.delta?.content && ++n === 5) {
              const r = await h.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
              assert.equal(r.status, 200);
            }
          }
          return 'done';
        } catch (err) {
          return (err as Error).message;
        }
      })();
      assert.match(ended, /stopped mid-response \(stopped: the hub's devices paused/);
      const stopped = await until(
        async () => h.logs.find((l) => l.includes('"host replica stopped"')),
        (l) => l !== undefined,
      );
      assert.doesNotMatch(stopped!, /SIGKILL/, 'llama-server exited on its SIGTERM once the hub closed its request');
    });
  });

  it('a model too large for the budget → 503 model_unavailable naming need and free per device', async () => {
    await withHub({ env: BASE_ENV, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
      await addModel(h, { path: fixture('large'), name: 'big', required_vram_mb: 5000 });
      const err = await c.chat.completions.create({ model: 'big', messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError);
      assert.equal(err.status, 503);
      const body = err.error as { code: string; message: string };
      assert.equal(body.code, 'model_unavailable');
      assert.match(body.message, /model "big" needs 5\d{3} MB \(weights 5000 MB/);
      assert.match(body.message, /free: CPU 1000 MB of 1000 MB/);
      const models = await c.models.list();
      const big = models.data.find((m) => m.id === 'big') as V1ModelDto;
      assert.equal(big.available, false);
      assert.match(big.unavailable_reason ?? '', /needs 5\d{3} MB/);
    });
  });

  it('a hub with no GPU and no CPU budget never degrades to CPU: 503 says so', async () => {
    await withHub({ env: BASE_ENV }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      const err = await c.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 503);
      assert.match((err.error as { message: string }).message, /no GPU and no CPU budget/);
    });
  });

  it('RELAY_API_KEY: /v1 needs the bearer key (401 otherwise), the right key works', async () => {
    await withHub({ env: { ...BASE_ENV, RELAY_API_KEY: 'sesame' }, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      for (const auth of [undefined, 'Bearer wrong', 'Basic sesame']) {
        const r = await h.api<{ error: { code: string } }>('/v1/models', { headers: auth ? { authorization: auth } : {} });
        assert.equal(r.status, 401);
        assert.equal(r.body.error.code, 'invalid_api_key');
      }
      const r = await c.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA });
      assert.equal(r.usage?.completion_tokens, 2);
    });
  });

  it('admin API answers loopback, and others only with the admin token (or the API key, read-only)', () => {
    const cfg = { adminToken: 'adm', apiKey: 'key' };
    assert.equal(adminAllowed('127.0.0.1', undefined, cfg, false), true);
    assert.equal(adminAllowed('::1', undefined, cfg, false), true);
    assert.equal(adminAllowed('::ffff:127.0.0.1', undefined, cfg, false), true);
    assert.equal(adminAllowed('192.168.1.20', undefined, cfg, false), false);
    assert.equal(adminAllowed('192.168.1.20', 'adm', cfg, false), true);
    assert.equal(adminAllowed('192.168.1.20', 'key', cfg, false), false);
    assert.equal(adminAllowed('192.168.1.20', 'key', cfg, true), true);
    assert.equal(adminAllowed('192.168.1.20', 'adm', { adminToken: undefined, apiKey: undefined }, false), false);
  });

  it('concurrent first requests that its slots can take share one load; an idle replica stops after the keep-alive', async () => {
    await withHub({ env: { ...BASE_ENV, RELAY_PARALLEL_SLOTS: '2' }, args: ['--cpu-budget-mb', '1000', '--keep-alive-ms', '1500'] }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      // Two requests for a 2-slot model: one load (a third would start a second placement: pool-scale tests).
      const rs = await Promise.all([0, 1].map(() => c.completions.create({ model: 'dense', prompt: 'x', max_tokens: 4, ...GREEDY_EXTRA })));
      assert.equal(rs.length, 2);
      const metrics = await (await fetch(`${h.url}/metrics`)).text();
      assert.match(metrics, /relay_loads_total\{model="dense"\} 1\n/);
      const pid = (await h.status()).replicas[0]!.pid!;
      const s = await until(
        () => h.status(),
        (x) => x.replicas.length === 0,
      );
      assert.deepEqual(s.replicas, []);
      assert.ok(await waitGone(pid, 10_000));
    });
  });

  it('the least recently used idle replica is evicted when another model needs the room', async () => {
    // Each fixture needs ~420 MB at ctx 512 × 1 slot; 700 MB holds one.
    await withHub({ env: BASE_ENV, args: ['--cpu-budget-mb', '700'] }, async (h, c) => {
      await addModel(h, { path: fixture('dense'), name: 'dense' });
      await addModel(h, { path: fixture('moe'), name: 'moe' });
      await c.completions.create({ model: 'dense', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA });
      const densePid = (await h.status()).replicas[0]!.pid!;
      await c.completions.create({ model: 'moe', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA });
      const s = await h.status();
      assert.deepEqual(
        s.replicas.map((r) => [r.model, r.state]),
        [['moe', 'ready']],
      );
      assert.ok(await waitGone(densePid, 10_000));
    });
  });

  it('a model file that changed on disk is re-hashed and never served under its old hash', async () => {
    await withHub({ env: BASE_ENV, args: ['--cpu-budget-mb', '1000'] }, async (h, c) => {
      const dir = mkdtempSync(join(tmpdir(), 'relay-change-'));
      const path = join(dir, 'model.gguf');
      copyFileSync(fixture('dense'), path);
      const first = await addModel(h, { path, name: 'm' });
      const a = await c.completions.create({ model: 'm', prompt: 'The sky', max_tokens: 12, ...GREEDY_EXTRA });
      const oldPid = (await h.status()).replicas[0]!.pid!;
      copyFileSync(fixture('dense', 2), path); // same shape, other weights
      const b = await c.completions.create({ model: 'm', prompt: 'The sky', max_tokens: 12, ...GREEDY_EXTRA });
      const s = await h.status();
      const list = await h.api<{ models: { sha256: string }[] }>('/api/models');
      assert.notEqual(list.body.models[0]!.sha256, first.sha256);
      assert.equal(s.replicas[0]!.sha256, list.body.models[0]!.sha256);
      assert.notEqual(s.replicas[0]!.pid, oldPid);
      assert.notEqual(b.choices[0]!.text, a.choices[0]!.text);
    });
  });
});
