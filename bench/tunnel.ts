/**
 * bench/tunnel: the tunnel against the direct path, in one run on loopback.
 *  - 8 KiB round trips on an rpc stream: idle; while a 1 GiB push runs on the same tunnel; while the same
 *    push runs on a separate raw WebSocket (goal: tunnel p99 ≤ 1.5× the separate-socket p99);
 *  - bulk MB/s through the tunnel vs a raw WebSocket (goal ≥ 0.8×);
 *  - a real weight push (hub → node, sha256-verified) vs raw WebSocket and vs sha256 alone;
 *  - node-replica tok/s through the tunnel vs direct llama-server (goal ≥ 0.95).
 * `npm run bench -- tunnel` (BENCH_BULK_MB, BENCH_RTT_N adjust it).
 */
import { createHash } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { createServer as createHttpsServer } from 'node:https';
import { WebSocket, WebSocketServer } from 'ws';
import { hubConfigFromEnv } from '../src/main/core/config.js';
import { startHub } from '../src/main/core/hub/index.js';
import { hubJoinToken } from '../src/main/core/pool/tokens.js';
import { selfSignedCert } from '../src/main/core/pool/hub-cert.js';
import { startLlamaServer } from '../src/main/core/llama/index.js';
import { createLogger } from '../src/main/core/log.js';
import { NodeAgent } from '../src/main/core/node/agent.js';
import { joinHub } from '../src/main/core/node/hub-client.js';
import { PRIORITY, type YamuxStream } from '../src/main/core/tunnel/yamux/session.js';
import { ensureFixture } from '../test/fixtures/models.js';
import { llama } from '../test/helpers/llama.js';
import { sessionPair } from '../test/helpers/yamux.js';

const BULK = Number(process.env.BENCH_BULK_MB ?? 1024) * 1024 * 1024;
const RTT_N = Number(process.env.BENCH_RTT_N ?? 300);
const PUSH_ROUNDS = Number(process.env.BENCH_PUSH_ROUNDS ?? 5);
const CHUNK = Buffer.alloc(256 * 1024, 7);
const PING = Buffer.alloc(8 * 1024, 1);

const pct = (xs: number[], p: number): number => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

/** Round trips of 8 KiB on an rpc-priority stream until `stop()` says so or n samples. */
async function rtts(open: () => YamuxStream, n: number): Promise<number[]> {
  const st = open();
  const out: number[] = [];
  let got = 0;
  let resolveOne: (() => void) | null = null;
  st.on('data', (c: Buffer) => {
    got += c.byteLength;
    if (got >= PING.byteLength) {
      got -= PING.byteLength;
      resolveOne?.();
    }
  });
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await new Promise<void>((r) => {
      resolveOne = r;
      st.write(PING);
    });
    out.push(performance.now() - t0);
  }
  st.end();
  return out;
}

/** Push `bytes` through a yamux stream, receiver discarding; MB/s. */
async function bulkYamux(open: () => YamuxStream, bytes: number): Promise<number> {
  const st = open();
  st.resume(); // 'end' needs the (empty) readable side consumed
  const t0 = performance.now();
  for (let sent = 0; sent < bytes; sent += CHUNK.byteLength) {
    if (!st.write(CHUNK)) await once(st, 'drain');
  }
  st.end();
  await once(st, 'end'); // the receiver ends its side once it has everything
  return bytes / 1048576 / ((performance.now() - t0) / 1000);
}

/** A raw WebSocket pair on loopback; with `tls`, over TLS with a self-signed certificate like the hub's. */
async function rawWsPair(tls = false): Promise<{ client: WebSocket; server: WebSocket; close: () => Promise<void> }> {
  const cert = tls ? selfSignedCert('bench') : null;
  const https = cert ? createHttpsServer({ cert: cert.cert, key: cert.key }) : null;
  if (https) await new Promise<void>((r) => https.listen(0, '127.0.0.1', () => r()));
  const wss = https ? new WebSocketServer({ server: https, perMessageDeflate: false }) : new WebSocketServer({ host: '127.0.0.1', port: 0, perMessageDeflate: false });
  if (!https) await once(wss, 'listening');
  const port = ((https ?? wss).address() as AddressInfo).port;
  const accepted = once(wss, 'connection') as Promise<[WebSocket]>;
  const url = `${tls ? 'wss' : 'ws'}://127.0.0.1:${port}`;
  const client = new WebSocket(url, { perMessageDeflate: false, rejectUnauthorized: false }); // loopback, the bench's own certificate
  await once(client, 'open');
  const [server] = await accepted;
  return { client, server, close: () => new Promise((r) => { client.terminate(); wss.close(() => (https ? https.close(() => r()) : r())); }) };
}

