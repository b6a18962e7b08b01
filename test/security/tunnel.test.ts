import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { WebSocket } from 'ws';
import { PROTOCOL_VERSION, TUNNEL_PATH, TUNNEL_STREAM_WINDOW, WS_SUBPROTOCOL } from '../../src/shared/protocol.js';
import { ControlChannel, openStream } from '../../src/main/core/tunnel/channel.js';
import { webSocketDuplex } from '../../src/main/core/tunnel/transport.js';
import { Session } from '../../src/main/core/tunnel/yamux/session.js';
import { writeSettings } from '../../src/main/core/node/link/settings.js';
import { joinHub, pinnedTls, tlsUrl } from '../../src/main/core/node/link/hub-client.js';
import { selfSignedCert } from '../../src/main/core/pairing/hub-cert.js';
import { createServer as createTlsServer } from 'node:tls';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { once } from 'node:events';
import { startHub, type HubProcess } from '../helpers/hub.js';
import { llama } from '../helpers/llama.js';
import { mintToken, startNode, type NodeProcess } from '../helpers/node.js';
import { signalIfRunning, until } from '../helpers/proc.js';
import { rawFrame } from '../helpers/yamux.js';

/**
 * A node is authenticated, but not trusted: what one node (or a second agent with its credential) can make
 * the hub hold is bounded, and the hub keeps serving. The hostile peer here speaks yamux itself, frame by frame.
 */
const relayBin = new URL('../../../bin/relay.js', import.meta.url).pathname;

const frame = rawFrame;

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m![1]) / 1024;
}

