import type { RequestListener } from 'node:http';
import express, { type NextFunction, type Request, type Response } from 'express';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { fmtMb } from '../scheduler/decide/fit.js';
import { mountHubSettings } from './admin/hub-settings.js';
import { mountLogins } from './admin/logins.js';
import { mountModels } from './admin/models.js';
import { mountNodes } from './admin/nodes.js';
import { mountPulls } from './admin/pulls.js';
import { mountV1Models } from './api/models.js';
import { mountOllama } from './api/ollama/routes.js';
import { v1Door } from './api/v1-door.js';
import { sendError } from './http/answer.js';
import { hubAuth } from './http/auth.js';
import { readBody } from './http/body.js';
import type { AppDeps, HubHttp } from './http/context.js';
import { browserGuard, ownHostNames, requireJson } from './http/guard.js';
import { originMatcher } from './http/origins.js';
import { Recent } from './state/recent.js';
import { mountStatus } from './observe/status.js';

export type { AppDeps } from './http/context.js';

/**
 * The hub's HTTP surface, assembled from its rooms: the dialect routes first, ahead of express (api/v1-door.ts);
 * then express with the browser guard first and each group of routes in the order of the list below — the owner's
 * login links, the client APIs (api/), the owner's API (admin/), what the pool shows (observe/) — the 404 and the
 * error handler that turns every failure into a coded OpenAI-shaped body. A new group of routes is a Mount in its
 * room and a name in that list.
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
  };
  for (const mount of [mountLogins, mountV1Models, mountOllama, mountPulls, mountModels, mountHubSettings, mountNodes, mountStatus]) mount(app, h);

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
