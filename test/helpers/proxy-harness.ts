import { createServer, request, type IncomingMessage, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { proxyToPlacement } from '../../src/main/core/hub/proxy/proxy.js';
import type { ErrorShape } from '../../src/main/core/hub/http/errors.js';
import type { Lease } from '../../src/main/core/scheduler/placements/placement.js';
import type { ModelRecord } from '../../src/main/core/store/store.js';

/**
 * proxyToPlacement between two sockets of this process: `upstream` answers as the llama-server would (exact bytes
 * the pinned one cannot be made to send, or a volume and pace a test needs), the hub's side runs the real proxy,
 * and `read` takes the client's answer as it arrives.
 */
export async function throughProxy(upstream: RequestListener, shape: ErrorShape, read: (res: IncomingMessage) => Promise<string>, halted = new AbortController().signal): Promise<string> {
  const up = createServer(upstream);
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
  const lease: Lease = {
    placementId: 'p',
    who: { key: null, priority: 'interactive' },
    kind: 'host',
    where: 'hub',
    baseUrl: `http://127.0.0.1:${(up.address() as AddressInfo).port}`,
    model: { name: 'm' } as ModelRecord,
    halted,
    release: () => undefined,
    stallMs: () => 60_000,
    probe: () => Promise.resolve(),
  };
  const hub = createServer((req, res) => {
    void proxyToPlacement({ lease, path: '/v1/chat/completions', body: Buffer.from('{}'), req, res, log: pino({ level: 'silent' }), errors: shape, onDone: () => undefined }).then((o) => {
      // Given back before its first byte (pooled.ts would try another placement): the harness says so.
      if (o.kind === 'retry') res.end(JSON.stringify({ retry: true, halted: o.halted ?? false }));
    });
  });
  await new Promise<void>((r) => hub.listen(0, '127.0.0.1', r));
  try {
    return await new Promise<string>((resolve, reject) => {
      const r = request({ host: '127.0.0.1', port: (hub.address() as AddressInfo).port, method: 'POST', path: '/' }, (res) => void read(res).then(resolve, reject));
      r.on('error', reject);
      r.end('{}');
    });
  } finally {
    hub.close();
    up.close();
  }
}

/** The whole answer, read as fast as it comes. */
export function readAll(res: IncomingMessage): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    res.setEncoding('utf8');
    res.on('data', (c: string) => (text += c));
    res.on('end', () => resolve(text));
  });
}
