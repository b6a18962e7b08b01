import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { NGRAM_TYPES, SPEC_SETTINGS, type NgramType, type SpecSetting, type SpecType } from '../../llama/argv.js';

export { NGRAM_TYPES, SPEC_SETTINGS, type NgramType, type SpecSetting, type SpecType };

/**
 * Speculative decoding per model, pure: which `--spec-type` a placement of a model runs with. llama-server drafts
 * tokens and verifies them in one batch; a draft that is right saves a step, one that is wrong costs a little.
 * Three sources (LLAMA-NOTES, common/speculative.cpp of the pinned build):
 *  - `draft`: a second, smaller model of the same vocabulary (`relay models set NAME --draft SMALL`), draft-simple;
 *  - `mtp`: the model's own next-token heads (`blk.N.nextn.*`, e.g. Qwen3.5, GLM-4.5, DeepSeek V3), draft-mtp;
 *  - `ngram-*`: no model at all — tokens that followed the same n-gram earlier in the prompt or the answer (code an
 *    agent rewrites, a document quoted back).
 */
/** The n-gram type `ngram` and `auto` mean: the one of the five that drafted, and paid, in bench/spec (docs/benchmarks.md). */
export const DEFAULT_NGRAM: NgramType = 'ngram-mod';

/**
 * Architectures whose next-token heads the pinned llama.cpp runs as draft-mtp (src/models/*.cpp with an MTP graph).
 * A GGUF of another architecture may carry such tensors; llama-server would not use them.
 */
export const MTP_ARCHS: ReadonlySet<string> = new Set([
  'bailingmoe3',
  'cohere2moe',
  'deepseek2',
  'deepseek32',
  'deepseek4',
  'glm-dsa',
  'glm4moe',
  'hy_v3',
  'mimo2',
  'nemotron_h_moe',
  'qwen35',
  'qwen35moe',
  'qwen3next',
  'step35',
]);

/**
 * Judging whether a type pays: after this many drafted tokens, a model whose drafts are accepted less often than
 * MIN_ACCEPT_RATE runs without speculation from its next start. Where the line is (bench/spec, docs/benchmarks.md):
 * relay's ngram-mod drafts up to 8 tokens, and on the bench's CPU such a draft is verified in about the time of 2.3
 * single steps (3.98× with every draft accepted), so a draft pays from about 16% of it accepted; 30% leaves room.
 */
export const JUDGE_AFTER_DRAFTED = 512;
export const MIN_ACCEPT_RATE = 0.3;

/** What the choice reads of a model. */
export interface SpecModel {
  readonly arch: string | null;
  readonly draft?: unknown;
  /** Next-token layers in the GGUF (`<arch>.nextn_predict_layers` with `blk.{last}.nextn.eh_proj`); 0/absent: none. */
  readonly mtp_layers?: number | undefined;
  readonly settings?: { readonly spec?: SpecSetting | undefined } | undefined;
  /** An embedding model or a reranker generates no text: nothing to draft. */
  readonly embedding?: boolean | undefined;
  readonly reranker?: boolean | undefined;
}

/** What the model's placements drafted and had accepted, with the type they ran (a different type starts afresh). */
export interface SpecTally {
  readonly type: SpecType;
  readonly drafted: number;
  readonly accepted: number;
}

export interface SpecChoice {
  readonly type: SpecType | null;
  /** Why, in a few words (for /status). */
  readonly why: string;
}

export const hasMtp = (m: SpecModel): boolean => (m.mtp_layers ?? 0) > 0 && m.arch !== null && MTP_ARCHS.has(m.arch);

/**
 * The type a placement of `m` runs with. `shard`: a pipeline across machines, where a draft model or next-token
 * heads would have to be split too — shards draft from n-grams only. `tally`: what earlier placements measured.
 */
