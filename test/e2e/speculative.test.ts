import assert from 'node:assert/strict';
import { readModelInfo } from '../../src/main/core/gguf/index.js';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { promisify } from 'node:util';
import { addModel, type HubProcess, pauseHubDevices, startHub } from '../helpers/hub.js';
import { fixture, llama } from '../helpers/llama.js';
import { startNode } from '../helpers/node.js';
import { argvOf } from '../helpers/proc.js';
import { GREEDY } from '../helpers/openai.js';
import { ensureSpecFixture, FIXTURES, sha256File } from '../fixtures/models.js';
import { startLlamaServer } from '../../src/main/core/llama/processes.js';

/**
 * Speculative decoding per model, on real llama-server: `deep` (the `dense` fixture plus eight layers that add
 * nothing) gets `dense` as its draft — a perfect one, every drafted token accepted — or `dense` of another seed, a
 * bad one. At temperature 0 the answers with either draft equal deep's answers without one (llama-server's own
 * answer, no hub), on the hub's replica and on a node's after the hub pushed it the draft; the fit counts the
 * draft; a draft of another vocabulary is refused when it is set.
 */
const ENV = { RELAY_CONTEXT_SIZE: '512', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const PROMPTS = ['The quick brown fox', 'Once upon a time, in a house by the sea,'];
const MIB = 1024 * 1024;
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

interface Answer {
  readonly text: string;
  readonly drafted: number;
  readonly accepted: number;
}

async function answer(baseUrl: string, model: string, prompt: string): Promise<Answer> {
  const res = await fetch(`${baseUrl}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, prompt, max_tokens: 32, ...GREEDY }),
  });
  const j = (await res.json()) as { choices: { text: string }[]; timings?: { draft_n?: number; draft_n_accepted?: number } };
  assert.equal(res.status, 200, JSON.stringify(j));
  return { text: j.choices[0]!.text, drafted: j.timings?.draft_n ?? 0, accepted: j.timings?.draft_n_accepted ?? 0 };
}

const patch = (hub: HubProcess, name: string, body: Record<string, unknown>) =>
  hub.api<{
    model: { need_mb: number; need: { draft_mb: number; ctx: number; slots: number }; draft?: { name: string; sha256: string; max: number; min: number } };
    error: { code: string; message: string };
  }>(`/api/models/${name}`, { method: 'PATCH', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('speculative decoding with a draft model', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  let want: string[];
  before(async () => {
    // The oracle: deep alone, on llama-server with no draft and no hub.
    const s = await startLlamaServer(llama(), { model: fixture('deep'), ctx: 512, slots: 1, cacheType: 'f16', threads: 1 });
    try {
      want = [];
      for (const p of PROMPTS) want.push((await answer(s.baseUrl, 'deep', p)).text);
    } finally {
      await s.child.terminate(5000);
    }
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'] });
    await addModel(hub, { path: fixture('deep'), name: 'deep' });
    await addModel(hub, { path: fixture('dense'), name: 'dense' });
    await addModel(hub, { path: fixture('dense', 2), name: 'other-dense' });
    await addModel(hub, { path: fixture('widevocab'), name: 'wide' });
  });
  after(async () => {
    await hub?.stop();
  });

  it("a draft of another vocabulary, or one that is not a generation model's, is refused when it is set", async () => {
    const r = await patch(hub, 'deep', { draft: 'wide' });
    assert.equal(r.status, 422);
    assert.equal(r.body.error.code, 'draft_vocab_mismatch');
    assert.match(r.body.error.message, /vocabularies differ/);
    const self = await patch(hub, 'deep', { draft: 'deep' });
    assert.equal(self.status, 400);
    assert.equal((await patch(hub, 'deep', { draft: 'nothing' })).body.error.code, 'model_not_found');
    assert.equal((await patch(hub, 'deep', { draft: 'dense', draft_max: 0 })).status, 400);
    // The CLI says so too, with the code.
    const cli = await promisify(execFile)(process.execPath, [relayBin, 'models', 'set', 'deep', '--draft', 'wide', '--hub', hub.url]).then(
      () => null,
      (e: { code: number; stderr: string }) => e,
    );
    assert.ok(cli && cli.code !== 0 && /draft_vocab_mismatch/.test(cli.stderr), cli?.stderr);
    assert.equal((await hub.status()).models.find((m) => m.name === 'deep')!.draft, null, 'nothing was set');
  });

  it('the fit adds the draft: its weights, its KV at the target’s context, its overhead', async () => {
    const plain = (await hub.status()).models.find((m) => m.name === 'deep')!;
    const r = await patch(hub, 'deep', { draft: 'dense' });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    const dense = (await hub.api<{ models: { name: string; size: number; kv_bytes_per_token: number }[] }>('/api/models')).body.models.find((m) => m.name === 'dense')!;
    const weights = dense.size / MIB;
    const kv = (dense.kv_bytes_per_token * r.body.model.need.ctx * r.body.model.need.slots) / MIB;
    // Its own compute buffer: 64 MB and the logits of a 512-token batch over its vocabulary.
    const logits = (readModelInfo(fixture('dense')).memory!.vocab! * 512 * 4) / MIB;
    const draftMb = weights + kv + weights * 0.03 + kv * 0.05 + 64 + logits;
    assert.equal(r.body.model.need.draft_mb, Math.ceil(draftMb));
    assert.ok(Math.abs(r.body.model.need_mb - (plain.need_mb + draftMb)) <= 1, `${r.body.model.need_mb} vs ${plain.need_mb} + ${draftMb}`);
    const d = r.body.model.draft!;
    assert.deepEqual([d.name, d.sha256, d.max, d.min], ['dense', sha256File(fixture('dense')), 8, 0], 'the defaults: up to 8 tokens a step');
  });

  /** Every prompt through the hub: the texts must be deep's alone (lossless at temperature 0, whatever the draft proposes). */
  async function askAll(): Promise<Answer[]> {
    const got: Answer[] = [];
    for (const p of PROMPTS) got.push(await answer(hub.url, 'deep', p));
    assert.deepEqual(
      got.map((a) => a.text),
      want,
    );
    return got;
  }
  const totals = (xs: Answer[]) => ({ drafted: xs.reduce((n, a) => n + a.drafted, 0), accepted: xs.reduce((n, a) => n + a.accepted, 0) });

  it("with a draft the hub's replica answers as deep alone; a perfect draft's tokens are all accepted, a bad one's not, same text", async () => {
    const perfect = await askAll();
    assert.ok(
      perfect.every((a) => a.drafted > 0 && a.accepted === a.drafted),
      JSON.stringify(perfect),
    );
    const rep = (await hub.status()).replicas.find((r) => r.model === 'deep' && r.state === 'ready')!;
    const argv = readFileSync(`/proc/${rep.pid}/cmdline`, 'utf8').split('\0');
    assert.equal(argv[argv.indexOf('--model-draft') + 1], fixture('dense'));
    // /status counts the placement's drafted and accepted tokens: how well the draft does.
    assert.deepEqual(rep.draft_tokens, totals(perfect));

    assert.equal((await patch(hub, 'deep', { draft: 'other-dense', draft_max: 4 })).status, 200);
    const bad = await askAll();
    assert.ok(
      bad.every((a) => a.drafted > 0 && a.accepted < a.drafted),
      JSON.stringify(bad),
    );
    const badRep = (await hub.status()).replicas.find((r) => r.model === 'deep' && r.state === 'ready')!;
    assert.deepEqual(badRep.draft_tokens, totals(bad));
    assert.equal((await patch(hub, 'deep', { draft: 'dense', draft_max: 8 })).status, 200);
  });

  it("on a node: the hub pushes the draft with the model, the node's replica drafts from its cached copy, same text", async () => {
    const node = await startNode(hub, { name: 'n1', cpuBudgetMb: 2000, env: ENV });
    try {
      await pauseHubDevices(hub);
      const got = await askAll();
      assert.ok(
        got.every((a) => a.drafted > 0 && a.accepted === a.drafted),
        JSON.stringify(got),
      );
      const rep = (await hub.status()).replicas.find((r) => r.model === 'deep')!;
      assert.equal(rep.node, 'n1');
      const draftSha = sha256File(fixture('dense'));
      const cached = join(node.home, 'cache', 'models', `${draftSha}.gguf`);
      const argv = readFileSync(`/proc/${rep.pid}/cmdline`, 'utf8').split('\0');
      assert.equal(argv[argv.indexOf('--model-draft') + 1], cached, "the node's replica reads its cached draft");
      assert.equal(sha256File(cached), draftSha, 'the pushed draft hashes to what the hub registered');
    } finally {
      await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: false }) });
      await node.stop();
    }
  });

  it('a draft that does not pay is turned off under auto: /status says why, and the next start runs without it', async () => {
    assert.equal((await patch(hub, 'deep', { draft: 'other-dense', draft_max: 8 })).status, 200);
    let drafted = 0;
    for (let i = 0; drafted < 512; i++) drafted += (await answer(hub.url, 'deep', PROMPTS[i % PROMPTS.length]!)).drafted;
    const spec = (await hub.status()).models.find((m) => m.name === 'deep')!.spec;
    assert.equal(spec.type, null);
    assert.match(spec.why, /^draft-simple turned off: 0% of \d+ drafted tokens accepted \(it pays from 30%\)$/);
    // The running replica keeps its draft until it stops (here: an Ollama client's unload); the next one runs without.
    const unload = await fetch(`${hub.url}/api/generate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'deep', keep_alive: 0 }) });
    assert.equal(unload.status, 200);
    const again = await answer(hub.url, 'deep', PROMPTS[0]!);
    assert.deepEqual([again.text, again.drafted], [want[0], 0]);
    const rep = (await hub.status()).replicas.find((r) => r.model === 'deep' && r.state === 'ready')!;
    assert.deepEqual([rep.spec, rep.spec_why], [null, spec.why]);
    assert.ok(!readFileSync(`/proc/${rep.pid}/cmdline`, 'utf8').split('\0').includes('--model-draft'));
    // An owner who wants it anyway says so: an explicit type is never turned off.
    assert.equal((await patch(hub, 'deep', { spec: 'draft' })).status, 200);
    assert.equal((await hub.status()).models.find((m) => m.name === 'deep')!.spec.type, 'draft-simple');
  });
});

