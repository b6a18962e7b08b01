import { readGgufFile, type GgufFile } from './reader.js';
import { GgufValueType, type GgufScalar } from './types.js';

/**
 * What a model's GGUF header says about it to someone choosing a model: its family, size in parameters,
 * quantization, its metadata as JSON, its chat template and what that template and vocabulary can do (tool calls,
 * thinking, fill-in-the-middle). Read from the header alone (every part of a split model for the count).
 */
export interface ModelCard {
  readonly architecture: string;
  readonly parameterCount: number;
  /** llama.cpp's name for `general.file_type` (Q4_K_M, F16, …), else the most common tensor type's. */
  readonly quantization: string;
  /** The metadata as JSON (64-bit integers as numbers, arrays longer than `maxArray` as []), its name and chat templates left out. */
  readonly metadata: Record<string, unknown>;
  /** Every tensor: name, ggml type, shape (ne[0] first). */
  readonly tensors: readonly { name: string; type: string; shape: readonly number[] }[];
  readonly chatTemplate: string | null;
  readonly contextLength: number | null;
  /** The vocabulary has fill-in-the-middle tokens (llama-server's /infill works). */
  readonly fim: boolean;
  /** The chat template renders tools (llama-server can parse tool calls). */
  readonly tools: boolean;
  /** The chat template has a thinking switch or section. */
  readonly thinking: boolean;
}

/** llama.h's llama_ftype, by value (the names llama-quantize and Ollama give them). */
const FILE_TYPES: Readonly<Record<number, string>> = {
  0: 'F32',
  1: 'F16',
  2: 'Q4_0',
  3: 'Q4_1',
  7: 'Q8_0',
  8: 'Q5_0',
  9: 'Q5_1',
  10: 'Q2_K',
  11: 'Q3_K_S',
  12: 'Q3_K_M',
  13: 'Q3_K_L',
  14: 'Q4_K_S',
  15: 'Q4_K_M',
  16: 'Q5_K_S',
  17: 'Q5_K_M',
  18: 'Q6_K',
  19: 'IQ2_XXS',
  20: 'IQ2_XS',
  21: 'Q2_K_S',
  22: 'IQ3_XS',
  23: 'IQ3_XXS',
  24: 'IQ1_S',
  25: 'IQ4_NL',
  26: 'IQ3_S',
  27: 'IQ3_M',
  28: 'IQ2_S',
  29: 'IQ2_M',
  30: 'IQ4_XS',
  31: 'IQ1_M',
  32: 'BF16',
  36: 'TQ1_0',
  37: 'TQ2_0',
  38: 'MXFP4_MOE',
};

/** Token texts by which llama.cpp's vocabulary finds its fill-in-the-middle prefix token. */
const FIM_PREFIX_TOKENS = new Set(['<|fim_prefix|>', '<fim-prefix>', '<fim_prefix>', '<PRE>', '▁<PRE>', '<｜fim▁begin｜>', '<|fim▁begin|>', '<|fim_begin|>']);

const json = (v: GgufScalar): unknown => (typeof v === 'bigint' ? (v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : String(v)) : v);

/** `files`: the model's headers, the first part first. `maxArray`: longer arrays are shown empty (Infinity: all). */
export function modelCard(files: readonly GgufFile[], maxArray: number): ModelCard {
  const first = files[0]!;
  const metadata: Record<string, unknown> = {};
  for (const [key, v] of first.metadata) {
    if (key === 'general.name' || key.startsWith('tokenizer.chat_template') || key.startsWith('split.')) continue;
    metadata[key] = v.type === GgufValueType.ARRAY ? (v.value.length > maxArray ? [] : v.value.map(json)) : json(v.value);
  }
  let parameterCount = 0;
  const byType = new Map<string, number>();
  const tensors: { name: string; type: string; shape: readonly number[] }[] = [];
  for (const f of files) {
    for (const t of f.tensors) {
      tensors.push({ name: t.name, type: t.typeName.toUpperCase(), shape: t.dims });
      const n = t.dims.reduce((a, b) => a * b, 1);
      parameterCount += n;
      byType.set(t.typeName, (byType.get(t.typeName) ?? 0) + n);
    }
  }
  metadata['general.parameter_count'] ??= parameterCount;
  const arch = first.metadata.get('general.architecture');
  const architecture = arch?.type === GgufValueType.STRING ? String(arch.value) : 'unknown';
  const ft = first.metadata.get('general.file_type');
  const fileType = ft && ft.type !== GgufValueType.ARRAY && typeof json(ft.value) === 'number' ? (json(ft.value) as number) : null;
  const common = [...byType].sort((a, b) => b[1] - a[1])[0]?.[0] ?? 'unknown';
  const quantization = (fileType !== null ? FILE_TYPES[fileType] : undefined) ?? common.toUpperCase();
  const tpl = first.metadata.get('tokenizer.chat_template');
  const chatTemplate = tpl?.type === GgufValueType.STRING ? String(tpl.value) : null;
  const ctx = first.metadata.get(`${architecture}.context_length`);
  const tokens = first.metadata.get('tokenizer.ggml.tokens');
  const fim =
    first.metadata.has('tokenizer.ggml.fim_pre_token_id') ||
    first.metadata.has('tokenizer.ggml.prefix_token_id') ||
    (tokens?.type === GgufValueType.ARRAY && tokens.value.some((t) => typeof t === 'string' && FIM_PREFIX_TOKENS.has(t)));
  return {
    architecture,
    parameterCount,
    quantization,
    metadata,
    tensors,
    chatTemplate,
    contextLength: ctx && ctx.type !== GgufValueType.ARRAY ? Number(json(ctx.value)) || null : null,
    fim,
    tools: chatTemplate !== null && /\btools\b/.test(chatTemplate) && /tool_call/.test(chatTemplate),
    thinking: chatTemplate !== null && /enable_thinking|<think>|reasoning_content/.test(chatTemplate),
  };
}

/** The card of a model's files on disk (headers only; every part of a split model). */
export function readModelCard(paths: readonly string[], maxArray: number): ModelCard {
  return modelCard(
    paths.map((p) => readGgufFile(p)),
    maxArray,
  );
}

/** A parameter count as Ollama shows it: 8B, 7.6B, 494.03M, 135M, 12K. */
export function humanCount(n: number): string {
  const fixed = (x: number, digits: number): string => (x === Math.floor(x) ? x.toFixed(0) : x.toFixed(digits));
  if (n >= 1e9) return `${fixed(n / 1e9, 1)}B`;
  if (n >= 1e6) return `${fixed(n / 1e6, 2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(0)}K`;
  return String(n);
}
