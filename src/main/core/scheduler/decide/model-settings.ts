import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { KV_CACHE_TYPES, type FlashAttn, type KvCacheType } from '../../llama/argv.js';
import type { ModelRecord, ModelSettings } from '../../store/store.js';
import { contextPerSlot, type FitSettings } from './fit.js';
import { parseSpecSetting } from './speculation.js';

export type { ModelSettings } from '../../store/store.js';

/**
 * A model's own llama-server settings, over the pool-wide ones (RELAY_CONTEXT_SIZE, RELAY_PARALLEL_SLOTS,
 * RELAY_KV_CACHE_TYPE, RELAY_FLASH_ATTN): a 32k context for one model, 1 slot for a big one. Every use of
 * those settings for a model goes through `settingsFor`: the fit, the 503 message, /status and every
 * llama-server launched for it (host replica, node replica, shard head), so they cannot disagree. The context per slot
 * is capped at the one the GGUF was trained for (`<arch>.context_length`), as llama-server caps it: relay reserves and
 * reports what a slot can use (contextCapNote says so where more was asked).
 */
export function settingsFor<C extends FitSettings & { readonly flashAttn?: FlashAttn | undefined }>(c: C, m: ModelOfSettings | undefined): C {
  const own = ownSettings(c, m);
  const train = m?.context_length;
  // llama-server caps each slot at the training context (n_ctx_slot): what is asked beyond it is never used.
  return train && contextPerSlot(own) > train ? { ...own, contextSize: train, replicaCtx: 0 } : own;
}

/** What a model's settings are read from: its own, and the context its GGUF was trained for. */
export type ModelOfSettings = { readonly settings?: ModelSettings | undefined; readonly context_length?: number | null | undefined };

/**
 * Where the context asked for a model (its own, or the pool's) is more than its GGUF was trained for, the sentence
 * that says so (the CLI, the dashboard, /status); null where it is not.
 */
export function contextCapNote(c: FitSettings, m: ModelOfSettings | undefined): string | null {
  const asked = contextPerSlot(ownSettings(c, m));
  const train = m?.context_length;
  if (!train || asked <= train) return null;
  return `a context of ${asked} tokens was asked, but the model was trained for ${train}: each slot gets ${train} (llama-server's cap), and only that is reserved`;
}

/** The model's own settings over the pool's, before the training context's cap. */
function ownSettings<C extends FitSettings & { readonly flashAttn?: FlashAttn | undefined }>(c: C, m: ModelOfSettings | undefined): C {
  const s = m?.settings;
  if (!s) return c;
  return {
    ...c,
    // A model's own ctx is what it gets (RELAY_REPLICA_CTX caps the pool-wide default only).
    ...(s.ctx !== undefined ? { contextSize: s.ctx, replicaCtx: 0 } : {}),
    ...(s.slots !== undefined ? { parallelSlots: s.slots } : {}),
    ...(s.kv_cache_type !== undefined ? { kvCacheType: s.kv_cache_type } : {}),
    ...(s.flash_attn !== undefined
      ? { flashAttn: s.flash_attn }
      : // A model's own quantized cache needs flash attention: a pool-wide "off" does not carry over to it.
        s.kv_cache_type !== undefined && s.kv_cache_type !== 'f16' && c.flashAttn === 'off'
        ? { flashAttn: undefined }
        : {}),
  };
}

export function sameSettings(a: ModelSettings | undefined, b: ModelSettings | undefined): boolean {
  const k = (s: ModelSettings | undefined) => JSON.stringify([s?.ctx, s?.slots, s?.kv_cache_type, s?.flash_attn, s?.max_tokens, s?.spec]);
  return k(a) === k(b);
}

/** The API body's fields that are a model's own settings (applySettings reads them). */
export const SETTING_FIELDS = ['context_size', 'parallel_slots', 'kv_cache_type', 'flash_attn', 'max_tokens', 'spec'] as const;

/** Whether an API body sets any of a model's own settings. */
export const setsSettings = (body: Record<string, unknown>): boolean => SETTING_FIELDS.some((k) => body[k] !== undefined);

/**
 * Settings from an API body: `context_size`, `parallel_slots`, `kv_cache_type`, `flash_attn`, `max_tokens`, `spec`; a field left out
 * is unchanged, `null` goes back to the pool-wide default. Applied to `prev` (a model's current settings).
 */
export function applySettings(prev: ModelSettings | undefined, body: Record<string, unknown>): ModelSettings {
  const out: ModelSettings = { ...prev };
  const int = (key: string, field: 'ctx' | 'slots' | 'max_tokens', min: number, max: number): void => {
    const v = body[key];
    if (v === undefined) return;
    if (v === null) return void delete out[field];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new RelayError(ErrorCode.INVALID_REQUEST, `${key} must be a whole number from ${min} to ${max}, or null for the pool's default; got ${JSON.stringify(v)}`);
    }
    out[field] = v;
  };
  int('context_size', 'ctx', 256, 1_048_576);
  int('parallel_slots', 'slots', 1, 64);
  int('max_tokens', 'max_tokens', 1, 1_048_576);
  if (body.spec === null) delete out.spec;
  else if (body.spec !== undefined) out.spec = parseSpecSetting(body.spec);
  const kv = body.kv_cache_type;
  if (kv === null) delete out.kv_cache_type;
  else if (kv !== undefined) {
    if (!(KV_CACHE_TYPES as readonly unknown[]).includes(kv))
      throw new RelayError(ErrorCode.INVALID_REQUEST, `kv_cache_type must be one of ${KV_CACHE_TYPES.join(', ')}, or null; got ${JSON.stringify(kv)}`);
    out.kv_cache_type = kv as KvCacheType;
  }
  const fa = body.flash_attn;
  if (fa === null) delete out.flash_attn;
  else if (fa !== undefined) {
    if (fa !== 'on' && fa !== 'off' && fa !== 'auto') throw new RelayError(ErrorCode.INVALID_REQUEST, `flash_attn must be on, off or auto, or null; got ${JSON.stringify(fa)}`);
    out.flash_attn = fa;
  }
  if (out.flash_attn === 'off' && out.kv_cache_type !== undefined && out.kv_cache_type !== 'f16') {
    throw new RelayError(ErrorCode.INVALID_REQUEST, `a ${out.kv_cache_type} KV cache needs flash attention: llama-server refuses a quantized V cache with flash_attn off`);
  }
  return out;
}

/** OpenAI-style embeddings need a pooled vector: a header without a pooling type gets mean pooling. */
export function poolingFor(model: ModelRecord): 'mean' | null {
  return model.embedding && (model.pooling_type === null || model.pooling_type === undefined) ? 'mean' : null;
}
