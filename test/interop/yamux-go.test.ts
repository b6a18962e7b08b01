import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { describe, it } from 'node:test';
import { Session, type YamuxStream } from '../../src/main/core/tunnel/yamux/session.js';
import { pattern, sha } from '../helpers/yamux.js';

/**
 * Interop with the reference implementation: hashicorp/yamux (Debian's golang-github-hashicorp-yamux-dev,
 * built in GOPATH mode by scripts/install-deps.sh's packages), as echo server and as client, 100 MB each way.
 */
const SIZE = 100 * 1024 * 1024;
const source = new URL('../../../test/interop/yamux_peer.go', import.meta.url).pathname;

function peerBinary(): string {
  const src = readFileSync(source);
  const dir = join(process.env.RELAY_CACHE_DIR ?? join(homedir(), '.cache', 'relay'), 'interop');
  const bin = join(dir, `yamux_peer-${createHash('sha256').update(src).digest('hex').slice(0, 12)}`);
  if (!existsSync(bin)) {
    mkdirSync(dir, { recursive: true });
    execFileSync('go', ['build', '-o', bin, source], {
      env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOCACHE: join(dir, 'gocache') },
      stdio: 'inherit',
    });
  }
  return bin;
}

/** Read an 8-byte big-endian length and that many bytes. */
function readMsg(st: YamuxStream): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let have = 0;
    let want = -1;
    st.on('data', (c: Buffer) => {
      parts.push(c);
      have += c.byteLength;
      if (want < 0 && have >= 8) want = Number(Buffer.concat(parts).readBigUInt64BE(0));
      if (want >= 0 && have >= 8 + want) resolve(Buffer.concat(parts).subarray(8, 8 + want));
    });
    st.once('error', reject);
    st.once('end', () => {
      if (want < 0 || have < 8 + want) reject(new Error(`stream ended after ${have} bytes`));
    });
  });
}

async function writeMsg(st: YamuxStream, b: Buffer): Promise<void> {
  const hdr = Buffer.alloc(8);
  hdr.writeBigUInt64BE(BigInt(b.byteLength));
  st.write(hdr);
  for (let off = 0; off < b.byteLength; off += 256 * 1024) {
    if (!st.write(b.subarray(off, off + 256 * 1024))) await once(st, 'drain');
  }
}

function goPattern(n: number): Buffer {
  // Same xorshift32 as yamux_peer.go (seed 7, low byte of each step).
  const b = Buffer.allocUnsafe(n);
  let x = 7;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

describe('yamux interop with hashicorp/yamux (Go)', { timeout: 300_000 }, () => {
  it('relay as client, Go as echo server: 100 MB each way, sha256 equal, clean close', async () => {
    const go = spawn(peerBinary(), ['server'], { stdio: ['ignore', 'pipe', 'pipe'] });
    const stderr: string[] = [];
    createInterface({ input: go.stderr }).on('line', (l) => stderr.push(l));
    const [port] = (await once(createInterface({ input: go.stdout }), 'line')) as [string];
    const sock = connect({ host: '127.0.0.1', port: Number(port) });
    await once(sock, 'connect');
    const s = new Session(sock, { client: true, keepAliveIntervalMs: 0 });
    const st = s.open();
    const data = pattern(SIZE, 11);
    const [echoed] = await Promise.all([readMsg(st), writeMsg(st, data)]);
    assert.equal(sha(echoed), sha(data));
    st.end();
    const exited = once(go, 'exit');
    s.close();
    const [code] = (await exited) as [number];
    assert.equal(code, 0, stderr.join('\n'));
    assert.match(stderr.join('\n'), /session over/);
  });

  it('Go as client, relay as echo server: 100 MB each way, sha256 equal, clean close', async () => {
    const server = createServer();
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const port = (server.address() as AddressInfo).port;
    const sessionClosed = new Promise<Error>((resolve) => {
      server.once('connection', (sock: Socket) => {
        const s = new Session(sock, { client: false, keepAliveIntervalMs: 0 });
        s.on('stream', async (st: YamuxStream) => {
          const msg = await readMsg(st);
          await writeMsg(st, msg);
          st.end();
        });
        s.once('close', resolve);
      });
    });
    const go = spawn(peerBinary(), ['client', `127.0.0.1:${port}`, String(SIZE)], { stdio: ['ignore', 'pipe', 'inherit'] });
    const lines: string[] = [];
    createInterface({ input: go.stdout }).on('line', (l) => lines.push(l));
    const [code] = (await once(go, 'exit')) as [number];
    assert.equal(code, 0);
    const m = /^sent ([0-9a-f]{64}) got ([0-9a-f]{64})$/.exec(lines[0] ?? '');
    assert.ok(m, lines.join('\n'));
    assert.equal(m[1], m[2]);
    assert.equal(m[1], sha(goPattern(SIZE)));
    const err = await sessionClosed; // Go closed its session: ours sees the transport end
    assert.match(err.message, /transport (ended|closed)/);
    server.close();
  });
});
