import { WebSocket } from 'ws';
import { ErrorCode, RelayError } from '../../../../shared/errors.js';
import { TUNNEL_PATH, TUNNEL_STREAM_WINDOW, WS_SUBPROTOCOL } from '../../../../shared/protocol.js';
import { webSocketDuplex } from '../../tunnel/transport.js';
import { TUNNEL_KEEPALIVE, TUNNEL_PRIORITY_LEVELS } from '../../tunnel/channel.js';
import { Session } from '../../tunnel/yamux/session.js';
import { pinnedTls, tlsUrl } from './hub-client.js';
import type { NodeSettings } from './settings.js';

/**
 * Dial the hub's tunnel: wss:// to the pinned certificate (or https:// a system-trusted one), the credential
 * in the upgrade request, and a yamux session (the node is the client) once it is open. A refusal rejects
 * with the hub's code (node_auth, version_mismatch), anything else with hub_unreachable.
 */
export function openTunnel(s: Pick<NodeSettings, 'hub' | 'hubCert' | 'credential' | 'name'>): Promise<Session> {
  // A pinned hub: wss:// to the same host and port, that certificate only, checked before the credential is sent.
  const pin = s.hubCert ? pinnedTls(s.hubCert) : null;
  // Without a pin only an https:// hub (a certificate the system trusts) is dialled: the credential never
  // crosses in clear. A node that joined before its hub had a certificate has to join again.
  if (!pin && !s.hub.startsWith('https:')) {
    return Promise.reject(
      new RelayError(
        ErrorCode.NODE_AUTH,
        `this node has not pinned ${s.hub}'s certificate (it joined before the hub had one), and will not send its credential in clear: join again with a token from \`relay nodes token\``,
      ),
    );
  }
  const url = pin ? `${tlsUrl(s.hub, 'wss')}${TUNNEL_PATH}` : `${s.hub.replace(/^http/, 'ws').replace(/\/+$/, '')}${TUNNEL_PATH}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, [WS_SUBPROTOCOL], {
      headers: { authorization: `Bearer ${s.credential}`, 'x-relay-node': s.name },
      perMessageDeflate: false,
      handshakeTimeout: 10_000,
      ...(pin ?? {}),
    });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => {
        let msg = body;
        try {
          msg = (JSON.parse(body) as { error: { message: string } }).error.message;
        } catch {
          /* plain text */
        }
        const code = res.statusCode === 401 ? ErrorCode.NODE_AUTH : res.statusCode === 426 ? ErrorCode.VERSION_MISMATCH : ErrorCode.HUB_UNREACHABLE;
        reject(new RelayError(code, `the hub refused this node (${res.statusCode}): ${msg}`));
      });
    });
    ws.on('error', (err) => reject(new RelayError(ErrorCode.HUB_UNREACHABLE, `cannot reach the hub at ${s.hub}: ${err.message}`)));
    ws.on('open', () => resolve(new Session(webSocketDuplex(ws), { client: true, ...TUNNEL_KEEPALIVE, streamWindow: TUNNEL_STREAM_WINDOW, priorityLevels: TUNNEL_PRIORITY_LEVELS })));
  });
}
