import type { NextFunction, Request, Response } from 'express';
import { asRelayError, parseJson, type Mount } from './http.js';
import { DIALECT_ROUTES } from './dialects.js';
import { sendIn, throughPool } from './pooled.js';
import type { RecentRequest, V1ModelDto } from '../../../shared/status.js';

/** The prefix of a model's own base URL: /model/NAME/v1/chat/completions, /model/NAME/infill … */
export const MODEL_PREFIX = '/model';

/** The last requests through /v1, newest first, for the dashboard. */
export class RecentRequests {
  readonly list: RecentRequest[] = [];
  constructor(private readonly max = 20) {}
  add(r: RecentRequest): void {
    this.list.unshift(r);
    if (this.list.length > this.max) this.list.pop();
  }
}

/**
 * The client surface llama-server speaks, through the pool: /v1/models, and every route of dialects.ts — OpenAI's
 * chat completions, completions, embeddings and Responses, Anthropic's Messages, rerank, infill and llama-server's
 * tokenizer helpers — each relayed to a placement of the model the scheduler leases, failing over before the first
 * byte, its errors in its dialect's shape.
 */
export const mountV1: Mount = (app, h) => {
  const { registry, scheduler } = h.deps;
  const { auth, raw } = h;
  app.get('/v1/models', auth.requireApiKey, (_req, res) => {
    res.json({
      object: 'list',
      data: registry.list().map((m): V1ModelDto => {
        const a = scheduler.availability(m);
        return {
          id: m.name,
          object: 'model',
          created: Math.floor(Date.parse(m.added_at) / 1000),
          owned_by: 'relay',
          available: a.available,
          unavailable_reason: a.reason,
          input_modalities: m.mmproj ? ['text', 'image'] : ['text'],
        };
      }),
    });
  });

  for (const route of DIALECT_ROUTES) {
    // Each route also under /model/NAME, for clients that send no model or a fixed one (llama.vscode posts /infill
    // with none, its embeddings as "GPT-4"): their base URL names the model, which wins over the body's.
    app.post(
      [route.path, `${MODEL_PREFIX}/:name${route.path}`],
      auth.requireApiKey,
      raw,
      (req: Request, res: Response) =>
        throughPool(h, req, res, route.endpoint, route.errors, () => {
          const named = req.params.name;
          const body = named === undefined ? parseJson(req) : { ...parseJson(req), model: named };
          return {
            model: route.validate(body),
            use: route.use,
            path: route.upstream ?? route.path,
            body: named === undefined ? (req.body as Buffer) : Buffer.from(JSON.stringify(body)),
            json: body,
          };
        }),
      // Errors before the handler (an API key, the body's type and size) in the route's own shape too.
      (err: unknown, _req: Request, res: Response, _next: NextFunction) => sendIn(route.errors, res, asRelayError(err, h.deps.config.maxBodyBytes)),
    );
  }
};
