import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { readModelInfo } from '../../src/main/core/gguf/index.js';
import type { FlashAttn, KvCacheType } from '../../src/main/core/llama/argv.js';
import { startLlamaServer, type RunningLlamaServer } from '../../src/main/core/llama/index.js';
import { fitNeed } from '../../src/main/core/scheduler/decide/fit.js';
import { ensureArchFixture, type ArchFixtureName } from '../fixtures/arch-fixtures.js';
import { llama } from '../helpers/llama.js';

/**
 * The cache derivation (gguf/memory.ts) against llama-server's own buffers: generated models of the layouts a plain
 * llama fixture lacks — sliding windows (gemma3), MLA (deepseek2), recurrent hybrids (lfm2, granitehybrid) — loaded
 * by the real llama-server the way relay starts it (--ctx-size ctx × slots, --parallel slots). This machine's CPU
 * build allocates the same caches a GPU build does; the buffers are printed to 0.01 MiB, the prediction must be that
 * close. Its compute buffer must fit in what the fit allows beside the weights and cache.
 */
interface Case {
  readonly fixture: ArchFixtureName;
  readonly ctx: number;
  readonly slots: number;
  readonly cacheType: KvCacheType;
  readonly flashAttn?: FlashAttn;
}

const CASES: readonly Case[] = [
  { fixture: 'swa', ctx: 4096, slots: 1, cacheType: 'f16' },
  { fixture: 'swa', ctx: 2048, slots: 2, cacheType: 'q8_0' },
  { fixture: 'swa', ctx: 4096, slots: 1, cacheType: 'f16', flashAttn: 'off' },
  { fixture: 'mla', ctx: 4096, slots: 1, cacheType: 'f16' },
  { fixture: 'mla', ctx: 2048, slots: 2, cacheType: 'f16', flashAttn: 'off' },
  { fixture: 'hybrid', ctx: 4096, slots: 1, cacheType: 'f16' },
  { fixture: 'hybridssm', ctx: 4096, slots: 1, cacheType: 'f16' },
  { fixture: 'hybridssm', ctx: 2048, slots: 2, cacheType: 'f16', flashAttn: 'off' },
];

const mib = (lines: readonly string[], re: RegExp): number[] => lines.flatMap((l) => [...l.matchAll(re)].map((m) => Number(m[1])));
const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

describe('the fit of sliding-window, MLA and hybrid models against llama-server (CPU)', { timeout: 300_000 }, () => {
  let server: RunningLlamaServer | null = null;
  after(async () => {
    await server?.child.terminate(5000);
  });

  for (const c of CASES) {
    it(`${c.fixture} (ctx ${c.ctx} × ${c.slots} slots, ${c.cacheType}, flash attention ${c.flashAttn ?? 'auto'}): KV, state and compute as llama-server allocates them`, async () => {
      const path = ensureArchFixture(c.fixture, { vocabDir: llama().vocabDir });
      const info = readModelInfo(path);
      assert.ok(info.memory, 'the header gives a layout');
      server = await startLlamaServer(llama(), { model: path, ctx: c.ctx, slots: c.slots, cacheType: c.cacheType, flashAttn: c.flashAttn, threads: 2 });
      const lines = server.child.output();
      await server.child.terminate(5000);
      server = null;

      const need = fitNeed(
        { requiredVramMb: null, sizeBytes: info.fileSize, kvBytesPerToken: info.kvBytesPerToken, memory: info.memory },
        { contextSize: c.ctx, replicaCtx: 0, parallelSlots: c.slots, kvCacheType: c.cacheType, flashAttn: c.flashAttn, autoFlashAttn: true },
      );
      const kv = mib(lines, /KV buffer size =\s+([\d.]+) MiB/g);
      // "llama_memory_recurrent: size = … R (f32): 0.01 MiB, S (f32): 0.19 MiB": the conv and SSM states.
      const state = sum(mib(lines, /[RS] \(f32\):\s+([\d.]+) MiB/g));
      const compute = mib(lines, /compute buffer size =\s+([\d.]+) MiB/g);
      assert.ok(kv.length > 0 && compute.length > 0, `llama-server printed its buffers:\n${lines.filter((l) => /buffer size|size =/.test(l)).join('\n')}`);

      const tolerance = 0.005 * (kv.length + 2);
      assert.ok(Math.abs(need.kvMb + need.blocksMb - sum(kv)) <= tolerance, `KV: predicted ${(need.kvMb + need.blocksMb).toFixed(4)} MiB, llama-server ${sum(kv)} (${kv.join(' + ')})`);
      assert.ok(Math.abs(need.stateMb - state) <= 0.015, `recurrent state: predicted ${need.stateMb.toFixed(4)} MiB, llama-server ${state}`);
      const window = info.memory.layers.some((l) => l.swa);
      assert.equal(need.kvWindowMb > 0, window, 'the sliding layers are counted at their window');
      // Beside the weights and cache, the fit allows the fixed overhead and the compute additions: llama-server's
      // compute buffers (the scores without flash attention grow with the context) fit in it.
      assert.ok(need.overheadMb - need.weightsMb * 0.03 + need.computeMb >= sum(compute), `compute ${sum(compute)} MiB`);
      if (c.flashAttn === 'off') assert.ok(need.computeMb > (c.ctx * 512 * 4) / 2 ** 20, 'without flash attention the scores are counted');
    });
  }
});
