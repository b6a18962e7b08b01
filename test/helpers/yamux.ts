import { createHash } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocket, WebSocketServer } from 'ws';
import { duplexPair, webSocketDuplex } from '../../src/main/core/tunnel/transport.js';
import { Session, type SessionOptions, type YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import { shapedLink, type LinkShape } from './shaped-link.js';

export type TransportKind = 'memory' | 'ws';

export interface Pair {
  client: Session;
  server: Session;
  close(): Promise<void>;
  /** The raw transports (to kill them). */
  transports: [Duplex, Duplex];
}

/**
 * A client and a server session over an in-memory pair or a real WebSocket on 127.0.0.1:0 — `through` a shaped
 * link (shaped-link.ts) when given.
 */
export async function sessionPair(kind: TransportKind, opts: Partial<SessionOptions> = {}, split?: (n: number) => number[], through?: LinkShape): Promise<Pair> {
  const base = { keepAliveIntervalMs: 0, ...opts };
  if (kind === 'memory') {
    const [a, b] = duplexPair(64 * 1024, split);
    const client = new Session(a, { ...base, client: true });
    const server = new Session(b, { ...base, client: false });
    return {
      client,
      server,
      transports: [a, b],
      close: async () => {
        client.destroy();
        server.destroy();
      },
    };
  }
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  await once(wss, 'listening');
  const port = (wss.address() as AddressInfo).port;
  const link = through ? await shapedLink(`ws://127.0.0.1:${port}`, through) : null;
  const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
  const ws = new WebSocket(link?.url ?? `ws://127.0.0.1:${port}`, { perMessageDeflate: false });
  await once(ws, 'open');
  const [sws] = await accepted;
  const a = webSocketDuplex(ws);
  const b = webSocketDuplex(sws);
  const client = new Session(a, { ...base, client: true });
  const server = new Session(b, { ...base, client: false });
  return {
    client,
    server,
    transports: [a, b],
    close: async () => {
      client.destroy();
      server.destroy();
      await link?.close();
      await new Promise<void>((r) => wss.close(() => r()));
    },
  };
}

/** Echo every accepted stream back to its sender (and end when the sender ends). */
export function echo(s: Session): void {
  s.on('stream', (st: YamuxStream) => {
    st.on('error', () => undefined);
    st.pipe(st);
  });
}

/** Read to the end without destroying the stream (for-await would, killing the writable half too). */
export function readAll(st: Duplex): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    st.on('data', (c: Buffer) => parts.push(c));
    st.once('end', () => resolve(Buffer.concat(parts)));
    st.once('error', reject);
  });
}

export function pattern(n: number, seed = 1): Buffer {
  const b = Buffer.allocUnsafe(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

export const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');

/** Write a buffer in chunks honouring backpressure, then end. */
export async function writeAll(st: Duplex, data: Buffer, chunk = 64 * 1024): Promise<void> {
  for (let off = 0; off < data.byteLength; off += chunk) {
    if (!st.write(data.subarray(off, off + chunk))) await once(st, 'drain');
  }
  st.end();
}

/** One yamux frame as bytes, header and optional payload, for a peer that speaks the wire by hand (a hostile one). */
export function rawFrame(type: number, flags: number, id: number, length: number, payload?: Buffer): Buffer {
  const h = Buffer.alloc(12);
  h.writeUInt8(0, 0);
  h.writeUInt8(type, 1);
  h.writeUInt16BE(flags, 2);
  h.writeUInt32BE(id, 4);
  h.writeUInt32BE(length, 8);
  return payload ? Buffer.concat([h, payload]) : h;
}
