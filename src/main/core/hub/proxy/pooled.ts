import type { ServerResponse } from 'node:http';
import { checkImages, inlineRemoteImages } from './images.js';
import { promptPrefix } from './prompt-prefix.js';
import { ErrorCode, isRelayError, RelayError } from '../../../../shared/errors.js';
import { failedOn, MAX_ATTEMPTS, newAttempts } from '../../scheduler/scheduler.js';
import { ANYONE, type Requester } from '../../scheduler/placements/queue.js';
import type { Ticket } from '../http/admission.js';
import type { Attempts } from '../../scheduler/placements/queue.js';
import type { Lease } from '../../scheduler/placements/placement.js';
import type { ModelRecord } from '../../store/store.js';
import type { PromptPrefix } from '../../scheduler/decide/prefix.js';
import { proxyToPlacement } from './proxy.js';
import type { ProxyOutcome, Translator } from './proxy-types.js';
import type { Usage } from './llama-answer.js';
import type { ErrorShape } from '../http/errors.js';
import { sendIn } from '../http/answer.js';
import type { HubHttp } from '../http/context.js';
import type { V1Request } from '../http/request.js';
import { cannotContinue, wireFormat } from './continuation.js';
import { SentReader, type WireFormat } from './sent.js';
import { cannotGoOn, continuationFor, type Continuation, type Move } from './moved.js';
import type { MoveDto } from '../../../../shared/status.js';

/** How many times one answer may move before it ends with its error (each move: a placement stopped under it). */
const MAX_MOVES = 3;

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
 * under it count too); after the first byte the client gets the dialect's error event, unless the placement was
 * stopped under a streamed answer that can continue: then it moves (continuation.ts). Every request lands in the
 * request log and /metrics under `endpoint`, errors in the dialect's shape.
 */
export function throughPool(h: HubHttp, req: V1Request, res: ServerResponse, endpoint: string, shape: ErrorShape, prepare: () => Pooled): Promise<void> {
  return new PooledRequest(h, req, res, endpoint, shape).run(prepare);
}

/** The request made ready: its model, its prompt's prefix key, its stream's format when it may move. */
interface Ready {
  readonly p: Pooled;
  readonly prefix: PromptPrefix | null;
  readonly format: WireFormat | null;
  /** What the client was given, read as it goes: set when the answer can continue elsewhere. */
  readonly reader: SentReader | null;
}

/**
 * One request's way through the pool, in its steps: `ready` (checked, images inlined, its prefix and format),
 * then per placement `lease` → `trip` (the first part, or a continuation: `continuation` picks how) → what came of
 * it: `done`, `moved` (the answer goes on elsewhere), a retry before the first byte; and the ways out — `answered`
 * (the request log and metrics), `endMoved` (a moved answer that cannot go on), `fail`.
 */
class PooledRequest {
  private readonly t0 = Date.now();
  private model = '';
  private moves = 0;
  private move: Move | null = null;
  private translator: Translator | undefined;
  private readonly attempts: Attempts = newAttempts();
  private readonly gone = new AbortController();
  /** The API key it came with (its name; null: none) and, once admitted, its class and whether it can yield. */
  private readonly key: string | null;
  private who: Requester = ANYONE;
  /** Times its answer gave its slot to an interactive request and went on (not moves: no limit, no exclusion). */
  private yields = 0;

  constructor(
    private readonly h: HubHttp,
    private readonly req: V1Request,
    private readonly res: ServerResponse,
    private readonly endpoint: string,
    private readonly shape: ErrorShape,
  ) {
    res.on('close', () => {
      if (!res.writableFinished) this.gone.abort();
    });
    this.key = h.auth.keyOf(req);
  }

  async run(prepare: () => Pooled): Promise<void> {
    let ticket: Ticket | null = null;
    try {
      const r = await this.ready(prepare);
      // Its key's class and quotas (admission.ts): a refusal is the answer, in the dialect's shape.
      ticket = this.h.deps.admission.admit(this.key, this.req);
      this.who = { ...ticket.who, canYield: r.reader !== null };
      for (;;) {
        const lease = await this.lease(r);
        if (!lease) return;
        const outcome = await this.trip(r, lease);
        if (outcome === 'over') return;
      }
    } catch (err) {
      this.fail(err);
    } finally {
      ticket?.done();
    }
  }

