/**
 * bench/spec: generation tok/s of one model through the hub with each speculation type that needs no second model
 * (`relay models set NAME --spec …`: the n-gram types) ÷ none, on two kinds of text, with the accept rates
 * llama-server reports. The model has `spectarget`'s sizes (26 layers, n_embd 256: per-token work closer to a real
 * model's than the suite's 4-layer fixtures) with every layer adding nothing to the residual stream, so its next
 * token depends on the last one alone: at temperature 0 its text soon cycles — the repetition n-gram drafting feeds
 * on, as an agent's rewrite of a file it was just given repeats that file (a random model copies no prompt). One
 * file under one name per type, so only the speculation differs.
 *  - repetitive: a code-editing prompt at temperature 0 (the text cycles);
 *  - free: a story prompt sampled at temperature 1 (seeded), which seldom repeats an n-gram.
 * Rounds interleave the types; medians. Not part of `npm test`: `npm run bench -- spec`.
 */
import { ensureSpecFixture, FIXTURES } from '../test/fixtures/models.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { llama } from '../test/helpers/llama.js';
import { NGRAM_TYPES } from '../src/main/core/llama/argv.js';
import { median } from './stats.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const MAX_TOKENS = Number(process.env.BENCH_MAX_TOKENS ?? 256);
const THREADS = process.env.BENCH_THREADS ?? '1';
const ENV = { RELAY_CONTEXT_SIZE: '2048', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: THREADS, RELAY_LOG_LEVEL: 'warn', RELAY_MAX_PLACEMENTS_PER_MODEL: '1' };
const TYPES = ['none', ...NGRAM_TYPES] as const;

const CODE = 'function add(a, b) {\n  return a + b;\n}\n\nfunction sub(a, b) {\n  return a - b;\n}\n';
const KINDS = {
  repetitive: (round: number) => ({ prompt: `// file ${round}: rename add to sum\n${CODE}\n// the same file, with add renamed to sum:\n${CODE}`, temperature: 0, top_k: 1 }),
  free: (round: number) => ({ prompt: `Story ${round}: once upon a time`, temperature: 1, seed: 1000 + round }),
} as const;
type Kind = keyof typeof KINDS;

interface Sample {
  readonly tokPerS: number;
  readonly drafted: number;
  readonly accepted: number;
  readonly text: string;
}

async function sample(url: string, model: string, kind: Kind, round: number): Promise<Sample> {
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: MAX_TOKENS, ignore_eos: true, ...KINDS[kind](round) }),
  });
  const j = (await res.json()) as { choices: { text: string }[]; usage: { completion_tokens: number }; timings: { predicted_ms: number; draft_n?: number; draft_n_accepted?: number } };
  if (!res.ok) throw new Error(`${res.status} ${JSON.stringify(j)}`);
  return { tokPerS: j.usage.completion_tokens / (j.timings.predicted_ms / 1000), drafted: j.timings.draft_n ?? 0, accepted: j.timings.draft_n_accepted ?? 0, text: j.choices[0]!.text };
}

// spectarget's sizes with every layer adding nothing to the residual: the next token depends on the last one only.
const target = ensureSpecFixture('specloop', { ...FIXTURES.spectarget, residualFrom: 0 }, { vocabDir: llama().vocabDir });
const hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '6000'] });
try {
  for (const t of TYPES) {
    await addModel(hub, { path: target, name: t });
    const r = await hub.api(`/api/models/${t}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ spec: t }) });
    if (r.status !== 200) throw new Error(`set spec ${t}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  for (const t of TYPES) await sample(hub.url, t, 'free', -1); // load and warm each placement
  const got = Object.fromEntries((Object.keys(KINDS) as Kind[]).map((k) => [k, Object.fromEntries(TYPES.map((t) => [t, [] as Sample[]]))])) as Record<Kind, Record<string, Sample[]>>;
  for (let r = 0; r < ROUNDS; r++) {
    for (const kind of Object.keys(KINDS) as Kind[]) {
      for (let k = 0; k < TYPES.length; k++) {
        const t = TYPES[(r + k) % TYPES.length]!;
        got[kind][t]!.push(await sample(hub.url, t, kind, r));
      }
    }
  }
  // At temperature 0 speculation must not change the text.
  for (let r = 0; r < ROUNDS; r++) {
    for (const t of TYPES) if (got.repetitive[t]![r]!.text !== got.repetitive.none![r]!.text) throw new Error(`round ${r}: ${t} changed the text at temperature 0`);
  }
  console.log(`\nspec: ${ROUNDS} rounds × ${MAX_TOKENS} tokens, spectarget's sizes with a next token set by the last one (26 layers, n_embd 256), ${THREADS} llama.cpp thread(s), through the hub\n`);
  console.log('| speculation | repetitive: tok/s ÷ none | accepted / drafted | free: tok/s ÷ none | accepted / drafted |');
  console.log('| --- | --- | --- | --- | --- |');
  const base = (k: Kind) => median(got[k].none!.map((s) => s.tokPerS));
  const rate = (ss: Sample[]) => {
    const d = ss.reduce((a, s) => a + s.drafted, 0);
    const a = ss.reduce((x, s) => x + s.accepted, 0);
    return d === 0 ? 'none drafted' : `${a} / ${d} (${Math.round((100 * a) / d)}%)`;
  };
  console.log(`| none | 1.00 (${base('repetitive').toFixed(0)} tok/s) | — | 1.00 (${base('free').toFixed(0)} tok/s) | — |`);
  for (const t of NGRAM_TYPES) {
    const ratio = (k: Kind) => (median(got[k][t]!.map((s) => s.tokPerS)) / base(k)).toFixed(2);
    console.log(`| ${t} | ${ratio('repetitive')} | ${rate(got.repetitive[t]!)} | ${ratio('free')} | ${rate(got.free[t]!)} |`);
  }
} finally {
  await hub.stop();
}
