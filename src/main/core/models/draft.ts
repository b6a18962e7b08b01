import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { readVocabOffThread, type Vocab } from '../gguf/index.js';
import type { DraftRecord, ModelRecord } from '../store/store.js';
import { modelFiles } from './files.js';

/**
 * A draft model for speculative decoding: a small model of the same vocabulary that proposes the next few
 * tokens, which the target checks in one batch (lossless at temperature 0). Set per target model
 * (`relay models set NAME --draft OTHER`); every whole-model placement of the target loads it beside it.
 */

/** Tokens drafted per step at most and at least, unless the owner says otherwise (measured: LLAMA-NOTES). */
export const DRAFT_MAX_DEFAULT = 8;
export const DRAFT_MIN_DEFAULT = 0;
const DRAFT_MAX_LIMIT = 64;

/** llama.cpp's common_speculative_are_compatible: vocabulary sizes at most this far apart… */
const VOCAB_MAX_SIZE_DIFFERENCE = 128;
/** …and every token's text the same from this id on (the first few are often special tokens that differ). */
const VOCAB_CHECK_START_TOKEN_ID = 5;

/**
 * Pure: why `draft`'s tokens cannot stand for `target`'s, as llama.cpp decides it (the same tokenizer type,
 * BOS/EOS ids and flags, vocabulary sizes within 128, the same text for every token from id 5 on), or null.
 */
export function vocabMismatch(target: Vocab, draft: Vocab): string | null {
  if (target.tokens.length === 0 || draft.tokens.length === 0) return 'one of them has no tokenizer.ggml.tokens';
  if (target.model !== draft.model) return `tokenizer ${JSON.stringify(draft.model)} vs ${JSON.stringify(target.model)}`;
  for (const k of ['bos', 'eos', 'addBos', 'addEos'] as const) {
    if (target[k] !== draft[k]) return `${k} ${String(draft[k])} vs ${String(target[k])}`;
  }
  const diff = Math.abs(target.tokens.length - draft.tokens.length);
  if (diff > VOCAB_MAX_SIZE_DIFFERENCE) return `${draft.tokens.length} tokens vs ${target.tokens.length}`;
  const n = Math.min(target.tokens.length, draft.tokens.length);
  for (let i = VOCAB_CHECK_START_TOKEN_ID; i < n; i++) {
    if (target.tokens[i] !== draft.tokens[i]) return `token ${i} is ${JSON.stringify(draft.tokens[i])} vs ${JSON.stringify(target.tokens[i])}`;
  }
  return null;
}

/** Tokens per step as a request gives them (checked here: integers in range; absent or null: as before or the default). */
export interface DraftCounts {
  readonly max?: unknown;
  readonly min?: unknown;
}

function count(v: unknown, fallback: number, min: number, max: number, what: string): number {
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
    throw new RelayError(ErrorCode.INVALID_REQUEST, `${what} must be an integer from ${min} to ${max}, got ${JSON.stringify(v)}`);
  return v;
}

/** `draft` as `target`'s draft model: checked (a generation model of one file, the same vocabulary), recorded as its file is now. */
export async function describeDraft(target: ModelRecord, draft: ModelRecord, opts: DraftCounts = {}): Promise<DraftRecord> {
  const refuse = (why: string): never => {
    throw new RelayError(ErrorCode.INVALID_REQUEST, `"${draft.name}" cannot be the draft of "${target.name}": ${why}`, { model: target.name, draft: draft.name });
  };
  if (draft.name === target.name) refuse('a model cannot draft for itself');
  if (target.embedding || target.reranker) refuse(`"${target.name}" does not generate text`);
  if (draft.embedding || draft.reranker) refuse('it does not generate text');
  if (modelFiles(draft).length > 1) refuse('it is a split GGUF; a draft is one file (llama-server loads it with --model-draft)');
  const max = count(opts.max, DRAFT_MAX_DEFAULT, 1, DRAFT_MAX_LIMIT, 'draft_max');
  const min = count(opts.min, DRAFT_MIN_DEFAULT, 0, max, 'draft_min');
  const why = vocabMismatch(...(await Promise.all([readVocabOffThread(target.path), readVocabOffThread(draft.path)])));
  if (why) {
    throw new RelayError(ErrorCode.DRAFT_VOCAB_MISMATCH, `"${draft.name}" cannot draft for "${target.name}": their vocabularies differ (${why}); a draft must share the target's tokenizer`, {
      model: target.name,
      draft: draft.name,
    });
  }
  return {
    name: draft.name,
    path: draft.path,
    sha256: draft.sha256,
    size: draft.size,
    mtimeMs: draft.mtimeMs,
    kv_bytes_per_token: draft.kv_bytes_per_token,
    ...(draft.memory !== undefined ? { memory: draft.memory } : {}),
    max,
    min,
  };
}