  /** The request checked against its model; images inlined where the owner allows fetching them. */
  private async ready(prepare: () => Pooled): Promise<Ready> {
    const { registry, config } = this.h.deps;
    let p = prepare();
    this.model = p.model;
    const record = registry.require(p.model);
    checkUse(p.use, record, p.model);
    if (p.use === 'generate') {
      checkImages(p.json, record, config.fetchImages);
      // The owner let the hub fetch image links (RELAY_FETCH_IMAGES): they go on inline.
      const inlined = config.fetchImages ? await inlineRemoteImages(p.json, config.maxBodyBytes) : null;
      if (inlined) p = { ...p, json: inlined, body: Buffer.from(JSON.stringify(inlined)) };
    }
    // The prompt's prefix keys: its placement is the one holding most of it (prefix-aware routing).
    const prefix = p.use === 'generate' && config.prefixRouting ? promptPrefix(p.json) : null;
    const format = p.use === 'generate' ? wireFormat(p.path) : null;
    // Streamed answers continue on another placement when theirs stops mid-way (continuation.ts says which can).
    const reader = format !== null && cannotContinue(format, p.json) === null ? new SentReader(format) : null;
    return { p, prefix, format, reader };
  }

  /** A slot of a placement of the model; null when the client went away meanwhile. */
  private async lease(r: Ready): Promise<Lease | null> {
    const lease = await this.h.deps.scheduler.acquire(r.p.model, this.attempts, this.gone.signal, r.prefix, this.who);
    if (!this.res.destroyed) return lease;
    lease.release();
    if (this.move) this.answered(499); // it went away between the two parts of its answer
    return null;
  }

  /** One trip to a placement: the answer's first part, or its continuation after a move. */
  private async trip(r: Ready, lease: Lease): Promise<'over' | 'again'> {
    const m = this.move;
    if (!m) this.translator = r.p.translate?.({ startedAt: this.t0, leasedAt: Date.now() });
    // A running one-slot placement reads in the answer's KV (the stopped placement's kept slot): only the new tokens
    // are evaluated. A placement the continuation started has read it back already (slot-carry.ts).
    const carried = m ? (lease.restored?.from === m.fromPlacement ? lease.restored.bytes : ((await lease.takeIn?.(m.fromPlacement)) ?? 0)) : 0;
    const cont = m ? await continuationFor(this.h.deps, r.p, m) : null;
    if (m && this.res.destroyed) {
      lease.release(); // it went away while the state was read in
      this.answered(499);
      return 'over';
    }
    if (m && typeof cont === 'string') {
      lease.release();
      this.endMoved(m, cont);
      return 'over';
    }
    const c = cont as Continuation | null;
    let noted: MoveDto | null = null;
    const outcome = await proxyToPlacement({
      lease,
      path: c?.path ?? r.p.path,
      body: c?.body ?? r.p.body,
      req: this.req,
      res: this.res,
      log: this.h.deps.log,
      errors: this.shape,
      spares: this.h.deps.spares,
      translate: this.translator,
      ...(r.reader ? { reader: r.reader } : {}),
      ...(m && c ? { continuing: { stream: c.stream, head: m.head }, onStart: () => (noted = this.noteMove(m, lease.where, carried, c.exact, c.textWhy)) } : {}),
      onDone: (status, usage) => {
        if (noted && c) noted.cached_tokens = c.stream.carried;
        // A continuation that ended before its first byte: refused by llama-server there, or its client left.
        else if (m) this.noteMove(m, null, 0, false, status === 499 ? 'the client left before it continued' : `llama-server on ${lease.where} refused the continuation (${status})`);
        this.answered(status, usage);
      },
    });
    return this.after(r, lease, outcome);
  }

