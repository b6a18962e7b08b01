import assert from 'node:assert/strict';
import { readModelInfo } from '../../src/main/core/gguf/index.js';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fitNeed } from '../../src/main/core/scheduler/decide/fit.js';
import { lavapipeEnv, llama, vulkanModule } from '../helpers/llama.js';

/**
 * scripts/gpu-check.sh is meant for an NVIDIA machine without Node; its dry run exercises every step here on
 * relay's cached build with the Vulkan module on lavapipe: the Python fixture writer, the Python port of the fit
 * formula (checked against fit.ts), the KV types, and the planner's GPU-hub-last invocation from plan.json
 * (checked against the planner) giving the single-device text.
 */
const repo = new URL('../../../', import.meta.url).pathname;

describe('scripts/gpu-check.sh --dry-run (lavapipe)', { timeout: 600_000 }, () => {
  it("plan.json is what relay's shard planner emits today", async () => {
    const { plans } = (await import(join(repo, 'scripts', 'gpu-check', 'plan.mjs'))) as { plans(): unknown };
    assert.deepEqual(JSON.parse(readFileSync(join(repo, 'scripts', 'gpu-check', 'plan.json'), 'utf8')), JSON.parse(JSON.stringify(plans())));
  });

  it("runs every step: fit table for f16/q8_0/q4_0 from fit.ts's formula, hub-last shard text equal to one device", () => {
    const out = mkdtempSync(join(tmpdir(), 'relay-gpu-check-'));
    const r = spawnSync('bash', [join(repo, 'scripts', 'gpu-check.sh'), '--dry-run'], {
      encoding: 'utf8',
      timeout: 540_000,
      env: { ...process.env, ...lavapipeEnv(), OUT: out, GPU_CHECK_WORK: join(out, 'work'), LLAMA_BIN: llama().binDir, GGML_BACKEND_PATH: vulkanModule() },
    });
    assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
    const summary = readFileSync(join(out, 'summary.md'), 'utf8');
    assert.match(summary, /Vulkan0: llvmpipe/);
    const fixture = JSON.parse(readFileSync(join(out, 'fixture.json'), 'utf8')) as { size: number; kv_bytes_per_token: number };
    for (const kv of ['f16', 'q8_0', 'q4_0'] as const) {
      const row = new RegExp(`^\\| ${kv} \\| (\\d+) \\| (\\d+) \\| ([\\d.]+) \\|`, 'm').exec(summary);
      assert.ok(row, `${kv} row in\n${summary}`);
      const memory = readModelInfo(join(out, 'work', 'big.gguf')).memory;
      const want = fitNeed(
        { requiredVramMb: null, sizeBytes: fixture.size, kvBytesPerToken: fixture.kv_bytes_per_token, memory },
        { contextSize: 512, replicaCtx: 0, parallelSlots: 1, kvCacheType: kv },
      );
      assert.equal(Number(row[1]), Math.round(want.needMb), `the script's prediction is fit.ts's for ${kv}`);
      assert.ok(Number(row[2]) > 0, `llama-server reported its buffers for ${kv}`);
    }
    assert.match(summary, /- shard \(--n-gpu-layers 5 --rpc 127\.0\.0\.1:\d+ --device RPC0,Vulkan0 --tensor-split 1,4\)/);
    assert.match(summary, /shard text == single-device text: yes/);
    assert.ok(readFileSync(join(out, 'single.txt'), 'utf8').trim().length > 0);
  });
});
