import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { chromium } from 'playwright-core';
import { readModelInfo } from '../../src/main/core/gguf/derive.js';
import { addModel, startHub, type HubProcess } from '../helpers/hub.js';
import { directTexts, fixture, lavapipeEnv, vulkanModule } from '../helpers/llama.js';
import { startNode, type NodeProcess } from '../helpers/node.js';
import { assertExpertStages } from '../helpers/shards.js';
import { GREEDY_EXTRA } from '../helpers/openai.js';

/**
 * A GPU hub for real: `relay hub --backend vulkan` loads the prebuilt Vulkan module into relay's own build,
 * and Mesa's lavapipe (a software Vulkan device, 2048 MiB) is its GPU. Nodes run the CPU build.
 * Oracles: a replica on Vulkan0 answers like one llama-server process; the GPU-hub-last shard (nodes'
 * ggml-rpc-servers first, Vulkan0 last with the output) gives the single process's text at temperature 0,
 * dense and MoE; per-token tunnel bytes stay the hidden state's size, not the logits'.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const GPU_HUB = { ...ENV, ...lavapipeEnv(), RELAY_LLAMA_BACKEND: 'vulkan' };
const NODE_ENV = { ...ENV, RELAY_LLAMA_BACKEND: 'cpu' };
const PROMPTS = ['The quick brown fox', 'In a hole in the ground there lived'];
const TOKENS = 16;
const W_MOE = 1700;

/** One llama-server process holding the whole model on the CPU: the oracle. */
function argvOf(pid: number): string[] {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
}

function loadedModules(pid: number): string {
  return readFileSync(`/proc/${pid}/maps`, 'utf8');
}

