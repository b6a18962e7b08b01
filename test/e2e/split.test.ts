import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { ensureSplitFixture, sha256File } from '../fixtures/models.js';
import { addModel, startHub } from '../helpers/hub.js';
import { directTexts, fixture, llama } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';
import { GREEDY } from '../helpers/openai.js';
import { until } from '../helpers/proc.js';

/**
 * A split GGUF (3 parts, written by the fixture writer in llama.cpp's gguf-split format) is one model: it loads
 * on the hub from its first part, and on a node after the hub pushes every part (each verified against its
 * registered sha256); at temperature 0 both say what a direct llama-server says for the unsplit file.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPTS = ['The river', 'Once upon a time'];

async function ask(hub: string, prompt: string): Promise<string> {
  const res = await fetch(`${hub}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'big', prompt, max_tokens: 24, ...GREEDY }) });
  const j = (await res.json()) as { choices?: { text: string }[]; error?: unknown };
  assert.equal(res.status, 200, JSON.stringify(j));
  return j.choices![0]!.text;
}

describe('split GGUFs', { timeout: 300_000 }, () => {
  it('load on the hub and, after a push of every part, on a node: text equal to the unsplit file', async () => {
    const whole = fixture('dense', 4);
    const first = ensureSplitFixture('dense', 3, { vocabDir: llama().vocabDir, seed: 4 });
    const paths = [1, 2, 3].map((i) => first.replace('-00001-of-', `-0000${i}-of-`));
    const oracle = await directTexts(whole, PROMPTS);

    const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '1000'] });
    const north = await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: ENV });
    try {
      const m = await addModel(hub, { path: first, name: 'big' });
      assert.deepEqual(
        m.parts!.map((p) => [p.path, p.sha256]),
        paths.map((p) => [p, sha256File(p)]),
        'every part registered with its own hash',
      );
      assert.equal(
        m.size,
        m.parts!.reduce((s, p) => s + p.size, 0),
        'the fit counts every part',
      );
      assert.ok(m.size >= statSync(whole).size, "the parts hold at least the unsplit file's bytes");

      // On the hub's own CPU budget first.
      const onHub: string[] = [];
      for (const p of PROMPTS) onHub.push(await ask(hub.url, p));
      assert.deepEqual(
        (await hub.status()).replicas.map((r) => [r.model, r.where]),
        [['big', 'host']],
      );
      assert.deepEqual(onHub, oracle, "the hub's replica of the split file says what the unsplit file says");

      // The hub paused: the next request goes to the node, which receives all three parts first.
      const paused = await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: true }) });
      assert.equal(paused.status, 200);
      await until(
        async () => (await hub.status()).replicas,
        (r) => r.length === 0,
        30_000,
      );
      const onNode: string[] = [];
      for (const p of PROMPTS) onNode.push(await ask(hub.url, p));
      assert.deepEqual(
        (await hub.status()).replicas.map((r) => [r.model, r.where, r.node]),
        [['big', 'node', 'north']],
      );
      assert.deepEqual(onNode, oracle, "the node's replica, loaded from the pushed parts, says the same");
      for (const p of m.parts!) {
        const copy = join(north.home, 'cache', 'models', `${p.sha256}.gguf`);
        assert.ok(existsSync(copy), `part ${p.path} is in the node's cache`);
        assert.equal(sha256File(copy), p.sha256, 'each pushed part hashes to what the hub registered');
      }

      // Removing the model evicts every part from the node.
      assert.equal((await hub.api('/api/models/big', { method: 'DELETE' })).status, 200);
      for (const p of m.parts!) assert.ok(!existsSync(join(north.home, 'cache', 'models', `${p.sha256}.gguf`)), 'evicted with the model');
    } finally {
      await north.stop();
      await hub.stop();
    }
  });
});
