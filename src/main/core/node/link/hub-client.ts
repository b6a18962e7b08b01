import { request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { connect as tlsConnect, type PeerCertificate } from 'node:tls';
import { ErrorCode, RelayError, fromWireCode, isRelayError } from '../../../../shared/errors.js';
import { certFingerprint, derFingerprint } from '../../pairing/hub-cert.js';
import { tokenFingerprint } from '../../pairing/tokens.js';

/**
 * The node's HTTP calls to its hub, outside the tunnel: joining (a token for a credential) and asking for a
 * dashboard login link. A hub with its own certificate is reached over TLS with that certificate pinned: the
 * token or credential is sent only after the certificate's SHA-256 matched.
 */

/** TLS options that accept exactly the certificate `pem` (no CA, no hostname: the fingerprint is the identity). */
export function pinnedTls(pem: string): { ca: string; checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined } {
  const fp = certFingerprint(pem);
  return {
    ca: pem,
    checkServerIdentity: (_host, cert) => (derFingerprint(cert.raw) === fp ? undefined : new RelayError(ErrorCode.NODE_AUTH, 'the hub presented another certificate than the one this node pinned')),
  };
}

/**
 * The certificate the server at `hub` presents, if its SHA-256 is `fp` (from the join token). Only a TLS
 * handshake happens: nothing is sent before the fingerprint matched. Another certificate is an impostor.
 */
export function fetchPinnedCert(hub: string, fp: string): Promise<string> {
  const u = new URL(hub);
  const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
  const host = u.hostname.replace(/^\[|\]$/g, '');
  return new Promise((resolve, reject) => {
    const sock = tlsConnect({ host, port, rejectUnauthorized: false, ...(isIP(host) ? {} : { servername: host }) }, () => {
      const raw = sock.getPeerCertificate().raw;
      sock.destroy();
      if (!raw || derFingerprint(raw) !== fp) {
        reject(new RelayError(ErrorCode.NODE_AUTH, `the server at ${hub} presented a certificate whose fingerprint is not the one in the join token: not this hub (nothing was sent)`));
        return;
      }
      resolve(`-----BEGIN CERTIFICATE-----\n${raw.toString('base64').replace(/.{1,64}/g, '$&\n')}-----END CERTIFICATE-----\n`);
    });
    sock.setTimeout(10_000, () => sock.destroy(new Error('TLS handshake timed out')));
    sock.on('error', (err) => reject(new RelayError(ErrorCode.HUB_UNREACHABLE, `cannot reach the hub at ${hub} over TLS: ${err.message}`)));
  });
}

/** The hub's address over TLS: same host and port (the hub speaks TLS and plain HTTP on one port). */
export function tlsUrl(hub: string, scheme: 'https' | 'wss'): string {
  return hub.replace(/^(https?|wss?):\/\//, `${scheme}://`).replace(/\/+$/, '');
}

interface HubAnswer {
  status: number;
  json: Record<string, unknown> & { error?: { code: string; message: string } };
}

/** POST JSON to the hub: over pinned TLS when `pem` is given, else plain (a hub without its own certificate). */
function postJson(hub: string, path: string, body: unknown, pem: string | null, headers: Record<string, string> = {}): Promise<HubAnswer> {
  const text = JSON.stringify(body);
  const unreachable = (err: Error): RelayError => new RelayError(ErrorCode.HUB_UNREACHABLE, `cannot reach the hub at ${hub}: ${err.message}`);
  const parse = (status: number, raw: string): HubAnswer => {
    try {
      return { status, json: JSON.parse(raw) as HubAnswer['json'] };
    } catch {
      return { status, json: { error: { code: 'upstream_error', message: `the hub answered ${status} with no JSON` } } };
    }
  };
  if (!pem) {
    return fetch(`${hub.replace(/\/+$/, '')}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: text }).then(
      async (res) => parse(res.status, await res.text()),
      (err: Error) => Promise.reject(unreachable(err)),
    );
  }
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      `${tlsUrl(hub, 'https')}${path}`,
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers },
        ...pinnedTls(pem),
      },
      (res) => {
        let raw = '';
        res.on('data', (c: Buffer) => (raw += c.toString()));
        res.on('end', () => resolve(parse(res.statusCode ?? 0, raw)));
      },
    );
    req.setTimeout(30_000, () => req.destroy(new Error('no answer within 30 s')));
    req.on('error', (err) => reject(isRelayError(err) ? err : unreachable(err)));
    req.end(text);
  });
}

/**
 * Exchange a join token for this node's credential (once). A token that carries the hub's certificate
 * fingerprint (every token of a hub with its own certificate) makes the node pin that certificate and send the
 * token over TLS only; the certificate is returned for the node's settings.
 */
export async function joinHub(hub: string, token: string, name: string): Promise<{ credential: string; hubCert: string | null }> {
  const fp = tokenFingerprint(token);
  const hubCert = fp ? await fetchPinnedCert(hub, fp) : null;
  const r = await postJson(hub, '/api/nodes/join', { token, name }, hubCert);
  const credential = r.json.credential;
  if (r.status !== 201 || typeof credential !== 'string') throw new RelayError(ErrorCode.NODE_AUTH, r.json.error?.message ?? `join failed (${r.status})`);
  return { credential, hubCert };
}

/**
 * A one-time, read-only login link to the hub's dashboard, asked with this node's credential (over pinned TLS
 * like its tunnel): what the node's tray opens for "Open dashboard". The URL is on the address this node
 * reaches the hub at.
 */
export async function requestDashboardLink(s: { hub: string; name: string; credential: string; hubCert?: string | null }): Promise<{ url: string; expiresAt: string }> {
  if (!s.hubCert && !s.hub.startsWith('https:')) {
    throw new RelayError(
      ErrorCode.NODE_AUTH,
      "this node has not pinned its hub's certificate (it joined before the hub had one): join again with a token from `relay nodes token`; the credential is not sent in clear",
    );
  }
  const r = await postJson(s.hub, '/api/nodes/dashboard-link', {}, s.hubCert ?? null, { authorization: `Bearer ${s.credential}`, 'x-relay-node': s.name });
  const path = r.json.path;
  if (r.status !== 201 || typeof path !== 'string' || !path.startsWith('/login?')) {
    throw new RelayError(r.json.error ? fromWireCode(r.json.error.code) : ErrorCode.UPSTREAM_ERROR, r.json.error?.message ?? `the hub answered ${r.status}`);
  }
  return { url: `${s.hub.replace(/\/+$/, '')}${path}`, expiresAt: typeof r.json.expires_at === 'string' ? r.json.expires_at : '' };
}
