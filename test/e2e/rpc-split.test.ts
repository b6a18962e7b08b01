import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { startLlamaServer, startRpcServer, type RunningLlamaServer, type RunningRpcServer } from '../../src/main/core/llama/index.js';
import { fixture, llama } from '../helpers/llama.js';
import { chat, complete } from '../helpers/openai.js';

/**
 * The oracle for every shard relay will ever run: the same model, prompt and greedy sampling give the same
 * text whether the layers sit in one process or are spread over ggml-rpc-servers.
 */
const stops: (() => Promise<unknown>)[] = [];
after(async () => {
  await Promise.all(stops.map((s) => s()));
});

async function rpcPair(): Promise<[RunningRpcServer, RunningRpcServer]> {
  const a = await startRpcServer(llama(), { name: 'rpc-a' });
  stops.push(() => a.child.terminate(3000));
  const b = await startRpcServer(llama(), { name: 'rpc-b' });
  stops.push(() => b.child.terminate(3000));
  return [a, b];
}

async function server(opts: Parameters<typeof startLlamaServer>[1]): Promise<RunningLlamaServer> {
  const s = await startLlamaServer(llama(), opts);
  stops.push(() => s.child.terminate(5000));
  return s;
}

const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];

async function texts(baseUrl: string): Promise<string[]> {
  const out: string[] = [];
  for (const p of PROMPTS) out.push((await complete(baseUrl, p, 32)).text);
  out.push((await chat(baseUrl, 'Tell me a story.', 32)).text);
  return out;
}

function bufferLines(s: RunningLlamaServer): string[] {
  return s.child.output().filter((l) => /model buffer size/.test(l));
}

describe('ggml-rpc-server splits give the single-process text', { timeout: 300_000 }, () => {
  it('dense fixture over two rpc servers (--rpc, --device RPC0,RPC1, --tensor-split 1,3) is byte-identical', async () => {
    const model = fixture('dense');
    const single = await server({ model, ctx: 512, slots: 1, cacheType: 'f16', name: 'single' });
    const want = await texts(single.baseUrl);
    await single.child.terminate(5000);

    const [a, b] = await rpcPair();
    const split = await server({
      model,
      ctx: 512,
      slots: 1,
      cacheType: 'f16',
      name: 'split',
      rpc: [a.endpoint, b.endpoint],
      devices: ['RPC0', 'RPC1'],
      gpuLayers: 99,
      tensorSplit: [1, 3],
    });
    const got = await texts(split.baseUrl);
    assert.deepEqual(got, want);
    assert.ok(want.every((t) => t.length > 0));
    // Both rpc servers really hold layers.
    const lines = bufferLines(split);
    assert.ok(
      lines.some((l) => l.includes(`RPC0[${a.endpoint}]`)),
      lines.join('\n'),
    );
    assert.ok(
      lines.some((l) => l.includes(`RPC0[${b.endpoint}]`)),
      lines.join('\n'),
    );
  });

  it('MoE fixture with its expert tensors overridden onto the two rpc servers (-ot) gives the same text', async () => {
    const model = fixture('moe');
    const single = await server({ model, ctx: 512, slots: 1, cacheType: 'f16', name: 'moe-single' });
    const want = await texts(single.baseUrl);
    await single.child.terminate(5000);

    const [a, b] = await rpcPair();
    const exps = (range: string) => `blk\\.[${range}]\\.ffn_(gate|up|down)_exps\\.weight`;
    const split = await server({
      model,
      ctx: 512,
      slots: 1,
      cacheType: 'f16',
      name: 'moe-split',
      rpc: [a.endpoint, b.endpoint],
      devices: ['RPC0', 'RPC1'],
      gpuLayers: 0,
      fit: 'off',
      overrides: [
        { pattern: exps('0-1'), bufferType: `RPC0[${a.endpoint}]` },
        { pattern: exps('2-3'), bufferType: `RPC0[${b.endpoint}]` },
      ],
    });
    const got = await texts(split.baseUrl);
    assert.deepEqual(got, want);

    // The log shows model buffers on both RPC devices, and the experts are what went there.
    const lines = bufferLines(split);
    const size = (ep: string) => Number(/=\s*([\d.]+) MiB/.exec(lines.find((l) => l.includes(`RPC0[${ep}]`)) ?? '')?.[1] ?? NaN);
    assert.ok(size(a.endpoint) > 0 && size(b.endpoint) > 0, lines.join('\n'));
    // 2 layers × 3 expert tensors × (128 × 64 × 8) f32 = 1.5 MiB per server.
    assert.ok(Math.abs(size(a.endpoint) - 1.5) < 0.01, `RPC a holds ${size(a.endpoint)} MiB`);
    assert.ok(Math.abs(size(b.endpoint) - 1.5) < 0.01, `RPC b holds ${size(b.endpoint)} MiB`);
  });
});
