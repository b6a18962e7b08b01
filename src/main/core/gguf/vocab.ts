import { metaValue, readGgufFile, type GgufFile } from './reader.js';

/** What of a tokenizer decides whether two models can draft for each other (llama.cpp's own check; models/draft.ts). */
export interface Vocab {
  readonly model: unknown;
  readonly tokens: readonly unknown[];
  readonly bos: unknown;
  readonly eos: unknown;
  readonly addBos: unknown;
  readonly addEos: unknown;
  /** Each token's type (llama.cpp's LLAMA_TOKEN_TYPE_*: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte). */
  readonly types: readonly unknown[];
  /** The pre-tokenizer's name (BPE vocabularies). */
  readonly pre: unknown;
}

export function vocabOf(file: GgufFile): Vocab {
  const tokens = metaValue(file, 'tokenizer.ggml.tokens');
  const types = metaValue(file, 'tokenizer.ggml.token_type');
  return {
    model: metaValue(file, 'tokenizer.ggml.model'),
    tokens: Array.isArray(tokens) ? tokens : [],
    bos: metaValue(file, 'tokenizer.ggml.bos_token_id'),
    eos: metaValue(file, 'tokenizer.ggml.eos_token_id'),
    addBos: metaValue(file, 'tokenizer.ggml.add_bos_token'),
    addEos: metaValue(file, 'tokenizer.ggml.add_eos_token'),
    types: Array.isArray(types) ? types : [],
    pre: metaValue(file, 'tokenizer.ggml.pre'),
  };
}

/** A GGUF's tokenizer, read from its header (the first part of a split model holds it). */
export function readVocab(path: string): Vocab {
  return vocabOf(readGgufFile(path));
}
