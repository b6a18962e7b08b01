import type { RelayError } from '../../../../shared/errors.js';
import type { AppDeps } from '../http/context.js';
import { cannotContinue, continuationBody, exactBody, exactPossible } from './continuation.js';
import { alignSent } from './exact.js';
import type { Continuing } from './proxy-types.js';
import { Retell } from './retell.js';
import type { Json, Sent } from './sent.js';
import { Stitcher } from './stitch.js';

/**
 * How long a moved answer waits for its stopped placement's record of its tokens (the slots' save, the process's end,
 * a node's fetch, on a LAN) before it goes on the other way (continuation.ts).
 */
export const RECORD_WAIT_MS = 5000;

/** An answer whose placement stopped mid-stream, on its way to another (continuation.ts). */
export interface Move {
  /** What the client had been given when it stopped (a copy: the reader goes on with the rest). */
  readonly sent: Sent;
  /** The stream's start (its usage). */
  readonly head: Buffer;
  /** The stop, as the client's error would say it. */
  readonly error: RelayError;
  readonly from: string;
  /** The placement that stopped (whose record and kept state the continuation may read back). */
  readonly fromPlacement: string;
  readonly at: number;
}

/** A continuation's request and the stream that makes its answer the rest of the first. */
export interface Continuation {
  readonly path: string;
  readonly body: Buffer;
  readonly stream: Continuing;
  /** It starts from the first placement's own tokens (exact.ts), not from its text tokenized again. */
  readonly exact: boolean;
  /** Where it starts from the text: why not from the tokens. */
  readonly textWhy?: string;
}

/** Why an answer cannot go on whatever the way (a tool call begun, no tokens left…), or null. */
export function cannotGoOn(body: Json, sent: Sent): string | null {
  const next = continuationBody(body, sent);
  return typeof next === 'string' ? next : null;
}

/**
 * How the moved answer goes on: from its first placement's own tokens where their record is at hand and spells
 * what the client got (exact.ts; llama-server's /completion, told in the client's dialect by retell.ts), else
 * through its dialect's route with the sent text (stitch.ts). A string: why it cannot go on.
 */
export async function continuationFor(deps: AppDeps, p: { readonly model: string; readonly path: string; readonly json: Json }, m: Move): Promise<Continuation | string> {
  const why = m.sent.stuck ?? cannotContinue(m.sent.format, p.json);
  if (why) return why;
  const exact = await exactContinuation(deps, p, m);
  if (typeof exact !== 'object' || 'path' in exact) return exact;
  const next = continuationBody(p.json, m.sent);
  if (typeof next === 'string') return next;
  return { path: p.path, body: Buffer.from(JSON.stringify(next)), stream: new Stitcher(m.sent), exact: false, textWhy: exact.textWhy };
}

/** From the record of the stopped placement's slots, the one that spells what the client got; else why there is none. */
async function exactContinuation(deps: AppDeps, p: { readonly model: string; readonly json: Json }, m: Move): Promise<Continuation | string | { readonly textWhy: string }> {
  if (!exactPossible(p.json)) return { textWhy: "it offers tools or asks for log-probabilities (llama-server's chat route parses those)" };
  if (m.sent.reasoning !== '') return { textWhy: 'reasoning had been sent' };
  if (m.sent.text === '') return { textWhy: 'no text had been sent' };
  const { scheduler, registry, pieces } = deps;
  const slots = await scheduler.answerRecord(m.fromPlacement, RECORD_WAIT_MS);
  if (slots.length === 0) return { textWhy: `no record of its slots within ${RECORD_WAIT_MS / 1000} s` };
  const record = registry.get(p.model);
  const vocab = record && pieces ? await pieces(record).catch(() => null) : null;
  if (!vocab) return { textWhy: "the model's vocabulary could not be read" };
  for (const s of slots) {
    const a = alignSent(s.tokens, m.sent.text, vocab, { promptTokens: m.sent.promptTokens, events: m.sent.tokens });
    if (!a) continue;
    const body = exactBody(p.json, a.ids, a.generated);
    if (typeof body === 'string') return body;
    const usage = ((p.json.stream_options as Json | undefined)?.include_usage ?? false) === true;
    return { path: '/completion', body: Buffer.from(JSON.stringify(body)), stream: new Retell(m.sent, { generated: a.generated, prompt: a.ids.length - a.generated, usage }), exact: true };
  }
  return { textWhy: `none of the ${slots.length} slots recorded spells the text sent` };
}
