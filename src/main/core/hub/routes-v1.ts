import { ErrorCode, httpError, isRelayError, RelayError } from '../../../shared/errors.js';
import { MAX_ATTEMPTS, newAttempts } from '../scheduler/scheduler.js';
import { proxyToPlacement } from './proxy.js';
import { parseJson, type Mount } from './http.js';
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

type Endpoint = 'chat/completions' | 'completions' | 'embeddings';

/** Field checks per endpoint: enough to refuse nonsense with a 400 before a replica is loaded for it. */
function validate(endpoint: Endpoint, body: Record<string, unknown>): string {
  const bad = (msg: string): never => {
    throw new RelayError(ErrorCode.INVALID_REQUEST, msg);
  };
  if (typeof body.model !== 'string' || body.model === '') bad('"model" must be a non-empty string naming a registered model');
  if (endpoint === 'chat/completions') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) bad('"messages" must be a non-empty array');
    for (const m of body.messages as unknown[]) {
      if (typeof m !== 'object' || m === null || typeof (m as { role?: unknown }).role !== 'string') bad('each message must be an object with a string "role"');
    }
  } else if (endpoint === 'completions') {
    const p = body.prompt;
    if (!(typeof p === 'string' || (Array.isArray(p) && p.length > 0))) bad('"prompt" must be a string or a non-empty array');
  } else if (!(typeof body.input === 'string' || (Array.isArray(body.input) && body.input.length > 0))) {
    bad('"input" must be a string or a non-empty array');
  }
  if (body.stream !== undefined && typeof body.stream !== 'boolean') bad('"stream" must be a boolean');
  if (body.max_tokens !== undefined && !(Number.isInteger(body.max_tokens) && (body.max_tokens as number) >= 0)) bad('"max_tokens" must be a non-negative integer');
  return body.model as string;
}

/**
 * The OpenAI-compatible surface: /v1/models, and chat completions, completions and embeddings relayed to a
 * placement of the model the scheduler leases (failing over before the first byte).
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

  for (const endpoint of ['chat/completions', 'completions', 'embeddings'] as const) {
    app.post(`/v1/${endpoint}`, auth.requireApiKey, raw, async (req, res, next) => {
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
        const name = validate(endpoint, body);
        model = name;
        const record = registry.require(name);
        if (endpoint === 'embeddings' && !record.embedding) {
          throw new RelayError(ErrorCode.MODEL_NOT_EMBEDDING, `"${name}" is not registered as an embedding model (relay models add FILE --embedding)`, { model: name });
        }
        if (endpoint !== 'embeddings' && record.embedding) {
          throw new RelayError(ErrorCode.INVALID_REQUEST, `"${name}" is an embedding model: use /v1/embeddings`, { model: name });
        }
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
            path: `/v1/${endpoint}`,
            body: req.body as Buffer,
            req,
            res,
            log,
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
        const status = isRelayError(err) ? httpError(err).status : 500;
        done(status);
        next(err);
      }
    });
  }
};
