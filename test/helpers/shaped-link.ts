import { createServer, connect, type AddressInfo, type Socket } from 'node:net';

/**
 * A household link in user space (the kernel here has no netem): a TCP proxy whose each direction drains at
 * `mbitPerSec` through a bottleneck queue of `queueBytes` (a router's or a Wi-Fi card's buffer) and delivers each
 * byte `delayMs` after it left the queue. When the queue is full the proxy stops reading, so the sender's own TCP
 * buffers fill behind it, as they do on a real slow link: what the sender writes waits there, in order.
 */
export interface ShapedLink {
  readonly url: string;
  /** Bytes that went through, by direction (to the target, back from it). */
  readonly bytes: { up: number; down: number };
  close(): Promise<void>;
}

export interface LinkShape {
  readonly mbitPerSec: number;
  /** One-way delay after the bottleneck (half the round trip). */
  readonly delayMs: number;
  /** The bottleneck's queue; the proxy reads no more while this much waits. */
  readonly queueBytes: number;
}

export async function shapedLink(targetUrl: string, shape: LinkShape): Promise<ShapedLink> {
  const target = new URL(targetUrl);
  const sockets = new Set<Socket>();
  const bytes = { up: 0, down: 0 };
  const server = createServer((client) => {
    const up = connect({ host: target.hostname, port: Number(target.port) });
    for (const s of [client, up]) {
      sockets.add(s);
      s.on('error', () => undefined);
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        up.destroy();
      });
    }
    pace(client, up, shape, (n) => (bytes.up += n));
    pace(up, client, shape, (n) => (bytes.down += n));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `${target.protocol}//127.0.0.1:${port}`,
    bytes,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** One direction: `from` → bottleneck queue → (rate) → delay line → `to`. */
function pace(from: Socket, to: Socket, shape: LinkShape, counted: (n: number) => void): void {
  const bytesPerMs = (shape.mbitPerSec * 1e6) / 8 / 1000;
  const queue: Buffer[] = [];
  let queued = 0;
  let credit = 0;
  let lastTick = performance.now();
  let timer: NodeJS.Timeout | null = null;
  let ended = false;

  const tick = (): void => {
    timer = null;
    const now = performance.now();
    // A link that was idle saves no credit: it sends at its rate from now on, never a burst.
    credit = queued === 0 ? 0 : Math.min(credit + (now - lastTick) * bytesPerMs, 64 * 1024 + bytesPerMs * 4);
    lastTick = now;
    const out: Buffer[] = [];
    while (queue.length > 0 && credit >= 1) {
      const head = queue[0]!;
      const n = Math.min(head.byteLength, Math.floor(credit));
      out.push(n === head.byteLength ? queue.shift()! : head.subarray(0, n));
      if (n < head.byteLength) queue[0] = head.subarray(n);
      queued -= n;
      credit -= n;
    }
    if (out.length > 0) {
      const chunk = Buffer.concat(out);
      counted(chunk.byteLength);
      setTimeout(() => {
        if (!to.destroyed) to.write(chunk);
      }, shape.delayMs);
    }
    if (queued < shape.queueBytes && from.isPaused()) from.resume();
    if (queued > 0) schedule();
    else if (ended) setTimeout(() => to.end(), shape.delayMs + 1);
  };
  const schedule = (): void => {
    if (timer) return;
    // The next byte's due time, at least 1 ms away (the timers' grain): the rate holds on average.
    timer = setTimeout(tick, Math.max(1, Math.min(20, (1 - credit) / bytesPerMs)));
  };
  from.on('data', (c: Buffer) => {
    if (queued === 0) lastTick = performance.now();
    queue.push(c);
    queued += c.byteLength;
    if (queued >= shape.queueBytes) from.pause();
    schedule();
  });
  from.on('end', () => {
    ended = true;
    if (queued === 0) setTimeout(() => to.end(), shape.delayMs + 1);
  });
}