describe('GPU hub on lavapipe (Vulkan module, hub GPU runs the last stage)', { timeout: 900_000 }, () => {
  let hub: HubProcess;
  let nodes: NodeProcess[] = [];
  let client: OpenAI;
  before(async () => {
    hub = await startHub({ env: GPU_HUB });
    nodes = [await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: NODE_ENV }), await startNode(hub, { name: 'south', cpuBudgetMb: 1000, env: NODE_ENV })];
    client = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
  });
  after(async () => {
    for (const n of nodes) await n.stop();
    await hub?.stop();
  });

  it("the hub lists Vulkan0 from the backend's --list-devices in /status and on the dashboard", async () => {
    const s = await hub.status();
    assert.equal(s.llama_cpp.backend, 'vulkan');
    assert.match(s.llama_cpp.backend_reason, /using vulkan .*Vulkan0 llvmpipe/);
    assert.deepEqual(
      s.devices.map((d) => [d.id, d.kind, d.source]),
      [['Vulkan0', 'gpu', 'llama-server']],
    );
    assert.match(s.devices[0]!.description, /llvmpipe/);
    assert.ok(s.devices[0]!.total_mb >= 1024);
    const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking'] });
    try {
      const page = await browser.newPage();
      await page.goto(hub.url);
      await page.getByRole('table', { name: 'Hub devices' }).getByText('Vulkan0').waitFor();
      assert.match(await page.locator('#devices').innerText(), /Vulkan0 llvmpipe.*\tgpu\t/s);
      assert.match(await page.locator('#backend').innerText(), /llama\.cpp backend: vulkan/);
    } finally {
      await browser.close();
    }
  });

  it('a host replica runs on Vulkan0 (--device Vulkan0, weights in the Vulkan0 buffer) and answers /v1 like one process', async () => {
    await addModel(hub, { path: fixture('dense'), name: 'small' });
    const want = await directTexts(fixture('dense'), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const p of PROMPTS) got.push((await client.completions.create({ model: 'small', prompt: p, max_tokens: TOKENS, ...GREEDY_EXTRA })).choices[0]!.text);
    assert.deepEqual(got, want);
    const r = (await hub.status()).replicas.find((x) => x.model === 'small' && x.state === 'ready')!;
    assert.deepEqual([r.where, r.device], ['host', 'Vulkan0']);
    assert.ok(r.pid !== null, 'a host replica has a process');
    const argv = argvOf(r.pid);
    assert.equal(argv[argv.indexOf('--device') + 1], 'Vulkan0');
    assert.ok(
      r.buffers.some((b) => /^Vulkan0 model buffer size = /.test(b)),
      r.buffers.join('\n'),
    );
    assert.ok(loadedModules(r.pid).includes(vulkanModule()), 'the replica loaded the Vulkan module');
    await hub.api('/api/models/small', { method: 'DELETE' });
  });

  it("a dense model the GPU cannot hold alone: nodes' rpc-servers run the first layers, Vulkan0 the last and the output; same text", async () => {
    // 2000 MB of weights need 2444 MB on one device: more than Vulkan0's 2048 and either node's 1000.
    await addModel(hub, { path: fixture('dense'), name: 'dense', required_vram_mb: 2000 });
    const want = await directTexts(fixture('dense'), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const p of PROMPTS) got.push((await client.completions.create({ model: 'dense', prompt: p, max_tokens: TOKENS, ...GREEDY_EXTRA })).choices[0]!.text);
    assert.deepEqual(got, want);
    const sh = (await hub.status()).shards.find((x) => x.model === 'dense' && x.state === 'ready')!;
    const last = sh.stages.at(-1)!;
    assert.deepEqual([last.node, last.device, last.output, last.layers[1]], [null, 'Vulkan0', true, 4]);
    assert.ok(
      sh.stages.slice(0, -1).every((st) => st.node !== null && st.device === 'CPU'),
      JSON.stringify(sh.stages),
    );
    // The planner's invocation: RPC devices first, the hub's GPU last, every layer and the output offloaded.
    const argv = argvOf(sh.pid!);
    const devices = argv[argv.indexOf('--device') + 1]!.split(',');
    assert.equal(devices.at(-1), 'Vulkan0');
    assert.ok(devices.slice(0, -1).every((d) => /^RPC\d$/.test(d)));
    assert.ok(
      sh.buffers.some((b) => /^Vulkan0 model buffer size/.test(b)),
      sh.buffers.join('\n'),
    );
    assert.ok(
      sh.buffers.some((b) => /^RPC0\[127\.0\.0\.1:\d+\] model buffer size/.test(b)),
      sh.buffers.join('\n'),
    );
    // Each node's ggml-rpc-server is pinned to the device its stage was planned on (-d), not "every GPU".
    for (const st of sh.stages.slice(0, -1)) {
      const n = nodes.find((x) => x.name === st.node)!;
      const pids = execFileSync('pgrep', ['-P', String(n.proc.pid), '-f', 'ggml-rpc-server'], { encoding: 'utf8' })
        .trim()
        .split('\n');
      const argvs = pids.map((pid) => argvOf(Number(pid)));
      assert.ok(
        argvs.some((a) => a[a.indexOf('--device') + 1] === st.device),
        JSON.stringify(argvs),
      );
    }
    await hub.api('/api/models/dense', { method: 'DELETE' });
  });

  it('a MoE model: experts of the remote stages on the nodes, attention and KV of every layer on Vulkan0; same text', async () => {
    // 1700 MB of weights, three quarters of them experts: 2135 MB on one device, more than Vulkan0's 2048 and
    // a node's 1000; with the experts of some layers on a node, the hub's real share fits.
    await addModel(hub, { path: fixture('moewide'), name: 'moe', required_vram_mb: W_MOE });
    const want = await directTexts(fixture('moewide'), PROMPTS, TOKENS);
    const got: string[] = [];
    for (const p of PROMPTS) got.push((await client.completions.create({ model: 'moe', prompt: p, max_tokens: TOKENS, ...GREEDY_EXTRA })).choices[0]!.text);
    assert.deepEqual(got, want);
    const sh = (await hub.status()).shards.find((x) => x.model === 'moe' && x.state === 'ready')!;
    assert.equal(sh.stages.at(-1)!.device, 'Vulkan0');
    assertExpertStages(sh);
    const remote = sh.stages.filter((st) => st.node);
    // Attention, router, embeddings and output of every layer are on the hub's GPU.
    assert.ok(
      sh.buffers.some((b) => /^Vulkan0 model buffer size/.test(b)),
      sh.buffers.join('\n'),
    );
    // The hub's stage reserves its real share: every layer's non-expert weights and KV + its own layers' experts.
    const info = readModelInfo(fixture('moewide'));
    const experts = (W_MOE * info.expertBytes) / info.tensorBytes;
    const hubStage = sh.stages.find((st) => st.node === null)!;
    const hubLayers = hubStage.layers[1] - hubStage.layers[0];
    const weights = W_MOE - experts + (experts * hubLayers) / 4;
    const kv = (info.kvBytesPerToken! * 512) / 2 ** 20;
    assert.equal(hubStage.need_mb, Math.ceil(weights * 1.03 + 384 + kv * 1.05));
    for (const st of remote) assert.equal(st.need_mb, Math.ceil(((experts * (st.layers[1] - st.layers[0])) / 4) * 1.03 + 384));
    await hub.api('/api/models/moe', { method: 'DELETE' });
  });
});

