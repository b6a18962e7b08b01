import { connect } from 'node:net';
import type { Logger } from 'pino';
import { ErrorCode, isRelayError, wireCode } from '../../../shared/errors.js';
import type { SpareSockets } from '../llama/spare-sockets.js';
import { acceptStream } from '../tunnel/channel.js';
import type { YamuxStream } from '../tunnel/yamux/session.js';
import type { ModelCache } from './cache/cache.js';
import type { Workloads } from './work/workloads.js';

/** What serving the hub's streams needs from the agent. */
export interface StreamContext {
  readonly work: Workloads;
  readonly cache: ModelCache;
  readonly spares: SpareSockets;
  readonly log: Logger;
  /** A stream to a local server opened (+1) or closed (-1): the node is busy while any is open. */
  active(delta: 1 | -1): void;
  /** A push is received: {sha256, done, total} now and then, and once {sha256, ok} at the end. */
  progress(e: { sha256: string; done: number; total: number }): void;
  pushed(e: { sha256: string; ok: boolean }): void;
}

/**
 * A stream the hub opened: its header says what it is. http and rpc streams are piped to the replica's or
 * rpc-server's port on 127.0.0.1; a file stream is a weight push into the cache, answered with one verdict line.
 * Anything else (an unknown header, a replica that is gone) is reset.
 */
export async function serveHubStream(st: YamuxStream, c: StreamContext): Promise<void> {
  st.on('error', () => undefined);
  let header;
  try {
    header = await acceptStream(st);
  } catch {
    st.destroy();
    return;
  }
  if (header.kind === 'file') return receivePush(st, header.sha256, header.offset, header.size, c);
  if (header.kind === 'slot') return c.work.slots.serve(st, header, (replica) => c.work.baseUrlOf(replica));
  const port = c.work.portFor(header);
  if (port === undefined) {
    st.destroy();
    return;
  }
  // Pipe the stream to the local server on loopback; either side closing closes the other.
  c.active(1);
  // An http stream (a /v1 request for a replica here) takes a ready socket to its llama-server; rpc streams
  // connect fresh (ggml-rpc-server serves one connection at a time).
  const sock = header.kind === 'http' ? c.spares.take('127.0.0.1', port) : connect({ host: '127.0.0.1', port });
  sock.setNoDelay(true);
  // Its replacement is made once llama-server answers (off the first token's path), or when this one ends.
  if (header.kind === 'http') {
    const refill = (): void => c.spares.refill('127.0.0.1', port);
    sock.once('data', refill);
    sock.once('close', refill);
  }
  sock.once('close', () => c.active(-1));
  if (header.kind === 'http') c.work.track(header.replica, sock);
  sock.on('error', () => st.destroy());
  st.on('close', () => sock.destroy());
  st.pipe(sock);
  sock.pipe(st);
}

async function receivePush(st: YamuxStream, sha256: string, offset: number, size: number, c: StreamContext): Promise<void> {
  let ok = false;
  try {
    await c.cache.receive(st, sha256, offset, size, (done) => c.progress({ sha256, done, total: size }));
    ok = true;
    st.end(`${JSON.stringify({ ok: true })}\n`);
  } catch (err) {
    const code = wireCode(isRelayError(err) ? err.code : ErrorCode.INTERNAL);
    c.log.warn({ sha256, code, message: (err as Error).message }, 'weight push failed');
    if (!st.destroyed && !st.writableEnded) st.end(`${JSON.stringify({ ok: false, code, message: (err as Error).message })}\n`);
  } finally {
    c.pushed({ sha256, ok });
  }
}
