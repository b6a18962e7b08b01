/**
 * bench/tunnel: the tunnel against the direct path, in one run on loopback.
 *  - 8 KiB round trips on an rpc stream: idle; while a 1 GiB push runs on the same tunnel; while the same
 *    push runs on a separate raw WebSocket (goal: tunnel p99 ≤ 1.5× the separate-socket p99);
 *  - bulk MB/s through the tunnel vs a raw WebSocket, paired rounds (target ≥ 0.9×);
 *  - a real weight push (hub → node, sha256-verified) vs raw WebSocket and vs sha256 alone;
 *  - node-replica tok/s through the tunnel vs direct llama-server (goal ≥ 0.95).
 * `npm run bench -- tunnel` (BENCH_BULK_MB, BENCH_RTT_N adjust it).
 */
import { once } from 'node:events';
import { performance } from 'node:perf_hooks';
import { startLlamaServer } from '../src/main/core/llama/index.js';
import { createLogger } from '../src/main/core/log.js';
import type { YamuxStream } from '../src/main/core/tunnel/yamux/session.js';
import { KIND_PRIORITY as PRIORITY } from '../src/main/core/tunnel/channel.js';
import { ensureFixture } from '../test/fixtures/models.js';
import { llama } from '../test/helpers/llama.js';
import { sessionPair } from '../test/helpers/yamux.js';
import { bulkRawWs, hubWithNode, pushRatio } from './push-ratio.js';
import { reportRatio } from './targets.js';
import { median, percentile } from './stats.js';

const BULK = Number(process.env.BENCH_BULK_MB ?? 1024) * 1024 * 1024;
const RTT_N = Number(process.env.BENCH_RTT_N ?? 300);
const PUSH_ROUNDS = Number(process.env.BENCH_PUSH_ROUNDS ?? 5);
const BULK_ROUNDS = Number(process.env.BENCH_BULK_ROUNDS ?? 10);
/** Each bulk round's size: many short paired rounds resist this machine's noise better than a few long ones. */
const ROUND_BYTES = Number(process.env.BENCH_ROUND_MB ?? 256) * 1024 * 1024;
const CHUNK = Buffer.alloc(256 * 1024, 7);
const PING = Buffer.alloc(8 * 1024, 1);

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