describe('tunnel limits', { timeout: 180_000 }, () => {
  let hub: HubProcess;
  before(async () => {
    hub = await startHub();
  });
  after(async () => {
    await hub?.stop();
  });

  async function joinRaw(name: string): Promise<{ ws: WebSocket; session: Session; control: ControlChannel<{ type: string }, object>; hello: () => Promise<void> }> {
    const { credential, hubCert } = await joinHub(hub.url, await mintToken(hub), name);
    const ws = new WebSocket(`${tlsUrl(hub.url, 'wss')}${TUNNEL_PATH}`, [WS_SUBPROTOCOL], {
      headers: { authorization: `Bearer ${credential}`, 'x-relay-node': name },
      perMessageDeflate: false,
      ...pinnedTls(hubCert!),
    });
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    const session = new Session(webSocketDuplex(ws), { client: true, keepAliveIntervalMs: 0, streamWindow: TUNNEL_STREAM_WINDOW });
    session.on('stream', (s: { destroy(): void }) => s.destroy());
    const control = new ControlChannel<{ type: string }, object>(openStream(session, { kind: 'control' }), (line) => ({ ok: true, msg: JSON.parse(line) as { type: string } }));
    const hello = async (): Promise<void> => {
      const welcome = new Promise<{ type: string }>((r) => control.once('message', r));
      control.send({ type: 'hello', protocol: PROTOCOL_VERSION, node: name, llama: llama().version, devices: [], cache: [], partials: [], replicas: [], availability: 'idle', reason: null });
      assert.equal((await welcome).type, 'welcome');
    };
    return { ws, session, control, hello };
  }

  it('4,096 streams opened with data before the hub is ready for them are refused, not buffered', async () => {
    const before = rssMb(hub.proc.pid!);
    const { ws, session, hello } = await joinRaw('flood-streams');
    const chunk = Buffer.alloc(64 * 1024, 7);
    for (let i = 0; i < 4096; i++) {
      const id = 1001 + 2 * i; // odd: the node's side
      ws.send(Buffer.concat([frame(0, 1, id, chunk.byteLength, chunk)])); // SYN + 64 KiB of data each: 256 MiB offered
    }
    await hello(); // the hub still talks to it: nothing was parked
    const after = rssMb(hub.proc.pid!);
    assert.ok(after - before < 150, `hub RSS grew ${Math.round(after - before)} MB for 256 MiB of refused stream data`);
    session.destroy();
    ws.terminate();
  });

  it('a peer that floods PINGs and never reads is disconnected (tunnel_overload); the hub keeps serving', async () => {
    const { ws, hello } = await joinRaw('flood-pings');
    await hello();
    await until(
      () => hub.api<{ nodes: { name: string; connected: boolean }[] }>('/api/nodes'),
      (r) => r.body.nodes.some((n) => n.name === 'flood-pings' && n.connected),
    );
    (ws as unknown as { _socket: { pause(): void } })._socket.pause(); // read nothing from now on
    const pings = Buffer.concat(Array.from({ length: 4096 }, (_, i) => frame(2, 1, 0, i)));
    const closed = new Promise<void>((r) => ws.once('close', () => r()));
    const before = rssMb(hub.proc.pid!);
    let sent = 0;
    const pump = setInterval(() => {
      for (let i = 0; i < 16 && ws.readyState === WebSocket.OPEN; i++, sent++) ws.send(pings);
    }, 5);
    try {
      await until(
        () => hub.logs.some((l) => l.includes('does not read')),
        (x) => x,
        60_000,
      );
    } finally {
      clearInterval(pump);
    }
    assert.ok(hub.logs.some((l) => l.includes('flood-pings') && l.includes('node disconnected')));
    assert.ok(rssMb(hub.proc.pid!) - before < 150, 'the hub did not queue the answers without bound');
    ws.terminate();
    await closed;
    assert.equal((await hub.api('/api/models')).status, 200);
    assert.ok(sent > 0);
  });

  it('a node that floods junk control lines and never reads is dropped; hub RSS stays under a ceiling', async () => {
    const { ws, control, hello } = await joinRaw('flood-junk');
    await hello();
    (ws as unknown as { _socket: { pause(): void } })._socket.pause(); // read nothing from now on
    const before = rssMb(hub.proc.pid!);
    const closed = new Promise<void>((r) => control.stream.once('close', () => r()));
    const junk = `${'{"type":"heartbeat","devices":"no"}\n'.repeat(1024)}`; // 1,024 malformed lines a write
    let sent = 0;
    const pump = setInterval(() => {
      for (let i = 0; i < 8 && !control.stream.destroyed; i++, sent++) control.stream.write(junk);
    }, 5);
    try {
      await until(
        () => hub.logs.some((l) => l.includes('flood-junk') && l.includes('node disconnected')),
        (x) => x,
        60_000,
      );
    } finally {
      clearInterval(pump);
    }
    assert.ok(
      hub.logs.some((l) => l.includes('flood-junk') && /malformed control messages/.test(l)),
      'the log says why',
    );
    assert.ok(rssMb(hub.proc.pid!) - before < 100, 'the hub did not queue answers to the junk');
    ws.terminate();
    await closed;
    assert.equal((await hub.api('/api/models')).status, 200, 'the hub keeps serving');
    assert.ok(sent > 0);
  });

  it('a node refuses a server presenting another certificate before it sends its token or credential', async () => {
    // The impostor: a TLS server with a certificate of its own, on another port, keeping whatever arrives.
    const fake = selfSignedCert('impostor');
    const got: Buffer[] = [];
    const srv = createTlsServer({ cert: fake.cert, key: fake.key }, (sock) => {
      sock.on('data', (c: Buffer) => got.push(c));
      sock.on('error', () => undefined);
    });
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
    const impostor = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
    let victim: ReturnType<typeof spawn> | null = null;
    try {
      // Joining: the token carries the real hub's fingerprint; the handshake alone shows it is not the hub.
      await assert.rejects(joinHub(impostor, await mintToken(hub), 'victim'), /fingerprint is not the one in the join token/);
      // A joined node whose hub address now leads to the impostor (a DNS or DHCP change, a rogue machine).
      const { credential, hubCert } = await joinHub(hub.url, await mintToken(hub), 'victim');
      const home = mkdtempSync(join(tmpdir(), 'relay-node-victim-'));
      writeSettings(home, { hub: impostor, name: 'victim', credential, hubCert, paused: false, schedule: '', cpuBudgetMb: 0, cacheBudgetMb: 0 });
      victim = spawn(process.execPath, [relayBin, 'up', '--home', home], { env: { ...process.env, RELAY_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
      const lines: string[] = [];
      createInterface({ input: victim.stderr! }).on('line', (l) => lines.push(l));
      createInterface({ input: victim.stdout! }).on('line', (l) => lines.push(l));
      await until(
        () => lines.some((l) => l.includes('hub connection failed')),
        (x) => x,
        60_000,
      );
      assert.ok(
        lines.some((l) => /certificate/.test(l)),
        lines.join('\n'),
      );
      assert.equal(Buffer.concat(got).length, 0, 'not one byte (no token, no credential) reached the impostor');
    } finally {
      if (victim) {
        signalIfRunning(victim, 'SIGTERM');
        await new Promise((r) => (victim!.exitCode !== null ? r(null) : victim!.once('exit', r)));
      }
      srv.close();
    }
  });

  it('a second agent with the same credential is refused while the first is connected; the first stays', async () => {
    let first: NodeProcess | null = null;
    const second = { proc: null as ReturnType<typeof spawn> | null };
    try {
      first = await startNode(hub, { name: 'twin' });
      const home2 = mkdtempSync(join(tmpdir(), 'relay-node-twin2-'));
      copyFileSync(join(first.home, 'node.json'), join(home2, 'node.json'));
      second.proc = spawn(process.execPath, [relayBin, 'up', '--home', home2], { env: { ...process.env, RELAY_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
      const lines: string[] = [];
      createInterface({ input: second.proc.stdout! }).on('line', (l) => lines.push(l));
      createInterface({ input: second.proc.stderr! }).on('line', (l) => lines.push(l));
      await until(
        () => lines.some((l) => l.includes('already connected from another process')),
        (x) => x,
        30_000,
      );
      assert.ok(!first.logs.some((l) => l.includes('lost the hub')), 'the first agent was never evicted');
      const nodes = (await hub.api<{ nodes: { name: string; connected: boolean }[] }>('/api/nodes')).body.nodes;
      assert.equal(nodes.find((n) => n.name === 'twin')?.connected, true);
    } finally {
      if (second.proc) {
        signalIfRunning(second.proc, 'SIGTERM');
        await new Promise((r) => (second.proc!.exitCode !== null ? r(null) : second.proc!.once('exit', r)));
      }
      await first?.stop();
    }
  });

  it('a node that joined before the hub pinned its certificate sends nothing, says to join again, and stops', async () => {
    // As an older relay left it: a credential and no hubCert. Its hub address leads to a recorder here: the
    // node must not dial ws:// with its credential in clear (the real hub would refuse it, but too late).
    const { credential } = await joinHub(hub.url, await mintToken(hub), 'elder');
    const got: Buffer[] = [];
    const recorder = createNetServer((sock) => sock.on('data', (c: Buffer) => got.push(c)));
    await new Promise<void>((r) => recorder.listen(0, '127.0.0.1', () => r()));
    const home = mkdtempSync(join(tmpdir(), 'relay-node-elder-'));
    const at = `http://127.0.0.1:${(recorder.address() as AddressInfo).port}`;
    writeSettings(home, { hub: at, name: 'elder', credential, hubCert: null, paused: false, schedule: '', cpuBudgetMb: 0, cacheBudgetMb: 0 });
    const elder = spawn(process.execPath, [relayBin, 'up', '--home', home], { env: { ...process.env, RELAY_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] });
    const lines: string[] = [];
    createInterface({ input: elder.stderr }).on('line', (l) => lines.push(l));
    createInterface({ input: elder.stdout }).on('line', (l) => lines.push(l));
    const code = await new Promise((r) => elder.once('exit', r));
    assert.equal(code, 2, lines.join('\n'));
    assert.ok(
      lines.some((l) => /join again with a token/.test(l)),
      lines.join('\n'),
    );
    assert.equal(Buffer.concat(got).length, 0, 'not one byte left the node');
    recorder.close();
    // The hub refuses a plain tunnel from such a node anyway (an older agent would try).
    const ws = new WebSocket(`${hub.url.replace('http', 'ws')}/tunnel`, ['relay.v1'], { headers: { 'x-relay-node': 'elder', authorization: `Bearer ${credential}` } });
    ws.on('error', () => undefined);
    const [, res] = (await once(ws, 'unexpected-response')) as [unknown, { statusCode: number }];
    assert.equal(res.statusCode, 426);
    ws.terminate();
  });

  it('a join token stolen after its use gets nothing: refused over TLS, and never taken over plain HTTP', async () => {
    const token = await mintToken(hub);
    await joinHub(hub.url, token, 'owner');
    await assert.rejects(joinHub(hub.url, token, 'thief'), (e: Error & { code?: string }) => e.code === 'NODE_AUTH' && /already used/.test(e.message));
    // "hub" is the hub's own name (its backoffs, the dashboard's picture): refused, the token left unused.
    const spare = await mintToken(hub);
    await assert.rejects(joinHub(hub.url, spare, 'Hub'), /may not be named "hub"/);
    await joinHub(hub.url, spare, 'spare');
    const plain = await fetch(`${hub.url}/api/nodes/join`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: await mintToken(hub), name: 'clear' }) });
    assert.equal(plain.status, 403, 'a join over plain HTTP is refused before the token is looked at');
    const names = (await hub.api<{ nodes: { name: string }[] }>('/api/nodes')).body.nodes.map((n) => n.name);
    assert.ok(names.includes('owner') && !names.includes('thief') && !names.includes('clear'), names.join(', '));
  });
});
