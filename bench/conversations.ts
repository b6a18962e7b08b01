/**
 * bench/conversations: N chat conversations of T turns each, going on at once (each person sends a turn, reads
 * the answer, sends the next), over 1, 2 and 3 one-slot placements (the hub, n1, n2), once with least-loaded
 * routing (RELAY_PREFIX_ROUTING=0) and once with prefix-aware routing. A long shared system prompt and short
 * turns, as chat clients and coding agents send them: every turn resends the whole conversation. Prints the
 * share of prompt tokens llama-server found cached, the prompt tokens evaluated ÷ the minimum (each first turn
 * whole, then only what each turn added), and TTFT p50 of the turns after the first ÷ one person alone on one
 * warm llama-server. Not part of `npm test`: run `npm run bench -- conversations`.
 */
import { performance } from 'node:perf_hooks';
import { startLlamaServer } from '../src/main/core/llama/index.js';
import { ensureFixture, type FixtureName } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { startNode } from '../test/helpers/node.js';
import { sseData } from './sse.js';
import { reportTarget } from './targets.js';
import { median } from './stats.js';

const PEOPLE = Number(process.env.BENCH_CONVERSATIONS ?? 3);
/** How long a person reads an answer before the next turn (person i starts i × THINK_MS ÷ PEOPLE in). */
const THINK_MS = Number(process.env.BENCH_THINK_MS ?? 300);
const TURNS = Number(process.env.BENCH_TURNS ?? 6);
const MODEL = (process.env.BENCH_MODEL ?? 'large') as FixtureName;
const CTX = 2048;
const ENV = { RELAY_CONTEXT_SIZE: String(CTX), RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'warn' };
const SYSTEM = `You are the household's assistant. ${'Answer in plain words, keep to the point, say when you do not know, and never make up facts about the house, the garden or the people in it. '.repeat(16)}`;

interface Turn {
  readonly ttftMs: number;
  readonly prompt: number;
  readonly cached: number;
}

/** One streamed chat turn: time to the first content, and llama-server's prompt and cached token counts. */
async function turn(url: string, messages: readonly { role: string; content: string }[]): Promise<Turn & { text: string }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages, max_tokens: 16, temperature: 0, top_k: 1, seed: 1, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || !res.body) throw new Error(`${res.status} ${await res.text()}`);
  let first = 0;
  let text = '';
  type Usage = { prompt_tokens: number; prompt_tokens_details?: { cached_tokens?: number } };
  let usage = null as Usage | null;
  for await (const ev of sseData(res)) {
    const j = ev as { choices?: { delta?: { content?: string } }[]; usage?: Usage };
    const c = j.choices?.[0]?.delta?.content;
    if (c) {
      if (first === 0) first = performance.now();
      text += c;
    }
    if (j.usage) usage = j.usage;
  }
  if (!usage) throw new Error('no usage in the stream');
  return { ttftMs: (first || performance.now()) - t0, prompt: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0, text };
}

const pause = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One person's conversation, turn after turn, reading each answer for `think` ms. */
async function converse(url: string, who: number, think = 0): Promise<Turn[]> {
  const messages = [{ role: 'system', content: SYSTEM }];
  const out: Turn[] = [];
  await pause((who * think) / PEOPLE);
  for (let t = 0; t < TURNS; t++) {
    if (t > 0) await pause(think);
    messages.push({ role: 'user', content: `Person ${who}, question ${t}: what should I plant in row ${t + who}?` });
    const r = await turn(url, messages);
    messages.push({ role: 'assistant', content: r.text });
    out.push(r);
  }
  return out;
}

interface Result {
  readonly cachedShare: number;
  readonly overMinimum: number;
  readonly ttftP50: number;
}

function summarize(convs: Turn[][]): Result {
  const all = convs.flat();
  const prompt = all.reduce((s, x) => s + x.prompt, 0);
  const cached = all.reduce((s, x) => s + x.cached, 0);
  const minimum = convs.reduce((s, c) => s + c[0]!.prompt + c.slice(1).reduce((n, x, t) => n + x.prompt - c[t]!.prompt, 0), 0);
  return { cachedShare: cached / prompt, overMinimum: (prompt - cached) / minimum, ttftP50: median(convs.flatMap((c) => c.slice(1).map((x) => x.ttftMs))) };
}

