/**
 * What llama.cpp keeps in memory per token and per sequence for a model, read from its GGUF header alone: for each
 * layer the K and V elements one token takes (0 for a layer without a KV cache), whether the layer's attention
 * slides (it then holds a window, not the whole context) and the floats of recurrent state one sequence takes.
 *
 * The rules are llama.cpp's own model loader (src/models/<arch>.cpp load_hparams, src/llama-hparams.cpp,
 * src/llama-model.cpp create_memory), for the llama.cpp relay builds. Where an architecture is not known here the
 * layout is the plain one (every layer keeps every token): too high for a sliding model. Special caches (deepseek4,
 * MiniMax M3, dots3note) get that plain formula too, which llama.cpp may exceed (docs/how-it-works.md says so).
 */
export interface LayerMemory {
  /** K elements per token in this layer's cache (key length × KV heads); 0: no KV cache. */
  readonly k: number;
  /** V elements per token; 0 for MLA (V is a view of K) and for layers without a cache. */
  readonly v: number;
  /** The layer attends to a sliding window (`window` tokens), so its cache holds the window, not the context. */
  readonly swa: boolean;
  /** f32 recurrent state per sequence (conv/shift state + SSM/WKV state); 0 for an attention layer. */
  readonly state: number;
}

export interface MemoryLayout {
  /** One entry per block (`block_count`, next-token-prediction layers included). */
  readonly layers: readonly LayerMemory[];
  /** The sliding window in tokens (n_swa); 0 when no layer slides. */
  readonly window: number;
  /** Attention heads (the largest layer's): the scores buffer without flash attention is ctx × ubatch × heads. */
  readonly heads: number;
  /** Vocabulary size: the logits of a batch are n_vocab × ubatch floats. null when the header has no tokens. */
  readonly vocab: number | null;
}

type Get = (suffix: string) => unknown;

/** A header number (bigints within the safe range included), or null. */
export function num(v: unknown): number | null {
  if (typeof v === 'number' && Number.isFinite(v)) return v;
  if (typeof v === 'bigint' && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= 0n) return Number(v);
  return null;
}

function nonNeg(v: unknown): number | null {
  const n = num(v);
  return n !== null && Number.isInteger(n) && n >= 0 ? n : null;
}

/** A per-layer key: one number for every layer, or an array of exactly `n`; null when absent or malformed. */
function perLayer(v: unknown, n: number): number[] | null {
  if (Array.isArray(v)) {
    if (v.length !== n) return null;
    const out = v.map(nonNeg);
    return out.every((x): x is number => x !== null) ? out : null;
  }
  const x = nonNeg(v);
  return x === null ? null : new Array<number>(n).fill(x);
}

/** llama.cpp's set_swa_pattern: period 0 = every layer slides; else the last (or, dense_first, the first) of each period is dense. */
function swaPattern(n: number, period: number, denseFirst = false): boolean[] {
  return Array.from({ length: n }, (_, il) => (period === 0 ? true : denseFirst ? il % period !== 0 : il % period < period - 1));
}

/** A scalar pattern key (an array in the GGUF is ignored by these archs' loaders: the default stays). */
function scalarPeriod(get: Get, fallback: number): number {
  const v = get('attention.sliding_window_pattern');
  return Array.isArray(v) ? fallback : (nonNeg(v) ?? fallback);
}

interface Sliding {
  readonly window: number;
  readonly swa: boolean[];
}

/** Which layers slide and the window, per architecture (src/models/<arch>.cpp). `main`: layers before the next-token ones. */
function sliding(arch: string, get: Get, main: number, recurrent: readonly boolean[]): Sliding | null {
  const key = nonNeg(get('attention.sliding_window'));
  const periodic = (fallbackWindow: number | null, period: number, denseFirst = false): Sliding | null => {
    const window = key ?? fallbackWindow;
    return window && window > 0 ? { window, swa: swaPattern(main, scalarPeriod(get, period), denseFirst) } : null;
  };
  switch (arch) {
    case 'gemma2':
      return periodic(4096, 2);
    case 'gpt-oss':
      return periodic(null, 2);
    case 'gemma3':
      return key ? periodic(null, 6) : null; // no window key: plain attention
    case 'gemma3n':
      return periodic(null, 5);
    case 'cohere2':
      return periodic(null, 4);
    case 'cohere2moe':
    case 'laguna': {
      const v = get('attention.sliding_window_pattern');
      if (Array.isArray(v)) return key ? { window: key, swa: v.slice(0, main).map(Boolean) } : null;
      return periodic(null, 4, true);
    }
    case 'olmo2':
    case 'afmoe':
    case 'exaone-moe':
      return key ? periodic(null, 4) : null;
    case 'exaone4':
      return main === 64 ? periodic(4096, 4) : null;
    case 'plamo3':
      return key ? periodic(null, 8) : null;
    case 'llama4':
      // Chunked attention of 8192 tokens on 3 of 4 layers, unless the header sets the window to 0.
      return key === 0 ? null : { window: 8192, swa: swaPattern(main, scalarPeriod(get, 4)) };
    case 'lfm2':
      return key ? { window: key, swa: recurrent.map((r) => !r) } : null;
    case 'gemma4':
    case 'granite_swa':
    case 'mimo2':
    case 'step35': {
      const v = get('attention.sliding_window_pattern');
      return key && Array.isArray(v) && v.length >= main ? { window: key, swa: v.slice(0, main).map(Boolean) } : null;
    }
    default:
      return null; // phi3 and llama read a window but do not slide: every token kept
  }
}

