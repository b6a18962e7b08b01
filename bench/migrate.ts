/**
 * bench/migrate: answers and conversations that move when the machine serving them is paused (hub/proxy/moved.ts,
 * scheduler/slots/slot-carry.ts). A hub that serves from its own CPU and one node, `wordy` (4 layers, 1 thread, one
 * slot) on them, a user message of 500 or 4,000 words; the hub's own devices are paused under the answer (a node's
 * KV goes back to that node only — docs/security.md —, so the hub's is the state that can go with an answer). Three
 * measurements, medians over runs, with kept slots on (RELAY_SLOT_KEEP_MB) and off:
 * - an answer of 1,000 tokens whose machine is paused after its 8th token, the model running nowhere else: the node
 *   starts it, with the answer's KV read back when it is carried. The client's longest wait between two tokens, the
 *   usual wait, and the tokens the continuation evaluated of its prompt (the history and the sent answer);
 * - the same with the model already running on the node (its one slot reads the state in);
 * - between turns: a conversation's next turn after its machine was paused, its time to first token ÷ the same
 *   turn's on the placement that never stopped.
 * `npm run bench -- migrate`.
 */
import { performance } from 'node:perf_hooks';
import { ensureFixture } from '../test/fixtures/models.js';
import { addModel, startHub, type HubProcess } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { startNode, type NodeProcess } from '../test/helpers/node.js';
import { until } from '../test/helpers/proc.js';
import { sseData } from './sse.js';
import { median } from './stats.js';

const RUNS = Number(process.env.BENCH_ROUNDS ?? 3);
const ANSWER = 1000;
const HISTORIES = [500, 4000];
const ENV = { RELAY_CONTEXT_SIZE: '8192', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1', RELAY_LOG_LEVEL: 'warn', RELAY_KEEP_ALIVE_MS: '1500' };
const WORDS = 'the sea rose over the harbour wall while the boats waited for the tide to turn and the light to go'.split(' ');
const model = ensureFixture('wordy', { vocabDir: llama().vocabDir });

interface Pool {
  readonly hub: HubProcess;
  readonly nodes: NodeProcess[];
}

type Message = { role: string; content: string };

/** One streamed chat turn; `onToken(n)` after each content token. Its text, usage, token times. */
async function turn(p: Pool, messages: Message[], maxTokens: number, onToken?: (n: number) => Promise<void>) {
  const t0 = performance.now();
  const res = await fetch(`${p.hub.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages, max_tokens: maxTokens, temperature: 0, top_k: 1, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok || !res.body) throw new Error(`${res.status} ${await res.text()}`);
  const times: number[] = [];
  let text = '';
  for await (const ev of sseData(res)) {
    const c = (ev as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content;
    if (!c) continue;
    times.push(performance.now());
    text += c;
    await onToken?.(times.length);
  }
  return { text, ttftMs: times[0]! - t0, times };
}

/** The hub's own devices paused (the answer streams from its replica); resumed by the returned function. */
async function pauseServing(p: Pool): Promise<() => Promise<void>> {
  const rep = (await p.hub.status()).replicas.find((r) => r.state === 'ready' && r.model === 'm' && r.in_flight > 0) ?? (await p.hub.status()).replicas.find((r) => r.model === 'm')!;
  if (rep.node !== null) throw new Error(`the answer streams from node ${rep.node}, not from the hub's replica`);
  const hubPaused = (paused: boolean): Promise<unknown> => p.hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused }) });
  await hubPaused(true);
  return async () => {
    await hubPaused(false);
  };
}

const idle = (p: Pool): Promise<unknown> =>
  until(
    async () => (await p.hub.status()).replicas,
    (rs) => rs.length === 0,
    60_000,
  );

/** Two answers at once: with one slot each, the model runs on the hub and the node. */
async function runBoth(p: Pool): Promise<void> {
  const ask = (): Promise<unknown> => turn(p, [{ role: 'user', content: 'hi' }], 100);
  await Promise.all([ask(), ask()]);
}

