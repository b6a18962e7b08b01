import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cmakeFlags, effectiveFlashAttn, llamaServerArgv, parseListDevices, rpcServerArgv, type LlamaServerOptions } from '../../src/main/core/llama/index.js';
import { draftPlacement, projectorPlacement, replicaPlacement, wholeName } from '../../src/main/core/llama/argv.js';
import { vocabMismatch } from '../../src/main/core/models/draft.js';
import type { Vocab } from '../../src/main/core/gguf/index.js';

const base: LlamaServerOptions = { model: '/m.gguf', host: '127.0.0.1', port: 8080, ctx: 4096, slots: 2, cacheType: 'f16' };

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i < 0 ? undefined : argv[i + 1];
}

describe('llamaServerArgv', () => {
  it('sets both cache types from the one KV setting, for every type', () => {
    for (const t of ['f16', 'q8_0', 'q4_0'] as const) {
      const a = llamaServerArgv({ ...base, cacheType: t });
      assert.equal(flag(a, '--cache-type-k'), t);
      assert.equal(flag(a, '--cache-type-v'), t);
    }
  });

  it('forces flash attention on for a quantized cache unless told otherwise', () => {
    assert.equal(flag(llamaServerArgv({ ...base, cacheType: 'q8_0' }), '--flash-attn'), 'on');
    assert.equal(flag(llamaServerArgv({ ...base, cacheType: 'q4_0' }), '--flash-attn'), 'on');
    assert.equal(flag(llamaServerArgv({ ...base, cacheType: 'f16' }), '--flash-attn'), 'auto');
    assert.equal(flag(llamaServerArgv({ ...base, cacheType: 'q8_0', flashAttn: 'off' }), '--flash-attn'), 'off');
    assert.equal(effectiveFlashAttn('f16', 'on'), 'on');
  });

  it("a model's own answer length: --n-predict, absent unless set", () => {
    assert.equal(flag(llamaServerArgv({ ...base, nPredict: 256 }), '--n-predict'), '256');
    assert.ok(!llamaServerArgv(base).includes('--n-predict'));
  });

  it('a draft model: --model-draft with the draft-simple speculator, its tokens per step, the cache type, its device', () => {
    const onGpu = llamaServerArgv({ ...base, cacheType: 'q8_0', ...draftPlacement({ path: '/d.gguf', max: 8, min: 1 }, 'CUDA0', 'cuda') });
    assert.equal(flag(onGpu, '--model-draft'), '/d.gguf');
    assert.equal(flag(onGpu, '--spec-type'), 'draft-simple', 'without it this build loads the draft and drafts nothing');
    assert.deepEqual([flag(onGpu, '--spec-draft-n-max'), flag(onGpu, '--spec-draft-n-min')], ['8', '1']);
    assert.deepEqual([flag(onGpu, '--cache-type-k-draft'), flag(onGpu, '--cache-type-v-draft')], ['q8_0', 'q8_0']);
    assert.deepEqual([flag(onGpu, '--spec-draft-device'), flag(onGpu, '--spec-draft-ngl')], ['CUDA0', '999']);
    const cpuBeside = llamaServerArgv({ ...base, ...draftPlacement({ path: '/d.gguf', max: 8, min: 0 }, 'CPU', 'vulkan') });
    assert.deepEqual([flag(cpuBeside, '--spec-draft-device'), flag(cpuBeside, '--spec-draft-ngl')], ['none', '0']);
    const cpuOnly = llamaServerArgv({ ...base, ...draftPlacement({ path: '/d.gguf', max: 8, min: 0 }, 'CPU', 'cpu') });
    assert.ok(!cpuOnly.includes('--spec-draft-device'));
    assert.ok(!llamaServerArgv({ ...base, ...draftPlacement(null, 'CUDA0', 'cuda') }).includes('--model-draft'));
  });

  it("a draft's vocabulary against the target's, by llama.cpp's rule", () => {
    const tokens = Array.from({ length: 300 }, (_, i) => `t${i}`);
    const v: Vocab = { model: 'llama', tokens, bos: 1, eos: 2, addBos: true, addEos: undefined, types: [], pre: undefined };
    assert.equal(vocabMismatch(v, { ...v }), null);
    assert.equal(vocabMismatch(v, { ...v, tokens: tokens.slice(0, 200) }), null, 'sizes within 128');
    assert.equal(vocabMismatch(v, { ...v, tokens: ['x', 'y', 'z', ...tokens.slice(3)] }), null, 'the first 5 ids are not compared');
    assert.match(vocabMismatch(v, { ...v, tokens: tokens.slice(0, 100) })!, /100 tokens vs 300/);
    assert.match(vocabMismatch(v, { ...v, tokens: tokens.map((t, i) => (i === 42 ? 'other' : t)) })!, /token 42/);
    assert.match(vocabMismatch(v, { ...v, model: 'gpt2' })!, /tokenizer/);
    assert.match(vocabMismatch(v, { ...v, eos: 3 })!, /eos/);
    assert.match(vocabMismatch(v, { ...v, tokens: [] })!, /no tokenizer/);
  });

  it('a vision projector: --mmproj, kept on the CPU only when told', () => {
    assert.equal(flag(llamaServerArgv({ ...base, mmproj: '/p.gguf' }), '--mmproj'), '/p.gguf');
    assert.ok(!llamaServerArgv({ ...base, mmproj: '/p.gguf' }).includes('--no-mmproj-offload'));
    assert.ok(llamaServerArgv({ ...base, mmproj: '/p.gguf', mmprojOffload: false }).includes('--no-mmproj-offload'));
    assert.ok(!llamaServerArgv(base).includes('--mmproj'));
    assert.deepEqual(projectorPlacement('/p.gguf', 'CPU'), { mmproj: '/p.gguf', mmprojOffload: false });
    assert.deepEqual(projectorPlacement('/p.gguf', 'CUDA0'), { mmproj: '/p.gguf', mmprojOffload: true });
    assert.deepEqual(projectorPlacement(undefined, 'CUDA0'), {});
  });

  it('sizes the context as ctx per slot × slots, and binds where told', () => {
    const a = llamaServerArgv(base);
    assert.equal(flag(a, '--ctx-size'), '8192');
    assert.equal(flag(a, '--parallel'), '2');
    assert.equal(flag(a, '--host'), '127.0.0.1');
    assert.equal(flag(a, '--port'), '8080');
  });

  it('emits rpc, devices, tensor split and overrides in order, and nothing when unset', () => {
    const a = llamaServerArgv({
      ...base,
      rpc: ['127.0.0.1:50052', '127.0.0.1:50053'],
      devices: ['RPC0', 'RPC1'],
      tensorSplit: [1, 3],
      gpuLayers: 99,
      fit: 'off',
      overrides: [
        { pattern: 'blk\\.[0-1]\\.ffn_(gate|up|down)_exps\\.weight', bufferType: 'RPC0[127.0.0.1:50052]' },
        { pattern: 'blk\\.[2-3]\\.ffn_(gate|up|down)_exps\\.weight', bufferType: 'RPC0[127.0.0.1:50053]' },
      ],
    });
    assert.equal(flag(a, '--rpc'), '127.0.0.1:50052,127.0.0.1:50053');
    assert.equal(flag(a, '--device'), 'RPC0,RPC1');
    assert.equal(flag(a, '--tensor-split'), '1,3');
    assert.equal(flag(a, '--n-gpu-layers'), '99');
    assert.equal(flag(a, '--fit'), 'off');
    // Whole names: llama.cpp searches tensor names for the pattern.
    assert.equal(flag(a, '--override-tensor'), '^(?:blk\\.[0-1]\\.ffn_(gate|up|down)_exps\\.weight)$=RPC0[127.0.0.1:50052],^(?:blk\\.[2-3]\\.ffn_(gate|up|down)_exps\\.weight)$=RPC0[127.0.0.1:50053]');
    // An alternation stays whole: neither side matches inside a longer name.
    assert.deepEqual(
      ['output.weight', 'token_embd.weight', 'blk.0.attn_output.weight', 'x.token_embd.weight'].filter((n) => new RegExp(wholeName('output\\.weight|token_embd\\.weight')).test(n)),
      ['output.weight', 'token_embd.weight'],
    );
    const plain = llamaServerArgv(base);
    for (const f of ['--rpc', '--device', '--tensor-split', '--override-tensor', '--n-gpu-layers', '--fit']) assert.equal(plain.includes(f), false, f);
  });
});

