import { hostname } from 'node:os';
import { TLSSocket } from 'node:tls';
import { lanAddresses } from '../http/guard.js';
import { parseJson } from '../http/request.js';
import { SESSION_COOKIE, SESSION_TTL_MS } from '../http/sessions.js';
import type { Mount } from '../http/context.js';

/** Dashboard logins from other machines: one-time links (relay dashboard --link) exchanged for a session cookie. */
export const mountLogins: Mount = (app, { raw, auth }) => {
  app.post('/api/dashboard/links', auth.requireAdmin(false), raw, (req, res, next) => {
    try {
      const body = parseJson(req);
      const link = auth.logins.mintLink(body.read_only === true ? 'read' : 'admin');
      const port = req.socket.localPort;
      const path = `/login?t=${link.token}`;
      // The addresses other machines may reach this hub at (the user picks the one their network uses).
      const hosts = [...new Set([hostname(), ...lanAddresses()])];
      const scheme = req.socket instanceof TLSSocket ? 'https' : 'http';
      res.status(201).json({ path, urls: hosts.map((h) => `${scheme}://${h}:${port}${path}`), expires_at: new Date(link.expiresAt).toISOString(), read_only: body.read_only === true });
    } catch (err) {
      next(err);
    }
  });

  app.get('/login', (req, res) => {
    const s = auth.logins.exchange(typeof req.query.t === 'string' ? req.query.t : '');
    if (!s) {
      res.status(401).type('text').send('This dashboard link is unknown, used or expired: ask for a new one with `relay dashboard --link` on the hub machine.\n');
      return;
    }
    const secure = req.socket instanceof TLSSocket ? '; Secure' : '';
    res.setHeader('set-cookie', `${SESSION_COOKIE}=${s.sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${Math.floor(SESSION_TTL_MS / 1000)}${secure}`);
    res.redirect(303, '/');
  });
};
