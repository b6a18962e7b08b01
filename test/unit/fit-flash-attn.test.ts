import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeNeed } from '../../src/main/core/scheduler/decide/plan.js';
import { model, setup } from '../helpers/scheduler-doubles.js';

/**
 * Flash attention decides whether llama.cpp's compute buffer holds the attention scores (context × ubatch × heads).
 * relay passes `--flash-attn auto` for an f16 cache; llama-server logs what it resolved to. The fit counts it on
 * until a load says otherwise, then counts the scores for that model; an owner's `off` counts them from the start.
 */
describe('the fit and what flash attention resolved to', () => {
  const m = {
    ...model('g', 2000),
    context_length: 32768,
    kv_bytes_per_token: 4 * 1024,
    memory: { layers: new Array(4).fill({ k: 512, v: 512, swa: false, state: 0 }), window: 0, heads: 32, vocab: 32000 },
  };
  // ctx 8192, ubatch 512, 32 heads + the mask: 8192 × 512 × 33 × 4 bytes = 528 MiB of scores.
  const scoresMb = (8192 * 512 * 33 * 4) / 2 ** 20;

  it('auto counts flash attention on until a load logs "Flash Attention not supported": then the scores, and says so', async () => {
    const { scheduler, launcher } = setup({ hubMb: 100_000, models: [m], env: { RELAY_CONTEXT_SIZE: '8192' } });
    const before = scheduler.need(m);
    assert.equal(before.flashAttn, true);
    const lease = scheduler.acquire('g');
    (await launcher.nth(0)).ok([
      'CUDA0 compute buffer size = 612.00 MiB',
      'layer 0 is assigned to device CUDA0 but Flash Attention is assigned to device CPU',
      'Flash Attention not supported, set to disabled',
    ]);
    (await lease).release();
    const after = scheduler.need(m);
    assert.equal(after.flashAttn, false);
    assert.ok(Math.abs(after.computeMb - before.computeMb - scoresMb) < 1e-9);
    assert.match(describeNeed('g', after), /compute without flash attention/);
  });

  it('a load that failed after logging "Flash Attention not supported" (the scores did not fit) teaches it too', async () => {
    const { scheduler, launcher } = setup({ hubMb: 100_000, models: [m], env: { RELAY_CONTEXT_SIZE: '8192' } });
    const lease = scheduler.acquire('g').catch((e: unknown) => e);
    (await launcher.nth(0)).fail(undefined, { tail: 'resolve_fused_ops: Flash Attention not supported, set to disabled\nsched_reserve: failed to allocate CUDA0 buffer of size 553648128' });
    await lease;
    assert.equal(scheduler.need(m).flashAttn, false);
  });

  it('a load that logged "Flash Attention enabled" changes nothing; the owner’s "off" counts the scores from the start', async () => {
    const { scheduler, launcher } = setup({ hubMb: 100_000, models: [m], env: { RELAY_CONTEXT_SIZE: '8192' } });
    const lease = scheduler.acquire('g');
    (await launcher.nth(0)).ok(['Flash Attention enabled']);
    (await lease).release();
    assert.equal(scheduler.need(m).flashAttn, true);
    const off = setup({ hubMb: 100_000, models: [{ ...m, settings: { flash_attn: 'off' } }], env: { RELAY_CONTEXT_SIZE: '8192' } });
    const n = off.scheduler.need({ ...m, settings: { flash_attn: 'off' } });
    assert.equal(n.flashAttn, false);
    assert.ok(n.computeMb >= scoresMb);
  });
});
