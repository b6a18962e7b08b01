/**
 * bench/scale: aggregate generation tok/s of one model served by 1, 2 and 3 placements (the hub and two nodes,
 * one llama.cpp thread each) with as many concurrent clients, in one run: each round runs the three batch
 * sizes in a rotating order so machine noise hits them alike; medians. Prints placements ÷ 1-placement, and
 * the same for k llama-servers started directly (the machine's own ceiling: k processes share its cores and
 * memory bandwidth whatever relay does), interleaved in the same rounds.
 * Not part of `npm test`: run `npm run bench -- scale`.
 */
import { performance } from 'node:perf_hooks';
import { startLlamaServer } from '../src/main/core/llama/index.js';
import { ensureFixture, type FixtureName } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { startNode } from '../test/helpers/node.js';
import { median } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 192);
const MODEL = (process.env.BENCH_MODEL ?? 'large') as FixtureName;
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'warn' };

/** One streaming completion: the tokens it generated. */
async function generate(url: string, prompt: string, model = 'm'): Promise<number> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: MAX_TOKENS, temperature: 0, top_k: 1, seed: 1, ignore_eos: true }),
  });
  const j = (await res.json()) as { usage?: { completion_tokens: number }; error?: unknown };
  if (!res.ok || !j.usage) throw new Error(`${res.status} ${JSON.stringify(j)}`);
  return j.usage.completion_tokens;
}

/** k concurrent clients (client i to urls[i], or all to one hub): total generated tokens ÷ wall time. */
async function batch(urls: readonly string[], k: number, round: number): Promise<number> {
  const t0 = performance.now();
  const tokens = await Promise.all(Array.from({ length: k }, (_, i) => generate(urls[i % urls.length]!, `Story ${round}-${i}: once upon a time`)));
  return tokens.reduce((a, b) => a + b, 0) / ((performance.now() - t0) / 1000);
}

const path = ensureFixture(MODEL, { vocabDir: llama().vocabDir });
// Each machine's budget holds one replica of the model and not two: three placements, one per machine.
const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '800'] });
const nodes = [await startNode(hub, { name: 'n1', cpuBudgetMb: 800, env: ENV }), await startNode(hub, { name: 'n2', cpuBudgetMb: 800, env: ENV })];
const direct = await Promise.all([0, 1, 2].map(() => startLlamaServer(llama(), { model: path, ctx: 512, slots: 1, cacheType: 'f16', threads: 1 })));
try {
  await addModel(hub, { path, name: 'm', required_vram_mb: 300 });
  // Warm up: concurrent requests until the hub and both nodes hold a ready placement.
  for (let i = 0; i < 10; i++) {
    await batch([hub.url], 3, -1);
    const ready = (await hub.status()).replicas.filter((r) => r.model === 'm' && r.state === 'ready');
    if (ready.length === 3) break;
  }
  const placements = (await hub.status()).replicas.filter((r) => r.state === 'ready').length;
  if (placements !== 3) throw new Error(`expected 3 placements after warm-up, got ${placements}`);
  const directUrls = direct.map((d) => d.baseUrl);
  await batch(directUrls, 3, -1);
  const relay: Record<number, number[]> = { 1: [], 2: [], 3: [] };
  const own: Record<number, number[]> = { 1: [], 2: [], 3: [] };
  for (let r = 0; r < ROUNDS; r++) {
    const order = [
      [1, 2, 3],
      [2, 3, 1],
      [3, 1, 2],
    ][r % 3]!;
    for (const k of order) {
      const pair = r % 2 === 0 ? (['relay', 'direct'] as const) : (['direct', 'relay'] as const);
      for (const which of pair) {
        if (which === 'relay') relay[k]!.push(await batch([hub.url], k, r));
        else own[k]!.push(await batch(directUrls, k, r));
      }
    }
  }
  const one = median(relay[1]!);
  const oneDirect = median(own[1]!);
  console.log(`\nscale: ${ROUNDS} rounds, model ${MODEL}, ${MAX_TOKENS} tokens per client, 1 llama.cpp thread per placement, ${placements} placements (hub, n1, n2)\n`);
  console.log('| placements (= concurrent clients) | relay aggregate tok/s (median) | relay ÷ 1 placement | k direct llama-servers tok/s | direct ÷ 1 server |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const k of [1, 2, 3]) {
    console.log(`| ${k} | ${median(relay[k]!).toFixed(1)} | ${(median(relay[k]!) / one).toFixed(2)} | ${median(own[k]!).toFixed(1)} | ${(median(own[k]!) / oneDirect).toFixed(2)} |`);
  }
} finally {
  for (const d of direct) await d.child.terminate(5000);
  for (const n of nodes) await n.stop();
  await hub.stop();
}
