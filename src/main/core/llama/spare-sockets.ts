import { connect, type Socket } from 'node:net';

/**
 * One connected, never-used socket kept ready per llama-server on this machine (the hub's replicas, and a
 * node's for the http streams the hub sends it), so a /v1 request does not wait for a TCP handshake and
 * llama-server's accept on its path (~0.7 ms of the hub's added time-to-first-token, measured). Not for
 * ggml-rpc-server, which serves one connection at a time. A spare is made again once the request that took one has its
 * first byte (`refill`: the connect, ~0.1 ms of CPU on this VM's loopback, then runs after the time-to-first-token, not
 * in it), never when one closes (a stopped llama-server does not cause reconnect loops). Used sockets are not
 * reused: llama-server closes a connection after a streamed answer, and a request written onto it resets.
 * A spare holds one of llama-server's HTTP threads (it has slots + 2) while it waits.
 */
export class SpareSockets {
  private readonly spares = new Map<string, Socket>();
  private closed = false;

  /** A connected socket to host:port: the spare if one is ready, else a new connection. */
  take(host: string, port: number): Socket {
    const key = `${host}:${port}`;
    const spare = this.spares.get(key);
    this.spares.delete(key);
    if (spare && !spare.destroyed && !spare.connecting && spare.readyState === 'open') {
      spare.removeAllListeners('error');
      spare.removeAllListeners('close');
      spare.ref();
      return spare;
    }
    spare?.destroy();
    return connect({ host, port, noDelay: true });
  }

  /** Make the spare for host:port again (once its taker heard back); a no-op while one is ready. */
  refill(host: string, port: number): void {
    setImmediate(() => this.prepare(host, port));
  }

  private prepare(host: string, port: number): void {
    const key = `${host}:${port}`;
    if (this.closed || this.spares.has(key)) return;
    const s = connect({ host, port, noDelay: true });
    s.unref();
    s.on('error', () => undefined); // a stopped server: the spare is simply gone
    s.on('close', () => {
      if (this.spares.get(key) === s) this.spares.delete(key);
    });
    this.spares.set(key, s);
  }

  close(): void {
    this.closed = true;
    for (const s of this.spares.values()) s.destroy();
    this.spares.clear();
  }
}
