import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isRelayError } from '../../src/shared/errors.js';
import {
  chooseSpec,
  DEFAULT_NGRAM,
  JUDGE_AFTER_DRAFTED,
  MIN_ACCEPT_RATE,
  parseSpecSetting,
  refuseSpec,
  SPEC_SETTINGS,
  type SpecModel,
  type SpecSetting,
} from '../../src/main/core/scheduler/decide/speculation.js';
import { llamaServerArgv } from '../../src/main/core/llama/index.js';
import { SpecTallies } from '../../src/main/core/scheduler/run/spec-tally.js';

const plain: SpecModel & { name: string } = { name: 'm', arch: 'llama' };
const drafted = { ...plain, draft: { name: 'small' } };
const withHeads = { ...plain, arch: 'qwen35', mtp_layers: 1 };
const set = <M extends SpecModel>(m: M, spec: SpecSetting): M => ({ ...m, settings: { spec } });

describe('speculation per model: what a placement runs', () => {
  it('auto: the draft model if there is one, else next-token heads the build runs, else n-grams', () => {
    assert.equal(chooseSpec(drafted).type, 'draft-simple');
    assert.equal(chooseSpec(withHeads).type, 'draft-mtp');
    assert.equal(chooseSpec({ ...drafted, arch: 'qwen35', mtp_layers: 1 }).type, 'draft-simple', 'a named draft comes first');
    assert.equal(chooseSpec(plain).type, DEFAULT_NGRAM);
    // Heads in an architecture without an MTP graph in this llama.cpp: llama-server would not use them.
    assert.equal(chooseSpec({ ...plain, mtp_layers: 1 }).type, DEFAULT_NGRAM);
  });

  it('an explicit setting is what runs; none is none; shards draft from n-grams only', () => {
    assert.deepEqual(chooseSpec(set(drafted, 'none')), { type: null, why: 'set to none' });
    assert.equal(chooseSpec(set(drafted, 'ngram-cache')).type, 'ngram-cache');
    assert.equal(chooseSpec(set(withHeads, 'ngram')).type, DEFAULT_NGRAM);
    assert.equal(chooseSpec(set(drafted, 'draft'), { shard: true }).type, DEFAULT_NGRAM);
    assert.equal(chooseSpec(withHeads, { shard: true }).type, DEFAULT_NGRAM);
    assert.match(chooseSpec(withHeads, { shard: true }).why, /whole-model replicas only/);
    // A setting the model lost the means for (its draft taken away) falls back, and says so.
    assert.match(chooseSpec(set(plain, 'draft')).why, /no draft model: n-grams/);
    // An embedding model or a reranker drafts nothing.
    assert.deepEqual(chooseSpec({ ...plain, embedding: true }), { type: null, why: 'it generates no text' });
    assert.equal(chooseSpec({ ...plain, reranker: true }).type, null);
  });

  it('a type that does not pay is turned off once judged, under auto only; another type is judged afresh', () => {
    const poor = { type: DEFAULT_NGRAM, drafted: JUDGE_AFTER_DRAFTED, accepted: Math.floor(JUDGE_AFTER_DRAFTED * MIN_ACCEPT_RATE) - 1 };
    const off = chooseSpec(plain, { tally: poor });
    assert.equal(off.type, null);
    assert.match(off.why, /ngram-mod turned off: \d+% of 512 drafted tokens accepted \(it pays from 30%\)/);
    assert.equal(chooseSpec(plain, { tally: { ...poor, drafted: JUDGE_AFTER_DRAFTED - 1 } }).type, DEFAULT_NGRAM, 'not judged before enough drafts');
    assert.equal(chooseSpec(plain, { tally: { ...poor, accepted: Math.ceil(JUDGE_AFTER_DRAFTED * MIN_ACCEPT_RATE) } }).type, DEFAULT_NGRAM, 'pays');
    assert.equal(chooseSpec(set(plain, 'ngram-mod'), { tally: poor }).type, 'ngram-mod', "an owner's explicit type stays");
    assert.equal(chooseSpec(drafted, { tally: poor }).type, 'draft-simple', "the n-gram verdict is not the draft's");
  });

  it('bad input: an unknown type, a draft or mtp the model cannot run → a coded 400 naming what is valid', () => {
    for (const s of SPEC_SETTINGS) assert.equal(parseSpecSetting(s), s);
    for (const bad of ['ngram-fast', 'eagle', 1, true]) {
      assert.throws(
        () => parseSpecSetting(bad),
        (e: unknown) => isRelayError(e, 'INVALID_REQUEST') && /auto, none, draft, mtp, ngram, ngram-simple/.test((e as Error).message),
      );
    }
    assert.throws(
      () => refuseSpec(plain, 'draft'),
      (e: unknown) => isRelayError(e, 'INVALID_REQUEST') && /no draft model/.test((e as Error).message) && !/\bmtp\b/.test((e as Error).message),
    );
    assert.throws(() => refuseSpec(plain, 'mtp'), /no next-token \(nextn\) layers/);
    assert.throws(() => refuseSpec({ ...plain, mtp_layers: 1 }, 'mtp'), /architecture \(llama\) has no next-token graph/);
    refuseSpec(drafted, 'draft');
    refuseSpec(withHeads, 'mtp');
  });

  it('argv: --spec-type for n-grams and heads; a draft model keeps its own flags', () => {
    const base = { model: '/m.gguf', host: '127.0.0.1', port: 1, ctx: 512, slots: 1, cacheType: 'f16' as const };
    const a = llamaServerArgv({ ...base, spec: 'ngram-mod' });
    assert.equal(a[a.indexOf('--spec-type') + 1], 'ngram-mod');
    assert.deepEqual([a[a.indexOf('--spec-ngram-mod-n-max') + 1], a[a.indexOf('--spec-ngram-mod-n-min') + 1]], ['8', '1'], 'small drafts: the text stays exact');
    assert.ok(!llamaServerArgv({ ...base, spec: 'ngram-cache' }).includes('--spec-ngram-mod-n-max'));
    assert.ok(!llamaServerArgv(base).includes('--spec-type'));
    const d = llamaServerArgv({ ...base, spec: 'ngram-mod', draft: { path: '/d.gguf', max: 8, min: 0 } });
    assert.equal(d.filter((x) => x === '--spec-type').length, 1);
    assert.equal(d[d.indexOf('--spec-type') + 1], 'draft-simple');
  });

  it("the hub's tally: answers add up per model and type; a new type or changed settings start afresh; it drives the choice", () => {
    const t = new SpecTallies();
    t.add('m', null, 10, 10);
    t.add('m', 'ngram-mod', 0, 0);
    assert.equal(t.get('m'), null, 'nothing drafted: nothing counted');
    t.add('m', 'ngram-mod', 400, 40);
    t.add('m', 'ngram-mod', 200, 10);
    assert.deepEqual(t.get('m'), { type: 'ngram-mod', drafted: 600, accepted: 50 });
    assert.equal(t.choose(plain, false).type, null, '8% accepted over 600 drafted: turned off');
    t.add('m', 'draft-simple', 8, 8);
    assert.deepEqual(t.get('m'), { type: 'draft-simple', drafted: 8, accepted: 8 });
    t.forget('m');
    assert.equal(t.choose(plain, false).type, DEFAULT_NGRAM);
  });
});
