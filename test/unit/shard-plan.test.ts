import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readGgufFile } from '../../src/main/core/gguf/index.js';
import { llamaServerArgv, type TensorOverride } from '../../src/main/core/llama/argv.js';
import { shardFlags } from '../../src/main/core/scheduler/decide/shard-flags.js';
import { hostStageLast, planShard, splitLayers, stageNeedMb, type ShardDevice, type ShardModel, type ShardPlan } from '../../src/main/core/scheduler/decide/shard.js';
import { hiddenBytes, hopMs, layerMs } from '../../src/main/core/scheduler/decide/speed.js';
import { unitFixture as fixture } from '../fixtures/synthetic-vocab.js';

const settings = { contextSize: 512, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' as const };
const dense: ShardModel = { name: 'm', blockCount: 40, weightsMb: 9000, kvBytesPerToken: 163840, isMoe: false };
const gpu = (node: string | null, device: string, freeMb: number, msPerLayer?: number, hopMs?: number): ShardDevice => ({
  node,
  device,
  kind: 'gpu',
  freeMb,
  totalMb: freeMb,
  ...(msPerLayer ? { msPerLayer } : {}),
  ...(hopMs ? { hopMs } : {}),
});
const nodesOf = (plan: ShardPlan): (string | null)[] => (plan.kind === 'shard' ? plan.stages.map((s) => s.node) : []);
const layersOf = (plan: ShardPlan, node: string | null): number => {
  const st = plan.kind === 'shard' ? plan.stages.find((x) => x.node === node) : undefined;
  return st ? st.layers[1] - st.layers[0] : 0;
};

describe('shard planner', () => {
  it('splits layers in proportion, every stage at least one, summing to n', () => {
    assert.deepEqual(splitLayers(40, [1, 3]), [10, 30]);
    assert.deepEqual(splitLayers(4, [1, 1, 1]), [2, 1, 1]);
    assert.deepEqual(splitLayers(3, [100, 0, 0]), [1, 1, 1]);
    assert.deepEqual(splitLayers(2, [1, 1, 1]), []);
    for (const shares of [
      [5, 7],
      [1, 2, 3],
      [0.1, 9.9, 5],
    ])
      assert.equal(
        splitLayers(37, shares).reduce((a, b) => a + b, 0),
        37,
      );
  });

  it("hostStageLast moves the hub's stage to the end and renumbers every range", () => {
    const st = hostStageLast([
      { node: null, layers: [0, 15] as const },
      { node: 'a', layers: [15, 40] as const },
    ]);
    assert.deepEqual(st, [
      { node: 'a', layers: [0, 25] },
      { node: null, layers: [25, 40] },
    ]);
  });

  it("GPU hub + one node (the spec's 1060 + 4070 SUPER shape): two stages, hub last with the output, split by free VRAM", () => {
    const plan = planShard([gpu(null, 'CUDA0', 5500), gpu('node', 'CUDA0', 11000)], dense, settings);
    assert.equal(plan.kind, 'shard');
    if (plan.kind !== 'shard') return;
    assert.deepEqual(
      plan.stages.map((s) => [s.node, s.layers, s.output]),
      [
        ['node', [0, 27], false],
        [null, [27, 40], true],
      ],
    );
    for (const s of plan.stages) assert.ok(s.needMb <= s.freeMb);
    assert.ok(Math.abs(plan.stages[1]!.needMb - stageNeedMb(dense, [27, 40], settings, 'hub')) < 1e-9);
  });

  it('with nothing measured, uses the fewest stages that fit, preferring the nodes with most free memory', () => {
    const devices = [gpu(null, 'CUDA0', 4000), gpu('a', 'CUDA0', 6000), gpu('b', 'CUDA0', 8000), gpu('c', 'CUDA0', 3000)];
    const two = planShard(devices, dense, settings); // 9 GB fits on b + the hub
    assert.deepEqual(two.kind === 'shard' && two.stages.map((s) => s.node), ['b', null]);
    const plan = planShard(devices, { ...dense, weightsMb: 14000 }, settings); // 14 GB needs a third
    assert.equal(plan.kind, 'shard');
    if (plan.kind !== 'shard') return;
    assert.deepEqual(
      plan.stages.map((s) => s.node),
      ['b', 'a', null],
    );
    const faster = planShard([gpu(null, 'CUDA0', 4000), gpu('a', 'CUDA0', 6000, 0.3), gpu('b', 'CUDA0', 8000)], { ...dense, weightsMb: 5000 }, settings);
    assert.equal(faster.kind === 'shard' && faster.stages[0]!.node, 'a');
  });

  it('a node lending two GPUs can hold two stages, one per device, each pinned in start-rpc', () => {
    const plan = planShard([gpu(null, 'CUDA0', 3000), gpu('twin', 'CUDA0', 4000), gpu('twin', 'CUDA1', 4000)], dense, settings);
    if (plan.kind !== 'shard') return assert.fail(JSON.stringify(plan));
    assert.deepEqual(
      plan.stages.map((st) => [st.node, st.device]),
      [
        ['twin', 'CUDA0'],
        ['twin', 'CUDA1'],
        [null, 'CUDA0'],
      ],
    );
  });

  it('says none when everything together is too small, or there is no node', () => {
    assert.equal(planShard([gpu(null, 'CUDA0', 1000), gpu('a', 'CUDA0', 1000)], dense, settings).kind, 'none');
    assert.deepEqual(planShard([gpu(null, 'CUDA0', 99999)], dense, settings), { kind: 'none', reason: 'no connected node to shard with' });
  });

  it('a CPU-budget hub keeps the first layers (llama.cpp runs CPU layers first) and still holds the output', () => {
    const plan = planShard(
      [
        { node: null, device: 'CPU', kind: 'cpu', freeMb: 900, totalMb: 900 },
        { node: 'a', device: 'CPU', kind: 'cpu', freeMb: 700, totalMb: 700 },
        { node: 'b', device: 'CPU', kind: 'cpu', freeMb: 700, totalMb: 700 },
      ],
      { name: 'x', blockCount: 4, weightsMb: 1000, kvBytesPerToken: 1024, isMoe: false },
      settings,
    );
    assert.equal(plan.kind, 'shard');
    if (plan.kind !== 'shard') return;
    assert.deepEqual(
      plan.stages.map((s) => [s.node, s.layers, s.output]),
      [
        [null, [0, 2], true],
        ['a', [2, 3], false],
        ['b', [3, 4], false],
      ],
    );
    const f = shardFlags(plan, { name: 'x', blockCount: 4, weightsMb: 1000, kvBytesPerToken: 1024, isMoe: false }, ['127.0.0.1:1', '127.0.0.1:2']);
    // -ngl counts the output as a layer: remote layers + 1, with the output weight pinned back to the CPU.
    assert.deepEqual(
      [f.rpc, f.devices, f.gpuLayers, f.tensorSplit, f.overrides, f.fit],
      [['127.0.0.1:1', '127.0.0.1:2'], ['RPC0', 'RPC1'], 3, [1, 2], [{ pattern: 'output\\.weight', bufferType: 'CPU' }], 'off'],
    );
    const exp = shardFlags(plan, { name: 'x', blockCount: 4, weightsMb: 1000, kvBytesPerToken: 1024, isMoe: false }, ['127.0.0.1:1', '127.0.0.1:2'], { outputRemote: true });
    assert.deepEqual(exp.overrides, []); // the experiment: the output stays on the last remote stage
  });

  it('GPU hub flags: devices in plan order with the hub GPU last, -ngl all + output, split by stage (output counted on the last)', () => {
    const plan = planShard([gpu(null, 'CUDA0', 5500), gpu('node', 'CUDA0', 11000)], dense, settings);
    if (plan.kind !== 'shard') return assert.fail();
    const f = shardFlags(plan, dense, ['127.0.0.1:9']);
    assert.deepEqual([f.rpc, f.devices, f.gpuLayers, f.tensorSplit, f.overrides], [['127.0.0.1:9'], ['RPC0', 'CUDA0'], 41, [27, 14], []]);
    const exp = shardFlags(plan, dense, ['127.0.0.1:9'], { outputRemote: true });
    assert.deepEqual(exp.overrides, [{ pattern: 'output\\.weight', bufferType: 'RPC0[127.0.0.1:9]' }]);
  });

  it("MoE needs: remote stages hold only their layers' experts; the hub holds attention, KV and embeddings of every layer", () => {
    const moe: ShardModel = { name: 'q', blockCount: 4, weightsMb: 1000, kvBytesPerToken: 4096, isMoe: true, expertWeightsMb: 800 };
    const ctx = settings.contextSize; // contextPerSlot with RELAY_REPLICA_CTX unset
    const kvAll = (4096 * ctx * settings.parallelSlots) / (1024 * 1024);
    // remote, 3 layers: 600 MB of experts, no KV.
    assert.ok(Math.abs(stageNeedMb(moe, [0, 3], settings, 'remote') - (600 * 1.03 + 384)) < 1e-9);
    // hub, 1 layer: 200 MB non-expert + 200 MB experts, and the KV of all 4 layers.
    assert.ok(Math.abs(stageNeedMb(moe, [3, 4], settings, 'hub') - (400 * 1.03 + 384 + kvAll * 1.05)) < 1e-9);
    // Unknown experts (an old record): proportional shares, as for a dense model.
    assert.equal(stageNeedMb({ ...moe, expertWeightsMb: null }, [3, 4], settings, 'hub'), stageNeedMb({ ...moe, isMoe: false }, [3, 4], settings));
    // A hub whose proportional share would fit, but whose real share does not, gets no MoE shard with it.
    const gpuHub = [gpu(null, 'CUDA0', 700), gpu('a', 'CUDA0', 2000)];
    const tight = planShard(gpuHub, moe, settings);
    assert.equal(planShard(gpuHub, { ...moe, expertWeightsMb: null }, settings).kind, 'shard');
    assert.equal(tight.kind, 'none');
    const roomy = planShard([gpu(null, 'CUDA0', 1100), gpu('a', 'CUDA0', 2000)], moe, settings);
    if (roomy.kind !== 'shard') return assert.fail(JSON.stringify(roomy));
    assert.deepEqual(
      roomy.stages.map((st) => [st.node, st.layers, st.output]),
      [
        ['a', [0, 3], false],
        [null, [3, 4], true],
      ],
    );
  });

  it("MoE: one override per remote stage naming only its layers' expert tensors; unresolvable stages left out; dense unchanged", () => {
    const moe = { name: 'q', blockCount: 6, weightsMb: 900, kvBytesPerToken: 1024, isMoe: true };
    const cpu = (node: string | null): ShardDevice => ({ node, device: 'CPU', kind: 'cpu', freeMb: node ? 700 : 900, totalMb: 900 });
    const plan = planShard([cpu(null), cpu('a'), cpu('b')], moe, settings);
    if (plan.kind !== 'shard') return assert.fail();
    const f = shardFlags(plan, moe, ['127.0.0.1:1', '127.0.0.1:2']);
    assert.deepEqual(f.overrides, [
      { pattern: 'blk\\.(2|3)\\.ffn_(gate|up|down)_exps\\.weight', bufferType: 'RPC0[127.0.0.1:1]' },
      { pattern: 'blk\\.(4|5)\\.ffn_(gate|up|down)_exps\\.weight', bufferType: 'RPC0[127.0.0.1:2]' },
    ]);
    assert.deepEqual([f.gpuLayers, f.fit, f.devices], [0, 'off', ['RPC0', 'RPC1']]);
    const partial = shardFlags(plan, moe, [undefined, '127.0.0.1:2']);
    assert.equal(partial.overrides.length, 1);
    assert.match(partial.warnings[0]!, /no rpc endpoint/);
    const denseFlags = shardFlags(plan, { ...moe, isMoe: false }, ['127.0.0.1:1', '127.0.0.1:2']);
    assert.deepEqual(denseFlags.overrides, [{ pattern: 'output\\.weight', bufferType: 'CPU' }]);
  });

  it("each override, as llama-server's argv carries it, names exactly its tensors in a real GGUF's table (not attn_output.weight)", () => {
    // The patterns as the head's argv writes them (llamaServerArgv), applied as llama.cpp applies --override-tensor:
    // std::regex_search (ECMAScript), as RegExp.test does here.
    const written = (overrides: TensorOverride[]): string[] => {
      const a = llamaServerArgv({ model: 'm.gguf', host: '127.0.0.1', port: 1, ctx: 512, slots: 1, cacheType: 'f16', overrides });
      return a[a.indexOf('--override-tensor') + 1]!.split(',').map((o) => o.slice(0, o.lastIndexOf('=')));
    };
    const taken = (path: string, pattern: string): string[] =>
      readGgufFile(path)
        .tensors.map((t) => t.name)
        .filter((n) => new RegExp(pattern).test(n));
    const cpu = (node: string | null): ShardDevice => ({ node, device: 'CPU', kind: 'cpu', freeMb: node ? 700 : 900, totalMb: 900 });
    const denseModel = { name: 'd', blockCount: 4, weightsMb: 900, kvBytesPerToken: 1024, isMoe: false };
    const densePlan = planShard([cpu(null), cpu('a'), cpu('b')], denseModel, settings);
    if (densePlan.kind !== 'shard') return assert.fail();
    const [out] = written(shardFlags(densePlan, denseModel, ['127.0.0.1:1', '127.0.0.1:2']).overrides);
    assert.deepEqual(taken(fixture('dense'), out!), ['output.weight']);
    // The fixture has what the pattern took when it was written as it is: every layer's attention output projection.
    assert.equal(taken(fixture('dense'), 'output\\.weight').length, 5);
    const moeModel = { name: 'q', blockCount: 4, weightsMb: 900, kvBytesPerToken: 1024, isMoe: true };
    const moePlan = planShard([cpu(null), cpu('a'), cpu('b')], moeModel, settings);
    if (moePlan.kind !== 'shard') return assert.fail();
    const remote = moePlan.stages.filter((st) => st.node !== null);
    const overrides = written(shardFlags(moePlan, moeModel, ['127.0.0.1:1', '127.0.0.1:2']).overrides);
    remote.forEach((st, i) => {
      const want = [];
      for (let l = st.layers[0]; l < st.layers[1]; l++) for (const p of ['gate', 'up', 'down']) want.push(`blk.${l}.ffn_${p}_exps.weight`);
      assert.deepEqual(taken(fixture('moewide'), overrides[i]!).sort(), want.sort());
    });
  });
});

describe('each stage of a shard checked on its own (llama.cpp --tensor-split: a layer’s cache on its device, the output on the last)', () => {
  // 6 layers of a sliding-window model (gemma3's pattern: 5 slide, the 6th keeps the context), 150k vocabulary.
  const swa = { k: 1024, v: 1024, swa: true, state: 0 };
  const full = { ...swa, swa: false };
  const memory = { layers: [swa, swa, swa, swa, swa, full], window: 1024, heads: 16, vocab: 151936 };
  const model: ShardModel = { name: 'g', blockCount: 6, weightsMb: 6000, kvBytesPerToken: 2048 * 2, memory, isMoe: false };
  const long = { contextSize: 32768, replicaCtx: 0, parallelSlots: 1, kvCacheType: 'f16' as const };
  const MIB = 2 ** 20;

  it('a stage holds its own layers’ cache: the full layer at the context, a sliding one at its window (+ ubatch, 256-cell rounding)', () => {
    const fullKv = (32768 * 4096) / MIB; // 128 MB
    const windowKv = (1536 * 4096) / MIB; // 6 MB
    const base = (layers: number) => (6000 * layers) / 6;
    assert.ok(Math.abs(stageNeedMb(model, [0, 1], long, 'remote') - (base(1) * 1.03 + 384 + windowKv * 1.05)) < 1e-9);
    assert.ok(Math.abs(stageNeedMb(model, [5, 6], long, 'remote', false) - (base(1) * 1.03 + 384 + fullKv * 1.05)) < 1e-9);
  });

  it('the output’s stage holds the logits beyond what the fixed overhead holds; without flash attention every stage its scores', () => {
    const logits = (151936 * 512 * 4) / MIB - 128; // 296.75 − 128
    assert.ok(Math.abs(stageNeedMb(model, [0, 1], long, 'hub') - stageNeedMb(model, [0, 1], long, 'remote') - logits) < 1e-9);
    const scores = (32768 * 512 * 17 * 4) / MIB; // cells × ubatch × (heads + mask) × 4 bytes: 1088 MB
    const off = { ...long, flashAttn: 'off' as const };
    for (const range of [[0, 1] as const, [5, 6] as const]) assert.ok(Math.abs(stageNeedMb(model, range, off, 'remote') - stageNeedMb(model, range, long, 'remote') - scores) < 1e-9);
    // A plan without flash attention: each stage, scores included, fits its own device; the output on the hub.
    const plan = planShard([gpu(null, 'CUDA0', 6000), gpu('a', 'CUDA0', 7000)], model, off);
    assert.equal(plan.kind, 'shard');
    if (plan.kind !== 'shard') return;
    for (const st of plan.stages) assert.ok(st.needMb <= st.freeMb, `${st.node ?? 'hub'}: ${st.needMb} > ${st.freeMb}`);
    assert.ok(plan.stages.find((s) => s.output)!.node === null);
  });
});

describe('shard planner by measured speed (Σ stage layers × ms/layer + Σ hops)', () => {
  const memory = (devices: ShardDevice[], m: ShardModel) => planShard(devices, m, settings, { by: 'memory' });
  const predicted = (plan: ShardPlan, devices: readonly ShardDevice[]): number => {
    if (plan.kind !== 'shard') return Infinity;
    return plan.stages.reduce((a, st) => {
      const d = devices.find((x) => x.node === st.node && x.device === st.device)!;
      return a + (st.layers[1] - st.layers[0]) * (d.msPerLayer ?? 1) + (st.node === null ? 0 : (d.hopMs ?? 0));
    }, 0);
  };

  it('nothing measured: the same plan as splitting by free memory', () => {
    for (const devices of [
      [gpu(null, 'CUDA0', 5500), gpu('node', 'CUDA0', 11000)],
      [gpu(null, 'CUDA0', 4000), gpu('a', 'CUDA0', 6000), gpu('b', 'CUDA0', 8000), gpu('c', 'CUDA0', 3000)],
      [gpu(null, 'CUDA0', 3000), gpu('twin', 'CUDA0', 4000), gpu('twin', 'CUDA1', 4000)],
    ])
      for (const weightsMb of [9000, 14000]) assert.deepEqual(planShard(devices, { ...dense, weightsMb }, settings), memory(devices, { ...dense, weightsMb }));
  });

  it('a fast and a slow device: the fast one is filled first, the slow one gets what is left, and the prediction is the sum', () => {
    const devices = [gpu(null, 'CUDA0', 4000, 1), gpu('fast', 'CUDA0', 6000, 0.4, 2), gpu('slow', 'CUDA0', 8000, 2.5, 2)];
    const m = { ...dense, weightsMb: 14000 }; // needs all three
    const plan = planShard(devices, m, settings);
    const old = memory(devices, m);
    assert.equal(plan.kind, 'shard');
    assert.ok(layersOf(plan, 'slow') < layersOf(old, 'slow'), `slow: ${layersOf(plan, 'slow')} layers, by memory ${layersOf(old, 'slow')}`);
    assert.ok(layersOf(plan, 'fast') > layersOf(old, 'fast'));
    for (const st of plan.kind === 'shard' ? plan.stages : []) assert.ok(st.needMb <= st.freeMb, `${st.node}: ${st.needMb} of ${st.freeMb}`);
    assert.equal(plan.kind === 'shard' && plan.stages.at(-1)!.node, null, 'the GPU hub still runs the last stage');
    assert.ok(Math.abs((plan.kind === 'shard' ? plan.predictedMsPerToken! : 0) - predicted(plan, devices)) < 1e-9);
    assert.ok(predicted(plan, devices) < predicted(old, devices));
  });

  it("the spec's 1060 + 4070 SUPER never measured, their bandwidths from NVML: the faster card takes more layers than by memory", () => {
    const shard = { name: dense.name, blockCount: dense.blockCount, weightsMb: dense.weightsMb };
    const per = (memGBps: number) => layerMs(undefined, { kind: 'gpu', memGBps }, shard).ms;
    // The hub's GTX 1060 (192 GB/s, 5.5 GB free), a node's RTX 4070 SUPER (504 GB/s, 11 GB free) over the default link.
    const devices = [gpu(null, 'CUDA0', 5500, per(192)), gpu('node', 'CUDA0', 11000, per(504), hopMs(undefined, hiddenBytes(5120)))];
    const plan = planShard(devices, dense, settings);
    const old = memory(devices, dense);
    assert.deepEqual(nodesOf(plan), ['node', null], 'the hub still runs the last stage');
    assert.ok(layersOf(plan, 'node') > layersOf(old, 'node'), `4070 SUPER: ${layersOf(plan, 'node')} layers, by memory ${layersOf(old, 'node')}`);
    assert.ok(predicted(plan, devices) < predicted(old, devices));
    for (const st of plan.kind === 'shard' ? plan.stages : []) assert.ok(st.needMb <= st.freeMb, `${st.node}: ${st.needMb} of ${st.freeMb}`);
  });

  it('a slow link: of two equal nodes the one behind the long round trip is left out', () => {
    const devices = [gpu(null, 'CUDA0', 5000), gpu('near', 'CUDA0', 7000, 1, 1), gpu('far', 'CUDA0', 8000, 1, 40)];
    const plan = planShard(devices, dense, settings);
    assert.deepEqual(plan.kind === 'shard' && plan.stages.map((s) => s.node), ['near', null]);
    assert.deepEqual(nodesOf(memory(devices, dense)), ['far', null]);
  });

  it('a member that only slows the shard is left out when the model fits without it, and kept (with fewer layers) when it does not', () => {
    // Memory alone picks `slow` (most free); hub + fast hold the model too and are predicted faster.
    const devices = [gpu(null, 'CUDA0', 5000, 1), gpu('fast', 'CUDA0', 6000, 0.5, 1), gpu('slow', 'CUDA0', 9000, 4, 1)];
    assert.deepEqual(nodesOf(memory(devices, dense)), ['slow', null]);
    const plan = planShard(devices, dense, settings);
    assert.deepEqual(plan.kind === 'shard' && plan.stages.map((s) => s.node), ['fast', null]);
    // A model only all three hold: slow is in, with the fewest layers that leave the others full.
    const big = { ...dense, weightsMb: 16000 };
    const all = planShard(devices, big, settings);
    assert.equal(all.kind === 'shard' && all.stages.length, 3);
    assert.ok(layersOf(all, 'slow') < layersOf(memory(devices, big), 'slow'));
    // A faster plan needs room: one that fits nowhere stays a refusal.
    assert.equal(planShard(devices, { ...dense, weightsMb: 40000 }, settings).kind, 'none');
  });

  it("a MoE remote stage pays its hop once per layer (its experts between the hub's attention), a dense one once", () => {
    const moe: ShardModel = { ...dense, isMoe: true, expertWeightsMb: 6000 };
    const devices = [gpu(null, 'CUDA0', 5000, 1), gpu('n', 'CUDA0', 9000, 1, 3)];
    for (const [m, perLayer] of [
      [dense, false],
      [moe, true],
    ] as const) {
      const plan = planShard(devices, m, settings);
      if (plan.kind !== 'shard') return assert.fail(JSON.stringify(plan));
      const remote = plan.stages.find((st) => st.node === 'n')!;
      const n = remote.layers[1] - remote.layers[0];
      assert.equal(remote.predictedMs, n * 1 + (perLayer ? n * 3 : 3));
    }
  });

  it('a slow node is still used where adding it saves more than its hop costs', () => {
    // The hub is slow; a fast node with a short link takes layers off it even though the hub and `fast` both hold the model.
    const devices = [gpu(null, 'CUDA0', 11000, 3), gpu('fast', 'CUDA0', 11000, 0.5, 1), gpu('mid', 'CUDA0', 11000, 1, 1)];
    const plan = planShard(devices, dense, settings);
    assert.equal(plan.kind, 'shard');
    assert.equal(layersOf(plan, null), 1, 'the hub keeps one layer and the output');
    assert.equal(layersOf(plan, 'fast'), 39);
    assert.equal(layersOf(plan, 'mid'), 0, 'mid only adds a hop');
  });
});
