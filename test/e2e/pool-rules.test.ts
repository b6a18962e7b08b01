import assert from 'node:assert/strict';
import { truncateSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';
import { addModel, startHub } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';
import { until, waitGone } from '../helpers/proc.js';

/**
 * Pool rules with real hub and node processes: a 503 costs nobody their model (a request the pool cannot place
 * stops no idle placement; one that fits once an idle placement is stopped stops that one and is served), and
 * a node whose placement of a model failed is skipped for that model during its backoff.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

describe('evictions only for a plan that succeeds', { timeout: 300_000 }, () => {
  it('too big for the pool: 503 and the idle node replica keeps its pid; fits once it goes: it goes, B is served', async () => {
    const hub = await startHub({ env: ENV }); // no device of its own: every placement is on the node
    const node = await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV });
    try {
      await addModel(hub, { path: fixture('dense'), name: 'a', required_vram_mb: 300 }); // needs 693 MB
      await addModel(hub, { path: fixture('dense'), name: 'b', required_vram_mb: 400 }); // needs 796 MB: not beside a
      await addModel(hub, { path: fixture('dense'), name: 'huge', required_vram_mb: 5000 }); // fits nowhere
      const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
      await c.completions.create({ model: 'a', prompt: 'hi', max_tokens: 2, ...GREEDY_EXTRA });
      const replicas = async () => (await hub.status()).replicas;
      const a = (await replicas()).find((r) => r.model === 'a' && r.state === 'ready')!;
      assert.ok(a.pid && a.pid > 0);

      const err = await c.completions.create({ model: 'huge', prompt: 'x', max_tokens: 2 }).catch((e: unknown) => e);
      assert.ok(err instanceof OpenAI.APIError && err.status === 503, String(err));
      assert.equal((err.error as { code: string }).code, 'model_unavailable');
      const after503 = (await replicas()).find((r) => r.model === 'a')!;
      assert.deepEqual([after503.state, after503.pid], ['ready', a.pid]);
      process.kill(a.pid, 0); // the node's llama-server for a is still running

      const b = await c.completions.create({ model: 'b', prompt: 'hi', max_tokens: 2, ...GREEDY_EXTRA });
      assert.equal(b.model, 'b');
      assert.ok(await waitGone(a.pid, 30_000), 'a was evicted to make room for b');
      assert.deepEqual(
        (await replicas()).filter((r) => r.state === 'ready').map((r) => r.model),
        ['b'],
      );
    } finally {
      await node.stop();
      await hub.stop();
    }
  });
});

describe('failure memory', { timeout: 300_000 }, () => {
  it('a node whose load of M fails: the request fails over to another node, and M skips it during its backoff; /status names it and why', async () => {
    const hub = await startHub({ env: ENV, args: ['--keep-alive-ms', '1500'] });
    // north has more room, so it is chosen first (and then again: it holds the file).
    const north = await startNode(hub, { name: 'north', cpuBudgetMb: 1200, env: ENV });
    const south = await startNode(hub, { name: 'south', cpuBudgetMb: 1000, env: ENV });
    try {
      const m = await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
      const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const ready = async () => (await hub.status()).replicas.filter((r) => r.state === 'ready');
      await c.completions.create({ model: 'm', prompt: 'hi', max_tokens: 2, ...GREEDY_EXTRA });
      assert.deepEqual(
        (await ready()).map((r) => r.node),
        ['north'],
      );
      const first = (await hub.status()).replicas[0]!;
      // The keep-alive stops it; until the node confirms, its room is still reserved (then south would win).
      assert.ok(await waitGone(first.pid!, 30_000), "the keep-alive stopped north's replica");
      await until(
        () => hub.status(),
        (st) => st.replicas.length === 0,
        30_000,
      );
      // north's cached copy is damaged on its disk: its next load of m fails.
      const copy = join(north.home, 'cache', 'models', `${m.sha256}.gguf`);
      truncateSync(copy, 4096);
      // The request is not lost: its load on north fails, and it is served by south.
      const served = await c.completions.create({ model: 'm', prompt: 'x', max_tokens: 2, ...GREEDY_EXTRA });
      assert.equal(served.model, 'm');
      assert.deepEqual(
        (await ready()).map((r) => r.node),
        ['south'],
      );
      const backoffs = (await hub.status()).backoffs;
      assert.deepEqual(
        backoffs.map((b) => [b.node, b.model, b.failures]),
        [['north', 'm', 1]],
      );
      assert.match(backoffs[0]!.reason, /^load failed: /);
      assert.ok(Date.parse(backoffs[0]!.until) - Date.now() > 20_000, 'skipped for about 30 s');
      const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
      try {
        const page = await browser.newPage();
        await page.goto(hub.url);
        const row = page.getByRole('table', { name: 'Backoffs' }).getByRole('row').filter({ hasText: 'north' });
        await row.waitFor();
        assert.match(await row.innerText(), /north\s+m\s+load failed: /);
      } finally {
        await browser.close();
      }
      // Once south's replica stopped (keep-alive), the next request goes to south again, although north holds
      // the file and has more room.
      await until(
        () => hub.status(),
        (st) => st.replicas.length === 0,
        30_000,
      );
      const ok = await c.completions.create({ model: 'm', prompt: 'hi', max_tokens: 2, ...GREEDY_EXTRA });
      assert.equal(ok.model, 'm');
      assert.deepEqual(
        (await ready()).map((r) => r.node),
        ['south'],
      );
    } finally {
      await south.stop();
      await north.stop();
      await hub.stop();
    }
  });
});
