import type { KvCacheType } from '../llama/argv.js';

/**
 * The spec's VRAM fit formula, exactly:
 *   KV       = kv_bytes_per_token × ctx × slots × kv_scale
 *   overhead = weights × 3% + 384 MB + KV × 5%
 *   need     = weights + KV + overhead (+ projector) (+ draft)
 * A vision model's projector runs beside the model on the same device: its weights plus an allowance for its
 * compute buffer (a quarter of its weights and 32 MB; llama-server logs its own worst case, "[mtmd] estimated
 * worst-case memory usage of mmproj", at load).
 * A draft model (speculative decoding) runs beside it too, with a context of its own as long as the target's:
 *   draft    = draft weights + draft KV + draft weights × 3% + draft KV × 5% + 64 MB (its compute buffer)
 * where draft KV = the draft's kv_bytes_per_token × ctx × slots × kv_scale (it uses the target's cache type).
 * MB here is MiB (2^20 bytes), the unit llama.cpp and NVML report in.
 */
export const KV_SCALE: Readonly<Record<KvCacheType, number>> = { f16: 1.0, q8_0: 0.5, q4_0: 0.28 };
export const FIXED_OVERHEAD_MB = 384;
export const PROJECTOR_COMPUTE_MB = 32;
export const DRAFT_COMPUTE_MB = 64;
const MIB = 1024 * 1024;

export interface FitModel {
  /** Registered required_vram_mb, when the owner gave one. */
  readonly requiredVramMb: number | null;
  readonly sizeBytes: number;
  /** From the GGUF header; null when the header gave no estimate (then KV = 0). */
  readonly kvBytesPerToken: number | null;
  /** A vision projector's file size; absent or 0: none. */
  readonly projectorBytes?: number | undefined;
  /** A draft model's file size and KV bytes per token; absent: none. */
  readonly draft?: { readonly sizeBytes: number; readonly kvBytesPerToken: number | null } | undefined;
}

export interface FitSettings {
  readonly contextSize: number;
  readonly replicaCtx: number;
  readonly parallelSlots: number;
  readonly kvCacheType: KvCacheType;
}

export interface FitBreakdown {
  readonly weightsMb: number;
  readonly kvMb: number;
  readonly overheadMb: number;
  /** The projector's weights and compute allowance; 0 for a text-only model. */
  readonly projectorMb: number;
  /** The draft model's weights, KV and overhead; 0 without one. */
  readonly draftMb: number;
  readonly needMb: number;
  readonly ctx: number;
  readonly slots: number;
  readonly kvScale: number;
  readonly kvCacheType: KvCacheType;
}

/** ctx = RELAY_CONTEXT_SIZE, or min(RELAY_REPLICA_CTX, RELAY_CONTEXT_SIZE) when RELAY_REPLICA_CTX > 0. */
export function contextPerSlot(s: Pick<FitSettings, 'contextSize' | 'replicaCtx'>): number {
  return s.replicaCtx > 0 ? Math.min(s.replicaCtx, s.contextSize) : s.contextSize;
}

/** A vision projector's part of a need: its weights and the allowance for its compute buffer (0 without one). */
export function projectorNeedMb(projectorBytes: number | undefined): number {
  return projectorBytes ? (projectorBytes / MIB) * 1.25 + PROJECTOR_COMPUTE_MB : 0;
}

export function fitNeed(m: FitModel, s: FitSettings): FitBreakdown {
  const ctx = contextPerSlot(s);
  const slots = s.parallelSlots;
  const kvScale = KV_SCALE[s.kvCacheType];
  const weightsMb = m.requiredVramMb ?? m.sizeBytes / MIB;
  const kvMb = m.kvBytesPerToken ? (m.kvBytesPerToken * ctx * slots * kvScale) / MIB : 0;
  const overheadMb = weightsMb * 0.03 + FIXED_OVERHEAD_MB + kvMb * 0.05;
  const projectorMb = projectorNeedMb(m.projectorBytes);
  const draftMb = m.draft ? draftNeedMb(m.draft, ctx * slots * kvScale) : 0;
  return { weightsMb, kvMb, overheadMb, projectorMb, draftMb, needMb: weightsMb + kvMb + overheadMb + projectorMb + draftMb, ctx, slots, kvScale, kvCacheType: s.kvCacheType };
}

/** A draft model's part of a need at `scaledTokens` = ctx × slots × kv_scale. */
function draftNeedMb(d: { sizeBytes: number; kvBytesPerToken: number | null }, scaledTokens: number): number {
  const weights = d.sizeBytes / MIB;
  const kv = ((d.kvBytesPerToken ?? 0) * scaledTokens) / MIB;
  return weights + kv + weights * 0.03 + kv * 0.05 + DRAFT_COMPUTE_MB;
}

export function fmtMb(mb: number): string {
  return `${Math.ceil(mb)} MB`;
}
