import { memoryLayout, num, type MemoryLayout } from './memory.js';
import { metaValue, readGgufFile, type GgufFile } from './reader.js';

/** What the hub needs to know about a model, derived from its GGUF header alone. */
export interface ModelInfo {
  readonly architecture: string | null;
  readonly name: string | null;
  readonly blockCount: number | null;
  readonly embeddingLength: number | null;
  readonly headCount: number | null;
  /** Per-layer KV head counts collapse to their maximum here; kvBytesPerToken sums them exactly. */
  readonly headCountKv: number | null;
  readonly keyLength: number | null;
  readonly valueLength: number | null;
  readonly contextLength: number | null;
  /** 0 for a dense model. MoE only when both expertCount and expertUsedCount are > 0. */
  readonly expertCount: number;
  readonly expertUsedCount: number;
  readonly isMoe: boolean;
  /**
   * K+V bytes one token occupies in an f16 cache across the layers that keep every token (sliding-window layers,
   * recurrent layers and MLA's absent V excluded: `memory` has those); null when the header lacks the fields.
   */
  readonly kvBytesPerToken: number | null;
  /** Per layer: the KV a token takes, which layers slide, the recurrent state (gguf/memory.ts); null: header too thin. */
  readonly memory: MemoryLayout | null;
  readonly tokenCount: number | null;
  /** `<arch>.pooling_type` (llama.cpp's enum) for embedding models; null when the header does not say. */
  readonly poolingType: number | null;
  readonly tensorCount: number;
  readonly tensorBytes: number;
  /** Bytes of the MoE expert tensors (`blk.N.ffn_{gate,up,down}_exps.weight`): what a MoE shard moves to nodes. */
  readonly expertBytes: number;
  /**
   * Next-token (MTP) layers: `<arch>.nextn_predict_layers`, counted only where the last block holds
   * `nextn.eh_proj` (llama.cpp's own test, common_speculative_types_from_gguf); 0 for none.
   */
  readonly mtpLayers: number;
  readonly fileSize: number;
}

/** A positive integer, or null: zero or garbage in a header never becomes a divisor. */
function posInt(v: unknown): number | null {
  const n = num(v);
  return n !== null && Number.isInteger(n) && n > 0 ? n : null;
}

/** A per-layer value may be one number or an array with one entry per layer. */
function perLayer(v: unknown, layers: number): number[] | null {
  if (Array.isArray(v)) {
    if (v.length !== layers) return null;
    const out = v.map((x) => num(x));
    return out.every((x): x is number => x !== null && Number.isInteger(x) && x >= 0) ? out : null;
  }
  const n = posInt(v);
  return n === null ? null : new Array<number>(layers).fill(n);
}

export function deriveModelInfo(file: GgufFile): ModelInfo {
  const arch = metaValue(file, 'general.architecture');
  const architecture = typeof arch === 'string' ? arch : null;
  const k = (suffix: string): unknown => (architecture ? metaValue(file, `${architecture}.${suffix}`) : undefined);

  const blockCount = posInt(k('block_count'));
  const embeddingLength = posInt(k('embedding_length'));
  const headCountRaw = k('attention.head_count');
  const headCount = Array.isArray(headCountRaw) ? posInt(Math.max(...headCountRaw.map((x) => num(x) ?? 0))) : posInt(headCountRaw);
  const headDim = embeddingLength !== null && headCount !== null && embeddingLength % headCount === 0 ? embeddingLength / headCount : null;
  const keyLength = posInt(k('attention.key_length')) ?? headDim;
  const valueLength = posInt(k('attention.value_length')) ?? headDim;

  // llama.cpp defaults head_count_kv to head_count when the key is absent.
  const kvRaw = k('attention.head_count_kv') ?? headCountRaw;
  const kvHeads = blockCount !== null ? perLayer(kvRaw, blockCount) : null;
  const headCountKv = kvHeads && kvHeads.length > 0 ? Math.max(...kvHeads) : null;

  const tokens = metaValue(file, 'tokenizer.ggml.tokens');
  const memory = architecture ? memoryLayout(architecture, k, Array.isArray(tokens) ? tokens.length : null) : null;
  let kvBytesPerToken: number | null = null;
  if (memory && keyLength !== null && valueLength !== null) kvBytesPerToken = fullContextBytesPerToken(memory);
  else if (kvHeads && keyLength !== null && valueLength !== null) {
    kvBytesPerToken = kvHeads.reduce((sum, h) => sum + h * (keyLength + valueLength) * 2, 0);
  }

  const expertCount = posInt(k('expert_count')) ?? 0;
  const expertUsedCount = posInt(k('expert_used_count')) ?? 0;
  const name = metaValue(file, 'general.name');

  return {
    architecture,
    name: typeof name === 'string' ? name : null,
    blockCount,
    embeddingLength,
    headCount,
    headCountKv,
    keyLength,
    valueLength,
    contextLength: posInt(k('context_length')),
    expertCount,
    expertUsedCount,
    isMoe: expertCount > 0 && expertUsedCount > 0,
    kvBytesPerToken,
    memory,
    tokenCount: Array.isArray(tokens) ? tokens.length : null,
    poolingType: num(k('pooling_type')),
    tensorCount: file.tensors.length,
    tensorBytes: file.tensors.reduce((s, t) => s + t.bytes, 0),
    expertBytes: file.tensors.filter((t) => /^blk\.\d+\.ffn_(gate|up|down)_exps\.weight$/.test(t.name)).reduce((s, t) => s + t.bytes, 0),
    mtpLayers: blockCount !== null && file.tensors.some((t) => t.name === `blk.${blockCount - 1}.nextn.eh_proj.weight`) ? (posInt(k('nextn_predict_layers')) ?? 1) : 0,
    fileSize: file.fileSize,
  };
}

/** f16 K+V bytes per token of the layers that keep every token of the context (not sliding, not recurrent). */
export function fullContextBytesPerToken(m: MemoryLayout): number {
  return m.layers.reduce((s, l) => s + (l.swa ? 0 : (l.k + l.v) * 2), 0);
}

export function readModelInfo(path: string): ModelInfo {
  return deriveModelInfo(readGgufFile(path));
}
