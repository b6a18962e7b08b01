/**
 * bench/share: a household sharing one model (issue #54). A hub serving a 2-slot model from its own CPU; four
 * background clients (agents: one key each, class background) stream long answers back to back; one interactive
 * client (a person: its own key) asks a short question every few seconds. Per round, four phases of the same length:
 * - idle: the person alone — its time to first token (TTFT) on an idle pool;
 * - background alone: the four agents alone — their total generated tokens/s;
 * - priorities on: all five with their keys — the person goes first, an agent's answer yields its slot;
 * - priorities off (what relay did before: one FIFO queue): all five with the hub's one shared key, so every request
 *   is alike and waits in arrival order.
 * Prints the person's TTFT p50 and p95 ÷ idle (goal ≤ 1.5) and the agents' tokens/s ÷ background alone (goal ≥ 0.8),
 * with priorities on and off. `npm run bench -- share`.
 */
import { performance } from 'node:perf_hooks';
import { ensureFixture, type FixtureName } from '../test/fixtures/models.js';
import { addModel, startHub, type HubProcess } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { sseData } from './sse.js';
import { percentile } from './stats.js';
import { reportTarget } from './targets.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2);
const ASKS = Number(process.env.BENCH_ASKS ?? 10);
const ASK_EVERY_MS = Number(process.env.BENCH_ASK_EVERY_MS ?? 2500);
const AGENT_TOKENS = Number(process.env.BENCH_AGENT_TOKENS ?? 400);
const MODEL = (process.env.BENCH_MODEL ?? 'large') as FixtureName;
const SHARED_KEY = 'relay-bench-shared-key';
const ENV = { RELAY_CONTEXT_SIZE: '2048', RELAY_PARALLEL_SLOTS: '2', RELAY_THREADS: '2', RELAY_LOG_LEVEL: 'warn', RELAY_MAX_PLACEMENTS_PER_MODEL: '1', RELAY_API_KEY: SHARED_KEY };
const QUESTIONS = ['Is the kitchen light on?', 'What is on the shopping list?', 'When does the bus come?', 'Is it going to rain today?'];

