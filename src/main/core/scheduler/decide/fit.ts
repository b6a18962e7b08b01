import type { MemoryLayout } from '../../gguf/memory.js';
import { effectiveFlashAttn, type FlashAttn, type KvCacheType } from '../../llama/argv.js';

/**
 * The VRAM a placement needs. The spec's formula, kept in its shape:
 *   KV       = kv_bytes_per_token × ctx × slots × kv_scale            (from the GGUF header)
 *   overhead = weights × 3% + 384 MB + KV × 5%
 *   need     = weights + KV + overhead (+ projector) (+ draft)
 * with the KV term read per layer as llama.cpp allocates it (gguf/memory.ts): a sliding-window layer holds
 * min(ctx, window + ubatch) tokens per slot (llama.cpp pads cells to 256), an MLA layer its compressed latent and
 * no V, a recurrent layer nothing per token.
 *
 * Measured additions (each held against published llama.cpp load logs, test/fixtures/fit-logs.json):
 *   state    = recurrent state floats × slots × 4 bytes (always f32)
 *   blocks   = the quantized cache's block scales: q8_0 is 34/64 of f16, not the spec's 0.5 (q4_0 18/64, not 0.28)
 *   compute  = logits (n_vocab × ubatch × 4 bytes) beyond the 128 MB the fixed 384 MB holds + without flash attention the attention scores and their mask
 *              (cells per slot × ubatch × (heads + 1) × 4 bytes), both in llama.cpp's compute buffer; with a
 *              micro-batch above llama-server's 512 (relay never sets one) the fixed 384 MB grows in proportion;
 *              flash attention over a quantized cache adds f16 copies of one layer's K and V
 * A vision model's projector runs beside the model on the same device: its weights plus an allowance for its
 * compute buffer (a quarter of its weights and 32 MB; llama-server logs its own worst case at load).
 * A draft model (speculative decoding) runs beside it too, with a context of its own as long as the target's:
 *   draft    = draft weights + draft KV + draft weights × 3% + draft KV × 5% + 64 MB + its own logits (and scores)
 * MB here is MiB (2^20 bytes), the unit llama.cpp and NVML report in.
 */
export const KV_SCALE: Readonly<Record<KvCacheType, number>> = { f16: 1.0, q8_0: 0.5, q4_0: 0.28 };
/** Bytes per element of each cache type ÷ f16's: ggml's block layouts (q8_0: 32 values in 34 bytes, q4_0 in 18). */
export const KV_ROW_SCALE: Readonly<Record<KvCacheType, number>> = { f16: 1.0, q8_0: 34 / 64, q4_0: 18 / 64 };
export const FIXED_OVERHEAD_MB = 384;
export const PROJECTOR_COMPUTE_MB = 32;
export const DRAFT_COMPUTE_MB = 64;
/** llama-server's default micro-batch (relay never changes it): the compute buffer is reserved for this many tokens. */
export const UBATCH = 512;
/**
 * The logits the spec's fixed 384 MB already holds: up to 128 MB at a 512-token micro-batch (a 64k vocabulary).
 * Checked against the published load logs (test/fixtures/fit-logs.json): with it every complete log stays covered
 * (1.02× of what it allocated at least); a larger vocabulary's logits beyond it are counted.
 */
export const LOGITS_IN_OVERHEAD_MB = 128;
/** llama.cpp rounds every cache to a multiple of 256 cells. */
const CELL_PAD = 256;
const MIB = 1024 * 1024;

export interface FitModel {
  /** Registered required_vram_mb, when the owner gave one. */
  readonly requiredVramMb: number | null;
  readonly sizeBytes: number;
  /** f16 K+V bytes per token of the layers that keep every token; null when the header gave no estimate (then KV = 0). */
  readonly kvBytesPerToken: number | null;
  /** The per-layer layout (gguf/memory.ts); absent on records made before relay read it: every layer keeps every token. */
  readonly memory?: MemoryLayout | null | undefined;
  /** A vision projector's file size; absent or 0: none. */
  readonly projectorBytes?: number | undefined;
  /** A draft model's file size, KV bytes per token and layout; absent: none. */
  readonly draft?: { readonly sizeBytes: number; readonly kvBytesPerToken: number | null; readonly memory?: MemoryLayout | null | undefined } | undefined;
}

