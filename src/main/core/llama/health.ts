import { get } from 'node:http';

/**
 * The HTTP status of a GET to a local child (llama-server's /health), or null when nothing answered within
 * `timeoutMs`. node:http rather than fetch: undici's connect fails with UNKNOWN under Wine's sockets (Node
 * for Windows there, where node:http and the hub's WebSocket connect fine), and a health poll needs no pool.
 */
export function healthStatus(url: string, timeoutMs: number): Promise<number | null> {
  return new Promise((resolve) => {
    const req = get(url, { timeout: timeoutMs, agent: false }, (res) => {
      res.resume();
      resolve(res.statusCode ?? null);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
}
