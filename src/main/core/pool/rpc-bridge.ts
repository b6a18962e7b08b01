import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { NodeConn } from './manager.js';

/**
 * A 127.0.0.1 listener that stands for one remote ggml-rpc-server: llama-server's `--rpc` points here, and
 * each TCP connection it makes becomes an rpc stream through the node's tunnel, which the node pipes to its
 * own ggml-rpc-server on 127.0.0.1. The RPC protocol has no authentication; it never leaves loopback.
 */
export interface RpcBridge {
  readonly endpoint: string;
  readonly port: number;
  /**
   * Bytes each way through this bridge, and round trips (a reply after a request: each costs the tunnel's
   * latency once; the shard bench's per-token measures).
   */
  readonly bytes: { toNode: number; fromNode: number; roundTrips: number };
  close(): Promise<void>;
}

export async function openRpcBridge(conn: NodeConn, rpcId: string): Promise<RpcBridge> {
  const bytes = { toNode: 0, fromNode: 0, roundTrips: 0 };
  const sockets = new Set<Socket>();
  const server: Server = createServer((sock) => {
    sockets.add(sock);
    sock.setNoDelay(true);
    let st;
    try {
      st = conn.open({ kind: 'rpc', rpc: rpcId });
    } catch {
      sock.destroy();
      return;
    }
    let asked = false;
    sock.on('data', (c: Buffer) => {
      asked = true;
      bytes.toNode += c.byteLength;
      conn.bytes.rpc += c.byteLength;
    });
    st.on('data', (c: Buffer) => {
      if (asked) bytes.roundTrips++;
      asked = false;
      bytes.fromNode += c.byteLength;
      conn.bytes.rpc += c.byteLength;
    });
    sock.pipe(st);
    st.pipe(sock);
    const close = (): void => {
      sock.destroy();
      st.destroy();
      sockets.delete(sock);
    };
    sock.on('error', close);
    sock.on('close', close);
    st.on('error', close);
    st.on('close', close);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `127.0.0.1:${port}`,
    port,
    bytes,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
