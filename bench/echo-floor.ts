/**
 * The floor under the shard's tunnel ratio: a 1 KiB echo between two Node.js processes over a TLS WebSocket, as
 * plain messages and through relay's yamux on the same transport (the tunnel's own transport code), one round trip
 * every 5 ms as a token's rpc exchange comes. Whatever relay does, a shard's round trip through the tunnel costs at
 * least the plain echo: set beside the direct path's time per token it says what ratio this machine allows.
 * Back to back (`gapMs` 0) no process waits long between echoes; in one process (`yamuxInProcess`) yamux's code
 * runs hot, with nothing to wake: what is left between those and the cross-process figures is what this machine
 * charges for running code just after a process wakes, not relay's code. And for a whole shard, `bareRpcChain`: two
 * processes that only forward ggml-rpc's bytes over a TLS WebSocket, the floor with every hop a relay adds.
 * Run by bench/shard; the echo server and the chain's two ends are this file run as children (forkForPort).
 */
import { fork, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:https';
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { WebSocket, WebSocketServer } from 'ws';
import { selfSignedCert } from '../src/main/core/pairing/hub-cert.js';
import { duplexPair, webSocketDuplex } from '../src/main/core/tunnel/transport.js';
import { Session } from '../src/main/core/tunnel/yamux/session.js';

type Mode = 'wss' | 'yamux';
const SIZE = 1024;

/** Calls `done` each time another SIZE bytes have come back on `s` (an echo may arrive in pieces). */
function onEachEcho(s: Duplex, done: () => void): void {
  let got = 0;
  s.on('data', (c: Buffer) => {
    got += c.byteLength;
    if (got >= SIZE) {
      got -= SIZE;
      done();
    }
  });
}

function serve(mode: Mode): void {
  const { cert, key } = selfSignedCert('bench');
  const srv = createServer({ cert, key });
  const wss = new WebSocketServer({ server: srv, perMessageDeflate: false });
  wss.on('connection', (ws) => {
    if (mode === 'wss') {
      ws.on('message', (m: Buffer) => ws.send(m, { binary: true }));
      return;
    }
    const s = new Session(webSocketDuplex(ws), { client: false, keepAliveIntervalMs: 0 });
    s.on('stream', (st: NodeJS.ReadWriteStream) => st.on('data', (c: Buffer) => st.write(c)));
  });
  srv.listen(0, '127.0.0.1', () => process.send!((srv.address() as AddressInfo).port));
}

/** p50 and p90 of `n` echo round trips in µs, one every `gapMs` (0: back to back), through a fresh echo process. */
export async function echoFloor(mode: Mode, n = 300, gapMs = 5): Promise<{ p50: number; p90: number }> {
  const { child, port } = await forkForPort('server', mode);
  try {
    const ws = new WebSocket(`wss://127.0.0.1:${port}`, { rejectUnauthorized: false, perMessageDeflate: false });
    await once(ws, 'open');
    let reply: () => void = () => undefined;
    let send: (b: Buffer) => void;
    if (mode === 'wss') {
      ws.on('message', () => reply());
      send = (b) => ws.send(b, { binary: true });
    } else {
      const st = new Session(webSocketDuplex(ws), { client: true, keepAliveIntervalMs: 0 }).open(1);
      st.on('error', () => undefined); // the session ends with the socket at the end
      onEachEcho(st, () => reply());
      send = (b) => st.write(b);
    }
    const buf = Buffer.alloc(SIZE, 7);
    const t: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await new Promise<void>((r) => {
        reply = r;
        send(buf);
      });
      t.push((performance.now() - t0) * 1000);
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    }
    ws.terminate();
    t.sort((a, b) => a - b);
    return { p50: t[Math.floor(n / 2)]!, p90: t[Math.floor(n * 0.9)]! };
  } finally {
    child.kill();
  }
}

/**
 * Mean µs per 1 KiB echo between two yamux sessions in this process over an in-memory pair, and over the bare
 * pair: yamux's own CPU per round trip (two frames written, two read), hot.
 */
