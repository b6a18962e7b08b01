/**
 * The smallest ggml-rpc exchange (DEVICE_COUNT: a 9-byte request, a 12-byte answer) timed straight to a
 * ggml-rpc-server and through the tunnel's rpc bridge: what one round trip costs the tunnel, without the
 * model's compute or bytes. The request is written as ggml-rpc writes it (command byte, then size: two sends).
 */
import { once } from 'node:events';
import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';

const HELLO = 14;
const DEVICE_COUNT = 15;
const CONN_CAPS = 24; // RPC_CONN_CAPS_SIZE in llama.cpp v0.4.0's ggml-rpc

const u64 = (n: number): Buffer => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(BigInt(n));
  return b;
};

function reader(sock: Socket): (n: number) => Promise<Buffer> {
  let buf = Buffer.alloc(0);
  let waiting: { n: number; resolve: (b: Buffer) => void; reject: (e: Error) => void } | null = null;
  let closed = false;
  const serve = (): void => {
    if (waiting && buf.length >= waiting.n) {
      const { n, resolve } = waiting;
      waiting = null;
      const out = buf.subarray(0, n);
      buf = buf.subarray(n);
      resolve(out);
    }
  };
  sock.on('data', (c: Buffer) => {
    buf = Buffer.concat([buf, c]);
    serve();
  });
  // The server went away (the hub's reconciliation stops an rpc-server it did not start): the reads fail, no hang.
  sock.on('close', () => {
    closed = true;
    waiting?.reject(new Error('the rpc server closed the connection'));
  });
  return (n) =>
    new Promise((resolve, reject) => {
      waiting = { n, resolve, reject };
      serve();
      if (closed && waiting) reject(new Error('the rpc server closed the connection'));
    });
}

/** `n` DEVICE_COUNT round trips on a fresh connection to `port` (after HELLO); each in ms. */
export async function rpcRoundTrips(port: number, n = 300): Promise<number[]> {
  const sock = connect({ host: '127.0.0.1', port, noDelay: true });
  await once(sock, 'connect');
  const read = reader(sock);
  try {
    sock.write(Buffer.concat([Buffer.from([HELLO]), u64(CONN_CAPS), Buffer.alloc(CONN_CAPS)]));
    await read(Number((await read(8)).readBigUInt64LE()));
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      sock.write(Buffer.from([DEVICE_COUNT]));
      sock.write(u64(0));
      const size = Number((await read(8)).readBigUInt64LE());
      await read(size);
      out.push(performance.now() - t0);
    }
    return out;
  } finally {
    sock.destroy();
  }
}
