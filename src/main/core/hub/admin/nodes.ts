import { TLSSocket } from 'node:tls';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { hubJoinToken, JOIN_TOKEN_TTL_MS } from '../../pairing/tokens.js';
import { joinCommands } from '../../pairing/join-commands.js';
import { packageName, packageVersion } from '../../app-files.js';
import { beyondLoopback, isLoopback, lanAddresses } from '../http/guard.js';
import { parseJson, textField } from '../http/request.js';
import type { Mount } from '../http/context.js';
import { SET_PAUSED_WAIT_MS } from '../../timeouts.js';

/** Nodes: joining (open, over TLS), their dashboard links, "Add a node" tokens, the list, pause/resume, revoke. */
export const mountNodes: Mount = (app, { deps: d, raw, auth }) => {
  const { config, nodes } = d;
  // Joining is open to the network: the join token is the credential for this one call.
  app.post('/api/nodes/join', raw, async (req, res, next) => {
    try {
      if (d.nodesOverTlsOnly && !(req.socket instanceof TLSSocket)) {
        throw new RelayError(ErrorCode.FORBIDDEN, "join over TLS: `relay up --token` does so itself with a token that carries this hub's certificate fingerprint");
      }
      const body = parseJson(req);
      const r = await nodes.join(textField(body.token), textField(body.name));
      res.status(201).json(r);
    } catch (err) {
      next(err);
    }
  });

  // A node's owner opens the pool's dashboard from the node's tray: the node asks with its credential (over TLS,
  // like its tunnel) for a one-time login link. Read-only: a node's owner is trusted with their machine, not
  // with the hub's models, keys and nodes.
  app.post('/api/nodes/dashboard-link', (req, res, next) => {
    try {
      if (d.nodesOverTlsOnly && !(req.socket instanceof TLSSocket)) throw new RelayError(ErrorCode.FORBIDDEN, 'nodes ask for dashboard links over TLS (the credential never crosses in clear)');
      const node = nodes.authenticate(req);
      const link = auth.logins.mintLink('read');
      res.status(201).json({ path: `/login?t=${link.token}`, expires_at: new Date(link.expiresAt).toISOString(), read_only: true, node: node.name });
    } catch (err) {
      next(err);
    }
  });

  // "Add a node": a fresh join token that carries this hub's address for nodes, and the commands that use it.
  app.post('/api/nodes/token', auth.requireAdmin(false), (req, res, next) => {
    try {
      // The address nodes reach this hub at: the one it listens on, else the one this request came in on (the
      // dashboard opened from another machine), else the first LAN address; loopback when it listens on nothing else.
      const local = (req.socket.localAddress ?? '').replace(/^::ffff:/, '');
      const lan = !beyondLoopback(config.host) ? undefined : config.host !== '0.0.0.0' && config.host !== '::' ? config.host : local && !isLoopback(local) ? local : lanAddresses()[0];
      const host = lan ?? '127.0.0.1';
      const hubUrl = `http://${host.includes(':') ? `[${host}]` : host}:${req.socket.localPort}`;
      const token = hubJoinToken(config.home, hubUrl);
      res.status(201).json({
        token,
        hub_url: hubUrl,
        commands: joinCommands(token, { version: packageVersion(), npmName: packageName() }),
        expires_at: new Date(Date.now() + JOIN_TOKEN_TTL_MS).toISOString(),
        note: lan ? null : 'this hub listens on 127.0.0.1 only: a node on another machine cannot reach it (start it with --listen 0.0.0.0, or tick "other machines" in the tray\'s setup)',
      });
    } catch (err) {
      next(err);
    }
  });

  app.get('/api/nodes', auth.requireAdmin(true), (_req, res) => {
    res.json({ nodes: nodes.status() });
  });

  for (const action of ['pause', 'resume'] as const) {
    app.post(`/api/nodes/:name/${action}`, auth.requireAdmin(false), async (req, res, next) => {
      try {
        const name = String(req.params.name);
        const conn = nodes.get(name);
        if (!conn) throw new RelayError(ErrorCode.NODE_NOT_FOUND, `node "${name}" is not connected`);
        const r = await conn.command({ type: 'set-paused', paused: action === 'pause' }, SET_PAUSED_WAIT_MS);
        // A node its owner paused stays paused whatever the hub asks: the answer says so, with the reason.
        res.json({ node: name, availability: r.data?.availability, reason: r.data?.reason ?? null });
      } catch (err) {
        next(err);
      }
    });
  }

  app.post('/api/nodes/:name/revoke', auth.requireAdmin(false), async (req, res, next) => {
    try {
      await nodes.revoke(String(req.params.name));
      res.json({ revoked: String(req.params.name) });
    } catch (err) {
      next(err);
    }
  });
};
