/**
 * bench/link: a weight push over a household link, emulated in user space (test/helpers/shaped-link.ts: a rate,
 * a one-way delay, a bottleneck queue; the sockets' buffers fill behind it). For each link a `relay hub` process
 * and a `relay up` process dialling it through the link; the node already serves `m` (dense, its cache seeded).
 * Each round:
 *  - a 1-token request to `m` through the hub, idle: time to its answer (p50 of 5);
 *  - the hub pushes a sparse GGUF to the node (a request for it; its load fails afterwards: not a whole model),
 *    and while it runs, 1-token requests to `m` one after another: their times (p50, max) — what a household's
 *    chat feels while a model is pushed to the same laptop;
 *  - the push's own rate (the hub's log: start to verified) against curl fetching the same file over the same
 *    link shape from a static server (the link's ceiling for one TCP connection).
 * `npm run bench -- link`; BENCH_LINK_ROUNDS (default 2), BENCH_LINKS (e.g. "16,1000": Mbit/s).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';
import { createReadStream, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { GGML_TYPE_F32 } from '../src/main/core/gguf/index.js';
import { str, u32, writeSparseGguf } from '../test/fixtures/gguf-writer.js';
import { addModel, startHub, type HubProcess } from '../test/helpers/hub.js';
import { fixture } from '../test/helpers/llama.js';
import { startNode } from '../test/helpers/node.js';
import { shapedLink, type LinkShape } from '../test/helpers/shaped-link.js';
import { median, percentile } from './stats.js';

const ROUNDS = Number(process.env.BENCH_LINK_ROUNDS ?? 2);
const MiB = 1024 * 1024;
const LINKS: (LinkShape & { name: string; mb: number })[] = [
  { name: '16 Mbit/s Wi-Fi, 5 ms, 256 KiB queue', mbitPerSec: 16, delayMs: 5, queueBytes: 256 * 1024, mb: 24 },
  { name: '1 Gbit/s Ethernet, 0.25 ms, 1 MiB queue', mbitPerSec: 1000, delayMs: 0.25, queueBytes: MiB, mb: 512 },
].filter((l) => !process.env.BENCH_LINKS || process.env.BENCH_LINKS.split(',').map(Number).includes(l.mbitPerSec));
const ENV = { RELAY_CONTEXT_SIZE: '1024', RELAY_PARALLEL_SLOTS: '1', RELAY_THREADS: '1' };
const sha256 = (p: string): string => createHash('sha256').update(readFileSync(p)).digest('hex');

/** One 1-token completion of `m` through the hub: ms to its answer. */
async function ask(hub: HubProcess): Promise<number> {
  const t0 = performance.now();
  const r = await fetch(`${hub.url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', prompt: 'Hello', max_tokens: 1 }),
    signal: AbortSignal.timeout(120_000),
  });
  await r.text();
  if (!r.ok) throw new Error(`m answered ${r.status}`);
  return performance.now() - t0;
}

/** A sparse GGUF of about `mb` MiB (pushed, never loaded). */
function pushable(dir: string, mb: number): string {
  const path = join(dir, `push-${mb}.gguf`);
  const layers = Math.max(1, Math.round(mb / 64));
  writeSparseGguf(
    path,
    [
      ['general.architecture', str('llama')],
      ['llama.block_count', u32(layers)],
    ],
    Array.from({ length: layers }, (_, i) => ({ name: `blk.${i}.ffn_up.weight`, dims: [16384, Math.round((mb * MiB) / layers / 16384 / 4)], type: GGML_TYPE_F32 })),
  );
  return path;
}

/** curl of `path` from a static server through a link of `shape`: MB/s. */
async function curlRate(path: string, shape: LinkShape): Promise<number> {
  const server: Server = createServer((_req, res) => {
    res.writeHead(200, { 'content-length': String(statSync(path).size) });
    createReadStream(path).pipe(res);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const link = await shapedLink(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, shape);
  try {
    // Not execFileSync: the link and the server run on this process's event loop.
    const { stdout } = await promisify(execFile)('curl', ['-s', '-o', '/dev/null', '-w', '%{speed_download}', `${link.url}/f`], { encoding: 'utf8' });
    return Number(stdout) / 1e6;
  } finally {
    await link.close();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

/** The push of `sha` in the hub's log: MB/s from "pushing weights" to "weights pushed and verified". */
function pushRate(hub: HubProcess, size: number): number {
  const at = (msg: string): number => {
    const line = hub.logs.find((l) => l.includes(`"msg":"${msg}"`) && l.includes('"model":"big"'));
    if (!line) throw new Error(`no "${msg}" in the hub's log`);
    return (JSON.parse(line) as { time: number }).time;
  };
  return size / 1e6 / ((at('weights pushed and verified') - at('pushing weights')) / 1000);
}

