import type { ServerResponse } from 'node:http';
import { checkImages, inlineRemoteImages } from './images.js';
import { promptPrefix } from './prompt-prefix.js';
import { ErrorCode, isRelayError, RelayError } from '../../../shared/errors.js';
import { MAX_ATTEMPTS, newAttempts } from '../scheduler/scheduler.js';
import type { ModelRecord } from '../store/store.js';
import { proxyToPlacement, type Translator, type Usage } from './proxy.js';
import { errorIn, type ErrorShape, type ModelUse } from './dialects.js';
import { sendIn, type HubHttp, type V1Request } from './http.js';

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
    const attempts = newAttempts();
    const gone = new AbortController();
    res.on('close', () => {
      if (!res.writableFinished) gone.abort();
    });
    for (;;) {
      const lease = await scheduler.acquire(p.model, attempts, gone.signal, prefix);
      if (res.destroyed) {
        lease.release();
        return;
      }
      const outcome = await proxyToPlacement({
        lease,
        path: p.path,
        body: p.body,
        req,
        res,
        log,
        errors: shape,
        spares,
        translate: p.translate?.({ startedAt: t0, leasedAt: Date.now() }),
        onDone: done,
      });
      if (outcome.kind === 'done') return;
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
    done(errorIn(shape, e).status);
    sendIn(shape, res, e);
  }
}
