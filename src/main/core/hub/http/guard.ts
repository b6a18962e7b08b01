import { createHash } from 'node:crypto';
import { allowedOrigin, answerCors, type OriginMatcher } from './origins.js';
import { hostname as osHostname, networkInterfaces } from 'node:os';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { NextFunction, Request, Response } from 'express';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';

/**
 * Browser defences for the hub's HTTP surface. A web page the hub's owner visits can send requests to
 * 127.0.0.1:7070 (a "simple" cross-origin POST needs no preflight) and, through DNS rebinding, even read the
 * answers under its own name. So: a Host header that is not one of the hub's own names is refused (421); a
 * state-changing request from another origin (Origin, Sec-Fetch-Site) is refused (403); a JSON endpoint only
 * takes application/json (415: a text/plain "simple" request cannot pass); pages may not be framed and run
 * only their own script (CSP). Clients that are not browsers (the CLI, the openai SDK, nodes) send no Origin
 * and are unaffected. Pure checks first, then the middleware that applies them.
 */

/** This machine's non-internal IPv4 addresses: where other machines on the network reach it. */
export function lanAddresses(interfaces = networkInterfaces()): string[] {
  return Object.values(interfaces)
    .flat()
    .filter((a) => a !== undefined && a.family === 'IPv4' && !a.internal)
    .map((a) => a!.address);
}

export function isLoopback(addr: string | undefined): boolean {
  return addr === '127.0.0.1' || addr === '::1' || addr === '::ffff:127.0.0.1' || (addr?.startsWith('127.') ?? false);
}

/**
 * The names and addresses this hub answers to: loopback, the listen address, the machine's name (as the system
 * gives it, its short form, and `<name>.local` for mDNS), its interfaces' addresses, and the owner's own list
 * (RELAY_ALLOWED_HOSTS, `--allowed-hosts`). Never "the machine's name under any domain": a page at
 * `desktop.attacker.example` rebound to 127.0.0.1 would then be same-origin, and loopback is admin.
 */
export function ownHostNames(listenHost: string, extra: readonly string[] = [], machine = osHostname(), interfaces = networkInterfaces()): Set<string> {
  const m = machine.toLowerCase();
  const short = m.split('.')[0]!;
  const names = new Set(['localhost', '127.0.0.1', '::1', listenHost.toLowerCase()]);
  if (m !== '') for (const n of [m, short, `${short}.local`]) names.add(n);
  for (const list of Object.values(interfaces)) for (const a of list ?? []) names.add(a.address.toLowerCase());
  for (const e of extra) if (e.trim()) names.add(e.trim().toLowerCase());
  return names;
}

/** The host part of a Host header (`[::1]:7070` → `::1`, `Desktop.lan:7070` → `desktop.lan`); null when malformed. */
export function hostOf(header: string): string | null {
  const h = header.trim().toLowerCase();
  const m = /^\[([0-9a-f:.]+)\](?::\d{1,5})?$/.exec(h) ?? /^([a-z0-9.-]+)(?::\d{1,5})?$/.exec(h);
  return m ? m[1]!.replace(/\.$/, '') : null;
}

/** Whether a Host header names this hub: one of `names`, or any address 127.x. A request without Host (HTTP/1.0) passes. */
export function hostAllowed(header: string | undefined, names: ReadonlySet<string>): boolean {
  if (header === undefined) return true;
  const h = hostOf(header);
  if (h === null) return false;
  return names.has(h) || /^127\.\d+\.\d+\.\d+$/.test(h);
}

/** Whether a state-changing request comes from this hub's own pages (or from no browser at all). */
export function sameOrigin(origin: string | undefined, secFetchSite: string | undefined, host: string | undefined): boolean {
  if (secFetchSite !== undefined && secFetchSite !== 'same-origin' && secFetchSite !== 'none') return false;
  if (origin === undefined) return true;
  if (origin === 'null') return false; // sandboxed frames, file:// pages, some redirects
  try {
    return host !== undefined && new URL(origin).host.toLowerCase() === host.trim().toLowerCase();
  } catch {
    return false;
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** A request header's value (the first, when sent several times). */
export function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** What every answer carries: never framed, never sniffed, no referrer. */
export function setSecurityHeaders(res: ServerResponse): void {
  res.setHeader('x-frame-options', 'DENY');
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('referrer-policy', 'no-referrer');
}

/** Pure on the request's headers: why the browser guard refuses it (a foreign Host, another site's state-changing request), or null. */
export function guardRefusal(req: IncomingMessage, names: ReadonlySet<string>, origins: OriginMatcher = () => false): RelayError | null {
  if (!hostAllowed(req.headers.host, names)) {
    return new RelayError(
      ErrorCode.MISDIRECTED_REQUEST,
      `this hub does not answer to the name "${req.headers.host}" (if it is really this machine, add the name with --allowed-hosts or RELAY_ALLOWED_HOSTS)`,
    );
  }
  // A page of an origin the owner allows (RELAY_ORIGINS) may call the client routes (origins.ts).
  if (!SAFE_METHODS.has(req.method ?? '') && !sameOrigin(header(req, 'origin'), header(req, 'sec-fetch-site'), req.headers.host) && !allowedOrigin(req, origins)) {
    return new RelayError(ErrorCode.FORBIDDEN, "a request from another site's page is refused (Origin / Sec-Fetch-Site)");
  }
  return null;
}

export function browserGuard(names: ReadonlySet<string>, origins: OriginMatcher = () => false) {
  return (req: Request, res: Response, next: NextFunction): void => {
    setSecurityHeaders(res);
    const refusal = guardRefusal(req, names, origins);
    if (refusal) return next(refusal);
    const origin = allowedOrigin(req, origins);
    if (origin && answerCors(req, res, origin)) return;
    next();
  };
}

/**
 * Whether a request declares a JSON body, as express's `req.is('application/json')` reads it: a body (a length
 * or chunked), and the media type application/json whatever its parameters.
 */
export function declaresJson(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && !Number.isNaN(Number(length)));
  const type = req.headers['content-type'];
  if (!hasBody || type === undefined) return false;
  const semi = type.indexOf(';');
  return (semi < 0 ? type : type.slice(0, semi)).trim().toLowerCase() === 'application/json';
}

/** JSON endpoints take application/json only (a browser's "simple" text/plain POST is refused). */
export function requireJson(req: IncomingMessage, _res: unknown, next: (err?: unknown) => void): void {
  if (declaresJson(req)) return next();
  next(notJson(req));
}

export const notJson = (req: IncomingMessage): RelayError =>
  new RelayError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, `send the body as application/json (got ${req.headers['content-type'] ?? 'no content-type'})`);

/** The dashboard's Content-Security-Policy: its own scripts (the hub's /ui/*.js, its inline one by hash) and nothing else; never framed. */
export function pageCsp(html: string): string {
  const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => `'sha256-${createHash('sha256').update(m[1]!).digest('base64')}'`);
  return [
    "default-src 'none'",
    `script-src ${/<script src="\/ui\//.test(html) ? "'self' " : ''}${scripts.join(' ') || "'none'"}`,
    "style-src 'unsafe-inline'",
    "connect-src 'self'",
    "img-src 'self' data:",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/** Whether a listen address reaches beyond this machine. */
export function beyondLoopback(host: string): boolean {
  return host !== 'localhost' && !isLoopback(host);
}
