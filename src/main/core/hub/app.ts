import type { RequestListener } from 'node:http';
import { originMatcher } from './origins.js';
import express, { type NextFunction, type Request, type Response } from 'express';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { fmtMb } from '../scheduler/fit.js';
import { browserGuard, ownHostNames, requireJson } from './guard.js';
import { readBody } from './body.js';
import { hubAuth, mountLogins } from './auth.js';
import { sendError, type AppDeps, type HubHttp } from './http.js';
import { mountV1, Recent } from './routes-v1.js';
import { modelViewer, mountModels } from './routes-models.js';
import { mountAdmin } from './routes-admin.js';
import { mountPulls } from './routes-pulls.js';
import { mountNodes } from './routes-nodes.js';
import { mountStatus } from './status.js';
import { mountOllama } from './ollama/routes.js';
import { v1Door } from './v1-door.js';

export type { AppDeps } from './http.js';

/**
 * The hub's HTTP surface, assembled: the generation routes first, ahead of express (v1-door.ts); then express
 * with the browser guard first, each group of routes (one file each: auth.ts, routes-v1.ts, ollama/routes.ts,
 * routes-pulls.ts, routes-models.ts, routes-admin.ts, routes-nodes.ts, status.ts), the 404 and the error handler
 * that turns every failure into a coded OpenAI-shaped body.
 */
export function createApp(d: AppDeps): RequestListener {
  const { config, log } = d;
  const app = express();
  app.disable('x-powered-by');
  app.set('trust proxy', false);
  const names = ownHostNames(config.host, config.allowedHosts);
  const origins = originMatcher(config.allowedOrigins);
  app.use(browserGuard(names, origins));

  const body = readBody(config.maxBodyBytes);
  const h: HubHttp = {
    deps: d,
    raw: (req, res, next) => requireJson(req, res, (err?: unknown) => (err ? next(err) : body(req, res, next))),
    auth: hubAuth(config, d.keys),
    recent: new Recent(),
    moves: new Recent(),
    modelView: modelViewer(d),
  };
  for (const mount of [mountLogins, mountV1, mountOllama, mountPulls, mountModels, mountAdmin, mountNodes, mountStatus]) mount(app, h);

  app.use((_req, _res, next) => next(new RelayError(ErrorCode.NOT_FOUND, 'no such endpoint')));

  // Body-parser errors (size, aborted) become coded errors; everything else goes through httpError.
  app.use((err: unknown, _req: Request, res: Response, _next: NextFunction) => {
    const e = err as { type?: string; status?: number; limit?: number };
    if (e?.type === 'entity.too.large') {
      return sendError(res, new RelayError(ErrorCode.PAYLOAD_TOO_LARGE, `the request body is larger than ${fmtMb(config.maxBodyBytes / 1024 / 1024)} (${config.maxBodyBytes} bytes)`), log);
    }
    if (e?.type === 'request.aborted' || e?.type === 'stream.not.readable') return res.destroy();
    sendError(res, err, log);
  });
  const door = v1Door(h, names, origins);
  return (req, res) => {
    if (!door(req, res)) void app(req, res);
  };
}