  /** What a trip came to: answered, moved (the answer goes on elsewhere), or another placement before the first byte. */
  private after(r: Ready, lease: Lease, outcome: ProxyOutcome): 'over' | 'again' {
    if (outcome.kind === 'done') return 'over';
    if (outcome.kind === 'moved') {
      // Its placement stopped mid-answer (or this answer gave its slot to a person: it may come back to the same one):
      // what the client has is the start of the answer another slot continues.
      if (outcome.yielded) this.yields++;
      else this.attempts.exclude.add(lease.placementId);
      this.move = {
        sent: structuredClone(r.reader!.sent),
        head: outcome.head,
        error: outcome.error,
        from: lease.where,
        fromPlacement: lease.placementId,
        at: Date.now(),
      };
      const why = !outcome.yielded && ++this.moves > MAX_MOVES ? `it moved ${MAX_MOVES} times` : cannotGoOn(r.p.json, this.move.sent);
      if (why === null) return 'again';
      this.endMoved(this.move, why);
      return 'over';
    }
    // Its placement was stopped before it answered (a pause, an eviction; or it yielded): another slot takes it, no attempt spent.
    if (outcome.halted) {
      if (!outcome.yielded) this.attempts.exclude.add(lease.placementId);
      return 'again';
    }
    failedOn(this.attempts, lease.placementId, outcome.error);
    if (this.attempts.errors.length >= MAX_ATTEMPTS) throw outcome.error;
    return 'again';
  }

  /** The request log and /metrics, once per request. */
  private answered(status: number, usage: Usage | null = null): void {
    const { metrics } = this.h.deps;
    const model = this.model;
    metrics.requests.add({ endpoint: this.endpoint, status: String(status) });
    this.h.deps.usage.add(this.key, { requests: 1, yields: this.yields, prompt_tokens: usage?.promptTokens ?? 0, completion_tokens: usage?.completionTokens ?? 0 });
    this.h.recent.add({
      at: new Date(this.t0).toISOString(),
      model,
      key: this.key,
      endpoint: this.endpoint,
      status,
      ms: Date.now() - this.t0,
      prompt_tokens: usage?.promptTokens ?? null,
      completion_tokens: usage?.completionTokens ?? null,
      tokens_per_second: usage?.tokensPerSecond ?? null,
      ...(this.moves > 0 ? { moves: this.moves } : {}),
      ...(this.yields > 0 ? { yields: this.yields } : {}),
    });
    if (usage) {
      const key = this.key ?? '';
      metrics.tokens.add({ model, kind: 'prompt', key }, usage.promptTokens);
      metrics.tokens.add({ model, kind: 'completion', key }, usage.completionTokens);
      if (usage.cachedTokens !== null) {
        metrics.promptTokens.add({ model, cache: 'cached' }, usage.cachedTokens);
        metrics.promptTokens.add({ model, cache: 'evaluated' }, Math.max(0, usage.promptTokens - usage.cachedTokens));
      }
    }
  }

  /** `detail`: why it ended, or (continued) why from its text. */
  private noteMove(m: Move, to: string | null, stateBytes: number, exact: boolean, detail?: string): MoveDto {
    const outcome = to === null ? 'ended' : 'continued';
    const dto: MoveDto = {
      at: new Date(m.at).toISOString(),
      model: this.model,
      endpoint: this.endpoint,
      from: m.from,
      to,
      why: m.error.message,
      sent_tokens: m.sent.tokens,
      gap_ms: to === null ? null : Date.now() - m.at,
      cached_tokens: null,
      state_bytes: stateBytes,
      outcome,
      ...(to !== null ? { exact } : {}),
      ...(detail ? { detail } : {}),
    };
    this.h.moves.add(dto);
    this.h.deps.metrics.moves.add({ model: this.model, outcome });
    this.h.deps.log.info({ model: this.model, from: dto.from, to, sent_tokens: dto.sent_tokens, gap_ms: dto.gap_ms, exact, detail }, to === null ? 'answer could not move: ended' : 'answer moved');
    return dto;
  }

  /** A moved answer that cannot go on: its stream ends with the stop's error, saying why it did not continue. */
  private endMoved(m: Move, detail: string): void {
    const { res, shape } = this;
    this.noteMove(m, null, 0, false, detail);
    const err = new RelayError(m.error.code, `${m.error.message}; it could not continue elsewhere: ${detail}`, m.error.details);
    this.answered(shape.answer(err).status);
    if (res.writableEnded || res.destroyed) return;
    if (this.translator?.streams) res.end(this.translator.broken(err));
    else if (!res.headersSent) sendIn(shape, res, err);
    else res.end(shape.event(err));
  }

  private fail(err: unknown): void {
    const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error');
    if (!isRelayError(err)) this.h.deps.log.error({ err }, 'unhandled error');
    if (this.move) return this.endMoved(this.move, e.message); // no placement could take the rest (none fits, the pool paused…)
    this.answered(this.shape.answer(e).status);
    sendIn(this.shape, this.res, e);
  }
}