const path = ensureFixture(MODEL, { vocabDir: llama().vocabDir });

/** A hub and `placements - 1` nodes, one 1-slot placement each, warm; the conversations through it. */
async function pooled(placements: number, prefix: boolean): Promise<Result> {
  const env = { ...ENV, RELAY_PREFIX_ROUTING: prefix ? '1' : '0' };
  const hub = await startHub({ env, args: ['--cpu-budget-mb', '1200'] });
  const nodes = [];
  try {
    for (let i = 1; i < placements; i++) nodes.push(await startNode(hub, { name: `n${i}`, cpuBudgetMb: 1200, env }));
    await addModel(hub, { path, name: 'm', required_vram_mb: 300 });
    // Warm up with prompts of token ids (nothing to route by) until every machine holds a ready placement.
    const warm = (): Promise<Response> =>
      fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', prompt: [1, 2, 3], max_tokens: 32 }) });
    for (let i = 0; i < 20; i++) {
      await Promise.all(Array.from({ length: placements + 1 }, warm));
      if ((await hub.status()).replicas.filter((r) => r.state === 'ready').length === placements) break;
    }
    const ready = (await hub.status()).replicas.filter((r) => r.state === 'ready').length;
    if (ready !== placements) throw new Error(`expected ${placements} placements after warm-up, got ${ready}`);
    return summarize(await Promise.all(Array.from({ length: PEOPLE }, (_, who) => converse(hub.url, who, THINK_MS))));
  } finally {
    for (const n of nodes) await n.stop();
    await hub.stop();
  }
}

// The reference: one person alone on one warm llama-server.
const direct = await startLlamaServer(llama(), { model: path, ctx: CTX, slots: 1, cacheType: 'f16', threads: 1 });
let alone: Result;
try {
  await turn(direct.baseUrl, [{ role: 'user', content: 'Warm up.' }]);
  alone = summarize([await converse(direct.baseUrl, 0, THINK_MS)]);
} finally {
  await direct.child.terminate(5000);
}

const rows: { placements: number; routing: string; r: Result }[] = [];
for (const placements of [1, 2, 3]) {
  for (const prefix of [false, true]) rows.push({ placements, routing: prefix ? 'prefix' : 'least loaded', r: await pooled(placements, prefix) });
}

console.log(
  `\nconversations: ${PEOPLE} people at once × ${TURNS} turns, ${THINK_MS} ms reading each answer, model ${MODEL}, 1-slot placements, 1 llama.cpp thread each, a ${SYSTEM.length}-character system prompt\n`,
);
console.log('| placements | routing | prompt tokens cached | evaluated ÷ minimum | TTFT p50, turns 2+ (ms) | ÷ one person on one llama-server |');
console.log('| --- | --- | --- | --- | --- | --- |');
console.log(`| direct llama-server, one person | — | ${(alone.cachedShare * 100).toFixed(0)} % | ${alone.overMinimum.toFixed(2)} | ${alone.ttftP50.toFixed(1)} | 1.00 |`);
for (const { placements, routing, r } of rows) {
  console.log(`| ${placements} | ${routing} | ${(r.cachedShare * 100).toFixed(0)} % | ${r.overMinimum.toFixed(2)} | ${r.ttftP50.toFixed(1)} | ${(r.ttftP50 / alone.ttftP50).toFixed(2)} |`);
}
const best = rows.find((x) => x.placements === 3 && x.routing === 'prefix')!.r;
reportTarget('conversations, 3 placements, prefix routing: prompt evaluated ÷ minimum', best.overMinimum.toFixed(2), '≤ 1.2', best.overMinimum <= 1.2);
reportTarget(`conversations, 3 placements, prefix routing: TTFT p50 ÷ one person alone`, (best.ttftP50 / alone.ttftP50).toFixed(2), '≤ 1.2', best.ttftP50 / alone.ttftP50 <= 1.2);
