import { createServer as createHttpServer, type IncomingMessage, type RequestListener, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { ErrorCode, RelayError } from '../../../../../shared/errors.js';

/**
 * A second listener for the apps that find Ollama by its port (11434) and cannot be given another: the hub's same
 * app (every route, the same API key), with Ollama's own answer to `GET /` ("Ollama is running", which some apps
 * probe before anything else). Plain HTTP like Ollama's, or HTTPS when the hub has its owner's certificate.
 */
export interface OllamaListener {
  readonly port: number;
  readonly server: Server;
  close(): void;
}

export function ollamaHandler(app: RequestListener): RequestListener {
  return (req: IncomingMessage, res: ServerResponse) => {
    if ((req.method === 'GET' || req.method === 'HEAD') && req.url === '/') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end(req.method === 'HEAD' ? undefined : 'Ollama is running');
      return;
    }
    app(req, res);
  };
}

export function listenOllama(
  app: RequestListener,
  o: { host: string; port: number; tls: { cert: Buffer; key: Buffer } | null; requestTimeoutMs: number; maxConnections: number },
): Promise<OllamaListener> {
  const handler = ollamaHandler(app);
  const server: Server = o.tls ? createHttpsServer({ ...o.tls, connectionsCheckingInterval: 1000 }, handler) : createHttpServer({ connectionsCheckingInterval: 1000 }, handler);
  server.requestTimeout = o.requestTimeoutMs;
  server.headersTimeout = Math.min(30_000, o.requestTimeoutMs);
  server.keepAliveTimeout = 65_000; // as the main listener (hub/index.ts)
  server.maxConnections = o.maxConnections; // its own cap, as the main port's: idle sockets cannot exhaust the hub
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EADDRINUSE') {
        reject(new RelayError(ErrorCode.PORT_IN_USE, `port ${o.port} on ${o.host} is taken (is Ollama itself running? stop it, or give relay another --ollama-port)`, { port: o.port }));
      } else reject(new RelayError(ErrorCode.IO_ERROR, `the Ollama port ${o.port} could not be opened: ${err.message}`, { port: o.port }));
    });
    server.listen(o.port, o.host, () =>
      resolve({
        port: (server.address() as AddressInfo).port,
        server,
        close() {
          server.close();
          server.closeAllConnections();
        },
      }),
    );
  });
}