/** Architectures whose every layer is recurrent (no KV cache at all). */
const ALL_RECURRENT = new Set(['mamba', 'mamba2', 'rwkv6', 'rwkv6qwen2', 'rwkv7', 'arwkv7']);
/** Hybrids whose recurrent layers are the ones with head_count_kv = 0. */
const RECURRENT_WHERE_NO_KV = new Set(['jamba', 'granitehybrid', 'plamo2', 'lfm2', 'lfm2moe', 'kimi-linear', 'bailingmoe3', 'kimi-k3']);
/** Hybrids whose attention layers come every `full_attention_interval` layers (or are listed). */
const INTERVAL_HYBRID: Readonly<Record<string, number>> = { qwen3next: 4, qwen35: 4, qwen35moe: 4, qwen4exp: 4, 'minimax-01': 8 };
/** Encoders and diffusion models: llama.cpp gives them no KV cache. */
const NO_CACHE = new Set(['bert', 'modern-bert', 'nomic-bert', 'nomic-bert-moe', 'neo-bert', 'jina-bert-v2', 'jina-bert-v3', 'eurobert', 'gemma-embedding', 'dream', 'llada', 'llada-moe', 'rnd1']);
/** Archs whose next-token-prediction layers get no cache (the others, deepseek2 and glm4moe among them, do). */
const NEXTN_UNCACHED = new Set(['step35', 'hy_v3', 'mimo2', 'qwen3next', 'qwen35', 'qwen35moe', 'qwen4exp', 'minimax-01', 'deepseek32', 'glm-dsa']);
/** Sparse-attention archs (llama_kv_cache_dsa): beside the MLA latent each layer keeps an indexer key per token. */
const INDEXED = new Set(['deepseek32', 'glm-dsa']);

/** Which of the first `main` layers are recurrent, per architecture (llama-arch.cpp, src/models/<arch>.cpp). */
function recurrentLayers(arch: string, get: Get, main: number, kvHeads: readonly number[]): boolean[] {
  if (ALL_RECURRENT.has(arch)) return new Array<boolean>(main).fill(true);
  if (RECURRENT_WHERE_NO_KV.has(arch)) return kvHeads.slice(0, main).map((h) => h === 0);
  if (arch === 'nemotron_h' || arch === 'nemotron_h_moe') {
    const ff = perLayer(get('feed_forward_length'), kvHeads.length) ?? new Array<number>(kvHeads.length).fill(1);
    return kvHeads.slice(0, main).map((h, il) => h === 0 && ff[il] === 0);
  }
  if (arch === 'falcon-h1') return new Array<boolean>(main).fill(true);
  const interval = INTERVAL_HYBRID[arch];
  if (interval !== undefined) {
    const listed = get('attention.recurrent_layers');
    if (Array.isArray(listed) && listed.length >= main) return listed.slice(0, main).map(Boolean);
    const every = nonNeg(get('full_attention_interval')) || interval;
    return Array.from({ length: main }, (_, il) => (il + 1) % every !== 0);
  }
  return new Array<boolean>(main).fill(false);
}

