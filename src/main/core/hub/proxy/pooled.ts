import type { ServerResponse } from 'node:http';
import { checkImages, inlineRemoteImages } from './images.js';
import { promptPrefix } from './prompt-prefix.js';
import { ErrorCode, isRelayError, RelayError } from '../../../../shared/errors.js';
import { MAX_ATTEMPTS, newAttempts } from '../../scheduler/scheduler.js';
import type { ModelRecord } from '../../store/store.js';
import { proxyToPlacement } from './proxy.js';
import type { Translator } from './proxy-types.js';
import type { Usage } from './llama-answer.js';
import type { ErrorShape } from '../http/errors.js';
import { sendIn } from '../http/answer.js';
import type { HubHttp } from '../http/context.js';
import type { V1Request } from '../http/request.js';
import { cannotContinue, continuationBody, readSent, wireFormat, type Sent } from './continuation.js';
import { Stitcher } from './stitch.js';
import type { MoveDto } from '../../../../shared/status.js';

/** How many times one answer may move before it ends with its error (each move: a placement stopped under it). */
const MAX_MOVES = 3;

/** An answer whose placement stopped mid-stream, on its way to another (continuation.ts). */
interface Move {
  /** What the client was given (null: not whole events, it cannot continue). */
  readonly sent: Sent | null;
  /** llama-server's bytes the client was given, and the stream's start (its usage). */
  readonly bytes: Buffer;
  readonly head: Buffer;
  /** The continuation's body. */
  readonly body: Buffer;
  /** The stop, as the client's error would say it. */
  readonly error: RelayError;
  readonly from: string;
  /** The placement that stopped (whose kept state the continuation's may read back). */
  readonly fromPlacement: string;
  readonly at: number;
}

/** What a route needs of a model: a generating model, an embedding model, a reranker. */
export type ModelUse = 'generate' | 'embed' | 'rerank';

/** One client request made ready for a placement: whose model, what it needs of it, what goes upstream. */
export interface Pooled {
  /** The registered model's name. */
  readonly model: string;
  readonly use: ModelUse;
  /** llama-server's path and the body sent there, as bytes and as the object they encode (read, never parsed again). */
  readonly path: string;
  readonly body: Buffer;
  readonly json: Record<string, unknown>;
  /** A dialect llama-server does not speak (Ollama's): the answer rewritten on its way; a fresh one per attempt. */
  readonly translate?: (t: { startedAt: number; leasedAt: number }) => Translator;
}

/** Whether a model can serve a route: generation routes refuse embedding models and rerankers, and back. */
export function checkUse(use: ModelUse, record: ModelRecord, name: string): void {
  if (use === 'embed' && !record.embedding) {
    throw new RelayError(ErrorCode.MODEL_NOT_EMBEDDING, `"${name}" is not registered as an embedding model (relay models add FILE --embedding)`, { model: name });
  }
  if (use === 'rerank' && !record.reranker) {
    throw new RelayError(ErrorCode.MODEL_NOT_RERANKER, `"${name}" is not registered as a reranker (relay models add FILE --reranker)`, { model: name });
  }
  if (use === 'generate' && record.embedding) throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" is an embedding model: use /v1/embeddings`, { model: name });
  if (use === 'generate' && record.reranker) throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" is a reranker: use /v1/rerank`, { model: name });
}

/**
 * Serve one client request through the pool, whatever its dialect: `prepare` checks the body and says what goes
 * to llama-server (what it throws is the answer); then a slot of a placement of the model is leased and the
 * request relayed to it, failing over before the first byte — a placement that fails before answering is
 * excluded and the request goes to another or a fresh one, at most MAX_ATTEMPTS tries in all (loads that failed
 * under it count too); after the first byte the client gets the dialect's error event. Every request lands in
 * the request log and /metrics under `endpoint`, errors in the dialect's shape.
 */