const dir = mkdtempSync(join(tmpdir(), 'relay-bench-link-'));
const rows: string[] = [];
try {
  for (const shape of LINKS) {
    const file = pushable(dir, shape.mb);
    const size = statSync(file).size;
    const idle: number[] = [];
    const busy: number[] = [];
    const busyMax: number[] = [];
    const push: number[] = [];
    const curl: number[] = [];
    let failed = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const hub = await startHub({ env: ENV });
      await addModel(hub, { path: fixture('dense'), name: 'm', required_vram_mb: 300 });
      await addModel(hub, { path: file, name: 'big', required_vram_mb: 300 });
      const link = await shapedLink(hub.url, shape);
      const home = mkdtempSync(join(dir, 'node-'));
      mkdirSync(join(home, 'cache', 'models'), { recursive: true });
      symlinkSync(fixture('dense'), join(home, 'cache', 'models', `${sha256(fixture('dense'))}.gguf`));
      const node = await startNode({ url: link.url, home: hub.home }, { name: 'laptop', cpuBudgetMb: 4000 + shape.mb * 2, env: ENV, home });
      try {
        await ask(hub); // m loads on the laptop
        const times: number[] = [];
        for (let i = 0; i < 5; i++) times.push(await ask(hub));
        idle.push(median(times));
        let pushing = true;
        const bigAsked = fetch(`${hub.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'big', prompt: 'x', max_tokens: 1 }) })
          .then((r) => r.text())
          .finally(() => (pushing = false));
        const logged = (msg: string): boolean => hub.logs.some((l) => l.includes(`"msg":"${msg}"`) && l.includes('"model":"big"'));
        while (!logged('pushing weights')) await new Promise((r) => setTimeout(r, 20));
        const during: number[] = [];
        while (pushing && !logged('weights pushed and verified')) {
          try {
            during.push(await ask(hub));
          } catch {
            failed++; // the node was dropped under it (relay before the pacing: the ping buried behind the push)
            break;
          }
        }
        await bigAsked;
        if (failed === 0) push.push(pushRate(hub, size));
        if (during.length > 0) {
          busy.push(percentile(during, 50));
          busyMax.push(Math.max(...during));
        }
      } catch (err) {
        console.log(
          `--- hub log ---\n${hub.logs
            .filter((l) => !l.includes('"msg":"request"'))
            .slice(-30)
            .join('\n')}\n--- node log ---\n${node.logs.slice(-20).join('\n')}`,
        );
        throw err;
      } finally {
        await node.stop();
        await link.close();
        await hub.stop();
        rmSync(home, { recursive: true, force: true });
      }
      curl.push(await curlRate(file, shape));
    }
    const f = (xs: number[], d = 0): string => (xs.length > 0 ? median(xs).toFixed(d) : '—');
    rows.push(
      `| ${shape.name} (${(size / 1e6).toFixed(0)} MB) | ${f(push, 1)} | ${f(curl, 1)} | ${push.length > 0 ? (median(push) / median(curl)).toFixed(3) : '—'} | ${f(idle)} ms | ${f(busy)} ms | ${f(busyMax)} ms | ${failed} |`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log(`\nlink: a weight push over an emulated link (medians of ${ROUNDS} rounds)\n`);
console.log('| link (pushed) | push MB/s | curl MB/s, same link | push ÷ curl | 1-token request, idle | … during the push, p50 | … max | requests failed during the push |');
console.log('| --- | --- | --- | --- | --- | --- | --- | --- |');
for (const r of rows) console.log(r);