async function tunnelSection(): Promise<string[]> {
  const p = await sessionPair('ws', { streamWindow: Number(process.env.BENCH_WINDOW_MB ?? 8) * 1024 * 1024 });
  // Echo rpc streams, discard file streams: the opener tags each with a first byte.
  p.server.on('stream', (s: YamuxStream) => {
    s.on('error', () => undefined);
    s.once('data', (first: Buffer) => {
      if (first[0] === 0x52) {
        // 'R': rpc echo
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
    s.paced = true; // as relay's file streams (tunnel/channel.ts)
    s.on('error', () => undefined);
    s.write(Buffer.from('F'));
    return s;
  };

  const idle = await rtts(openRpc, RTT_N);
  // Bulk: tunnel and raw WebSocket alternately, BULK_ROUNDS rounds of ROUND_BYTES; medians, and the median of each
  // round's ratio (the pair ran back to back: the machine's slow drifts cancel).
  const tun: number[] = [];
  const raw: number[] = [];
  for (let i = 0; i < BULK_ROUNDS; i++) {
    // Alternate which goes first, so a drift within a round does not always favour the same side.
    if (i % 2 === 0) {
      tun.push(await bulkYamux(openFile, ROUND_BYTES));
      raw.push(await bulkRawWs(ROUND_BYTES));
    } else {
      raw.push(await bulkRawWs(ROUND_BYTES));
      tun.push(await bulkYamux(openFile, ROUND_BYTES));
    }
  }
  const tunnelMbs = percentile(tun, 50);
  const rawMbs = percentile(raw, 50);
  const bulkRatio = median(tun.map((t, i) => t / raw[i]!));
  reportRatio('tunnel bulk ÷ raw WebSocket (one file stream, paired rounds)', bulkRatio, 0.9);
  // RTT while a push runs on the same tunnel.
  const pushSame = bulkYamux(openFile, BULK);
  const underSame = await rtts(openRpc, RTT_N);
  const sameMbs = await pushSame;
  // RTT on the tunnel while the push runs on a separate raw WebSocket.
  const pushSep = bulkRawWs(BULK);
  const underSep = await rtts(openRpc, RTT_N);
  await pushSep;
  await p.close();
  const row = (name: string, xs: number[]) => `| 8 KiB rpc round trip, ${name} | ${percentile(xs, 50).toFixed(2)} ms | ${percentile(xs, 99).toFixed(2)} ms |`;
  return [
    '| measure | p50 | p99 |',
    '| --- | --- | --- |',
    row('idle tunnel', idle),
    row(`while a ${BULK >> 20} MiB push runs on the same tunnel`, underSame),
    row('while the push runs on a separate raw WebSocket', underSep),
    `| same tunnel ÷ separate socket | ${(percentile(underSame, 50) / percentile(underSep, 50)).toFixed(2)} | ${(percentile(underSame, 99) / percentile(underSep, 99)).toFixed(2)} |`,
    '',
    '| bulk | MB/s |',
    '| --- | --- |',
    `| raw WebSocket (ws + bufferutil), median of ${BULK_ROUNDS} | ${rawMbs.toFixed(0)} |`,
    `| one file stream through the tunnel, median of ${BULK_ROUNDS} | ${tunnelMbs.toFixed(0)} |`,
    `| the same, while rpc round trips run | ${sameMbs.toFixed(0)} |`,
    `| tunnel ÷ raw WebSocket (median of the paired rounds' ratios) | ${bulkRatio.toFixed(2)} |`,
    '',
  ];
}

async function hubNodeSection(): Promise<string[]> {
  const log = createLogger({ level: 'warn', pretty: false });
  process.env.RELAY_THREADS = '1';
  const pair = await hubWithNode(log);
  const { hub } = pair;
  const rows: string[] = [];
  try {
    // Weight push: the large fixture, alternating with its ceilings (bench/push-ratio.ts).
    const path = ensureFixture('large', { vocabDir: llama().vocabDir });
    const p = await pushRatio(pair, path, 'large', PUSH_ROUNDS);
    reportRatio('push (137 MB) ÷ min(raw TLS WebSocket, sha256)', p.ratio, 0.9);
    rows.push(
      '| weight push (137 MB fixture, hub → node over the pinned TLS tunnel, sha256-verified) | MB/s |',
      '| --- | --- |',
      `| push through the tunnel (median of ${PUSH_ROUNDS}) | ${p.push.toFixed(0)} |`,
      `| raw WebSocket, same bytes | ${p.raw.toFixed(0)} |`,
      `| raw WebSocket over TLS, same bytes | ${p.tls.toFixed(0)} |`,
      `| sha256 of the file (read + hash) | ${p.sha.toFixed(0)} |`,
      `| push ÷ raw WebSocket | ${(p.push / p.raw).toFixed(2)} |`,
      `| push ÷ min(raw TLS WebSocket, sha256) | ${p.ratio.toFixed(2)} |`,
      '',
      '| CPU time per MiB (all threads of the process) | µs |',
      '| --- | --- |',
      `| push | ${p.cpu.push.toFixed(0)} |`,
      `| raw TLS WebSocket | ${p.cpu.tls.toFixed(0)} |`,
      `| sha256 of the file | ${p.cpu.sha.toFixed(0)} |`,
      `| push − (raw TLS WebSocket + sha256): the tunnel's own work and the file write | ${(p.cpu.push - p.cpu.tls - p.cpu.sha).toFixed(0)} |`,
      '',
    );

    // Node replica tok/s vs direct llama-server, interleaved.
    for (const name of ['dense', 'large'] as const) {
      const fx = ensureFixture(name, { vocabDir: llama().vocabDir });
      if (name === 'dense') await fetch(`${hub.url}/api/models`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ path: fx, name }) });
      const direct = await startLlamaServer(llama(), { model: fx, ctx: 1024, slots: 1, cacheType: 'f16', threads: 1 });
      const viaHub: number[] = [];
      const viaDirect: number[] = [];
      const gen = async (url: string): Promise<number> => {
        const r = await fetch(`${url}/v1/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: name, prompt: 'Once upon a time', max_tokens: 128, temperature: 0, top_k: 1 }),
        });
        const j = (await r.json()) as { timings: { predicted_per_second: number } };
        return j.timings.predicted_per_second;
      };
      await gen(hub.url);
      await gen(direct.baseUrl);
      for (let i = 0; i < 7; i++) {
        viaDirect.push(await gen(direct.baseUrl));
        viaHub.push(await gen(hub.url));
      }
      await direct.child.terminate(5000);
      const d = percentile(viaDirect, 50);
      const h = percentile(viaHub, 50);
      rows.push(`| node replica, ${name} | ${d.toFixed(0)} | ${h.toFixed(0)} | ${(h / d).toFixed(3)} |`);
    }
    rows.splice(rows.length - 2, 0, '| generation tok/s (llama-server timings, median of 7) | direct | through hub + tunnel | ratio |', '| --- | --- | --- | --- |');
  } finally {
    await pair.close();
  }
  return rows;
}

const out = [...(await tunnelSection()), ...(await hubNodeSection())];
console.log(
  `\ntunnel: loopback, both ends in one process, ${BULK >> 20} MiB push under the round trips, bulk ${BULK_ROUNDS} paired rounds of ${ROUND_BYTES >> 20} MiB, ${RTT_N} round trips per row\n`,
);
for (const l of out) console.log(l);