describe('replicaPlacement', () => {
  it('a GPU placement offloads everything to its device; a CPU budget hides a loaded GPU module and otherwise passes nothing', () => {
    const argv = (device: string, backend: string): string[] => llamaServerArgv({ ...base, ...replicaPlacement(device, backend) });
    const gpu = argv('Vulkan0', 'vulkan');
    assert.deepEqual([flag(gpu, '--device'), flag(gpu, '--n-gpu-layers')], ['Vulkan0', '999']);
    const cpuNextToGpu = argv('CPU', 'cuda');
    assert.deepEqual([flag(cpuNextToGpu, '--device'), flag(cpuNextToGpu, '--n-gpu-layers')], ['none', '0']);
    const cpuBuild = argv('CPU', 'cpu'); // llama.cpp's own CPU path: `--device none` measured ~10% slower there
    assert.equal(cpuBuild.includes('--device') || cpuBuild.includes('--n-gpu-layers'), false);
  });
});

describe('rpcServerArgv', () => {
  it('binds to loopback and enables the tensor cache only when asked', () => {
    assert.deepEqual(rpcServerArgv({ host: '127.0.0.1', port: 50052, cache: true }), ['--host', '127.0.0.1', '--port', '50052', '--cache']);
    assert.deepEqual(rpcServerArgv({ host: '127.0.0.1', port: 1, cache: false, threads: 2 }), ['--host', '127.0.0.1', '--port', '1', '--threads', '2']);
  });

  it('pins the one device a stage runs on (multi-GPU nodes: one rpc-server per device)', () => {
    assert.deepEqual(rpcServerArgv({ host: '127.0.0.1', port: 1, cache: false, device: 'CUDA1' }), ['--host', '127.0.0.1', '--port', '1', '--device', 'CUDA1']);
    assert.deepEqual(rpcServerArgv({ host: '127.0.0.1', port: 1, cache: false, device: 'CPU' }).slice(-2), ['--device', 'CPU']);
  });
});