/**
 * Speculation without a second model (`relay models set NAME --spec …`, auto by default): n-grams of the prompt and
 * the answer. `loop` has dense's sizes with every layer adding nothing, so its next token depends on the last one
 * alone and its text at temperature 0 cycles within a few hundred tokens — what ngram-mod drafts from (an agent's rewrite of a file it was
 * just given repeats the same way). The text with speculation equals the text without, on the hub and on a node.
 */
describe('speculation without a draft model: n-grams, chosen by auto', { timeout: 600_000 }, () => {
  let hub: HubProcess;
  const loop = ensureSpecFixture('loop', { ...FIXTURES.dense, residualFrom: 0 }, { vocabDir: llama().vocabDir });
  const ask = (model: string) =>
    fetch(`${hub.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, prompt: 'Once upon a time', max_tokens: 1000, ...GREEDY }),
    }).then(async (r) => {
      const j = (await r.json()) as { choices: { text: string }[]; timings?: { draft_n?: number; draft_n_accepted?: number } };
      assert.equal(r.status, 200, JSON.stringify(j));
      return { text: j.choices[0]!.text, drafted: j.timings?.draft_n ?? 0, accepted: j.timings?.draft_n_accepted ?? 0 };
    });
  before(async () => {
    hub = await startHub({ env: ENV, args: ['--cpu-budget-mb', '2000'] });
    await addModel(hub, { path: loop, name: 'loop' });
    await addModel(hub, { path: loop, name: 'loop-plain' });
    // Its text cycles within a few hundred tokens: room for a thousand.
    assert.equal((await patch(hub, 'loop-plain', { spec: 'none', context_size: 1536 })).status, 200);
    assert.equal((await patch(hub, 'loop', { context_size: 1536 })).status, 200);
  });
  after(async () => {
    await hub?.stop();
  });

  it('auto drafts from n-grams (ngram-mod): the same text as without, drafts accepted; /status says what runs and why', async () => {
    const plain = await ask('loop-plain');
    const drafted = await ask('loop');
    assert.equal(drafted.text, plain.text);
    assert.equal(plain.drafted, 0);
    assert.ok(drafted.accepted > 0, JSON.stringify(drafted));
    const st = await hub.status();
    const shown = st.models.find((m) => m.name === 'loop')!.spec;
    assert.deepEqual([shown.setting, shown.type, shown.tally?.type, shown.tally?.accepted], ['auto', 'ngram-mod', 'ngram-mod', drafted.accepted]);
    assert.match(shown.why, /no draft model or next-token heads/);
    assert.deepEqual(st.models.find((m) => m.name === 'loop-plain')!.spec.type, null);
    const rep = st.replicas.find((r) => r.model === 'loop')!;
    assert.deepEqual([rep.spec, rep.draft_tokens], ['ngram-mod', { drafted: drafted.drafted, accepted: drafted.accepted }]);
    const argv = argvOf(rep.pid!);
    assert.equal(argv[argv.indexOf('--spec-type') + 1], 'ngram-mod');
    assert.ok(!argvOf(st.replicas.find((r) => r.model === 'loop-plain')!.pid!).includes('--spec-type'));
  });

  it('bad input: an unknown type, mtp without heads, draft without a draft model → 400 naming what is valid; nothing changes', async () => {
    const unknown = await patch(hub, 'loop', { spec: 'eagle' });
    assert.deepEqual([unknown.status, unknown.body.error.code], [400, 'invalid_request']);
    assert.match(unknown.body.error.message, /auto, none, draft, mtp, ngram, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod, ngram-cache/);
    const mtp = await patch(hub, 'loop', { spec: 'mtp' });
    assert.equal(mtp.status, 400);
    assert.match(mtp.body.error.message, /no next-token \(nextn\) layers; choose auto, none, ngram/);
    const cli = await promisify(execFile)(process.execPath, [relayBin, 'models', 'set', 'loop', '--spec', 'draft', '--hub', hub.url]).then(
      () => null,
      (e: { code: number; stderr: string }) => e,
    );
    assert.ok(cli && cli.code === 1 && /has no draft model/.test(cli.stderr), cli?.stderr);
    assert.equal((await hub.status()).models.find((m) => m.name === 'loop')!.spec.setting, 'auto', 'nothing was set');
  });

  it("a node's replica runs the same n-gram speculation (start-replica's specType): the same text", async () => {
    const want = (await ask('loop-plain')).text;
    assert.equal((await patch(hub, 'loop', { spec: 'ngram-mod' })).status, 200);
    const node = await startNode(hub, { name: 'n1', cpuBudgetMb: 2000, env: ENV });
    try {
      await pauseHubDevices(hub);
      const got = await ask('loop');
      assert.equal(got.text, want);
      assert.ok(got.accepted > 0, JSON.stringify(got));
      const rep = (await hub.status()).replicas.find((r) => r.model === 'loop')!;
      assert.deepEqual([rep.node, rep.spec, rep.spec_why], ['n1', 'ngram-mod', 'set to ngram-mod']);
      const argv = argvOf(rep.pid!);
      assert.equal(argv[argv.indexOf('--spec-type') + 1], 'ngram-mod');
    } finally {
      await hub.api('/api/hub/availability', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ paused: false }) });
      await node.stop();
    }
  });
});
