import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { fullContextBytesPerToken } from '../../src/main/core/gguf/derive.js';
import { memoryLayout, memorySummary, type MemoryLayout } from '../../src/main/core/gguf/memory.js';
import { ModelRegistry } from '../../src/main/core/models/registry.js';
import { fitNeed } from '../../src/main/core/scheduler/decide/fit.js';
import { Store } from '../../src/main/core/store/store.js';
import { unitFixture } from '../fixtures/synthetic-vocab.js';

/**
 * The cache layout per architecture, as llama.cpp's loader defines it (src/models/<arch>.cpp, llama-hparams.cpp,
 * llama-model.cpp create_memory), from header numbers of real models. The generated fixtures' test
 * (test/integration/fit-arch.test.ts) holds the same derivation against llama-server's own buffers.
 */
const layout = (arch: string, header: Record<string, unknown>, vocab: number | null = 32000): MemoryLayout => {
  const m = memoryLayout(arch, (k) => header[k], vocab);
  assert.ok(m, `${arch}: a layout`);
  return m;
};
const which = (m: MemoryLayout, f: (l: MemoryLayout['layers'][number]) => boolean): number[] => m.layers.flatMap((l, i) => (f(l) ? [i] : []));
const MIB = 1024 * 1024;

describe('cache layout from the GGUF header (gguf/memory.ts)', () => {
  it('Gemma 3 4B: 5 of 34 layers keep the context, 29 slide over 1024 tokens — 2,734 MiB at 131k, as llama.cpp allocated', () => {
    const m = layout(
      'gemma3',
      {
        block_count: 34,
        embedding_length: 2560,
        'attention.head_count': 8,
        'attention.head_count_kv': 4,
        'attention.key_length': 256,
        'attention.value_length': 256,
        'attention.sliding_window': 1024,
      },
      262208,
    );
    assert.deepEqual(
      which(m, (l) => !l.swa),
      [5, 11, 17, 23, 29],
    );
    assert.equal(m.window, 1024);
    assert.equal(fullContextBytesPerToken(m), 5 * 4 * 512 * 2);
    const n = fitNeed({ requiredVramMb: 2400, sizeBytes: 0, kvBytesPerToken: fullContextBytesPerToken(m), memory: m }, { contextSize: 131072, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' });
    // Full layers: 131072 cells; sliding: pad256(1024 + 512) = 1536 cells. The old formula said 17,408 MiB.
    assert.equal(n.kvMb, 2734);
    assert.equal(n.kvWindowMb, 174);
    assert.deepEqual(memorySummary(m), { layers: 34, kv_layers: 34, sliding_layers: 29, recurrent_layers: 0, window: 1024, mla: false });
  });

  it('Gemma 3 without a window key, phi3 and llama with one: plain attention, every layer keeps every token', () => {
    const base = { block_count: 6, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': 2 };
    assert.equal(which(layout('gemma3', base), (l) => l.swa).length, 0);
    for (const arch of ['phi3', 'llama', 'someday-arch']) assert.equal(which(layout(arch, { ...base, 'attention.sliding_window': 128 }), (l) => l.swa).length, 0, arch);
  });

  it('the periodic patterns: gemma2 and gpt-oss every other layer, cohere2 3 of 4, llama4 chunks of 8192 on 3 of 4 (none at window 0)', () => {
    const h = { block_count: 8, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': 2 };
    assert.deepEqual(
      which(layout('gemma2', h), (l) => l.swa),
      [0, 2, 4, 6],
    );
    assert.equal(layout('gemma2', h).window, 4096); // gemma2's default window
    assert.deepEqual(
      which(layout('gpt-oss', { ...h, 'attention.sliding_window': 128 }), (l) => l.swa),
      [0, 2, 4, 6],
    );
    assert.deepEqual(
      which(layout('cohere2', { ...h, 'attention.sliding_window': 4096 }), (l) => !l.swa),
      [3, 7],
    );
    const l4 = layout('llama4', h);
    assert.deepEqual([l4.window, which(l4, (l) => !l.swa)], [8192, [3, 7]]);
    assert.equal(which(layout('llama4', { ...h, 'attention.sliding_window': 0 }), (l) => l.swa).length, 0);
    // An array pattern is ignored by archs that read a number (llama.cpp keeps its default).
    assert.deepEqual(
      which(layout('gemma2', { ...h, 'attention.sliding_window_pattern': [true, true, true, true, true, true, true, true] }), (l) => l.swa),
      [0, 2, 4, 6],
    );
  });

  it('MLA (DeepSeek V3 as converted now): a 576-element latent per token per layer and no V; older GGUFs a plain 128-head cache', () => {
    const v3 = layout('deepseek2', {
      block_count: 61,
      embedding_length: 7168,
      'attention.head_count': 128,
      'attention.head_count_kv': 1,
      'attention.key_length': 576,
      'attention.value_length': 512,
      'attention.key_length_mla': 192,
      'attention.value_length_mla': 128,
    });
    assert.ok(v3.layers.every((l) => l.k === 576 && l.v === 0));
    assert.equal(fullContextBytesPerToken(v3), 61 * 576 * 2);
    assert.equal(memorySummary(v3)?.mla, true);
    const old = layout('deepseek2', { block_count: 27, embedding_length: 2048, 'attention.head_count': 16, 'attention.head_count_kv': 16, 'attention.key_length': 192, 'attention.value_length': 128 });
    assert.ok(old.layers.every((l) => l.k === 16 * 192 && l.v === 16 * 128));
  });

  it('Qwen3-Next: one layer in four attends (12 of 48 keep KV, 7,032 MiB at 300,032 tokens), the others hold a fixed state', () => {
    const m = layout('qwen3next', {
      block_count: 48,
      embedding_length: 2048,
      'attention.head_count': 16,
      'attention.head_count_kv': 2,
      'attention.key_length': 256,
      'attention.value_length': 256,
      full_attention_interval: 4,
      'ssm.conv_kernel': 4,
      'ssm.inner_size': 4096,
      'ssm.state_size': 128,
      'ssm.group_count': 16,
    });
    assert.deepEqual(
      which(m, (l) => l.k > 0),
      [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47],
    );
    assert.equal((fullContextBytesPerToken(m) * 300032) / MIB, 7032);
    // (d_conv - 1)(d_inner + 2 n_group d_state) + d_state d_inner floats per sequence (llama-hparams.cpp n_embd_r/n_embd_s).
    assert.ok(which(m, (l) => l.state > 0).length === 36 && m.layers.every((l) => l.state === 0 || l.state === 3 * (4096 + 2 * 16 * 128) + 128 * 4096));
  });

  it('hybrids by head_count_kv = 0 (lfm2: a short-convolution state), nemotron_h (MLP layers hold nothing), mamba2 and rwkv6 all recurrent', () => {
    const lfm = layout('lfm2', { block_count: 4, embedding_length: 1024, 'attention.head_count': 16, 'attention.head_count_kv': [0, 0, 8, 0], 'shortconv.l_cache': 3 });
    assert.deepEqual([which(lfm, (l) => l.k > 0), which(lfm, (l) => l.state > 0)], [[2], [0, 1, 3]]);
    assert.equal(lfm.layers[0]!.state, 1024 * 2);
    const nem = layout('nemotron_h', {
      block_count: 4,
      embedding_length: 256,
      'attention.head_count': 8,
      'attention.head_count_kv': [0, 2, 0, 0],
      feed_forward_length: [0, 0, 1024, 0],
      'ssm.conv_kernel': 4,
      'ssm.inner_size': 512,
      'ssm.state_size': 64,
      'ssm.group_count': 8,
    });
    assert.deepEqual([which(nem, (l) => l.k > 0), which(nem, (l) => l.state > 0)], [[1], [0, 3]]);
    const mamba = layout('mamba2', {
      block_count: 3,
      embedding_length: 256,
      'attention.head_count': 0,
      'attention.head_count_kv': 0,
      'ssm.conv_kernel': 4,
      'ssm.inner_size': 512,
      'ssm.state_size': 128,
      'ssm.group_count': 1,
    });
    assert.ok(mamba.layers.every((l) => l.k === 0 && l.state === 3 * (512 + 2 * 128) + 128 * 512));
    const rwkv = layout('rwkv6', { block_count: 2, embedding_length: 256, 'attention.head_count': 0, 'wkv.head_size': 64 });
    assert.ok(rwkv.layers.every((l) => l.k === 0 && l.state === 2 * 256 + 256 * 64));
  });

  it('next-token-prediction layers: cached for deepseek2, not for qwen3next; gemma3n keeps KV for its first 20 layers only; encoders none', () => {
    const h = { block_count: 4, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': 2, nextn_predict_layers: 1 };
    assert.deepEqual(
      which(layout('deepseek2', h), (l) => l.k > 0),
      [0, 1, 2, 3],
    );
    assert.deepEqual(
      which(layout('qwen3next', { ...h, full_attention_interval: 1 }), (l) => l.k > 0),
      [0, 1, 2],
    );
    const g3n = layout('gemma3n', { block_count: 30, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': 2, 'attention.sliding_window': 512 });
    assert.equal(which(g3n, (l) => l.k > 0).at(-1), 19);
    assert.equal(fullContextBytesPerToken(layout('bert', { block_count: 12, embedding_length: 768, 'attention.head_count': 12 })), 0);
  });

  it('a header too thin or malformed gives no layout, never a wrong one', () => {
    assert.equal(
      memoryLayout('llama', () => undefined, null),
      null,
    );
    const per = { block_count: 4, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': [2, 2] };
    assert.equal(
      memoryLayout('llama', (k) => (per as Record<string, unknown>)[k], null),
      null,
    );
  });
});

describe('records registered before relay read the cache layout', () => {
  it('get it from their header at hub start, without a re-hash; a file that cannot be read is left as it was', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-layouts-'));
    try {
      const store = await Store.open(home);
      const registry = new ModelRegistry(store, pino({ level: 'silent' }));
      const { model } = await registry.add({ path: unitFixture('dense'), name: 'old' });
      const expected = model.memory;
      assert.ok(expected && expected.layers.length === 4);
      await store.update((d) => {
        const rec = d.models[0]!;
        delete rec.memory;
        rec.kv_bytes_per_token = 1; // what an older relay may have stored
        d.models.push({ ...rec, name: 'gone', path: join(home, 'gone.gguf') });
      });
      assert.equal(await registry.readLayouts(), 1);
      assert.deepEqual(registry.get('old')!.memory, expected);
      assert.equal(registry.get('old')!.kv_bytes_per_token, model.kv_bytes_per_token);
      assert.equal(registry.get('old')!.sha256, model.sha256);
      assert.equal(registry.get('gone')!.memory, undefined);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
});

describe('the rarer layouts', () => {
  const h = {
    block_count: 4,
    embedding_length: 256,
    'attention.head_count': 4,
    'attention.head_count_kv': 1,
    'attention.key_length': 576,
    'attention.value_length': 512,
    'attention.key_length_mla': 192,
    'attention.value_length_mla': 128,
  };
  it('DeepSeek V3.2 / GLM-5 sparse attention: an indexer key per token beside the latent, no cache for next-token layers', () => {
    const m = layout('deepseek32', { ...h, nextn_predict_layers: 1, 'attention.indexer.key_length': 128 });
    assert.deepEqual(
      m.layers.map((l) => l.k),
      [704, 704, 704, 0],
    );
  });
  it('MiniMax-01: lightning-attention layers hold head × key_length² floats; Kimi K3 is a hybrid; granite_swa and lfm2moe as llama.cpp reads them', () => {
    const mm = layout('minimax-01', { block_count: 8, embedding_length: 512, 'attention.head_count': 8, 'attention.head_count_kv': 8, 'attention.key_length': 64, 'attention.value_length': 64 });
    assert.deepEqual(
      which(mm, (l) => l.k > 0),
      [7],
    );
    assert.equal(mm.layers[0]!.state, 8 * 64 * 64);
    const k3 = layout('kimi-k3', { block_count: 2, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': [0, 2], 'kda.head_dim': 64, 'ssm.conv_kernel': 4 });
    assert.deepEqual([which(k3, (l) => l.state > 0), which(k3, (l) => l.k > 0)], [[0], [1]]);
    const g = layout('granite_swa', {
      block_count: 4,
      embedding_length: 256,
      'attention.head_count': 4,
      'attention.head_count_kv': 2,
      'attention.sliding_window': 512,
      'attention.sliding_window_pattern': [true, true, true, false],
    });
    assert.deepEqual(
      which(g, (l) => l.swa),
      [0, 1, 2],
    );
    const moe = layout('lfm2moe', { block_count: 2, embedding_length: 256, 'attention.head_count': 4, 'attention.head_count_kv': [0, 2], 'shortconv.l_cache': 3, 'attention.sliding_window': 512 });
    assert.equal(which(moe, (l) => l.swa).length, 0, 'lfm2moe never slides in llama.cpp');
  });
});
