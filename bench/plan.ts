/**
 * bench/plan: how good the shard planner's split is. A hub in this process (CPU budget) and two CPU nodes as `relay
 * up` processes: `fast` (2 threads) and `slow` (1 thread, its tunnel behind an emulated 2 ms round-trip link). No
 * member holds the 8-layer model alone.
 *  1. Through the hub: the model planned by free memory (RELAY_SHARD_PLAN=memory, relay before measuring), then by
 *     measured speed (the memory shard's answers measured each stage; re-planned while /status offers it).
 *  2. Every split the budgets allow, run directly — one llama-server with --rpc to two ggml-rpc-servers of the same
 *     threads, the slow one behind the same link — to find the best; each plan's split is looked up there.
 * The figure: the measured plan's tok/s ÷ the best split's (goal ≥ 0.95). `npm run bench -- plan`.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hubConfigFromEnv, type HubConfig } from '../src/main/core/config.js';
import { startHub, type Hub } from '../src/main/core/hub/index.js';
import { startLlamaServer, startRpcServer } from '../src/main/core/llama/index.js';
import { createLogger } from '../src/main/core/log.js';
import { hubJoinToken } from '../src/main/core/pairing/tokens.js';
import { shardModel, stageNeedMb, type Stage } from '../src/main/core/scheduler/decide/shard.js';
import { shardFlags } from '../src/main/core/scheduler/decide/shard-flags.js';
import { describe } from '../src/main/core/models/describe.js';
import { settingsFor } from '../src/main/core/scheduler/decide/model-settings.js';
import { ensureSpecFixture } from '../test/fixtures/models.js';
import { llama } from '../test/helpers/llama.js';
import { startNode } from '../test/helpers/node.js';
import { shapedLink } from '../test/helpers/shaped-link.js';
import { reportRatio } from './targets.js';
import { median } from './stats.js';

const TOKENS = 48;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const LAYERS = 8;
// 8 layers of ~15 MB (f32) and a 32k vocabulary: a token's time is mostly its layers' weights read.
const SPEC = { kind: 'dense' as const, arch: 'llama' as const, layers: LAYERS, embd: 512, heads: 8, kvHeads: 4, ff: 2048, ctx: 2048 };
const LINK = { mbitPerSec: 1000, delayMs: 1, queueBytes: 1024 * 1024 };
const THREADS = { hub: 2, fast: 2, slow: 1 };

async function gen(url: string, model: string): Promise<number> {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: TOKENS, temperature: 0, top_k: 1, ignore_eos: true }),
  });
  const j = (await r.json()) as { timings: { predicted_per_second: number } };
  if (!r.ok) throw new Error(JSON.stringify(j));
  return j.timings.predicted_per_second;
}
const tps = async (url: string, model: string): Promise<number> => {
  await gen(url, model); // warm
  const xs: number[] = [];
  for (let i = 0; i < ROUNDS; i++) xs.push(await gen(url, model));
  return median(xs);
};

const log = createLogger({ level: 'warn', pretty: false });
const home = mkdtempSync(join(tmpdir(), 'relay-bench-plan-'));
const path = ensureSpecFixture('plan', SPEC, { vocabDir: llama().vocabDir });
const config: { -readonly [K in keyof HubConfig]: HubConfig[K] } = hubConfigFromEnv(
  { HOME: tmpdir(), RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: String(THREADS.hub) },
  { port: 0, home, cpuBudgetMb: 0 },
);
const hub: Hub = await startHub(config, { log, install: llama() });
const res = await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name: 'm', spec: 'none' }) });
// No speculation: an answer that accepted drafted tokens measures no device (run/speeds.ts), and the sweep runs none.
if (!res.ok) throw new Error(`registering: ${res.status} ${await res.text()}`);
const record = { ...(await describe(path)), name: 'm', required_vram_mb: null, embedding: false, added_at: '' };
const sm = shardModel(record)!;
const settings = settingsFor(config, record);
const fit = { contextSize: settings.contextSize, replicaCtx: settings.replicaCtx, parallelSlots: settings.parallelSlots, kvCacheType: settings.kvCacheType };
// Budgets: none holds the model alone (each stage pays llama.cpp's fixed overhead), several splits fit; the slow
// node has the most room, as an older PC with more RAM would, so splitting by free memory picks it first.
const whole = stageNeedMb(sm, [0, LAYERS], fit, 'hub', true);
const budget = { hub: Math.ceil(whole - 0.3 * sm.weightsMb), fast: Math.ceil(whole - 0.3 * sm.weightsMb), slow: Math.ceil(whole - 0.2 * sm.weightsMb) };
hub.setCpuBudgetMb(budget.hub);
const link = await shapedLink(hub.url, LINK);
const nodes = [
  await startNode({ url: hub.url, home }, { name: 'fast', cpuBudgetMb: budget.fast, token: hubJoinToken(home), env: { RELAY_THREADS: String(THREADS.fast), RELAY_LOG_LEVEL: 'warn' } }),
  await startNode({ url: link.url, home }, { name: 'slow', cpuBudgetMb: budget.slow, token: hubJoinToken(home), env: { RELAY_THREADS: String(THREADS.slow), RELAY_LOG_LEVEL: 'warn' } }),
];
type Split = { hub: number; fast: number; slow: number };
const key = (s: Split): string => `hub ${s.hub} · fast ${s.fast} · slow ${s.slow}`;
const running = (): Split => {
  const sh = hub.scheduler.view.shardStatus().find((x) => x.model === 'm' && x.state === 'ready')!;
  const n = (who: string | null) => sh.stages.filter((st) => st.node === who).reduce((a, st) => a + st.layers[1] - st.layers[0], 0);
  return { hub: n(null), fast: n('fast'), slow: n('slow') };
};
const unload = async (): Promise<void> => {
  await fetch(`${hub.url}/api/generate`, { method: 'POST', body: JSON.stringify({ model: 'm', keep_alive: 0 }) });
  while (hub.scheduler.view.shardStatus().some((x) => x.model === 'm' && x.state !== 'failed')) await new Promise((r) => setTimeout(r, 100));
};

try {
  // 1. Through the hub.
  config.shardPlan = 'memory';
  const memoryTps = await tps(hub.url, 'm');
  const memorySplit = running();
  await unload();
  config.shardPlan = 'speed';
  let speedTps = await tps(hub.url, 'm');
  for (let i = 0; i < 3 && hub.scheduler.view.shardStatus().find((x) => x.model === 'm' && x.state === 'ready')?.replan; i++) {
    await unload();
    speedTps = await tps(hub.url, 'm');
  }
  const speedSplit = running();
  const sh = hub.scheduler.view.shardStatus().find((x) => x.model === 'm' && x.state === 'ready')!;
  const predicted = sh.predicted_ms_per_token;
  await unload();

  // 2. Every split the budgets allow, directly: hub [0,h) on the CPU, then fast, then slow.
  const fastRpc = await startRpcServer(llama(), { threads: THREADS.fast });
  const slowRpc = await startRpcServer(llama(), { threads: THREADS.slow });
  const slowLink = await shapedLink(`http://127.0.0.1:${slowRpc.port}`, LINK);
  const slowEndpoint = new URL(slowLink.url).host;
  const measured = new Map<string, number>();
  for (let h = 1; h <= LAYERS; h++)
    for (let f = 0; f <= LAYERS - h; f++) {
      const split = { hub: h, fast: f, slow: LAYERS - h - f };
      if (split.fast + split.slow === 0) continue;
      const stages: Stage[] = [];
      let at = 0;
      for (const [who, n, free] of [
        [null, split.hub, budget.hub],
        ['fast', split.fast, budget.fast],
        ['slow', split.slow, budget.slow],
      ] as const) {
        if (n === 0) continue;
        const layers = [at, at + n] as const;
        stages.push({ node: who, device: 'CPU', kind: 'cpu', layers, needMb: stageNeedMb(sm, layers, fit, who === null ? 'hub' : 'remote', who === null), freeMb: free, output: who === null });
        at += n;
      }
      if (stages.some((st) => st.needMb > st.freeMb)) continue;
      const endpoints = stages.filter((st) => st.node !== null).map((st) => (st.node === 'fast' ? fastRpc.endpoint : slowEndpoint));
      const flags = shardFlags({ kind: 'shard', stages }, sm, endpoints);
      const server = await startLlamaServer(llama(), {
        model: path,
        ctx: fit.contextSize,
        slots: 1,
        cacheType: 'f16',
        threads: THREADS.hub,
        rpc: flags.rpc,
        devices: flags.devices,
        gpuLayers: flags.gpuLayers,
        tensorSplit: flags.tensorSplit,
        overrides: flags.overrides,
        fit: flags.fit,
      });
      try {
        measured.set(key(split), await tps(server.baseUrl, 'm'));
      } finally {
        await server.child.terminate(5000);
      }
    }
  await slowLink.close();
  await fastRpc.child.terminate(2000);
  await slowRpc.child.terminate(2000);

  const best = [...measured].sort((a, b) => b[1] - a[1])[0]!;
  const direct = (s: Split): number => measured.get(key(s)) ?? NaN;
  console.log(`\nmodel: ${LAYERS} layers, need ${Math.round(whole)} MB on one device; budgets hub ${budget.hub} · fast ${budget.fast} · slow ${budget.slow} MB`);
  console.log(`threads hub ${THREADS.hub} · fast ${THREADS.fast} · slow ${THREADS.slow}; slow behind ${LINK.delayMs * 2} ms round trip, ${LINK.mbitPerSec} Mbit/s`);
  console.log('\n| split (layers) | tok/s, direct |');
  console.log('| --- | --- |');
  for (const [k, v] of [...measured].sort((a, b) => b[1] - a[1])) console.log(`| ${k} | ${v.toFixed(1)} |`);
  console.log('\n| plan | split | through the hub tok/s | same split direct tok/s | ÷ best split |');
  console.log('| --- | --- | --- | --- | --- |');
  console.log(`| free memory (RELAY_SHARD_PLAN=memory) | ${key(memorySplit)} | ${memoryTps.toFixed(1)} | ${direct(memorySplit).toFixed(1)} | ${(direct(memorySplit) / best[1]).toFixed(3)} |`);
  console.log(
    `| measured speed (default; predicted ${predicted?.toFixed(1)} ms/token) | ${key(speedSplit)} | ${speedTps.toFixed(1)} | ${direct(speedSplit).toFixed(1)} | ${(direct(speedSplit) / best[1]).toFixed(3)} |`,
  );
  console.log(`| best of every split | ${best[0]} | — | ${best[1].toFixed(1)} | 1.000 |`);
  reportRatio('plan: measured-speed split tok/s ÷ best split', direct(speedSplit) / best[1], 0.95);
} finally {
  for (const n of nodes) await n.stop();
  await link.close();
  await hub.close();
}
