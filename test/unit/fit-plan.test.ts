import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { fitNeed, contextPerSlot, KV_ROW_SCALE, KV_SCALE } from '../../src/main/core/scheduler/decide/fit.js';
import { describeNeed, freeAfterReservations, planHostReplica, shortfallMessage, type Reservation } from '../../src/main/core/scheduler/decide/plan.js';

const MIB = 1024 * 1024;
const settings = { contextSize: 4096, replicaCtx: 0, parallelSlots: 2, kvCacheType: 'f16' as const };

describe('fit formula (spec: "How much VRAM a replica needs")', () => {
  // weights 4000 MB, kv 131072 B/token (a 7B-class model), ctx 4096, 2 slots:
  // KV = 131072 × 4096 × 2 × scale / MiB = 1024 MB × scale
  const model = { requiredVramMb: 4000, sizeBytes: 1, kvBytesPerToken: 131072 };
  const table: [kv: 'f16' | 'q8_0' | 'q4_0', kvMb: number][] = [
    ['f16', 1024],
    ['q8_0', 512],
    ['q4_0', 286.72],
  ];
  for (const [kv, kvMb] of table) {
    it(`${kv}: KV ${kvMb} MB, overhead = 3% weights + 384 + 5% KV, need = sum`, () => {
      const n = fitNeed(model, { ...settings, kvCacheType: kv });
      assert.ok(Math.abs(n.kvMb - kvMb) < 1e-9);
      assert.ok(Math.abs(n.overheadMb - (4000 * 0.03 + 384 + kvMb * 0.05)) < 1e-9);
      // The measured addition: a quantized cache's block scales beyond kv_scale (q8_0 takes 34/64 of f16, not 0.5).
      assert.ok(Math.abs(n.blocksMb - 1024 * (KV_ROW_SCALE[kv] - KV_SCALE[kv])) < 1e-9);
      assert.ok(Math.abs(n.needMb - (4000 + kvMb + 4000 * 0.03 + 384 + kvMb * 0.05 + n.blocksMb)) < 1e-9);
      assert.equal(n.kvScale, KV_SCALE[kv]);
    });
  }

  it('weights fall back to the file size when no required_vram_mb is registered', () => {
    const n = fitNeed({ requiredVramMb: null, sizeBytes: 1000 * MIB, kvBytesPerToken: null }, settings);
    assert.equal(n.weightsMb, 1000);
    assert.equal(n.kvMb, 0); // no header estimate → KV term 0
    assert.equal(n.needMb, 1000 + 1000 * 0.03 + 384);
  });

  it('ctx = RELAY_CONTEXT_SIZE, or min(RELAY_REPLICA_CTX, RELAY_CONTEXT_SIZE) when RELAY_REPLICA_CTX > 0', () => {
    assert.equal(contextPerSlot({ contextSize: 8192, replicaCtx: 0 }), 8192);
    assert.equal(contextPerSlot({ contextSize: 8192, replicaCtx: 2048 }), 2048);
    assert.equal(contextPerSlot({ contextSize: 2048, replicaCtx: 8192 }), 2048);
    const n = fitNeed({ requiredVramMb: 100, sizeBytes: 1, kvBytesPerToken: 1024 }, { ...settings, contextSize: 8192, replicaCtx: 1024, parallelSlots: 3 });
    assert.equal(n.ctx, 1024);
    assert.equal(n.kvMb, (1024 * 1024 * 3) / MIB);
  });
});