describe('cmakeFlags', () => {
  it('always builds RPC, portable, shared with loadable backends and an $ORIGIN rpath, and adds the backend switch', () => {
    const cpu = cmakeFlags(null, false);
    for (const f of [
      '-DGGML_RPC=ON',
      '-DGGML_NATIVE=OFF',
      '-DBUILD_SHARED_LIBS=ON',
      '-DGGML_BACKEND_DL=ON',
      '-DGGML_CPU_ALL_VARIANTS=OFF',
      '-DCMAKE_PLATFORM_NO_VERSIONED_SONAME=ON',
      '-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON',
      '-DLLAMA_USE_PREBUILT_UI=OFF',
    ])
      assert.ok(cpu.includes(f), f);
    assert.ok(cpu.includes('-DCMAKE_INSTALL_RPATH=$ORIGIN'));
    assert.equal(
      cpu.some((f) => /GGML_(CUDA|VULKAN|METAL)=ON/.test(f)),
      false,
    );
    assert.ok(cmakeFlags('cuda', false).includes('-DGGML_CUDA=ON'));
    assert.ok(cmakeFlags('vulkan', false).includes('-DGGML_VULKAN=ON'));
    assert.ok(cmakeFlags('metal', false).includes('-DGGML_METAL=ON'));
    assert.ok(cmakeFlags(null, true).includes('-DCMAKE_CXX_COMPILER_LAUNCHER=ccache'));
    assert.equal(
      cpu.some((f) => f.includes('ccache')),
      false,
    );
  });
});

describe('parseListDevices', () => {
  it('reads no devices from a CPU-only machine', () => {
    assert.deepEqual(parseListDevices('Available devices:\n  (none)\n'), []);
  });

  it('reads GPUs and RPC devices with total and free MiB, ignoring log noise', () => {
    const out = [
      'ggml_cuda_init: found 1 CUDA devices:',
      'Available devices:',
      '  CUDA0: NVIDIA GeForce RTX 4070 SUPER (12281 MiB, 11796 MiB free)',
      '  RPC0: 127.0.0.1:50052 (24105 MiB, 24105 MiB free)',
      '  Vulkan0: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24000 MiB free)',
    ].join('\n');
    assert.deepEqual(parseListDevices(out), [
      { name: 'CUDA0', description: 'NVIDIA GeForce RTX 4070 SUPER', totalMib: 12281, freeMib: 11796 },
      { name: 'RPC0', description: '127.0.0.1:50052', totalMib: 24105, freeMib: 24105 },
      { name: 'Vulkan0', description: 'AMD Radeon RX 7900 XTX (RADV NAVI31)', totalMib: 24560, freeMib: 24000 },
    ]);
  });
});