export interface FitSettings {
  readonly contextSize: number;
  readonly replicaCtx: number;
  readonly parallelSlots: number;
  readonly kvCacheType: KvCacheType;
  /** The flag llama-server gets (argv.ts effectiveFlashAttn); absent: relay's default for the cache type. */
  readonly flashAttn?: FlashAttn | undefined;
  /**
   * What `auto` resolves to where the placement runs. llama.cpp turns it on when every device runs the attention
   * of its own layers (CUDA, Metal, Vulkan, the CPU and rpc devices all do for the usual head sizes); a load
   * that logged "Flash Attention not supported" makes it false for that model and device.
   */
  readonly autoFlashAttn?: boolean | undefined;
  /** Micro-batch; llama-server's default 512 when absent. */
  readonly ubatch?: number | undefined;
  /** llama-server's --swa-full (relay never passes it): sliding layers keep the whole context too. */
  readonly swaFull?: boolean | undefined;
}

export interface FitBreakdown {
  readonly weightsMb: number;
  /** The spec's KV term: every layer's cache at kv_scale (sliding layers at their window). */
  readonly kvMb: number;
  /** Of kvMb, the sliding-window layers' part (0 without any). */
  readonly kvWindowMb: number;
  /** Recurrent state (Mamba, RWKV and hybrid layers), f32 per slot: a measured addition. */
  readonly stateMb: number;
  /** The quantized cache's block scales beyond kv_scale: a measured addition (0 for f16). */
  readonly blocksMb: number;
  readonly overheadMb: number;
  /** llama.cpp's compute buffer beyond the spec's overhead: logits, and attention scores without flash attention. */
  readonly computeMb: number;
  /** The projector's weights and compute allowance; 0 for a text-only model. */
  readonly projectorMb: number;
  /** The draft model's weights, KV and overhead; 0 without one. */
  readonly draftMb: number;
  readonly needMb: number;
  readonly ctx: number;
  readonly slots: number;
  readonly kvScale: number;
  readonly kvCacheType: KvCacheType;
  /** Whether the fit counts flash attention on (no scores buffer). */
  readonly flashAttn: boolean;
}

/** ctx = RELAY_CONTEXT_SIZE, or min(RELAY_REPLICA_CTX, RELAY_CONTEXT_SIZE) when RELAY_REPLICA_CTX > 0. */
export function contextPerSlot(s: Pick<FitSettings, 'contextSize' | 'replicaCtx'>): number {
  return s.replicaCtx > 0 ? Math.min(s.replicaCtx, s.contextSize) : s.contextSize;
}

/** A vision projector's part of a need: its weights and the allowance for its compute buffer (0 without one). */
export function projectorNeedMb(projectorBytes: number | undefined): number {
  return projectorBytes ? (projectorBytes / MIB) * 1.25 + PROJECTOR_COMPUTE_MB : 0;
}

/** Whether the placement runs with flash attention, as the fit counts it. */
export function flashAttnOn(s: Pick<FitSettings, 'kvCacheType' | 'flashAttn' | 'autoFlashAttn'>): boolean {
  const fa = effectiveFlashAttn(s.kvCacheType, s.flashAttn);
  return fa === 'on' || (fa === 'auto' && s.autoFlashAttn !== false);
}

const pad = (n: number): number => Math.ceil(n / CELL_PAD) * CELL_PAD;

/** Cells of each slot's cache: full layers and sliding layers (llama_kv_cache_iswa, relay's one stream per slot). */
export function cellsPerSlot(ctx: number, window: number, ubatch: number): { full: number; window: number } {
  const full = pad(ctx);
  return { full, window: window > 0 ? Math.min(full, pad(window + ubatch)) : full };
}

/** Layers [from, to) of a model: their KV bytes at f16 (split full / sliding) and recurrent state bytes, per slot. */
export interface LayerBytes {
  readonly fullF16: number;
  readonly windowF16: number;
  readonly state: number;
  /** Whether any of these layers attends (it then has a scores buffer without flash attention). */
  readonly attends: boolean;
}