describe('host placement plan', () => {
  const need = fitNeed({ requiredVramMb: 600, sizeBytes: 1, kvBytesPerToken: null }, settings); // 1002 MB
  const cpu = (reported: number) => ({ id: 'CPU', kind: 'cpu' as const, totalMb: 2000, reportedFreeMb: reported });
  const rep = (id: string, needMb: number, lastUsedAt: number, inFlight = 0, state: Reservation['state'] = 'ready', device = 'CPU'): Reservation => ({
    id,
    model: id,
    device,
    needMb,
    state,
    inFlight,
    lastUsedAt,
  });

  it('places on the device with the most free memory that fits', () => {
    const devs = [
      { id: 'CUDA0', kind: 'gpu' as const, totalMb: 6000, reportedFreeMb: 1100 },
      { id: 'CUDA1', kind: 'gpu' as const, totalMb: 12000, reportedFreeMb: 9000 },
    ];
    assert.deepEqual(planHostReplica(need, freeAfterReservations(devs, []), []), { kind: 'host', device: 'CUDA1', evict: [] });
  });

  it('a CPU budget subtracts every replica relay runs on it; a GPU only those still loading', () => {
    const reps = [rep('a', 500, 1), rep('b', 300, 2, 0, 'starting', 'CUDA0'), rep('c', 700, 3, 0, 'ready', 'CUDA0'), rep('d', 900, 1, 0, 'failed')];
    const free = freeAfterReservations([cpu(2000), { id: 'CUDA0', kind: 'gpu', totalMb: 8000, reportedFreeMb: 4000 }], reps);
    assert.deepEqual(
      free.map((d) => d.freeMb),
      [1500, 3700],
    );
  });

  it('evicts the fewest least-recently-used idle replicas to make room, never a busy one', () => {
    const reps = [rep('old', 400, 1), rep('busy', 500, 0, 1), rep('newer', 400, 5)];
    const plan = planHostReplica(need, freeAfterReservations([cpu(2000)], reps), reps); // free 700, need 1002
    assert.deepEqual(plan, { kind: 'host', device: 'CPU', evict: ['old'] });
    const plan2 = planHostReplica(fitNeed({ requiredVramMb: 900, sizeBytes: 1, kvBytesPerToken: null }, settings), freeAfterReservations([cpu(2000)], reps), reps);
    assert.deepEqual(plan2, { kind: 'host', device: 'CPU', evict: ['old', 'newer'] });
  });

  it('when nothing fits, the 503 message names need, its breakdown and free per device', () => {
    const reps = [rep('busy', 1500, 0, 2)];
    const plan = planHostReplica(need, freeAfterReservations([cpu(2000)], reps), reps);
    assert.equal(plan.kind, 'none');
    const msg = shortfallMessage('big', plan);
    assert.match(msg, /model "big" needs 1002 MB \(weights 600 MB \+ KV 0 MB \+ overhead 402 MB; ctx 4096 × 2 slots, f16 cache; the largest part: the weights, 600 MB\)/);
    assert.match(msg, /free: CPU 500 MB of 2000 MB/);
  });

  it('with no device at all, says the hub has no GPU and no CPU budget', () => {
    const plan = planHostReplica(need, [], []);
    assert.equal(plan.kind, 'none');
    assert.match(shortfallMessage('m', plan), /no GPU and no CPU budget \(start it with --cpu-budget-mb/);
  });
});

describe('the fit of a vision model', () => {
  it('adds the projector: its weights × 1.25 + 32 MB, named in the breakdown; nothing for a text model', () => {
    const s = { contextSize: 4096, replicaCtx: 0, parallelSlots: 2, kvCacheType: 'f16' as const };
    const text = fitNeed({ requiredVramMb: null, sizeBytes: 4000 * 2 ** 20, kvBytesPerToken: 131072 }, s);
    const seeing = fitNeed({ requiredVramMb: null, sizeBytes: 4000 * 2 ** 20, kvBytesPerToken: 131072, projectorBytes: 800 * 2 ** 20 }, s);
    assert.equal(text.projectorMb, 0);
    assert.equal(seeing.projectorMb, 800 * 1.25 + 32);
    assert.equal(seeing.needMb - text.needMb, 1032);
    assert.match(describeNeed('gemma3', seeing), /\+ projector 1032 MB;/);
    assert.doesNotMatch(describeNeed('m', text), /projector/);
  });
});

describe('the fit of a model with a draft (speculative decoding)', () => {
  it("adds the draft's weights, its KV at the target's context and cache type, 3 % + 5 % and 64 MB", () => {
    const s = { contextSize: 4096, replicaCtx: 0, parallelSlots: 2, kvCacheType: 'q8_0' as const };
    const plain = fitNeed({ requiredVramMb: null, sizeBytes: 8000 * MIB, kvBytesPerToken: 131072 }, s);
    // A 500 MB draft with 32 KiB of KV per token: KV = 32768 × 4096 × 2 × 34/64 (q8_0's blocks) / MiB = 136 MB.
    const drafted = fitNeed({ requiredVramMb: null, sizeBytes: 8000 * MIB, kvBytesPerToken: 131072, draft: { sizeBytes: 500 * MIB, kvBytesPerToken: 32768 } }, s);
    assert.equal(plain.draftMb, 0);
    assert.ok(Math.abs(drafted.draftMb - (500 + 136 + 500 * 0.03 + 136 * 0.05 + 64)) < 1e-9);
    assert.ok(Math.abs(drafted.needMb - plain.needMb - drafted.draftMb) < 1e-9);
    assert.match(describeNeed('qwen', drafted), /\+ draft 722 MB;/);
  });

  it("counts the draft's own logits: a 151,936-token vocabulary takes 297 MB per context at ubatch 512, not the 64 MB allowed", () => {
    const s = { contextSize: 4096, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' as const };
    const layer = { k: 256, v: 256, swa: false, state: 0 };
    const draftMemory = { layers: new Array(24).fill(layer), window: 0, heads: 14, vocab: 151936 };
    const base = { requiredVramMb: null, sizeBytes: 8000 * MIB, kvBytesPerToken: 131072 };
    const bare = fitNeed({ ...base, draft: { sizeBytes: 500 * MIB, kvBytesPerToken: 24 * 512 * 2 } }, s);
    const counted = fitNeed({ ...base, draft: { sizeBytes: 500 * MIB, kvBytesPerToken: 24 * 512 * 2, memory: draftMemory } }, s);
    const logits = (151936 * 512 * 4) / MIB; // 296.75
    assert.ok(Math.abs(counted.draftMb - bare.draftMb - logits) < 1e-9);
    // Without flash attention its scores and mask too: 4096 cells × 512 × (14 + 1) × 4 bytes = 120 MB.
    const noFa = fitNeed({ ...base, draft: { sizeBytes: 500 * MIB, kvBytesPerToken: 24 * 512 * 2, memory: draftMemory } }, { ...s, flashAttn: 'off' });
    assert.ok(Math.abs(noFa.draftMb - counted.draftMb - (4096 * 512 * 15 * 4) / MIB) < 1e-9);
  });
});
