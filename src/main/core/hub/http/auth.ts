import type { IncomingMessage } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import type { HubConfig } from '../../config.js';
import { beyondLoopback, header, isLoopback } from './guard.js';
import type { ApiKeys } from './keys.js';
import { cookieValue, DashboardSessions, SESSION_COOKIE } from './sessions.js';
import { bearer, safeEqual } from './request.js';

/**
 * Who may call what: /v1 with an API key (when one is required), the admin API from loopback, with
 * RELAY_ADMIN_TOKEN or from a browser logged in through a one-time link, the read-only views also with a
 * /v1 key. The login links themselves are the owner's (admin/logins.ts).
 */
export interface HubAuth {
  /** /v1 needs a key when RELAY_API_KEY is set, when keys were made, and always on a hub that listens beyond loopback. */
  keyRequired(): boolean;
  /** Why a /v1 request is refused for its key (none, or not one of this hub's), or null. */
  apiKeyRefusal(req: IncomingMessage): RelayError | null;
  requireApiKey(req: Request, res: Response, next: NextFunction): void;
  /** The name of the API key a request was let in with (checked by apiKeyRefusal), or null: none, or RELAY_API_KEY. */
  keyOf(req: IncomingMessage): string | null;
  requireAdmin(readOnly: boolean): (req: Request, res: Response, next: NextFunction) => void;
  readonly logins: DashboardSessions;
}

/**
 * Admin API and status views: loopback clients always; others only with RELAY_ADMIN_TOKEN, or, for the
 * read-only views (/status, /metrics, GET /api/models), with the /v1 API key.
 */
export function adminAllowed(
  remote: string | undefined,
  token: string | undefined,
  c: Pick<HubConfig, 'adminToken' | 'apiKey'>,
  readOnly: boolean,
  isApiKey: (token: string) => boolean = () => false,
): boolean {
  if (isLoopback(remote)) return true;
  if (token && c.adminToken && safeEqual(token, c.adminToken)) return true;
  return Boolean(readOnly && token && ((c.apiKey && safeEqual(token, c.apiKey)) || isApiKey(token)));
}

export function hubAuth(config: HubConfig, keys: ApiKeys): HubAuth {
  const keyRequired = (): boolean => Boolean(config.apiKey) || keys.any || beyondLoopback(config.host);
  const isApiKey = (token: string): boolean => Boolean((config.apiKey && safeEqual(token, config.apiKey)) || keys.verify(token));
  const logins = new DashboardSessions();
  const names = new WeakMap<IncomingMessage, string>();
  const apiKeyRefusal = (req: IncomingMessage): RelayError | null => {
    // Anthropic's clients (Claude Code, the anthropic SDK) send the key as x-api-key.
    const token = bearer(req) ?? header(req, 'x-api-key');
    // A named key counts its requests whether or not the hub requires one (its class, quotas and usage).
    const name = token ? keys.verify(token) : null;
    if (name !== null) names.set(req, name);
    if (!keyRequired()) return null;
    if (name !== null || (token && config.apiKey && safeEqual(token, config.apiKey))) return null;
    return new RelayError(
      ErrorCode.INVALID_API_KEY,
      !config.apiKey && !keys.any
        ? `this hub listens on ${config.host}, beyond this machine, so /v1 needs an API key: make one with \`relay keys create NAME\` (or on the dashboard) and send Authorization: Bearer <key>`
        : 'a valid API key is required: send Authorization: Bearer <key> (or x-api-key: <key>)',
    );
  };
  return {
    keyRequired,
    logins,
    apiKeyRefusal,
    requireApiKey: (req, _res, next) => next(apiKeyRefusal(req) ?? undefined),
    keyOf: (req) => names.get(req) ?? null,
    requireAdmin: (readOnly) => (req, _res, next) => {
      const remote = config.loopbackAdmin ? req.socket.remoteAddress : undefined;
      if (adminAllowed(remote, bearer(req), config, readOnly, isApiKey)) return next();
      // A browser logged in through a one-time link (relay dashboard --link): admin, or read-only views only.
      const role = logins.role(cookieValue(req.get('cookie'), SESSION_COOKIE));
      if (role === 'admin' || (role === 'read' && readOnly)) return next();
      next(
        new RelayError(
          ErrorCode.FORBIDDEN,
          role === 'read' ? 'this dashboard login is read-only' : 'the admin API answers loopback clients, a dashboard login (relay dashboard --link on the hub machine), or RELAY_ADMIN_TOKEN',
        ),
      );
    },
  };
}
