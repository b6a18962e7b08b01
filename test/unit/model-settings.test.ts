import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import { hubConfigFromEnv } from '../../src/main/core/config.js';
import { fitNeed } from '../../src/main/core/scheduler/decide/fit.js';
import { applySettings, contextCapNote, sameSettings, settingsFor } from '../../src/main/core/scheduler/decide/model-settings.js';

describe('per-model settings', () => {
  const pool = hubConfigFromEnv({ HOME: '/tmp', RELAY_CONTEXT_SIZE: '4096', RELAY_REPLICA_CTX: '2048', RELAY_PARALLEL_SLOTS: '2', RELAY_KV_CACHE_TYPE: 'f16' }, { port: 0 });

  it("a model without settings gets the pool's; its own override each one, and its ctx is not capped by RELAY_REPLICA_CTX", () => {
    assert.equal(settingsFor(pool, { settings: undefined }), pool);
    const own = settingsFor(pool, { settings: { ctx: 32768, slots: 1, kv_cache_type: 'q8_0', flash_attn: 'on' } });
    assert.deepEqual([own.contextSize, own.replicaCtx, own.parallelSlots, own.kvCacheType, own.flashAttn], [32768, 0, 1, 'q8_0', 'on']);
    const onlyKv = settingsFor(pool, { settings: { kv_cache_type: 'q4_0' } });
    assert.deepEqual([onlyKv.contextSize, onlyKv.replicaCtx, onlyKv.parallelSlots, onlyKv.kvCacheType], [4096, 2048, 2, 'q4_0']);
  });

  it("the fit follows the formula with the model's own ctx, slots and KV type", () => {
    const m = { requiredVramMb: 1000, sizeBytes: 0, kvBytesPerToken: 131072 };
    const n = fitNeed(m, settingsFor(pool, { settings: { ctx: 32768, slots: 1, kv_cache_type: 'q8_0' } }));
    assert.deepEqual([n.ctx, n.slots, n.kvCacheType], [32768, 1, 'q8_0']);
    assert.equal(n.kvMb, (131072 * 32768 * 1 * 0.5) / 1048576); // KV = bytes/token × ctx × slots × kv_scale
    const d = fitNeed(m, pool);
    assert.deepEqual([d.ctx, d.slots, d.kvMb], [2048, 2, (131072 * 2048 * 2 * 1.0) / 1048576]);
  });

  it('a slot never gets more than the GGUF was trained for (as llama-server caps it): the fit counts that, and a note says so', () => {
    const trained = (ctx: number | null, settings?: { ctx?: number }) => ({ settings, context_length: ctx });
    // The pool's 4096 (capped to 2048 by RELAY_REPLICA_CTX) fits a 2048 model; a model's own 32768 does not.
    assert.equal(settingsFor(pool, trained(2048)), pool);
    assert.equal(contextCapNote(pool, trained(2048)), null);
    const own = settingsFor(pool, trained(2048, { ctx: 32768 }));
    assert.deepEqual([own.contextSize, own.replicaCtx], [2048, 0]);
    assert.equal(fitNeed({ requiredVramMb: 1000, sizeBytes: 0, kvBytesPerToken: 1024 }, own).ctx, 2048);
    assert.equal(
      contextCapNote(pool, trained(2048, { ctx: 32768 })),
      "a context of 32768 tokens was asked, but the model was trained for 2048: each slot gets 2048 (llama-server's cap), and only that is reserved",
    );
    // Under the training context, or with no training context in the record (records from before it was read): as asked.
    assert.equal(settingsFor(pool, trained(65536, { ctx: 32768 })).contextSize, 32768);
    assert.equal(settingsFor(pool, trained(null, { ctx: 32768 })).contextSize, 32768);
    const noReplicaCap = hubConfigFromEnv({ HOME: '/tmp', RELAY_CONTEXT_SIZE: '8192' }, { port: 0 });
    assert.equal(settingsFor(noReplicaCap, trained(4096)).contextSize, 4096);
  });

  it('the API body: fields left out stay, null goes back to the pool default, bad values are coded errors', () => {
    let s = applySettings(undefined, { context_size: 8192, kv_cache_type: 'q4_0' });
    assert.deepEqual(s, { ctx: 8192, kv_cache_type: 'q4_0' });
    s = applySettings(s, { parallel_slots: 3, context_size: null, flash_attn: 'auto' });
    assert.deepEqual(s, { kv_cache_type: 'q4_0', slots: 3, flash_attn: 'auto' });
    s = applySettings(s, { max_tokens: 4096 });
    assert.deepEqual(s, { kv_cache_type: 'q4_0', slots: 3, flash_attn: 'auto', max_tokens: 4096 });
    assert.equal(sameSettings(s, { ...s, max_tokens: 512 }), false, 'a new cap restarts the placements');
    assert.deepEqual(applySettings(s, { max_tokens: null }), { kv_cache_type: 'q4_0', slots: 3, flash_attn: 'auto' });
    const bads = [{ context_size: 100 }, { context_size: 1.5 }, { parallel_slots: 0 }, { parallel_slots: '2' }, { kv_cache_type: 'q5_1' }, { flash_attn: true }];
    for (const bad of [...bads, { max_tokens: 0 }, { max_tokens: -5 }, { max_tokens: '100' }, { max_tokens: 2.5 }]) {
      assert.throws(
        () => applySettings(undefined, bad),
        (e: unknown) => isRelayError(e, 'INVALID_REQUEST'),
        JSON.stringify(bad),
      );
    }
  });
});

describe('per-model settings: the combinations llama-server refuses', () => {
  const pool = hubConfigFromEnv({ HOME: '/tmp', RELAY_FLASH_ATTN: 'off' }, { port: 0 });
  it("a quantized cache with flash attention off is refused; a pool-wide off does not reach a model's own quantized cache", () => {
    assert.throws(
      () => applySettings(undefined, { kv_cache_type: 'q8_0', flash_attn: 'off' }),
      (e: unknown) => isRelayError(e, 'INVALID_REQUEST'),
    );
    assert.throws(
      () => applySettings({ flash_attn: 'off' }, { kv_cache_type: 'q4_0' }),
      (e: unknown) => isRelayError(e, 'INVALID_REQUEST'),
    );
    assert.equal(settingsFor(pool, { settings: { kv_cache_type: 'q8_0' } }).flashAttn, undefined, 'unset: forced on for a quantized cache');
    assert.equal(settingsFor(pool, { settings: { ctx: 1024 } }).flashAttn, 'off', "an f16 model keeps the pool's choice");
  });
});
