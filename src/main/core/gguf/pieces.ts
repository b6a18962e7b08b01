import type { Vocab } from './vocab.js';

/**
 * The bytes llama-server streams for each token of a vocabulary (llama.cpp's `token_to_piece` with special tokens
 * not rendered: src/llama-vocab.cpp), read from the GGUF's own tokenizer arrays. A moved answer's continuation
 * matches the tokens its first placement generated against the text the client was sent with these
 * (hub/proxy/exact.ts); a piece decoded wrongly only makes that match fail, never a wrong continuation.
 *
 * - SentencePiece (`llama`): a normal token's text with ▁ as a space, a byte token (`<0xNN>`) its one byte;
 * - byte-level BPE (`gpt2`): each character of a normal token stands for one byte (GPT-2's bytes_to_unicode);
 *   a few pre-tokenizers spell spaces as ▁ instead;
 * - both: control and unknown tokens render nothing, user-defined ones their text as it is.
 * Other tokenizers (WordPiece, Unigram, RWKV) are not read: null.
 */
export interface Pieces {
  /** The bytes token `id` streams as; null for an id outside the vocabulary. */
  piece(id: number): Uint8Array | null;
  /** The one token that streams exactly as `bytes`, when exactly one does (a byte token and a one-letter token may both). */
  onlyToken(bytes: Uint8Array): number | null;
}

const TYPE_NORMAL = 1;
const TYPE_USER_DEFINED = 4;
const TYPE_BYTE = 6;

/** The pre-tokenizers whose BPE tokens spell spaces as ▁ (llama.cpp sets escape_whitespaces for them). */
const ESCAPING_PRE = new Set(['gemma4', 'sarvam-moe']);

const utf8 = new TextEncoder();
const EMPTY = new Uint8Array(0);

/** GPT-2's bytes_to_unicode, backwards: the byte each character of a byte-level token stands for. */
function byteLevelDecoder(): Map<number, number> {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (bs.includes(b)) continue;
    bs.push(b);
    cs.push(256 + n++);
  }
  return new Map(cs.map((c, i) => [c, bs[i]!]));
}

let byteLevel: Map<number, number> | undefined;

export function piecesOf(v: Vocab): Pieces | null {
  const kind = v.model === 'llama' ? 'spm' : v.model === 'gpt2' ? 'bpe' : null;
  if (!kind || v.tokens.length === 0) return null;
  const escaped = kind === 'spm' || ESCAPING_PRE.has(String(v.pre));
  byteLevel ??= byteLevelDecoder();
  const decoder = byteLevel;
  const cache = new Map<number, Uint8Array | null>();

  const decode = (id: number): Uint8Array | null => {
    const text = v.tokens[id];
    if (typeof text !== 'string') return null;
    const type = v.types.length > 0 ? Number(v.types[id]) : TYPE_NORMAL;
    if (type === TYPE_USER_DEFINED) return utf8.encode(text);
    if (type === TYPE_BYTE) {
      if (kind === 'spm') {
        const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(text);
        return m ? Uint8Array.of(parseInt(m[1]!, 16)) : null;
      }
      const b = decoder.get(text.codePointAt(0) ?? -1);
      return b === undefined ? null : Uint8Array.of(b);
    }
    if (type !== TYPE_NORMAL) return EMPTY; // control, unknown, unused, undefined: nothing is streamed
    if (escaped) return utf8.encode(text.replace(/\u2581/g, ' '));
    const out: number[] = [];
    for (const ch of text) {
      const b = decoder.get(ch.codePointAt(0)!);
      if (b === undefined) return null; // llama.cpp would stream a placeholder: not a piece to match
      out.push(b);
    }
    return Uint8Array.from(out);
  };

  const piece = (id: number): Uint8Array | null => {
    if (!Number.isInteger(id) || id < 0 || id >= v.tokens.length) return null;
    let p = cache.get(id);
    if (p === undefined) cache.set(id, (p = decode(id)));
    return p;
  };

  let byBytes: Map<string, number | null> | undefined;
  const key = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('latin1');
  return {
    piece,
    onlyToken(bytes) {
      if (!byBytes) {
        byBytes = new Map();
        for (let id = 0; id < v.tokens.length; id++) {
          const p = piece(id);
          if (!p || p.byteLength === 0) continue;
          const k = key(p);
          byBytes.set(k, byBytes.has(k) ? null : id);
        }
      }
      return byBytes.get(key(bytes)) ?? null;
    },
  };
}