export async function throughPool(h: HubHttp, req: V1Request, res: ServerResponse, endpoint: string, shape: ErrorShape, prepare: () => Pooled): Promise<void> {
  const { registry, scheduler, metrics, log, spares } = h.deps;
  const t0 = Date.now();
  let model = '';
  let moves = 0;
  let move: Move | null = null;
  let translator: Translator | undefined;
  const done = (status: number, usage: Usage | null = null): void => {
    metrics.requests.add({ endpoint, status: String(status) });
    h.recent.add({
      at: new Date(t0).toISOString(),
      model,
      endpoint,
      status,
      ms: Date.now() - t0,
      prompt_tokens: usage?.promptTokens ?? null,
      completion_tokens: usage?.completionTokens ?? null,
      tokens_per_second: usage?.tokensPerSecond ?? null,
      ...(moves > 0 ? { moves } : {}),
    });
    if (usage) {
      metrics.tokens.add({ model, kind: 'prompt' }, usage.promptTokens);
      metrics.tokens.add({ model, kind: 'completion' }, usage.completionTokens);
      if (usage.cachedTokens !== null) {
        metrics.promptTokens.add({ model, cache: 'cached' }, usage.cachedTokens);
        metrics.promptTokens.add({ model, cache: 'evaluated' }, Math.max(0, usage.promptTokens - usage.cachedTokens));
      }
    }
  };
  const noteMove = (m: Move, to: string | null, stateBytes = 0, detail?: string): MoveDto => {
    const outcome = to === null ? 'ended' : 'continued';
    const dto: MoveDto = {
      at: new Date(m.at).toISOString(),
      model,
      endpoint,
      from: m.from,
      to,
      why: m.error.message,
      sent_tokens: m.sent?.tokens ?? 0,
      gap_ms: to === null ? null : Date.now() - m.at,
      cached_tokens: null,
      state_bytes: stateBytes,
      outcome,
      ...(detail ? { detail } : {}),
    };
    h.moves.add(dto);
    metrics.moves.add({ model, outcome });
    log.info({ model, from: dto.from, to, sent_tokens: dto.sent_tokens, gap_ms: dto.gap_ms, detail }, to === null ? 'answer could not move: ended' : 'answer moved');
    return dto;
  };
  /** A moved answer that cannot go on: its stream ends with the stop's error, saying why it did not continue. */
  const endMoved = (m: Move, detail: string): void => {
    noteMove(m, null, 0, detail);
    const err = new RelayError(m.error.code, `${m.error.message}; it could not continue elsewhere: ${detail}`, m.error.details);
    done(shape.answer(err).status);
    if (res.writableEnded || res.destroyed) return;
    if (translator?.streams) res.end(translator.broken(err));
    else if (!res.headersSent) sendIn(shape, res, err);
    else res.end(shape.event(err));
  };
  try {
    let p = prepare();
    model = p.model;
    const record = registry.require(p.model);
    checkUse(p.use, record, p.model);
    if (p.use === 'generate') {
      checkImages(p.json, record, h.deps.config.fetchImages);
      // The owner let the hub fetch image links (RELAY_FETCH_IMAGES): they go on inline.
      const inlined = h.deps.config.fetchImages ? await inlineRemoteImages(p.json, h.deps.config.maxBodyBytes) : null;
      if (inlined) p = { ...p, json: inlined, body: Buffer.from(JSON.stringify(inlined)) };
    }
    // The prompt's prefix keys: its placement is the one holding most of it (prefix-aware routing).
    const prefix = p.use === 'generate' && h.deps.config.prefixRouting ? promptPrefix(p.json) : null;
    const format = p.use === 'generate' ? wireFormat(p.path) : null;
    // Streamed answers continue on another placement when theirs stops mid-way (continuation.ts says which can).
    const continuable = format !== null && cannotContinue(format, p.json) === null;
    const attempts = newAttempts();
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    for (;;) {
      const lease = await scheduler.acquire(p.model, attempts, gone.signal, prefix);
      if (res.destroyed) {
        lease.release();
        if (move) done(499); // it went away between the two parts of its answer
        return;
      }
      const m = move;
      // A running one-slot placement reads in the answer's KV (the stopped placement's kept slot): only the new tokens
      // are evaluated. A placement the continuation started has read it back already (slot-carry.ts).
      const carried = m ? (lease.restored?.from === m.fromPlacement ? lease.restored.bytes : ((await lease.takeIn?.(m.fromPlacement)) ?? 0)) : 0;
      if (m && res.destroyed) {
        lease.release(); // it went away while the state was read in
        done(499);
        return;
      }
      if (!m) translator = p.translate?.({ startedAt: t0, leasedAt: Date.now() });
      const stitch = m ? new Stitcher(m.sent!) : null;
      let noted: MoveDto | null = null;
      const outcome = await proxyToPlacement({
        lease,
        path: p.path,
        body: m?.body ?? p.body,
        req,
        res,
        log,
        errors: shape,
        spares,
        translate: translator,
        continuable,
        ...(m && stitch ? { continuing: { stitch, sent: m.bytes, head: m.head }, onStart: () => (noted = noteMove(m, lease.where, carried)) } : {}),
        onDone: (status, usage) => {
          if (noted && stitch) noted.cached_tokens = stitch.carried;
          // A continuation that ended before its first byte: refused by llama-server there, or its client left.
          else if (m) noteMove(m, null, 0, status === 499 ? 'the client left before it continued' : `llama-server on ${lease.where} refused the continuation (${status})`);
          done(status, usage);
        },
      });
      if (outcome.kind === 'done') return;
      if (outcome.kind === 'moved') {
        // Its placement stopped mid-answer: what the client has is the start of the answer another one continues.
        attempts.exclude.add(lease.placementId);
        const sent = readSent(format!, outcome.sent.toString('utf8'));
        const next = sent ? continuationBody(p.json, sent) : 'half an event had gone out';
        move = {
          sent,
          bytes: outcome.sent,
          head: outcome.head,
          body: Buffer.from(typeof next === 'string' ? '' : JSON.stringify(next)),
          error: outcome.error,
          from: lease.where,
          fromPlacement: lease.placementId,
          at: Date.now(),
        };
        if (typeof next === 'string') return endMoved(move, next);
        if (++moves > MAX_MOVES) return endMoved(move, `it moved ${MAX_MOVES} times`);
        continue;
      }
      // Its placement was stopped before it answered (a pause, an eviction): another one takes it, no attempt spent.
      if (outcome.halted) {
        attempts.exclude.add(lease.placementId);
        continue;
      }
      scheduler.failedBefore(lease, attempts, outcome.error);
      if (attempts.errors.length >= MAX_ATTEMPTS) throw outcome.error;
    }
  } catch (err) {
    const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error');
    if (!isRelayError(err)) log.error({ err }, 'unhandled error');
    if (move) return endMoved(move, e.message); // no placement could take the rest (none fits, the pool paused…)
    done(shape.answer(e).status);
    sendIn(shape, res, e);
  }
}