export function layerBytes(m: Pick<FitModel, 'kvBytesPerToken' | 'memory'>, ctx: number, ubatch: number, range?: { from: number; to: number; of: number }, swaFull = false): LayerBytes {
  const mem = m.memory;
  const from = range?.from ?? 0;
  const to = range?.to ?? Infinity;
  if (!mem) {
    // A record without a layout: the spec's plain formula, every layer keeping every token, shared evenly by layer.
    const share = range ? (Math.min(range.to, range.of) - range.from) / range.of : 1;
    return { fullF16: (m.kvBytesPerToken ?? 0) * pad(ctx) * share, windowF16: 0, state: 0, attends: share > 0 };
  }
  const cells = cellsPerSlot(ctx, swaFull ? 0 : mem.window, ubatch);
  let fullF16 = 0;
  let windowF16 = 0;
  let state = 0;
  let attends = false;
  mem.layers.slice(from, to).forEach((l) => {
    const perToken = (l.k + l.v) * 2;
    if (l.swa) windowF16 += perToken * cells.window;
    else fullF16 += perToken * cells.full;
    state += l.state * 4;
    attends ||= perToken > 0;
  });
  return { fullF16, windowF16, state, attends };
}

/**
 * The compute-buffer additions on one device: logits where the output is (beyond `logitsHeld` MB at 512 tokens,
 * which an allowance already holds), scores where attention runs without flash attention.
 */
export function computeMb(
  mem: MemoryLayout | null | undefined,
  ctx: number,
  ubatch: number,
  o: { output: boolean; attends: boolean; flashAttn: boolean; logitsHeld?: number; quantizedSlots?: number },
): number {
  const held = (o.logitsHeld ?? LOGITS_IN_OVERHEAD_MB) * (ubatch / UBATCH) * MIB;
  const logits = o.output && mem?.vocab ? Math.max(0, mem.vocab * ubatch * 4 - held) : 0;
  const cells = cellsPerSlot(ctx, 0, ubatch).full;
  // The scores of one layer at a time (llama.cpp reuses the buffer) and the mask beside them: (heads + 1) rows.
  const scores = !o.flashAttn && o.attends && mem ? cells * ubatch * (mem.heads + 1) * 4 : 0;
  // Flash attention over a quantized cache reads one layer's K and V as f16 copies (CUDA's tile kernels, prompt batches).
  const widest = mem ? Math.max(0, ...mem.layers.map((l) => l.k + l.v)) : 0;
  const copies = o.flashAttn && o.attends && o.quantizedSlots ? cells * o.quantizedSlots * widest * 2 : 0;
  return (logits + scores + copies) / MIB;
}

/**
 * What one device holding part of a model needs: `weightsMb` of its weights, the cache of `layers` (and, without
 * flash attention, their attention scores), the logits when the output layer is there. llama.cpp puts a layer's
 * KV on the device of that layer and the output on the last device (--tensor-split), each with its own compute
 * buffer, so a placement over several devices is checked device by device with this.
 */
export interface DevicePart {
  readonly weightsMb: number;
  /** [from, to): the layers whose cache and attention run on this device; null: none (a MoE shard's expert stage). */
  readonly layers: readonly [number, number] | null;
  readonly output: boolean;
}

export type PartBreakdown = Omit<FitBreakdown, 'projectorMb' | 'draftMb'>;

