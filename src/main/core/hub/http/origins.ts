import type { IncomingMessage, ServerResponse } from 'node:http';

/**
 * Browser pages the hub's owner lets call the client API: RELAY_ORIGINS, as Ollama's OLLAMA_ORIGINS — a local web
 * UI (`http://localhost:*`), an editor's webview (`vscode-webview://*`), an app (`app://*`). By default none: a web
 * page another site serves must not drive the models (or worse) of the machine its visitor sits at. An allowed
 * origin gets CORS on the client routes only (OpenAI's, Anthropic's, Ollama's own and `/model/NAME/…`), never on
 * the owner's API; an API key, where the hub requires one, is still required.
 */
export type OriginMatcher = (origin: string) => boolean;

/** `*` in a pattern stands for any run of characters (a port, a subdomain, a webview's id). */
export function originMatcher(patterns: readonly string[]): OriginMatcher {
  const res = patterns.map(
    (p) =>
      new RegExp(
        `^${p
          .trim()
          .toLowerCase()
          .replace(/[.+?^${}()|[\]\\]/g, '\\$&')
          .replace(/\*/g, '.*')}$`,
      ),
  );
  return (origin) => res.some((re) => re.test(origin.toLowerCase()));
}

/** Ollama's routes a client calls (not its pull/create/delete, which relay answers 501 or refuses anyway). */
const OLLAMA_CLIENT = new Set(['/api/chat', '/api/generate', '/api/embed', '/api/embeddings', '/api/tags', '/api/show', '/api/ps', '/api/version']);

export function isClientRoute(path: string): boolean {
  const p = path.split('?')[0]!.toLowerCase();
  return p.startsWith('/v1/') || p.startsWith('/model/') || OLLAMA_CLIENT.has(p) || p === '/infill' || p === '/completion' || p === '/rerank' || p === '/reranking';
}

/** The request's Origin, when the owner allows it on this route; else null. */
export function allowedOrigin(req: IncomingMessage, allowed: OriginMatcher): string | null {
  const origin = req.headers.origin;
  return typeof origin === 'string' && origin !== 'null' && isClientRoute(req.url ?? '/') && allowed(origin) ? origin : null;
}

/**
 * CORS for an allowed origin: its answer says so; a preflight (OPTIONS) is answered here. True when the request is
 * done (a preflight).
 */
export function answerCors(req: IncomingMessage, res: ServerResponse, origin: string): boolean {
  res.setHeader('access-control-allow-origin', origin);
  res.setHeader('vary', 'Origin');
  if (req.method !== 'OPTIONS') return false;
  res.writeHead(204, {
    'access-control-allow-methods': 'GET, POST, OPTIONS',
    'access-control-allow-headers': 'authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-organization, user-agent',
    'access-control-max-age': '600',
  });
  res.end();
  return true;
}
