/**
 * bench/migrate: an answer whose node is paused mid-way moves to the other node (hub/continuation.ts). A hub that
 * runs nothing and two nodes, `wordy` (4 layers) on each; per history length (the words of the user's message), a
 * streamed chat answer of 1,000 tokens whose node is paused after its 8th. Prints, medians over runs: the longest wait
 * between two tokens the client saw at the move, the usual wait between two tokens of the same answer, the prompt
 * tokens of the continuation's prompt (the history and the 8 tokens, evaluated again where the other node's slot did not
 * hold them: the KV does not travel yet), and whether the
 * other node already had the model running (else the wait includes starting it). `npm run bench -- migrate`.
 */
import { performance } from 'node:perf_hooks';
import { ensureFixture } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { startNode, type NodeProcess } from '../test/helpers/node.js';
import { until } from '../test/helpers/proc.js';
import { sseData } from './sse.js';
import { median } from './stats.js';

const RUNS = Number(process.env.BENCH_ROUNDS ?? 3);
const ANSWER = 1000;
const HISTORIES = [500, 4000];
const ENV = { RELAY_CONTEXT_SIZE: '8192', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'warn' };
const WORDS = 'the sea rose over the harbour wall while the boats waited for the tide to turn and the light to go'.split(' ');

const hub = await startHub({ env: ENV });
const nodes: NodeProcess[] = [await startNode(hub, { name: 'n1', cpuBudgetMb: 2000, env: ENV }), await startNode(hub, { name: 'n2', cpuBudgetMb: 2000, env: ENV })];
await addModel(hub, { path: ensureFixture('wordy', { vocabDir: llama().vocabDir }), name: 'm' });

interface Run {
  readonly moveGapMs: number;
  readonly tokenGapMs: number;
  readonly evaluated: number;
  readonly warm: boolean;
}

/** Two answers at once: with one slot each, the model runs on both nodes (the move's target is then warm). */
async function warmBoth(): Promise<void> {
  const ask = (): Promise<unknown> =>
    fetch(`${hub.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 200 }),
    }).then((r) => r.text());
  await Promise.all([ask(), ask()]);
}

async function run(words: number): Promise<Run> {
  await warmBoth();
  const content = Array.from({ length: words }, (_, i) => WORDS[i % WORDS.length]).join(' ');
  const res = await fetch(`${hub.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: ANSWER, temperature: 0, top_k: 1, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || !res.body) throw new Error(`${res.status} ${await res.text()}`);
  const gaps: number[] = [];
  let last = 0;
  let n = 0;
  let warm = false;
  let paused: NodeProcess | null = null;
  for await (const ev of sseData(res)) {
    const c = (ev as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content;
    if (!c) continue;
    const now = performance.now();
    if (last > 0) gaps.push(now - last);
    last = now;
    if (++n !== 8) continue;
    const s = await hub.status();
    const rep = s.replicas.find((r) => r.state === 'ready' && r.model === 'm' && r.in_flight > 0)!;
    warm = s.replicas.some((r) => r.state === 'ready' && r.model === 'm' && r.node !== rep.node);
    paused = nodes.find((x) => x.name === rep.node)!;
    await paused.local('/pause', 'POST');
  }
  // The move's wait is the answer's longest (tokens the client had not read yet at the pause come at once after it).
  const moveGap = Math.max(...gaps);
  gaps.splice(gaps.indexOf(moveGap), 1);
  if (!paused) throw new Error('the answer ended before the pause');
  await paused.local('/resume', 'POST');
  await until(
    async () => (await hub.status()).nodes,
    (ns) => ns.every((x) => x.state !== 'paused'),
  );
  const move = (await hub.status()).moves[0]!;
  if (move.outcome !== 'continued') throw new Error(`the answer did not move: ${move.detail ?? ''}`);
  // The continuation's prompt: the history and what was sent.
  const recent = (await hub.status()).recent.find((r) => r.moves === 1)!;
  return { moveGapMs: moveGap, tokenGapMs: median(gaps), evaluated: (recent.prompt_tokens ?? 0) + move.sent_tokens, warm };
}

try {
  const rows: string[] = [];
  for (const words of HISTORIES) {
    const runs: Run[] = [];
    for (let i = 0; i < RUNS; i++) runs.push(await run(words));
    const gap = median(runs.map((r) => r.moveGapMs));
    const token = median(runs.map((r) => r.tokenGapMs));
    rows.push(
      `| ${words} words | ${gap.toFixed(0)} ms | ${token.toFixed(1)} ms | ${(gap / token).toFixed(0)}× | ${median(runs.map((r) => r.evaluated))} | ${runs.filter((r) => r.warm).length} of ${runs.length} |`,
    );
  }
  console.log('\n| history | longest wait at the move (p50) | wait between tokens (p50) | ratio | the continuation’s prompt (tokens) | the other node already running |');
  console.log('|---|---|---|---|---|---|');
  for (const r of rows) console.log(r);
} finally {
  for (const n of nodes) await n.stop();
  await hub.stop();
}
