import type { NextFunction, Request, Response } from 'express';
import { ErrorCode, isRelayError, RelayError } from '../../../shared/errors.js';
import { MAX_ATTEMPTS, newAttempts } from '../scheduler/scheduler.js';
import type { ModelRecord } from '../store/store.js';
import { proxyToPlacement } from './proxy.js';
import { asRelayError, parseJson, type Mount } from './http.js';
import { DIALECT_ROUTES, errorIn, type DialectRoute, type ErrorShape } from './dialects.js';
import type { RecentRequest, V1ModelDto } from '../../../shared/status.js';

/** The last requests through /v1, newest first, for the dashboard. */
export class RecentRequests {
  readonly list: RecentRequest[] = [];
  constructor(private readonly max = 20) {}
  add(r: RecentRequest): void {
    this.list.unshift(r);
    if (this.list.length > this.max) this.list.pop();
  }
}

/** Whether a model can serve a route: generation routes refuse embedding models and rerankers, and back. */
function checkUse(use: DialectRoute['use'], record: ModelRecord, name: string): void {
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
 * The client surface llama-server speaks, through the pool: /v1/models, and every route of dialects.ts — OpenAI's
 * chat completions, completions, embeddings and Responses, Anthropic's Messages, rerank, infill and llama-server's
 * tokenizer helpers — each relayed to a placement of the model the scheduler leases, failing over before the first
 * byte, its errors in its dialect's shape.
 */
export const mountV1: Mount = (app, { deps: d, raw, auth, recent }) => {
  const { registry, scheduler, metrics, log } = d;
  app.get('/v1/models', auth.requireApiKey, (_req, res) => {
    res.json({
      object: 'list',
      data: registry.list().map((m): V1ModelDto => {
        const a = scheduler.availability(m);
        return { id: m.name, object: 'model', created: Math.floor(Date.parse(m.added_at) / 1000), owned_by: 'relay', available: a.available, unavailable_reason: a.reason };
      }),
    });
  });

  for (const route of DIALECT_ROUTES) {
    const { endpoint } = route;
    app.post(
      route.path,
      auth.requireApiKey,
      raw,
      async (req: Request, res: Response) => {
        const t0 = Date.now();
        let model = '';
        const done = (status: number, usage: { promptTokens: number; completionTokens: number; tokensPerSecond: number | null } | null = null): void => {
          metrics.requests.add({ endpoint, status: String(status) });
          recent.add({
            at: new Date(t0).toISOString(),
            model,
            endpoint,
            status,
            ms: Date.now() - t0,
            prompt_tokens: usage?.promptTokens ?? null,
            completion_tokens: usage?.completionTokens ?? null,
            tokens_per_second: usage?.tokensPerSecond ?? null,
          });
        };
        try {
          const body = parseJson(req);
          const name = route.validate(body);
          model = name;
          checkUse(route.use, registry.require(name), name);
          // Failover before the first byte: a placement that fails before answering is excluded and the request
          // goes to another placement or a fresh one, at most MAX_ATTEMPTS tries in all (loads that failed under
          // it count too); after the first byte the client gets the error event.
          const attempts = newAttempts();
          const gone = new AbortController();
          res.on('close', () => {
            if (!res.writableFinished) gone.abort();
          });
          for (;;) {
            const lease = await scheduler.acquire(name, attempts, gone.signal);
            if (res.destroyed) {
              lease.release();
              return;
            }
            const outcome = await proxyToPlacement({
              lease,
              path: route.upstream ?? route.path,
              body: req.body as Buffer,
              req,
              res,
              log,
              errors: route.errors,
              spares: d.spares,
              onDone: (status, usage) => {
                done(status, usage);
                if (usage) {
                  metrics.tokens.add({ model: name, kind: 'prompt' }, usage.promptTokens);
                  metrics.tokens.add({ model: name, kind: 'completion' }, usage.completionTokens);
                }
              },
            });
            if (outcome.kind === 'done') return;
            scheduler.failedBefore(lease, attempts, outcome.error);
            if (attempts.errors.length >= MAX_ATTEMPTS) throw outcome.error;
          }
        } catch (err) {
          const e = isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error');
          if (!isRelayError(err)) log.error({ err }, 'unhandled error');
          done(errorIn(route.errors, e).status);
          sendIn(route.errors, res, e);
        }
      },
      // Errors before the handler (an API key, the body's type and size) in the route's own shape too.
      (err: unknown, _req: Request, res: Response, _next: NextFunction) => sendIn(route.errors, res, asRelayError(err, d.config.maxBodyBytes)),
    );
  }
};

/** Answer `err` in a dialect's shape (Retry-After for pool_busy); a response already under way is cut. */
function sendIn(shape: ErrorShape, res: Response, err: RelayError): void {
  if (res.headersSent) return void res.destroy();
  const { status, body } = errorIn(shape, err);
  if (typeof err.details.retry_after_s === 'number') res.setHeader('retry-after', String(err.details.retry_after_s));
  res.status(status).json(body);
}