/** `bytes` over a raw WebSocket (plain or TLS) as 256 KiB binary messages, sender paced by bufferedAmount; MB/s. */
async function bulkRawWs(bytes: number, tls = false): Promise<number> {
  const p = await rawWsPair(tls);
  let got = 0;
  const done = new Promise<void>((r) => p.server.on('message', (m: Buffer) => {
    got += m.byteLength;
    if (got >= bytes) r();
  }));
  const t0 = performance.now();
  for (let sent = 0; sent < bytes; sent += CHUNK.byteLength) {
    p.client.send(CHUNK);
    while (p.client.bufferedAmount > 4 * 1024 * 1024) await new Promise((r) => setImmediate(r));
  }
  await done;
  const mbs = bytes / 1048576 / ((performance.now() - t0) / 1000);
  await p.close();
  return mbs;
}

async function tunnelSection(): Promise<string[]> {
  const p = await sessionPair('ws', { streamWindow: Number(process.env.BENCH_WINDOW_MB ?? 8) * 1024 * 1024 });
  // Echo rpc streams, discard file streams: the opener tags each with a first byte.
  p.server.on('stream', (s: YamuxStream) => {
    s.on('error', () => undefined);
    s.once('data', (first: Buffer) => {
      if (first[0] === 0x52) { // 'R': rpc echo
        const rest = first.subarray(1);
        if (rest.byteLength) s.write(rest);
        s.pipe(s);
      } else {
        s.on('data', () => undefined);
        s.on('end', () => s.end());
      }
    });
  });
  const openRpc = (): YamuxStream => {
    const s = p.client.open(PRIORITY.rpc);
    s.on('error', () => undefined); // closing the session at the end may fail a stream still half-open
    s.write(Buffer.from('R'));
    return s;
  };
  const openFile = (): YamuxStream => {
    const s = p.client.open(PRIORITY.file);
    s.on('error', () => undefined);
    s.write(Buffer.from('F'));
    return s;
  };

  const idle = await rtts(openRpc, RTT_N);
  // Bulk: tunnel and raw WebSocket alternately, three times each; medians.
  const tun: number[] = [];
  const raw: number[] = [];
  for (let i = 0; i < 3; i++) {
    tun.push(await bulkYamux(openFile, BULK));
    raw.push(await bulkRawWs(BULK));
  }
  const tunnelMbs = pct(tun, 50);
  const rawMbs = pct(raw, 50);
  // RTT while a push runs on the same tunnel.
  const pushSame = bulkYamux(openFile, BULK);
  const underSame = await rtts(openRpc, RTT_N);
  const sameMbs = await pushSame;
  // RTT on the tunnel while the push runs on a separate raw WebSocket.
  const pushSep = bulkRawWs(BULK);
  const underSep = await rtts(openRpc, RTT_N);
  await pushSep;
  await p.close();
  const row = (name: string, xs: number[]) => `| 8 KiB rpc round trip, ${name} | ${pct(xs, 50).toFixed(2)} ms | ${pct(xs, 99).toFixed(2)} ms |`;
  return [
    '| measure | p50 | p99 |',
    '| --- | --- | --- |',
    row('idle tunnel', idle),
    row(`while a ${BULK >> 20} MiB push runs on the same tunnel`, underSame),
    row('while the push runs on a separate raw WebSocket', underSep),
    `| same tunnel ÷ separate socket | ${(pct(underSame, 50) / pct(underSep, 50)).toFixed(2)} | ${(pct(underSame, 99) / pct(underSep, 99)).toFixed(2)} |`,
    '',
    '| bulk | MB/s |',
    '| --- | --- |',
    `| raw WebSocket (ws + bufferutil), median of 3 | ${rawMbs.toFixed(0)} |`,
    `| one file stream through the tunnel, median of 3 | ${tunnelMbs.toFixed(0)} |`,
    `| the same, while rpc round trips run | ${sameMbs.toFixed(0)} |`,
    `| tunnel ÷ raw WebSocket | ${(tunnelMbs / rawMbs).toFixed(2)} |`,
    '',
  ];
}

