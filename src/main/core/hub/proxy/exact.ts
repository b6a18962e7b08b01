import type { Pieces } from '../../gguf/pieces.js';

/**
 * Where a moved answer stands in its first placement's own tokens (pure). A stopped llama-server's slot holds the
 * tokens it evaluated — the prompt as it tokenized it, then the answer as it generated it (the record,
 * scheduler/slots/answer-records.ts); the client holds the text it was sent. The continuation is that token list cut
 * where the text the client got ends, so it starts from exactly the tokens the first placement chose, whatever its
 * tokenizer would make of the text (a model's own tokens are not always what tokenizing their text gives back).
 *
 * The record may hold a few tokens more than the client got (generated while the stop travelled) or one fewer (the
 * last one sampled, sent, not yet evaluated): the cut is found by decoding the record's tokens from where the answer
 * begins until their text is the client's, at a token boundary. Text is compared as llama-server sends it: released
 * only at whole characters (a character split over tokens goes out with its last one), and a byte that is not UTF-8
 * becomes U+FFFD (runs of them compared as one).
 */

export interface Aligned {
  /** The prompt's tokens and the answer's, as far as the client has the answer. */
  readonly ids: number[];
  /** How many of `ids` the answer generated. */
  readonly generated: number;
}

/** How far before the sent events' count the answer may begin: tokens llama-server held back (partial characters, a stop word's start). */
const HELD_SLACK = 64;

const FFFD = '\uFFFD';
const collapse = (s: string): string => s.replace(/\uFFFD+/g, FFFD);

/** Bytes at the end of `b` that begin a character they do not finish (llama.cpp's validate_utf8); 0 when whole. */
export function unfinishedTail(b: readonly number[]): number {
  for (let i = 1; i <= 4 && i <= b.length; i++) {
    const c = b[b.length - i]!;
    if ((c & 0xe0) === 0xc0 && i < 2) return i;
    if ((c & 0xf0) === 0xe0 && i < 3) return i;
    if ((c & 0xf8) === 0xf0 && i < 4) return i;
  }
  return 0;
}

/** The answer's text decoded from its tokens as llama-server releases it, checked against `want` as it grows. */
class Reading {
  private pending: number[] = [];
  private readonly decoder = new TextDecoder('utf-8');
  text = '';

  constructor(private readonly want: string) {}

  /** Adds one token's bytes; false once the text is no longer the start of `want`. */
  add(piece: Uint8Array): boolean {
    this.pending.push(...piece);
    const held = unfinishedTail(this.pending);
    if (held === this.pending.length) return true;
    const out = this.pending.slice(0, this.pending.length - held);
    this.pending = this.pending.slice(this.pending.length - held);
    let s = this.decoder.decode(Uint8Array.from(out));
    if (this.text.endsWith(FFFD)) s = s.replace(/^\uFFFD+/, '');
    this.text += collapse(s);
    return this.want.startsWith(this.text);
  }

  /** At a token boundary with nothing held, the text is `want`. */
  get whole(): boolean {
    return this.pending.length === 0 && this.text === this.want;
  }

  get clean(): boolean {
    return this.pending.length === 0;
  }
}

/**
 * The record's tokens cut where the client's `sent` text ends; null when they do not spell it (another slot's, a
 * record of something else, a vocabulary read wrongly). `promptTokens`: the prompt's length where the stream said
 * it, else the answer's start is searched for near `events` tokens from the end (the smallest that spells it).
 */
export function alignSent(tokens: readonly number[], sent: string, pieces: Pieces, hint: { readonly promptTokens: number | null; readonly events: number }): Aligned | null {
  const want = collapse(sent);
  if (want === '') return null;
  const starts: number[] = [];
  if (hint.promptTokens !== null) starts.push(hint.promptTokens);
  else for (let p = Math.max(1, tokens.length - hint.events - HELD_SLACK); p <= Math.min(tokens.length, tokens.length - hint.events + 1); p++) starts.push(p);
  for (const p of starts) {
    const found = alignFrom(tokens, p, want, pieces);
    if (found) return found;
  }
  return null;
}

function alignFrom(tokens: readonly number[], p: number, want: string, pieces: Pieces): Aligned | null {
  if (p < 1 || p > tokens.length) return null;
  const r = new Reading(want);
  for (let k = p; k < tokens.length; k++) {
    const piece = pieces.piece(tokens[k]!);
    const before = { text: r.text, clean: r.clean };
    if (!piece) return null;
    // The record goes on with a token that was never sent — with speculation, the draft being verified when it
    // stopped — where the text lacks one last token: that one was sampled but not yet evaluated. Cut there.
    if (!r.add(piece)) return before.clean && k > p ? lastSampled(tokens.slice(0, k), before.text, want, pieces, p) : null;
    if (r.whole) return { ids: tokens.slice(0, k + 1), generated: k + 1 - p };
  }
  // The record ends before the text does: the last token sent was sampled but not yet evaluated when it stopped.
  return r.clean ? lastSampled(tokens, r.text, want, pieces, p) : null;
}

/** `evaluated` spell `read`, and `want` is `read` and one more token: the ids with that token, or null. */
function lastSampled(evaluated: readonly number[], read: string, want: string, pieces: Pieces, p: number): Aligned | null {
  if (!want.startsWith(read)) return null;
  const rest = want.slice(read.length);
  if (rest === '' || rest.includes(FFFD)) return null;
  const last = pieces.onlyToken(new TextEncoder().encode(rest));
  return last === null ? null : { ids: [...evaluated, last], generated: evaluated.length - p + 1 };
}