export function chooseSpec(m: SpecModel, opts: { shard?: boolean; tally?: SpecTally | null } = {}): SpecChoice {
  const setting = m.settings?.spec ?? 'auto';
  if (setting === 'none') return { type: null, why: 'set to none' };
  if (m.embedding || m.reranker) return { type: null, why: 'it generates no text' };
  const wanted = wantedSpec(m, setting, opts.shard ?? false);
  // Only what relay chose by itself is turned off by measurement: an owner's explicit type stays.
  const verdict = setting === 'auto' && opts.tally && opts.tally.type === wanted.type ? judge(opts.tally) : null;
  return verdict === null ? wanted : { type: null, why: verdict };
}

function wantedSpec(m: SpecModel, setting: Exclude<SpecSetting, 'none'>, shard: boolean): SpecChoice {
  const ngram: SpecChoice = { type: DEFAULT_NGRAM, why: 'n-grams of the prompt and the answer' };
  const explicit = NGRAM_TYPES.find((t) => t === setting);
  if (explicit) return { type: explicit, why: `set to ${explicit}` };
  if (setting === 'ngram') return ngram;
  if (setting === 'draft' || (setting === 'auto' && m.draft)) {
    if (!m.draft) return { ...ngram, why: 'set to draft, but it has no draft model: n-grams' };
    return shard ? { ...ngram, why: 'a shard drafts from n-grams (a draft model runs beside whole-model replicas only)' } : { type: 'draft-simple', why: 'its draft model' };
  }
  if (setting === 'mtp' || (setting === 'auto' && hasMtp(m))) {
    if (!hasMtp(m)) return { ...ngram, why: 'set to mtp, but it has no next-token heads this build runs: n-grams' };
    return shard ? { ...ngram, why: 'a shard drafts from n-grams (next-token heads run in whole-model replicas only)' } : { type: 'draft-mtp', why: 'its next-token heads' };
  }
  return { ...ngram, why: 'no draft model or next-token heads: n-grams of the prompt and the answer' };
}

/** A sentence when a tally shows its type does not pay; null while it pays or is not yet judged. */
export function judge(t: SpecTally): string | null {
  if (t.drafted < JUDGE_AFTER_DRAFTED) return null;
  const rate = t.accepted / t.drafted;
  if (rate >= MIN_ACCEPT_RATE) return null;
  return `${t.type} turned off: ${Math.round(rate * 100)}% of ${t.drafted} drafted tokens accepted (it pays from ${Math.round(MIN_ACCEPT_RATE * 100)}%)`;
}

/** Pure: a spec setting from an API body's value; unknown ones are refused naming the valid ones. */
export function parseSpecSetting(v: unknown): SpecSetting {
  if (typeof v === 'string' && (SPEC_SETTINGS as readonly string[]).includes(v)) return v as SpecSetting;
  throw new RelayError(ErrorCode.INVALID_REQUEST, `spec must be one of ${SPEC_SETTINGS.join(', ')}, or null for auto; got ${JSON.stringify(v)}`);
}

/** A setting this model cannot run: `draft` without a draft model, `mtp` without heads the build runs. */
export function refuseSpec(m: SpecModel & { readonly name: string }, setting: SpecSetting): void {
  if (setting === 'draft' && !m.draft) {
    throw new RelayError(ErrorCode.INVALID_REQUEST, `"${m.name}" has no draft model: set one with --draft MODEL, or choose ${validFor(m).join(', ')}`);
  }
  if (setting === 'mtp' && !hasMtp(m)) {
    const why = (m.mtp_layers ?? 0) > 0 ? `its architecture (${m.arch}) has no next-token graph in this llama.cpp` : 'its GGUF has no next-token (nextn) layers';
    throw new RelayError(ErrorCode.INVALID_REQUEST, `"${m.name}" cannot draft with mtp: ${why}; choose ${validFor(m).join(', ')}`);
  }
}

function validFor(m: SpecModel): string[] {
  return SPEC_SETTINGS.filter((s) => (s !== 'draft' || m.draft) && (s !== 'mtp' || hasMtp(m)));
}