/** One streamed chat answer with `key`: when its first and each content token came, relative to `t0`. */
async function ask(hub: HubProcess, key: string, content: string, maxTokens: number, onToken: () => void = () => undefined, stop?: AbortSignal): Promise<{ ttftMs: number; tokens: number }> {
  const t0 = performance.now();
  const res = await fetch(`${hub.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: maxTokens, temperature: 0, top_k: 1, ignore_eos: true, stream: true }),
    ...(stop ? { signal: stop } : {}),
  });
  if (!res.ok || !res.body) throw new Error(`${res.status} ${await res.text()}`);
  let ttftMs = NaN;
  let tokens = 0;
  for await (const ev of sseData(res)) {
    if (!(ev as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content) continue;
    if (tokens++ === 0) ttftMs = performance.now() - t0;
    onToken();
  }
  return { ttftMs, tokens };
}

/** The person: ASKS questions, one every ASK_EVERY_MS; their TTFTs. */
async function person(hub: HubProcess, key: string): Promise<number[]> {
  const ttfts: number[] = [];
  for (let i = 0; i < ASKS; i++) {
    const t = performance.now();
    ttfts.push((await ask(hub, key, QUESTIONS[i % QUESTIONS.length]!, 8)).ttftMs);
    await new Promise((r) => setTimeout(r, Math.max(0, ASK_EVERY_MS - (performance.now() - t))));
  }
  return ttfts;
}

/** Four agents streaming answers back to back for `ms`: their tokens per second over that time. */
async function agents(hub: HubProcess, keys: readonly string[], ms: number, alongside: Promise<unknown> = Promise.resolve()): Promise<number> {
  const stop = new AbortController();
  let tokens = 0;
  const t0 = performance.now();
  const loops = keys.map(async (key, i) => {
    for (let n = 0; !stop.signal.aborted; n++) {
      await ask(hub, key, `Agent ${i}, task ${n}: write the whole report about the garden, the sea and the town.`, AGENT_TOKENS, () => void tokens++, stop.signal).catch((err: unknown) => {
        if (!stop.signal.aborted) throw err;
      });
    }
  });
  await Promise.all([new Promise((r) => setTimeout(r, ms)), alongside]);
  const perSecond = tokens / ((performance.now() - t0) / 1000);
  stop.abort();
  await Promise.all(loops);
  return perSecond;
}

const newKey = async (hub: HubProcess, name: string, priority: string): Promise<string> =>
  (await hub.api<{ key: string }>('/api/keys', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ name, priority }) })).body.key;

const path = ensureFixture(MODEL, { vocabDir: llama().vocabDir });
const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'] });
try {
  await addModel(hub, { path, name: 'm' });
  const me = await newKey(hub, 'person', 'interactive');
  const bots = [await newKey(hub, 'agent-1', 'background'), await newKey(hub, 'agent-2', 'background'), await newKey(hub, 'agent-3', 'background'), await newKey(hub, 'agent-4', 'background')];
  const phaseMs = ASKS * ASK_EVERY_MS;
  await ask(hub, me, 'Warm up.', 8);
  const idle: number[] = [];
  const on: number[] = [];
  const off: number[] = [];
  const rate = { alone: [] as number[], on: [] as number[], off: [] as number[] };
  for (let r = 0; r < ROUNDS; r++) {
    idle.push(...(await person(hub, me)));
    rate.alone.push(await agents(hub, bots, phaseMs));
    // Priorities on and off in alternating order, so the machine's drift hits both alike.
    for (const mode of r % 2 === 0 ? (['on', 'off'] as const) : (['off', 'on'] as const)) {
      const asked = new Promise<number[]>((resolve) => setTimeout(() => resolve(person(hub, mode === 'on' ? me : SHARED_KEY)), ASK_EVERY_MS / 2));
      rate[mode].push(await agents(hub, mode === 'on' ? bots : bots.map(() => SHARED_KEY), phaseMs, asked));
      (mode === 'on' ? on : off).push(...(await asked));
    }
  }
  const status = await hub.status();
  const yields = status.api_keys.filter((k) => k.name.startsWith('agent-')).reduce((n, k) => n + k.today.yields, 0);
  const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / xs.length;
  const p = (xs: number[], q: number): number => percentile(xs, q);
  console.log(
    `\nshare: model ${MODEL}, 2 slots, 2 threads; 4 agents streaming ${AGENT_TOKENS}-token answers back to back; a person asking every ${ASK_EVERY_MS} ms, ${ASKS} asks × ${ROUNDS} rounds per phase; ${yields} yields\n`,
  );
  console.log("| phase | person's TTFT p50 ms | p95 ms | p50 ÷ idle | p95 ÷ idle | agents' tok/s | ÷ agents alone |");
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  const alone = mean(rate.alone);
  console.log(`| idle pool | ${p(idle, 50).toFixed(0)} | ${p(idle, 95).toFixed(0)} | 1 | 1 | — | — |`);
  console.log(`| agents alone | — | — | — | — | ${alone.toFixed(1)} | 1 |`);
  for (const [mode, ttfts] of [
    ['priorities on', on],
    ['priorities off (FIFO)', off],
  ] as const) {
    const tok = mean(mode === 'priorities on' ? rate.on : rate.off);
    console.log(
      `| ${mode} | ${p(ttfts, 50).toFixed(0)} | ${p(ttfts, 95).toFixed(0)} | ${(p(ttfts, 50) / p(idle, 50)).toFixed(2)} | ${(p(ttfts, 95) / p(idle, 95)).toFixed(2)} | ${tok.toFixed(1)} | ${(tok / alone).toFixed(2)} |`,
    );
  }
  const ratio50 = p(on, 50) / p(idle, 50);
  const ratio95 = p(on, 95) / p(idle, 95);
  reportTarget("share: a person's TTFT among 4 agents ÷ on an idle pool, p50 / p95", `${ratio50.toFixed(2)} / ${ratio95.toFixed(2)}`, '≤ 1.5', ratio50 <= 1.5 && ratio95 <= 1.5);
  reportTarget("share: the agents' tok/s with a person asking ÷ alone", (mean(rate.on) / alone).toFixed(3), '≥ 0.8', mean(rate.on) / alone >= 0.8);
} finally {
  await hub.stop();
}
