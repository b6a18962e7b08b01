import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensureHubCert } from './hub-cert.js';

/**
 * Join tokens: `rly1.<payload>.<mac>`, payload = base64url JSON {id, exp}, mac = HMAC-SHA256 with the hub's
 * secret (RELAY_HOME/join-secret, 0600). Minting needs only the secret, so `relay nodes token --home DIR`
 * works without the hub running; each token is accepted once (the hub records its id) and expires.
 * A node exchanges its token for a random per-node credential; the hub stores only its sha256.
 */
export const JOIN_TOKEN_TTL_MS = 24 * 3600_000;

export function joinSecret(home: string): Buffer {
  const p = join(home, 'join-secret');
  if (!existsSync(p)) {
    mkdirSync(home, { recursive: true });
    writeFileSync(p, randomBytes(32).toString('hex'), { mode: 0o600, flag: 'wx' });
  }
  chmodSync(p, 0o600);
  return Buffer.from(readFileSync(p, 'utf8').trim(), 'hex');
}

const b64 = (b: Buffer | string): string => Buffer.from(b).toString('base64url');

/**
 * `fp`: the SHA-256 fingerprint of the hub's certificate (hub-cert.ts). The node reads it from the token (it has
 * no secret to check the MAC with; it trusts the token it was handed) and accepts that certificate only.
 */
export function mintJoinToken(secret: Buffer, nowMs = Date.now(), ttlMs = JOIN_TOKEN_TTL_MS, fp?: string, hub?: string): string {
  const payload = b64(JSON.stringify({ id: randomBytes(9).toString('hex'), exp: nowMs + ttlMs, ...(fp ? { fp } : {}), ...(hub ? { hub } : {}) }));
  const mac = b64(createHmac('sha256', secret).update(payload).digest());
  return `rly1.${payload}.${mac}`;
}

function tokenPayload(token: string): Record<string, unknown> | null {
  const parts = token.split('.');
  if (parts.length !== 3 || parts[0] !== 'rly1') return null;
  try {
    const p: unknown = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8'));
    return typeof p === 'object' && p !== null ? (p as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/** The hub certificate fingerprint a token carries (null: a hub with a certificate of the user's own, or an older token). */
export function tokenFingerprint(token: string): string | null {
  const fp = tokenPayload(token)?.fp;
  return typeof fp === 'string' && /^[0-9a-f]{64}$/.test(fp) ? fp : null;
}

/**
 * The hub URL a token carries (minted by "Add a node" on the dashboard: one paste sets a node up), or null.
 * (setup.html reads it the same way to fill its hub field.)
 */
export function tokenHubUrl(token: string): string | null {
  const hub = tokenPayload(token)?.hub;
  return typeof hub === 'string' && /^https?:\/\/[^\s/]+$/.test(hub) ? hub : null;
}

/**
 * A join token for the hub whose data dir is `home`, carrying the fingerprint of the certificate it serves
 * nodes (written at each start; before the first start, the certificate it will make).
 */
export function hubJoinToken(home: string, hubUrl?: string): string {
  const p = join(home, 'tls-fingerprint');
  const fp = existsSync(p) ? readFileSync(p, 'utf8').trim() : ensureHubCert(home).fingerprint;
  return mintJoinToken(joinSecret(home), Date.now(), JOIN_TOKEN_TTL_MS, fp, hubUrl);
}

export type TokenCheck = { ok: true; id: string } | { ok: false; why: string };

export function checkJoinToken(secret: Buffer, token: string, nowMs = Date.now()): TokenCheck {
  const parts = typeof token === 'string' ? token.split('.') : [];
  if (parts.length !== 3 || parts[0] !== 'rly1') return { ok: false, why: 'not a relay join token' };
  const want = createHmac('sha256', secret).update(parts[1]!).digest();
  const got = Buffer.from(parts[2]!, 'base64url');
  if (got.length !== want.length || !timingSafeEqual(got, want)) return { ok: false, why: 'the token was not issued by this hub' };
  let p: { id?: unknown; exp?: unknown };
  try {
    p = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as typeof p;
  } catch {
    return { ok: false, why: 'malformed token' };
  }
  if (typeof p.id !== 'string' || typeof p.exp !== 'number') return { ok: false, why: 'malformed token' };
  if (nowMs > p.exp) return { ok: false, why: 'the token has expired' };
  return { ok: true, id: p.id };
}

export function newCredential(): string {
  return randomBytes(32).toString('base64url');
}

export function credentialHash(c: string): string {
  return createHash('sha256').update(c).digest('hex');
}