export async function yamuxInProcess(n = 20_000): Promise<{ pair: number; yamux: number }> {
  const time = async (withYamux: boolean): Promise<number> => {
    const [a, b] = duplexPair();
    let near: Duplex = a;
    let far: Duplex = b;
    if (withYamux) {
      const server = new Session(b, { client: false, keepAliveIntervalMs: 0 });
      const accepted = once(server, 'stream') as Promise<[Duplex]>;
      near = new Session(a, { client: true, keepAliveIntervalMs: 0 }).open(1);
      [far] = await accepted;
    }
    far.on('data', (c: Buffer) => far.write(c));
    // The pair is destroyed at the end, under the streams: their errors then are the teardown's.
    for (const s of [near, far]) s.on('error', () => undefined);
    let reply: () => void = () => undefined;
    onEachEcho(near, () => reply());
    const buf = Buffer.alloc(SIZE, 7);
    const echo = (): Promise<void> =>
      new Promise((r) => {
        reply = r;
        near.write(buf);
      });
    for (let i = 0; i < 2000; i++) await echo(); // compiled before it is timed
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await echo();
    const us = ((performance.now() - t0) * 1000) / n;
    a.destroy();
    return us;
  };
  return { pair: await time(false), yamux: await time(true) };
}

/**
 * A bare relay chain for ggml-rpc, the floor under the tunnel for a whole shard: two Node.js processes that only
 * forward bytes, as the hub and the node do, with none of relay's code: near (a TCP port for llama-server's rpc
 * client) → one TLS WebSocket per connection → far (a TCP connection to ggml-rpc-server at `targetPort`). Each
 * chunk read is one WebSocket message; sockets without Nagle, as relay's bridge. Returns near's port.
 */
export async function bareRpcChain(targetPort: number): Promise<{ port: number; stop: () => void }> {
  const far = await forkForPort('chain-far', String(targetPort));
  const near = await forkForPort('chain-near', String(far.port)).catch((err: unknown) => {
    far.child.kill();
    throw err;
  });
  return {
    port: near.port,
    stop: () => {
      near.child.kill();
      far.child.kill();
    },
  };
}

/**
 * This file run as a child in `role`: the port it listens on, once it says (an error if it ends first). The child
 * ends when this process does (its IPC channel closes).
 */
async function forkForPort(role: string, arg: string): Promise<{ child: ChildProcess; port: number }> {
  const child = fork(fileURLToPath(import.meta.url), [role, arg], { stdio: 'inherit', execArgv: [] });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m) => resolve(m as number));
    child.once('exit', (code) => reject(new Error(`the ${role} child ended (${String(code)}) before it listened`)));
  });
  return { child, port };
}

/** Pipes a TCP socket and a WebSocket both ways; either's end ends the other. */
function splice(sock: Socket, ws: WebSocket): void {
  sock.setNoDelay(true);
  sock.on('data', (c: Buffer) => ws.send(c, { binary: true }));
  ws.on('message', (m: Buffer) => sock.write(m));
  sock.on('close', () => ws.terminate());
  ws.on('close', () => sock.destroy());
  sock.on('error', () => undefined);
  ws.on('error', () => undefined);
}

function chainFar(targetPort: number): void {
  const { cert, key } = selfSignedCert('bench');
  const srv = createServer({ cert, key });
  new WebSocketServer({ server: srv, perMessageDeflate: false }).on('connection', (ws) => {
    splice(connect(targetPort, '127.0.0.1'), ws); // what comes before it connects waits in its write queue
  });
  srv.listen(0, '127.0.0.1', () => process.send!((srv.address() as AddressInfo).port));
}

function chainNear(farPort: number): void {
  const srv = createNetServer((sock) => {
    sock.pause(); // until the WebSocket is open
    const ws = new WebSocket(`wss://127.0.0.1:${farPort}`, { rejectUnauthorized: false, perMessageDeflate: false });
    ws.on('open', () => sock.resume());
    splice(sock, ws);
  });
  srv.listen(0, '127.0.0.1', () => process.send!((srv.address() as AddressInfo).port));
}

const ROLES = new Map<string, (arg: string) => void>([
  ['server', (mode) => serve(mode as Mode)],
  ['chain-far', (port) => chainFar(Number(port))],
  ['chain-near', (port) => chainNear(Number(port))],
]);
const role = ROLES.get(process.argv[2] ?? '');
if (role && process.send) {
  process.on('disconnect', () => process.exit(0)); // a child of forkForPort: it ends with its parent
  role(process.argv[3]!);
}
