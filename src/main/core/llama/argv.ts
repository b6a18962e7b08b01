/**
 * Pure argv builders for the two llama.cpp binaries. Every llama-server relay launches (host replica, node
 * replica, shard head) goes through llamaServerArgv, so the KV-cache and flash-attention flags cannot drift
 * between launch paths. Secrets never go in argv: it is readable by every local user.
 */

export const KV_CACHE_TYPES = ['f16', 'q8_0', 'q4_0'] as const;
export type KvCacheType = (typeof KV_CACHE_TYPES)[number];
export type FlashAttn = 'on' | 'off' | 'auto';

export interface TensorOverride {
  /**
   * Regex for whole tensor names, e.g. `blk\.[0-1]\.ffn_(gate|up|down)_exps\.weight`; written anchored (wholeName).
   */
  readonly pattern: string;
  /** Buffer type name as llama-server lists it, e.g. `RPC0[127.0.0.1:50052]` or `CPU`. */
  readonly bufferType: string;
}

/**
 * An --override-tensor pattern that matches whole tensor names only. llama.cpp searches each name for the pattern
 * (std::regex_search), so `output\.weight` alone also takes every layer's `blk.N.attn_output.weight`: a shard's
 * remote layers then ran their attention projection on the hub, one rpc round trip more per remote layer per token.
 */
export function wholeName(pattern: string): string {
  return `^(?:${pattern})$`;
}

/** llama-server's n-gram speculators (--spec-type; common/speculative.cpp): they draft without a second model. */
export const NGRAM_TYPES = ['ngram-simple', 'ngram-map-k', 'ngram-map-k4v', 'ngram-mod', 'ngram-cache'] as const;
export type NgramType = (typeof NGRAM_TYPES)[number];
/** The --spec-type values relay runs: a draft model, the model's own next-token heads, or n-grams. */
export type SpecType = 'draft-simple' | 'draft-mtp' | NgramType;
/** What an owner sets per model (`relay models set NAME --spec …`; scheduler/decide/speculation.ts); absent = auto. */
export const SPEC_SETTINGS = ['auto', 'none', 'draft', 'mtp', 'ngram', ...NGRAM_TYPES] as const;
export type SpecSetting = (typeof SPEC_SETTINGS)[number];
/** The most tokens one ngram-mod draft proposes (llama.cpp's default is 64; see llamaServerArgv). */
export const NGRAM_MOD_DRAFT_MAX = 8;

export interface LlamaServerOptions {
  readonly model: string;
  readonly host: string;
  readonly port: number;
  readonly ctx: number;
  readonly slots: number;
  readonly cacheType: KvCacheType;
  /** Explicit choice; when undefined, a quantized cache forces 'on' (llama.cpp needs it for a quantized V). */
  readonly flashAttn?: FlashAttn | undefined;
  readonly gpuLayers?: number | undefined;
  readonly rpc?: readonly string[] | undefined;
  readonly devices?: readonly string[] | undefined;
  readonly tensorSplit?: readonly number[] | undefined;
  readonly overrides?: readonly TensorOverride[] | undefined;
  /** llama.cpp's automatic fit step aborts when overrides are given; relay does its own fit-check. */
  readonly fit?: 'on' | 'off' | undefined;
  readonly threads?: number | undefined;
  readonly alias?: string | undefined;
  readonly embedding?: boolean | undefined;
  /** A reranker (--reranking: rank pooling, /v1/rerank). */
  readonly reranking?: boolean | undefined;
  /** A vision projector (an mmproj GGUF): --mmproj, so the server answers images. */
  readonly mmproj?: string | undefined;
  /** false: the projector stays on the CPU (--no-mmproj-offload), for a placement that runs on the CPU. */
  readonly mmprojOffload?: boolean | undefined;
  /** A draft model for speculative decoding (draftPlacement): --model-draft with the draft-simple speculator. */
  readonly draft?: DraftOptions | undefined;
  /** Embedding pooling (--pooling); unset = the model's own. */
  readonly pooling?: 'none' | 'mean' | 'cls' | 'last' | 'rank' | undefined;
  /** llama.cpp log threshold; 4 keeps the load report (model and KV buffer sizes per device) in the tail. */
  readonly logVerbosity?: number | undefined;
  /** Prometheus counters at /metrics (loopback only, like the server itself). */
  readonly metrics?: boolean | undefined;
  /** --slot-save-path: the folder /slots/{id}?action=save|restore reads and writes (bench/slot-restore). */
  readonly slotSavePath?: string | undefined;
  /** Speculation without a draft model (n-grams, next-token heads): --spec-type. A draft model is `draft`. */
  readonly spec?: Exclude<SpecType, 'draft-simple'> | undefined;
  /** --n-predict: the most tokens an answer gets where the request asks for none (a model's own max_tokens). */
  readonly nPredict?: number | undefined;
}

/**
 * Where a whole-model llama-server runs: a GPU placement offloads everything to its one device. A CPU-budget
 * placement next to a loaded GPU module uses no device at all (`--device none`), so the GPU is never used behind
 * the budget's back; with the CPU build alone it passes nothing and runs llama.cpp's own CPU path, which
 * measured ~10% faster in prompt and generation tok/s than `--device none` on the same build (bench/hub-overhead).
 */
export function replicaPlacement(device: string, backend: string): { devices?: string[]; gpuLayers?: number } {
  if (device !== 'CPU') return { devices: [device], gpuLayers: 999 };
  return backend === 'cpu' ? {} : { devices: ['none'], gpuLayers: 0 };
}

