import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { describe, it } from 'node:test';
import { promisify } from 'node:util';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { fixture } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';
import { argvOf, until, waitGone } from '../helpers/proc.js';

/**
 * A model's own settings with a real hub, a real node and llama-server: set at `relay models add`, they reach
 * the host replica's and the node replica's argv, /status and the fit; a 503 names them; `relay models set`
 * changes them and the next request runs a llama-server with the new ones.
 */
const run = promisify(execFile);
const relay = new URL('../../../bin/relay.js', import.meta.url).pathname;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };

const flag = (argv: string[], name: string): string | undefined => argv[argv.indexOf(name) + 1];

async function replicaOf(hub: HubProcess, model: string) {
  const reps = await until(
    async () => (await hub.status()).replicas.filter((r) => r.model === model && r.state === 'ready'),
    (r) => r.length > 0,
    30_000,
  );
  return reps[0]!;
}

describe('per-model settings', { timeout: 300_000 }, () => {
  it('add with --ctx/--slots/--kv: host and node replicas run with them, /status shows them; a 503 names them; set changes them', async () => {
    const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '900'] });
    const node = await startNode(hub, { name: 'north', cpuBudgetMb: 2000, env: ENV });
    const cli = (...args: string[]) => run(process.execPath, [relay, 'models', ...args, '--hub', hub.url]);
    const ask = (model: string) =>
      fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model, prompt: 'hi', max_tokens: 2 }) });
    try {
      await cli('add', fixture('dense'), '--name', 'long', '--ctx', '2048', '--slots', '2', '--kv', 'q8_0');
      // Too big for the hub's 900 MB: only the node holds it (its own settings travel in start-replica).
      await cli('add', fixture('dense'), '--name', 'long-node', '--required-vram-mb', '600', '--ctx', '1024', '--kv', 'q4_0', '--flash-attn', 'on');
      assert.match((await cli('ls')).stdout, /long-node .*\(own settings: ctx 1024, kv q4_0, flash-attn on\)/);

      assert.equal((await ask('long')).status, 200);
      const host = await replicaOf(hub, 'long');
      assert.deepEqual([host.node, host.ctx, host.slots, host.kv_cache_type], [null, 2048, 2, 'q8_0']);
      const ha = argvOf(host.pid!);
      assert.deepEqual([flag(ha, '--ctx-size'), flag(ha, '--parallel'), flag(ha, '--cache-type-k'), flag(ha, '--cache-type-v')], ['4096', '2', 'q8_0', 'q8_0']);

      assert.equal((await ask('long-node')).status, 200);
      const onNode = await replicaOf(hub, 'long-node');
      assert.deepEqual([onNode.node, onNode.ctx, onNode.slots, onNode.kv_cache_type], ['north', 1024, 1, 'q4_0']);
      const na = argvOf(onNode.pid!);
      assert.deepEqual([flag(na, '--ctx-size'), flag(na, '--cache-type-k'), flag(na, '--flash-attn')], ['1024', 'q4_0', 'on']);

      // More context than the model was trained for (dense: 2048): llama-server gives each slot 2048 whatever it is
      // told, so relay reserves, launches and reports 2048 — and says so.
      const capped = await cli('set', 'long', '--ctx', '1048576', '--slots', '4');
      assert.match(capped.stdout, /long: ctx 2048 × 4 slots/);
      assert.match(capped.stdout, /note: a context of 1048576 tokens was asked, but the model was trained for 2048: each slot gets 2048/);
      assert.ok(await waitGone(host.pid!, 30_000), 'the running replica stopped for the new settings');
      assert.equal((await ask('long')).status, 200);
      const atTraining = await replicaOf(hub, 'long');
      assert.deepEqual([atTraining.ctx, atTraining.slots, flag(argvOf(atTraining.pid!), '--ctx-size')], [2048, 4, '8192']);
      const shown = (await hub.status()).models.find((m) => m.name === 'long')!;
      assert.deepEqual([shown.need.ctx, shown.settings?.ctx], [2048, 1048576]);
      assert.match(shown.ctx_note ?? '', /trained for 2048/);
      assert.match((await cli('ls')).stdout, /note: a context of 1048576 tokens was asked/);
      // What llama-server allows: a prompt past 2048 tokens is refused there, naming 2048.
      const tooLong = await fetch(`${hub.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'long', prompt: 'sea '.repeat(2100), max_tokens: 2 }),
      });
      assert.equal(tooLong.status, 400);
      assert.match(JSON.stringify(await tooLong.json()), /2048/);

      // The fit uses the settings: a context no device can hold (a model trained for 32k, 64 slots) is a 503 that says
      // which settings it needed.
      await cli('add', fixture('longwide'), '--name', 'wide', '--ctx', '32768', '--slots', '64', '--kv', 'q8_0');
      const refused = await ask('wide');
      assert.equal(refused.status, 503);
      const why = ((await refused.json()) as { error: { message: string } }).error.message;
      assert.match(why, /ctx 32768 × 64 slots, q8_0 cache; the largest part: the KV cache at ctx 32768 × 64 slots \(q8_0\), 1\d{3} MB/);
      // /api/models shows every part of the need: the spec's weights, KV and overhead, the measured additions.
      type Need = Record<'weights_mb' | 'kv_mb' | 'kv_window_mb' | 'state_mb' | 'blocks_mb' | 'overhead_mb' | 'compute_mb' | 'projector_mb' | 'draft_mb', number>;
      const listed = (
        await hub.api<{ models: { name: string; need_mb: number; need: Need & { largest: string; flash_attn: boolean }; memory: { kv_layers: number }; ctx_note: string | null }[] }>('/api/models')
      ).body.models;
      const wide = listed.find((m) => m.name === 'wide')!;
      const parts = ['weights_mb', 'kv_mb', 'state_mb', 'blocks_mb', 'overhead_mb', 'compute_mb', 'projector_mb', 'draft_mb'] as const;
      const sum = parts.reduce((a, k) => a + wide.need[k], 0);
      assert.ok(sum >= wide.need_mb && sum - wide.need_mb <= parts.length, `parts ${sum} vs need ${wide.need_mb}`);
      assert.deepEqual([wide.need.flash_attn, wide.need.kv_window_mb, wide.need.state_mb, wide.memory.kv_layers, wide.ctx_note], [true, 0, 0, 2, null]);
      // q8_0's block scales are counted, and flash attention's f16 copy of one layer's K and V (32768 cells × 64
      // slots × 256 values × 2 bytes = 1024 MB).
      assert.deepEqual([wide.need.blocks_mb > 0, wide.need.compute_mb], [true, 1024]);
      assert.match(wide.need.largest, /the KV cache/);

      // Back to the pool's ctx and slots (the KV type stays the model's own).
      await cli('set', 'long', '--ctx', 'default', '--slots', 'default');
      assert.equal((await ask('long')).status, 200);
      const again = await replicaOf(hub, 'long');
      assert.deepEqual([again.ctx, again.slots, again.kv_cache_type], [512, 1, 'q8_0']);
      assert.equal(flag(argvOf(again.pid!), '--ctx-size'), '512');

      // A model's own answer length (--max-tokens): llama-server's --n-predict on the host and on the node; it bounds
      // an answer that asks for no length (the dense fixture never ends by itself), a request's own max_tokens wins.
      const chat = async (model: string, extra: Record<string, unknown> = {}) => {
        const r = await fetch(`${hub.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], temperature: 0, ...extra }),
        });
        assert.equal(r.status, 200);
        const j = (await r.json()) as { usage: { completion_tokens: number }; choices: { finish_reason: string }[] };
        return [j.usage.completion_tokens, j.choices[0]!.finish_reason];
      };
      assert.match((await cli('set', 'long', '--max-tokens', '7')).stdout, /"max_tokens":7/);
      await cli('set', 'long-node', '--max-tokens', '9');
      assert.match((await cli('ls')).stdout, /long-node .*\(own settings: ctx 1024, kv q4_0, flash-attn on, max-tokens 9\)/);
      assert.deepEqual(await chat('long'), [7, 'length']);
      assert.deepEqual(await chat('long', { max_tokens: 12 }), [12, 'length']);
      assert.equal(flag(argvOf((await replicaOf(hub, 'long')).pid!), '--n-predict'), '7');
      assert.deepEqual(await chat('long-node'), [9, 'length']);
      assert.equal(flag(argvOf((await replicaOf(hub, 'long-node')).pid!), '--n-predict'), '9');
      const bad = await cli('set', 'long', '--max-tokens', '0').catch((e: { code: number; stderr: string }) => e);
      assert.deepEqual([(bad as { code: number }).code, /max_tokens must be a whole number from 1/.test((bad as { stderr: string }).stderr)], [1, true]);
    } finally {
      await node.stop();
      await hub.stop();
    }
  });
});