/**
 * A history of `words` words, its opening new each time: no placement holds a conversation of it (a node that kept
 * one would draw its next placement there, to read its KV back), so its first placement is the hub's own replica.
 */
let histories = 0;
const history = (words: number): string => `Letter ${++histories}: ${Array.from({ length: words }, (_, i) => WORDS[i % WORDS.length]).join(' ')}`;

/** An answer paused after its 8th token: the longest wait, the usual one, and what the continuation evaluated. */
async function movedAnswer(p: Pool, words: number, warmOther: boolean) {
  if (warmOther) await runBoth(p);
  else await idle(p);
  let resume: (() => Promise<void>) | null = null;
  const t = await turn(p, [{ role: 'user', content: history(words) }], ANSWER, async (n) => {
    if (n === 8) resume = await pauseServing(p);
  });
  const gaps = t.times.slice(1).map((x, i) => x - t.times[i]!);
  const moveGap = Math.max(...gaps);
  gaps.splice(gaps.indexOf(moveGap), 1);
  await (resume as (() => Promise<void>) | null)?.();
  const m = (await p.hub.status()).moves[0]!;
  if (m.outcome !== 'continued') throw new Error(`the answer did not move: ${m.detail ?? ''}`);
  const prompt = (await p.hub.status()).recent.find((r) => r.moves === 1)!.prompt_tokens! + m.sent_tokens;
  return { moveGap, tokenGap: median(gaps), evaluated: prompt - (m.cached_tokens ?? 0), prompt };
}

/** A conversation's second turn on the hub's replica, then the hub paused: the third turn's TTFT ÷ the second's. */
async function movedTurn(p: Pool, words: number): Promise<number> {
  await idle(p);
  const messages: Message[] = [{ role: 'user', content: history(words) }];
  for (const q of ['and then?', 'and after that?']) {
    messages.push({ role: 'assistant', content: (await turn(p, messages, 16)).text }, { role: 'user', content: q });
  }
  const warm = await turn(p, messages, 16); // the placement that never stopped: the history cached
  const resume = await pauseServing(p);
  await until(
    async () => (await p.hub.status()).replicas,
    (rs) => rs.length === 0,
  );
  const moved = await turn(p, messages, 16); // the node, the same turn
  await resume();
  return moved.ttftMs / warm.ttftMs;
}

const rows: string[] = [];
for (const keepMb of ['4096', '0']) {
  const hub = await startHub({ env: { ...ENV, RELAY_SLOT_KEEP_MB: keepMb }, args: ['--cpu-budget-mb', '2000'] });
  const pool: Pool = { hub, nodes: [await startNode(hub, { name: 'n1', cpuBudgetMb: 2000, env: ENV })] };
  const carried = keepMb === '0' ? 'off' : 'on';
  try {
    await addModel(hub, { path: model, name: 'm' });
    for (const words of HISTORIES) {
      for (const warmOther of [false, true]) {
        const runs = [];
        for (let i = 0; i < RUNS; i++) runs.push(await movedAnswer(pool, words, warmOther));
        const gap = median(runs.map((r) => r.moveGap));
        rows.push(
          `| ${words} words | answer, to ${warmOther ? 'a running placement' : 'a new placement'} | ${carried} | ${gap.toFixed(0)} ms (${median(runs.map((r) => r.tokenGap)).toFixed(1)} ms between tokens) | ${median(runs.map((r) => r.evaluated))} of ${median(runs.map((r) => r.prompt))} | |`,
        );
      }
      const ratios = [];
      for (let i = 0; i < RUNS; i++) ratios.push(await movedTurn(pool, words));
      rows.push(`| ${words} words | next turn, to a new placement | ${carried} | | | ${median(ratios).toFixed(2)} |`);
    }
  } finally {
    for (const n of pool.nodes) await n.stop();
    await hub.stop();
  }
}
console.log('\n| history | what moved | kept slots | longest wait at the move (p50) | prompt tokens the continuation evaluated (p50) | next turn TTFT ÷ warm (p50) |');
console.log('|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
