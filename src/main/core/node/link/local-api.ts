import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

/**
 * The running agent's local control API on 127.0.0.1 (a random port and a random token in NODE_DIR/agent.json,
 * 0600): what `relay pause`/`resume`/`status`/`cache` and the tray reach the agent through. Its client is
 * cli/api.ts's agentRequest.
 */
export interface LocalApiHandlers {
  setPaused(paused: boolean): Promise<void>;
  status(): Record<string, unknown>;
  cache(): unknown;
  prune(): unknown;
}

export async function startLocalApi(home: string, h: LocalApiHandlers): Promise<Server> {
  const token = randomBytes(24).toString('base64url');
  const server = createServer((req, res) => {
    const send = (status: number, body: unknown): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.headers.authorization !== `Bearer ${token}`) return send(401, { error: { code: 'unauthorized', message: 'bad token' } });
    const route = `${req.method} ${req.url}`;
    if (route === 'POST /pause' || route === 'POST /resume') {
      void h.setPaused(route === 'POST /pause').then(() => send(200, h.status()));
      return;
    }
    if (route === 'GET /status') return send(200, h.status());
    try {
      if (route === 'GET /cache') return send(200, h.cache());
      if (route === 'POST /cache/prune') return send(200, h.prune());
    } catch (err) {
      // A file that changed under us (a fill writing, a file in use elsewhere): an answer, never a crash.
      return send(500, { error: { code: 'internal', message: (err as Error).message } });
    }
    send(404, { error: { code: 'not_found', message: 'no such endpoint' } });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  writeFileSync(join(home, 'agent.json'), JSON.stringify({ port, token, pid: process.pid }), { mode: 0o600 });
  return server;
}