/** A vision projector beside a whole-model llama-server: on the placement's device, kept on the CPU for a CPU placement. */
export function projectorPlacement(path: string | undefined, device: string): { mmproj?: string; mmprojOffload?: boolean } {
  return path === undefined ? {} : { mmproj: path, mmprojOffload: device !== 'CPU' };
}

export interface DraftOptions {
  readonly path: string;
  /** Tokens drafted per step, at most and at least. */
  readonly max: number;
  readonly min: number;
  /** Where its layers go: the placement's device (all layers), or none (the CPU). */
  readonly devices?: readonly string[] | undefined;
  readonly gpuLayers?: number | undefined;
}

/**
 * A draft model beside a whole-model llama-server, on the same device as the target (a GPU placement offloads
 * every draft layer there; a CPU one keeps it off the GPU as replicaPlacement does). Null path: no draft.
 */
export function draftPlacement(d: { path: string; max: number; min: number } | null, device: string, backend: string): { draft?: DraftOptions } {
  if (!d) return {};
  const where = replicaPlacement(device, backend);
  return { draft: { ...d, ...(where.devices ? { devices: where.devices } : {}), ...(where.gpuLayers !== undefined ? { gpuLayers: where.gpuLayers } : {}) } };
}

export function effectiveFlashAttn(cacheType: KvCacheType, explicit: FlashAttn | undefined): FlashAttn {
  if (explicit !== undefined) return explicit;
  return cacheType === 'f16' ? 'auto' : 'on';
}

export function llamaServerArgv(o: LlamaServerOptions): string[] {
  const a = [
    '--model',
    o.model,
    '--host',
    o.host,
    '--port',
    String(o.port),
    '--ctx-size',
    String(o.ctx * o.slots),
    '--parallel',
    String(o.slots),
    '--cache-type-k',
    o.cacheType,
    '--cache-type-v',
    o.cacheType,
    '--flash-attn',
    effectiveFlashAttn(o.cacheType, o.flashAttn),
    '--no-webui',
  ];
  if (o.gpuLayers !== undefined) a.push('--n-gpu-layers', String(o.gpuLayers));
  if (o.rpc && o.rpc.length > 0) a.push('--rpc', o.rpc.join(','));
  if (o.devices && o.devices.length > 0) a.push('--device', o.devices.join(','));
  if (o.tensorSplit && o.tensorSplit.length > 0) a.push('--tensor-split', o.tensorSplit.join(','));
  if (o.overrides && o.overrides.length > 0) {
    a.push('--override-tensor', o.overrides.map((ov) => `${wholeName(ov.pattern)}=${ov.bufferType}`).join(','));
  }
  if (o.fit !== undefined) a.push('--fit', o.fit);
  if (o.threads !== undefined) a.push('--threads', String(o.threads));
  if (o.nPredict !== undefined) a.push('--n-predict', String(o.nPredict));
  if (o.alias !== undefined) a.push('--alias', o.alias);
  if (o.embedding) a.push('--embedding');
  if (o.reranking) a.push('--reranking');
  if (o.pooling !== undefined) a.push('--pooling', o.pooling);
  if (o.mmproj !== undefined) {
    a.push('--mmproj', o.mmproj);
    if (o.mmprojOffload === false) a.push('--no-mmproj-offload');
  }
  if (o.draft) {
    // In this build --model-draft alone loads the draft and drafts nothing: the speculator is --spec-type (LLAMA-NOTES).
    a.push('--model-draft', o.draft.path, '--spec-type', 'draft-simple', '--spec-draft-n-max', String(o.draft.max), '--spec-draft-n-min', String(o.draft.min));
    a.push('--cache-type-k-draft', o.cacheType, '--cache-type-v-draft', o.cacheType);
    if (o.draft.devices && o.draft.devices.length > 0) a.push('--spec-draft-device', o.draft.devices.join(','));
    if (o.draft.gpuLayers !== undefined) a.push('--spec-draft-ngl', String(o.draft.gpuLayers));
  } else if (o.spec) {
    a.push('--spec-type', o.spec);
    // Drafts of at most 8 tokens: verified in a batch that small, the text at temperature 0 stays the text of one
    // token at a time (measured on the fixtures: 1,500-token answers identical; the default 48–64-token drafts drift
    // in a near-tie), so a moved or yielded answer still equals the uninterrupted one.
    if (o.spec === 'ngram-mod') a.push('--spec-ngram-mod-n-max', String(NGRAM_MOD_DRAFT_MAX), '--spec-ngram-mod-n-min', '1');
  }
  if (o.metrics) a.push('--metrics');
  if (o.slotSavePath !== undefined) a.push('--slot-save-path', o.slotSavePath);
  if (o.logVerbosity !== undefined) a.push('--log-verbosity', String(o.logVerbosity));
  return a;
}

export interface RpcServerOptions {
  /** Always loopback in relay: the RPC protocol has no authentication (llama.cpp's own warning). */
  readonly host: '127.0.0.1';
  readonly port: number;
  readonly cache: boolean;
  readonly threads?: number | undefined;
  /** The one device it serves (`CUDA1`, `Vulkan0`, `CPU`); unset, ggml-rpc-server serves every GPU it finds. */
  readonly device?: string | undefined;
}

export function rpcServerArgv(o: RpcServerOptions): string[] {
  const a = ['--host', o.host, '--port', String(o.port)];
  if (o.device !== undefined) a.push('--device', o.device);
  if (o.cache) a.push('--cache');
  if (o.threads !== undefined) a.push('--threads', String(o.threads));
  return a;
}
