import assert from 'node:assert/strict';
import { once } from 'node:events';
import { WebSocket } from 'ws';
import { PROTOCOL_VERSION, WS_SUBPROTOCOL } from '../../src/shared/protocol.js';
import { hubJoinToken } from '../../src/main/core/pairing/tokens.js';
import { joinHub, pinnedTls, tlsUrl } from '../../src/main/core/node/link/hub-client.js';
import { openStream } from '../../src/main/core/tunnel/channel.js';
import { webSocketDuplex } from '../../src/main/core/tunnel/transport.js';
import { Session } from '../../src/main/core/tunnel/yamux/session.js';
import { llama } from './llama.js';

/**
 * A hand-driven node: it joins like `relay up` (a token from the hub's data dir, the pinned certificate), then speaks
 * raw WebSocket + yamux + the control stream, to send what a real node of this version never would (another
 * version's hello, malformed lines). `hello` is what this version's node sends, to change a field of.
 */
export async function rawNode(hub: { url: string; home: string }, name: string, joined?: { credential: string; hubCert: string | null }, subprotocol = WS_SUBPROTOCOL) {
  // `joined`: connect again as a node that joined before (a second join of one name is refused).
  const { credential, hubCert } = joined ?? (await joinHub(hub.url, hubJoinToken(hub.home), name));
  const ws = new WebSocket(`${tlsUrl(hub.url, 'wss')}/tunnel`, [subprotocol], { headers: { authorization: `Bearer ${credential}`, 'x-relay-node': name }, ...pinnedTls(hubCert!) });
  await once(ws, 'open');
  const session = new Session(webSocketDuplex(ws), { client: true, keepAliveIntervalMs: 0 });
  const control = openStream(session, { kind: 'control' });
  control.on('error', () => undefined); // the hub may close on us: that is the point of some tests
  control.setEncoding('utf8');
  const lines: Record<string, unknown>[] = [];
  let buf = '';
  control.on('data', (c: string) => {
    buf += c;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      lines.push(JSON.parse(buf.slice(0, nl)) as Record<string, unknown>);
      buf = buf.slice(nl + 1);
    }
  });
  const next = async (): Promise<Record<string, unknown>> => {
    for (let i = 0; i < 200 && lines.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    const l = lines.shift();
    assert.ok(l, 'a message from the hub');
    return l;
  };
  const hello = { type: 'hello', protocol: PROTOCOL_VERSION, node: name, llama: llama().version, devices: [], cache: [], partials: [], replicas: [], availability: 'idle', reason: null };
  return { session, control, next, hello, joined: { credential, hubCert }, send: (x: unknown) => control.write(typeof x === 'string' ? `${x}\n` : `${JSON.stringify(x)}\n`) };
}
