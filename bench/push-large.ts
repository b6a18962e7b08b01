/**
 * bench/push-large: a weight push at a real model's size. A BENCH_PUSH_GB (default 4) GiB GGUF, sparse on disk
 * (every byte is still read, sent and hashed), is pushed by a `relay hub` process to two `relay up` processes
 * at once, as two concurrent requests for it place a replica on each node. Prints the hub's peak RSS during
 * the pushes (target ≤ 150 MB) and each push's MB/s. The model only has to be pushed: its llama-server load
 * fails afterwards (the file is not a whole model), which is expected here. Then the same file is pushed to
 * one node alternately with a raw TLS WebSocket and sha256 (bench/push-ratio.ts): push ÷ min of the two.
 * `npm run bench -- push-large`.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { GGML_TYPE_F32 } from '../src/main/core/gguf/index.js';
import { str, u32, writeSparseGguf } from '../test/fixtures/gguf-writer.js';
import { addModel, startHub } from '../test/helpers/hub.js';
import { startNode } from '../test/helpers/node.js';
import { createLogger } from '../src/main/core/log.js';
import { hubWithNode, pushRatio } from './push-ratio.js';
import { reportRatio, reportTarget } from './targets.js';

const GB = Number(process.env.BENCH_PUSH_GB ?? 4);
const ROUNDS = Number(process.env.BENCH_PUSH_ROUNDS ?? 3);
const rssMb = (pid: number): number => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

const dir = mkdtempSync(join(tmpdir(), 'relay-bench-push-'));
const layers = Math.max(1, Math.round(GB * 4));
const path = join(dir, 'big.gguf');
const size = writeSparseGguf(
  path,
  [
    ['general.architecture', str('llama')],
    ['llama.block_count', u32(layers)],
  ],
  Array.from({ length: layers }, (_, i) => ({ name: `blk.${i}.ffn_up.weight`, dims: [65536, 1024], type: GGML_TYPE_F32 })),
);
const hub = await startHub({ env: { RELAY_LOG_LEVEL: 'warn', RELAY_MAX_PLACEMENTS_PER_MODEL: '2' } });
const budget = String(Math.ceil((size / 1048576) * 1.2) + 1024);
const nodes = await Promise.all(['attic', 'cellar'].map((name) => startNode(hub, { name, cpuBudgetMb: Number(budget), env: { RELAY_LOG_LEVEL: 'warn' } })));
try {
  const t0 = performance.now();
  await addModel(hub, { path, name: 'big' });
  const registerS = (performance.now() - t0) / 1000;
  const pid = hub.proc.pid!;
  const before = rssMb(pid);
  let peak = before;
  const sampler = setInterval(() => (peak = Math.max(peak, rssMb(pid))), 100);
  const done = new Map<string, number>();
  const watcher = setInterval(async () => {
    const s = (await hub.status()) as unknown as { pushes: { node: string; done: number; total: number }[] };
    for (const p of s.pushes) if (p.done >= p.total && !done.has(p.node)) done.set(p.node, performance.now());
  }, 100);
  const tp = performance.now();
  const ask = (): Promise<number> =>
    fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'big', prompt: 'x', max_tokens: 1 }) }).then((r) => r.status);
  const statuses = await Promise.all([ask(), ask()]); // both placements fail to load afterwards: not a whole model
  clearInterval(sampler);
  clearInterval(watcher);
  const wall = (performance.now() - tp) / 1000;
  const cached = await Promise.all(nodes.map(async (n) => ((await n.local('/status')) as { cache?: { sha256: string }[] }).cache?.length ?? 0));
  console.log(`\npush-large: a ${(size / 1024 ** 3).toFixed(2)} GiB sparse GGUF, hub → two node processes at once (loopback, one machine)\n`);
  console.log('| figure | value |');
  console.log('| --- | --- |');
  console.log(`| register (GGUF header in a worker + sha256 of every byte) | ${registerS.toFixed(1)} s, ${(size / 1e6 / registerS).toFixed(0)} MB/s |`);
  console.log(`| hub RSS before / peak during the two pushes | ${before.toFixed(0)} MB / ${peak.toFixed(0)} MB (target ≤ 150) |`);
  reportTarget(`hub RSS while pushing ${(size / 1024 ** 3).toFixed(1)} GiB to two nodes (peak)`, `${peak.toFixed(0)} MB`, '≤ 150 MB', peak <= 150);
  console.log(`| both pushes, wall (until both requests answered) | ${wall.toFixed(1)} s, ${((2 * size) / 1e6 / wall).toFixed(0)} MB/s together |`);
  console.log(`| node caches holding the file after | ${cached.join(', ')} | requests answered ${statuses.join(', ')} (the load fails: not a whole model) |`);
} finally {
  await Promise.all(nodes.map((n) => n.stop()));
  await hub.stop();
  for (const n of nodes) rmSync(n.home, { recursive: true, force: true });
}

// The same file pushed to one node, against its ceilings side by side (as bench/tunnel does at 137 MB).
try {
  const pair = await hubWithNode(createLogger({ level: 'warn', pretty: false }));
  try {
    const p = await pushRatio(pair, path, 'big', ROUNDS);
    reportRatio(`push (${(size / 1024 ** 3).toFixed(1)} GiB) ÷ min(raw TLS WebSocket, sha256)`, p.ratio, 0.9);
    console.log(`\none push of the same file, hub and node in one process, median of ${ROUNDS} rounds alternating with its ceilings\n`);
    console.log('| figure | MB/s |');
    console.log('| --- | --- |');
    console.log(`| push through the tunnel | ${p.push.toFixed(0)} |`);
    console.log(`| raw WebSocket over TLS, same bytes | ${p.tls.toFixed(0)} |`);
    console.log(`| sha256 of the file (read + hash) | ${p.sha.toFixed(0)} |`);
    console.log(`| push ÷ min(raw TLS WebSocket, sha256) | ${p.ratio.toFixed(2)} |`);
    console.log(`| CPU µs per MiB: push / raw TLS WebSocket / sha256 | ${p.cpu.push.toFixed(0)} / ${p.cpu.tls.toFixed(0)} / ${p.cpu.sha.toFixed(0)} |`);
  } finally {
    await pair.close();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
