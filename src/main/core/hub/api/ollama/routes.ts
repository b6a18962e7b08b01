import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { ErrorCode, isRelayError, RelayError } from '../../../../../shared/errors.js';
import { newAttempts } from '../../../scheduler/scheduler.js';
import { readBody } from '../../http/body.js';
import { asRelayError, sendIn } from '../../http/answer.js';
import { parseJson } from '../../http/request.js';
import type { Mount } from '../../http/context.js';
import { checkUse, throughPool } from '../../proxy/pooled.js';
import { OLLAMA_ERRORS } from './errors.js';
import { listed, ModelCards, psEntries, showBody, tagEntry } from './models.js';
import { chatUpstream, embedUpstream, generateUpstream, isLoadOnly, modelField, registeredName, unloadsNow, wantsStream } from './request.js';
import { loadedAnswer, ollamaEmbedding, ollamaGeneration } from './response.js';

/**
 * The Ollama API (docs/api.md of ollama/ollama) on the hub, for the apps that speak only it — Open WebUI's Ollama
 * connection, Home Assistant's Ollama integration, the ollama SDKs, editors' "Ollama" providers. Generation and
 * embeddings go through the pool like any /v1 request (the same lease, queue, failover and request log), translated
 * by request.ts and response.ts; the model list comes from the registry and each GGUF's header. The routes that
 * download, build or delete models refuse with a pointer to `relay models`: the hub's models are the files its
 * owner registered. The same API key as /v1 guards it.
 */

/** The Ollama API version these routes follow (some clients check it before using newer fields such as `think`). */
export const OLLAMA_API_VERSION = '0.12.0';

type Json = Record<string, unknown>;

