import { randomBytes } from 'node:crypto';

/**
 * Browser logins for the dashboard from another machine. The hub's owner asks for a one-time link (`relay
 * dashboard --link`, from the hub machine); opening it exchanges the link's token for a session cookie
 * (HttpOnly, SameSite=Strict) that /status, /events and — for an admin session — the admin API accept. Links
 * expire after 10 minutes and work once; sessions last 7 days or until the hub restarts (kept in memory).
 */
export type DashboardRole = 'admin' | 'read';

export const SESSION_COOKIE = 'relay_session';
const LINK_TTL_MS = 10 * 60_000;
export const SESSION_TTL_MS = 7 * 24 * 3600_000;

export class DashboardSessions {
  private readonly links = new Map<string, { role: DashboardRole; expires: number }>();
  private readonly sessions = new Map<string, { role: DashboardRole; expires: number }>();

  constructor(private readonly now: () => number = Date.now) {}

  mintLink(role: DashboardRole): { token: string; expiresAt: number } {
    this.prune();
    const token = randomBytes(24).toString('base64url');
    const expiresAt = this.now() + LINK_TTL_MS;
    this.links.set(token, { role, expires: expiresAt });
    return { token, expiresAt };
  }

  /** A link's token for a new session id (once); null when unknown, used or expired. */
  exchange(token: string): { sid: string; role: DashboardRole } | null {
    const link = this.links.get(token);
    this.links.delete(token);
    if (!link || link.expires <= this.now()) return null;
    const sid = randomBytes(32).toString('base64url');
    this.sessions.set(sid, { role: link.role, expires: this.now() + SESSION_TTL_MS });
    return { sid, role: link.role };
  }

  role(sid: string | undefined): DashboardRole | null {
    if (!sid) return null;
    const s = this.sessions.get(sid);
    if (!s) return null;
    if (s.expires <= this.now()) {
      this.sessions.delete(sid);
      return null;
    }
    return s.role;
  }

  private prune(): void {
    const t = this.now();
    for (const [k, v] of this.links) if (v.expires <= t) this.links.delete(k);
    for (const [k, v] of this.sessions) if (v.expires <= t) this.sessions.delete(k);
  }
}

/** The value of one cookie in a Cookie header. */
export function cookieValue(header: string | undefined, name: string): string | undefined {
  for (const part of (header ?? '').split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}