async function hubNodeSection(): Promise<string[]> {
  const log = createLogger({ level: 'warn', pretty: false });
  const home = mkdtempSync(join(tmpdir(), 'relay-bench-hub-'));
  const hub = await startHub(hubConfigFromEnv({ HOME: tmpdir(), RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' }, { port: 0, home }), { log, install: llama() });
  const nodeHome = mkdtempSync(join(tmpdir(), 'relay-bench-node-'));
  const { credential, hubCert } = await joinHub(hub.url, hubJoinToken(home), 'bench');
  process.env.RELAY_THREADS = '1';
  const agent = new NodeAgent(nodeHome, { hub: hub.url, name: 'bench', credential, hubCert, paused: false, schedule: '', cpuBudgetMb: 4000, cacheBudgetMb: 0 }, { log, install: llama() });
  await agent.start();
  if (!agent.connected) await once(agent, 'connected');
  const rows: string[] = [];
  try {
    // Weight push: the large fixture, three times (evicted in between).
    const path = ensureFixture('large', { vocabDir: llama().vocabDir });
    await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path, name: 'large' }) });
    const conn = hub.nodes.get('bench')!;
    const model = hub.store.data.models.find((m) => m.name === 'large')!;
    const push = async (): Promise<number> => {
      if (agent.cache.has(model.sha256)) agent.cache.evict(model.sha256);
      conn.cache.delete(model.sha256);
      const t0 = performance.now();
      await hub.nodes.push(conn, model);
      return model.size / 1048576 / ((performance.now() - t0) / 1000);
    };
    const size = model.size;
    const bytes = readFileSync(path);
    const sha = (): number => {
      const t0 = performance.now();
      createHash('sha256').update(bytes).digest();
      return size / 1048576 / ((performance.now() - t0) / 1000);
    };
    // One warm-up of each, then PUSH_ROUNDS rounds alternating push, raw WebSocket (plain and TLS) and
    // sha256 on the same bytes: the machine's noise hits every column alike. Medians.
    await push();
    await bulkRawWs(size, true);
    const pushes: number[] = [];
    const raws: number[] = [];
    const tlss: number[] = [];
    const shas: number[] = [];
    for (let i = 0; i < PUSH_ROUNDS; i++) {
      pushes.push(await push());
      tlss.push(await bulkRawWs(size, true)); // nodes dial the hub over TLS (pinned): the push's own ceiling
      raws.push(await bulkRawWs(size));
      shas.push(sha());
    }
    const [rawMbs, tlsMbs, shaMbs] = [pct(raws, 50), pct(tlss, 50), pct(shas, 50)];
    const med = pct(pushes, 50);
    rows.push('| weight push (137 MB fixture, hub → node over the pinned TLS tunnel, sha256-verified) | MB/s |', '| --- | --- |',
      `| push through the tunnel (median of ${PUSH_ROUNDS}) | ${med.toFixed(0)} |`, `| raw WebSocket, same bytes | ${rawMbs.toFixed(0)} |`,
      `| raw WebSocket over TLS, same bytes | ${tlsMbs.toFixed(0)} |`,
      `| sha256 alone (node:crypto) | ${shaMbs.toFixed(0)} |`, `| push ÷ raw WebSocket | ${(med / rawMbs).toFixed(2)} |`,
      `| push ÷ min(raw TLS WebSocket, sha256) | ${(med / Math.min(tlsMbs, shaMbs)).toFixed(2)} |`, '');

    // Node replica tok/s vs direct llama-server, interleaved.
    for (const name of ['dense', 'large'] as const) {
      const fx = ensureFixture(name, { vocabDir: llama().vocabDir });
      if (name === 'dense') await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: fx, name }) });
      const direct = await startLlamaServer(llama(), { model: fx, ctx: 1024, slots: 1, cacheType: 'f16', threads: 1 });
      const viaHub: number[] = [];
      const viaDirect: number[] = [];
      const gen = async (url: string): Promise<number> => {
        const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: name, prompt: 'Once upon a time', max_tokens: 128, temperature: 0, top_k: 1 }) });
        const j = await r.json() as { timings: { predicted_per_second: number } };
        return j.timings.predicted_per_second;
      };
      await gen(hub.url);
      await gen(direct.baseUrl);
      for (let i = 0; i < 7; i++) {
        viaDirect.push(await gen(direct.baseUrl));
        viaHub.push(await gen(hub.url));
      }
      await direct.child.terminate(5000);
      const d = pct(viaDirect, 50);
      const h = pct(viaHub, 50);
      rows.push(`| node replica, ${name} | ${d.toFixed(0)} | ${h.toFixed(0)} | ${(h / d).toFixed(3)} |`);
    }
    rows.splice(rows.length - 2, 0, '| generation tok/s (llama-server timings, median of 7) | direct | through hub + tunnel | ratio |', '| --- | --- | --- | --- |');
  } finally {
    await agent.stop();
    await hub.close();
    rmSync(nodeHome, { recursive: true, force: true });
  }
  return rows;
}

const out = [...(await tunnelSection()), ...(await hubNodeSection())];
console.log(`\ntunnel: loopback, both ends in one process, ${BULK >> 20} MiB bulk, ${RTT_N} round trips per row\n`);
for (const l of out) console.log(l);