export const mountOllama: Mount = (app, h) => {
  const { registry, scheduler, config } = h.deps;
  const { auth } = h;
  const cards = new ModelCards();
  const read = readBody(config.maxBodyBytes);
  // Ollama's own examples use `curl -d`, which labels the JSON form-encoded: accepted as JSON from anything that
  // is not a browser. A browser's request must still say application/json (guard.ts: a page's simple POST cannot).
  const body: RequestHandler = (req, res, next) => (req.get('origin') === undefined && req.get('sec-fetch-site') === undefined ? read(req, res, next) : h.raw(req, res, next));
  const inOllamaShape = (err: unknown, _req: Request, res: Response, _next: NextFunction): void => sendIn(OLLAMA_ERRORS, res, asRelayError(err, config.maxBodyBytes));
  const has = (n: string): boolean => registry.get(n) !== undefined;
  /** The registered model an Ollama request names (`x:latest` is `x`). */
  const recordOf = (b: Json) => registry.require(registeredName(modelField(b), has));
  const answer = (res: Response, run: () => Promise<unknown>): Promise<void> =>
    run().then(
      (v) => void res.json(v),
      (err: unknown) => sendIn(OLLAMA_ERRORS, res, isRelayError(err) ? err : new RelayError(ErrorCode.INTERNAL, 'internal error')),
    );

  app.get('/api/version', auth.requireApiKey, (_req: Request, res: Response) => res.json({ version: OLLAMA_API_VERSION }), inOllamaShape);

  app.get(
    '/api/tags',
    auth.requireApiKey,
    (_req: Request, res: Response) => answer(res, async () => ({ models: await Promise.all(listed(registry.list()).map(async (m) => tagEntry(m, await cards.cardOrNull(m)))) })),
    inOllamaShape,
  );

  app.post(
    '/api/show',
    auth.requireApiKey,
    body,
    (req: Request, res: Response) =>
      answer(res, async () => {
        const b = parseJson(req);
        const m = recordOf(b);
        const projector = await cards.projectorInfo(m);
        return { ...showBody(m, await cards.card(m, b.verbose === true), scheduler.need(m).ctx), ...(projector ? { projector_info: projector } : {}) };
      }),
    inOllamaShape,
  );

  app.get(
    '/api/ps',
    auth.requireApiKey,
    (_req: Request, res: Response) =>
      answer(res, async () => {
        const ready = scheduler.view.ready();
        const known = new Map(
          await Promise.all([...new Set(ready.map((p) => p.model))].flatMap((n) => (registry.get(n) ? [registry.get(n)!] : [])).map(async (m) => [m.name, await cards.cardOrNull(m)] as const)),
        );
        return {
          models: psEntries(
            ready,
            (n) => registry.get(n),
            (m) => known.get(m.name) ?? null,
            config.keepAliveMs,
            Date.now(),
          ),
        };
      }),
    inOllamaShape,
  );

  for (const kind of ['chat', 'generate'] as const) {
    app.post(
      `/api/${kind}`,
      auth.requireApiKey,
      body,
      async (req: Request, res: Response) => {
        const b = maybeJson(req);
        if (b && isLoadOnly(b, kind)) return answer(res, () => loadOrUnload(b, kind));
        await throughPool(h, req, res, `ollama/${kind}`, OLLAMA_ERRORS, () => {
          const b = parseJson(req);
          const asked = modelField(b);
          const name = registeredName(asked, has);
          const stream = wantsStream(b);
          const up = kind === 'chat' ? chatUpstream(b, name) : generateUpstream(b, name);
          return {
            model: name,
            use: 'generate',
            path: up.path,
            body: Buffer.from(JSON.stringify(up.body)),
            json: up.body,
            translate: (t) => ollamaGeneration({ kind, model: asked, stream, upstream: up.format, ...t }),
          };
        });
      },
      inOllamaShape,
    );
  }

  for (const [path, legacy] of [
    ['/api/embed', false],
    ['/api/embeddings', true],
  ] as const) {
    app.post(
      path,
      auth.requireApiKey,
      body,
      (req: Request, res: Response) =>
        throughPool(h, req, res, legacy ? 'ollama/embeddings' : 'ollama/embed', OLLAMA_ERRORS, () => {
          const b = parseJson(req);
          const asked = modelField(b);
          const name = registeredName(asked, has);
          const up = embedUpstream(b, name, legacy);
          return { model: name, use: 'embed', path: up.path, body: Buffer.from(JSON.stringify(up.body)), json: up.body, translate: (t) => ollamaEmbedding({ model: asked, legacy, ...t }) };
        }),
      inOllamaShape,
    );
  }

  // The model store is the hub owner's: no downloads, no Modelfiles, no deletes from a chat app.
  const managed =
    (what: string): RequestHandler =>
    (_req, res) =>
      sendIn(
        OLLAMA_ERRORS,
        res,
        new RelayError(
          ErrorCode.NOT_SUPPORTED,
          `relay does not ${what}: the hub serves the GGUF files its owner registers (on the hub: relay models add FILE, relay models import ollama, relay models rm NAME)`,
        ),
      );
  app.post('/api/pull', auth.requireApiKey, managed('download models'), inOllamaShape);
  app.post('/api/push', auth.requireApiKey, managed('upload models'), inOllamaShape);
  app.post('/api/create', auth.requireApiKey, managed('create models from a Modelfile'), inOllamaShape);
  app.post('/api/copy', auth.requireApiKey, managed('copy models'), inOllamaShape);
  app.delete('/api/delete', auth.requireApiKey, managed('delete models through the Ollama API'), inOllamaShape);
  app.all('/api/blobs/:digest', auth.requireApiKey, managed('take model blobs'), inOllamaShape);

  /** An empty chat or generate: load the model (a slot leased and given back), or with keep_alive 0 unload it. */
  async function loadOrUnload(b: Json, kind: 'chat' | 'generate'): Promise<Json> {
    const asked = modelField(b);
    const m = recordOf(b);
    checkUse('generate', m, m.name);
    if (unloadsNow(b.keep_alive)) {
      await scheduler.stopModel(m.name, 'unloaded by an Ollama client (keep_alive 0)', true);
      return loadedAnswer(kind, asked, 'unload');
    }
    const lease = await scheduler.acquire(m.name, newAttempts());
    lease.release();
    return loadedAnswer(kind, asked, 'load');
  }
};

/** The body as JSON, or null when it is not (throughPool then answers why). */
function maybeJson(req: Request): Json | null {
  try {
    return parseJson(req);
  } catch {
    return null;
  }
}
