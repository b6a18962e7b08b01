import { createServer, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import type { NodeConn } from './manager.js';
import { peerIsProcess } from './peer.js';

/**
 * A 127.0.0.1 listener that stands for one remote ggml-rpc-server: llama-server's `--rpc` points here, and
 * each TCP connection it makes becomes an rpc stream through the node's tunnel, which the node pipes to its
 * own ggml-rpc-server on 127.0.0.1. The RPC protocol has no authentication, so the bridge takes connections
 * from its shard's head only: on Linux the connecting socket must belong to the head's process (peer.ts); on
 * other platforms, where that cannot be read, only while the head runs and one at a time (llama-server keeps
 * one connection per rpc-server). Anything else is closed before a byte reaches the node.
 */
export interface RpcBridge {
  readonly endpoint: string;
  readonly port: number;
  /**
   * Bytes each way through this bridge, and round trips (a reply after a request: each costs the tunnel's
   * latency once; the shard bench's per-token measures).
   */
  readonly bytes: { toNode: number; fromNode: number; roundTrips: number };
  /**
   * The median of the recent round trips' waits (ms from the head's last byte of a request to the node's first
   * byte back): the stage's compute plus the link's round trip (speed.ts stageTimes); null before one.
   */
  medianWaitMs(): number | null;
  /** Forget the waits so far (the load's and warm-up's round trips are no stage's speed). */
  resetWaits(): void;
  /** Connections refused: not the head's. */
  readonly refused: { readonly count: number };
  close(): Promise<void>;
}

/** `head()`: the pid of the shard head that may connect, null before it is spawned. */
export async function openRpcBridge(conn: NodeConn, rpcId: string, head: () => number | null, log?: Logger): Promise<RpcBridge> {
  const bytes = { toNode: 0, fromNode: 0, roundTrips: 0 };
  const waits = new RecentWaits();
  const sockets = new Set<Socket>();
  const refused = { count: 0 };
  let port = 0;
  const server: Server = createServer((sock) => {
    const pid = head();
    const mine = pid === null ? false : (peerIsProcess(sock.remotePort ?? 0, port, pid) ?? sockets.size === 0);
    if (!mine) {
      refused.count++;
      log?.warn({ node: conn.name, rpc: rpcId, from_port: sock.remotePort }, "a local connection to a shard's rpc bridge that is not its head's: refused");
      sock.destroy();
      return;
    }
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
    let askedAt = 0;
    sock.on('data', (c: Buffer) => {
      asked = true;
      askedAt = performance.now();
      bytes.toNode += c.byteLength;
      conn.bytes.rpc += c.byteLength;
    });
    st.on('data', (c: Buffer) => {
      if (asked) {
        bytes.roundTrips++;
        waits.add(performance.now() - askedAt);
      }
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
  port = (server.address() as AddressInfo).port;
  return {
    endpoint: `127.0.0.1:${port}`,
    port,
    bytes,
    medianWaitMs: () => waits.median(),
    resetWaits: () => waits.clear(),
    refused,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** The last WAITS_KEPT round-trip waits (a generation's one per token outnumber a prompt's few long ones). */
const WAITS_KEPT = 64;
const MIN_WAITS = 8;

class RecentWaits {
  private readonly ms: number[] = [];
  private at = 0;

  add(ms: number): void {
    if (this.ms.length < WAITS_KEPT) this.ms.push(ms);
    else this.ms[this.at] = ms;
    this.at = (this.at + 1) % WAITS_KEPT;
  }

  clear(): void {
    this.ms.length = 0;
    this.at = 0;
  }

  /** Null until MIN_WAITS were seen: a few round trips say nothing of a stage. */
  median(): number | null {
    if (this.ms.length < MIN_WAITS) return null;
    const sorted = [...this.ms].sort((a, b) => a - b);
    return sorted[sorted.length >> 1]!;
  }
}
