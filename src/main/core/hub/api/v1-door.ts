import type { IncomingMessage, ServerResponse } from 'node:http';
import { allowedOrigin, answerCors, type OriginMatcher } from '../http/origins.js';
import { ErrorCode, isRelayError, RelayError } from '../../../../shared/errors.js';
import { readBody } from '../http/body.js';
import type { DialectRoute } from './dialect.js';
import { DIALECT_ROUTES } from './dialects.js';
import { declaresJson, guardRefusal, notJson, setSecurityHeaders } from '../http/guard.js';
import { asRelayError, sendIn } from '../http/answer.js';
import { parseJson, type V1Request } from '../http/request.js';
import type { HubHttp } from '../http/context.js';
import { throughPool } from '../proxy/pooled.js';

/** The prefix of a model's own base URL: /model/NAME/v1/chat/completions, /model/NAME/infill … */
export const MODEL_PREFIX = '/model';

const BY_PATH = new Map(DIALECT_ROUTES.map((r) => [r.path.toLowerCase(), r]));

/** A request target's path, as express read it (parseurl): cut at `?` or `#`; an absolute-form target's own path. */
export function targetPath(url: string): string {
  let path = url;
  if (!path.startsWith('/')) {
    const scheme = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(path);
    if (!scheme) return path;
    path = path.slice(scheme[0].length) || '/';
  }
  const end = path.search(/[?#]/);
  return end < 0 ? path : path.slice(0, end);
}

/**
 * Pure: the dialect route a request names, matched as express matches a route (case-insensitive, a trailing
 * slash allowed, the query ignored), and the model its base URL names when it is under /model/NAME (`named`,
 * decoded; null when its escapes are malformed). Null: not a dialect route (a GET, another path).
 */
export function dialectTarget(method: string | undefined, url: string | undefined): { route: DialectRoute; named?: string | null } | null {
  if (method !== 'POST' || url === undefined) return null;
  let path = targetPath(url);
  if (path.length > 1 && path.endsWith('/')) path = path.slice(0, -1);
  const lower = path.toLowerCase();
  if (lower.startsWith(`${MODEL_PREFIX}/`)) {
    const end = path.indexOf('/', MODEL_PREFIX.length + 1);
    if (end <= MODEL_PREFIX.length + 1) return null;
    const route = BY_PATH.get(lower.slice(end));
    if (!route) return null;
    const raw = path.slice(MODEL_PREFIX.length + 1, end);
    let named: string | null;
    try {
      named = decodeURIComponent(raw);
    } catch {
      named = null;
    }
    return { route, named };
  }
  const route = BY_PATH.get(lower);
  return route ? { route } : null;
}

/**
 * The client surface llama-server speaks, answered ahead of express: every route of dialects.ts — OpenAI's chat
 * completions, completions, embeddings and Responses, Anthropic's Messages, rerank, infill and llama-server's
 * tokenizer helpers — each also under /model/NAME (for clients that send no model or a fixed one: llama.vscode
 * posts /infill with none, its embeddings as "GPT-4"; the base URL's name wins over the body's). The same checks
 * as the rest of the hub, in the same order (the browser guard, the API key, a JSON body within the size limit),
 * each refusal in the route's own shape; then the pool (pooled.ts). Ahead of express because a request through
 * express's router, its per-request prototypes and its content-type parsing cost 0.2–0.3 ms of the hub's added
 * time-to-first-token on a 2-core VM (measured, docs/benchmarks.md); everything else stays on express (app.ts).
 * Returns false for a request that is not a dialect route.
 */
export function v1Door(h: HubHttp, names: ReadonlySet<string>, origins: OriginMatcher = () => false): (req: IncomingMessage, res: ServerResponse) => boolean {
  const { maxBodyBytes } = h.deps.config;
  const body = readBody(maxBodyBytes);
  return (req: V1Request, res) => {
    const target = dialectTarget(req.method, req.url);
    if (!target) return false;
    const { route, named } = target;
    // What express's router did for a handler that threw: the error is the answer (a 500 unless coded), never the process's end.
    const refuse = (err: unknown): void => {
      if (!isRelayError(err)) h.deps.log.error({ err }, 'unhandled error');
      sendIn(route.errors, res, asRelayError(err, maxBodyBytes)); // a response under way is cut
    };
    try {
      setSecurityHeaders(res);
      const guarded = guardRefusal(req, names, origins);
      // As browserGuard: past the guard, an allowed page may read the answer, a missing key's 401 included.
      const origin = guarded ? null : allowedOrigin(req, origins);
      if (origin) answerCors(req, res, origin);
      const refusal =
        guarded ??
        h.auth.apiKeyRefusal(req) ??
        (declaresJson(req) ? null : notJson(req)) ??
        (named === null ? new RelayError(ErrorCode.INVALID_REQUEST, 'the model name in the path is not valid percent-encoding') : null);
      if (refusal) {
        refuse(refusal);
        return true;
      }
      body(req, res, (err?: unknown) => {
        if (err) return refuse(err);
        throughPool(h, req, res, route.endpoint, route.errors, () => {
          const json = named === undefined ? parseJson(req) : { ...parseJson(req), model: named };
          return {
            model: route.validate(json),
            use: route.use,
            path: route.upstream ?? route.path,
            body: named === undefined ? (req.body as Buffer) : Buffer.from(JSON.stringify(json)),
            json,
          };
        }).catch(refuse);
      });
    } catch (err) {
      refuse(err);
    }
    return true;
  };
}