export function partNeed(m: Pick<FitModel, 'kvBytesPerToken' | 'memory'>, blockCount: number | null, s: FitSettings, part: DevicePart): PartBreakdown {
  const ctx = contextPerSlot(s);
  const slots = s.parallelSlots;
  const ubatch = s.ubatch ?? UBATCH;
  const flashAttn = flashAttnOn(s);
  const kvScale = KV_SCALE[s.kvCacheType];
  const of = blockCount ?? m.memory?.layers.length ?? 1;
  const b = part.layers === null ? { fullF16: 0, windowF16: 0, state: 0, attends: false } : layerBytes(m, ctx, ubatch, { from: part.layers[0], to: part.layers[1], of }, s.swaFull);
  const weightsMb = part.weightsMb;
  const kvMb = ((b.fullF16 + b.windowF16) * slots * kvScale) / MIB;
  const kvWindowMb = (b.windowF16 * slots * kvScale) / MIB;
  const blocksMb = ((b.fullF16 + b.windowF16) * slots * (KV_ROW_SCALE[s.kvCacheType] - kvScale)) / MIB;
  const stateMb = (b.state * slots) / MIB;
  const overheadMb = weightsMb * 0.03 + FIXED_OVERHEAD_MB + kvMb * 0.05;
  // The spec's fixed 384 MB is the rest of the compute buffer at llama-server's 512-token micro-batch; it grows with a larger one.
  const quantizedSlots = s.kvCacheType === 'f16' ? 0 : slots;
  const compute = computeMb(m.memory, ctx, ubatch, { output: part.output, attends: b.attends, flashAttn, quantizedSlots }) + FIXED_OVERHEAD_MB * Math.max(0, ubatch / UBATCH - 1);
  const needMb = weightsMb + kvMb + stateMb + blocksMb + overheadMb + compute;
  return { weightsMb, kvMb, kvWindowMb, stateMb, blocksMb, overheadMb, computeMb: compute, needMb, ctx, slots, kvScale, kvCacheType: s.kvCacheType, flashAttn };
}

/** The need of a whole-model placement on one device: every layer, the output, the projector and the draft beside it. */
export function fitNeed(m: FitModel, s: FitSettings): FitBreakdown {
  const weightsMb = m.requiredVramMb ?? m.sizeBytes / MIB;
  const p = partNeed(m, null, s, { weightsMb, layers: [0, Infinity], output: true });
  const projectorMb = projectorNeedMb(m.projectorBytes);
  const draftMb = m.draft ? draftNeedMb(m.draft, p.ctx, p.slots, s.kvCacheType, s.ubatch ?? UBATCH, p.flashAttn) : 0;
  return { ...p, projectorMb, draftMb, needMb: p.needMb + projectorMb + draftMb };
}

/** A draft model's part of a need: its weights, its own cache at the target's context and cache type, its compute buffer. */
function draftNeedMb(d: NonNullable<FitModel['draft']>, ctx: number, slots: number, type: KvCacheType, ubatch: number, flashAttn: boolean): number {
  const weights = d.sizeBytes / MIB;
  const b = layerBytes(d, ctx, ubatch);
  const kv = ((b.fullF16 + b.windowF16) * slots * KV_ROW_SCALE[type] + b.state * slots) / MIB;
  // Its 64 MB is all its compute buffer has: its logits are counted whole.
  const compute = computeMb(d.memory, ctx, ubatch, { output: true, attends: b.attends, flashAttn, logitsHeld: 0, quantizedSlots: type === 'f16' ? 0 : slots });
  return weights + kv + weights * 0.03 + kv * 0.05 + DRAFT_COMPUTE_MB + compute;
}

/** The part of a need that dominates it, for a refusal: "the KV cache at ctx 131072 × 1 slots (17,408 MB)". */
export function largestPart(n: FitBreakdown): { part: string; mb: number } {
  const parts: [string, number][] = [
    ['the weights', n.weightsMb],
    [`the KV cache at ctx ${n.ctx} × ${n.slots} slot${n.slots === 1 ? '' : 's'} (${n.kvCacheType})`, n.kvMb + n.blocksMb],
    [`the recurrent state of ${n.slots} slot${n.slots === 1 ? '' : 's'}`, n.stateMb],
    [n.flashAttn ? 'the compute buffer (logits)' : `the compute buffer without flash attention (attention scores at ctx ${n.ctx})`, n.computeMb],
    ['the vision projector', n.projectorMb],
    ['the draft model', n.draftMb],
  ];
  const [part, mb] = parts.reduce((a, x) => (x[1] > a[1] ? x : a));
  return { part, mb };
}

export function fmtMb(mb: number): string {
  return `${Math.ceil(mb)} MB`;
}
