/**
 * bench/speculative: generation tok/s through the hub of one target model without a draft, with a draft that
 * predicts it perfectly, and with one that predicts it badly, interleaved round by round; medians. The honest
 * pair: `spectarget` is `specdraft` (2 layers, n_embd 256) plus 24 layers whose output projections are zero —
 * they cost time and change nothing, so the draft's guesses are the target's own; `specdraft` of another seed
 * shares the vocabulary and guesses wrong. All three are the same file under three names, so only the draft
 * differs. Not part of `npm test`: run `npm run bench -- speculative`.
 */
import { ensureFixture } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { reportRatio } from './targets.js';
import { median } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 128);
const THREADS = process.env.BENCH_THREADS ?? '1';
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: THREADS, RELAY_LOG_LEVEL: 'warn' };

const vocab = { vocabDir: llama().vocabDir };
const target = ensureFixture('spectarget', vocab);
const good = ensureFixture('specdraft', vocab);
const bad = ensureFixture('specdraft', { ...vocab, seed: 2 });

interface Sample {
  readonly tokPerS: number;
  readonly text: string;
  readonly accepted: number;
  readonly drafted: number;
}

/** One completion; llama-server's own generation speed and draft counts from its timings. */
async function sample(url: string, model: string, round: number): Promise<Sample> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt: `Story ${round}: once upon a time`, max_tokens: MAX_TOKENS, temperature: 0, top_k: 1, seed: 1, ignore_eos: true }),
  });
  const j = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number }; timings: { predicted_ms: number; draft_n?: number; draft_n_accepted?: number } };
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(j)}`);
  return { tokPerS: j.usage.completion_tokens / (j.timings.predicted_ms / 1000), text: j.choices[0]!.text, drafted: j.timings.draft_n ?? 0, accepted: j.timings.draft_n_accepted ?? 0 };
}

const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '4000'] });
try {
  for (const [name, path] of [
    ['plain', target],
    ['drafted', target],
    ['misdrafted', target],
    ['good-draft', good],
    ['bad-draft', bad],
  ] as const) {
    await addModel(hub, { path, name });
  }
  for (const [name, draft] of [
    ['drafted', 'good-draft'],
    ['misdrafted', 'bad-draft'],
  ] as const) {
    const r = await hub.api(`/api/models/${name}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ draft }) });
    if (r.status !== 200) throw new Error(`set draft: ${r.status} ${JSON.stringify(r.body)}`);
  }
  const names = ['plain', 'drafted', 'misdrafted'] as const;
  for (const n of names) await sample(hub.url, n, -1); // load each placement, warm
  const got: Record<string, Sample[]> = { plain: [], drafted: [], misdrafted: [] };
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < names.length; k++) {
      const n = names[(r + k) % names.length]!;
      got[n]!.push(await sample(hub.url, n, r));
    }
  }
  for (let r = 0; r < ROUNDS; r++) {
    if (got.drafted![r]!.text !== got.plain![r]!.text || got.misdrafted![r]!.text !== got.plain![r]!.text) throw new Error(`round ${r}: a draft changed the text at temperature 0`);
  }
  const plain = median(got.plain!.map((s) => s.tokPerS));
  const acceptance = (ss: Sample[]): string => `${ss.reduce((a, s) => a + s.accepted, 0)} / ${ss.reduce((a, s) => a + s.drafted, 0)}`;
  console.log(
    `\nspeculative: ${ROUNDS} rounds × ${MAX_TOKENS} tokens, spectarget (26 layers, 24 of them adding nothing), ${THREADS} llama.cpp thread(s), through the hub; the same text with and without a draft\n`,
  );
  console.log('| draft | generation tok/s (median) | ÷ no draft | drafted tokens accepted |');
  console.log('| --- | --- | --- | --- |');
  console.log(`| none | ${plain.toFixed(1)} | 1.00 | — |`);
  for (const [n, label] of [
    ['drafted', 'specdraft (predicts it perfectly)'],
    ['misdrafted', 'specdraft seed 2 (predicts it badly)'],
  ] as const) {
    const v = median(got[n]!.map((s) => s.tokPerS));
    console.log(`| ${label} | ${v.toFixed(1)} | ${(v / plain).toFixed(2)} | ${acceptance(got[n]!)} |`);
  }
  reportRatio('speculative: a draft that predicts the target ÷ no draft (generation tok/s)', median(got.drafted!.map((s) => s.tokPerS)) / plain, 1.2);
} finally {
  await hub.stop();
}