describe('GPU hub last: bytes per generated token', { timeout: 900_000 }, () => {
  it('with Vulkan0 holding the output, per-token tunnel bytes do not grow with the vocabulary', async () => {
    const hub = await startHub({ env: GPU_HUB });
    const node = await startNode(hub, { name: 'north', cpuBudgetMb: 1000, env: NODE_ENV });
    try {
      const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const perToken = async (model: string): Promise<number> => {
        const total = async () =>
          (await hub.status()).shards
            .filter((x) => x.model === model && x.state === 'ready')
            .flatMap((x) => x.stages)
            .reduce((a, st) => a + (st.rpc_bytes ?? 0), 0);
        await c.completions.create({ model, prompt: 'Count with me', max_tokens: 1, ...GREEDY_EXTRA });
        const b0 = await total();
        await c.completions.create({ model, prompt: 'Count with me', max_tokens: 17, ...GREEDY_EXTRA, ignore_eos: true } as never);
        return ((await total()) - b0) / 16;
      };
      await addModel(hub, { path: fixture('dense'), name: 'small', required_vram_mb: 2000 });
      // 1900 MB: its 128,256-token logits need 122 MB more than the fixed overhead holds on the output's device (the
      // hub's), so the same split as small's (3 layers on Vulkan0, 1 on the node) fits.
      await addModel(hub, { path: fixture('widevocab'), name: 'wide', required_vram_mb: 1900 });
      const small = await perToken('small');
      await hub.api('/api/models/small', { method: 'DELETE' });
      const wide = await perToken('wide');
      // Same hidden size (128), 4× the vocabulary: the logits (+384 KB per token) never cross.
      assert.ok(wide <= small * 1.1 + 1024, `GPU hub last: ${small} → ${wide} bytes/token`);
      assert.ok(wide < (128256 - 32000) * 4 * 0.5, `per-token bytes ${wide} are far below the logits' size`);
      console.log(`GPU hub last, bytes/token: ${small.toFixed(0)} (32k vocab) / ${wide.toFixed(0)} (128k vocab)`);
    } finally {
      await node.stop();
      await hub.stop();
    }
  });
});

describe('a node lending two devices (Vulkan0 and a CPU budget): two stages, two pinned rpc-servers', { timeout: 900_000 }, () => {
  it('the node reports both devices from its backend; one shard puts a stage on each; same text as one process', async () => {
    // A CPU hub (1050 MB budget) and one node with lavapipe's Vulkan0 (2048 MB) plus a 1100 MB CPU budget.
    // 2400 MB of weights: three layers fit no device, so the fewest stages that fit are hub + both of the node's.
    const hub = await startHub({ env: { ...ENV, RELAY_LLAMA_BACKEND: 'cpu' }, args: ['--cpu-budget-mb', '1050'] });
    const twin = await startNode(hub, { name: 'twin', cpuBudgetMb: 1100, env: { ...ENV, ...lavapipeEnv(), RELAY_LLAMA_BACKEND: 'vulkan' } });
    try {
      const nodesJson = (await hub.status()).nodes;
      assert.deepEqual(
        nodesJson.find((n) => n.name === 'twin')!.devices.map((d) => d.id),
        ['Vulkan0', 'CPU'],
      );
      await addModel(hub, { path: fixture('dense'), name: 'dense', required_vram_mb: 2400 });
      const c = new OpenAI({ baseURL: `${hub.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const got = (await c.completions.create({ model: 'dense', prompt: PROMPTS[0]!, max_tokens: TOKENS, ...GREEDY_EXTRA })).choices[0]!.text;
      assert.equal(got, (await directTexts(fixture('dense'), [PROMPTS[0]!], TOKENS))[0]);
      const sh = (await hub.status()).shards.find((x) => x.state === 'ready')!;
      assert.deepEqual(
        sh.stages.map((st) => [st.node, st.device]),
        [
          [null, 'CPU'],
          ['twin', 'Vulkan0'],
          ['twin', 'CPU'],
        ],
      );
      const pids = execFileSync('pgrep', ['-P', String(twin.proc.pid), '-f', 'ggml-rpc-server'], { encoding: 'utf8' })
        .trim()
        .split('\n');
      const pinned = pids
        .map((pid) => {
          const a = argvOf(Number(pid));
          return a[a.indexOf('--device') + 1];
        })
        .sort();
      assert.deepEqual(pinned, ['CPU', 'Vulkan0']);
      assert.deepEqual(((await twin.local('/status')).stages as { index: number }[]).map((st) => st.index).sort(), [1, 2]);
    } finally {
      await twin.stop();
      await hub.stop();
    }
  });
});