/** Recurrent state floats per sequence and layer: llama.cpp's n_embd_r() + n_embd_s() (llama-hparams.cpp). */
function stateFloats(arch: string, get: Get, embd: number, heads: number, keyLen: number | null): number {
  // MiniMax-01's lightning attention keeps a head_la × head_la state per head (head_la = key_length).
  if (arch === 'minimax-01' && keyLen) return keyLen * keyLen * heads;
  const wkv = nonNeg(get('wkv.head_size'));
  if (wkv) return (nonNeg(get('token_shift_count')) || 2) * embd + embd * wkv;
  const lCache = nonNeg(get('shortconv.l_cache'));
  if (lCache) return embd * (lCache - 1);
  const dConv = nonNeg(get('ssm.conv_kernel')) ?? 0;
  const kda = nonNeg(get('kda.head_dim'));
  if (kda) return 3 * (dConv > 0 ? dConv - 1 : 3) * heads * kda + kda * kda * heads;
  const dInner = nonNeg(get('ssm.inner_size')) ?? 0;
  const dState = nonNeg(get('ssm.state_size')) ?? 0;
  const groups = nonNeg(get('ssm.group_count')) ?? 0;
  return Math.max(0, dConv - 1) * (dInner + 2 * groups * dState) + dState * dInner;
}

/**
 * The layout, or null when the header lacks what it takes (block count, heads, head size): the fit then counts
 * no KV for the model, as it always has for such headers.
 */
export function memoryLayout(arch: string, get: Get, vocab: number | null): MemoryLayout | null {
  const n = nonNeg(get('block_count'));
  const embd = nonNeg(get('embedding_length'));
  if (!n) return null;
  const headRaw = get('attention.head_count');
  const heads = perLayer(headRaw, n);
  if (!heads) return null;
  const kvHeads = perLayer(get('attention.head_count_kv') ?? headRaw, n);
  if (!kvHeads) return null;
  const head0 = heads.find((h) => h > 0) ?? 0;
  const headDim = embd && head0 && embd % head0 === 0 ? embd / head0 : null;
  const keyLen = nonNeg(get('attention.key_length')) || headDim;
  const valueLen = nonNeg(get('attention.value_length')) || headDim;
  const main = n - Math.min(n, nonNeg(get('nextn_predict_layers')) ?? 0);
  if (NO_CACHE.has(arch)) return { layers: new Array<LayerMemory>(n).fill({ k: 0, v: 0, swa: false, state: 0 }), window: 0, heads: Math.max(...heads), vocab };
  // No head size known (a pure recurrent model has none): no KV counted, the recurrent state still is.
  const keySwa = nonNeg(get('attention.key_length_swa')) || (keyLen ?? 0);
  const valueSwa = nonNeg(get('attention.value_length_swa')) || (valueLen ?? 0);
  const mla = Boolean(nonNeg(get('attention.key_length_mla')) && nonNeg(get('attention.value_length_mla')));
  const recurrent = recurrentLayers(arch, get, main, kvHeads);
  const slide = sliding(arch, get, main, recurrent);
  const state = recurrent.some(Boolean) ? stateFloats(arch, get, embd ?? 0, head0, keyLen) : 0;
  const indexer = INDEXED.has(arch) ? (nonNeg(get('attention.indexer.key_length')) ?? 0) : 0;
  // gemma3n keeps KV for its first 20 layers, gemma4 for all but its shared ones: the rest reuse an earlier layer's.
  const kvFrom = arch === 'gemma3n' ? 20 : arch === 'gemma4' ? n - (nonNeg(get('attention.shared_kv_layers')) ?? 0) : n;
  const layers = Array.from({ length: n }, (_, il): LayerMemory => {
    const rec = il < main && recurrent[il] === true;
    const swa = il < main && slide !== null && slide.swa[il] === true;
    const attends = il < main ? !rec || arch === 'falcon-h1' : !NEXTN_UNCACHED.has(arch);
    const h = kvHeads[il]!;
    const cached = attends && il < kvFrom && h > 0;
    const heads = h > 0 ? h : (kvHeads.find((x) => x > 0) ?? 0);
    const k = cached ? heads * (swa ? keySwa : (keyLen ?? 0)) + indexer : 0;
    const v = cached && !mla ? heads * (swa ? valueSwa : (valueLen ?? 0)) : 0;
    return { k, v, swa: cached && swa, state: rec ? state : 0 };
  });
  return { layers, window: slide?.window ?? 0, heads: Math.max(...heads), vocab };
}

/** What the API shows of a layout: counts, not per-layer arrays. */
export interface MemorySummary {
  readonly layers: number;
  readonly kv_layers: number;
  readonly sliding_layers: number;
  readonly recurrent_layers: number;
  readonly window: number;
  readonly mla: boolean;
}

export function memorySummary(m: MemoryLayout | null): MemorySummary | null {
  if (!m) return null;
  return {
    layers: m.layers.length,
    kv_layers: m.layers.filter((l) => l.k > 0).length,
    sliding_layers: m.layers.filter((l) => l.swa).length,
    recurrent_layers: m.layers.filter((l) => l.state > 0).length,
    window: m.window,
    mla: m.layers.some((l) => l.k > 0 && l.v === 0),
  };
}
